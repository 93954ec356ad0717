// crc32_ieee_copy by VPCLMULQDQ folding: every 64-byte block is loaded once into a zmm register, stored to the
// destination from it and folded. Compiled with AVX-512 F/VL/BW and VPCLMULQDQ (plus PCLMULQDQ and SSE4.1);
// crc32_copy.cc calls it only on CPUs that have them. The folding is crc32_vpclmul.cc's (four 512-bit
// accumulators 2048 bits apart, then one 512 bits at a time), with a store beside each load; what is left
// after the last whole 64-byte block goes 16 bytes at a time in 128-bit registers.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "proto/avx512_intrinsics.h"
#include "proto/crc32_copy_internal.h"
#include "proto/crc32_internal.h"

namespace uroce::proto::crc32_internal {
namespace {

[[gnu::always_inline]] inline __m512i copy_wide(const uint8_t* s, uint8_t* d) noexcept {
  const __m512i z = _mm512_loadu_si512(s);
  _mm512_storeu_si512(d, z);
  return z;
}

[[gnu::always_inline]] inline __m128i copy_block(const uint8_t* s, uint8_t* d) noexcept {
  const __m128i b = load_block(s);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d), b);
  return b;
}

[[gnu::always_inline]] inline __m512i broadcast_pair(uint64_t hi_degree, uint64_t lo_degree) noexcept {
  return _mm512_broadcast_i32x4(fold_pair(hi_degree, lo_degree));
}

// `acc` moved by the distance its constants encode, XORed into `next`.
[[gnu::always_inline]] inline __m512i fold_into(__m512i acc, __m512i k, __m512i next) noexcept {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(acc, k, 0x00), _mm512_clmulepi64_epi128(acc, k, 0x11), next,
                                   0x96);
}

// Lane i of the last 64-byte block jumps 128 * (3 - i) bits, to the position of lane 3, which stays.
alignas(64) constexpr uint64_t kLaneMerge[8] = {kFold384Hi, kFold384Lo, kFold256Hi, kFold256Lo,
                                                kFold128Hi, kFold128Lo, 0,          0};

// The 128-bit tail: whole 16-byte blocks, then the partial one (see crc32_copy_pclmul.cc), then the reduction.
// `x0` is the folded state of the (at least 16) bytes before p.
[[gnu::always_inline]] inline uint32_t copy_finish(__m128i x0, const uint8_t* p, uint8_t* d,
                                                   const uint8_t* const end) noexcept {
  const __m128i k128 = fold_pair(kFold128Hi, kFold128Lo);
  while (end - p >= 16) {
    x0 = _mm_xor_si128(fold(x0, k128), copy_block(p, d));
    p += 16;
    d += 16;
  }
  if (p != end) {
    const auto n = static_cast<std::size_t>(end - p);
    (void)copy_block(end - 16, d + n - 16);
    x0 = fold_partial(x0, end, n);
  }
  return ~reduce_to_state(x0);
}

}  // namespace

uint32_t crc32_vpclmul_copy(uint32_t crc, void* dst, const void* src, std::size_t len) noexcept {
  const auto* p = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (len < 16) {
    if (len != 0) std::memcpy(d, p, len);
    return ~portable_update(~crc, p, len);
  }
  const uint8_t* const end = p + len;
  if (len < 128) {
    // One wide fold and the lane merge would cost more than they save on fewer than two wide blocks.
    const __m128i x0 = _mm_xor_si128(copy_block(p, d), _mm_cvtsi32_si128(static_cast<int>(~crc)));
    return copy_finish(x0, p + 16, d + 16, end);
  }
  __m512i z0 = _mm512_xor_si512(copy_wide(p, d), _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(~crc))));
  p += 64;
  d += 64;
  if (end - p >= 192) {
    __m512i z1 = copy_wide(p, d);
    __m512i z2 = copy_wide(p + 64, d + 64);
    __m512i z3 = copy_wide(p + 128, d + 128);
    p += 192;
    d += 192;
    const __m512i k2048 = broadcast_pair(kFold2048Hi, kFold2048Lo);
    while (end - p >= 256) {
      z0 = fold_into(z0, k2048, copy_wide(p, d));
      z1 = fold_into(z1, k2048, copy_wide(p + 64, d + 64));
      z2 = fold_into(z2, k2048, copy_wide(p + 128, d + 128));
      z3 = fold_into(z3, k2048, copy_wide(p + 192, d + 192));
      p += 256;
      d += 256;
    }
    const __m512i a = fold_into(z0, broadcast_pair(kFold1536Hi, kFold1536Lo), z3);
    const __m512i b = fold_into(z1, broadcast_pair(kFold1024Hi, kFold1024Lo), a);
    z0 = fold_into(z2, broadcast_pair(kFold512Hi, kFold512Lo), b);
  }
  const __m512i k512 = broadcast_pair(kFold512Hi, kFold512Lo);
  while (end - p >= 64) {
    z0 = fold_into(z0, k512, copy_wide(p, d));
    p += 64;
    d += 64;
  }
  const __m512i lanes = fold_into(z0, _mm512_load_si512(kLaneMerge), _mm512_maskz_mov_epi64(0xC0, z0));
  const __m256i half = _mm256_xor_si256(_mm512_castsi512_si256(lanes), _mm512_extracti64x4_epi64(lanes, 1));
  const __m128i x0 = _mm_xor_si128(_mm256_castsi256_si128(half), _mm256_extracti128_si256(half, 1));
  // Clean upper state before the 128-bit tail and the return to baseline code (STYLE.md 16; checked by
  // proto/tests/check_vzeroupper.py). vzeroupper keeps the xmm halves, so x0 survives it.
  _mm256_zeroupper();
  return copy_finish(x0, p, d, end);
}

}  // namespace uroce::proto::crc32_internal
