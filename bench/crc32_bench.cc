// CRC-32 throughput: uroce's variants against zlib and DPDK's rte_net_crc, on the same
// buffer, in the same run. See README.md for the method.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <rte_cpuflags.h>
#include <rte_eal.h>
#include <rte_net_crc.h>
#include <unistd.h>
#include <zlib.h>

#include "proto/crc32.h"

namespace uroce::bench {
namespace {

using proto::Crc32Impl;

constexpr std::array<int64_t, 3> kSizes = {64, 1024, 4096};
constexpr std::size_t kBufferSize = 4096;

// Every case reads these bytes: 64-byte aligned, random, filled once before any timing.
alignas(64) std::array<uint8_t, kBufferSize> g_buffer;

void fill_buffer() {
  std::mt19937_64 rng(20240611);
  for (auto& b : g_buffer) b = static_cast<uint8_t>(rng());
}

uint32_t zlib_crc(const uint8_t* p, std::size_t len) {
  return static_cast<uint32_t>(::crc32(0, p, static_cast<uInt>(len)));
}

uint32_t dpdk_crc(const uint8_t* p, std::size_t len) {
  return rte_net_crc_calc(p, static_cast<uint32_t>(len), RTE_NET_CRC32_ETH);
}

// rte_net_crc_set_alg(RTE_NET_CRC_AVX512) silently falls back to SSE4.2 unless EAL allows
// 512-bit SIMD (init_eal passes --force-max-simd-bitwidth=512, so it does) and the CPU has
// these flags: the test DPDK 22.11 makes (lib/net/rte_net_crc.c), repeated here so the
// report can say which code ran.
bool dpdk_avx512_effective() {
  for (const rte_cpu_flag_t flag : {RTE_CPUFLAG_AVX512F, RTE_CPUFLAG_AVX512BW, RTE_CPUFLAG_AVX512DQ,
                                    RTE_CPUFLAG_AVX512VL, RTE_CPUFLAG_PCLMULQDQ, RTE_CPUFLAG_VPCLMULQDQ}) {
    if (rte_cpu_get_flag_enabled(flag) != 1) return false;
  }
  return true;
}

// The timed loop shared by every case: independent calls over the same bytes, so this is
// throughput (calls may overlap in the out-of-order core), the same for every contender.
template <typename Fn>
void run(benchmark::State& state, Fn&& fn) {
  const auto len = static_cast<std::size_t>(state.range(0));
  for ([[maybe_unused]] auto _ : state) {
    uint32_t crc = fn(g_buffer.data(), len);
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void sizes(benchmark::internal::Benchmark* b) {
  for (const int64_t size : kSizes) b->Arg(size);
}

// uroce's dispatched entry point, whichever variant it picked.
void crc32_uroce_active(benchmark::State& state) {
  state.SetLabel(std::string(proto::crc32_impl_name(proto::crc32_impl_for(static_cast<std::size_t>(state.range(0))))));
  run(state, [](const uint8_t* p, std::size_t len) { return proto::crc32_ieee(0, p, len); });
}
BENCHMARK(crc32_uroce_active)->Apply(sizes);

// One uroce variant, chosen explicitly.
void crc32_uroce(benchmark::State& state, Crc32Impl impl) {
  if (!proto::crc32_impl_supported(impl)) {
    state.SkipWithError("not supported on this CPU");
    return;
  }
  run(state, [impl](const uint8_t* p, std::size_t len) { return proto::crc32_ieee_with(impl, 0, p, len); });
}
BENCHMARK_CAPTURE(crc32_uroce, portable, Crc32Impl::kPortable)->Apply(sizes);
BENCHMARK_CAPTURE(crc32_uroce, pclmul, Crc32Impl::kPclmul)->Apply(sizes);
BENCHMARK_CAPTURE(crc32_uroce, vpclmul, Crc32Impl::kVpclmul)->Apply(sizes);
BENCHMARK_CAPTURE(crc32_uroce, vpclmul256, Crc32Impl::kVpclmul256)->Apply(sizes);

// The ICRC's own call shape (proto/icrc.cc): a 48-byte head (IPv4: 8 bytes for the LRH, IP, UDP, BTH) masked in
// registers, then the rest of the packet, through crc32_ieee_masked_with. The tail lengths are the packets the
// engine CRCs most: an ACK (AETH, 4 B), a 64 B SEND, a 64 B WRITE (RETH + 64), a 1 KiB and a 4 KiB middle packet.
// "throughput" makes independent calls, which the core may overlap, as a burst of packets does; "latency"
// seeds each call with the last CRC, so calls run one after another, as one packet's path does. Which
// variant wins differs between the two at short lengths: a 512-bit fold and its four-lane merge take
// longer to finish than 128-bit folds of 64 bytes even where they issue fewer instructions.
constexpr std::array<int64_t, 9> kIcrcTails = {4, 16, 48, 64, 80, 128, 256, 1024, 4096};
constexpr std::size_t kIcrcHead = 48;
constexpr std::array<uint8_t, kIcrcHead> kIcrcMask = [] {
  std::array<uint8_t, kIcrcHead> m{};
  for (std::size_t i = 0; i < 8; ++i) m[i] = 0xFF;  // the LRH's stand-in; the other masked fields are single bytes
  m[9] = m[16] = m[18] = m[19] = m[34] = m[35] = m[40] = 0xFF;
  return m;
}();

void icrc_tails(benchmark::internal::Benchmark* b) {
  for (const int64_t tail : kIcrcTails) b->Arg(tail);
}

void icrc_shape(benchmark::State& state, Crc32Impl impl, bool chained) {
  if (!proto::crc32_impl_supported(impl)) {
    state.SkipWithError("not supported on this CPU");
    return;
  }
  const auto tail = static_cast<std::size_t>(state.range(0));
  uint32_t crc = 0;
  for ([[maybe_unused]] auto _ : state) {
    const uint32_t seed = chained ? crc : 0;
    crc = proto::crc32_ieee_masked_with(impl, seed, g_buffer.data(), kIcrcHead + tail, kIcrcMask.data(), kIcrcHead);
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kIcrcHead + tail));
}
BENCHMARK_CAPTURE(icrc_shape, pclmul_throughput, Crc32Impl::kPclmul, false)->Apply(icrc_tails);
BENCHMARK_CAPTURE(icrc_shape, vpclmul_throughput, Crc32Impl::kVpclmul, false)->Apply(icrc_tails);
BENCHMARK_CAPTURE(icrc_shape, vpclmul256_throughput, Crc32Impl::kVpclmul256, false)->Apply(icrc_tails);
BENCHMARK_CAPTURE(icrc_shape, pclmul_latency, Crc32Impl::kPclmul, true)->Apply(icrc_tails);
BENCHMARK_CAPTURE(icrc_shape, vpclmul_latency, Crc32Impl::kVpclmul, true)->Apply(icrc_tails);
BENCHMARK_CAPTURE(icrc_shape, vpclmul256_latency, Crc32Impl::kVpclmul256, true)->Apply(icrc_tails);

// What the engine runs: crc32_ieee_masked, whichever variant the dispatch picks.
void icrc_dispatched(benchmark::State& state, bool chained) {
  const auto tail = static_cast<std::size_t>(state.range(0));
  state.SetLabel(std::string(proto::crc32_impl_name(proto::crc32_impl_for(kIcrcHead + tail))));
  uint32_t crc = 0;
  for ([[maybe_unused]] auto _ : state) {
    crc = proto::crc32_ieee_masked(chained ? crc : 0, g_buffer.data(), kIcrcHead + tail, kIcrcMask.data(), kIcrcHead);
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kIcrcHead + tail));
}
BENCHMARK_CAPTURE(icrc_dispatched, throughput, false)->Apply(icrc_tails);
BENCHMARK_CAPTURE(icrc_dispatched, latency, true)->Apply(icrc_tails);

void crc32_zlib(benchmark::State& state) { run(state, zlib_crc); }
BENCHMARK(crc32_zlib)->Apply(sizes);

// DPDK with one algorithm; the choice is process-wide, so every DPDK case sets its own.
void crc32_dpdk(benchmark::State& state, rte_net_crc_alg alg) {
  if (alg == RTE_NET_CRC_AVX512 && !dpdk_avx512_effective()) state.SetLabel("fell back to SSE4.2");
  rte_net_crc_set_alg(alg);
  run(state, dpdk_crc);
}
BENCHMARK_CAPTURE(crc32_dpdk, scalar, RTE_NET_CRC_SCALAR)->Apply(sizes);
BENCHMARK_CAPTURE(crc32_dpdk, sse42, RTE_NET_CRC_SSE42)->Apply(sizes);
BENCHMARK_CAPTURE(crc32_dpdk, avx512, RTE_NET_CRC_AVX512)->Apply(sizes);

// Every contender must agree with zlib before anything is timed.
void verify_or_die() {
  constexpr std::array<std::size_t, 12> kLengths = {1, 7, 15, 16, 17, 63, 64, 65, 1000, 1024, 4095, 4096};
  auto check = [](const std::string& who, uint32_t got, uint32_t want, std::size_t len) {
    if (got != want) {
      std::fprintf(stderr, "crc32_bench: %s gives 0x%08x for %zu bytes, zlib 0x%08x\n", who.c_str(), got, len, want);
      std::abort();
    }
  };
  for (const std::size_t len : kLengths) {
    const uint32_t want = zlib_crc(g_buffer.data(), len);
    check("uroce active", proto::crc32_ieee(0, g_buffer.data(), len), want, len);
    for (const Crc32Impl impl : proto::kAllCrc32Impls) {
      if (!proto::crc32_impl_supported(impl)) continue;
      check("uroce " + std::string(proto::crc32_impl_name(impl)), proto::crc32_ieee_with(impl, 0, g_buffer.data(), len),
            want, len);
    }
    for (const auto& [name, alg] : {std::pair{"scalar", RTE_NET_CRC_SCALAR}, std::pair{"sse42", RTE_NET_CRC_SSE42},
                                    std::pair{"avx512", RTE_NET_CRC_AVX512}}) {
      rte_net_crc_set_alg(alg);
      check(std::string("dpdk ") + name, dpdk_crc(g_buffer.data(), len), want, len);
    }
  }
}

// The report --benchmark_format asks for, unchanged; after a console report, also a
// table of the medians (or of the single runs, without --benchmark_repetitions) in
// decimal GB/s, with each contender's ratio to the baselines measured in the same run:
// zlib and DPDK's fastest algorithm.
class SummaryReporter : public benchmark::BenchmarkReporter {
 public:
  explicit SummaryReporter(benchmark::BenchmarkReporter* display) : display_(display) {}

  bool ReportContext(const Context& context) override { return display_->ReportContext(context); }

  void ReportRuns(const std::vector<Run>& runs) override {
    display_->ReportRuns(runs);
    for (const Run& run : runs) {
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      const bool single = run.run_type == Run::RT_Iteration && run.repetitions <= 1;
      const auto rate = run.counters.find("bytes_per_second");
      if (run.error_occurred || (!median && !single) || rate == run.counters.end()) continue;
      if (run.run_name.function_name.starts_with("icrc_")) {
        if (!icrc_ns_.contains(run.run_name.function_name)) icrc_order_.push_back(run.run_name.function_name);
        icrc_ns_[run.run_name.function_name][std::stoll(run.run_name.args)] =
            run.GetAdjustedCPUTime() / benchmark::GetTimeUnitMultiplier(run.time_unit) * 1e9;
        continue;
      }
      if (!rates_.contains(run.run_name.function_name)) order_.push_back(run.run_name.function_name);
      rates_[run.run_name.function_name][std::stoll(run.run_name.args)] = rate->second.value / 1e9;
    }
  }

  void Finalize() override {
    display_->Finalize();
    if (dynamic_cast<benchmark::ConsoleReporter*>(display_) == nullptr) return;
    print_icrc_table();
    if (order_.empty()) return;
    const auto& zlib = rates_["crc32_zlib"];
    const auto& dpdk = rates_["crc32_dpdk/avx512"];
    std::printf("\nGB/s, median if repeated (1 GB = 1e9 bytes; the G/s above is 2^30) [x zlib, x DPDK AVX-512]\n%-22s",
                "");
    for (const int64_t size : kSizes) std::printf("%26s", (std::to_string(size) + " B").c_str());
    std::printf("\n");
    for (const std::string& name : order_) {
      std::printf("%-22s", name.c_str());
      for (const int64_t size : kSizes) {
        const auto ratio = [&](const std::map<int64_t, double>& base) {
          const auto it = base.find(size);
          if (it == base.end() || it->second <= 0) return std::string("    -");
          char text[16];
          std::snprintf(text, sizeof(text), "%5.2f", rates_[name][size] / it->second);
          return std::string(text);
        };
        std::printf("%9.2f [%6sx, %5sx]", rates_[name][size], ratio(zlib).c_str(), ratio(dpdk).c_str());
      }
      std::printf("\n");
    }
    std::fflush(stdout);
  }

 private:
  // ns per ICRC-shaped call (a 48-byte head, then the tail), median if repeated.
  void print_icrc_table() {
    if (icrc_order_.empty()) return;
    std::printf("\nICRC-shaped calls (48 B head + tail), CPU ns per call, median if repeated\n%-32s", "tail bytes:");
    for (const int64_t tail : kIcrcTails) std::printf("%9lld", static_cast<long long>(tail));
    std::printf("\n");
    for (const std::string& name : icrc_order_) {
      std::printf("%-32s", name.c_str());
      for (const int64_t tail : kIcrcTails) {
        const auto it = icrc_ns_[name].find(tail);
        if (it == icrc_ns_[name].end()) {
          std::printf("%9s", "-");
        } else {
          std::printf("%9.2f", it->second);
        }
      }
      std::printf("\n");
    }
  }

  benchmark::BenchmarkReporter* display_;
  std::vector<std::string> order_;
  std::map<std::string, std::map<int64_t, double>> rates_;
  std::vector<std::string> icrc_order_;
  std::map<std::string, std::map<int64_t, double>> icrc_ns_;
};

// rte_net_crc needs EAL, and nothing else of DPDK: no hugepages and a small heap (nothing
// is allocated), no devices, runtime files or telemetry socket, a per-process file prefix
// (never collides with another DPDK process), one lcore (EAL pins this thread to core 0,
// which keeps the timed loops on one core), quiet start-up, and 512-bit SIMD allowed (else
// RTE_NET_CRC_AVX512 silently falls back to SSE4.2).
bool init_eal(const char* argv0) {
  const std::string command_line =
      "--no-huge -m 64 --no-pci --no-shconf --no-telemetry -l 0 --log-level lib.eal:error "
      "--force-max-simd-bitwidth=512 --file-prefix uroce-bench-" +
      std::to_string(getpid());
  std::vector<std::string> args = {argv0};
  args.reserve(16);
  for (std::size_t at = 0; at < command_line.size();) {
    const std::size_t space = std::min(command_line.find(' ', at), command_line.size());
    args.push_back(command_line.substr(at, space - at));
    at = space + 1;
  }
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (rte_eal_init(static_cast<int>(args.size()), argv.data()) < 0) {
    std::fprintf(stderr, "crc32_bench: rte_eal_init failed\n");
    return false;
  }
  return true;
}

int run_main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!init_eal(argv[0])) return 1;
  fill_buffer();
  verify_or_die();
  benchmark::AddCustomContext("uroce_crc32_active",
                              std::string(proto::crc32_impl_name(proto::crc32_active_impl())) + " (" +
                                  std::string(proto::crc32_impl_name(proto::crc32_short_impl())) + " below " +
                                  std::to_string(proto::kCrc32WideMinBytes) + " bytes)");
  benchmark::AddCustomContext("dpdk_avx512_effective", dpdk_avx512_effective() ? "yes" : "no (falls back to SSE4.2)");
  SummaryReporter reporter(benchmark::CreateDefaultDisplayReporter());
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  rte_eal_cleanup();
  return 0;
}

}  // namespace
}  // namespace uroce::bench

int main(int argc, char** argv) { return uroce::bench::run_main(argc, argv); }
