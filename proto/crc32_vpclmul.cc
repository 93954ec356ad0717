// CRC-32 by VPCLMULQDQ folding, 512 bits at a time. Compiled with AVX-512 F/VL/BW and
// VPCLMULQDQ (plus PCLMULQDQ and SSE4.1); crc32.cc calls it only on CPUs that have them.
//
// The same folding as crc32_pclmul.cc, four 128-bit lanes per register: one
// _mm512_clmulepi64_epi128 multiplies all four lanes by their own constants. Four 512-bit
// accumulators each jump 2048 bits per 256-byte step; they merge into one, which absorbs
// 64 bytes at a time; its four lanes and the whole 16-byte blocks left then merge into one
// 128-bit block in one parallel step, finished (partial block, reduction) by the shared
// 128-bit code (crc32_internal.h).

#include <cstddef>
#include <cstdint>

#include "proto/avx512_intrinsics.h"
#include "proto/crc32_internal.h"

namespace uroce::proto::crc32_internal {
namespace {

inline __m512i load_wide(const uint8_t* p) noexcept { return _mm512_loadu_si512(p); }

// Four 16-byte blocks from anywhere, as the lanes of one register (lane 0 from a).
inline __m512i four_blocks(const uint8_t* a, const uint8_t* b, const uint8_t* c, const uint8_t* d) noexcept {
  const __m256i low = _mm256_inserti128_si256(_mm256_castsi128_si256(load_block(a)), load_block(b), 1);
  const __m256i high = _mm256_inserti128_si256(_mm256_castsi128_si256(load_block(c)), load_block(d), 1);
  return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
}

inline __m512i broadcast_pair(uint64_t hi_degree, uint64_t lo_degree) noexcept {
  return _mm512_broadcast_i32x4(fold_pair(hi_degree, lo_degree));
}

// `acc` moved by the distance its constants encode, XORed into `next`: one three-way XOR.
inline __m512i fold_into(__m512i acc, __m512i k, __m512i next) noexcept {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(acc, k, 0x00), _mm512_clmulepi64_epi128(acc, k, 0x11), next,
                                   0x96);
}

// The last fold of every wide path: the four lanes of `acc` (the state of the 64 bytes before p) and the
// q = (end - p) / 16 whole blocks still left (0..3) all jump to the position of the last of them, in
// parallel, and XOR into one block. Folding those q blocks one after another instead, 128 bits at a
// time behind the lane merge, made a packet whose length left 48 bytes over (a 64 B SEND's ICRC, for
// one) slower than the 128-bit variant alone: three dependent multiplies on the critical path.
//
// Row q of the table: the constants for acc's lanes (lane i jumps 128 * (3 - i + q) bits; for q = 0 lane 3
// stays and its constants are zero), those for the q blocks (block j jumps 128 * (q - 1 - j) bits; the last
// one stays), and the lane that stays, which is XORed in unmultiplied.
struct TailMerge {
  alignas(64) uint64_t acc[8];
  alignas(64) uint64_t blocks[8];
  __mmask8 acc_stays;    // the qwords of acc's lane that stays (q = 0)
  __mmask8 block_stays;  // the qwords of the block that stays (q > 0)
  __mmask8 loaded;       // the qwords of the q blocks
};

constexpr TailMerge tail_merge_row(unsigned q) noexcept {
  TailMerge row{};
  const auto set = [](uint64_t* lanes, unsigned lane, unsigned distance) {
    lanes[std::size_t{2} * lane] = clmul_constant(distance + 32);  // multiplies the lane's high-degree qword
    lanes[std::size_t{2} * lane + 1] = clmul_constant(distance - 32);
  };
  for (unsigned i = 0; i < 4; ++i) {
    if (3 - i + q != 0) set(row.acc, i, 128 * (3 - i + q));
  }
  for (unsigned j = 0; j + 1 < q; ++j) set(row.blocks, j, 128 * (q - 1 - j));
  row.acc_stays = q == 0 ? 0xC0 : 0;
  row.block_stays = q == 0 ? 0 : static_cast<__mmask8>(0x3u << (2 * (q - 1)));
  row.loaded = static_cast<__mmask8>((1u << (2 * q)) - 1);
  return row;
}

alignas(64) constexpr TailMerge kTailMerge[4] = {tail_merge_row(0), tail_merge_row(1), tail_merge_row(2),
                                                 tail_merge_row(3)};
static_assert(kTailMerge[0].acc[0] == kFold384Hi && kTailMerge[0].acc[1] == kFold384Lo && kTailMerge[0].acc[6] == 0);
static_assert(kTailMerge[3].blocks[0] == kFold256Hi && kTailMerge[3].blocks[3] == kFold128Lo);

// Folds `acc` and the whole blocks of [p, end) (fewer than 64 bytes) into one block, and moves p past them.
// The masked load reads only the q blocks, so it never touches memory past them.
inline __m128i merge_tail(__m512i acc, const uint8_t*& p, const uint8_t* const end) noexcept {
  const TailMerge& row = kTailMerge[static_cast<std::size_t>(end - p) / 16];
  const __m512i blocks = _mm512_maskz_loadu_epi64(row.loaded, p);
  const __m512i k_acc = _mm512_load_si512(row.acc);
  const __m512i k_blocks = _mm512_load_si512(row.blocks);
  const __m512i stays =
      _mm512_or_si512(_mm512_maskz_mov_epi64(row.acc_stays, acc), _mm512_maskz_mov_epi64(row.block_stays, blocks));
  const __m512i acc_moved = fold_into(acc, k_acc, stays);
  const __m512i folded = fold_into(blocks, k_blocks, acc_moved);
  p += static_cast<std::size_t>(end - p) & ~std::size_t{15};
  const __m256i half = _mm256_xor_si256(_mm512_castsi512_si256(folded), _mm512_extracti64x4_epi64(folded, 1));
  return _mm_xor_si128(_mm256_castsi256_si128(half), _mm256_extracti128_si256(half, 1));
}

// Absorbs [p, end) into `z0`, whose four lanes hold the folded state of the 64 bytes before p
// (lane 0 carrying everything earlier), and returns the CRC. Every wide path of this file ends
// here, and the public functions tail-call it, so its return is where the caller's code resumes.
uint32_t fold_wide_on(__m512i z0, const uint8_t* p, const uint8_t* const end) noexcept {
  if (end - p >= 192) {
    __m512i z1 = load_wide(p);
    __m512i z2 = load_wide(p + 64);
    __m512i z3 = load_wide(p + 128);
    p += 192;
    const __m512i k2048 = broadcast_pair(kFold2048Hi, kFold2048Lo);
    while (end - p >= 256) {
      z0 = fold_into(z0, k2048, load_wide(p));
      z1 = fold_into(z1, k2048, load_wide(p + 64));
      z2 = fold_into(z2, k2048, load_wide(p + 128));
      z3 = fold_into(z3, k2048, load_wide(p + 192));
      p += 256;
    }
    // Each accumulator jumps to the position of the last one, in parallel.
    const __m512i a = fold_into(z0, broadcast_pair(kFold1536Hi, kFold1536Lo), z3);
    const __m512i b = fold_into(z1, broadcast_pair(kFold1024Hi, kFold1024Lo), a);
    z0 = fold_into(z2, broadcast_pair(kFold512Hi, kFold512Lo), b);
  }
  const __m512i k512 = broadcast_pair(kFold512Hi, kFold512Lo);
  while (end - p >= 64) {
    z0 = fold_into(z0, k512, load_wide(p));
    p += 64;
  }
  const __m128i folded = merge_tail(z0, p, end);
  // The upper halves of zmm0-15 must be clean before baseline SSE code runs again, or Intel
  // cores tax each of its instructions (STYLE.md 16). GCC does not insert this vzeroupper
  // itself: it takes a function with a 512-bit argument to be called from AVX code that
  // cleans up on its own. finish() (the partial block and the reduction) needs only 128-bit registers,
  // which vzeroupper keeps.
  // proto/tests/check_vzeroupper.py checks the built code.
  _mm256_zeroupper();
  return finish(folded, p, end);
}

}  // namespace

uint32_t crc32_vpclmul(uint32_t crc, const void* data, std::size_t len) noexcept {
  const auto* p = static_cast<const uint8_t*>(data);
  if (len < 16) return ~portable_update(~crc, p, len);
  const uint8_t* const end = p + len;
  if (len < 64) return finish(first_block(p, crc), p + 16, end);
  const __m512i z0 = _mm512_xor_si512(load_wide(p), _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(~crc))));
  return fold_wide_on(z0, p + 64, end);
}

uint32_t crc32_vpclmul_masked(uint32_t crc, const void* data, std::size_t len, const void* mask,
                              std::size_t mask_len) noexcept {
  const auto* p = static_cast<const uint8_t*>(data);
  const auto* m = static_cast<const uint8_t*>(mask);
  const uint8_t* const end = p + len;
  if (len < 64) return finish(fold_masked_head(p, m, mask_len, crc), p + mask_len, end);
  // The masked head (48 bytes for IPv4, 64 for IPv6) goes straight into the first wide block, so no multiply
  // waits on it: a short packet's CRC is then one wide fold, the lane merge and the reduction. The data is read
  // in 16-byte loads, one per block: PacketTemplate::stamp has just written the head in 16-byte stores, and a
  // wider load spanning two of them cannot be forwarded from the store buffer; it would wait for both stores
  // to retire. The mask's blocks past mask_len are zero (a masked load), and the start register goes into the
  // first 4 bytes in the same instruction that ORs the mask in: (data | mask) ^ start.
  const __m512i masks = _mm512_maskz_loadu_epi64(static_cast<__mmask8>((1u << (mask_len / 8)) - 1), m);
  const __m512i start = _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(~crc)));
  constexpr int kOrThenXor = 0x56;  // (A | B) ^ C over the truth-table inputs A = 0xF0, B = 0xCC, C = 0xAA
  const __m512i z0 = _mm512_ternarylogic_epi64(four_blocks(p, p + 16, p + 32, p + 48), masks, start, kOrThenXor);
  return fold_wide_on(z0, p + 64, end);
}

}  // namespace uroce::proto::crc32_internal
