// The CM state machine as scenarios: two agents, an active one (the client) and a passive one (the server),
// joined by a test network that can lose, hold or forge MADs, on a clock the test moves.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proto/rdma_cm.h"
#include "proto/tests/cm_scenario.h"

namespace uroce::proto {
namespace {

using ::testing::ElementsAre;

TEST_F(CmScenario, ConnectAcceptEstablishDisconnectTimeWait) {
  const auto client_id = client.connect(request(), now);
  ASSERT_TRUE(client_id);
  deliver_all();
  auto events = server.take_events();
  ASSERT_THAT(types(events), ElementsAre(CmEventType::kRequest));
  const CmConnectParams& r = events[0].request;
  EXPECT_EQ(r.service_id, 0x0000000001061C06u);  // RDMA_PS_TCP, port 7174
  EXPECT_EQ(r.qpn, Qpn{0x11});
  EXPECT_EQ(r.starting_psn, Psn{0x123456});
  EXPECT_EQ(r.responder_resources, 16);
  EXPECT_EQ(r.initiator_depth, 8);
  EXPECT_EQ(r.path_mtu, 5);
  EXPECT_EQ(r.local_gid, kClientGid);
  EXPECT_EQ(r.peer_ca_guid, 0x0202C9FFFE000001u);
  ASSERT_EQ(r.private_data.size(), CmReq::private_data.kSize);
  const auto hdr = read_cma_hdr(std::span<const uint8_t, CmaHdr::kSize>(r.private_data.data(), CmaHdr::kSize));
  ASSERT_TRUE(hdr);
  EXPECT_EQ(hdr->source.port, 40000);
  EXPECT_EQ(hdr->destination, IpAddress{kServerGid});
  EXPECT_EQ(r.private_data[CmaHdr::kSize], 0xAB);

  const CmId server_id = events[0].id;
  ASSERT_EQ(server.accept(server_id, reply(), now), CmCallStatus::kOk);
  deliver_all();
  events = client.take_events();
  ASSERT_THAT(types(events), ElementsAre(CmEventType::kReply));
  EXPECT_EQ(events[0].id, *client_id);
  EXPECT_EQ(events[0].reply.qpn, Qpn{0x22});
  EXPECT_EQ(events[0].reply.starting_psn, Psn{0x654321});
  EXPECT_EQ(events[0].reply.responder_resources, 8);
  EXPECT_EQ(events[0].reply.initiator_depth, 16);
  EXPECT_THAT(std::vector<uint8_t>(events[0].reply.private_data.begin(), events[0].reply.private_data.begin() + 3),
              ElementsAre(1, 2, 3));

  ASSERT_EQ(client.establish(*client_id), CmCallStatus::kOk);
  deliver_all();
  EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kEstablished));

  ASSERT_EQ(client.disconnect(*client_id, now), CmCallStatus::kOk);
  deliver_all();
  EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kDisconnectRequest));
  EXPECT_THAT(types(client.take_events()), ElementsAre(CmEventType::kDisconnected));
  EXPECT_EQ(client.connections(), 1u);  // in time-wait
  advance(999);
  EXPECT_TRUE(client.take_events().empty());
  advance(1);
  EXPECT_THAT(types(client.take_events()), ElementsAre(CmEventType::kTimeWaitDone));
  EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kTimeWaitDone));
  EXPECT_EQ(client.connections(), 0u);
  EXPECT_EQ(server.connections(), 0u);
  EXPECT_EQ(client.counters().retransmits + server.counters().retransmits, 0u);
}

// IBTA Table 106 at the byte offsets of the MAD (cm-nvmf-dcqcn.md §1.4: MAD offset = message offset + 24).
TEST_F(CmScenario, RequestBytesFollowTable106) {
  ASSERT_TRUE(client.connect(request(Qpn{0xABCDEF}), now));
  ASSERT_EQ(client_env.sent.size(), 1u);
  const auto& b = client_env.sent.front().bytes;
  EXPECT_THAT(std::vector<uint8_t>(b.begin(), b.begin() + 4), ElementsAre(1, 0x07, 2, 0x03));  // v1, CM, v2, Send
  EXPECT_EQ(b[16], 0x00);
  EXPECT_EQ(b[17], 0x10);  // REQ
  EXPECT_THAT(std::vector<uint8_t>(b.begin() + 32, b.begin() + 40), ElementsAre(0, 0, 0, 0, 0x01, 0x06, 0x1C, 0x06));
  EXPECT_THAT(std::vector<uint8_t>(b.begin() + 40, b.begin() + 48),
              ElementsAre(0x02, 0x02, 0xC9, 0xFF, 0xFE, 0, 0, 1));                                       // CA GUID
  EXPECT_THAT(std::vector<uint8_t>(b.begin() + 56, b.begin() + 60), ElementsAre(0xAB, 0xCD, 0xEF, 16));  // QPN, RR
  EXPECT_EQ(b[63], 8);                     // initiator depth
  EXPECT_EQ(b[67], 18 << 3 | 0 << 1 | 1);  // remote CM response timeout, RC, end-to-end flow control
  EXPECT_THAT(std::vector<uint8_t>(b.begin() + 68, b.begin() + 71), ElementsAre(0x12, 0x34, 0x56));
  EXPECT_EQ(b[71], 18 << 3 | 7);  // local CM response timeout, retry count
  EXPECT_EQ(b[72], 0xFF);         // P_Key
  EXPECT_EQ(b[73], 0xFF);
  EXPECT_EQ(b[74], 5 << 4 | 7);  // path MTU 4096, RNR retry 7
  EXPECT_EQ(b[75], 15 << 4);     // max CM retries, no SRQ, RC
  EXPECT_THAT(std::vector<uint8_t>(b.begin() + 76, b.begin() + 80), ElementsAre(0xFF, 0xFF, 0xFF, 0xFF));
  EXPECT_TRUE(std::equal(kClientGid.begin(), kClientGid.end(), b.begin() + 80));
  EXPECT_TRUE(std::equal(kServerGid.begin(), kServerGid.end(), b.begin() + 96));
  EXPECT_EQ(b[117], 64);                    // hop limit
  EXPECT_EQ(b[164], 0x00);                  // cma_hdr version
  EXPECT_EQ(b[165], 0x40);                  // IPv4
  EXPECT_EQ(b[164 + CmaHdr::kSize], 0xAB);  // the consumer's private data
}

TEST_F(CmScenario, LostRequestReplyAndRtuAreRetransmitted) {
  int lost_req = 0;
  const auto client_id = client.connect(request(), now);
  deliver_all([&](const SentMad& m) { return m.attribute() == CmAttribute::kReq && lost_req++ == 0; });
  EXPECT_TRUE(server.take_events().empty());
  advance(client.next_deadline_ms() - now);  // the REQ goes again
  deliver_all();
  const auto req = server.take_events();
  ASSERT_THAT(types(req), ElementsAre(CmEventType::kRequest));

  int lost_rep = 0;
  ASSERT_EQ(server.accept(req[0].id, reply(), now), CmCallStatus::kOk);
  deliver_all([&](const SentMad& m) { return m.attribute() == CmAttribute::kRep && lost_rep++ == 0; });
  EXPECT_TRUE(client.take_events().empty());
  advance(server.next_deadline_ms() - now);
  deliver_all();
  ASSERT_THAT(types(client.take_events()), ElementsAre(CmEventType::kReply));

  // The RTU is lost: the server's next REP makes the client send it again.
  ASSERT_EQ(client.establish(*client_id), CmCallStatus::kOk);
  deliver_all([](const SentMad& m) { return m.attribute() == CmAttribute::kRtu; });
  EXPECT_TRUE(server.take_events().empty());
  advance(server.next_deadline_ms() - now);
  deliver_all();
  EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kEstablished));
  EXPECT_TRUE(client.take_events().empty());
  // The REQ (once lost, and again when its timer met the REP's), and the RTU; the REP on its timer, for the
  // duplicate REQ, and to recover the RTU.
  EXPECT_EQ(client.counters().retransmits, 3u);
  EXPECT_EQ(server.counters().retransmits, 3u);
  EXPECT_EQ(server.counters().rx_duplicate_req, 1u);
}

// IBTA 12.6.10: a passive side that sees the first packet on its QP before the RTU counts the connection as
// established; it sends no more REPs, and the late RTU changes nothing.
TEST_F(CmScenario, TheFirstPacketBeforeALostRtuEstablishesThePassiveSide) {
  const auto client_id = client.connect(request(), now);
  deliver_all();
  const auto req = server.take_events();
  ASSERT_THAT(types(req), ElementsAre(CmEventType::kRequest));
  EXPECT_EQ(server.notify_established(req[0].id), CmCallStatus::kInvalidState) << "no REP sent yet";
  ASSERT_EQ(server.accept(req[0].id, reply(), now), CmCallStatus::kOk);
  deliver_all();
  ASSERT_THAT(types(client.take_events()), ElementsAre(CmEventType::kReply));
  ASSERT_EQ(client.establish(*client_id), CmCallStatus::kOk);
  deliver_all([](const SentMad& m) { return m.attribute() == CmAttribute::kRtu; });
  EXPECT_EQ(server.notify_established(req[0].id), CmCallStatus::kOk);
  EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kEstablished));
  EXPECT_EQ(server.next_deadline_ms(), UINT64_MAX) << "no REP retransmission left";
  advance(60'000);
  EXPECT_TRUE(server_env.sent.empty());
  EXPECT_EQ(server.notify_established(req[0].id), CmCallStatus::kOk) << "idempotent";
  EXPECT_TRUE(server.take_events().empty());
}

TEST_F(CmScenario, DuplicateRequestWhileTheServerDecidesGetsAnMraThatHoldsTheClientsTimer) {
  ASSERT_TRUE(client.connect(request(), now));
  const uint64_t request_tid = client_env.sent.front().tid();
  deliver_all();
  const auto req = server.take_events();
  ASSERT_EQ(req.size(), 1u);
  advance(client.next_deadline_ms() - now);  // the REQ again: the server is still deciding
  ASSERT_EQ(client_env.sent.size(), 1u);
  server.on_mad(client_env.sent.front().bytes, kClientGid, kServerGid, kClientRoute, now);
  client_env.sent.clear();
  EXPECT_TRUE(server.take_events().empty()) << "a duplicate REQ is not a second connection";
  EXPECT_EQ(server.counters().rx_duplicate_req, 1u);
  ASSERT_EQ(server_env.sent.size(), 1u);
  EXPECT_EQ(server_env.sent.front().attribute(), CmAttribute::kMra);
  EXPECT_EQ(server_env.sent.front().tid(), request_tid);  // an MRA answering a REQ reuses its TID
  deliver_all();
  // MRA service timeout 24 (2^16 ms) plus a packet life time before the client tries again.
  EXPECT_EQ(client.next_deadline_ms(), now + (uint64_t{1} << 16) + (1 << 8));
  ASSERT_EQ(server.accept(req[0].id, reply(), now), CmCallStatus::kOk);
  deliver_all();
  EXPECT_THAT(types(client.take_events()), ElementsAre(CmEventType::kReply));
}

TEST_F(CmScenario, RejectCarriesReasonAndPrivateDataAndLeavesNothing) {
  ASSERT_TRUE(client.connect(request(), now));
  deliver_all();
  const auto req = server.take_events();
  const std::vector<uint8_t> why = {0x0B, 0x00, 0x02};  // e.g. NVMe/RDMA's reject record
  ASSERT_EQ(server.reject(req.at(0).id, CmRejectReason::kConsumerDefined, why), CmCallStatus::kOk);
  deliver_all();
  const auto events = client.take_events();
  ASSERT_THAT(types(events), ElementsAre(CmEventType::kRejected));
  EXPECT_EQ(events[0].reason, CmRejectReason::kConsumerDefined);
  EXPECT_THAT(std::vector<uint8_t>(events[0].private_data.begin(), events[0].private_data.begin() + 3),
              ElementsAre(0x0B, 0x00, 0x02));
  EXPECT_EQ(client.connections(), 0u);
  EXPECT_EQ(server.connections(), 0u);
  EXPECT_EQ(client.next_deadline_ms(), UINT64_MAX);
}

TEST_F(CmScenario, AnUnansweredRequestTimesOutAfterEveryRetry) {
  ASSERT_TRUE(client.connect(request(), now));
  for (int i = 0; i < 15; ++i) {
    advance(client.next_deadline_ms() - now);
    EXPECT_TRUE(client.take_events().empty());
  }
  advance(client.next_deadline_ms() - now);
  EXPECT_THAT(types(client.take_events()), ElementsAre(CmEventType::kTimeout));
  EXPECT_EQ(client_env.sent.size(), 16u);  // the REQ and 15 retries (max CM retries)
  EXPECT_EQ(client.connections(), 0u);
  EXPECT_EQ(client.counters().timeouts, 1u);
}

TEST_F(CmScenario, AnUnansweredReplyTimesOutWithARejectToThePeer) {
  ASSERT_TRUE(client.connect(request(), now));
  deliver_all();
  const auto req = server.take_events();
  ASSERT_EQ(server.accept(req.at(0).id, reply(), now), CmCallStatus::kOk);
  server_env.sent.clear();
  while (server.next_deadline_ms() != UINT64_MAX) advance(server.next_deadline_ms() - now);
  EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kTimeout));
  ASSERT_FALSE(server_env.sent.empty());
  EXPECT_EQ(server_env.sent.back().attribute(), CmAttribute::kRej);
  EXPECT_EQ(server_env.sent.back().get(CmRej::reason), static_cast<uint16_t>(CmRejectReason::kTimeout));
}

TEST_F(CmScenario, SimultaneousDisconnectsBothComplete) {
  const auto [client_id, server_id] = establish_connection();
  ASSERT_EQ(client.disconnect(client_id, now), CmCallStatus::kOk);
  ASSERT_EQ(server.disconnect(server_id, now), CmCallStatus::kOk);
  deliver_all();
  EXPECT_THAT(types(client.take_events()), ElementsAre(CmEventType::kDisconnected));
  EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kDisconnected));
}

TEST_F(CmScenario, AnUnansweredDisconnectTimesOutIntoTimeWait) {
  const auto [client_id, server_id] = establish_connection();
  ASSERT_EQ(client.disconnect(client_id, now), CmCallStatus::kOk);
  client_env.sent.clear();
  for (int i = 0; i < 16; ++i) advance(client.next_deadline_ms() - now);
  auto events = client.take_events();
  ASSERT_THAT(types(events), ElementsAre(CmEventType::kDisconnected));
  EXPECT_TRUE(events[0].timed_out);
  advance(client.next_deadline_ms() - now);
  EXPECT_THAT(types(client.take_events()), ElementsAre(CmEventType::kTimeWaitDone));
  (void)server_id;
}

TEST_F(CmScenario, AStaleQpnIsRejectedAndTheOldConnectionEnds) {
  const auto [client_id, server_id] = establish_connection();
  server.on_mad(request_after_restart(), kClientGid, kServerGid, kClientRoute, now);
  ASSERT_GE(server_env.sent.size(), 1u);
  EXPECT_EQ(server_env.sent.front().attribute(), CmAttribute::kRej);
  EXPECT_EQ(server_env.sent.front().get(CmRej::reason), static_cast<uint16_t>(CmRejectReason::kStaleConnection));
  const auto events = server.take_events();
  ASSERT_THAT(types(events), ElementsAre(CmEventType::kDisconnectRequest));
  EXPECT_EQ(events[0].id, server_id);
  EXPECT_EQ(server.counters().req_rejected, 1u);
  (void)client_id;
}

// The stale-QPN REQ of AStaleQpnIsRejectedAndTheOldConnectionEnds, from another address: a host that names the
// client's QPN, CA GUID and even its communication ID does not end the client's connection (nothing reaches the
// client, no event for the server's connection); its REQ is a request of its own.
TEST_F(CmScenario, ARequestFromAnotherAddressNamingThePeersQpnEndsNothing) {
  const auto [client_id, server_id] = establish_connection();
  const Gid elsewhere = IpAddress::from_ipv4(0xC6120009).gid;  // 198.18.0.9
  RecordingEnv impostor_env{12345};
  CmAgent impostor(params(0x0202C9FFFE000001), &impostor_env);  // the client's CA GUID
  CmConnectParams r = request();                                // the client's QPN
  r.local_gid = elsewhere;
  ASSERT_TRUE(impostor.connect(r, now));
  const auto fresh_id = impostor_env.sent.front().bytes;
  auto client_comm_id = fresh_id;
  CmMutView<CmReq>(client_comm_id.data()).set(CmReq::local_comm_id, client_id);
  for (const auto& req : {fresh_id, client_comm_id}) {
    server.on_mad(req, elsewhere, kServerGid, kNeighbourRoute, now);
    for (const SentMad& m : server_env.sent) EXPECT_NE(m.to, kClientGid) << "nothing for the client";
    const auto events = server.take_events();
    ASSERT_THAT(types(events), ElementsAre(CmEventType::kRequest));
    EXPECT_NE(events[0].id, server_id);
    EXPECT_EQ(server.reject(events[0].id, CmRejectReason::kConsumerDefined, {}), CmCallStatus::kOk);
    server_env.sent.clear();
  }
  EXPECT_EQ(server.counters().rx_duplicate_req, 0u);

  // The client's connection goes on: its own DREQ ends it.
  ASSERT_EQ(client.disconnect(client_id, now), CmCallStatus::kOk);
  deliver_all();
  EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kDisconnectRequest));
  EXPECT_THAT(types(client.take_events()), ElementsAre(CmEventType::kDisconnected));
}

// The stale-QPN REQ of AStaleQpnIsRejectedAndTheOldConnectionEnds with the client's own address, QPN and CA GUID
// (none of them secret: a neighbour learns the MAC, hence the GUID, from ARP, and QPNs are guessable), from a
// neighbour that sends with that address: its route is not the connection's, so it gets the REJ and ends nothing.
TEST_F(CmScenario, AStaleRequestByAnotherRouteEndsNothing) {
  const auto [client_id, server_id] = establish_connection();
  server.on_mad(request_after_restart(), kClientGid, kServerGid, kNeighbourRoute, now);
  ASSERT_EQ(server_env.sent.size(), 1u);
  EXPECT_EQ(server_env.sent.front().get(CmRej::reason), static_cast<uint16_t>(CmRejectReason::kStaleConnection));
  EXPECT_EQ(server_env.sent.front().route, kNeighbourRoute);
  server_env.sent.clear();
  EXPECT_TRUE(server.take_events().empty()) << "the connection goes on";
  ASSERT_EQ(client.disconnect(client_id, now), CmCallStatus::kOk);
  deliver_all();
  EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kDisconnectRequest));
  (void)server_id;
}

// A REJ with reason Timeout withdraws a REQ by the peer's own ID and CA GUID (12.6.7.2), nothing secret: from a
// neighbour's route, or naming another ID as ours, it ends nothing; the client's own ends the request.
TEST_F(CmScenario, AWithdrawingRejectCountsOnlyByTheConnectionsRoute) {
  const auto client_id = client.connect(request(), now);
  ASSERT_TRUE(client_id.has_value());
  deliver_all();
  ASSERT_THAT(types(server.take_events()), ElementsAre(CmEventType::kRequest));
  const auto withdrawal = [&](CmId ours) {
    std::array<uint8_t, kMadSize> rej = cm_send_mad(CmAttribute::kRej, 0x77);
    CmMutView<CmRej> v(rej.data());
    v.set(CmRej::local_comm_id, *client_id);
    v.set(CmRej::remote_comm_id, ours);
    v.set(CmRej::reason, static_cast<uint16_t>(CmRejectReason::kTimeout));
    const uint64_t guid = 0x0202C9FFFE000001;
    for (int i = 0; i < 8; ++i)
      rej[CmRej::additional_reject_info.kOffset + i] = static_cast<uint8_t>(guid >> (56 - 8 * i));
    return rej;
  };
  const uint64_t unmatched = server.counters().rx_unmatched;
  server.on_mad(withdrawal(0), kClientGid, kServerGid, kNeighbourRoute, now);
  server.on_mad(withdrawal(0x1234), kClientGid, kServerGid, kClientRoute, now);
  EXPECT_TRUE(server.take_events().empty());
  EXPECT_EQ(server.counters().rx_unmatched, unmatched + 2);
  EXPECT_EQ(server.connections(), 1u);
  server.on_mad(withdrawal(0), kClientGid, kServerGid, kClientRoute, now);
  EXPECT_EQ(server.take_events().size(), 1u);
}

TEST_F(CmScenario, DestroyedConnectionsReportOnlyTheEndOfTimeWait) {
  const auto [client_id, server_id] = establish_connection();
  client.destroy(client_id, now);
  ASSERT_EQ(client_env.sent.size(), 1u);
  EXPECT_EQ(client_env.sent.front().attribute(), CmAttribute::kDreq);
  deliver_all();
  EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kDisconnectRequest));
  EXPECT_TRUE(client.take_events().empty());
  advance(1000);
  EXPECT_THAT(types(client.take_events()), ElementsAre(CmEventType::kTimeWaitDone));
  EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kTimeWaitDone));
  (void)server_id;

  // A REQ withdrawn before any answer: a REJ, and the server forgets it.
  const auto second = client.connect(request(Qpn{0x33}), now);
  deliver_all();
  ASSERT_THAT(types(server.take_events()), ElementsAre(CmEventType::kRequest));
  client.destroy(*second, now);
  deliver_all();
  EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kRejected));
  EXPECT_EQ(client.connections(), 0u);
}

TEST(RdmaCm, ServiceIdsAndCmaHeader) {
  EXPECT_EQ(rdma_cm_service_id(4420), 0x0000000001061144u);
  EXPECT_TRUE(is_rdma_cm_service_id(0x0000000001061144u));
  EXPECT_FALSE(is_rdma_cm_service_id(0x0000000001111144u));  // the UDP port space
  EXPECT_EQ(rdma_cm_port(0x0000000001061144u), 4420);

  std::array<uint8_t, CmaHdr::kSize> hdr{};
  write_cma_hdr(hdr, {IpAddress::from_ipv4(0xC6120001), 0x1234}, {IpAddress::from_ipv4(0xC6120002), 4420});
  EXPECT_THAT(std::vector<uint8_t>(hdr.begin(), hdr.begin() + 4), ElementsAre(0, 0x40, 0x12, 0x34));
  EXPECT_THAT(std::vector<uint8_t>(hdr.begin() + 4, hdr.begin() + 20),
              ElementsAre(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 198, 18, 0, 1));
  const auto f = read_cma_hdr(hdr);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->source.address.ipv4(), 0xC6120001u);
  EXPECT_EQ(f->source.port, 0x1234);
  EXPECT_EQ(f->destination.ipv4(), 0xC6120002u);

  hdr[0] = 1;  // cma_version
  EXPECT_FALSE(read_cma_hdr(hdr));
  hdr[0] = 0;
  hdr[1] = 0x50;  // IP version 5
  EXPECT_FALSE(read_cma_hdr(hdr));
}

}  // namespace
}  // namespace uroce::proto
