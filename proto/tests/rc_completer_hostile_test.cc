// The requester's completer against what a peer answers: ACKs, NAKs and RNR NAKs whose PSNs, syndromes and
// timing the peer chooses. What it answers must never cost the connection more than the rule it invokes allows.
#include <gtest/gtest.h>

#include "proto/tests/rc_sim_requests.h"

namespace uroce::proto {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace): the simulation's helpers

constexpr uint32_t kAll = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

// rnr_retry bounds the RNR NAKs one message meets, not those of the connection's whole life: each message that
// completes gives the next the full count again (IBTA 9.7.5.2.8; rxe's reset_retry_counters). A receiver that was
// briefly short of receive buffers twice must not make the third short moment fatal.
TEST(CompleterRnr, EachMessageGetsTheFullRnrRetryCount) {
  RcQpAttributes a = sim_attrs();
  a.rnr_retry = 2;
  SimNetwork net(a);
  Region& src = net.a().add_region(100, kAll);
  Region& dst = net.b().add_region(100, kAll);
  for (uint64_t message = 1; message <= 3; ++message) {
    SCOPED_TRACE(message);
    const uint64_t naks_before = net.a().qp.counters().rnr_nak_received;
    ASSERT_TRUE(net.a().post_send(wqe(WorkOp::kSend, src, 100, message)));
    // No receive yet: B RNR-NAKs the SEND twice, which rnr_retry 2 allows.
    ASSERT_TRUE(net.run([&] { return net.a().qp.counters().rnr_nak_received == naks_before + 2; }));
    EXPECT_EQ(net.a().qp.state(), QpState::kReadyToSend);
    ASSERT_EQ(net.a().send_completions.size(), message - 1);
    net.b().post_receive(recv_wqe(dst, 100, message));
    ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == message; }));
    EXPECT_EQ(net.a().send_completions.back().status, CompletionStatus::kSuccess);
  }
  EXPECT_EQ(net.a().qp.counters().rnr_nak_retry_err, 0u);
}

}  // namespace
}  // namespace uroce::proto
