// The CM scenario fixture (cm_agent_test.cc, cm_agent_hostile_test.cc): two agents, an active one (the client)
// and a passive one (the server), joined by a test network that can lose, hold or forge MADs, on a clock the
// test moves; and CmHostile, which hands a test a valid REQ to spoil.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <functional>

#include "proto/cm_agent.h"
#include "proto/rdma_cm.h"

namespace uroce::proto {

inline void PrintTo(CmEventType type, std::ostream* os) { *os << cm_event_name(type); }

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

inline const Gid kClientGid = IpAddress::from_ipv4(0xC6120001).gid;  // 198.18.0.1
inline const Gid kServerGid = IpAddress::from_ipv4(0xC6120002).gid;  // 198.18.0.2
inline constexpr uint16_t kRpingPort = 7174;
// The routes MADs come by (for api/, the sender's port and MAC): the client's, the server's, and a neighbour's
// that sends with the client's address.
inline constexpr CmRoute kClientRoute = 0xC1;
inline constexpr CmRoute kServerRoute = 0x5E;
inline constexpr CmRoute kNeighbourRoute = 0xBAD;

inline std::vector<CmEventType> types(const std::vector<CmEvent>& events) {
  std::vector<CmEventType> t;
  for (const auto& e : events) t.push_back(e.type);
  return t;
}

class CmScenario : public ::testing::Test {
 protected:
  CmScenario() : client(params(0x0202C9FFFE000001), &client_env), server(params(0x0202C9FFFE000002), &server_env) {}

  // The REQ the client sends again from the same QPN (its CA GUID, a fresh communication ID) after it restarted and
  // lost its connection: what the stale-connection rule (IBTA 12.9.8.3.1) answers.
  std::array<uint8_t, kMadSize> request_after_restart() {
    RecordingEnv restarted_env{12345};
    CmAgent restarted(params(0x0202C9FFFE000001), &restarted_env);
    EXPECT_TRUE(restarted.connect(request(), now));
    return restarted_env.sent.front().bytes;
  }

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
    EXPECT_THAT(types(requests), ::testing::ElementsAre(CmEventType::kRequest));
    const CmId server_id = requests.at(0).id;
    EXPECT_EQ(server.accept(server_id, reply(), now), CmCallStatus::kOk);
    deliver_all();
    EXPECT_THAT(types(client.take_events()), ::testing::ElementsAre(CmEventType::kReply));
    EXPECT_EQ(client.establish(*client_id), CmCallStatus::kOk);
    deliver_all();
    EXPECT_THAT(types(server.take_events()), ::testing::ElementsAre(CmEventType::kEstablished));
    return {*client_id, server_id};
  }

  RecordingEnv client_env{7}, server_env{99};
  CmAgent client, server;
  uint64_t now = 1000;
};

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

}  // namespace uroce::proto
