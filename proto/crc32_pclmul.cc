// CRC-32 by PCLMULQDQ folding, 128 bits at a time. Compiled with -mpclmul -msse4.1 only;
// crc32.cc calls it only on CPUs that have both.
//
// Four independent 128-bit accumulators each jump 512 bits ahead per 64-byte step (so the
// multiplies of one step overlap), then merge into one, absorb the rest 16 bytes at a time,
// and reduce to 32 bits. The math is in crc32_internal.h. The masked form folds its masked
// head 16 bytes at a time and goes on into the rest with the same chain.
#include <cstddef>
#include <cstdint>

#include <immintrin.h>

#include "proto/crc32_internal.h"

namespace uroce::proto::crc32_internal {
namespace {

// Absorbs [p, end) into `x0`, the folded state of the message before p (at least 16 bytes), and
// returns the CRC: four accumulators while 64 bytes remain, then one.
uint32_t fold_on(__m128i x0, const uint8_t* p, const uint8_t* const end) noexcept {
  if (end - p >= 64) {
    x0 = _mm_xor_si128(fold(x0, fold_pair(kFold128Hi, kFold128Lo)), load_block(p));
    __m128i x1 = load_block(p + 16);
    __m128i x2 = load_block(p + 32);
    __m128i x3 = load_block(p + 48);
    p += 64;
    const __m128i k512 = fold_pair(kFold512Hi, kFold512Lo);
    while (end - p >= 64) {
      x0 = _mm_xor_si128(fold(x0, k512), load_block(p));
      x1 = _mm_xor_si128(fold(x1, k512), load_block(p + 16));
      x2 = _mm_xor_si128(fold(x2, k512), load_block(p + 32));
      x3 = _mm_xor_si128(fold(x3, k512), load_block(p + 48));
      p += 64;
    }
    // Each accumulator jumps to the position of the last one, in parallel.
    const __m128i a =
        _mm_xor_si128(fold(x0, fold_pair(kFold384Hi, kFold384Lo)), fold(x1, fold_pair(kFold256Hi, kFold256Lo)));
    const __m128i b = _mm_xor_si128(fold(x2, fold_pair(kFold128Hi, kFold128Lo)), x3);
    x0 = _mm_xor_si128(a, b);
  }
  return finish(x0, p, end);
}

}  // namespace

uint32_t crc32_pclmul(uint32_t crc, const void* data, std::size_t len) noexcept {
  const auto* p = static_cast<const uint8_t*>(data);
  if (len < 16) return ~portable_update(~crc, p, len);
  return fold_on(first_block(p, crc), p + 16, p + len);
}

uint32_t crc32_pclmul_masked(uint32_t crc, const void* data, std::size_t len, const void* mask,
                             std::size_t mask_len) noexcept {
  const auto* p = static_cast<const uint8_t*>(data);
  return fold_on(fold_masked_head(p, static_cast<const uint8_t*>(mask), mask_len, crc), p + mask_len, p + len);
}

}  // namespace uroce::proto::crc32_internal
