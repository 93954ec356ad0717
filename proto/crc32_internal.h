// Private to crc32*.cc: what the CRC-32 variants share. Not part of proto's interface.
//
// Two ways of writing the same polynomial appear here. The table code works on the
// 32-bit register zlib uses internally (the complement of the value crc32_ieee takes and
// returns), bit-reflected: bit i holds the coefficient of x^(31-i). The carry-less
// multiply code works on 128-bit blocks of message bytes in memory order, which is the
// same reflection: bit i of a block holds x^(127-i).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "proto/crc32.h"

namespace uroce::proto::crc32_internal {

// A CRC entry point's dispatch slot for function pointer type `Fn`: it starts at resolve(), which on the first call
// picks the variant (kPick, mapped to code by kFunctionOf), stores it in the slot and runs it, so that later calls
// are one load and an indirect jump (no guard check). Racing first calls all store the same pointer, which points to
// code, not to data that needs publishing, so relaxed ordering suffices. Constant-initialised: usable from other
// static initialisers.
template <class Fn, auto kFunctionOf, auto kPick>
struct Dispatch;
template <auto kFunctionOf, auto kPick, class... Args>
struct Dispatch<uint32_t (*)(Args...) noexcept, kFunctionOf, kPick> {
  using Fn = uint32_t (*)(Args...) noexcept;
  static uint32_t resolve(Args... args) noexcept {
    const Fn fn = kFunctionOf(kPick());
    slot.store(fn, std::memory_order_relaxed);
    return fn(args...);
  }
  static constinit inline std::atomic<Fn> slot{&resolve};
};

// P(x) = x^32 + x^26 + ... + 1 (IEEE 802.3) without its x^32 term, bit-reflected.
inline constexpr uint32_t kPolyReflected = 0xEDB88320u;

// Table-driven update of the internal register (~crc, for zlib's crc). Any length.
uint32_t portable_update(uint32_t state, const uint8_t* data, std::size_t len) noexcept;

// The variants, each with crc32_ieee's contract. Each lives in its own file,
// compiled with only the ISA flags it needs; crc32.cc calls one only if the CPU has them.
uint32_t crc32_portable(uint32_t crc, const void* data, std::size_t len) noexcept;
uint32_t crc32_pclmul(uint32_t crc, const void* data, std::size_t len) noexcept;
uint32_t crc32_vpclmul(uint32_t crc, const void* data, std::size_t len) noexcept;
uint32_t crc32_vpclmul256(uint32_t crc, const void* data, std::size_t len) noexcept;
// crc32_ieee_masked's contract, one per variant.
uint32_t crc32_portable_masked(uint32_t crc, const void* data, std::size_t len, const void* mask,
                               std::size_t mask_len) noexcept;
uint32_t crc32_pclmul_masked(uint32_t crc, const void* data, std::size_t len, const void* mask,
                             std::size_t mask_len) noexcept;
uint32_t crc32_vpclmul_masked(uint32_t crc, const void* data, std::size_t len, const void* mask,
                              std::size_t mask_len) noexcept;
uint32_t crc32_vpclmul256_masked(uint32_t crc, const void* data, std::size_t len, const void* mask,
                                 std::size_t mask_len) noexcept;

// ---- Folding constants --------------------------------------------------------------
//
// PCLMULQDQ multiplies two 64-bit halves carry-lessly. Let a block A (128 bits, bit i =
// x^(127-i)) be followed by D more bits of message. Then A*x^D == H*x^(D+64) + L*x^D, where
// H is A's low qword (the high-degree half) and L its high qword. Multiplying a reflected
// 64-bit H by a 33-bit constant K stored with bit j = x^(32-j) yields a product whose bit k
// is the coefficient of x^(95-k) in H*K; read in the 128-bit layout, that is H*K*x^32. So with
//   K_hi = x^(D+32) mod P,  K_lo = x^(D-32) mod P,
// clmul(H, K_hi) ^ clmul(L, K_lo) is congruent to A*x^D modulo P and has the layout of the
// block D bits later, into which it is XORed ("folded"). The result is a full 128-bit
// block again, so folding repeats until the tail.
//
// clmul_constant(n) computes x^n mod P in that 33-bit layout: run the reflected shift
// register from x^0 (bit 31) n times, then shift left by one. The literal values were
// computed independently (long division over GF(2) in a short Python script) and the
// static_asserts below check the two agree.
constexpr uint64_t clmul_constant(unsigned n) noexcept {
  uint32_t r = 0x80000000u;  // x^0
  for (unsigned i = 0; i < n; ++i) r = (r >> 1) ^ ((r & 1u) != 0 ? kPolyReflected : 0u);
  return static_cast<uint64_t>(r) << 1;
}

// floor(x^64 / P) in the same 33-bit layout, for the final Barrett reduction.
constexpr uint64_t barrett_mu() noexcept {
  // Long division in normal bit order (bit d = x^d). The first quotient term is x^32; what
  // remains of x^64 after subtracting x^32 * P fits in 64 bits, and the loop divides that.
  constexpr uint64_t kPolyNormal = 0x104C11DB7u;
  uint64_t q = uint64_t{1} << 32;              // first quotient term: x^32
  uint64_t low = uint64_t{0x04C11DB7u} << 32;  // x^64 - x^32 * P
  for (int d = 63; d >= 32; --d) {
    if (((low >> d) & 1u) != 0) {
      q |= uint64_t{1} << (d - 32);
      low ^= kPolyNormal << (d - 32);
    }
  }
  uint64_t reflected = 0;  // reverse the 33 bits: bit j = x^(32-j)
  for (int j = 0; j <= 32; ++j) reflected |= ((q >> (32 - j)) & 1u) << j;
  return reflected;
}

// K_hi/K_lo pairs for folding distances D = 128, 256, 384, 512, 768, 1024, 1536 and 2048 bits.
inline constexpr uint64_t kFold128Hi = 0x1751997d0;   // x^160
inline constexpr uint64_t kFold128Lo = 0x0ccaa009e;   // x^96
inline constexpr uint64_t kFold256Hi = 0x0f1da05aa;   // x^288
inline constexpr uint64_t kFold256Lo = 0x15a546366;   // x^224
inline constexpr uint64_t kFold384Hi = 0x03db1ecdc;   // x^416
inline constexpr uint64_t kFold384Lo = 0x174359406;   // x^352
inline constexpr uint64_t kFold512Hi = 0x154442bd4;   // x^544
inline constexpr uint64_t kFold512Lo = 0x1c6e41596;   // x^480
inline constexpr uint64_t kFold768Hi = 0x0df068dc2;   // x^800
inline constexpr uint64_t kFold768Lo = 0x18cb44e58;   // x^736
inline constexpr uint64_t kFold1024Hi = 0x1e88ef372;  // x^1056
inline constexpr uint64_t kFold1024Lo = 0x14a7fe880;  // x^992
inline constexpr uint64_t kFold1536Hi = 0x1821d8bc0;  // x^1568
inline constexpr uint64_t kFold1536Lo = 0x12e958ac4;  // x^1504
inline constexpr uint64_t kFold2048Hi = 0x11542778a;  // x^2080
inline constexpr uint64_t kFold2048Lo = 0x1322d1430;  // x^2016
// Final reduction (reduce_to_state): x^96 and x^64 shrink 128 -> 96 -> 64 bits.
inline constexpr uint64_t kReduce96 = 0x0ccaa009e;  // x^96
inline constexpr uint64_t kReduce64 = 0x163cd6124;  // x^64
inline constexpr uint64_t kBarrettMu = 0x1f7011641;
inline constexpr uint64_t kPoly33 = 0x1db710641;  // P itself, 33-bit layout: x^32 at bit 0

static_assert(kFold128Hi == clmul_constant(128 + 32) && kFold128Lo == clmul_constant(128 - 32));
static_assert(kFold256Hi == clmul_constant(256 + 32) && kFold256Lo == clmul_constant(256 - 32));
static_assert(kFold384Hi == clmul_constant(384 + 32) && kFold384Lo == clmul_constant(384 - 32));
static_assert(kFold512Hi == clmul_constant(512 + 32) && kFold512Lo == clmul_constant(512 - 32));
static_assert(kFold768Hi == clmul_constant(768 + 32) && kFold768Lo == clmul_constant(768 - 32));
static_assert(kFold1024Hi == clmul_constant(1024 + 32) && kFold1024Lo == clmul_constant(1024 - 32));
static_assert(kFold1536Hi == clmul_constant(1536 + 32) && kFold1536Lo == clmul_constant(1536 - 32));
static_assert(kFold2048Hi == clmul_constant(2048 + 32) && kFold2048Lo == clmul_constant(2048 - 32));
static_assert(kReduce96 == clmul_constant(96) && kReduce64 == clmul_constant(64));
static_assert(kBarrettMu == barrett_mu());
static_assert(kPoly33 == ((uint64_t{kPolyReflected} << 1) | 1u));

}  // namespace uroce::proto::crc32_internal

// ---- 128-bit folding helpers ---------------------------------------------------------
//
// Shared by the PCLMULQDQ and VPCLMULQDQ files, and visible only where the compiler may emit PCLMULQDQ and
// SSE4.1. They have internal linkage on purpose: each file gets its own copy compiled with its own flags (the
// AVX files' copies use VEX or EVEX encodings), and the linker can never merge them and hand an AVX copy to
// the SSE path, as it could with ordinary inline functions.
#if defined(__PCLMUL__) && defined(__SSE4_1__)
#include <immintrin.h>

namespace uroce::proto::crc32_internal {
namespace {  // internal linkage in a header, on purpose: see above

// A K_hi/K_lo pair in one register: the low qword multiplies a block's low (high-degree) qword.
[[gnu::always_inline]] inline __m128i fold_pair(uint64_t hi_degree, uint64_t lo_degree) noexcept {
  return _mm_set_epi64x(static_cast<long long>(lo_degree), static_cast<long long>(hi_degree));
}

[[gnu::always_inline]] inline __m128i load_block(const uint8_t* p) noexcept {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// A block congruent to `acc` * x^D (mod P), laid out like the block D bits later.
[[gnu::always_inline]] inline __m128i fold(__m128i acc, __m128i k) noexcept {
  return _mm_xor_si128(_mm_clmulepi64_si128(acc, k, 0x00), _mm_clmulepi64_si128(acc, k, 0x11));
}

// pshufb controls for the partial last block: bytes 16..31 are 0..15, the rest 0x80
// (which pshufb turns into zero and pblendvb reads as "take the other operand").
alignas(64) inline constexpr uint8_t kShiftTable[48] = {
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0,    1,    2,    3,    4,    5,    6,    7,    8,    9,    10,   11,   12,   13,   14,   15,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80};

// `acc` is the folded state of the message up to `end - n`, with 0 < n < 16 bytes left and
// at least 16 message bytes before `end`. The n bytes are absorbed without reading past
// `end`: the 16+n bytes (acc, tail) are regrouped as a head of n bytes (acc's first n),
// followed by one full block (acc's last 16-n bytes, then the tail, loaded as the last 16
// bytes of the message). The head, right-aligned in a block, folds into it by 128 bits.
[[gnu::always_inline]] inline __m128i fold_partial(__m128i acc, const uint8_t* end, std::size_t n) noexcept {
  const __m128i last = load_block(end - 16);
  const __m128i to_end = load_block(kShiftTable + n);         // byte i <- i-(16-n), or zero
  const __m128i to_start = load_block(kShiftTable + 16 + n);  // byte i <- i+n, or 0x80 past 16-n
  const __m128i head = _mm_shuffle_epi8(acc, to_end);
  const __m128i block = _mm_blendv_epi8(_mm_shuffle_epi8(acc, to_start), last, to_start);
  return _mm_xor_si128(fold(head, fold_pair(kFold128Hi, kFold128Lo)), block);
}

// The internal register (~crc) for a message whose folded remainder is `v`, that is
// v*x^32 mod P:
//   1. v = H*x^64 + L: H*x^96 + L*x^32 == clmul(H, x^96) ^ (L placed at bits 0..63): 96 bits.
//   2. the top 32 of those (bits 0..31) times x^64 fold the same way into the low 64: 64 bits.
//   3. Barrett: with T = Th*x^32 + Tl, the quotient by P is floor(Th*mu / x^32) where
//      mu = floor(x^64/P), and the remainder is Tl ^ low32(quotient*P).
// Bit positions follow from the layout rule in the constants comment: reflected operands
// of n and m bits give a product whose bit k is x^(n+m-2-k).
[[gnu::always_inline]] inline uint32_t reduce_to_state(__m128i v) noexcept {
  const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
  const __m128i k = fold_pair(kReduce96, kReduce64);
  const __m128i barrett = fold_pair(kBarrettMu, kPoly33);
  const __m128i t96 = _mm_xor_si128(_mm_clmulepi64_si128(v, k, 0x00), _mm_srli_si128(v, 8));
  const __m128i t64 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(t96, low32), k, 0x10), _mm_srli_si128(t96, 4));
  const __m128i q = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(t64, low32), barrett, 0x00), low32);
  const __m128i r = _mm_xor_si128(_mm_clmulepi64_si128(q, barrett, 0x10), t64);
  return static_cast<uint32_t>(_mm_extract_epi32(r, 1));
}

// Absorbs [p, end) into `acc` 16 bytes at a time, then the partial block, and returns the
// CRC in zlib's convention. Precondition: at least 16 message bytes lie before p.
[[gnu::always_inline]] inline uint32_t finish(__m128i acc, const uint8_t* p, const uint8_t* end) noexcept {
  const __m128i k128 = fold_pair(kFold128Hi, kFold128Lo);
  while (end - p >= 16) {
    acc = _mm_xor_si128(fold(acc, k128), load_block(p));
    p += 16;
  }
  if (p != end) acc = fold_partial(acc, end, static_cast<std::size_t>(end - p));
  return ~reduce_to_state(acc);
}

// The first block with the starting register (~crc) XORed into its first 4 bytes. The
// register after an n-byte message M is (state*x^(8n) + M*x^32) mod P, which is
// (state*x^(8n-32) + M)*x^32: the state added to M's first 32 bits, then a plain remainder.
[[gnu::always_inline]] inline __m128i first_block(const uint8_t* p, uint32_t crc) noexcept {
  return _mm_xor_si128(load_block(p), _mm_cvtsi32_si128(static_cast<int>(~crc)));
}

// The folded state after the first `mask_len` bytes of `p` (a non-zero multiple of 16), each ORed with its byte of
// `mask`, starting from `crc` (crc32_ieee_masked).
[[gnu::always_inline]] inline __m128i fold_masked_head(const uint8_t* p, const uint8_t* mask, std::size_t mask_len,
                                                       uint32_t crc) noexcept {
  const __m128i k128 = fold_pair(kFold128Hi, kFold128Lo);
  __m128i acc = _mm_xor_si128(_mm_or_si128(load_block(p), load_block(mask)), _mm_cvtsi32_si128(static_cast<int>(~crc)));
  for (std::size_t i = 16; i < mask_len; i += 16) {
    acc = _mm_xor_si128(fold(acc, k128), _mm_or_si128(load_block(p + i), load_block(mask + i)));
  }
  return acc;
}

}  // namespace
}  // namespace uroce::proto::crc32_internal
#endif  // __PCLMUL__ && __SSE4_1__
