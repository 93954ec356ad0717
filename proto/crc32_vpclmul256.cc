// CRC-32 by VPCLMULQDQ folding on 256-bit registers, for CPUs that have VPCLMULQDQ and AVX2 but not AVX-512
// (AMD Zen 3; Intel's hybrid and E-core parts). Compiled with -mavx2 -mvpclmulqdq (plus PCLMULQDQ and
// SSE4.1); crc32.cc calls it only on CPUs that have them. The plain, masked and copying forms all live here
// because they share one fold loop, parameterised by where a block comes from (Plain or Copying).
//
// The folding is crc32_pclmul.cc's with two 128-bit lanes per register: one _mm256_clmulepi64_epi128
// multiplies both lanes by their own constants. Four 256-bit accumulators each jump 1024 bits per 128-byte
// step; they merge into one, which absorbs 32 bytes at a time; its two lanes merge into one 128-bit block,
// which the shared 128-bit code (crc32_internal.h) finishes: at most one whole block, the partial block and
// the reduction. Calls shorter than 64 bytes go to the 128-bit variant: one wide fold would not pay for
// the lane merge.
#include <cstddef>
#include <cstdint>

#include <immintrin.h>

#include "proto/crc32_copy_internal.h"
#include "proto/crc32_internal.h"

namespace uroce::proto::crc32_internal {
namespace {

[[gnu::always_inline]] inline __m256i broadcast_pair(uint64_t hi_degree, uint64_t lo_degree) noexcept {
  return _mm256_broadcastsi128_si256(fold_pair(hi_degree, lo_degree));
}

// `acc` moved by the distance its constants encode, XORed into `next`.
[[gnu::always_inline]] inline __m256i fold_into(__m256i acc, __m256i k, __m256i next) noexcept {
  return _mm256_xor_si256(
      _mm256_xor_si256(_mm256_clmulepi64_epi128(acc, k, 0x00), _mm256_clmulepi64_epi128(acc, k, 0x11)), next);
}

// The blocks of the message, read once each.
struct Plain {
  const uint8_t* p;
  [[gnu::always_inline]] __m256i wide(std::size_t at) const noexcept {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + at));
  }
  [[gnu::always_inline]] __m128i block(std::size_t at) const noexcept { return load_block(p + at); }
  [[gnu::always_inline]] void advance(std::size_t n) noexcept { p += n; }
  // The partial last block reads the message's last 16 bytes (fold_partial); nothing else to do.
  [[gnu::always_inline]] void last(const uint8_t* /*end*/, std::size_t /*n*/) const noexcept {}
};

// The same, each block also stored to `d` from the register it was loaded into (crc32_ieee_copy).
struct Copying {
  const uint8_t* p;
  uint8_t* d;
  [[gnu::always_inline]] __m256i wide(std::size_t at) const noexcept {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + at));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + at), v);
    return v;
  }
  [[gnu::always_inline]] __m128i block(std::size_t at) const noexcept {
    const __m128i b = load_block(p + at);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + at), b);
    return b;
  }
  [[gnu::always_inline]] void advance(std::size_t n) noexcept {
    p += n;
    d += n;
  }
  // The last n < 16 bytes: fold_partial loads the message's last 16 bytes (some already folded), and the copy
  // stores those same 16 bytes, rewriting 16 - n of them with the values they already hold.
  [[gnu::always_inline]] void last(const uint8_t* end, std::size_t n) const noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + n - 16), load_block(end - 16));
  }
};

// Absorbs [s.p, end) into `y0`, the folded state of the 32 bytes before s.p (lane 0 carrying everything
// earlier), and returns the CRC.
template <class Source>
[[gnu::always_inline]] inline uint32_t fold_on(__m256i y0, Source s, const uint8_t* const end) noexcept {
  if (end - s.p >= 224) {
    __m256i y1 = s.wide(0);
    __m256i y2 = s.wide(32);
    __m256i y3 = s.wide(64);
    s.advance(96);
    const __m256i k1024 = broadcast_pair(kFold1024Hi, kFold1024Lo);
    while (end - s.p >= 128) {
      y0 = fold_into(y0, k1024, s.wide(0));
      y1 = fold_into(y1, k1024, s.wide(32));
      y2 = fold_into(y2, k1024, s.wide(64));
      y3 = fold_into(y3, k1024, s.wide(96));
      s.advance(128);
    }
    // Each accumulator jumps to the position of the last one, in parallel.
    const __m256i a = fold_into(y0, broadcast_pair(kFold768Hi, kFold768Lo), y3);
    const __m256i b = fold_into(y1, broadcast_pair(kFold512Hi, kFold512Lo), a);
    y0 = fold_into(y2, broadcast_pair(kFold256Hi, kFold256Lo), b);
  }
  const __m256i k256 = broadcast_pair(kFold256Hi, kFold256Lo);
  while (end - s.p >= 32) {
    y0 = fold_into(y0, k256, s.wide(0));
    s.advance(32);
  }
  __m128i x0 = _mm_xor_si128(fold(_mm256_castsi256_si128(y0), fold_pair(kFold128Hi, kFold128Lo)),
                             _mm256_extracti128_si256(y0, 1));
  // The upper halves of the ymm registers must be clean before baseline SSE code runs again, or Intel cores tax
  // each of its instructions (STYLE.md 16); vzeroupper keeps the xmm halves, so x0 survives it. Checked by
  // proto/tests/check_vzeroupper.py.
  _mm256_zeroupper();
  if (end - s.p >= 16) {
    x0 = _mm_xor_si128(fold(x0, fold_pair(kFold128Hi, kFold128Lo)), s.block(0));
    s.advance(16);
  }
  if (s.p != end) {
    const auto n = static_cast<std::size_t>(end - s.p);
    s.last(end, n);
    x0 = fold_partial(x0, end, n);
  }
  return ~reduce_to_state(x0);
}

[[gnu::always_inline]] inline __m256i two_blocks(__m128i low, __m128i high) noexcept {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(low), high, 1);
}

[[gnu::always_inline]] inline __m256i start_register(uint32_t crc) noexcept {
  return _mm256_zextsi128_si256(_mm_cvtsi32_si128(static_cast<int>(~crc)));
}

}  // namespace

uint32_t crc32_vpclmul256(uint32_t crc, const void* data, std::size_t len) noexcept {
  const auto* p = static_cast<const uint8_t*>(data);
  if (len < 64) return crc32_pclmul(crc, data, len);
  const __m256i y0 = _mm256_xor_si256(Plain{p}.wide(0), start_register(crc));
  return fold_on(y0, Plain{p + 32}, p + len);
}

uint32_t crc32_vpclmul256_masked(uint32_t crc, const void* data, std::size_t len, const void* mask,
                                 std::size_t mask_len) noexcept {
  if (len < 64) return crc32_pclmul_masked(crc, data, len, mask, mask_len);
  const auto* p = static_cast<const uint8_t*>(data);
  const auto* m = static_cast<const uint8_t*>(mask);
  // The first 64 bytes in 16-byte loads, one per block (PacketTemplate::stamp writes the head in 16-byte stores,
  // from which only loads of the same block forward), each ORed with its mask block if it has one, then as two
  // 256-bit blocks of which the first carries the start register.
  __m128i head[4];
  for (std::size_t i = 0; i < 4; ++i) {
    head[i] = 16 * i < mask_len ? _mm_or_si128(load_block(p + 16 * i), load_block(m + 16 * i)) : load_block(p + 16 * i);
  }
  const __m256i first = _mm256_xor_si256(two_blocks(head[0], head[1]), start_register(crc));
  const __m256i y0 = fold_into(first, broadcast_pair(kFold256Hi, kFold256Lo), two_blocks(head[2], head[3]));
  return fold_on(y0, Plain{p + 64}, p + len);
}

uint32_t crc32_vpclmul256_copy(uint32_t crc, void* dst, const void* src, std::size_t len) noexcept {
  if (len < 64) return crc32_pclmul_copy(crc, dst, src, len);
  Copying s{static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst)};
  const __m256i y0 = _mm256_xor_si256(s.wide(0), start_register(crc));
  s.advance(32);
  return fold_on(y0, s, static_cast<const uint8_t*>(src) + len);
}

}  // namespace uroce::proto::crc32_internal
