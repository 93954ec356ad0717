// The requester's completer against what a peer answers: ACKs, NAKs and RNR NAKs whose PSNs, syndromes and
// timing the peer chooses. What it answers must never cost the connection more than the rule it invokes allows.
#include <gtest/gtest.h>

#include <vector>

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

// A READ response B did not send: from B's address to A's QP, with the PSN, opcode and payload the peer chooses.
std::vector<uint8_t> forged_read_response(Opcode op, Psn psn, uint32_t payload_length, uint8_t syndrome = 0x1F) {
  const std::vector<uint8_t> payload(payload_length, 0xEE);
  PacketSpec s = b_to_a_spec();
  s.opcode = op;
  s.psn = psn;
  s.aeth.syndrome = syndrome;
  s.payload = payload;
  std::vector<uint8_t> frame(packet_size(s));
  EXPECT_NE(build_packet(s, frame), 0u);
  return frame;
}

// IBTA 9.7.5.1.6: READ responses come in the READ's own PSN range, and the one at its last PSN ends it. A peer that
// answers past that range, or ends a READ early, makes an invalid response: the READ completes with
// kBadResponse and nothing after it completes as if answered. Before the check, both sequences below completed the
// READ as a success: the first without placing its data (and then resent a later 64-byte SEND from an offset past
// its end, as PMTU-sized packets of whatever the buffers held), the second with more than a PMTU in one response.
TEST(CompleterReadResponse, AResponseOutsideTheReadsPsnRangeOrEndingItEarlyIsInvalid) {
  struct Case {
    const char* what;
    uint32_t mtu;
    std::vector<std::pair<Opcode, uint32_t>> responses;  // from the READ's first PSN on
  };
  const std::vector<Case> cases = {
      {"two MIDDLEs, then an ONLY at the next request's PSN",
       1024,
       {{Opcode::kRcRdmaReadResponseMiddle, 1024},
        {Opcode::kRcRdmaReadResponseMiddle, 1024},
        {Opcode::kRcRdmaReadResponseOnly, 0}}},
      {"one ONLY of the whole READ, longer than the PMTU", 256, {{Opcode::kRcRdmaReadResponseOnly, 512}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    SimNetwork net(sim_attrs(c.mtu));
    Region& local = net.a().add_region(4096, kAll);
    Region& sent = net.a().add_region(64, kAll, 0x5A);
    Region& remote = net.b().add_region(4096, kAll);
    const uint32_t read_length = c.mtu * 2;
    ASSERT_TRUE(net.a().post_send(rdma_wqe(WorkOp::kRdmaRead, local, read_length, remote, 1)));
    ASSERT_TRUE(net.a().post_send(rdma_wqe(WorkOp::kRdmaWrite, sent, 64, remote, 2)));
    net.a().qp.send(32);
    ASSERT_EQ(take(net.a()).size(), 2u);  // the READ request (PSNs 0x100, 0x101) and the WRITE (0x102)
    Psn psn{0x100};
    for (const auto& [op, length] : c.responses) {
      deliver(net.a(), forged_read_response(op, psn, length));
      psn = psn + 1;
    }
    ASSERT_FALSE(net.a().send_completions.empty());
    EXPECT_EQ(net.a().send_completions.front().context, 1u);
    EXPECT_EQ(net.a().send_completions.front().status, CompletionStatus::kBadResponse);
    EXPECT_EQ(net.a().qp.state(), QpState::kError);
    for (const Completion& done : net.a().send_completions) EXPECT_NE(done.status, CompletionStatus::kSuccess);
  }
}

// IBTA 9.7.5.2: an AETH syndrome with bit 7 set, of the reserved kind (0b10) or with a reserved NAK code (5..31)
// names nothing to do, and a READ response carries an ACK syndrome. Such a response is counted and dropped; before
// the check a reserved one failed the QP with a remote operational error, and a NAK-coded READ response was placed.
TEST(CompleterAeth, ReservedSyndromesAndNaksOnReadResponsesAreDropped) {
  SimNetwork net(sim_attrs());
  Region& local = net.a().add_region(4096, kAll);
  Region& remote = net.b().add_region(4096, kAll);
  ASSERT_TRUE(net.a().post_send(rdma_wqe(WorkOp::kRdmaRead, local, 64, remote, 1)));
  net.a().qp.send(32);
  ASSERT_EQ(take(net.a()).size(), 1u);  // the READ request, PSN 0x100
  for (const uint8_t syndrome : {uint8_t{0x40}, uint8_t{0x65}, uint8_t{0x9F}})
    deliver(net.a(), forged_read_response(Opcode::kRcAcknowledge, Psn{0x100}, 0, syndrome));
  deliver(net.a(), forged_read_response(Opcode::kRcRdmaReadResponseOnly, Psn{0x100}, 64, 0x63));
  EXPECT_EQ(net.a().qp.counters().req_invalid_aeth, 4u);
  EXPECT_EQ(net.a().qp.state(), QpState::kReadyToSend);
  EXPECT_TRUE(net.a().send_completions.empty());
  EXPECT_EQ(local.bytes[0], 0) << "nothing placed";
  // The real response still completes the READ.
  deliver(net.a(), forged_read_response(Opcode::kRcRdmaReadResponseOnly, Psn{0x100}, 64));
  ASSERT_EQ(net.a().send_completions.size(), 1u);
  EXPECT_EQ(net.a().send_completions.front().status, CompletionStatus::kSuccess);
}

// rocev2.md §4.5 and §4.9: a NAK at PSN n acknowledges only what lies before n. While a READ waits for its response at
// n, the responses before n having arrived, a NAK at n acknowledges nothing new: it was taken for an implied NAK of a
// lost response, and the READ was asked again for its tail while the NAK's own rule (here: a remote access error,
// which fails the READ) went unheard. And NAK code 4 (Invalid RD Request) is Reliable Datagram's: on RC it is
// reserved, dropped and counted like codes 5 to 31.
TEST(CompleterNak, ANakAtTheResponseAReadWaitsForAppliesItsOwnRule) {
  SimNetwork net(sim_attrs(1024));
  Region& local = net.a().add_region(4096, kAll);
  Region& remote = net.b().add_region(4096, kAll);
  ASSERT_TRUE(net.a().post_send(rdma_wqe(WorkOp::kRdmaRead, local, 3 * 1024, remote, 1)));
  net.a().qp.send(32);
  ASSERT_EQ(take(net.a()).size(), 1u);  // the READ request: PSNs 0x100 to 0x102
  deliver(net.a(), forged_read_response(Opcode::kRcRdmaReadResponseFirst, Psn{0x100}, 1024));
  deliver(net.a(), forged_read_response(Opcode::kRcRdmaReadResponseMiddle, Psn{0x101}, 1024));
  deliver(net.a(), forged_read_response(Opcode::kRcAcknowledge, Psn{0x102}, 0, 0x64));  // Invalid RD Request
  EXPECT_EQ(net.a().qp.counters().req_invalid_aeth, 1u);
  EXPECT_EQ(net.a().qp.state(), QpState::kReadyToSend);
  EXPECT_TRUE(take(net.a()).empty()) << "nothing asked again";

  deliver(net.a(), forged_read_response(Opcode::kRcAcknowledge, Psn{0x102}, 0, 0x62));  // remote access error
  ASSERT_EQ(net.a().send_completions.size(), 1u);
  EXPECT_EQ(net.a().send_completions.front().status, CompletionStatus::kRemoteAccessError);
  EXPECT_EQ(net.a().qp.state(), QpState::kError);
}

}  // namespace
}  // namespace uroce::proto
