// Whether the engines can touch a consumer's memory without faulting: checked when memory is registered
// (NdkRegisterMr), mapped for fast registration (NdkBuildLam) and fast-registered (NdkFastRegister). Not the
// engines' datapath: it runs on the consumer's thread, and costs a system call per range (NdkFastRegister: per
// run of consecutive pages, on every post).
//
// The engines reach registered memory through the CPU, so a page that is not mapped, is read-only where a peer's
// WRITE or an RDMA READ's response will land, or lies past the end of a mapped file, would crash an engine when the
// peer chooses to touch it. ibv_reg_mr refuses such memory because pinning it (get_user_pages) fails; here the
// kernel faults the pages in as the engines will use them (madvise MADV_POPULATE_READ / MADV_POPULATE_WRITE,
// Linux 5.14), which fails for exactly those pages, and leaves them present as a pin would. Populating writable
// memory allocates its pages (and dirties a shared file mapping's), as pinning does; above 1 MiB a writable range
// is populated for reading only, and /proc/self/maps says whether it may be written (cpu_access.cc).
#pragma once

#include <cstdint>

#include "api/ndk_types.h"
#include "proto/rc_types.h"

namespace uroce::ndk::detail {

enum class CpuAccess : uint8_t {
  kRead,       // sources of SENDs and WRITEs, targets of a peer's READ
  kReadWrite,  // anything with local write: receive buffers, READ sinks, atomics' results, a peer's WRITEs
};

// How the engines touch memory registered with proto::Access bits `access`: local write covers every write.
[[nodiscard]] constexpr CpuAccess cpu_access_of(uint32_t access) noexcept {
  return (access & proto::kAccessLocalWrite) != 0 ? CpuAccess::kReadWrite : CpuAccess::kRead;
}

enum class CpuAccessCheck : uint8_t {
  kAccessible,
  kNotAccessible,  // a page is not mapped, or not with the rights asked, or past the end of its file
  kNoMemory,       // mapped as asked, but the kernel could not allocate its pages (a cgroup's limit)
};

// Whether the engines can touch every byte of [address, address + length) as `access` says; a range that wraps
// around the address space cannot be. length 0 is accessible.
[[nodiscard]] CpuAccessCheck check_cpu_access(uint64_t address, uint64_t length, CpuAccess access) noexcept;

// What a registration answers: STATUS_SUCCESS, STATUS_INVALID_PARAMETER (memory it may not use as asked), or
// STATUS_INSUFFICIENT_RESOURCES (memory it may, but whose pages the kernel could not allocate).
[[nodiscard]] inline NTSTATUS status_of(CpuAccessCheck check) noexcept {
  switch (check) {
    case CpuAccessCheck::kAccessible:
      return STATUS_SUCCESS;
    case CpuAccessCheck::kNoMemory:
      return STATUS_INSUFFICIENT_RESOURCES;
    case CpuAccessCheck::kNotAccessible:
      break;
  }
  return STATUS_INVALID_PARAMETER;
}

}  // namespace uroce::ndk::detail
