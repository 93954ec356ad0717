// crc32_ieee_copy: the CRC of a buffer while copying it, so that a received payload is read once to be both
// checked (the ICRC) and placed (into registered memory). Dispatch and the portable variant.
#include <atomic>
#include <cstring>

#include "proto/crc32.h"
#include "proto/crc32_copy_internal.h"
#include "proto/crc32_internal.h"

namespace uroce::proto {
namespace crc32_internal {

// Without carry-less multiply there is nothing to fuse: the table code reads a byte at a time anyway, so copy
// first and CRC the copy's source while it is still in L1.
uint32_t crc32_portable_copy(uint32_t crc, void* dst, const void* src, std::size_t len) noexcept {
  if (len != 0) std::memcpy(dst, src, len);
  return ~portable_update(~crc, static_cast<const uint8_t*>(src), len);
}

}  // namespace crc32_internal

namespace {

using CopyFn = uint32_t (*)(uint32_t crc, void* dst, const void* src, std::size_t len) noexcept;

CopyFn copy_function_of(Crc32Impl impl) noexcept {
  switch (impl) {
    case Crc32Impl::kVpclmul:
      return crc32_internal::crc32_vpclmul_copy;
    case Crc32Impl::kVpclmul256:
      return crc32_internal::crc32_vpclmul256_copy;
    case Crc32Impl::kPclmul:
      return crc32_internal::crc32_pclmul_copy;
    case Crc32Impl::kPortable:
      break;
  }
  return crc32_internal::crc32_portable_copy;
}

// The variants crc32_ieee picked (crc32_active_impl(), crc32_short_impl(); UROCE_CRC32 included), resolved on the
// first call (crc32_internal::Dispatch).
using ActiveCopyFn = crc32_internal::Dispatch<CopyFn, copy_function_of, crc32_active_impl>;
using ShortCopyFn = crc32_internal::Dispatch<CopyFn, copy_function_of, crc32_short_impl>;

}  // namespace

uint32_t crc32_ieee_copy(uint32_t crc, void* dst, const void* src, std::size_t len) noexcept {
  return (len < kCrc32WideMinBytes ? ShortCopyFn::slot : ActiveCopyFn::slot)
      .load(std::memory_order_relaxed)(crc, dst, src, len);
}

uint32_t crc32_ieee_copy_with(Crc32Impl impl, uint32_t crc, void* dst, const void* src, std::size_t len) noexcept {
  return copy_function_of(impl)(crc, dst, src, len);
}

}  // namespace uroce::proto
