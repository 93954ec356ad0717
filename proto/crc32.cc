// Dispatch: picks the fastest CRC-32 variant the CPU supports, once.
#include "proto/crc32.h"

#include <atomic>
#include <cassert>
#include <cstdlib>
#include <optional>

#include "proto/crc32_internal.h"

namespace uroce::proto {
namespace {

using Crc32Fn = uint32_t (*)(uint32_t crc, const void* data, std::size_t len) noexcept;

Crc32Fn function_of(Crc32Impl impl) noexcept {
  switch (impl) {
    case Crc32Impl::kVpclmul:
      return crc32_internal::crc32_vpclmul;
    case Crc32Impl::kVpclmul256:
      return crc32_internal::crc32_vpclmul256;
    case Crc32Impl::kPclmul:
      return crc32_internal::crc32_pclmul;
    case Crc32Impl::kPortable:
      break;
  }
  return crc32_internal::crc32_portable;
}

using Crc32MaskedFn = uint32_t (*)(uint32_t crc, const void* data, std::size_t len, const void* mask,
                                   std::size_t mask_len) noexcept;

Crc32MaskedFn masked_function_of(Crc32Impl impl) noexcept {
  switch (impl) {
    case Crc32Impl::kVpclmul:
      return crc32_internal::crc32_vpclmul_masked;
    case Crc32Impl::kVpclmul256:
      return crc32_internal::crc32_vpclmul256_masked;
    case Crc32Impl::kPclmul:
      return crc32_internal::crc32_pclmul_masked;
    case Crc32Impl::kPortable:
      break;
  }
  return crc32_internal::crc32_portable_masked;
}

// The widest variant the CPU has: uroce_bench_crc32's ICRC-shaped cases measured VPCLMULQDQ no slower in
// latency than PCLMULQDQ at any packet length on an Intel Xeon (family 6, model 207), and faster in
// throughput from 64-byte tails up; the 256-bit form ran 4 KiB twice as fast as PCLMULQDQ on an AMD EPYC
// (family 25, model 1), which has no AVX-512 (bench/README.md). UROCE_CRC32=portable|pclmul|vpclmul|vpclmul256 in the
// environment picks one instead, for A/B runs of whole benchmarks; a name the CPU cannot run is ignored
// (crc32_active_impl() tells what ran).
std::optional<Crc32Impl> forced_impl() noexcept {
  // Read once per dispatch table, on its first CRC; nothing in uroce writes the environment.
  if (const char* forced = std::getenv("UROCE_CRC32"); forced != nullptr) {  // NOLINT(concurrency-mt-unsafe)
    for (const Crc32Impl impl : kAllCrc32Impls) {
      if (crc32_impl_name(impl) == forced && crc32_impl_supported(impl)) return impl;
    }
  }
  return std::nullopt;
}

Crc32Impl best_impl() noexcept {
  if (const auto forced = forced_impl()) return *forced;
  for (const Crc32Impl impl : {Crc32Impl::kVpclmul, Crc32Impl::kVpclmul256, Crc32Impl::kPclmul}) {
    if (crc32_impl_supported(impl)) return impl;
  }
  return Crc32Impl::kPortable;
}

// For calls shorter than kCrc32WideMinBytes (crc32.h): the 128-bit folds where the 512-bit ones are the best.
// The 256-bit ones stay: on an AMD EPYC (family 25, model 1) they were as fast as the 128-bit ones or faster at
// every ICRC-shaped length from 64 bytes up, in latency and throughput (bench/README.md, "crc32").
Crc32Impl best_short_impl() noexcept {
  if (const auto forced = forced_impl()) return *forced;
  const Crc32Impl wide = best_impl();
  return wide == Crc32Impl::kVpclmul ? Crc32Impl::kPclmul : wide;  // VPCLMULQDQ's flags include PCLMULQDQ's
}

// What crc32_ieee and crc32_ieee_masked call, for calls of kCrc32WideMinBytes or more and for shorter ones.
using ActiveFn = crc32_internal::Dispatch<Crc32Fn, function_of, best_impl>;
using ShortFn = crc32_internal::Dispatch<Crc32Fn, function_of, best_short_impl>;
using ActiveMaskedFn = crc32_internal::Dispatch<Crc32MaskedFn, masked_function_of, best_impl>;
using ShortMaskedFn = crc32_internal::Dispatch<Crc32MaskedFn, masked_function_of, best_short_impl>;

}  // namespace

uint32_t crc32_ieee(uint32_t crc, const void* data, std::size_t len) noexcept {
  return (len < kCrc32WideMinBytes ? ShortFn::slot : ActiveFn::slot).load(std::memory_order_relaxed)(crc, data, len);
}

uint32_t crc32_ieee_with(Crc32Impl impl, uint32_t crc, const void* data, std::size_t len) noexcept {
  return function_of(impl)(crc, data, len);
}

uint32_t crc32_ieee_masked(uint32_t crc, const void* data, std::size_t len, const void* mask,
                           std::size_t mask_len) noexcept {
  assert(mask_len != 0 && mask_len % 16 == 0 && mask_len <= 64 && len >= mask_len);
  return (len < kCrc32WideMinBytes ? ShortMaskedFn::slot : ActiveMaskedFn::slot)
      .load(std::memory_order_relaxed)(crc, data, len, mask, mask_len);
}

uint32_t crc32_ieee_masked_with(Crc32Impl impl, uint32_t crc, const void* data, std::size_t len, const void* mask,
                                std::size_t mask_len) noexcept {
  assert(mask_len != 0 && mask_len % 16 == 0 && mask_len <= 64 && len >= mask_len);
  return masked_function_of(impl)(crc, data, len, mask, mask_len);
}

bool crc32_impl_supported(Crc32Impl impl) noexcept {
  // Safe even before static constructors run (the runtime's own initialiser may not have yet).
  __builtin_cpu_init();
  switch (impl) {
    case Crc32Impl::kPortable:
      return true;
    case Crc32Impl::kPclmul:
      return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    case Crc32Impl::kVpclmul:
      // The flags crc32_vpclmul.cc is compiled with. Both libgcc and compiler-rt report
      // AVX-512 features only if XCR0 shows the OS saves the opmask and ZMM state.
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("vpclmulqdq") &&
             __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    case Crc32Impl::kVpclmul256:
      // crc32_vpclmul256.cc's flags; AVX2 is reported only if XCR0 shows the OS saves the YMM state.
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("vpclmulqdq") &&
             __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  }
  return false;
}

Crc32Impl crc32_active_impl() noexcept {
  static const Crc32Impl kActive = best_impl();
  return kActive;
}

Crc32Impl crc32_short_impl() noexcept {
  static const Crc32Impl kShort = best_short_impl();
  return kShort;
}

std::string_view crc32_impl_name(Crc32Impl impl) noexcept {
  switch (impl) {
    case Crc32Impl::kPortable:
      return "portable";
    case Crc32Impl::kPclmul:
      return "pclmul";
    case Crc32Impl::kVpclmul:
      return "vpclmul";
    case Crc32Impl::kVpclmul256:
      return "vpclmul256";
  }
  return "unknown";
}

}  // namespace uroce::proto
