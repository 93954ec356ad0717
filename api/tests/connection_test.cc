// Connectors and listeners end to end in one process: the CM's MADs cross the ring link between port a
// (198.18.0.1 and fd00::1, player A on engine 0) and port b (198.18.0.2 and fd00::2, player B on engine 1) through
// the GSI QP, and the QPs they connect carry traffic (ndkpi.md §9.7-9.8, §10.4-10.5).
#include <gtest/gtest.h>

#include "api/tests/connection_fixture.h"

namespace uroce::ndk::testing {
namespace {

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
    Completion refused;
    EXPECT_EQ(connect(active, b, a, kPort, "", refused), STATUS_INVALID_PARAMETER) << "the other adapter's QP";
    ASSERT_EQ(connect(active, a, b, kPort, "across adapters", connected), STATUS_PENDING);
    ASSERT_TRUE(eventually([&] { return events.incoming.load() != nullptr; }));
    Connector* passive = events.incoming.load();
    EXPECT_EQ(second->UroceQueryResources().Connectors, 1u);  // the passive connector is the listener adapter's
    EXPECT_EQ(adapter().UroceQueryResources().Connectors, 1u);
    Completion accepted;
    DisconnectEvents b_disconnects;
    EXPECT_EQ(passive->NdkAccept(a.qp, 4, 4, nullptr, 0, nullptr, nullptr, &Completion::on_request, &accepted),
              STATUS_INVALID_PARAMETER)
        << "the other adapter's QP";
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

// A connect whose peer never answers ARP fails with STATUS_HOST_UNREACHABLE once the lookup gives up (3 s). A
// connector closed while that lookup runs must outlive the continuation that reports the failure: its other
// references (the caller's, the pending request's) are gone by then, and the failure used to be posted to the CM
// thread without one, which then ran on a freed connector (ASan: heap-use-after-free in fail()).
TEST_F(ConnectionTest, AConnectorClosedWhileItsPeerIsResolvedOutlivesTheLookup) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  Address nobody = ipv4(b, kPort);
  reinterpret_cast<sockaddr_in*>(&nobody.storage)->sin_addr.s_addr = htonl(0xC6120063);  // 198.18.0.99: no one
  const Address src = ipv4(a, 0);
  const auto connect_to_nobody = [&](Connector* c, Qp* qp, Completion& done) {
    return c->NdkConnect(qp, src.get(), src.length, nobody.get(), nobody.length, 4, 4, nullptr, 0,
                         &Completion::on_request, &done);
  };
  Connector* closed_early = connector();
  Completion cancelled;
  ASSERT_EQ(connect_to_nobody(closed_early, a.qp, cancelled), STATUS_PENDING);
  // A second lookup, started later, ends after the first: by its completion the first one's has run too.
  Player& other = player({.engine = 0});
  Connector* waits = connector();
  Completion unreachable;
  ASSERT_EQ(connect_to_nobody(waits, other.qp, unreachable), STATUS_PENDING);

  Completion closed;  // with a completion, the lookup's end destroys the connector on its own thread
  EXPECT_EQ(closed_early->NdkCloseConnector(&Completion::on_close, &closed), STATUS_PENDING);
  ASSERT_TRUE(cancelled.wait());
  EXPECT_EQ(cancelled.status.load(), STATUS_CANCELLED);
  ASSERT_TRUE(closed.wait());
  ASSERT_TRUE(unreachable.wait());
  EXPECT_EQ(unreachable.status.load(), STATUS_HOST_UNREACHABLE);
  close(waits);
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
  EXPECT_EQ(second->NdkListen(sa(same), sizeof same, nullptr, nullptr), STATUS_SHARING_VIOLATION);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_port = htons(kPort);
  EXPECT_EQ(second->NdkListen(sa(any), sizeof any, nullptr, nullptr), STATUS_SHARING_VIOLATION);
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

}  // namespace
}  // namespace uroce::ndk::testing
