// The RAM backend: a zeroed buffer. Every request completes within submit() (a copy, or zeroes: nothing that
// blocks), so poll() never has anything to report. Every access is checked against its size, though the controller
// has checked before it calls.
//
// The buffer is an anonymous mapping with transparent huge pages asked for and every page touched at start:
// random 4 KiB I/O over a namespace of hundreds of MiB otherwise pays a TLB miss and often a first-touch page
// fault per command (4 KiB randread QD128 over 256 MiB in one process: 437k IOPS on 4 KiB pages, against 691k
// over 16 MiB; bench/README.md "nvmf").
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>

#include <sys/mman.h>
#include <unistd.h>

#include "apps/nvmf/nvme/nvmf_target.h"

namespace uroce::nvmf {

namespace {

class RamBackend final : public Backend {
 public:
  explicit RamBackend(uint64_t size) : size_(size) {
    if (size_ == 0) return;
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    bytes_ = static_cast<uint8_t*>(p);
    (void)madvise(bytes_, size_, MADV_HUGEPAGE);  // a hint: without THP the pages are 4 KiB, and all still works
    // Fault every page in now (a write per page; with THP one per 2 MiB), not on the first command to touch it.
    for (uint64_t at = 0; at < size_; at += 4096) bytes_[at] = 0;
  }
  ~RamBackend() override {
    if (bytes_ != nullptr) (void)munmap(bytes_, size_);
  }
  RamBackend(const RamBackend&) = delete;
  RamBackend& operator=(const RamBackend&) = delete;
  [[nodiscard]] uint64_t size() const override { return size_; }
  [[nodiscard]] int submit(const BackendRequest& r) override {
    if (r.op == BackendOp::kFlush) return 0;
    if (!inside(r.offset, r.length)) return -EINVAL;
    uint8_t* at = bytes_ + r.offset;
    switch (r.op) {
      case BackendOp::kRead:
        if (r.length != 0) std::memcpy(r.data, at, r.length);
        break;
      case BackendOp::kWrite:
        if (r.length != 0) std::memcpy(at, r.data, r.length);
        break;
      default:  // write zeroes, deallocate
        zero(at, r.length);
        break;
    }
    return 0;
  }
  [[nodiscard]] std::size_t poll(std::span<BackendCompletion> /*out*/) override { return 0; }
  [[nodiscard]] std::string describe() const override { return "RAM, " + std::to_string(size_ >> 20) + " MiB"; }

 private:
  [[nodiscard]] bool inside(uint64_t offset, uint64_t length) const {
    return offset <= size_ && length <= size_ - offset;
  }
  // Zeroes [at, at + length) without touching every byte: the whole pages go back to the kernel (MADV_DONTNEED on
  // a private anonymous mapping: they read as zeroes, and a write faults in a fresh zeroed page), only the partial
  // pages at either end are cleared by hand. A deallocate of hundreds of MiB then costs the poller page-table work,
  // not a memset of every byte (one command may name DMSL blocks: 256 MiB of 4 KiB blocks).
  void zero(uint8_t* at, uint64_t length) const {
    const auto address = reinterpret_cast<uintptr_t>(at);
    const uintptr_t first_page = (address + page_ - 1) & ~(page_ - 1);
    const uintptr_t end_page = (address + length) & ~(page_ - 1);
    if (first_page >= end_page ||
        madvise(reinterpret_cast<void*>(first_page), end_page - first_page, MADV_DONTNEED) != 0) {
      std::memset(at, 0, length);  // no whole page in it (or madvise refused: zeroes all the same)
      return;
    }
    std::memset(at, 0, first_page - address);
    std::memset(reinterpret_cast<void*>(end_page), 0, address + length - end_page);
  }
  uint64_t size_;
  uint8_t* bytes_ = nullptr;
  uintptr_t page_ = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));  // a power of two
};

}  // namespace

std::unique_ptr<Backend> make_ram_backend(uint64_t size) { return std::make_unique<RamBackend>(size); }

}  // namespace uroce::nvmf
