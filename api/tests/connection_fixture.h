// The connection tests' fixture (connection_test.cc, connection_hostile_test.cc): addresses, listener and
// disconnect event recorders, and ConnectionTest, which connects players through a listener.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "api/connection.h"
#include "api/tests/api_players.h"
#include "dataplane/port.h"
#include "proto/cm_agent.h"
#include "proto/rdma_cm.h"

namespace uroce::ndk::testing {

inline constexpr uint16_t kPort = 7174;  // rping's

inline sockaddr_in with_port(sockaddr_in in, uint16_t port) {
  in.sin_port = htons(port);
  return in;
}
inline const sockaddr* sa(const sockaddr_in& in) { return reinterpret_cast<const sockaddr*>(&in); }

// A sockaddr_in or sockaddr_in6 with its length, as connectors and listeners take them.
struct Address {
  sockaddr_storage storage{};
  uint32_t length = 0;
  [[nodiscard]] const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

inline Address ipv4(const Player& p, uint16_t port) {
  const sockaddr_in in = with_port(p.ip(), port);
  Address a;
  std::memcpy(&a.storage, &in, sizeof in);
  a.length = sizeof in;
  return a;
}

inline Address ipv6(const Player& p, uint16_t port) {
  sockaddr_in6 in6 = p.ip6();
  in6.sin6_port = htons(port);
  Address a;
  std::memcpy(&a.storage, &in6, sizeof in6);
  a.length = sizeof in6;
  return a;
}

struct ListenerEvents {
  std::atomic<Connector*> incoming{nullptr};
  std::atomic<int> count{0};
  std::function<void(Connector*)> on_connect;  // runs inside the connect event (set before connecting)
  static void callback(void* context, Connector* connector) {
    auto& l = *static_cast<ListenerEvents*>(context);
    if (l.on_connect) l.on_connect(connector);
    l.incoming.store(connector);
    l.count.fetch_add(1);
  }
};

struct DisconnectEvents {
  std::atomic<int> count{0};
  static void callback(void* context) { static_cast<DisconnectEvents*>(context)->count.fetch_add(1); }
};

// Both ends of one connection made through a listener, and what each end reported.
struct Connection {
  Qp* active_qp = nullptr;   // connected by NdkConnect
  Qp* passive_qp = nullptr;  // by NdkAccept
  Connector* active = nullptr;
  std::atomic<Connector*> passive{nullptr};  // from the listener's connect event
  Completion connected, completed, accepted;
  DisconnectEvents active_disconnects, passive_disconnects;
};

enum class Side : uint8_t { kActive, kPassive };
enum class Wait : uint8_t { kBothSides, kActiveSide };

class ConnectionTest : public ApiTest {
 protected:
  Connector* connector() {
    Connector* c = nullptr;
    EXPECT_EQ(adapter().NdkCreateConnector(nullptr, nullptr, &c), STATUS_SUCCESS);
    return c;
  }
  Listener* listen(ListenerEvents& events, const Address& address) {
    Listener* l = nullptr;
    EXPECT_EQ(adapter().NdkCreateListener(&ListenerEvents::callback, &events, nullptr, nullptr, &l), STATUS_SUCCESS);
    EXPECT_EQ(l->NdkListen(address.get(), address.length, nullptr, nullptr), STATUS_SUCCESS);
    return l;
  }
  static void close(Connector* c) { EXPECT_EQ(c->NdkCloseConnector(nullptr, nullptr), STATUS_SUCCESS); }
  static void close(Listener* l) { EXPECT_EQ(l->NdkCloseListener(nullptr, nullptr), STATUS_SUCCESS); }
  static void close(Qp* qp) { EXPECT_EQ(qp->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS); }
  NTSTATUS connect(Connector* c, Player& from, Player& to, uint16_t port, const std::string& private_data,
                   Completion& done) {
    const Address src = ipv4(from, 0);
    const Address dst = ipv4(to, port);
    return c->NdkConnect(from.qp, src.get(), src.length, dst.get(), dst.length, 4, 4, private_data.data(),
                         static_cast<uint32_t>(private_data.size()), &Completion::on_request, &done);
  }
  static std::string connection_data(Connector* c, uint32_t expected_room, uint32_t* ird = nullptr,
                                     uint32_t* ord = nullptr) {
    uint32_t length = 0;
    EXPECT_EQ(c->NdkGetConnectionData(nullptr, nullptr, nullptr, &length), STATUS_SUCCESS);
    EXPECT_EQ(length, expected_room) << "the required size is the CM's room, not what the peer sent";
    std::string data(length, '\0');
    EXPECT_EQ(c->NdkGetConnectionData(ird, ord, data.data(), &length), STATUS_SUCCESS);
    return data;
  }
  // Another QP on `p`'s PD and CQ (so on its engine), small: one SEND or receive at a time.
  static Qp* qp_on(Player& p, void* context) {
    Qp* qp = nullptr;
    EXPECT_EQ(p.pd->NdkCreateQp(p.cq, p.cq, context, 2, 2, 1, 1, 0, nullptr, nullptr, &qp), STATUS_SUCCESS);
    return qp;
  }

  static detail::AdapterImpl& impl() { return static_cast<detail::AdapterImpl&>(adapter()); }
  static uint64_t cm_counter(const std::string& name) {
    const auto values = impl().connections().counter_values();
    const std::map<std::string, uint64_t> map(values.begin(), values.end());
    EXPECT_TRUE(map.contains(name)) << "no CM counter named " << name;
    return map.contains(name) ? map.at(name) : 0;
  }
  static proto::Gid gid_of(const sockaddr_in& in) {
    return proto::gid_from_ipv4(proto::Ipv4Addr{ntohl(in.sin_addr.s_addr)});
  }

  // A neighbour on port a's side of the link: GSI datagrams to port b, each from any address and MAC and carrying
  // any MAD. Returns once the GSI QP has passed every one up and, unless the CM thread is held, the CM has taken
  // them.
  struct GsiFrame {
    proto::Gid source{};
    proto::MacAddr source_mac{};
    std::array<uint8_t, proto::kMadSize> mad{};
  };
  static void inject(std::span<const GsiFrame> frames, bool cm_held = false) {
    dataplane::Dataplane& dp = impl().dataplane();
    const uint64_t delivered = cm_counter("gsi_rx_mads");
    const uint64_t dropped = cm_counter("gsi_rx_ring_full");
    dataplane::testing::FrameGenerator generator(
        dataplane::testing::kPortA, frames.size(), [&](uint64_t i, std::span<uint8_t> out) {
          proto::PacketSpec s =
              dataplane::testing::roce_spec(dp, dataplane::testing::kPortA, dataplane::testing::kPortB, proto::kGsiQpn,
                                            proto::Opcode::kUdSendOnly, 0, frames[i].mad);
          s.src_gid = frames[i].source;
          s.src_mac = frames[i].source_mac;
          s.deth.qkey = proto::kGsiQKey;
          s.deth.src_qp = proto::kGsiQpn;
          return proto::build_packet(s, out);
        });
    dataplane::testing::run_generator(dp.engine(1), generator);
    // At least: the CM's own MADs between the ports may arrive meanwhile.
    ASSERT_TRUE(eventually([&] {
      return cm_counter("gsi_rx_mads") - delivered + cm_counter("gsi_rx_ring_full") - dropped >= frames.size();
    }));
    if (cm_held) return;
    // The CM's count of MADs taken (as of its last step) catches up with the GSI QP's of MADs passed up.
    const uint64_t passed_up = cm_counter("gsi_rx_mads");
    ASSERT_TRUE(eventually([&] { return cm_counter("cm_rx_mads") >= passed_up; }));
  }
  // Holds the CM thread while it lives, so that datagrams queue up for one batch.
  class HeldCmThread {
   public:
    HeldCmThread() {
      auto held = std::make_shared<std::atomic<bool>>(false);
      impl().connections().post([release = release_, held] {
        held->store(true);
        while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      });
      EXPECT_TRUE(eventually([&] { return held->load(); }));
    }
    ~HeldCmThread() { release_->store(true); }
    HeldCmThread(const HeldCmThread&) = delete;
    HeldCmThread& operator=(const HeldCmThread&) = delete;

   private:
    std::shared_ptr<std::atomic<bool>> release_ = std::make_shared<std::atomic<bool>>(false);
  };
  // REQs as player `from` would send them to `to`'s listener at `port`, one per QPN from `first_qpn` on, made by a
  // CM agent of the test's own (so the adapter's CM has none of their IDs). Its communication IDs follow from
  // `first_qpn`: REQs made with another one are not duplicates of these.
  static std::vector<std::array<uint8_t, proto::kMadSize>> requests(const Player& from, const Player& to, uint16_t port,
                                                                    uint32_t first_qpn, std::size_t count) {
    struct Capture final : proto::CmEnv {
      void send_mad(std::span<const uint8_t, proto::kMadSize> mad, const proto::Gid&, const proto::Gid&,
                    proto::CmRoute) override {
        std::copy(mad.begin(), mad.end(), sent.emplace_back().begin());
      }
      uint32_t random32() override { return seed = seed * 1664525 + 1013904223; }
      uint32_t seed = 0;
      std::vector<std::array<uint8_t, proto::kMadSize>> sent;
    } capture;
    capture.seed = first_qpn;
    proto::CmAgent forger(proto::CmParams{.local_ca_guid = 0x0200FFFEDEAD0001, .max_connections = count + 1}, &capture);
    for (std::size_t i = 0; i < count; ++i) {
      proto::CmConnectParams p;
      p.service_id = proto::rdma_cm_service_id(port);
      p.local_gid = gid_of(from.ip());
      p.remote_gid = gid_of(to.ip());
      p.qpn = proto::Qpn{first_qpn + static_cast<uint32_t>(i)};
      p.path_mtu = 3;
      p.private_data.resize(proto::CmaHdr::kSize);
      proto::write_cma_hdr(std::span<uint8_t, proto::CmaHdr::kSize>(p.private_data.data(), proto::CmaHdr::kSize),
                           {proto::IpAddress{p.local_gid}, 40000}, {proto::IpAddress{p.remote_gid}, port});
      EXPECT_TRUE(forger.connect(p, 0));
    }
    return std::move(capture.sent);
  }

  // Connects every connection's active QP to its passive one through the listener at `destination` (whose connect
  // events `events` receives), all at once: NdkConnect from `source` (port 0: an ephemeral port each) with the
  // connection's index as private data; in the connect event the listener's side reads the index back and calls
  // NdkAccept; once a connect has completed, NdkCompleteConnect. Returns when every NdkCompleteConnect (and with
  // kBothSides every NdkAccept) has completed, each with success. Both sides get their disconnect events.
  void establish(std::span<Connection> connections, ListenerEvents& events, const Address& source,
                 const Address& destination, Wait wait = Wait::kBothSides) {
    events.on_connect = [connections](Connector* incoming) {
      const std::string data = connection_data(incoming, 56);
      uint32_t index = 0;
      std::memcpy(&index, data.data(), sizeof index);
      ASSERT_LT(index, connections.size());
      Connection& c = connections[index];
      c.passive.store(incoming);
      EXPECT_EQ(incoming->NdkAccept(c.passive_qp, 4, 4, nullptr, 0, &DisconnectEvents::callback, &c.passive_disconnects,
                                    &Completion::on_request, &c.accepted),
                STATUS_PENDING);
    };
    for (std::size_t i = 0; i < connections.size(); ++i) {
      Connection& c = connections[i];
      c.active = connector();
      ASSERT_NE(c.active, nullptr);
      const auto index = static_cast<uint32_t>(i);
      ASSERT_EQ(c.active->NdkConnect(c.active_qp, source.get(), source.length, destination.get(), destination.length, 4,
                                     4, &index, sizeof index, &Completion::on_request, &c.connected),
                STATUS_PENDING);
    }
    for (Connection& c : connections) {
      ASSERT_TRUE(c.connected.wait());
      ASSERT_EQ(c.connected.status.load(), STATUS_SUCCESS);
      ASSERT_EQ(c.active->NdkCompleteConnect(&DisconnectEvents::callback, &c.active_disconnects,
                                             &Completion::on_request, &c.completed),
                STATUS_PENDING);
    }
    for (Connection& c : connections) {
      ASSERT_TRUE(c.completed.wait());
      ASSERT_EQ(c.completed.status.load(), STATUS_SUCCESS);
      if (wait == Wait::kActiveSide) continue;
      ASSERT_TRUE(c.accepted.wait());
      ASSERT_EQ(c.accepted.status.load(), STATUS_SUCCESS);
    }
  }

  // A graceful disconnect of every connection, started by `side`: its NdkDisconnect completes once the peer
  // answered, the peer gets one disconnect event (the side that started none), and the peer's own NdkDisconnect
  // then has nothing left to wait for. Then both connectors close.
  static void disconnect_and_close(std::span<Connection> connections, Side side) {
    std::vector<Completion> disconnected(connections.size());
    std::vector<Completion> peer_disconnected(connections.size());  // never called: the peer has nothing to wait for
    auto initiator = [side](Connection& c) { return side == Side::kActive ? c.active : c.passive.load(); };
    auto peer = [side](Connection& c) { return side == Side::kActive ? c.passive.load() : c.active; };
    for (std::size_t i = 0; i < connections.size(); ++i) {
      ASSERT_EQ(initiator(connections[i])->NdkDisconnect(&Completion::on_request, &disconnected[i]), STATUS_PENDING);
    }
    for (std::size_t i = 0; i < connections.size(); ++i) {
      Connection& c = connections[i];
      ASSERT_TRUE(disconnected[i].wait());
      EXPECT_EQ(disconnected[i].status.load(), STATUS_SUCCESS);
      DisconnectEvents& told = side == Side::kActive ? c.passive_disconnects : c.active_disconnects;
      const DisconnectEvents& teller = side == Side::kActive ? c.active_disconnects : c.passive_disconnects;
      ASSERT_TRUE(eventually([&] { return told.count.load() == 1; }));
      EXPECT_EQ(teller.count.load(), 0) << "no disconnect event for the side that disconnected";
      EXPECT_EQ(peer(c)->NdkDisconnect(&Completion::on_request, &peer_disconnected[i]), STATUS_SUCCESS);
      close(c.active);
      close(c.passive.load());
    }
  }

  // One 16-byte SEND on every connection, active to passive, all posted before any is reaped: each lands in its
  // own slot of b's buffer (the connection's index names the slot and both requests).
  static void send_on_each(std::span<Connection> connections, Player& a, Player& b) {
    constexpr uint32_t kSize = 16;
    const std::size_t half = b.options.buffer_size / 2;
    ASSERT_LE(connections.size() * kSize, half);
    for (std::size_t i = 0; i < connections.size(); ++i) {
      const NdkSge slot = b.sge(half + i * kSize, kSize);
      ASSERT_EQ(connections[i].passive_qp->NdkReceive(reinterpret_cast<void*>(i), &slot, 1), STATUS_SUCCESS);
    }
    for (std::size_t i = 0; i < connections.size(); ++i) {
      a.fill(i * kSize, kSize, static_cast<uint8_t>(i));
      const NdkSge from = a.sge(i * kSize, kSize);
      ASSERT_EQ(connections[i].active_qp->NdkSend(reinterpret_cast<void*>(i), &from, 1, 0), STATUS_SUCCESS);
    }
    for (Player* p : {&a, &b}) {
      std::vector<bool> seen(connections.size(), false);
      for (const NdkResultEx& r : p->results(connections.size())) {
        ASSERT_EQ(r.Status, STATUS_SUCCESS);
        const auto i = reinterpret_cast<std::size_t>(r.RequestContext);
        ASSERT_LT(i, connections.size());
        EXPECT_FALSE(seen[i]);
        seen[i] = true;
        EXPECT_EQ(r.QPContext, &connections[i]);
        EXPECT_EQ(r.Type, p == &a ? NdkOperationTypeSend : NdkOperationTypeReceive);
      }
    }
    EXPECT_EQ(std::memcmp(a.buffer, b.buffer + half, connections.size() * kSize), 0);
  }
};

}  // namespace uroce::ndk::testing
