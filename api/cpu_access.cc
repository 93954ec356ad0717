#include "api/cpu_access.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>

#include <sys/mman.h>
#include <unistd.h>

// Linux 5.14's values (asm-generic/mman-common.h), for headers older than the kernel they run on: such a kernel
// answers EINVAL, and /proc/self/maps decides.
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace uroce::ndk::detail {

namespace {

// Whether mappings with the rights `access` needs cover every byte of [begin, end), per /proc/self/maps (sorted by
// address). The answer where madvise cannot give one: a kernel before 5.14, or a mapping it does not populate
// (VM_IO or VM_PFNMAP device memory). It cannot see a file mapping's pages past the end of the file.
bool maps_cover(uint64_t begin, uint64_t end, CpuAccess access) noexcept {
  const std::unique_ptr<FILE, int (*)(FILE*)> maps(std::fopen("/proc/self/maps", "re"), &std::fclose);
  if (!maps) return false;
  uint64_t covered = begin;
  char line[256];  // the address range and the rights lead every line; a long path is read past in pieces
  bool line_start = true;
  while (covered < end && std::fgets(line, sizeof line, maps.get()) != nullptr) {
    const bool starts_a_line = line_start;
    line_start = std::strchr(line, '\n') != nullptr;
    if (!starts_a_line) continue;  // the rest of a long line
    uint64_t start = 0;
    uint64_t stop = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s", &start, &stop, perms) != 3) return false;
    if (stop <= covered) continue;
    if (start > covered) return false;  // a hole
    if (perms[0] != 'r' || (access == CpuAccess::kReadWrite && perms[1] != 'w')) return false;
    covered = stop;
  }
  return covered >= end;
}

CpuAccessCheck per_maps(uint64_t begin, uint64_t end, CpuAccess access) noexcept {
  return maps_cover(begin, end, access) ? CpuAccessCheck::kAccessible : CpuAccessCheck::kNotAccessible;
}

}  // namespace

CpuAccessCheck check_cpu_access(uint64_t address, uint64_t length, CpuAccess access) noexcept {
  if (length == 0) return CpuAccessCheck::kAccessible;
  if (address + length < address) return CpuAccessCheck::kNotAccessible;  // wraps around the address space
  static const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t begin = address - address % page;
  const uint64_t end = address + length;
  // Faulting pages in for writing allocates them. Above kMaxWritePopulate bytes (an NVMe-oF target's queue buffers,
  // registered when a host connects, before it sends a command) that would commit memory a peer's connection
  // request alone could claim: such a range is faulted in for reading (which maps anonymous memory to the shared
  // zero page and finds unmapped pages and pages past a file's end alike), and /proc/self/maps says whether it
  // may be written.
  constexpr uint64_t kMaxWritePopulate = uint64_t{1} << 20;
  const bool write_by_maps = access == CpuAccess::kReadWrite && end - begin > kMaxWritePopulate;
  const int advice = access == CpuAccess::kReadWrite && !write_by_maps ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
  // Faulting the pages in can be interrupted by a signal (EINTR) or race with reclaim (EAGAIN): it is tried again.
  for (int attempt = 0; attempt < 16; ++attempt) {
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the consumer's address, as it gave it
    if (madvise(reinterpret_cast<void*>(begin), end - begin, advice) == 0)
      return write_by_maps ? per_maps(begin, end, access) : CpuAccessCheck::kAccessible;
    switch (errno) {
      case EINTR:
      case EAGAIN:
        continue;
      case ENOMEM:  // a page is not mapped (or the range leaves the user address space), or no memory for it
        return maps_cover(begin, end, access) ? CpuAccessCheck::kNoMemory : CpuAccessCheck::kNotAccessible;
      case EFAULT:  // a page would raise SIGBUS (a file mapping past the end of its file)
      case EHWPOISON:
        return CpuAccessCheck::kNotAccessible;
      default:  // EINVAL: a page's protection forbids the access, or the kernel cannot populate the mapping at all
        return per_maps(begin, end, access);
    }
  }
  return per_maps(begin, end, access);
}

}  // namespace uroce::ndk::detail
