// CRC-32 with the IEEE 802.3 polynomial (reflected 0xEDB88320), the function zlib's
// crc32() computes: the RoCEv2 ICRC polynomial. Not CRC-32C.
//
// The running value follows zlib's convention, so computations chain:
//   crc32_ieee(crc32_ieee(0, a, na), b, nb) == crc32_ieee(0, a||b, na + nb)
// which is what multi-segment mbufs and "masked headers, then payload" need.
//
// The implementation is picked once at start-up from the CPU: VPCLMULQDQ folding on
// 512-bit (AVX-512) or 256-bit (AVX2) registers, PCLMULQDQ folding, or a portable
// slicing-by-8 table. Each variant lives in
// its own file, compiled with only the ISA flags it needs (STYLE.md §11).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace uroce::proto {

enum class Crc32Impl : uint8_t { kPortable, kPclmul, kVpclmul, kVpclmul256 };
inline constexpr std::array<Crc32Impl, 4> kAllCrc32Impls = {Crc32Impl::kPortable, Crc32Impl::kPclmul,
                                                            Crc32Impl::kVpclmul, Crc32Impl::kVpclmul256};

// The zlib-compatible CRC-32 of `len` bytes at `data`, continuing from `crc`
// (0 to start). Uses the fastest implementation this CPU supports.
uint32_t crc32_ieee(uint32_t crc, const void* data, std::size_t len) noexcept;

// The CRC of `len` bytes at `data`, continuing from `crc`, as if their first `mask_len` bytes had been ORed
// with `mask` first: crc32_ieee(crc, masked, len) where masked[i] = data[i] | (i < mask_len ? mask[i] : 0).
// Nothing is written: the masked bytes exist only in registers, in one fold chain (the ICRC's masked IP, UDP
// and BTH fields, proto/icrc.cc). The first mask_len bytes are read in 16-byte loads, each of which forwards
// from a 16-byte store that wrote the same block (PacketTemplate::stamp).
// Preconditions: mask_len is 16, 32, 48 or 64, and len >= mask_len.
uint32_t crc32_ieee_masked(uint32_t crc, const void* data, std::size_t len, const void* mask,
                           std::size_t mask_len) noexcept;

// The CRC of `len` bytes at `src`, continuing from `crc`, computed while copying them to `dst`: each source
// byte is loaded once, stored from the register it was loaded into and folded from there (the RX path checks
// a payload's ICRC and places it into registered memory in one pass). The value is crc32_ieee(crc, src, len);
// dst ends up as after memcpy(dst, src, len). Precondition: the two ranges do not overlap.
uint32_t crc32_ieee_copy(uint32_t crc, void* dst, const void* src, std::size_t len) noexcept;

// The same with a chosen implementation; for tests and benchmarks.
// Precondition: crc32_impl_supported(impl).
uint32_t crc32_ieee_with(Crc32Impl impl, uint32_t crc, const void* data, std::size_t len) noexcept;
uint32_t crc32_ieee_masked_with(Crc32Impl impl, uint32_t crc, const void* data, std::size_t len, const void* mask,
                                std::size_t mask_len) noexcept;
uint32_t crc32_ieee_copy_with(Crc32Impl impl, uint32_t crc, void* dst, const void* src, std::size_t len) noexcept;

// Calls shorter than this many bytes run crc32_short_impl(): where the active variant is the 512-bit one, the
// 128-bit one (the 256-bit variant runs every length). A small packet's ICRC is a few folds, and on Intel a core that
// runs 512-bit carry-less multiplies pays for them in everything else it runs as well: measured on an Intel Xeon
// (family 6, model 207), the 64 B WRITE stream went from 0.117 to 0.127 of raw and the 64 B half round trip from 3.36
// to 2.91 of raw with the 128-bit folds, while from 1 KiB packets up the 512-bit ones are clearly faster
// (bench/README.md, "crc32").
inline constexpr std::size_t kCrc32WideMinBytes = 512;

[[nodiscard]] bool crc32_impl_supported(Crc32Impl impl) noexcept;
// The variant for calls of kCrc32WideMinBytes or more, and the one for shorter calls. UROCE_CRC32 in the
// environment forces one variant for both.
[[nodiscard]] Crc32Impl crc32_active_impl() noexcept;
[[nodiscard]] Crc32Impl crc32_short_impl() noexcept;
// The variant a call over `len` bytes runs.
[[nodiscard]] inline Crc32Impl crc32_impl_for(std::size_t len) noexcept {
  return len < kCrc32WideMinBytes ? crc32_short_impl() : crc32_active_impl();
}
[[nodiscard]] std::string_view crc32_impl_name(Crc32Impl impl) noexcept;

}  // namespace uroce::proto
