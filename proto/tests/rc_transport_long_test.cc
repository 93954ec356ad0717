// RC regressions that need millions of packets, kept out of proto_unit (STYLE.md 17): they run
// as proto_long, in the soak suite with its own time budget.
#include <gtest/gtest.h>

#include "proto/tests/rc_sim.h"

namespace uroce::proto {
namespace {

// A QP keeps working after more than 2^23 PSNs: the highest PSN sent must follow the
// acknowledgements, or after half the sequence space every ACK looks like it is for a
// PSN never sent (found by the bench: ACKs dropped after 8388608 packets).
//
// It has to send the 2^23 packets. The stale limit sits at the PSN connect() started from,
// so the failure depends on the distance from there, not on where in the sequence space the
// QP starts: started just before PSN 2^23 (or any other), a short run passes with the bug
// in place. At PMTU 256 each packet carries 256 bytes, the least a 1 MiB WRITE allows,
// which makes the run a third of the time it takes at PMTU 4096.
TEST(RcTransportLong, AcknowledgementsStillCountAfterTwoToTheTwentyThreePsns) {
  RcQpAttributes attrs;
  attrs.path_mtu = 256;
  attrs.send_psn = Psn{0x100};
  attrs.receive_psn = Psn{0xABC};
  attrs.ack_timeout = 10;  // ~4 ms of simulated time
  testing::SimNetwork net(attrs, 64);
  net.keep_wire_log = false;
  constexpr uint32_t kAll = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  constexpr uint32_t kLength = 1 << 20;
  testing::Region& src = net.a().add_region(kLength, kAll);
  testing::Region& dst = net.b().add_region(kLength, kAll);
  // 1 MiB WRITEs at PMTU 256 are 4096 packets each: exactly 2^23 PSNs take 2048 of them,
  // so the last ACK names the PSN just before the half-space boundary.
  constexpr uint64_t kWrites = (uint64_t{1} << 23) / (kLength / 256);
  uint64_t posted = 0;
  ASSERT_TRUE(net.run(
      [&] {
        while (posted < kWrites) {
          SendWqe w;
          w.context = posted;
          w.op = WorkOp::kRdmaWrite;
          w.flags = posted + 1 == kWrites ? kWqeSignaled : 0;
          w.num_sge = 1;
          w.length = kLength;
          w.sge[0] = {src.addr(), kLength, LocalToken{src.key}};
          w.remote_addr = dst.addr();
          w.rkey = RemoteToken{dst.key};
          if (!net.a().post_send(w)) break;
          ++posted;
        }
        return !net.a().send_completions.empty();
      },
      100'000'000));
  EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(net.a().send_completions[0].context, kWrites - 1);
  EXPECT_EQ(net.a().qp.counters().local_ack_timeout_err, 0u);
}

}  // namespace
}  // namespace uroce::proto
