// The adapter, object creation (inline and STATUS_PENDING), limits, and validation: every invalid
// parameter returns a status, never crashes, and never leaves a completion behind.
#include <array>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <rte_telemetry.h>
#include <sys/mman.h>
#include <unistd.h>

#include "api/connection.h"
#include "api/tests/api_players.h"
#include "dataplane/telemetry.h"

namespace uroce::ndk::testing {
namespace {

static_assert(std::string_view(NdkStatusName(STATUS_CANCELLED)) == "STATUS_CANCELLED");
static_assert(std::string_view(NdkStatusName(STATUS_REMOTE_RESOURCES)) == "STATUS_REMOTE_RESOURCES");
static_assert(std::string_view(NdkStatusName(ntstatus(0xC0001234))) == "unknown NTSTATUS");

TEST(AdapterOpen, NegotiatesTheVersionAsNdkpiDoes) {
  Adapter* adapter = nullptr;
  const config::Config config = api_test_config();
  EXPECT_EQ(NdkOpenAdapter(config, NdkVersion{2, 0}, &adapter), NDIS_STATUS_BAD_VERSION);
  EXPECT_EQ(NdkOpenAdapter(config, NdkVersion{1, 3}, &adapter), NDIS_STATUS_BAD_VERSION);
  EXPECT_EQ(NdkOpenAdapter(config, NdkVersion{1, 2}, nullptr), STATUS_INVALID_PARAMETER);
  ASSERT_EQ(NdkOpenAdapter(config, NdkVersion{1, 0}, &adapter), STATUS_SUCCESS);  // lowest minor accepted: 0
  EXPECT_EQ(adapter->ObjectType, NdkObjectTypeAdapter);
  EXPECT_EQ(adapter->Version.Major, 1);
  EXPECT_EQ(adapter->Version.Minor, 2) << "runs the provider's highest minor";
  NdkCloseAdapter(adapter);
  // Closed means closed: the engines are gone, and a new adapter can start.
  ASSERT_EQ(NdkOpenAdapter(config, NdkVersion{1, 1}, &adapter), STATUS_SUCCESS);
  NdkCloseAdapter(adapter);
}

// Every CQ and SRQ is placed on an engine (AdapterImpl::choose_engine), so an adapter without one must not open.
TEST(AdapterOpen, RefusesAConfigurationWithoutEngines) {
  config::Config config = api_test_config();
  config.eal.lcores.clear();
  Adapter* adapter = nullptr;
  EXPECT_EQ(NdkOpenAdapter(config, kNdkVersion, &adapter), STATUS_INSUFFICIENT_RESOURCES);
  EXPECT_EQ(adapter, nullptr);
}

// ndkpi.md §1 (review row A3): many adapter instances may exist per NIC. Adapters opened on one configuration share
// its dataplane: a QP of one talks to a QP of the other, closing one leaves the other working, UroceStopPolling from
// one stops nothing the other still uses, and an open on another configuration while they run fails (DPDK serves
// one dataplane per process) until the last of them has closed.
TEST(AdapterOpen, SeveralAdaptersShareOneConfigurationsEngines) {
  const config::Config config = api_test_config();
  config::Config other = config;
  other.engine.tx_backlog += 1;
  Adapter* first = nullptr;
  Adapter* second = nullptr;
  Adapter* third = nullptr;
  ASSERT_EQ(NdkOpenAdapter(config, kNdkVersion, &first), STATUS_SUCCESS);
  ASSERT_EQ(NdkOpenAdapter(config, kNdkVersion, &second), STATUS_SUCCESS);
  EXPECT_NE(first, second);
  EXPECT_EQ(NdkOpenAdapter(other, kNdkVersion, &third), STATUS_INSUFFICIENT_RESOURCES);
  EXPECT_EQ(third, nullptr);
  {
    Player a(*first, PlayerOptions{.engine = 0});
    Player b(*second, PlayerOptions{.engine = 1});
    connect(a, b);
    traffic(a, b, 16);
    first->UroceStopPolling();  // the second adapter still uses the engines: they keep polling
    traffic(b, a, 16);
    // Each adapter counts its own objects; the transport's QPs are the process's.
    EXPECT_EQ(first->UroceQueryResources().Qps, 1u);
    EXPECT_EQ(second->UroceQueryResources().Qps, 1u);
    EXPECT_EQ(second->UroceQueryResources().TransportQps, 2u);
  }
  NdkCloseAdapter(first);
  {
    Player c(*second, PlayerOptions{.engine = 0});
    Player d(*second, PlayerOptions{.engine = 1});
    connect(c, d);
    traffic(c, d, 16);
  }
  EXPECT_EQ(NdkOpenAdapter(other, kNdkVersion, &third), STATUS_INSUFFICIENT_RESOURCES);
  NdkCloseAdapter(second);
  ASSERT_EQ(NdkOpenAdapter(other, kNdkVersion, &third), STATUS_SUCCESS);  // all closed: another configuration
  NdkCloseAdapter(third);
}

// Review rows C12 and G6 (ndkpi.md §9.9): a fatal error reaches CQs and SRQs as STATUS_INTERNAL_ERROR. Here the
// engines stop (UroceStopPolling) under open objects: nothing can complete on them any more. An armed CQ hears it
// at once, an unarmed one at its next arm, the SRQ at once (armed or not); each once, and the CQ's QP and the SRQ
// refuse posts from then on with STATUS_INTERNAL_ERROR. Everything still closes.
TEST(AdapterOpen, WhenTheEnginesStopOpenCqsAndSrqsHearInternalError) {
  Adapter* adapter = nullptr;
  ASSERT_EQ(NdkOpenAdapter(api_test_config(), kNdkVersion, &adapter), STATUS_SUCCESS);
  {
    Player a(*adapter, PlayerOptions{.engine = 0});
    Player b(*adapter, PlayerOptions{.engine = 1});
    connect(a, b);
    traffic(a, b, 4);
    Srq* srq = nullptr;
    Notifications srq_events;
    ASSERT_EQ(a.pd->NdkCreateSrq(16, 1, 0, &Notifications::callback, &srq_events, nullptr, nullptr, nullptr, &srq),
              STATUS_SUCCESS);
    a.cq->NdkArmCq(NDK_CQ_NOTIFY_ERRORS);
    adapter->UroceStopPolling();
    ASSERT_TRUE(eventually([&] { return a.notifications.count.load() == 1 && srq_events.count.load() == 1; }));
    EXPECT_EQ(a.notifications.last_status.load(), STATUS_INTERNAL_ERROR);
    EXPECT_EQ(srq_events.last_status.load(), STATUS_INTERNAL_ERROR);
    adapter->UroceWaitForNotifier();
    EXPECT_EQ(b.notifications.count.load(), 0) << "not armed";
    b.cq->NdkArmCq(NDK_CQ_NOTIFY_ANY);
    ASSERT_TRUE(eventually([&] { return b.notifications.count.load() == 1; }));
    EXPECT_EQ(b.notifications.last_status.load(), STATUS_INTERNAL_ERROR);
    EXPECT_EQ(a.send(0, 64, 1), STATUS_INTERNAL_ERROR);
    EXPECT_EQ(b.receive(0, 64, 2), STATUS_INTERNAL_ERROR);
    std::vector<uint8_t> buffer(64);
    const NdkSge sge{buffer.data(), 64, a.token()};
    EXPECT_EQ(srq->NdkSrqReceive(nullptr, &sge, 1), STATUS_INTERNAL_ERROR);
    a.cq->NdkArmCq(NDK_CQ_NOTIFY_ANY);  // nothing further (§9.9)
    adapter->UroceWaitForNotifier();
    EXPECT_EQ(a.notifications.count.load(), 1);
    EXPECT_EQ(b.notifications.count.load(), 1);
    EXPECT_EQ(srq_events.count.load(), 1);
    EXPECT_EQ(srq->NdkCloseSrq(nullptr, nullptr), STATUS_SUCCESS);
  }
  NdkCloseAdapter(adapter);
}

// Review row A4 (ndkpi.md §10.3): NdkCloseAdapter blocks, and when it returns every callback of every descendant has
// returned. A CQ's callback is still running (held for 100 ms) when its CQ is closed with a completion (pending:
// the callback holds it) and the adapter is closed right after: the close returns only once both ran.
TEST(AdapterOpen, CloseReturnsOnlyAfterEveryDescendantsCallbacks) {
  Adapter* adapter = nullptr;
  ASSERT_EQ(NdkOpenAdapter(api_test_config(), kNdkVersion, &adapter), STATUS_SUCCESS);
  std::atomic<bool> callback_running{false}, callback_returned{false};
  Completion cq_closed;
  // B outlives the adapter (its callback's context is B's): its objects are closed by hand, its destructor then
  // has nothing left to close.
  Player b(*adapter, PlayerOptions{.engine = 1});
  {
    Player a(*adapter, PlayerOptions{.engine = 0});
    connect(a, b);
    b.notifications.on_notify = [&](NTSTATUS) {
      callback_running.store(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      callback_returned.store(true);
    };
    ASSERT_EQ(b.receive(0, 64, 1), STATUS_SUCCESS);
    b.cq->NdkArmCq(NDK_CQ_NOTIFY_ANY);
    ASSERT_EQ(a.send(0, 32, 2), STATUS_SUCCESS);
    ASSERT_TRUE(eventually([&] { return callback_running.load(); }));
  }  // A's objects close here, with no completion
  EXPECT_EQ(b.qp->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(b.mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(b.pd->NdkClosePd(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(b.cq->NdkCloseCq(&Completion::on_close, &cq_closed), STATUS_PENDING);  // its callback holds it
  b.qp = nullptr;
  b.mr = nullptr;
  b.pd = nullptr;
  b.cq = nullptr;
  NdkCloseAdapter(adapter);
  EXPECT_TRUE(callback_returned.load());
  EXPECT_TRUE(cq_closed.done.load());
}

class AdapterTest : public ApiTest {};

// An idle adapter's connection manager sleeps between its timer checks. It once spun (a negative wait when no CM
// timer was set) and took half of the application's CPU on a 2-core machine. A sleeping thread uses next to no
// CPU whatever the machine's speed; a spinning one gets a large share even next to a CPU hog.
TEST_F(AdapterTest, TheConnectionManagerThreadSleepsWhenIdle) {
  const std::optional<uint64_t> before = thread_cpu_ticks(detail::ConnectionManager::kThreadName);
  ASSERT_TRUE(before.has_value()) << "no thread named " << detail::ConnectionManager::kThreadName;
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const double wall_ticks =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * sysconf(_SC_CLK_TCK);
  const uint64_t used = thread_cpu_ticks(detail::ConnectionManager::kThreadName).value_or(0) - *before;
  EXPECT_LT(static_cast<double>(used), 0.1 * wall_ticks) << used << " ticks of CPU in " << wall_ticks << " ticks";
}

// The connection manager's counters (also /uroce/cm in DPDK telemetry) count what really crossed the GSI QP: a
// REQ to a port nobody listens on, and the REJ that answers it.
TEST_F(AdapterTest, TheConnectionManagerCountsItsMads) {
  auto counters = [&] {
    const auto values = static_cast<detail::AdapterImpl&>(adapter()).connections().counter_values();
    return std::map<std::string, uint64_t>(values.begin(), values.end());
  };
  rte_tel_data* data = rte_tel_data_alloc();
  EXPECT_EQ(dataplane::telemetry_cm_command("/uroce/cm", nullptr, data), 0);
  rte_tel_data_free(data);
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  const auto before = counters();
  Connector* connector = nullptr;
  ASSERT_EQ(adapter().NdkCreateConnector(nullptr, nullptr, &connector), STATUS_SUCCESS);
  sockaddr_in source = a.ip(), destination = b.ip();
  source.sin_port = 0;
  destination.sin_port = htons(9);  // nobody listens
  Completion refused;
  ASSERT_EQ(connector->NdkConnect(a.qp, reinterpret_cast<const sockaddr*>(&source), sizeof source,
                                  reinterpret_cast<const sockaddr*>(&destination), sizeof destination, 0, 0, nullptr, 0,
                                  &Completion::on_request, &refused),
            STATUS_PENDING);
  ASSERT_TRUE(refused.wait());
  EXPECT_EQ(refused.status.load(), STATUS_CONNECTION_REFUSED);
  EXPECT_EQ(connector->NdkCloseConnector(nullptr, nullptr), STATUS_SUCCESS);
  // The snapshot follows the CM thread's step that handled the REJ.
  ASSERT_TRUE(eventually([&] { return counters()["cm_rx_mads"] >= before.at("cm_rx_mads") + 2; }));
  const auto after = counters();
  EXPECT_GE(after.at("cm_tx_mads"), before.at("cm_tx_mads") + 2);  // the REQ and the REJ
  EXPECT_GE(after.at("gsi_tx_mads"), before.at("gsi_tx_mads") + 2);
  EXPECT_GE(after.at("gsi_rx_mads"), before.at("gsi_rx_mads") + 2);
  EXPECT_EQ(after.at("cm_rx_malformed"), before.at("cm_rx_malformed"));
}

// UroceQueryResources counts what exists, each number from the bookkeeping that owns it: every create, bind and
// connection attempt shows, and every close takes it back.
TEST_F(AdapterTest, QueryResourcesCountsWhatExistsAndCloseTakesItBack) {
  const UroceResourceCounts start = adapter().UroceQueryResources();
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  const UroceResourceCounts players = adapter().UroceQueryResources();
  EXPECT_EQ(players.Cqs, start.Cqs + 2);
  EXPECT_EQ(players.Pds, start.Pds + 2);
  EXPECT_EQ(players.Mrs, start.Mrs + 2);
  EXPECT_EQ(players.Qps, start.Qps + 2);
  EXPECT_EQ(players.TransportQps, start.TransportQps + 2);
  EXPECT_EQ(players.MemorySlots, start.MemorySlots + 2);  // the players' registrations

  Mw* mw = nullptr;
  ASSERT_EQ(a.pd->NdkCreateMw(nullptr, nullptr, &mw), STATUS_SUCCESS);
  Srq* srq = nullptr;
  ASSERT_EQ(a.pd->NdkCreateSrq(64, 1, 0, nullptr, nullptr, nullptr, nullptr, nullptr, &srq), STATUS_SUCCESS);
  sockaddr_in own = a.ip();
  SharedEndpoint* endpoint = nullptr;
  ASSERT_EQ(adapter().NdkCreateSharedEndpoint(reinterpret_cast<const sockaddr*>(&own), sizeof own, nullptr, nullptr,
                                              &endpoint),
            STATUS_SUCCESS);
  // A connection request that waits for the consumer: a CM ID on each side, and a connector on each.
  std::atomic<Connector*> incoming{nullptr};
  Listener* listener = nullptr;
  ASSERT_EQ(
      adapter().NdkCreateListener([](void* c, Connector* in) { static_cast<std::atomic<Connector*>*>(c)->store(in); },
                                  &incoming, nullptr, nullptr, &listener),
      STATUS_SUCCESS);
  sockaddr_in service = b.ip();
  service.sin_port = htons(7174);
  ASSERT_EQ(listener->NdkListen(reinterpret_cast<const sockaddr*>(&service), sizeof service, nullptr, nullptr),
            STATUS_SUCCESS);
  Connector* connector = nullptr;
  ASSERT_EQ(adapter().NdkCreateConnector(nullptr, nullptr, &connector), STATUS_SUCCESS);
  Completion refused;
  ASSERT_EQ(connector->NdkConnect(a.qp, reinterpret_cast<const sockaddr*>(&own), sizeof own,
                                  reinterpret_cast<const sockaddr*>(&service), sizeof service, 0, 0, nullptr, 0,
                                  &Completion::on_request, &refused),
            STATUS_PENDING);
  ASSERT_TRUE(eventually([&] { return incoming.load() != nullptr; }));
  const UroceResourceCounts held = adapter().UroceQueryResources();
  EXPECT_EQ(held.Mws, players.Mws + 1);
  EXPECT_EQ(held.Srqs, players.Srqs + 1);
  EXPECT_EQ(held.MemorySlots, players.MemorySlots + 1);  // the window's
  EXPECT_EQ(held.SharedEndpoints, players.SharedEndpoints + 1);
  EXPECT_EQ(held.Listeners, players.Listeners + 1);
  EXPECT_EQ(held.Connectors, players.Connectors + 2);
  EXPECT_EQ(held.CmIds, players.CmIds + 2);
  EXPECT_EQ(held.BoundEndpoints, players.BoundEndpoints + 3);  // the shared endpoint, the listener, the connector

  // Review row A7 (ndkpi.md §4): NdkQueryExtension is in all ten dispatch tables; no extension is defined.
  const NdkGuid some_extension{0x12345678, 0x9abc, 0xdef0, {1, 2, 3, 4, 5, 6, 7, 8}};
  const std::array<ObjectHeader*, 10> objects = {&adapter(), a.cq, a.pd,     a.mr,     mw,
                                                 srq,        a.qp, endpoint, listener, connector};
  for (ObjectHeader* object : objects) {
    NdkExtensionInterface extension{&some_extension};
    EXPECT_EQ(object->NdkQueryExtension(&some_extension, NdkVersion{1, 0}, &extension), STATUS_NOT_SUPPORTED)
        << "object type " << object->ObjectType;
    EXPECT_EQ(extension.Dispatch, nullptr);
    EXPECT_EQ(object->NdkQueryExtension(nullptr, NdkVersion{1, 0}, &extension), STATUS_INVALID_PARAMETER);
    EXPECT_EQ(object->NdkQueryExtension(&some_extension, NdkVersion{1, 0}, nullptr), STATUS_INVALID_PARAMETER);
  }

  // Closed without an accept, the incoming connector rejects the request.
  EXPECT_EQ(incoming.load()->NdkCloseConnector(nullptr, nullptr), STATUS_SUCCESS);
  ASSERT_TRUE(refused.wait());
  EXPECT_EQ(refused.status.load(), STATUS_CONNECTION_REFUSED);
  EXPECT_EQ(connector->NdkCloseConnector(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(listener->NdkCloseListener(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(endpoint->NdkCloseSharedEndpoint(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(srq->NdkCloseSrq(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(mw->NdkCloseMw(nullptr, nullptr), STATUS_SUCCESS);
  // The CM forgets the IDs on its own thread.
  EXPECT_TRUE(eventually([&] { return adapter().UroceQueryResources() == players; }));
  const UroceResourceCounts end = adapter().UroceQueryResources();
  EXPECT_EQ(end.CmIds, players.CmIds);
  EXPECT_EQ(end.BoundEndpoints, players.BoundEndpoints);
}

TEST_F(AdapterTest, QueryAdapterInfoReportsRealLimits) {
  uint32_t size = 4;
  NdkAdapterInfo info{};
  EXPECT_EQ(adapter().NdkQueryAdapterInfo(&info, nullptr), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(adapter().NdkQueryAdapterInfo(&info, &size), STATUS_BUFFER_TOO_SMALL);
  EXPECT_EQ(size, sizeof(NdkAdapterInfo));
  ASSERT_EQ(adapter().NdkQueryAdapterInfo(&info, &size), STATUS_SUCCESS);
  EXPECT_EQ(info.Version.Major, 1);
  EXPECT_EQ(info.Version.Minor, 2);
  EXPECT_GE(info.MaxInitiatorRequestSge, 4u);
  EXPECT_GE(info.MaxReceiveRequestSge, 4u);
  EXPECT_GE(info.MaxReadRequestSge, 4u);
  EXPECT_GE(info.MaxInlineDataSize, 256u);
  EXPECT_GE(info.FRMRPageCount, 16u);
  EXPECT_EQ(info.MaxInboundReadLimit, api_test_config().rdma.max_dest_rd_atomic);
  EXPECT_EQ(info.MaxOutboundReadLimit, api_test_config().rdma.max_rd_atomic);
  EXPECT_GT(info.MaxCqDepth, 0u);
  EXPECT_GT(info.MaxInitiatorQueueDepth, 0u);
  EXPECT_GT(info.MaxReceiveQueueDepth, 0u);
  EXPECT_GT(info.MaxSrqDepth, 0u);
  EXPECT_GE(info.MaxTransferLength, 1u << 20);
  EXPECT_EQ(info.RdmaTechnology, NdkRoCEv2);
  EXPECT_TRUE(info.AdapterFlags & NDK_ADAPTER_FLAG_CQ_RESIZE_SUPPORTED);
  EXPECT_TRUE(info.AdapterFlags & NDK_ADAPTER_FLAG_RDMA_READ_SINK_NOT_REQUIRED);
  EXPECT_TRUE(info.AdapterFlags & NDK_ADAPTER_FLAG_MULTI_ENGINE_SUPPORTED);
  EXPECT_TRUE(info.AdapterFlags & NDK_ADAPTER_FLAG_CQ_INTERRUPT_MODERATION_SUPPORTED);
  // In-order placement is true of the responder (a message's packets in PSN order); a READ with local invalidate
  // is not implemented and a connection to our own address is not supported, so neither is advertised.
  EXPECT_TRUE(info.AdapterFlags & NDK_ADAPTER_FLAG_IN_ORDER_DMA_SUPPORTED);
  EXPECT_FALSE(info.AdapterFlags & NDK_ADAPTER_FLAG_RDMA_READ_LOCAL_INVALIDATE_SUPPORTED);
  EXPECT_FALSE(info.AdapterFlags & NDK_ADAPTER_FLAG_LOOPBACK_CONNECTIONS_SUPPORTED);

  // The limits are enforced: one past each is STATUS_INVALID_PARAMETER.
  Cq* cq = nullptr;
  EXPECT_EQ(adapter().NdkCreateCq(info.MaxCqDepth + 1, nullptr, nullptr, nullptr, nullptr, nullptr, &cq),
            STATUS_INVALID_PARAMETER);
  ASSERT_EQ(adapter().NdkCreateCq(info.MaxCqDepth, nullptr, nullptr, nullptr, nullptr, nullptr, &cq), STATUS_SUCCESS);
  Pd* pd = nullptr;
  ASSERT_EQ(adapter().NdkCreatePd(nullptr, nullptr, &pd), STATUS_SUCCESS);
  Qp* qp = nullptr;
  const auto create = [&](uint32_t rq, uint32_t iq, uint32_t rsge, uint32_t isge, uint32_t inline_size) {
    return pd->NdkCreateQp(cq, cq, nullptr, rq, iq, rsge, isge, inline_size, nullptr, nullptr, &qp);
  };
  EXPECT_EQ(create(info.MaxReceiveQueueDepth + 1, 8, 1, 1, 0), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(create(8, info.MaxInitiatorQueueDepth + 1, 1, 1, 0), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(create(8, 8, info.MaxReceiveRequestSge + 1, 1, 0), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(create(8, 8, 1, info.MaxInitiatorRequestSge + 1, 0), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(create(8, 8, 1, 1, info.MaxInlineDataSize + 1), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(create(0, 8, 1, 1, 0), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp, nullptr) << "no object on failure";
  ASSERT_EQ(create(info.MaxReceiveQueueDepth, info.MaxInitiatorQueueDepth, info.MaxReceiveRequestSge,
                   info.MaxInitiatorRequestSge, info.MaxInlineDataSize),
            STATUS_SUCCESS);
  Srq* srq = nullptr;
  EXPECT_EQ(pd->NdkCreateSrq(info.MaxSrqDepth + 1, 1, 0, nullptr, nullptr, nullptr, nullptr, nullptr, &srq),
            STATUS_INVALID_PARAMETER);
  Mr* mr = nullptr;
  ASSERT_EQ(pd->NdkCreateMr(true, nullptr, nullptr, &mr), STATUS_SUCCESS);
  EXPECT_EQ(mr->NdkInitializeFastRegisterMr(info.FRMRPageCount + 1, true, nullptr, nullptr),
            STATUS_IMPLEMENTATION_LIMIT);
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(qp->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(cq->NdkCloseCq(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(pd->NdkClosePd(nullptr, nullptr), STATUS_SUCCESS);
}

// With a completion callback a create returns STATUS_PENDING and delivers the object later; without one it
// finishes inline (ndkpi.md §8). The same for UroceConnect.
TEST_F(AdapterTest, CreatesWithACompletionPendAndDeliverTheObject) {
  Completion cq_done, pd_done, mr_done, qp_done;
  Cq* unused_cq = nullptr;
  EXPECT_EQ(adapter().NdkCreateCq(64, nullptr, nullptr, nullptr, &Completion::on_create, &cq_done, &unused_cq),
            STATUS_PENDING);
  EXPECT_EQ(adapter().NdkCreatePd(&Completion::on_create, &pd_done, nullptr), STATUS_PENDING);
  ASSERT_TRUE(cq_done.wait() && pd_done.wait());
  EXPECT_EQ(unused_cq, nullptr) << "on PENDING the out parameter is never written";
  ASSERT_EQ(cq_done.status.load(), STATUS_SUCCESS);
  ASSERT_EQ(pd_done.status.load(), STATUS_SUCCESS);
  auto* cq = static_cast<Cq*>(cq_done.object.load());
  auto* pd = static_cast<Pd*>(pd_done.object.load());
  EXPECT_EQ(cq->ObjectType, NdkObjectTypeCq);
  EXPECT_EQ(pd->ObjectType, NdkObjectTypePd);
  EXPECT_EQ(pd->NdkCreateMr(false, &Completion::on_create, &mr_done, nullptr), STATUS_PENDING);
  EXPECT_EQ(pd->NdkCreateQp(cq, cq, nullptr, 16, 16, 1, 1, 0, &Completion::on_create, &qp_done, nullptr),
            STATUS_PENDING);
  ASSERT_TRUE(mr_done.wait() && qp_done.wait());
  ASSERT_EQ(qp_done.status.load(), STATUS_SUCCESS);
  auto* qp = static_cast<Qp*>(qp_done.object.load());
  auto* mr = static_cast<Mr*>(mr_done.object.load());
  EXPECT_EQ(qp->ObjectType, NdkObjectTypeQp);
  EXPECT_NE(qp->UroceGetQpNumber(), 0u);

  // An asynchronous connect to a peer created inline.
  Player& peer = player({.engine = 1});
  sockaddr_in local{};  // port a
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(0xC6120001u);
  const sockaddr_in remote = peer.ip();
  UroceConnectAttributes attrs;
  attrs.LocalAddress = reinterpret_cast<const sockaddr*>(&local);
  attrs.RemoteAddress = reinterpret_cast<const sockaddr*>(&remote);
  attrs.RemoteQpNumber = peer.qp->UroceGetQpNumber();
  Completion connected;
  EXPECT_EQ(qp->UroceConnect(attrs, &Completion::on_request, &connected), STATUS_PENDING);
  ASSERT_TRUE(connected.wait());
  EXPECT_EQ(connected.status.load(), STATUS_SUCCESS);
  EXPECT_EQ(qp->UroceConnect(attrs, nullptr, nullptr), STATUS_CONNECTION_INVALID) << "already connected";

  // Parameter errors are returned inline even when a completion was given:
  Completion never;
  EXPECT_EQ(pd->NdkCreateQp(cq, cq, nullptr, 0, 16, 1, 1, 0, &Completion::on_create, &never, nullptr),
            STATUS_INVALID_PARAMETER);
  adapter().UroceWaitForNotifier();
  EXPECT_FALSE(never.done.load()) << "an inline failure never calls the completion";

  Completion qp_closed, mr_closed, cq_closed, pd_closed;
  EXPECT_EQ(pd->NdkClosePd(&Completion::on_close, &pd_closed), STATUS_PENDING) << "the QP and MR are its successors";
  EXPECT_EQ(cq->NdkCloseCq(&Completion::on_close, &cq_closed), STATUS_PENDING) << "the QP is its successor";
  // A QP leaves its engine's tables on the engine: with a completion, that happens on a control thread (L8).
  EXPECT_EQ(qp->NdkCloseQp(&Completion::on_close, &qp_closed), STATUS_PENDING);
  EXPECT_TRUE(qp_closed.wait());
  EXPECT_TRUE(cq_closed.wait());
  EXPECT_FALSE(pd_closed.done.load());
  EXPECT_EQ(mr->NdkCloseMr(&Completion::on_close, &mr_closed), STATUS_SUCCESS);
  adapter().UroceWaitForNotifier();
  EXPECT_FALSE(mr_closed.done.load()) << "an inline close never calls its completion";
  EXPECT_TRUE(pd_closed.wait());
}

// Every invalid parameter gets a status (and no crash, and no completion).
// ndkpi.md §9.1: a LAM holds one logical address per page of the buffer. A range that ends at the top of the address
// space has more pages than a LAM's ULONG count can hold: STATUS_INVALID_PARAMETER, never a LAM of a few pages
// (rounding the page count up overflowed 64 bits: 0 pages and STATUS_SUCCESS).
TEST_F(AdapterTest, BuildLamRefusesARangeOfMorePagesThanALamHolds) {
  std::vector<uint64_t> storage(64);
  auto* lam = reinterpret_cast<NdkLogicalAddressMapping*>(storage.data());
  auto lam_size = static_cast<uint32_t>(storage.size() * sizeof(uint64_t));
  uint32_t fbo = 0;
  const auto* address = reinterpret_cast<const void*>(uintptr_t{0xFFF});
  EXPECT_EQ(adapter().NdkBuildLam(address, UINT64_MAX - 0xFFF, nullptr, nullptr, lam, &lam_size, &fbo),
            STATUS_INVALID_PARAMETER);
  EXPECT_EQ(lam->AdapterPageCount, 0u) << "nothing written";
  // The last page of the address space (its last byte excepted: the end must be representable) is one page, which
  // the size query says; nothing of the process is mapped there, so the mapping itself is refused (cpu_access.h).
  const auto* top = reinterpret_cast<const void*>(uintptr_t{UINT64_MAX - 0xFFF});
  lam_size = 0;
  ASSERT_EQ(adapter().NdkBuildLam(top, 0xFFF, nullptr, nullptr, nullptr, &lam_size, &fbo), STATUS_BUFFER_TOO_SMALL);
  EXPECT_EQ(lam_size, ndk_lam_size(1));
  lam_size = static_cast<uint32_t>(storage.size() * sizeof(uint64_t));
  EXPECT_EQ(adapter().NdkBuildLam(top, 0xFFF, nullptr, nullptr, lam, &lam_size, &fbo), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(lam->AdapterPageCount, 0u) << "nothing written";
}

// ndkpi.md §9.4: registered memory is pinned, and the engines reach it through the CPU, so a range with a page
// nothing is mapped at (a freed buffer, a wrong pointer) is STATUS_INVALID_PARAMETER at registration, not a fault
// in an engine when a peer's WRITE or READ arrives.
TEST_F(AdapterTest, RegisterMrRefusesMemoryThatIsNotMapped) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* mapping = mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapping, MAP_FAILED);
  auto* bytes = static_cast<uint8_t*>(mapping);
  ASSERT_EQ(munmap(bytes + page, 2 * page), 0);  // the first page stays mapped
  Pd* pd = nullptr;
  ASSERT_EQ(adapter().NdkCreatePd(nullptr, nullptr, &pd), STATUS_SUCCESS);
  Mr* mr = nullptr;
  ASSERT_EQ(pd->NdkCreateMr(false, nullptr, nullptr, &mr), STATUS_SUCCESS);
  const uint32_t rw = NDK_MR_FLAG_ALLOW_REMOTE_WRITE | NDK_MR_FLAG_ALLOW_REMOTE_READ;
  EXPECT_EQ(mr->NdkRegisterMr(bytes + page, page, rw, nullptr, nullptr), STATUS_INVALID_PARAMETER) << "unmapped";
  EXPECT_EQ(mr->NdkRegisterMr(bytes + 100, page, rw, nullptr, nullptr), STATUS_INVALID_PARAMETER)
      << "its last bytes unmapped";
  ASSERT_EQ(mr->NdkRegisterMr(bytes + 100, page - 100, rw, nullptr, nullptr), STATUS_SUCCESS) << "all mapped";
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(pd->NdkClosePd(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(munmap(bytes, page), 0);
}

// cpu_access.h: memory the engines could touch only by faulting is refused as well: read-only pages when the MR
// allows writes, pages with no access at all, and a file mapping's pages past the end of its file. NdkBuildLam
// refuses what it could not pin.
TEST_F(AdapterTest, RegisterMrAndBuildLamRefuseMemoryTheEnginesWouldFaultOn) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* read_only = mmap(nullptr, 2 * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* no_access = mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(read_only, MAP_FAILED);
  ASSERT_NE(no_access, MAP_FAILED);
  char file_name[] = "/tmp/uroce-adapter-test-XXXXXX";
  const int fd = mkstemp(file_name);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(unlink(file_name), 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(page)), 0);  // one page of file under a two-page mapping
  void* past_eof = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(past_eof, MAP_FAILED);

  Pd* pd = nullptr;
  ASSERT_EQ(adapter().NdkCreatePd(nullptr, nullptr, &pd), STATUS_SUCCESS);
  Mr* mr = nullptr;
  ASSERT_EQ(pd->NdkCreateMr(false, nullptr, nullptr, &mr), STATUS_SUCCESS);
  for (const uint32_t writes : {uint32_t{NDK_MR_FLAG_ALLOW_LOCAL_WRITE},
                                uint32_t{NDK_MR_FLAG_ALLOW_REMOTE_WRITE | NDK_MR_FLAG_ALLOW_REMOTE_READ}}) {
    EXPECT_EQ(mr->NdkRegisterMr(read_only, 2 * page, writes, nullptr, nullptr), STATUS_INVALID_PARAMETER)
        << "read-only memory, flags " << writes;
  }
  EXPECT_EQ(mr->NdkRegisterMr(no_access, page, NDK_MR_FLAG_ALLOW_REMOTE_READ, nullptr, nullptr),
            STATUS_INVALID_PARAMETER)
      << "PROT_NONE";
  EXPECT_EQ(mr->NdkRegisterMr(past_eof, 2 * page, NDK_MR_FLAG_ALLOW_REMOTE_READ, nullptr, nullptr),
            STATUS_INVALID_PARAMETER)
      << "a page past the end of the file";
  ASSERT_EQ(mr->NdkRegisterMr(read_only, 2 * page, NDK_MR_FLAG_ALLOW_REMOTE_READ, nullptr, nullptr), STATUS_SUCCESS)
      << "read-only memory that only peers' READs reach";
  EXPECT_EQ(mr->NdkDeregisterMr(nullptr, nullptr), STATUS_SUCCESS);
  ASSERT_EQ(mr->NdkRegisterMr(past_eof, page, NDK_MR_FLAG_ALLOW_LOCAL_WRITE, nullptr, nullptr), STATUS_SUCCESS)
      << "the file's own page";
  EXPECT_EQ(mr->NdkDeregisterMr(nullptr, nullptr), STATUS_SUCCESS);
  // Above 1 MiB a writable range is checked without allocating its pages (/proc/self/maps for the rights).
  constexpr std::size_t kLarge = std::size_t{4} << 20;
  void* large = mmap(nullptr, kLarge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(large, MAP_FAILED);
  ASSERT_EQ(mprotect(static_cast<uint8_t*>(large) + kLarge - page, page, PROT_READ), 0);
  EXPECT_EQ(mr->NdkRegisterMr(large, kLarge, NDK_MR_FLAG_ALLOW_LOCAL_WRITE, nullptr, nullptr), STATUS_INVALID_PARAMETER)
      << "a large range whose last page is read-only";
  ASSERT_EQ(mr->NdkRegisterMr(large, kLarge - page, NDK_MR_FLAG_ALLOW_LOCAL_WRITE, nullptr, nullptr), STATUS_SUCCESS)
      << "the writable part";
  EXPECT_EQ(mr->NdkDeregisterMr(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(munmap(large, kLarge), 0);
  // ... and none of its pages is allocated by the registration: a peer's connection request that makes a target
  // register its queue buffers must not commit them (RssAnon: resident anonymous memory, the zero page excluded).
  const auto rss_anon_kib = [] {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("RssAnon:", 0) == 0) return std::stoll(line.substr(8));
    }
    return -1LL;
  };
  constexpr std::size_t kHuge = std::size_t{256} << 20;
  void* untouched = mmap(nullptr, kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(untouched, MAP_FAILED);
  const long long before = rss_anon_kib();
  ASSERT_EQ(mr->NdkRegisterMr(untouched, kHuge, NDK_MR_FLAG_ALLOW_LOCAL_WRITE, nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_LT(rss_anon_kib() - before, 64 * 1024) << "KiB made resident by registering 256 MiB";
  EXPECT_EQ(mr->NdkDeregisterMr(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(munmap(untouched, kHuge), 0);

  std::array<uint64_t, 8> storage{};
  auto* lam = reinterpret_cast<NdkLogicalAddressMapping*>(storage.data());
  uint32_t lam_size = sizeof storage;
  uint32_t fbo = 0;
  EXPECT_EQ(adapter().NdkBuildLam(no_access, page, nullptr, nullptr, lam, &lam_size, &fbo), STATUS_INVALID_PARAMETER);
  lam_size = sizeof storage;
  EXPECT_EQ(adapter().NdkBuildLam(read_only, 2 * page, nullptr, nullptr, lam, &lam_size, &fbo), STATUS_SUCCESS);

  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(pd->NdkClosePd(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(munmap(past_eof, 2 * page), 0);
  EXPECT_EQ(close(fd), 0);
  EXPECT_EQ(munmap(no_access, page), 0);
  EXPECT_EQ(munmap(read_only, 2 * page), 0);
}

TEST_F(AdapterTest, EveryInvalidParameterReturnsAStatus) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  Qp& qp = *a->qp;
  const NdkSge good = a->sge(0, 64);
  const NdkSge huge{a->buffer, (1u << 30) + 1, a->token()};
  std::array<NdkSge, 9> many{};
  many.fill(good);
  const uint64_t ra = b->address();
  const uint32_t rt = b->token();
  // Sends, writes, reads.
  EXPECT_EQ(qp.NdkSend(nullptr, nullptr, 1, 0), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkSend(nullptr, many.data(), 5, 0), STATUS_INVALID_PARAMETER);  // the QP allows 4
  EXPECT_EQ(qp.NdkSend(nullptr, &huge, 1, 0), STATUS_INVALID_PARAMETER);        // > MaxTransferLength
  EXPECT_EQ(qp.NdkSend(nullptr, &good, 1, 0x8000), STATUS_INVALID_PARAMETER);   // no such flag
  EXPECT_EQ(qp.NdkSend(nullptr, &good, 1, NDK_OP_FLAG_ALLOW_REMOTE_READ), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkSendAndInvalidate(nullptr, nullptr, 2, 0, 1), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkWrite(nullptr, &good, 1, ra, rt, NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkWrite(nullptr, many.data(), 9, ra, rt, 0), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkRead(nullptr, &good, 1, ra, rt, NDK_OP_FLAG_INLINE), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkRead(nullptr, many.data(), 5, ra, rt, 0), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkRead(nullptr, nullptr, 1, ra, rt, 0), STATUS_INVALID_PARAMETER);
  const NdkSge null_inline{nullptr, 8, 0};
  EXPECT_EQ(qp.NdkSend(nullptr, &null_inline, 1, NDK_OP_FLAG_INLINE), STATUS_INVALID_PARAMETER);
  // Receives.
  EXPECT_EQ(qp.NdkReceive(nullptr, nullptr, 1), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkReceive(nullptr, many.data(), 5), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkReceive(nullptr, &huge, 1), STATUS_INVALID_PARAMETER);
  // Bind.
  Mw* mw = nullptr;
  ASSERT_EQ(a->pd->NdkCreateMw(nullptr, nullptr, &mw), STATUS_SUCCESS);
  const uint32_t rw = NDK_OP_FLAG_ALLOW_REMOTE_WRITE;
  EXPECT_EQ(qp.NdkBind(nullptr, nullptr, mw, a->buffer, 64, rw), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkBind(nullptr, a->mr, nullptr, a->buffer, 64, rw), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkBind(nullptr, reinterpret_cast<Mr*>(mw), mw, a->buffer, 64, rw), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkBind(nullptr, a->mr, mw, a->buffer + a->options.buffer_size - 32, 64, rw), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkBind(nullptr, a->mr, mw, a->buffer, 0, rw), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkBind(nullptr, a->mr, mw, a->buffer, 64, NDK_OP_FLAG_INLINE), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkBind(nullptr, a->mr, mw, a->buffer, 64, NDK_OP_FLAG_ALLOW_LOCAL_WRITE), STATUS_INVALID_PARAMETER);
  Mr* read_only = nullptr;  // a remote-write window needs a local-write MR
  ASSERT_EQ(a->pd->NdkCreateMr(false, nullptr, nullptr, &read_only), STATUS_SUCCESS);
  ASSERT_EQ(read_only->NdkRegisterMr(a->buffer, 4096, NDK_MR_FLAG_ALLOW_REMOTE_READ, nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(qp.NdkBind(nullptr, read_only, mw, a->buffer, 64, rw), STATUS_ACCESS_VIOLATION);
  // Fast register.
  Mr* fr = nullptr;
  ASSERT_EQ(a->pd->NdkCreateMr(true, nullptr, nullptr, &fr), STATUS_SUCCESS);
  const NdkLogicalAddress pages[2] = {a->address(0), a->address(4096)};
  const NdkLogicalAddress unaligned[2] = {a->address(0), a->address(8192) + 8};
  const auto fast_register = [&](Mr* mr, uint32_t n, const NdkLogicalAddress* list, uint32_t fbo, std::size_t length,
                                 void* base, uint32_t flags) {
    return qp.NdkFastRegister(nullptr, mr, n, list, fbo, length, base, flags);
  };
  EXPECT_EQ(fast_register(fr, 1, pages, 0, 4096, a->buffer, 0), STATUS_INVALID_PARAMETER) << "not initialised";
  ASSERT_EQ(fr->NdkInitializeFastRegisterMr(2, false, nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(fast_register(nullptr, 1, pages, 0, 4096, a->buffer, 0), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(fast_register(a->mr, 1, pages, 0, 4096, a->buffer, 0), STATUS_INVALID_PARAMETER) << "not an FR MR";
  EXPECT_EQ(fast_register(fr, 1, nullptr, 0, 4096, a->buffer, 0), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(fast_register(fr, 0, pages, 0, 4096, a->buffer, 0), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(fast_register(fr, 3, pages, 0, 4096, a->buffer, 0), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(fast_register(fr, 1, pages, 4096, 1, a->buffer + 4096, 0), STATUS_INVALID_PARAMETER);  // FBO
  EXPECT_EQ(fast_register(fr, 1, pages, 0, 0, a->buffer, 0), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(fast_register(fr, 1, pages, 8, 4096, a->buffer + 8, 0), STATUS_INVALID_PARAMETER);   // too long
  EXPECT_EQ(fast_register(fr, 2, unaligned, 0, 8192, a->buffer, 0), STATUS_INVALID_PARAMETER);   // page not aligned
  EXPECT_EQ(fast_register(fr, 1, pages, 0, 4096, a->buffer + 64, 0), STATUS_INVALID_PARAMETER);  // base % PAGE != FBO
  EXPECT_EQ(fast_register(fr, 1, pages, 0, 4096, a->buffer, NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT),
            STATUS_INVALID_PARAMETER);
  EXPECT_EQ(fast_register(fr, 1, pages, 0, 4096, a->buffer, NDK_OP_FLAG_ALLOW_REMOTE_READ), STATUS_ACCESS_VIOLATION)
      << "remote rights on an MR initialised without RemoteAccess";
  // Invalidate.
  EXPECT_EQ(qp.NdkInvalidate(nullptr, nullptr, 0), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkInvalidate(nullptr, a->mr, 0), STATUS_INVALID_PARAMETER) << "ordinary MRs are deregistered";
  EXPECT_EQ(qp.NdkInvalidate(nullptr, a->pd, 0), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(qp.NdkInvalidate(nullptr, fr, NDK_OP_FLAG_INLINE), STATUS_INVALID_PARAMETER);
  // Memory registration.
  Mr* mr = nullptr;
  ASSERT_EQ(a->pd->NdkCreateMr(false, nullptr, nullptr, &mr), STATUS_SUCCESS);
  EXPECT_EQ(mr->NdkRegisterMr(nullptr, 64, 0, nullptr, nullptr), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(mr->NdkRegisterMr(a->buffer, 0, 0, nullptr, nullptr), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(mr->NdkRegisterMr(a->buffer, 64, 0x40, nullptr, nullptr), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(mr->NdkRegisterMr(a->buffer, 64, 0x4, nullptr, nullptr), STATUS_INVALID_PARAMETER)
      << "remote write needs local write (NDK_MR_FLAG_ALLOW_REMOTE_WRITE is 0x5)";
  EXPECT_EQ(mr->NdkRegisterMr(a->buffer, std::numeric_limits<std::size_t>::max(), 0, nullptr, nullptr),
            STATUS_INVALID_PARAMETER);
  EXPECT_EQ(mr->NdkDeregisterMr(nullptr, nullptr), STATUS_INVALID_DEVICE_REQUEST) << "not registered";
  EXPECT_EQ(mr->NdkInitializeFastRegisterMr(1, false, nullptr, nullptr), STATUS_INVALID_DEVICE_REQUEST);
  ASSERT_EQ(mr->NdkRegisterMr(a->buffer, 64, NDK_MR_FLAG_RDMA_READ_SINK, nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(mr->NdkRegisterMr(a->buffer, 64, 0, nullptr, nullptr), STATUS_INVALID_DEVICE_REQUEST) << "registered";
  EXPECT_EQ(fr->NdkRegisterMr(a->buffer, 64, 0, nullptr, nullptr), STATUS_INVALID_DEVICE_REQUEST) << "FR only";
  EXPECT_EQ(fr->NdkInitializeFastRegisterMr(0, false, nullptr, nullptr), STATUS_INVALID_PARAMETER);
  // Creates.
  Cq* cq = nullptr;
  EXPECT_EQ(adapter().NdkCreateCq(0, nullptr, nullptr, nullptr, nullptr, nullptr, &cq), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(adapter().NdkCreateCq(16, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(adapter().NdkCreatePd(nullptr, nullptr, nullptr), STATUS_INVALID_PARAMETER);
  Qp* other = nullptr;
  EXPECT_EQ(a->pd->NdkCreateQp(nullptr, a->cq, nullptr, 8, 8, 1, 1, 0, nullptr, nullptr, &other),
            STATUS_INVALID_PARAMETER);
  EXPECT_EQ(a->pd->NdkCreateQp(a->cq, reinterpret_cast<Cq*>(a->pd), nullptr, 8, 8, 1, 1, 0, nullptr, nullptr, &other),
            STATUS_INVALID_PARAMETER);
  EXPECT_EQ(a->pd->NdkCreateQpWithSrq(a->cq, a->cq, nullptr, nullptr, 8, 1, 0, nullptr, nullptr, &other),
            STATUS_INVALID_PARAMETER);
  Srq* srq = nullptr;
  EXPECT_EQ(a->pd->NdkCreateSrq(0, 1, 0, nullptr, nullptr, nullptr, nullptr, nullptr, &srq), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(a->pd->NdkCreateSrq(8, 1, 9, nullptr, nullptr, nullptr, nullptr, nullptr, &srq), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(a->pd->NdkCreateSrq(8, 9, 0, nullptr, nullptr, nullptr, nullptr, nullptr, &srq), STATUS_INVALID_PARAMETER);
  ASSERT_EQ(a->pd->NdkCreateSrq(8, 1, 0, nullptr, nullptr, nullptr, nullptr, nullptr, &srq), STATUS_SUCCESS);
  EXPECT_EQ(srq->NdkSrqReceive(nullptr, many.data(), 2), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(srq->NdkSrqReceive(nullptr, nullptr, 1), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(srq->NdkModifySrq(1u << 20, 0, nullptr, nullptr), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(srq->NdkModifySrq(9, 0, nullptr, nullptr), STATUS_SUCCESS) << "an SRQ grows (ndkpi.md §9.5)";
  // CQ.
  EXPECT_EQ(a->cq->NdkGetCqResults(nullptr, 4), 0u);
  EXPECT_EQ(a->cq->NdkGetCqResultsEx(nullptr, 4), 0u);
  // ndkpi.md §9.2: neither a timer nor a count is no moderation at all.
  EXPECT_EQ(a->cq->NdkControlCqInterruptModeration(UINT32_MAX, UINT32_MAX), STATUS_INVALID_PARAMETER_MIX);
  EXPECT_EQ(a->cq->NdkControlCqInterruptModeration(UINT32_MAX, 1u << 30), STATUS_INVALID_PARAMETER_MIX)
      << "a count above the CQ's depth is no count";
  EXPECT_EQ(a->cq->NdkControlCqInterruptModeration(20, 4), STATUS_SUCCESS);
  EXPECT_EQ(a->cq->NdkControlCqInterruptModeration(0, 0), STATUS_SUCCESS) << "off";
  a->cq->NdkArmCq(7);  // VOID: an unknown type arms nothing
  // Connect.
  const sockaddr_in remote = b->ip();
  sockaddr_in elsewhere = remote;
  elsewhere.sin_addr.s_addr = htonl(0x0A000001);  // 10.0.0.1 is on no port
  sockaddr unknown_family{};
  unknown_family.sa_family = AF_UNIX;
  Player& c = player();
  const auto connect_with = [&](auto&& change) {
    UroceConnectAttributes attrs;
    attrs.RemoteAddress = reinterpret_cast<const sockaddr*>(&remote);
    attrs.RemoteQpNumber = b->qp->UroceGetQpNumber();
    change(attrs);
    return c.qp->UroceConnect(attrs, nullptr, nullptr);
  };
  EXPECT_EQ(connect_with([](auto& x) { x.RemoteAddress = nullptr; }), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(connect_with([&](auto& x) { x.RemoteAddress = &unknown_family; }), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(connect_with([](auto& x) { x.RemoteQpNumber = 0; }), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(connect_with([](auto& x) { x.LocalPsn = 1u << 24; }), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(connect_with([](auto& x) { x.PathMtu = 1500; }), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(connect_with([](auto& x) { x.InboundReadLimit = 1000; }), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(connect_with([](auto& x) { x.RetryCount = 8; }), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(connect_with([](auto& x) { x.HopLimit = 0; }), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(connect_with([&](auto& x) { x.LocalAddress = reinterpret_cast<const sockaddr*>(&elsewhere); }),
            STATUS_INVALID_ADDRESS);

  // None of the failures left a completion: the next result is the next request's.
  ASSERT_EQ(b->receive(0, 64, 1), STATUS_SUCCESS);
  ASSERT_EQ(a->send(0, 64, 77), STATUS_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->result().RequestContext), 77u);
  EXPECT_TRUE(a->drain().empty());
  EXPECT_EQ(b->result().Status, STATUS_SUCCESS);

  EXPECT_EQ(srq->NdkCloseSrq(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(mw->NdkCloseMw(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(fr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(read_only->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
}

}  // namespace
}  // namespace uroce::ndk::testing
