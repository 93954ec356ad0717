// The CM agent against bad input: malformed MADs, requests it cannot serve, messages for connections it does not
// have, MADs from another route, peer timers past reason, requests the consumer never answers, duplicate REPs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proto/tests/cm_scenario.h"

namespace uroce::proto {
namespace {

using ::testing::ElementsAre;

TEST_F(CmHostile, MalformedMadsAreCountedAndDropped) {
  auto req = valid_req();
  server.on_mad(std::span<const uint8_t>(req.data(), 255), kClientGid, kServerGid, kClientRoute, now);
  server.on_mad(std::span<const uint8_t>(), kClientGid, kServerGid, kClientRoute, now);
  auto bad = req;
  bad[0] = 2;  // base version
  server.on_mad(bad, kClientGid, kServerGid, kClientRoute, now);
  bad = req;
  bad[1] = 0x04;  // not the CM class
  server.on_mad(bad, kClientGid, kServerGid, kClientRoute, now);
  bad = req;
  bad[2] = 1;  // CM class version 1
  server.on_mad(bad, kClientGid, kServerGid, kClientRoute, now);
  EXPECT_EQ(server.counters().rx_malformed, 5u);
  bad = req;
  bad[17] = 0x17;  // SIDR_REQ
  server.on_mad(bad, kClientGid, kServerGid, kClientRoute, now);
  bad = req;
  bad[17] = 0x7F;  // no such attribute
  server.on_mad(bad, kClientGid, kServerGid, kClientRoute, now);
  bad = req;
  bad[3] = 0x81;  // a GetResponse nobody asked for
  server.on_mad(bad, kClientGid, kServerGid, kClientRoute, now);
  EXPECT_EQ(server.counters().rx_unsupported, 3u);
  EXPECT_TRUE(server.take_events().empty());
  EXPECT_TRUE(server_env.sent.empty());
  EXPECT_EQ(server.connections(), 0u);
}

TEST_F(CmHostile, RequestsTheCmCannotServeAreRejectedWithTheReason) {
  const auto req = valid_req();
  struct Case {
    const char* what;
    std::function<void(std::array<uint8_t, kMadSize>&)> spoil;
    CmRejectReason reason;
  };
  const Case cases[] = {
      {"UC", [](auto& b) { CmMutView<CmReq>(b.data()).set(CmReq::transport_service_type, 1); },
       CmRejectReason::kInvalidTransportType},
      {"MTU code 0", [](auto& b) { CmMutView<CmReq>(b.data()).set(CmReq::path_mtu, 0); }, CmRejectReason::kInvalidMtu},
      {"MTU code 6", [](auto& b) { CmMutView<CmReq>(b.data()).set(CmReq::path_mtu, 6); }, CmRejectReason::kInvalidMtu},
      {"a source GID other than the sender's", [](auto& b) { b[CmReq::primary_local_gid.kOffset + 15] ^= 1; },
       CmRejectReason::kInvalidGid},
      {"a destination GID not ours", [](auto& b) { b[CmReq::primary_remote_gid.kOffset + 15] ^= 1; },
       CmRejectReason::kInvalidGid},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto bad = req;
    c.spoil(bad);
    server.on_mad(bad, kClientGid, kServerGid, kClientRoute, now);
    const SentMad rej = only_reply();
    EXPECT_EQ(rej.attribute(), CmAttribute::kRej);
    EXPECT_EQ(rej.tid(), CmView<Mad>(req.data()).get(Mad::transaction_id));
    EXPECT_EQ(rej.get(CmRej::reason), static_cast<uint16_t>(c.reason));
    EXPECT_EQ(rej.get(CmRej::remote_comm_id), CmView<CmReq>(req.data()).get(CmReq::local_comm_id));
    EXPECT_EQ(rej.to, kClientGid);
    EXPECT_TRUE(server.take_events().empty());
  }
  EXPECT_EQ(server.connections(), 0u);
}

TEST_F(CmHostile, NoRoomForAnotherConnectionIsARejectNotACrash) {
  RecordingEnv env{5};
  CmParams p = params(0x99);
  p.max_connections = 1;
  CmAgent small(p, &env);
  auto req = valid_req();
  small.on_mad(req, kClientGid, kServerGid, kClientRoute, now);
  CmMutView<CmReq>(req.data()).set(CmReq::local_comm_id, 0x5555);
  CmMutView<CmReq>(req.data()).set(CmReq::local_qpn, Qpn{0x44});
  small.on_mad(req, kClientGid, kServerGid, kClientRoute, now);
  EXPECT_EQ(small.connections(), 1u);
  ASSERT_EQ(env.sent.size(), 1u);
  EXPECT_EQ(CmView<CmRej>(env.sent.front().bytes.data()).get(CmRej::reason),
            static_cast<uint16_t>(CmRejectReason::kNoResources));
}

TEST_F(CmHostile, MessagesForConnectionsWeDoNotHave) {
  const auto [client_id, server_id] = establish_connection();
  // A REP for no REQ: REJ "invalid communication ID" (12.6.8).
  std::array<uint8_t, kMadSize> rep = cm_send_mad(CmAttribute::kRep, 0);
  CmMutView<CmRep>(rep.data()).set(CmRep::remote_comm_id, 0xDEAD);
  CmMutView<CmRep>(rep.data()).set(CmRep::local_comm_id, 0xBEEF);
  client.on_mad(rep, kServerGid, kClientGid, kServerRoute, now);
  const SentMad rej = client_env.sent.back();
  client_env.sent.clear();
  EXPECT_EQ(rej.attribute(), CmAttribute::kRej);
  EXPECT_EQ(rej.get(CmRej::reason), static_cast<uint16_t>(CmRejectReason::kInvalidCommId));
  EXPECT_EQ(rej.get(CmRej::remote_comm_id), 0xBEEFu);

  // A DREQ for an unknown ID still gets its DREP (12.9.8.5), with the IDs swapped.
  auto dreq = rep;
  CmMutView<Mad>(dreq.data()).set(Mad::attribute_id, CmAttribute::kDreq);
  CmMutView<CmDreq>(dreq.data()).set(CmDreq::local_comm_id, 0x1234);
  CmMutView<CmDreq>(dreq.data()).set(CmDreq::remote_comm_id, 0x5678);
  server.on_mad(dreq, kClientGid, kServerGid, kClientRoute, now);
  const SentMad drep = only_reply();
  EXPECT_EQ(drep.attribute(), CmAttribute::kDrep);
  EXPECT_EQ(drep.get(CmDrep::local_comm_id), 0x5678u);
  EXPECT_EQ(drep.get(CmDrep::remote_comm_id), 0x1234u);

  // A DREQ that names the connection but not our QPN is dropped, as Linux does.
  CmMutView<CmDreq>(dreq.data()).set(CmDreq::local_comm_id, client_id);
  CmMutView<CmDreq>(dreq.data()).set(CmDreq::remote_comm_id, server_id);
  CmMutView<CmDreq>(dreq.data()).set(CmDreq::remote_qpn, Qpn{0x999});
  server.on_mad(dreq, kClientGid, kServerGid, kClientRoute, now);
  EXPECT_EQ(server.counters().rx_dreq_wrong_qpn, 1u);

  // The right IDs from another GID: not the peer, dropped (and answered only as an unknown ID would be).
  CmMutView<CmDreq>(dreq.data()).set(CmDreq::remote_qpn, Qpn{0x22});
  Gid elsewhere = kClientGid;
  elsewhere[15] = 9;
  server.on_mad(dreq, elsewhere, kServerGid, kNeighbourRoute, now);
  server_env.sent.clear();
  EXPECT_TRUE(server.take_events().empty()) << "a third party cannot disconnect the connection";

  // An RTU or DREP for nothing: counted, no answer.
  auto rtu = rep;
  CmMutView<Mad>(rtu.data()).set(Mad::attribute_id, CmAttribute::kRtu);
  server.on_mad(rtu, kClientGid, kServerGid, kClientRoute, now);
  EXPECT_TRUE(server_env.sent.empty());

  // The genuine DREQ still works.
  ASSERT_EQ(client.disconnect(client_id, now), CmCallStatus::kOk);
  deliver_all();
  EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kDisconnectRequest));
}

// A neighbour on the link that sends with the client's GID, whatever its MADs say, is answered where it is and
// steers nothing: the server's connection keeps the route its REQ came by, for the consumer's QP and for every MAD
// of the connection, and nothing of the neighbour's MADs is kept.
TEST_F(CmHostile, MadsFromAnotherRouteDoNotSteerAConnection) {
  ASSERT_TRUE(client.connect(request(), now));
  const SentMad req = client_env.sent.front();
  EXPECT_EQ(req.route, kServerRoute) << "the REQ goes by connect()'s route";
  deliver_all();
  const auto requests = server.take_events();
  ASSERT_THAT(types(requests), ElementsAre(CmEventType::kRequest));
  EXPECT_EQ(requests[0].request.route, kClientRoute) << "the route the REQ came by";
  const CmId server_id = requests[0].id;

  // The client's REQ again (a duplicate while the server decides: an MRA for the client), a DREQ for no connection
  // (a DREP for the neighbour), and 256 bytes of anything (dropped).
  server.on_mad(req.bytes, kClientGid, kServerGid, kNeighbourRoute, now);
  std::array<uint8_t, kMadSize> dreq = cm_send_mad(CmAttribute::kDreq, 0);
  CmMutView<CmDreq>(dreq.data()).set(CmDreq::remote_comm_id, server_id + 1);
  server.on_mad(dreq, kClientGid, kServerGid, kNeighbourRoute, now);
  std::array<uint8_t, kMadSize> junk;
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<uint8_t>(i * 37 + 11);
  server.on_mad(junk, kClientGid, kServerGid, kNeighbourRoute, now);
  ASSERT_EQ(server_env.sent.size(), 2u);
  EXPECT_EQ(server_env.sent[0].attribute(), CmAttribute::kMra);
  EXPECT_EQ(server_env.sent[0].route, kClientRoute);
  EXPECT_EQ(server_env.sent[1].attribute(), CmAttribute::kDrep);
  EXPECT_EQ(server_env.sent[1].route, kNeighbourRoute) << "an answer that belongs to no connection";
  server_env.sent.clear();
  EXPECT_EQ(server.connections(), 1u);
  EXPECT_TRUE(server.take_events().empty());

  // The connection's REP, its retransmission and its DREQ still go to the client.
  ASSERT_EQ(server.accept(server_id, reply(), now), CmCallStatus::kOk);
  server.on_mad(req.bytes, kClientGid, kServerGid, kNeighbourRoute, now);  // the REP again
  ASSERT_EQ(server_env.sent.size(), 2u);
  for (const SentMad& m : server_env.sent) {
    EXPECT_EQ(m.attribute(), CmAttribute::kRep);
    EXPECT_EQ(m.route, kClientRoute);
  }
  deliver_all();
  ASSERT_EQ(client.establish(client.take_events().at(0).id), CmCallStatus::kOk);
  deliver_all();
  ASSERT_THAT(types(server.take_events()), ElementsAre(CmEventType::kEstablished));
  ASSERT_EQ(server.disconnect(server_id, now), CmCallStatus::kOk);
  ASSERT_EQ(server_env.sent.size(), 1u);
  EXPECT_EQ(server_env.sent.front().attribute(), CmAttribute::kDreq);
  EXPECT_EQ(server_env.sent.front().route, kClientRoute);
}

// The longest times a peer can ask for (time code 31: 2.4 hours a try, 15 retries) are cut to 67 s a try, and the
// whole exchange to 3 minutes: a REP for such a REQ, and a REQ the peer MRAs with a service timeout of 31.
TEST_F(CmHostile, PeerTimersAreClampedAndEveryExchangeEnds) {
  constexpr uint64_t kTry = uint64_t{1} << 16;  // time code 24
  constexpr uint64_t kPacketLife = 1 << 8;      // our packet life time, 16
  constexpr uint64_t kExchange = 180'000;
  auto run_timers = [&](CmAgent& agent) {  // until nothing is left to do; the time that took
    const uint64_t start = now;
    while (agent.next_deadline_ms() != UINT64_MAX) {
      now = agent.next_deadline_ms();
      agent.on_timer(now);
    }
    return now - start;
  };

  RecordingEnv peer_env{3};  // a client of its own, so that the REPs below concern no connection of `client`
  CmAgent peer(params(0x0202C9FFFE000003), &peer_env);
  ASSERT_TRUE(peer.connect(request(Qpn{0x66}), now));
  auto req = peer_env.sent.front().bytes;
  CmMutView<CmReq>(req.data()).set(CmReq::local_cm_response_timeout, 31);
  CmMutView<CmReq>(req.data()).set(CmReq::max_cm_retries, 15);
  server.on_mad(req, kClientGid, kServerGid, kClientRoute, now);
  const auto requests = server.take_events();
  ASSERT_THAT(types(requests), ElementsAre(CmEventType::kRequest));
  ASSERT_EQ(server.accept(requests[0].id, reply(), now), CmCallStatus::kOk);
  EXPECT_EQ(server.next_deadline_ms() - now, kTry + 2 * kPacketLife);
  EXPECT_LE(run_timers(server), kExchange) << "the REP's retransmissions end within the bound";
  EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kTimeout));
  EXPECT_EQ(server.connections(), 0u);
  EXPECT_EQ(server_env.sent.back().get(CmRej::reason), static_cast<uint16_t>(CmRejectReason::kTimeout));

  // The client's REQ, MRA'd with a service timeout of 31.
  server_env.sent.clear();
  ASSERT_TRUE(client.connect(request(Qpn{0x77}), now));
  const uint64_t connected = now;
  deliver_all();
  ASSERT_THAT(types(server.take_events()), ElementsAre(CmEventType::kRequest));
  advance(client.next_deadline_ms() - now);  // the REQ again, which the server answers with an MRA
  ASSERT_EQ(client_env.sent.size(), 1u);
  server.on_mad(client_env.sent.front().bytes, kClientGid, kServerGid, kClientRoute, now);
  client_env.sent.clear();
  ASSERT_EQ(server_env.sent.size(), 1u);
  SentMad m = server_env.sent.front();
  server_env.sent.clear();
  ASSERT_EQ(m.attribute(), CmAttribute::kMra);
  CmMutView<CmMra>(m.bytes.data()).set(CmMra::service_timeout, 31);
  client.on_mad(m.bytes, kServerGid, kClientGid, kServerRoute, now);
  EXPECT_EQ(client.next_deadline_ms() - now, kTry + kPacketLife);
  run_timers(client);
  EXPECT_LE(now - connected, kExchange) << "the REQ gives up within the bound";
  EXPECT_THAT(types(client.take_events()), ElementsAre(CmEventType::kTimeout));
  EXPECT_EQ(client.connections(), 0u);
}

// A REQ flood the consumer never answers holds nothing for longer than the senders wait for an answer: each
// request ends when its REQ's own timeout x (retries + 1) has passed (our client's REQ: 16 x 1.5 s), with the REJ a
// consumer's destroy() sends, and a kTimeout for the consumer. A duplicate REQ meanwhile gets an MRA, which the
// peer waits out, and so does the deadline.
TEST_F(CmHostile, RequestsTheConsumerNeverAnswersEndWhenThePeerStopsWaiting) {
  constexpr uint64_t kPeerWaits = 16 * ((1 << 10) + 2 * (1 << 8));  // REQ: response timeout 18, 15 retries
  constexpr uint64_t kMraWait = (1 << 16) + 2 * (1 << 8);           // our MRA's service timeout 24
  auto req = valid_req();
  for (uint32_t i = 0; i < 100; ++i) {
    CmMutView<CmReq>(req.data()).set(CmReq::local_comm_id, 0x1000 + i);
    CmMutView<CmReq>(req.data()).set(CmReq::local_qpn, Qpn{0x1000 + i});
    server.on_mad(req, kClientGid, kServerGid, kClientRoute, now);
  }
  EXPECT_EQ(server.connections(), 100u);
  const auto requests = server.take_events();
  ASSERT_EQ(requests.size(), 100u);
  EXPECT_EQ(server.next_deadline_ms(), now + kPeerWaits);

  advance(kPeerWaits - 1000);
  server.on_mad(req, kClientGid, kServerGid, kClientRoute, now);  // the last one's REQ again: an MRA
  ASSERT_EQ(server_env.sent.size(), 1u);
  EXPECT_EQ(server_env.sent.front().attribute(), CmAttribute::kMra);
  server_env.sent.clear();

  advance(1000);
  EXPECT_EQ(server.connections(), 1u) << "all but the MRA'd one";
  auto timeouts = server.take_events();
  EXPECT_EQ(timeouts.size(), 99u);
  for (const CmEvent& e : timeouts) EXPECT_EQ(e.type, CmEventType::kTimeout);
  ASSERT_EQ(server_env.sent.size(), 99u);
  for (const SentMad& m : server_env.sent) {
    EXPECT_EQ(m.attribute(), CmAttribute::kRej);
    EXPECT_EQ(m.get(CmRej::reason), static_cast<uint16_t>(CmRejectReason::kConsumerDefined));
    EXPECT_EQ(m.route, kClientRoute);
  }
  EXPECT_EQ(server.accept(requests[0].id, reply(), now), CmCallStatus::kInvalidState);
  EXPECT_EQ(server.reject(requests[1].id, CmRejectReason::kConsumerDefined, {}), CmCallStatus::kInvalidState);

  EXPECT_EQ(server.next_deadline_ms(), now - 1000 + kMraWait);
  advance(kMraWait - 1000);
  EXPECT_EQ(server.connections(), 0u);
  EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kTimeout));
}

// A REP that names a peer ID another connection of ours already has (here connection 1's, for connection 2's REQ) is
// a duplicate, dropped as Linux drops it, rather than taking connection 1's entry: connection 2 keeps waiting.
TEST_F(CmHostile, ARepNamingAnotherConnectionsPeerIdIsDropped) {
  const auto [first, server_first] = establish_connection();
  const auto second = client.connect(request(Qpn{0x12}), now);
  ASSERT_TRUE(second);
  client_env.sent.clear();
  const uint64_t deadline = client.next_deadline_ms();
  std::array<uint8_t, kMadSize> rep = cm_send_mad(CmAttribute::kRep, 0);
  const CmMutView<CmRep> r(rep.data());
  r.set(CmRep::local_comm_id, server_first);
  r.set(CmRep::remote_comm_id, *second);
  r.set(CmRep::local_qpn, Qpn{0x99});
  r.set(CmRep::local_ca_guid, 0x0202C9FFFE000002);
  const uint64_t unmatched = client.counters().rx_unmatched;
  client.on_mad(rep, kServerGid, kClientGid, kServerRoute, now);
  EXPECT_TRUE(client.take_events().empty());
  EXPECT_EQ(client.counters().rx_unmatched, unmatched + 1);
  EXPECT_EQ(client.next_deadline_ms(), deadline) << "the REQ still waits for its answer";
  (void)first;
}

// Communication IDs are drawn at random: the next one does not follow from the last.
TEST_F(CmHostile, CommunicationIdsDoNotFollowEachOther) {
  std::vector<CmId> ids;
  for (uint32_t i = 0; i < 8; ++i) ids.push_back(client.connect(request(Qpn{0x100 + i}), now).value());
  for (std::size_t i = 1; i < ids.size(); ++i) EXPECT_NE(ids[i], ids[i - 1] + 1);
}

TEST_F(CmHostile, ClassPortInfoIsAnswered) {
  std::array<uint8_t, kMadSize> get = cm_send_mad(CmAttribute::kClassPortInfo, 0x42);
  CmMutView<Mad> h(get.data());
  h.set(Mad::method, MadMethod::kGet);
  server.on_mad(get, kClientGid, kServerGid, kClientRoute, now);
  SentMad answer = only_reply();
  EXPECT_EQ(answer.get(Mad::method), MadMethod::kGetResponse);
  EXPECT_EQ(answer.get(Mad::status), MadStatus::kOk);
  EXPECT_EQ(answer.tid(), 0x42u);
  EXPECT_EQ(answer.get(CmClassPortInfo::class_version), 2);
  EXPECT_EQ(answer.get(CmClassPortInfo::response_time_value), 18);
  EXPECT_EQ(answer.to, kClientGid);

  h.set(Mad::attribute_id, CmAttribute::kReq);  // Get(REQ) means nothing
  server.on_mad(get, kClientGid, kServerGid, kClientRoute, now);
  answer = only_reply();
  EXPECT_EQ(answer.get(Mad::status), MadStatus::kMethodAttributeNotSupported);
}

}  // namespace
}  // namespace uroce::proto
