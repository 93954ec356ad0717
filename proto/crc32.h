// CRC-32 with the IEEE 802.3 polynomial (reflected 0xEDB88320), the function zlib's
// crc32() computes: the RoCEv2 ICRC polynomial. Not CRC-32C.
//
// The running value follows zlib's convention, so computations chain:
//   crc32_ieee(crc32_ieee(0, a, na), b, nb) == crc32_ieee(0, a||b, na + nb)
// which is what multi-segment mbufs and "masked headers, then payload" need.
//
// The implementation is picked once at start-up from the CPU: VPCLMULQDQ (AVX-512)
// folding, PCLMULQDQ folding, or a portable slicing-by-8 table. Each variant lives in
// its own file, compiled with only the ISA flags it needs (STYLE.md §11).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace uroce::proto {

enum class Crc32Impl : uint8_t { kPortable, kPclmul, kVpclmul };

// The zlib-compatible CRC-32 of `len` bytes at `data`, continuing from `crc`
// (0 to start). Uses the fastest implementation this CPU supports.
uint32_t crc32_ieee(uint32_t crc, const void* data, std::size_t len) noexcept;

// The CRC of `head` followed by `tail`, continuing from `crc`: the value of
// crc32_ieee(crc32_ieee(crc, head, head_len), tail, tail_len), in one pass (one fold chain and
// one final reduction instead of two). For headers assembled apart from the rest of a packet
// (the ICRC's masked headers).
// Preconditions: head_len is a non-zero multiple of 16; the 16 bytes that end at
// tail + tail_len are readable (the tail lies inside a packet): a short last block is loaded whole.
uint32_t crc32_ieee_concat(uint32_t crc, const void* head, std::size_t head_len, const void* tail,
                           std::size_t tail_len) noexcept;

// The CRC of `len` bytes at `src`, continuing from `crc`, computed while copying them to `dst`: each source
// byte is loaded once, stored from the register it was loaded into and folded from there (the RX path checks
// a payload's ICRC and places it into registered memory in one pass). The value is crc32_ieee(crc, src, len);
// dst ends up as after memcpy(dst, src, len). Precondition: the two ranges do not overlap.
uint32_t crc32_ieee_copy(uint32_t crc, void* dst, const void* src, std::size_t len) noexcept;

// The same with a chosen implementation; for tests and benchmarks.
// Precondition: crc32_impl_supported(impl).
uint32_t crc32_ieee_with(Crc32Impl impl, uint32_t crc, const void* data, std::size_t len) noexcept;
uint32_t crc32_ieee_concat_with(Crc32Impl impl, uint32_t crc, const void* head, std::size_t head_len, const void* tail,
                                std::size_t tail_len) noexcept;
uint32_t crc32_ieee_copy_with(Crc32Impl impl, uint32_t crc, void* dst, const void* src, std::size_t len) noexcept;

[[nodiscard]] bool crc32_impl_supported(Crc32Impl impl) noexcept;
[[nodiscard]] Crc32Impl crc32_active_impl() noexcept;
[[nodiscard]] std::string_view crc32_impl_name(Crc32Impl impl) noexcept;

}  // namespace uroce::proto
