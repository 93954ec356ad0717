// Parse and build cost per packet (ns/packet), with and without the ICRC, for a
// small and a PMTU-sized RDMA WRITE. The ICRC-free variants isolate the header
// logic; the difference is the CRC cost measured in crc32_bench. Labels name the CRC-32 variant that
// ran; UROCE_CRC32=pclmul (or vpclmul, portable) in the environment compares them (proto/crc32.cc).
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "proto/crc32.h"
#include "proto/dcqcn.h"
#include "proto/packet_builder.h"
#include "proto/packet_parser.h"

namespace uroce::proto {
namespace {

PacketSpec write_spec(Opcode op, std::span<const uint8_t> payload) {
  PacketSpec s;
  s.dst_mac = MacAddr{0x020000000002};
  s.src_mac = MacAddr{0x020000000001};
  s.src_gid = gid_from_ipv4(Ipv4Addr{0xC6120001});
  s.dst_gid = gid_from_ipv4(Ipv4Addr{0xC6120002});
  s.opcode = op;
  s.dest_qp = Qpn{0x12};
  s.psn = Psn{0x100};
  s.ack_req = true;
  s.reth = {0x7f0000001000, RemoteToken{0x1234}, static_cast<uint32_t>(payload.size())};
  s.payload = payload;
  return s;
}

Opcode opcode_for(std::size_t payload) {
  return payload == 4096 ? Opcode::kRcRdmaWriteMiddle : Opcode::kRcRdmaWriteOnly;
}

void BM_Parse(benchmark::State& state) {
  const auto len = static_cast<std::size_t>(state.range(0));
  const bool verify_icrc = state.range(1) != 0;
  const std::vector<uint8_t> payload(len, 0x5A);
  const PacketSpec spec = write_spec(opcode_for(len), payload);
  std::vector<uint8_t> frame(packet_size(spec));
  if (build_packet(spec, frame) != frame.size()) state.SkipWithError("build failed");
  const ParseOptions options{.verify_icrc = verify_icrc};
  for ([[maybe_unused]] auto _ : state) {
    const ParseResult r = parse_packet(frame, options);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(verify_icrc ? "with ICRC check (" + std::string(crc32_impl_name(crc32_impl_for(frame.size()))) + ")"
                             : std::string("headers only"));
}
BENCHMARK(BM_Parse)->ArgsProduct({{64, 4096}, {0, 1}});

void BM_Build(benchmark::State& state) {
  const auto len = static_cast<std::size_t>(state.range(0));
  const std::vector<uint8_t> payload(len, 0x5A);
  const PacketSpec spec = write_spec(opcode_for(len), payload);
  std::vector<uint8_t> frame(packet_size(spec));
  Psn psn{0};
  for ([[maybe_unused]] auto _ : state) {
    PacketSpec s = spec;
    s.psn = ++psn;
    benchmark::DoNotOptimize(build_packet(s, frame));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("payload copy + ICRC (" + std::string(crc32_impl_name(crc32_impl_for(frame.size()))) + ")");
}
BENCHMARK(BM_Build)->Arg(64)->Arg(4096);

// What DCQCN's pacer adds per request packet once a CNP has limited the QP (RcQp::may_send_packet, then
// DcqcnRate::on_sent): the clocks advanced, the bucket checked and charged. The rate is set far above what the
// packets need, so the bucket never holds one back and only the bookkeeping is timed. Arg 0 times the branch a QP
// at line rate takes instead (limited() is false).
void BM_Pace(benchmark::State& state) {
  DcqcnParameters p;
  p.max_rate_mbps = 1'600'000;
  p.ai_rate_mbps = p.hai_rate_mbps = 0;  // with R_T cut below line rate (two CNPs) the QP stays limited
  DcqcnRate rate(p);
  uint64_t now = 1'000'000;
  if (state.range(0) != 0) {
    rate.on_cnp(now);
    rate.on_cnp(now += 1'000'000);  // past the rate-reduce monitor period: a second cut, R_T below line rate
  }
  for ([[maybe_unused]] auto _ : state) {
    now += 20;  // 20 ns per packet: the engine's order of magnitude
    if (rate.limited()) {
      benchmark::DoNotOptimize(rate.may_send(now));
      rate.on_sent(1100, now);
    }
    benchmark::DoNotOptimize(rate);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(state.range(0) != 0 ? "limited: clocks + bucket" : "at line rate: one branch");
}
BENCHMARK(BM_Pace)->Arg(0)->Arg(1);

}  // namespace
}  // namespace uroce::proto
