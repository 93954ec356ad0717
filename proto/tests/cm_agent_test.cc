// The CM state machine as scenarios: two agents, an active one (the client) and a passive one (the server),
// joined by a test network that can lose, hold or forge MADs, on a clock the test moves.
#include "proto/cm_agent.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <functional>

#include "proto/rdma_cm.h"

namespace uroce::proto {

void PrintTo(CmEventType type, std::ostream* os) { *os << cm_event_name(type); }

namespace {

using ::testing::ElementsAre;

struct SentMad {
  std::array<uint8_t, kMadSize> bytes;
  Gid from;
  Gid to;
  CmRoute route = 0;
  [[nodiscard]] CmAttribute attribute() const { return CmView<Mad>(bytes.data()).get(Mad::attribute_id); }
  [[nodiscard]] uint64_t tid() const { return CmView<Mad>(bytes.data()).get(Mad::transaction_id); }
  template <class F>
  [[nodiscard]] auto get(F) const {
    return F::get(bytes.data());
  }
};

class RecordingEnv final : public CmEnv {
 public:
  void send_mad(std::span<const uint8_t, kMadSize> mad, const Gid& local, const Gid& remote, CmRoute route) override {
    SentMad m;
    std::copy(mad.begin(), mad.end(), m.bytes.begin());
    m.from = local;
    m.to = remote;
    m.route = route;
    sent.push_back(m);
  }
  uint32_t random32() override { return seed = seed * 1103515245 + 12345; }
  explicit RecordingEnv(uint32_t s) : seed(s) {}
  std::deque<SentMad> sent;
  uint32_t seed;
};

const Gid kClientGid = IpAddress::from_ipv4(0xC6120001).gid;  // 198.18.0.1
const Gid kServerGid = IpAddress::from_ipv4(0xC6120002).gid;  // 198.18.0.2
constexpr uint16_t kRpingPort = 7174;
// The routes MADs come by (for api/, the sender's port and MAC): the client's, the server's, and a neighbour's
// that sends with the client's address.
constexpr CmRoute kClientRoute = 0xC1;
constexpr CmRoute kServerRoute = 0x5E;
constexpr CmRoute kNeighbourRoute = 0xBAD;

std::vector<CmEventType> types(const std::vector<CmEvent>& events) {
  std::vector<CmEventType> t;
  for (const auto& e : events) t.push_back(e.type);
  return t;
}

class CmScenario : public ::testing::Test {
 protected:
  CmScenario() : client(params(0x0202C9FFFE000001), &client_env), server(params(0x0202C9FFFE000002), &server_env) {}

  static CmParams params(uint64_t guid) {
    CmParams p;
    p.local_ca_guid = guid;
    return p;
  }

  CmConnectParams request(Qpn qpn = Qpn{0x11}) const {
    CmConnectParams r;
    r.service_id = rdma_cm_service_id(kRpingPort);
    r.local_gid = kClientGid;
    r.remote_gid = kServerGid;
    r.qpn = qpn;
    r.starting_psn = Psn{0x123456};
    r.responder_resources = 16;
    r.initiator_depth = 8;
    r.path_mtu = 5;
    r.private_data.assign(CmaHdr::kSize, 0);
    write_cma_hdr(std::span<uint8_t, CmaHdr::kSize>(r.private_data.data(), CmaHdr::kSize),
                  {IpAddress{kClientGid}, 40000}, {IpAddress{kServerGid}, kRpingPort});
    r.private_data.push_back(0xAB);  // the consumer's byte after the cma_hdr
    r.route = kServerRoute;          // as ARP/ND resolved it
    return r;
  }

  CmReplyParams reply(Qpn qpn = Qpn{0x22}) const {
    CmReplyParams r;
    r.qpn = qpn;
    r.starting_psn = Psn{0x654321};
    r.responder_resources = 8;
    r.initiator_depth = 16;
    r.private_data = {1, 2, 3};
    return r;
  }

  // Delivers every MAD in flight (either way) until none is left; `lose` decides which vanish.
  void deliver_all(const std::function<bool(const SentMad&)>& lose = {}) {
    while (!client_env.sent.empty() || !server_env.sent.empty()) {
      while (!client_env.sent.empty()) {
        const SentMad m = client_env.sent.front();
        client_env.sent.pop_front();
        if (!lose || !lose(m)) server.on_mad(m.bytes, m.from, m.to, kClientRoute, now);
      }
      while (!server_env.sent.empty()) {
        const SentMad m = server_env.sent.front();
        server_env.sent.pop_front();
        if (!lose || !lose(m)) client.on_mad(m.bytes, m.from, m.to, kServerRoute, now);
      }
    }
  }

  void advance(uint64_t ms) {
    now += ms;
    client.on_timer(now);
    server.on_timer(now);
  }

  // Connect, accept, establish: returns the two IDs.
  std::pair<CmId, CmId> establish_connection() {
    const auto client_id = client.connect(request(), now);
    EXPECT_TRUE(client_id.has_value());
    deliver_all();
    const auto requests = server.take_events();
    EXPECT_THAT(types(requests), ElementsAre(CmEventType::kRequest));
    const CmId server_id = requests.at(0).id;
    EXPECT_EQ(server.accept(server_id, reply(), now), CmCallStatus::kOk);
    deliver_all();
    EXPECT_THAT(types(client.take_events()), ElementsAre(CmEventType::kReply));
    EXPECT_EQ(client.establish(*client_id), CmCallStatus::kOk);
    deliver_all();
    EXPECT_THAT(types(server.take_events()), ElementsAre(CmEventType::kEstablished));
    return {*client_id, server_id};
  }

  RecordingEnv client_env{7}, server_env{99};
  CmAgent client, server;
  uint64_t now = 1000;
};

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
  // The client restarted and lost its connection; it connects again from the same QPN.
  RecordingEnv restarted_env{12345};
  CmAgent restarted(params(0x0202C9FFFE000001), &restarted_env);
  ASSERT_TRUE(restarted.connect(request(), now));
  server.on_mad(restarted_env.sent.front().bytes, kClientGid, kServerGid, kClientRoute, now);
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

// ---- bad input ----

class CmHostile : public CmScenario {
 protected:
  // A REQ as the client would send it, for the test to spoil.
  std::array<uint8_t, kMadSize> valid_req() {
    EXPECT_TRUE(client.connect(request(), now));
    auto bytes = client_env.sent.back().bytes;
    client_env.sent.clear();
    return bytes;
  }
  SentMad only_reply() {
    EXPECT_EQ(server_env.sent.size(), 1u);
    SentMad m = server_env.sent.front();
    server_env.sent.clear();
    return m;
  }
};

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
  std::array<uint8_t, kMadSize> rep{};
  CmMutView<Mad> h(rep.data());
  h.set(Mad::base_version, 1);
  h.set(Mad::management_class, kCmManagementClass);
  h.set(Mad::class_version, 2);
  h.set(Mad::method, MadMethod::kSend);
  h.set(Mad::attribute_id, CmAttribute::kRep);
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
  std::array<uint8_t, kMadSize> dreq{};
  const CmMutView<Mad> h(dreq.data());
  h.set(Mad::base_version, kMadBaseVersion);
  h.set(Mad::management_class, kCmManagementClass);
  h.set(Mad::class_version, kCmClassVersion);
  h.set(Mad::method, MadMethod::kSend);
  h.set(Mad::attribute_id, CmAttribute::kDreq);
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
  std::array<uint8_t, kMadSize> rep{};
  const CmMutView<Mad> h(rep.data());
  h.set(Mad::base_version, kMadBaseVersion);
  h.set(Mad::management_class, kCmManagementClass);
  h.set(Mad::class_version, kCmClassVersion);
  h.set(Mad::method, MadMethod::kSend);
  h.set(Mad::attribute_id, CmAttribute::kRep);
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
  std::array<uint8_t, kMadSize> get{};
  CmMutView<Mad> h(get.data());
  h.set(Mad::base_version, 1);
  h.set(Mad::management_class, kCmManagementClass);
  h.set(Mad::class_version, 2);
  h.set(Mad::method, MadMethod::kGet);
  h.set(Mad::transaction_id, 0x42);
  h.set(Mad::attribute_id, CmAttribute::kClassPortInfo);
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
