// Connectors and listeners against a hostile neighbour on the link: spoofed GSI datagrams, requests the consumer
// never answers, and more requests than a listener holds. End to end over the ring link, as connection_test.cc.
#include <gtest/gtest.h>

#include "api/tests/connection_fixture.h"

namespace uroce::ndk::testing {
namespace {

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
