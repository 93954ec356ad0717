// The RAM backend: a zeroed buffer. Every access is checked against its size, though the controller has checked
// before it calls; nothing here blocks.
#include <algorithm>
#include <vector>

#include "apps/nvmf/nvme/nvmf_target.h"

namespace uroce::nvmf {

namespace {

class RamBackend final : public Backend {
 public:
  explicit RamBackend(uint64_t size) : bytes_(size, 0) {}
  [[nodiscard]] uint64_t size() const override { return bytes_.size(); }
  [[nodiscard]] bool read(uint64_t offset, std::span<uint8_t> out) override {
    if (!inside(offset, out.size())) return false;
    std::copy_n(bytes_.begin() + static_cast<std::ptrdiff_t>(offset), out.size(), out.begin());
    return true;
  }
  [[nodiscard]] bool write(uint64_t offset, std::span<const uint8_t> in) override {
    if (!inside(offset, in.size())) return false;
    std::copy(in.begin(), in.end(), bytes_.begin() + static_cast<std::ptrdiff_t>(offset));
    return true;
  }
  [[nodiscard]] bool write_zeroes(uint64_t offset, uint64_t length) override {
    if (!inside(offset, length)) return false;
    std::fill_n(bytes_.begin() + static_cast<std::ptrdiff_t>(offset), length, 0);
    return true;
  }
  [[nodiscard]] bool flush() override { return true; }

 private:
  [[nodiscard]] bool inside(uint64_t offset, uint64_t length) const {
    return offset <= bytes_.size() && length <= bytes_.size() - offset;
  }
  std::vector<uint8_t> bytes_;
};

}  // namespace

std::unique_ptr<Backend> make_ram_backend(uint64_t size) { return std::make_unique<RamBackend>(size); }

}  // namespace uroce::nvmf
