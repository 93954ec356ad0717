// Connectors and listeners end to end in one process: the CM's MADs cross the ring link between port a
// (198.18.0.1 and fd00::1, player A on engine 0) and port b (198.18.0.2 and fd00::2, player B on engine 1) through
// the GSI QP, and the QPs they connect carry traffic (ndkpi.md §9.7-9.8, §10.4-10.5).
#include "api/connection.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "api/tests/api_players.h"
#include "dataplane/port.h"
#include "proto/cm_agent.h"
#include "proto/rdma_cm.h"

namespace uroce::ndk::testing {
namespace {

constexpr uint16_t kPort = 7174;  // rping's

sockaddr_in with_port(sockaddr_in in, uint16_t port) {
  in.sin_port = htons(port);
  return in;
}
const sockaddr* sa(const sockaddr_in& in) { return reinterpret_cast<const sockaddr*>(&in); }

// A sockaddr_in or sockaddr_in6 with its length, as connectors and listeners take them.
struct Address {
  sockaddr_storage storage{};
  uint32_t length = 0;
  [[nodiscard]] const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

Address ipv4(const Player& p, uint16_t port) {
  const sockaddr_in in = with_port(p.ip(), port);
  Address a;
  std::memcpy(&a.storage, &in, sizeof in);
  a.length = sizeof in;
  return a;
}

Address ipv6(const Player& p, uint16_t port) {
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

TEST_F(ConnectionTest, ConnectAcceptTrafficAndGracefulDisconnect) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  ListenerEvents listener_events;
  Listener* listener = listen(listener_events, ipv4(b, kPort));
  Connector* active = connector();

  Completion connected;
  ASSERT_EQ(connect(active, a, b, kPort, "hello from A", connected), STATUS_PENDING);
  ASSERT_TRUE(eventually([&] { return listener_events.incoming.load() != nullptr; }));
  Connector* passive = listener_events.incoming.load();
  uint32_t ird = 0, ord = 0;
  const std::string request = connection_data(passive, 56, &ird, &ord);
  EXPECT_EQ(request.substr(0, 12), "hello from A");
  EXPECT_EQ(ird, 4u);  // the peer's limits
  EXPECT_EQ(ord, 4u);
  sockaddr_in peer{};
  uint32_t length = sizeof peer;
  ASSERT_EQ(passive->NdkGetPeerAddress(reinterpret_cast<sockaddr*>(&peer), &length), STATUS_SUCCESS);
  EXPECT_EQ(peer.sin_addr.s_addr, a.ip().sin_addr.s_addr);
  EXPECT_GE(ntohs(peer.sin_port), 49152) << "an ephemeral port";
  EXPECT_FALSE(connected.done.load()) << "Connect completes only once the peer accepts";

  // Receives may be posted before the connection is complete.
  const std::string reply = "welcome, A";
  Completion accepted;
  DisconnectEvents b_disconnects;
  ASSERT_EQ(passive->NdkAccept(b.qp, 4, 4, reply.data(), static_cast<uint32_t>(reply.size()),
                               &DisconnectEvents::callback, &b_disconnects, &Completion::on_request, &accepted),
            STATUS_PENDING);
  ASSERT_TRUE(connected.wait());
  ASSERT_EQ(connected.status.load(), STATUS_SUCCESS);
  EXPECT_EQ(connection_data(active, 196).substr(0, reply.size()), reply);
  EXPECT_FALSE(accepted.done.load()) << "Accept completes on the RTU";

  Completion completed;
  DisconnectEvents a_disconnects;
  ASSERT_EQ(
      active->NdkCompleteConnect(&DisconnectEvents::callback, &a_disconnects, &Completion::on_request, &completed),
      STATUS_PENDING);
  ASSERT_TRUE(completed.wait());
  EXPECT_EQ(completed.status.load(), STATUS_SUCCESS);
  ASSERT_TRUE(accepted.wait());
  EXPECT_EQ(accepted.status.load(), STATUS_SUCCESS);

  traffic(a, b, 20, 3000);
  traffic(b, a, 20, 100);

  sockaddr_in local{};
  length = sizeof local;
  ASSERT_EQ(active->NdkGetLocalAddress(reinterpret_cast<sockaddr*>(&local), &length), STATUS_SUCCESS);
  EXPECT_EQ(local.sin_addr.s_addr, a.ip().sin_addr.s_addr);
  EXPECT_EQ(local.sin_port, peer.sin_port);

  Completion disconnected;
  ASSERT_EQ(active->NdkDisconnect(&Completion::on_request, &disconnected), STATUS_PENDING);
  ASSERT_TRUE(disconnected.wait());
  EXPECT_EQ(disconnected.status.load(), STATUS_SUCCESS);
  ASSERT_TRUE(eventually([&] { return b_disconnects.count.load() == 1; }));
  EXPECT_EQ(a_disconnects.count.load(), 0) << "no disconnect event for the side that disconnected";
  // B's Disconnect after the peer's: nothing left to wait for.
  Completion b_disconnected;
  EXPECT_EQ(passive->NdkDisconnect(&Completion::on_request, &b_disconnected), STATUS_SUCCESS);
  close(active);
  close(passive);
  close(listener);
}

// Review row A3: adapters of one process share the connection manager. A connector of one adapter reaches a listener
// of another; the passive connector belongs to the listener's adapter, and the connection carries traffic.
TEST_F(ConnectionTest, AConnectorAndAListenerOfTwoAdaptersConnect) {
  Adapter* second = nullptr;
  ASSERT_EQ(NdkOpenAdapter(api_test_config(), kNdkVersion, &second), STATUS_SUCCESS);
  {
    Player& a = player({.engine = 0});
    Player b(*second, PlayerOptions{.engine = 1});
    ListenerEvents events;
    Listener* listener = nullptr;
    ASSERT_EQ(second->NdkCreateListener(&ListenerEvents::callback, &events, nullptr, nullptr, &listener),
              STATUS_SUCCESS);
    const Address address = ipv4(b, kPort);
    ASSERT_EQ(listener->NdkListen(address.get(), address.length, nullptr, nullptr), STATUS_SUCCESS);
    Connector* active = connector();
    Completion connected;
    ASSERT_EQ(connect(active, a, b, kPort, "across adapters", connected), STATUS_PENDING);
    ASSERT_TRUE(eventually([&] { return events.incoming.load() != nullptr; }));
    Connector* passive = events.incoming.load();
    EXPECT_EQ(second->UroceQueryResources().Connectors, 1u);  // the passive connector is the listener adapter's
    EXPECT_EQ(adapter().UroceQueryResources().Connectors, 1u);
    Completion accepted;
    DisconnectEvents b_disconnects;
    ASSERT_EQ(passive->NdkAccept(b.qp, 4, 4, nullptr, 0, &DisconnectEvents::callback, &b_disconnects,
                                 &Completion::on_request, &accepted),
              STATUS_PENDING);
    ASSERT_TRUE(connected.wait());
    ASSERT_EQ(connected.status.load(), STATUS_SUCCESS);
    Completion completed;
    DisconnectEvents a_disconnects;
    ASSERT_EQ(
        active->NdkCompleteConnect(&DisconnectEvents::callback, &a_disconnects, &Completion::on_request, &completed),
        STATUS_PENDING);
    ASSERT_TRUE(completed.wait());
    ASSERT_TRUE(accepted.wait());
    EXPECT_EQ(accepted.status.load(), STATUS_SUCCESS);
    traffic(a, b, 8, 1000);
    traffic(b, a, 8, 1000);
    Completion disconnected;
    ASSERT_EQ(active->NdkDisconnect(&Completion::on_request, &disconnected), STATUS_PENDING);
    ASSERT_TRUE(disconnected.wait());
    ASSERT_TRUE(eventually([&] { return b_disconnects.count.load() == 1; }));
    close(active);
    close(passive);
    close(listener);
  }
  NdkCloseAdapter(second);
}

// rping's order: both sides post a receive before the connection exists, and the client SENDs as soon as its side
// is established (perhaps before the server's accept completed); the server's receive completes.
TEST_F(ConnectionTest, ReceivesPostedBeforeTheConnectionComplete) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  ASSERT_EQ(a.receive(0, 16, 1), STATUS_SUCCESS);
  ASSERT_EQ(b.receive(0, 16, 2), STATUS_SUCCESS);
  ListenerEvents events;
  Listener* l = listen(events, ipv4(b, kPort));
  std::vector<Connection> one(1);
  one[0].active_qp = a.qp;
  one[0].passive_qp = b.qp;
  ASSERT_NO_FATAL_FAILURE(establish(one, events, ipv4(a, 0), ipv4(b, kPort), Wait::kActiveSide));
  ASSERT_EQ(a.send(64, 16, 3), STATUS_SUCCESS);
  const auto got = b.result();
  EXPECT_EQ(got.Status, STATUS_SUCCESS);
  EXPECT_EQ(got.Type, NdkOperationTypeReceive);
  EXPECT_EQ(got.BytesTransferred, 16u);
  EXPECT_EQ(a.result().Type, NdkOperationTypeSend);
  ASSERT_TRUE(one[0].accepted.wait());
  EXPECT_EQ(one[0].accepted.status.load(), STATUS_SUCCESS);
  close(one[0].active);
  close(one[0].passive.load());
  close(l);
}

TEST_F(ConnectionTest, NoListenerIsRefusedAtOnce) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  Connector* c = connector();
  Completion done;
  ASSERT_EQ(connect(c, a, b, 4420, "", done), STATUS_PENDING);
  ASSERT_TRUE(done.wait());
  EXPECT_EQ(done.status.load(), STATUS_CONNECTION_REFUSED);
  close(c);
  // The QP was never connected: another connector may use it.
  ListenerEvents events;
  events.on_connect = [&](Connector* incoming) { (void)incoming->NdkReject(nullptr, 0); };
  Listener* l = listen(events, ipv4(b, 4420));
  Connector* again = connector();
  Completion rejected;
  ASSERT_EQ(connect(again, a, b, 4420, "", rejected), STATUS_PENDING);
  ASSERT_TRUE(rejected.wait());
  EXPECT_EQ(rejected.status.load(), STATUS_CONNECTION_REFUSED);
  close(again);
  close(events.incoming.load());
  close(l);
}

// Review row L5 (ndkpi.md §10.3): closing a connector whose NdkConnect is pending (the listener's side never
// answers) cancels the connect, whose completion (STATUS_CANCELLED) runs before the close completes.
TEST_F(ConnectionTest, ClosingAConnectorCancelsItsPendingConnectFirst) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  ListenerEvents events;  // takes the request and never accepts or rejects it
  Listener* l = listen(events, ipv4(b, kPort));
  Connector* c = connector();
  struct Order {
    Completion connect;
    std::atomic<bool> connect_done_at_close{false}, closed{false};
  } order;
  ASSERT_EQ(connect(c, a, b, kPort, "", order.connect), STATUS_PENDING);
  ASSERT_TRUE(eventually([&] { return events.count.load() == 1; }));
  EXPECT_FALSE(order.connect.done.load());
  const auto closed = [](void* context) {
    auto& o = *static_cast<Order*>(context);
    o.connect_done_at_close.store(o.connect.done.load());
    o.closed.store(true);
  };
  const NTSTATUS close_status = c->NdkCloseConnector(closed, &order);
  ASSERT_TRUE(close_status == STATUS_PENDING || close_status == STATUS_SUCCESS);
  ASSERT_TRUE(order.connect.wait());
  EXPECT_EQ(order.connect.status.load(), STATUS_CANCELLED);
  if (close_status == STATUS_PENDING) {  // STATUS_SUCCESS: closed inline, after the cancellation above
    ASSERT_TRUE(eventually([&] { return order.closed.load(); }));
    EXPECT_TRUE(order.connect_done_at_close.load()) << "the close completed before the pending connect";
  }
  close(events.incoming.load());
  close(l);
}

TEST_F(ConnectionTest, ARejectCarriesItsPrivateData) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  ListenerEvents events;
  const std::string why = "queue size too large";
  events.on_connect = [&](Connector* incoming) {
    EXPECT_EQ(incoming->NdkReject(why.data(), static_cast<uint32_t>(why.size())), STATUS_SUCCESS);
  };
  Listener* l = listen(events, ipv4(b, kPort));
  Connector* c = connector();
  Completion done;
  ASSERT_EQ(connect(c, a, b, kPort, "", done), STATUS_PENDING);
  ASSERT_TRUE(done.wait());
  EXPECT_EQ(done.status.load(), STATUS_CONNECTION_REFUSED);
  EXPECT_EQ(connection_data(c, 148).substr(0, why.size()), why);
  close(c);
  close(events.incoming.load());
  close(l);
}

TEST_F(ConnectionTest, APausedListenerRefusesAndResumes) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  ListenerEvents events;
  Listener* l = listen(events, ipv4(b, kPort));
  l->NdkControlConnectEvents(true);
  Connector* c = connector();
  Completion refused;
  ASSERT_EQ(connect(c, a, b, kPort, "", refused), STATUS_PENDING);
  ASSERT_TRUE(refused.wait());
  EXPECT_EQ(refused.status.load(), STATUS_CONNECTION_REFUSED);
  EXPECT_EQ(events.count.load(), 0);
  close(c);

  l->NdkControlConnectEvents(false);
  Connector* c2 = connector();
  Completion connecting;
  ASSERT_EQ(connect(c2, a, b, kPort, "", connecting), STATUS_PENDING);
  ASSERT_TRUE(eventually([&] { return events.count.load() == 1; }));
  close(c2);  // abortive, before the answer: the incoming connector sees the REQ withdrawn
  EXPECT_EQ(connecting.status.load(), STATUS_CANCELLED);
  Connector* incoming = events.incoming.load();
  const std::string reply;
  Completion accepted;
  NTSTATUS accept = STATUS_SUCCESS;
  ASSERT_TRUE(eventually([&] {
    accept = incoming->NdkAccept(b.qp, 1, 1, nullptr, 0, nullptr, nullptr, &Completion::on_request, &accepted);
    return accept == STATUS_CONNECTION_ABORTED;
  })) << NdkStatusName(accept);
  close(incoming);
  close(l);
}

TEST_F(ConnectionTest, PortsInUseAndWildcards) {
  Player& b = player({.engine = 1});
  ListenerEvents events;
  Listener* first = listen(events, ipv4(b, kPort));
  Listener* second = nullptr;
  ASSERT_EQ(adapter().NdkCreateListener(&ListenerEvents::callback, &events, nullptr, nullptr, &second), STATUS_SUCCESS);
  const sockaddr_in same = with_port(b.ip(), kPort);
  EXPECT_EQ(second->NdkListen(sa(same), sizeof same, nullptr, nullptr), STATUS_ADDRESS_ALREADY_EXISTS);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_port = htons(kPort);
  EXPECT_EQ(second->NdkListen(sa(any), sizeof any, nullptr, nullptr), STATUS_ADDRESS_ALREADY_EXISTS);
  sockaddr_in elsewhere = with_port(b.ip(), kPort);
  elsewhere.sin_addr.s_addr = htonl(0xC6120063);  // 198.18.0.99: no port has it
  EXPECT_EQ(second->NdkListen(sa(elsewhere), sizeof elsewhere, nullptr, nullptr), STATUS_INVALID_ADDRESS);
  any.sin_port = 0;  // the provider picks
  ASSERT_EQ(second->NdkListen(sa(any), sizeof any, nullptr, nullptr), STATUS_SUCCESS);
  sockaddr_in chosen{};
  uint32_t length = sizeof chosen;
  ASSERT_EQ(second->NdkGetListenerLocalAddress(reinterpret_cast<sockaddr*>(&chosen), &length), STATUS_SUCCESS);
  EXPECT_GE(ntohs(chosen.sin_port), 49152);
  length = 2;
  EXPECT_EQ(second->NdkGetListenerLocalAddress(reinterpret_cast<sockaddr*>(&chosen), &length), STATUS_BUFFER_TOO_SMALL);
  EXPECT_EQ(length, sizeof(sockaddr_in));
  close(first);
  // Closed: the address is free again.
  Listener* third = listen(events, ipv4(b, kPort));
  close(second);
  close(third);
}

TEST_F(ConnectionTest, BadArgumentsAndCallsOutOfOrder) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  Connector* c = connector();
  Completion done;
  const sockaddr_in src = with_port(a.ip(), 0);
  const sockaddr_in dst = with_port(b.ip(), kPort);
  const std::string too_long(57, 'x');
  EXPECT_EQ(c->NdkConnect(nullptr, sa(src), sizeof src, sa(dst), sizeof dst, 1, 1, nullptr, 0, &Completion::on_request,
                          &done),
            STATUS_INVALID_PARAMETER);
  EXPECT_EQ(c->NdkConnect(a.qp, sa(src), sizeof src, sa(dst), sizeof dst, 1, 1, too_long.data(), 57,
                          &Completion::on_request, &done),
            STATUS_INVALID_PARAMETER);
  EXPECT_EQ(c->NdkConnect(a.qp, sa(src), 4, sa(dst), sizeof dst, 1, 1, nullptr, 0, &Completion::on_request, &done),
            STATUS_INVALID_PARAMETER)
      << "a short address";
  const sockaddr_in no_port = with_port(b.ip(), 0);
  EXPECT_EQ(c->NdkConnect(a.qp, sa(src), sizeof src, sa(no_port), sizeof no_port, 1, 1, nullptr, 0,
                          &Completion::on_request, &done),
            STATUS_INVALID_PARAMETER);
  sockaddr_in not_ours = src;
  not_ours.sin_addr.s_addr = htonl(0xC6120063);
  EXPECT_EQ(c->NdkConnect(a.qp, sa(not_ours), sizeof not_ours, sa(dst), sizeof dst, 1, 1, nullptr, 0,
                          &Completion::on_request, &done),
            STATUS_INVALID_ADDRESS);
  EXPECT_EQ(c->NdkCompleteConnect(nullptr, nullptr, &Completion::on_request, &done), STATUS_CONNECTION_INVALID);
  EXPECT_EQ(c->NdkAccept(b.qp, 1, 1, nullptr, 0, nullptr, nullptr, &Completion::on_request, &done),
            STATUS_CONNECTION_INVALID);
  EXPECT_EQ(c->NdkDisconnect(&Completion::on_request, &done), STATUS_CONNECTION_INVALID);
  EXPECT_EQ(c->NdkReject(nullptr, 0), STATUS_CONNECTION_ABORTED);
  uint32_t length = 0;
  EXPECT_EQ(c->NdkGetConnectionData(nullptr, nullptr, nullptr, &length), STATUS_CONNECTION_INVALID);
  EXPECT_FALSE(done.done.load()) << "no call above may complete";
  close(c);
}

TEST_F(ConnectionTest, ClosingAConnectedConnectorDisconnectsThePeer) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  ListenerEvents events;
  Listener* l = listen(events, ipv4(b, kPort));
  std::vector<Connection> one(1);
  Connection& c = one[0];
  c.active_qp = a.qp;
  c.passive_qp = b.qp;
  ASSERT_NO_FATAL_FAILURE(establish(one, events, ipv4(a, 0), ipv4(b, kPort)));
  traffic(a, b, 3);
  close(c.active);
  ASSERT_TRUE(eventually([&] { return c.passive_disconnects.count.load() == 1; }));
  close(c.passive.load());
  close(l);
}

// The listener's side ends the connection: the active side gets the disconnect event, and both QPs are flushed.
TEST_F(ConnectionTest, ThePassiveSideDisconnects) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  ListenerEvents events;
  Listener* l = listen(events, ipv4(b, kPort));
  std::vector<Connection> one(1);
  one[0].active_qp = a.qp;
  one[0].passive_qp = b.qp;
  ASSERT_NO_FATAL_FAILURE(establish(one, events, ipv4(a, 0), ipv4(b, kPort)));
  traffic(b, a, 3);
  // A receive left posted on each side: the flush that ends each QP cancels it.
  ASSERT_EQ(a.receive(0, 16, 11), STATUS_SUCCESS);
  ASSERT_EQ(b.receive(0, 16, 12), STATUS_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(disconnect_and_close(one, Side::kPassive));
  for (Player* p : {&a, &b}) {
    const NdkResultEx r = p->result();
    EXPECT_EQ(r.Status, STATUS_CANCELLED);
    EXPECT_EQ(r.Type, NdkOperationTypeReceive);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r.RequestContext), p == &a ? 11u : 12u);
  }
  close(l);
}

TEST_F(ConnectionTest, Ipv6ConnectTrafficAndAddresses) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  ListenerEvents events;
  Listener* l = listen(events, ipv6(b, kPort));
  const sockaddr_in6 a6 = a.ip6();
  const sockaddr_in6 b6 = b.ip6();
  sockaddr_in6 address{};
  uint32_t length = sizeof address;
  ASSERT_EQ(l->NdkGetListenerLocalAddress(reinterpret_cast<sockaddr*>(&address), &length), STATUS_SUCCESS);
  EXPECT_EQ(length, sizeof(sockaddr_in6));
  EXPECT_EQ(address.sin6_family, AF_INET6);
  EXPECT_EQ(std::memcmp(&address.sin6_addr, &b6.sin6_addr, 16), 0);

  std::vector<Connection> one(1);
  Connection& c = one[0];
  c.active_qp = a.qp;
  c.passive_qp = b.qp;
  ASSERT_NO_FATAL_FAILURE(establish(one, events, ipv6(a, 0), ipv6(b, kPort)));
  traffic(a, b, 5, 3000);
  traffic(b, a, 5, 100);

  // Each end reports both endpoints as sockaddr_in6: the active side's ephemeral port on fd00::1, the listener's
  // port on fd00::2.
  auto endpoint = [](Connector* connector, bool peer) {
    sockaddr_in6 in6{};
    uint32_t size = sizeof in6;
    auto* out = reinterpret_cast<sockaddr*>(&in6);
    EXPECT_EQ(peer ? connector->NdkGetPeerAddress(out, &size) : connector->NdkGetLocalAddress(out, &size),
              STATUS_SUCCESS);
    EXPECT_EQ(size, sizeof(sockaddr_in6));
    EXPECT_EQ(in6.sin6_family, AF_INET6);
    return in6;
  };
  const sockaddr_in6 active_local = endpoint(c.active, false);
  const sockaddr_in6 active_peer = endpoint(c.active, true);
  const sockaddr_in6 passive_local = endpoint(c.passive.load(), false);
  const sockaddr_in6 passive_peer = endpoint(c.passive.load(), true);
  EXPECT_EQ(std::memcmp(&active_local.sin6_addr, &a6.sin6_addr, 16), 0);
  EXPECT_EQ(std::memcmp(&passive_peer.sin6_addr, &a6.sin6_addr, 16), 0);
  EXPECT_EQ(std::memcmp(&active_peer.sin6_addr, &b6.sin6_addr, 16), 0);
  EXPECT_EQ(std::memcmp(&passive_local.sin6_addr, &b6.sin6_addr, 16), 0);
  EXPECT_GE(ntohs(active_local.sin6_port), 49152) << "an ephemeral port";
  EXPECT_EQ(passive_peer.sin6_port, active_local.sin6_port);
  EXPECT_EQ(ntohs(active_peer.sin6_port), kPort);
  EXPECT_EQ(ntohs(passive_local.sin6_port), kPort);
  // A sockaddr_in is too small for them: the size needed comes back.
  sockaddr_in in{};
  length = sizeof in;
  EXPECT_EQ(c.active->NdkGetPeerAddress(reinterpret_cast<sockaddr*>(&in), &length), STATUS_BUFFER_TOO_SMALL);
  EXPECT_EQ(length, sizeof(sockaddr_in6));

  ASSERT_NO_FATAL_FAILURE(disconnect_and_close(one, Side::kActive));
  close(l);
}

// One listener, 1000 connections open at the same time, each with its own QP on both sides (A's on engine 0, B's
// on engine 1), all set up at once; a SEND on every one; then half disconnect from each side, everything closes,
// and the adapter holds what it held before (and the ASan build finds no leak).
TEST_F(ConnectionTest, AListenerHoldsAThousandConnectionsAtOnce) {
  constexpr std::size_t kConnections = 1000;
  Player& a = player({.engine = 0, .cq_depth = 4096});
  Player& b = player({.engine = 1, .cq_depth = 4096});
  const UroceResourceCounts before = adapter().UroceQueryResources();
  ListenerEvents events;
  Listener* l = listen(events, ipv4(b, kPort));
  std::vector<Connection> connections(kConnections);
  for (Connection& c : connections) {
    c.active_qp = qp_on(a, &c);
    c.passive_qp = qp_on(b, &c);
    ASSERT_TRUE(c.active_qp != nullptr && c.passive_qp != nullptr);
  }
  ASSERT_NO_FATAL_FAILURE(establish(connections, events, ipv4(a, 0), ipv4(b, kPort)));
  EXPECT_EQ(events.count.load(), static_cast<int>(kConnections));
  const UroceResourceCounts held = adapter().UroceQueryResources();
  EXPECT_EQ(held.Connectors, before.Connectors + 2 * kConnections);
  EXPECT_EQ(held.TransportQps, before.TransportQps + 2 * kConnections);
  EXPECT_GE(held.CmIds, 2 * kConnections) << "one CM ID on each side";
  ASSERT_NO_FATAL_FAILURE(send_on_each(connections, a, b));
  const std::span all(connections);
  ASSERT_NO_FATAL_FAILURE(disconnect_and_close(all.first(kConnections / 2), Side::kActive));
  ASSERT_NO_FATAL_FAILURE(disconnect_and_close(all.subspan(kConnections / 2), Side::kPassive));
  EXPECT_TRUE(a.drain().empty() && b.drain().empty()) << "nothing was outstanding to flush";
  for (Connection& c : connections) {
    close(c.active_qp);  // the connectors have let go of them
    close(c.passive_qp);
  }
  close(l);
  // Everything back as before; the CM forgets connections after their time-wait (1 s), earlier tests' too.
  UroceResourceCounts expected = before;
  expected.CmIds = 0;
  EXPECT_TRUE(eventually([&] { return adapter().UroceQueryResources() == expected; }));
}

// ---- a hostile neighbour on the link ----

// A neighbour that sends a thousand GSI datagrams, each from a MAC of its own and half of them with A's address,
// changes nothing of A's connection: B's DREQ still reaches A, the RC traffic flows both ways, and the CM keeps
// nothing of the datagrams. (B's CM once learnt a MAC from every datagram: its MADs for A went to the neighbour,
// and its map grew with every new source.)
TEST_F(ConnectionTest, DatagramsWithThePeersAddressFromAnotherMacRedirectNothing) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  ListenerEvents events;
  Listener* l = listen(events, ipv4(b, kPort));
  std::vector<Connection> one(1);
  one[0].active_qp = a.qp;
  one[0].passive_qp = b.qp;
  ASSERT_NO_FATAL_FAILURE(establish(one, events, ipv4(a, 0), ipv4(b, kPort)));
  const uint32_t cm_ids = adapter().UroceQueryResources().CmIds;

  // Every other datagram says it is from A; the rest from 10.0.x.y. Each from a MAC of its own; half are DREQs for
  // no connection (answered, to the neighbour), half anything at all (dropped).
  std::vector<GsiFrame> frames(1000);
  for (std::size_t i = 0; i < frames.size(); ++i) {
    GsiFrame& f = frames[i];
    f.source =
        i % 2 == 0 ? gid_of(a.ip()) : proto::gid_from_ipv4(proto::Ipv4Addr{0x0A000000u + static_cast<uint32_t>(i)});
    f.source_mac = proto::MacAddr{0x02AA00000000 + i};
    if (i % 4 < 2) {
      const proto::CmMutView<proto::Mad> h(f.mad.data());
      h.set(proto::Mad::base_version, proto::kMadBaseVersion);
      h.set(proto::Mad::management_class, proto::kCmManagementClass);
      h.set(proto::Mad::class_version, proto::kCmClassVersion);
      h.set(proto::Mad::method, proto::MadMethod::kSend);
      h.set(proto::Mad::attribute_id, proto::CmAttribute::kDreq);
      proto::CmMutView<proto::CmDreq>(f.mad.data()).set(proto::CmDreq::remote_comm_id, static_cast<uint32_t>(i));
    } else {
      for (std::size_t j = 0; j < f.mad.size(); ++j) f.mad[j] = static_cast<uint8_t>(i * 131 + j * 7);
    }
  }
  ASSERT_NO_FATAL_FAILURE(inject(frames));
  EXPECT_EQ(adapter().UroceQueryResources().CmIds, cm_ids) << "the CM keeps nothing of them";
  traffic(a, b, 3);
  traffic(b, a, 3);
  ASSERT_NO_FATAL_FAILURE(disconnect_and_close(one, Side::kPassive));  // B's DREQ reaches A, and A's DREP B
  close(l);
}

// The passive QP's peer MAC is the one A's REQ came from, even when a datagram with A's address from another MAC
// follows the REQ in the same batch (the CM once took the latest MAC it had seen for A's address).
TEST_F(ConnectionTest, TheAcceptedQpSendsToTheMacTheRequestCameFrom) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  ListenerEvents events;
  Listener* l = listen(events, ipv4(b, kPort));
  const auto req = requests(a, b, kPort, 0x1234, 1);
  const proto::MacAddr a_mac = impl().dataplane().port(dataplane::testing::kPortA).mac;
  std::vector<GsiFrame> frames(2);
  frames[0] = {gid_of(a.ip()), a_mac, req.at(0)};
  frames[1] = {gid_of(a.ip()), proto::MacAddr{0x02BADBADBAD0}, req.at(0)};  // the same REQ: a duplicate from elsewhere
  {
    const HeldCmThread held;
    inject(frames, /*cm_held=*/true);
  }
  ASSERT_TRUE(eventually([&] { return events.incoming.load() != nullptr; }));
  Connector* passive = events.incoming.load();
  Completion accepted;
  ASSERT_EQ(passive->NdkAccept(b.qp, 1, 1, nullptr, 0, nullptr, nullptr, &Completion::on_request, &accepted),
            STATUS_PENDING);
  const std::string expected = dataplane::mac_to_string(a_mac);
  std::string peer_mac;
  ASSERT_TRUE(eventually([&] {
    const auto report = impl().transport().report_qp(b.qp->UroceGetQpNumber());
    for (const auto& [key, value] : report ? report->text : decltype(report->text){})
      if (key == "peer_mac") peer_mac = value;
    return !peer_mac.empty();
  }));
  EXPECT_EQ(peer_mac, expected);
  EXPECT_EQ(events.count.load(), 1) << "one request, however many copies of its REQ";
  close(passive);
  close(l);
}

// A request the consumer leaves undecided ends when its sender stops waiting for an answer (here a REQ that allows
// 1 ms plus the packet life times, and no retry): the connector's accept then fails as if the peer had given up.
TEST_F(ConnectionTest, ARequestLeftUndecidedEndsWhenThePeerStopsWaiting) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  ListenerEvents events;
  Listener* l = listen(events, ipv4(b, kPort));
  GsiFrame frame{gid_of(a.ip()), impl().dataplane().port(dataplane::testing::kPortA).mac,
                 requests(a, b, kPort, 0x2345, 1).at(0)};
  proto::CmMutView<proto::CmReq>(frame.mad.data()).set(proto::CmReq::remote_cm_response_timeout, 8);
  proto::CmMutView<proto::CmReq>(frame.mad.data()).set(proto::CmReq::max_cm_retries, 0);
  const uint64_t timeouts = cm_counter("cm_timeouts");
  ASSERT_NO_FATAL_FAILURE(inject(std::span(&frame, 1)));
  ASSERT_TRUE(eventually([&] { return events.incoming.load() != nullptr; }));
  ASSERT_TRUE(eventually([&] { return cm_counter("cm_timeouts") > timeouts; }));
  Connector* incoming = events.incoming.load();
  Completion accepted;
  EXPECT_EQ(incoming->NdkAccept(b.qp, 1, 1, nullptr, 0, nullptr, nullptr, &Completion::on_request, &accepted),
            STATUS_CONNECTION_ABORTED);
  close(incoming);
  close(l);
}

// A flood of REQs to a listener whose consumer answers none: the listener holds kListenBacklog of them and the rest
// get REJ "no resources"; places the consumer frees (a reject, a close) take new requests again, and another
// listener's connections go through meanwhile.
TEST_F(ConnectionTest, AListenersBacklogBoundsTheRequestsItHolds) {
  constexpr std::size_t kBacklog = detail::kListenBacklog;
  constexpr std::size_t kMore = 16;
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  std::mutex mutex;
  std::vector<Connector*> held;  // the consumer's, in arrival order (under mutex)
  ListenerEvents flooded;
  flooded.on_connect = [&](Connector* c) {
    const std::lock_guard lock(mutex);
    held.push_back(c);
  };
  Listener* l = listen(flooded, ipv4(b, kPort));
  const auto reqs = requests(a, b, kPort, 0x10000, kBacklog + 3 * kMore);
  std::vector<GsiFrame> frames;
  for (const auto& req : reqs) frames.push_back({gid_of(a.ip()), impl().dataplane().port(0).mac, req});
  auto send = [&](std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; i += 128)
      ASSERT_NO_FATAL_FAILURE(inject(std::span(frames).subspan(i, std::min<std::size_t>(128, to - i))));
  };
  const uint64_t refused = cm_counter("cm_req_over_backlog");
  ASSERT_NO_FATAL_FAILURE(send(0, kBacklog + kMore));
  ASSERT_TRUE(eventually([&] { return flooded.count.load() == static_cast<int>(kBacklog); }));
  EXPECT_EQ(cm_counter("cm_req_over_backlog") - refused, kMore);

  ListenerEvents other_events;
  Listener* other = listen(other_events, ipv4(b, kPort + 1));
  std::vector<Connection> one(1);
  one[0].active_qp = a.qp;
  one[0].passive_qp = b.qp;
  ASSERT_NO_FATAL_FAILURE(establish(one, other_events, ipv4(a, 0), ipv4(b, kPort + 1)));
  ASSERT_NO_FATAL_FAILURE(disconnect_and_close(one, Side::kActive));
  close(other);

  auto consumers = [&] {  // a copy: the API is never called under the mutex the connect event takes
    const std::lock_guard lock(mutex);
    return held;
  };
  std::vector<Connector*> first = consumers();
  for (std::size_t i = 0; i < kMore; ++i) EXPECT_EQ(first[i]->NdkReject(nullptr, 0), STATUS_SUCCESS);
  for (std::size_t i = kMore; i < 2 * kMore; ++i) close(first[i]);
  ASSERT_NO_FATAL_FAILURE(send(kBacklog + kMore, kBacklog + 3 * kMore));
  ASSERT_TRUE(eventually([&] { return flooded.count.load() == static_cast<int>(kBacklog + 2 * kMore); }));
  EXPECT_EQ(cm_counter("cm_req_over_backlog") - refused, kMore) << "two places freed for every new request";
  const std::vector<Connector*> all = consumers();
  for (std::size_t i = 0; i < all.size(); ++i)
    if (i < kMore || i >= 2 * kMore) close(all[i]);
  close(l);
}

}  // namespace
}  // namespace uroce::ndk::testing
