// The RAM backend: a zeroed buffer. Every request completes within submit() (a copy, nothing that blocks), so
// poll() never has anything to report. Every access is checked against its size, though the controller has
// checked before it calls.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "apps/nvmf/nvme/nvmf_target.h"

namespace uroce::nvmf {

namespace {

class RamBackend final : public Backend {
 public:
  explicit RamBackend(uint64_t size) : bytes_(size, 0) {}
  [[nodiscard]] uint64_t size() const override { return bytes_.size(); }
  [[nodiscard]] int submit(const BackendRequest& r) override {
    if (r.op == BackendOp::kFlush) return 0;
    if (!inside(r.offset, r.length)) return -EINVAL;
    uint8_t* at = bytes_.data() + r.offset;
    switch (r.op) {
      case BackendOp::kRead:
        if (r.length != 0) std::memcpy(r.data, at, r.length);
        break;
      case BackendOp::kWrite:
        if (r.length != 0) std::memcpy(at, r.data, r.length);
        break;
      default:  // write zeroes, deallocate
        std::memset(at, 0, r.length);
        break;
    }
    return 0;
  }
  [[nodiscard]] std::size_t poll(std::span<BackendCompletion> /*out*/) override { return 0; }
  [[nodiscard]] std::string describe() const override { return "RAM, " + std::to_string(bytes_.size() >> 20) + " MiB"; }

 private:
  [[nodiscard]] bool inside(uint64_t offset, uint64_t length) const {
    return offset <= bytes_.size() && length <= bytes_.size() - offset;
  }
  std::vector<uint8_t> bytes_;
};

}  // namespace

std::unique_ptr<Backend> make_ram_backend(uint64_t size) { return std::make_unique<RamBackend>(size); }

}  // namespace uroce::nvmf
