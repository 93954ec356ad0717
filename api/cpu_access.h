// Whether the engines can touch a consumer's memory without faulting: checked when memory is registered
// (NdkRegisterMr), mapped for fast registration (NdkBuildLam) and fast-registered (NdkFastRegister). Control path.
//
// The engines reach registered memory through the CPU, so a page that is not mapped, is read-only where a peer's
// WRITE or an RDMA READ's response will land, or lies past the end of a mapped file, would crash an engine when the
// peer chooses to touch it. ibv_reg_mr refuses such memory because pinning it (get_user_pages) fails; here the
// kernel faults the pages in as the engines will use them (madvise MADV_POPULATE_READ / MADV_POPULATE_WRITE,
// Linux 5.14), which fails for exactly those pages, and leaves them present as a pin would.
#pragma once

#include <cstdint>

namespace uroce::ndk::detail {

enum class CpuAccess : uint8_t {
  kRead,       // sources of SENDs and WRITEs, targets of a peer's READ
  kReadWrite,  // anything with local write: receive buffers, READ sinks, atomics' results, a peer's WRITEs
};

// Whether the engines can touch every byte of [address, address + length) as `access` says; a range that wraps
// around the address space cannot be. length 0 is accessible.
[[nodiscard]] bool cpu_can_access(uint64_t address, uint64_t length, CpuAccess access) noexcept;

}  // namespace uroce::ndk::detail
