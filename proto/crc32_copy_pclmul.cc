// crc32_ieee_copy by PCLMULQDQ folding: every 16-byte block is loaded once, stored to the destination and
// folded from the same register. Compiled with -mpclmul -msse4.1 only; crc32_copy.cc calls it only on CPUs
// that have both. The folding is crc32_pclmul.cc's (four accumulators 512 bits apart, then one), with a
// store beside each load.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <immintrin.h>

#include "proto/crc32_copy_internal.h"
#include "proto/crc32_internal.h"

namespace uroce::proto::crc32_internal {
namespace {

[[gnu::always_inline]] inline __m128i copy_block(const uint8_t* s, uint8_t* d) noexcept {
  const __m128i b = load_block(s);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d), b);
  return b;
}

}  // namespace

uint32_t crc32_pclmul_copy(uint32_t crc, void* dst, const void* src, std::size_t len) noexcept {
  const auto* p = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (len < 16) {
    if (len != 0) std::memcpy(d, p, len);
    return ~portable_update(~crc, p, len);
  }
  const uint8_t* const end = p + len;
  __m128i x0 = _mm_xor_si128(copy_block(p, d), _mm_cvtsi32_si128(static_cast<int>(~crc)));
  p += 16;
  d += 16;
  if (end - p >= 64) {
    x0 = _mm_xor_si128(fold(x0, fold_pair(kFold128Hi, kFold128Lo)), copy_block(p, d));
    __m128i x1 = copy_block(p + 16, d + 16);
    __m128i x2 = copy_block(p + 32, d + 32);
    __m128i x3 = copy_block(p + 48, d + 48);
    p += 64;
    d += 64;
    const __m128i k512 = fold_pair(kFold512Hi, kFold512Lo);
    while (end - p >= 64) {
      x0 = _mm_xor_si128(fold(x0, k512), copy_block(p, d));
      x1 = _mm_xor_si128(fold(x1, k512), copy_block(p + 16, d + 16));
      x2 = _mm_xor_si128(fold(x2, k512), copy_block(p + 32, d + 32));
      x3 = _mm_xor_si128(fold(x3, k512), copy_block(p + 48, d + 48));
      p += 64;
      d += 64;
    }
    const __m128i a =
        _mm_xor_si128(fold(x0, fold_pair(kFold384Hi, kFold384Lo)), fold(x1, fold_pair(kFold256Hi, kFold256Lo)));
    const __m128i b = _mm_xor_si128(fold(x2, fold_pair(kFold128Hi, kFold128Lo)), x3);
    x0 = _mm_xor_si128(a, b);
  }
  const __m128i k128 = fold_pair(kFold128Hi, kFold128Lo);
  while (end - p >= 16) {
    x0 = _mm_xor_si128(fold(x0, k128), copy_block(p, d));
    p += 16;
    d += 16;
  }
  if (p != end) {
    // The last n < 16 bytes: fold_partial loads the message's last 16 bytes (some already folded), and the
    // copy stores those same 16 bytes, rewriting n-16 of them with the values they already hold.
    const auto n = static_cast<std::size_t>(end - p);
    (void)copy_block(end - 16, d + n - 16);
    x0 = fold_partial(x0, end, n);
  }
  return ~reduce_to_state(x0);
}

}  // namespace uroce::proto::crc32_internal
