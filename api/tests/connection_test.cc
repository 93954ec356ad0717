// Connectors and listeners end to end in one process: the CM's MADs cross the ring link between port a
// (198.18.0.1, player A on engine 0) and port b (198.18.0.2, player B on engine 1) through the GSI QP, and the
// QPs they connect carry traffic (ndkpi.md §9.7-9.8, §10.4-10.5).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>

#include "api/tests/api_players.h"

namespace uroce::ndk::testing {
namespace {

constexpr uint16_t kPort = 7174;  // rping's

sockaddr_in with_port(sockaddr_in in, uint16_t port) {
  in.sin_port = htons(port);
  return in;
}
const sockaddr* sa(const sockaddr_in& in) { return reinterpret_cast<const sockaddr*>(&in); }

struct ListenerEvents {
  std::atomic<Connector*> incoming{nullptr};
  std::atomic<int> count{0};
  std::function<void(Connector*)> on_connect;  // runs inside the connect event (set before listening)
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

class ConnectionTest : public ApiTest {
 protected:
  Connector* connector() {
    Connector* c = nullptr;
    EXPECT_EQ(adapter().NdkCreateConnector(nullptr, nullptr, &c), STATUS_SUCCESS);
    return c;
  }
  Listener* listen(ListenerEvents& events, const sockaddr_in& address) {
    Listener* l = nullptr;
    EXPECT_EQ(adapter().NdkCreateListener(&ListenerEvents::callback, &events, nullptr, nullptr, &l), STATUS_SUCCESS);
    EXPECT_EQ(l->NdkListen(sa(address), sizeof address, nullptr, nullptr), STATUS_SUCCESS);
    return l;
  }
  static void close(Connector* c) { EXPECT_EQ(c->NdkCloseConnector(nullptr, nullptr), STATUS_SUCCESS); }
  static void close(Listener* l) { EXPECT_EQ(l->NdkCloseListener(nullptr, nullptr), STATUS_SUCCESS); }
  NTSTATUS connect(Connector* c, Player& from, Player& to, uint16_t port, const std::string& private_data,
                   Completion& done) {
    const sockaddr_in src = with_port(from.ip(), 0);
    const sockaddr_in dst = with_port(to.ip(), port);
    return c->NdkConnect(from.qp, sa(src), sizeof src, sa(dst), sizeof dst, 4, 4, private_data.data(),
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
};

TEST_F(ConnectionTest, ConnectAcceptTrafficAndGracefulDisconnect) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  ListenerEvents listener_events;
  Listener* listener = listen(listener_events, with_port(b.ip(), kPort));
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

// rping's order: both sides post a receive before the connection exists, and the client SENDs as soon as it is
// established; the server's receive completes.
TEST_F(ConnectionTest, ReceivesPostedBeforeTheConnectionComplete) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  ASSERT_EQ(a.receive(0, 16, 1), STATUS_SUCCESS);
  ASSERT_EQ(b.receive(0, 16, 2), STATUS_SUCCESS);
  ListenerEvents events;
  Completion accepted;
  events.on_connect = [&](Connector* incoming) {
    EXPECT_EQ(incoming->NdkAccept(b.qp, 16, 16, nullptr, 0, nullptr, nullptr, &Completion::on_request, &accepted),
              STATUS_PENDING);
  };
  Listener* l = listen(events, with_port(b.ip(), kPort));
  Connector* c = connector();
  Completion connected, completed;
  ASSERT_EQ(connect(c, a, b, kPort, "", connected), STATUS_PENDING);
  ASSERT_TRUE(connected.wait());
  ASSERT_EQ(connected.status.load(), STATUS_SUCCESS);
  ASSERT_EQ(c->NdkCompleteConnect(nullptr, nullptr, &Completion::on_request, &completed), STATUS_PENDING);
  ASSERT_TRUE(completed.wait());
  ASSERT_EQ(a.send(64, 16, 3), STATUS_SUCCESS);
  const auto got = b.result();
  EXPECT_EQ(got.Status, STATUS_SUCCESS);
  EXPECT_EQ(got.Type, NdkOperationTypeReceive);
  EXPECT_EQ(got.BytesTransferred, 16u);
  EXPECT_EQ(a.result().Type, NdkOperationTypeSend);
  ASSERT_TRUE(accepted.wait());
  close(c);
  close(events.incoming.load());
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
  Listener* l = listen(events, with_port(b.ip(), 4420));
  Connector* again = connector();
  Completion rejected;
  ASSERT_EQ(connect(again, a, b, 4420, "", rejected), STATUS_PENDING);
  ASSERT_TRUE(rejected.wait());
  EXPECT_EQ(rejected.status.load(), STATUS_CONNECTION_REFUSED);
  close(again);
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
  Listener* l = listen(events, with_port(b.ip(), kPort));
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
  Listener* l = listen(events, with_port(b.ip(), kPort));
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
  Listener* first = listen(events, with_port(b.ip(), kPort));
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
  Listener* third = listen(events, with_port(b.ip(), kPort));
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
  DisconnectEvents b_disconnects;
  Completion accepted;
  events.on_connect = [&](Connector* incoming) {
    EXPECT_EQ(incoming->NdkAccept(b.qp, 1, 1, nullptr, 0, &DisconnectEvents::callback, &b_disconnects,
                                  &Completion::on_request, &accepted),
              STATUS_PENDING);
  };
  Listener* l = listen(events, with_port(b.ip(), kPort));
  Connector* c = connector();
  Completion connected, completed;
  ASSERT_EQ(connect(c, a, b, kPort, "", connected), STATUS_PENDING);
  ASSERT_TRUE(connected.wait());
  ASSERT_EQ(connected.status.load(), STATUS_SUCCESS);
  ASSERT_EQ(c->NdkCompleteConnect(nullptr, nullptr, &Completion::on_request, &completed), STATUS_PENDING);
  ASSERT_TRUE(completed.wait());
  ASSERT_TRUE(accepted.wait());
  traffic(a, b, 3);
  close(c);
  ASSERT_TRUE(eventually([&] { return b_disconnects.count.load() == 1; }));
  close(events.incoming.load());
  close(l);
}

}  // namespace
}  // namespace uroce::ndk::testing
