// The RDMA transport binding (rdma_transport.cc) end to end through the engines of the loopback config, against
// a host written on the NDK API here, so that it can do what the Linux host never does on purpose.
#include "apps/nvmf/rdma_transport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <arpa/inet.h>

#include "api/tests/api_players.h"
#include "apps/common/cm_connection.h"
#include "apps/common/tool_setup.h"
#include "apps/nvmf/nvme/nvmf_target.h"
#include "apps/nvmf/nvmf_host.h"

namespace uroce::nvmf {
namespace {

using ndk::NdkResult;
using ndk::NdkSge;
using ndk::STATUS_SUCCESS;
using ndk::testing::api_test_config;
using ndk::testing::ApiTest;

constexpr uint16_t kPort = 4420;
constexpr const char* kSubsystemNqn = "nqn.2026-11.io.uroce:test";
constexpr const char* kHostNqn = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
constexpr std::size_t kSqe = 64;
constexpr std::size_t kCqe = 16;

class RdmaTransportTest : public ApiTest {
 protected:
  void SetUp() override {
    ApiTest::SetUp();
    const config::Config c = api_test_config();
    target_address_ = apps::to_sockaddr(c.ports[1].addresses.front());
    reinterpret_cast<sockaddr_in*>(&target_address_)->sin_port = htons(kPort);
    host_address_ = apps::to_sockaddr(c.ports[0].addresses.front());
    start_target({});
  }
  void TearDown() override {
    transport_.reset();  // disconnects the queues that are left
    target_.reset();
    // A test that stopped early (a failed ASSERT) leaves its hosts' connectors open, and each holds its player's QP,
    // whose close would then wait for ever.
    for (ndk::Connector* c : open_connectors_) (void)apps::disconnect_and_close(c, std::chrono::seconds(2));
    open_connectors_.clear();
    ApiTest::TearDown();
  }

  // (Re)starts the target and its transport with `limits`, a namespace on `backend` (1 MiB of RAM if none), and
  // `stop_timeout` for the commands backends still run when the transport ends.
  void start_target(const TargetLimits& limits, std::shared_ptr<Backend> backend = nullptr,
                    std::chrono::milliseconds stop_timeout = std::chrono::seconds(30)) {
    transport_.reset();
    target_.reset();
    const config::Config c = api_test_config();
    TargetConfig config;
    config.limits = limits;
    SubsystemConfig sub;
    sub.nqn = kSubsystemNqn;
    NamespaceConfig ns;
    ns.nsid = 1;
    ns.backend = backend ? std::move(backend) : std::shared_ptr<Backend>(make_ram_backend(1 << 20));
    sub.namespaces.push_back(ns);
    config.subsystems.push_back(sub);
    config.ports.push_back(PortAddress{false, apps::ip_text(c.ports[1].addresses.front()), kPort});
    ASSERT_FALSE(NvmfTarget::validate(config).has_value());
    target_ = std::make_unique<NvmfTarget>(config);
    std::string error;
    transport_ = RdmaTransport::start(adapter(), *target_, {target_address_}, error, stop_timeout);
    ASSERT_TRUE(transport_) << error;
  }

  // Polls the target on this thread (its only poller) until `done` holds.
  template <class Done>
  bool poll_target_until(Done done) {
    return ndk::testing::eventually([&] {
      (void)transport_->poll();
      return done();
    });
  }

  // The private data of a host's CM REQ for an NVMe-oF queue (struct nvme_rdma_cm_req): `qid`, `entries` commands
  // outstanding.
  static std::string cm_request(uint16_t qid, uint16_t entries) {
    std::string request(kRdmaCmPrivateDataSize, '\0');
    request[2] = static_cast<char>(qid);
    request[4] = static_cast<char>(entries);      // hrqsize
    request[6] = static_cast<char>(entries - 1);  // hsqsize, 0's based
    return request;
  }
  // A host's CM REQ for an NVMe-oF queue, offering `ird` responder resources for the target's RDMA READs. Its
  // NdkConnect completes into `connected`.
  ndk::Connector* send_request(ndk::testing::Player& host, apps::Request& connected, uint32_t ird = 16,
                               uint16_t qid = 0, uint16_t entries = 1) {
    const std::string request = cm_request(qid, entries);
    ndk::Connector* c = nullptr;
    EXPECT_EQ(adapter().NdkCreateConnector(nullptr, nullptr, &c), STATUS_SUCCESS);
    EXPECT_EQ(
        c->NdkConnect(host.qp, apps::as_sockaddr(host_address_), apps::socket_address_length(host_address_),
                      apps::as_sockaddr(target_address_), apps::socket_address_length(target_address_), ird, 0,
                      request.data(), static_cast<uint32_t>(request.size()), &apps::Request::complete, &connected),
        ndk::STATUS_PENDING);
    return c;
  }
  TransportCounters two_queues_then_no_resources(const TargetLimits& limits);
  // Polls the target until it answered the REQ of `c`: the NVMe RDMA reject code (struct nvme_rdma_cm_rej's sts),
  // or nothing if it accepted.
  std::optional<RdmaCmReject> answer(ndk::Connector* c, apps::Request& connected) {
    EXPECT_TRUE(poll_target_until([&] { return connected.done.load(); }));
    if (connected.status.load() != ndk::STATUS_CONNECTION_REFUSED) return std::nullopt;
    std::array<uint8_t, 256> rej{};
    auto length = static_cast<uint32_t>(rej.size());
    EXPECT_EQ(c->NdkGetConnectionData(nullptr, nullptr, rej.data(), &length), STATUS_SUCCESS);
    return static_cast<RdmaCmReject>(rej[2] | rej[3] << 8);
  }
  // A host's admin queue of `entries` commands through connect_qp (REQ, REP, RTU) while this thread polls the
  // target: the connected connector, or nullptr. `disconnected`, if given, is set when the target disconnects.
  ndk::Connector* connect_host(ndk::testing::Player& host, uint16_t entries, std::atomic<bool>* disconnected = nullptr,
                               uint32_t ird = 16) {
    apps::CmConnectParams params;
    params.private_data = cm_request(0, entries);
    params.inbound_read_limit = ird;
    if (disconnected != nullptr) {
      params.on_disconnect = [](void* flag) { static_cast<std::atomic<bool>*>(flag)->store(true); };
      params.disconnect_context = disconnected;
    }
    std::atomic<bool> done{false};
    ndk::Connector* connector = nullptr;
    std::string error;
    std::thread connecting([&] {
      connector = apps::connect_qp(adapter(), *host.qp, host_address_, target_address_, params, error);
      done = true;
    });
    EXPECT_TRUE(poll_target_until([&] { return done.load(); }));
    connecting.join();
    EXPECT_NE(connector, nullptr) << error;
    if (connector != nullptr) open_connectors_.push_back(connector);
    return connector;
  }
  // The host disconnects and closes `connector` while this thread polls the target.
  void disconnect(ndk::Connector* connector) {
    std::erase(open_connectors_, connector);
    std::atomic<bool> done{false};
    std::thread closing([&] {
      (void)apps::disconnect_and_close(connector, std::chrono::seconds(10));
      done = true;
    });
    EXPECT_TRUE(poll_target_until([&] { return done.load(); }));
    closing.join();
  }
  // The host's Fabrics Connect on its admin queue (NVMe-oF 1.1 §3.3), as Linux sends it: the connect data in the
  // host's memory behind a keyed SGL (0x40), which the target fetches by RDMA READ; KATO 0. Returns the response's
  // status field without the phase bit (0: the queue has a controller now).
  uint16_t fabrics_connect(ndk::testing::Player& host, uint16_t sqsize) {
    constexpr std::size_t kResponse = 4096, kData = 8192;
    uint8_t* const data = host.buffer + kData;
    std::memset(data, 0, kConnectDataSize);
    data[16] = 0xFF;  // CNTLID 0xFFFF: dynamic
    data[17] = 0xFF;
    std::memcpy(data + 256, kSubsystemNqn, std::strlen(kSubsystemNqn));
    std::memcpy(data + 512, kHostNqn, std::strlen(kHostNqn));
    uint8_t* const sqe = host.buffer;
    std::memset(sqe, 0, kSqe);
    sqe[0] = 0x7F;  // Fabrics
    sqe[1] = 0x40;  // PSDT 01b: SGLs
    sqe[2] = 1;     // CID
    sqe[4] = 0x01;  // Connect
    const uint64_t address = host.address(kData);
    const uint32_t length = kConnectDataSize;
    const uint32_t key = host.token();
    std::memcpy(sqe + 24, &address, 8);
    std::memcpy(sqe + 32, &length, 3);
    std::memcpy(sqe + 35, &key, 4);
    sqe[39] = 0x40;                     // keyed data block, address
    std::memcpy(sqe + 44, &sqsize, 2);  // SQSIZE; QID 0, KATO 0
    EXPECT_EQ(host.receive(kResponse, kCqe, 2), STATUS_SUCCESS);
    EXPECT_EQ(host.send(0, kSqe, 1), STATUS_SUCCESS);
    bool answered = false;
    EXPECT_TRUE(poll_target_until([&] {
      NdkResult r;
      while (host.cq->NdkGetCqResults(&r, 1) == 1) {
        EXPECT_EQ(r.Status, STATUS_SUCCESS);
        answered |= reinterpret_cast<uintptr_t>(r.RequestContext) == 2;
      }
      return answered;
    }));
    uint16_t status = 0;
    std::memcpy(&status, host.buffer + kResponse + 14, 2);
    return static_cast<uint16_t>(status >> 1);
  }
  // The CM's connections on both ends (UroceQueryResources asks the CM thread, after what it had queued).
  static uint32_t cm_ids() { return adapter().UroceQueryResources().CmIds; }

  sockaddr_storage target_address_{};
  sockaddr_storage host_address_{};
  std::unique_ptr<NvmfTarget> target_;
  std::unique_ptr<RdmaTransport> transport_;
  std::vector<ndk::Connector*> open_connectors_;  // connect_host()'s, until disconnect()
};

// A host that keeps more commands outstanding than the slots the target has free: one that ignores the SQ head, or,
// in the ordinary case, one that has the responses of commands whose SENDs the target has not yet seen complete (it
// sends the next command before its ACK reaches the target; a loaded two-process run dropped 11 of 42134 capsules
// that way and its host waited forever). Here the host takes no response at first, so the target's response SENDs
// meet RNR NAKs and hold their slots: an admin queue of one entry has two slots, and the third command finds none.
// It must wait for a slot and be answered, not be dropped.
TEST_F(RdmaTransportTest, ACommandThatFindsNoFreeSlotWaitsForOneAndIsAnswered) {
  ndk::testing::PlayerOptions options;
  options.receive_depth = 8;
  ndk::testing::Player& host = player(options);
  std::string error;
  apps::CmConnectParams params;
  std::string private_data(32, '\0');
  private_data[4] = 1;  // hrqsize 1, hsqsize 0 (one command outstanding), qid 0: the admin queue
  params.private_data = private_data;
  params.inbound_read_limit = 16;  // responder resources for the target's RDMA READs
  ndk::Connector* connector = nullptr;
  std::thread connecting(
      [&] { connector = apps::connect_qp(adapter(), *host.qp, host_address_, target_address_, params, error); });
  ASSERT_TRUE(poll_target_until([&] { return transport_->counters().queues_accepted == 1; }));
  connecting.join();
  ASSERT_NE(connector, nullptr) << error;

  // Three commands at once, in registered memory. Before Fabrics Connect each is answered with Command Sequence
  // Error; what matters is that each is answered.
  constexpr unsigned kCommands = 3;
  for (uint16_t cid = 1; cid <= kCommands; ++cid) {
    uint8_t* const sqe = host.buffer + (cid - 1) * kSqe;
    std::memset(sqe, 0, kSqe);
    sqe[0] = 0x06;  // Identify
    sqe[1] = 0x40;  // PSDT 01b: SGLs
    std::memcpy(sqe + 2, &cid, 2);
    const NdkSge sge{sqe, kSqe, host.mr->NdkGetLocalTokenFromMr()};
    ASSERT_EQ(host.qp->NdkSend(reinterpret_cast<void*>(uintptr_t{cid}), &sge, 1, 0), STATUS_SUCCESS);
  }
  ASSERT_TRUE(poll_target_until([&] { return transport_->counters().capsules == kCommands; }))
      << "capsules " << transport_->counters().capsules;
  EXPECT_EQ(transport_->counters().capsules_held, 1u);
  EXPECT_EQ(transport_->counters().bad_capsules, 0u);

  // Now the host takes responses: the first two SENDs complete, and the third command gets a slot.
  uint8_t* const responses = host.buffer + 4096;
  for (unsigned i = 0; i < kCommands; ++i) {
    const NdkSge sge{responses + i * kCqe, kCqe, host.mr->NdkGetLocalTokenFromMr()};
    ASSERT_EQ(host.qp->NdkReceive(reinterpret_cast<void*>(uintptr_t{100 + i}), &sge, 1), STATUS_SUCCESS);
  }
  std::vector<uint16_t> answered;
  unsigned sent = 0;
  ASSERT_TRUE(poll_target_until([&] {
    NdkResult r;
    while (host.cq->NdkGetCqResults(&r, 1) == 1) {
      EXPECT_EQ(r.Status, STATUS_SUCCESS);
      if (reinterpret_cast<uintptr_t>(r.RequestContext) <= kCommands) {
        ++sent;
      } else {
        EXPECT_EQ(r.BytesTransferred, kCqe);
        const uint8_t* cqe = responses + (reinterpret_cast<uintptr_t>(r.RequestContext) - 100) * kCqe;
        uint16_t cid = 0;
        std::memcpy(&cid, cqe + 12, 2);
        answered.push_back(cid);
      }
    }
    return answered.size() == kCommands && sent == kCommands;
  })) << answered.size()
      << " responses";
  EXPECT_EQ(answered, (std::vector<uint16_t>{1, 2, 3})) << "responses in the commands' order";
  EXPECT_EQ(transport_->counters().bad_capsules, 0u);

  std::thread closing([&] { (void)apps::disconnect_and_close(connector, std::chrono::seconds(10)); });
  (void)poll_target_until([&] { return transport_->counters().queues_closed == 1; });
  closing.join();
}

// A host that sends a REQ and withdraws it (a REJ with reason timeout, as Linux's cm_destroy_id does) before the
// target answered: NdkAccept fails, and the incoming connector must be rejected and closed exactly once. The queue
// being set up used to close it as well, and the transport then rejected and closed the freed connector. Nothing is
// left behind: neither the connector nor the queue's QP, CQs, MR and PD.
TEST_F(RdmaTransportTest, ARequestWithdrawnBeforeTheAcceptIsClosedOnce) {
  ndk::testing::Player& host = player();
  // Connections of earlier tests leave their time-wait (1 s) first.
  ASSERT_TRUE(ndk::testing::eventually([] { return cm_ids() == 0; }));
  apps::Request connecting;
  ndk::Connector* connector = send_request(host, connecting);
  // Both ends hold the connection: the target's listener has queued the incoming connector, which the transport
  // (not polled yet) has not taken.
  ASSERT_TRUE(ndk::testing::eventually([] { return cm_ids() == 2; }));
  connector->NdkCloseConnector(nullptr, nullptr);  // withdraws the REQ
  // The target's CM forgets the connection when the REJ comes, after telling the incoming connector.
  ASSERT_TRUE(ndk::testing::eventually([] { return cm_ids() == 0; }));
  const ndk::UroceResourceCounts before = adapter().UroceQueryResources();

  ASSERT_TRUE(poll_target_until([&] { return transport_->counters().queues_rejected == 1; }));
  EXPECT_EQ(transport_->counters().accept_failed, 1u) << "the REQ passed the checks, and NdkAccept failed";
  EXPECT_EQ(transport_->counters().queues_accepted, 0u);
  const ndk::UroceResourceCounts after = adapter().UroceQueryResources();
  EXPECT_EQ(after.Connectors + 1, before.Connectors) << "the incoming connector, closed once";
  EXPECT_EQ(after.Qps, before.Qps);
  EXPECT_EQ(after.Cqs, before.Cqs);
  EXPECT_EQ(after.Mrs, before.Mrs);
  EXPECT_EQ(after.Pds, before.Pds);
}

// A host that offers no responder resources (IRD 0 in its REQ) could never have its data read: the target's RDMA
// READs may not exceed them, and even the admin queue's Connect fetches its data by READ. Its queue would wait
// forever; the REQ is rejected with NVME_RDMA_CM_INVALID_IRD instead.
TEST_F(RdmaTransportTest, AHostOfferingNoResponderResourcesIsRejectedWithInvalidIrd) {
  ndk::testing::Player& host = player();
  apps::Request connecting;
  ndk::Connector* connector = send_request(host, connecting, /*ird=*/0);
  EXPECT_EQ(answer(connector, connecting), RdmaCmReject::kInvalidIrd);
  EXPECT_EQ(transport_->counters().queues_rejected, 1u);
  EXPECT_EQ(transport_->counters().queues_accepted, 0u);
  connector->NdkCloseConnector(nullptr, nullptr);
}

TEST(CheckCmRequest, ResponderResourcesMustNotBeZero) {
  std::array<uint8_t, kRdmaCmPrivateDataSize> request{};
  request[4] = 32;  // hrqsize
  request[6] = 31;  // hsqsize
  EXPECT_TRUE(std::holds_alternative<RdmaCmRequest>(check_cm_request(request, 1, TargetLimits{})));
  const auto zero = check_cm_request(request, 0, TargetLimits{});
  ASSERT_TRUE(std::holds_alternative<RdmaCmReject>(zero));
  EXPECT_EQ(std::get<RdmaCmReject>(zero), RdmaCmReject::kInvalidIrd);
}

// A host that connects a queue and never sends Fabrics Connect: keep-alive only starts with a controller, so the
// target disconnects the queue itself once limits.connect_timeout_ms has passed, and counts it. A queue whose Connect
// succeeded (accepted earlier, so its deadline passed first) stays. That host offers more responder resources than
// the adapter's rdma.max_rd_atomic (16): the target's READ limit is the smaller, and the Connect data's READ works.
TEST_F(RdmaTransportTest, AQueueWithoutFabricsConnectIsClosedAfterTheTimeout) {
  TargetLimits limits;
  limits.connect_timeout_ms = 1000;  // long enough for the other host's Connect on a loaded machine
  start_target(limits);
  ndk::testing::Player& connected = player();
  ndk::testing::Player& silent = player();
  ndk::Connector* with_controller = connect_host(connected, 2, nullptr, /*ird=*/64);
  ASSERT_NE(with_controller, nullptr);
  ASSERT_EQ(fabrics_connect(connected, 1), 0) << "Connect succeeds";
  std::atomic<bool> silent_disconnected{false};
  ndk::Connector* without = connect_host(silent, 2, &silent_disconnected);
  ASSERT_NE(without, nullptr);

  ASSERT_TRUE(poll_target_until([&] { return transport_->counters().queues_closed == 1; }));
  EXPECT_EQ(transport_->counters().connect_timeouts, 1u);
  EXPECT_TRUE(ndk::testing::eventually([&] { return silent_disconnected.load(); })) << "the target's DREQ";
  EXPECT_EQ(transport_->queue_count(), 1u) << "the queue with a controller stays";
  EXPECT_EQ(target_->controller_count(), 1u);
  disconnect(without);
  disconnect(with_controller);
}

// Two queues of one host, then a third REQ: answered NO_RSC (with the counters at that moment returned); once the
// first queue has closed, a fourth REQ is accepted again.
TransportCounters RdmaTransportTest::two_queues_then_no_resources(const TargetLimits& limits) {
  start_target(limits);
  ndk::Connector* first = connect_host(player(), 2);
  ndk::Connector* second = connect_host(player(), 2);
  EXPECT_NE(first, nullptr);
  EXPECT_NE(second, nullptr);
  apps::Request connecting;
  ndk::Connector* third = send_request(player(), connecting);
  EXPECT_EQ(answer(third, connecting), RdmaCmReject::kNoResources);
  const TransportCounters at_rejection = transport_->counters();
  third->NdkCloseConnector(nullptr, nullptr);

  disconnect(first);
  EXPECT_TRUE(poll_target_until([&] { return transport_->counters().queues_closed == 1; }));
  ndk::Connector* fourth = connect_host(player(), 2);
  EXPECT_NE(fourth, nullptr) << "room again once a queue has closed";
  EXPECT_EQ(transport_->counters().queues_accepted, 3u);
  disconnect(second);
  disconnect(fourth);
  return at_rejection;
}

// Every queue holds a QP and its buffers, with a controller or not: the target holds at most limits.max_queues at
// once (closing ones included) and answers a REQ beyond with NVME_RDMA_CM_NO_RSC. Once a queue has closed, a new one
// is accepted again.
TEST_F(RdmaTransportTest, RequestsBeyondMaxQueuesAreRejectedWithNoResources) {
  TargetLimits limits;
  limits.max_queues = 2;
  const TransportCounters c = two_queues_then_no_resources(limits);
  EXPECT_EQ(c.queue_limit, 1u);
  EXPECT_EQ(c.queues_rejected, 1u);
}

// One host address holds at most limits.max_queues_per_host queues, closing ones included, though the target has
// room for more: its REQs alone (never followed by a Connect) or controllers it never ends would otherwise lock every
// other host out. A REQ beyond is answered NO_RSC and counted; once one of its queues has closed, it gets one again.
TEST_F(RdmaTransportTest, AHostBeyondItsShareOfQueuesIsRejectedWithNoResources) {
  TargetLimits limits;
  limits.max_queues = 8;
  limits.max_queues_per_host = 2;
  const TransportCounters c = two_queues_then_no_resources(limits);
  EXPECT_EQ(c.host_queue_limit, 1u);
  EXPECT_EQ(c.queue_limit, 0u) << "the target itself had room";
  EXPECT_EQ(c.queues_rejected, 1u);
}

// A peer's CM REQs alone must not hold much memory: up to limits.max_queues queues wait for their Fabrics Connect
// at once, for connect_timeout_ms. Before the Connect a queue holds its receives and a 1 KiB Connect area per command
// slot; the data buffers (MDTS per slot: 128 KiB here, two slots per command) come with the controller, and the
// commands after the Connect move their data through them. Their registration (8 MiB here) completes off the
// poller's thread (NdkRegisterMr with a completion: faulting the pages in takes milliseconds), and the Connect's
// answer waits for it. (Each accepted REQ used to take them at once: 8 MiB for
// this admin queue of 32, ~32 MiB for an I/O queue of 128.)
TEST_F(RdmaTransportTest, AQueueTakesItsDataBuffersOnlyOnceItsConnectMadeAController) {
  constexpr uint16_t kEntries = 32;
  ndk::testing::Player& host = player();
  ndk::Connector* connector = connect_host(host, kEntries);
  ASSERT_NE(connector, nullptr);
  const std::size_t slots = 2 * kEntries;
  const std::size_t before_connect = transport_->buffer_bytes();
  EXPECT_GE(before_connect, kEntries * kSqe + slots * kConnectDataSize);
  EXPECT_LE(before_connect, std::size_t{128} << 10);

  ASSERT_EQ(fabrics_connect(host, kEntries - 1), 0) << "Connect succeeds";
  const std::size_t data_size = std::size_t{4096} << TargetLimits{}.mdts;
  EXPECT_EQ(transport_->buffer_bytes(), before_connect + slots * data_size);

  // A command after the Connect moves its data through the data buffers: Identify Controller, 4 KiB by RDMA WRITE
  // into the host's memory, which is more than a Connect area holds. The controller is enabled first.
  constexpr std::size_t kResponse = 4096, kData = 16384;
  uint8_t* const sqe = host.buffer;
  const auto run_admin = [&](uint16_t cid) {
    sqe[1] = 0x40;  // PSDT 01b: SGLs
    std::memcpy(sqe + 2, &cid, 2);
    EXPECT_EQ(host.receive(kResponse, kCqe, 2U * cid), STATUS_SUCCESS);
    EXPECT_EQ(host.send(0, kSqe, 2U * cid + 1), STATUS_SUCCESS);
    bool answered = false;
    EXPECT_TRUE(poll_target_until([&] {
      NdkResult r;
      while (host.cq->NdkGetCqResults(&r, 1) == 1) {
        EXPECT_EQ(r.Status, STATUS_SUCCESS);
        answered |= reinterpret_cast<uintptr_t>(r.RequestContext) == 2U * cid;
      }
      return answered;
    }));
    uint16_t status = 0;
    std::memcpy(&status, host.buffer + kResponse + 14, 2);
    return status >> 1;
  };
  std::memset(sqe, 0, kSqe);
  sqe[0] = 0x7F;                                     // Fabrics
  sqe[4] = 0x00;                                     // Property Set
  const uint32_t cc_offset = 0x14;                   // CC
  const uint32_t enable = 1U | 6U << 16 | 4U << 20;  // EN, IOSQES 64 B, IOCQES 16 B
  std::memcpy(sqe + 44, &cc_offset, 4);
  std::memcpy(sqe + 48, &enable, 4);
  sqe[39] = 0x40;  // a null keyed SGL: no data
  ASSERT_EQ(run_admin(2), 0) << "CC.EN";
  std::memset(host.buffer + kData, 0, 4096);
  std::memset(sqe, 0, kSqe);
  sqe[0] = 0x06;  // Identify
  const uint64_t address = host.address(kData);
  const uint32_t length = 4096;
  const uint32_t key = host.token();
  std::memcpy(sqe + 24, &address, 8);
  std::memcpy(sqe + 32, &length, 3);
  std::memcpy(sqe + 35, &key, 4);
  sqe[39] = 0x40;  // keyed data block, address
  sqe[40] = 0x01;  // CNS 1: the controller
  ASSERT_EQ(run_admin(3), 0) << "Identify";
  const std::string subnqn(reinterpret_cast<const char*>(host.buffer + kData + 768), std::strlen(kSubsystemNqn));
  EXPECT_EQ(subnqn, kSubsystemNqn) << "Identify Controller's SUBNQN (bytes 768..1023), the last quarter of the 4 KiB";
  disconnect(connector);
}

// A capsule shorter than an SQE carries no command to answer: the target closes the queue (as nvmet does, a
// controller fatal error) and its controller with it, and counts it. It used to drop the capsule and go on. A command
// that arrives behind it, taken in the same poll, is not started on the failed queue.
TEST_F(RdmaTransportTest, ACapsuleShorterThanAnSqeClosesTheQueue) {
  ndk::testing::Player& host = player();
  std::atomic<bool> disconnected{false};
  ndk::Connector* connector = connect_host(host, 2, &disconnected);
  ASSERT_NE(connector, nullptr);
  ASSERT_EQ(fabrics_connect(host, 1), 0) << "Connect succeeds";
  ASSERT_EQ(target_->controller_count(), 1u);
  const uint64_t commands = target_->counters().commands;
  std::memset(host.buffer, 0, 2 * kSqe);
  uint8_t* const property_get = host.buffer + kSqe;  // Property Get CAP: a command that moves no data
  property_get[0] = 0x7F;
  property_get[1] = 0x40;
  property_get[4] = 0x04;
  property_get[39] = 0x40;  // a null keyed SGL
  ASSERT_EQ(host.send(0, 32, 7), STATUS_SUCCESS);
  ASSERT_EQ(host.send(kSqe, kSqe, 8), STATUS_SUCCESS);
  // Both capsules are in the target's receives before it polls (the engines deliver them; the target's thread is
  // this one), so one poll takes them together.
  int sent = 0;
  ASSERT_TRUE(ndk::testing::eventually([&] {
    NdkResult r;
    while (host.cq->NdkGetCqResults(&r, 1) == 1) sent += r.Status == STATUS_SUCCESS ? 1 : 0;
    return sent == 2;
  }));
  ASSERT_TRUE(poll_target_until([&] { return disconnected.load(); })) << "the target's DREQ";
  EXPECT_EQ(target_->counters().commands, commands) << "the command behind the runt was not started";
  EXPECT_EQ(transport_->counters().bad_capsules, 1u);
  EXPECT_TRUE(poll_target_until([&] { return target_->controller_count() == 0; })) << "the controller went with it";
  disconnect(connector);
}

// A backend that holds every request until told to end them, as a file backend's I/O stays in the kernel: a read
// then fills its buffer, as the kernel would.
class HeldBackend : public Backend {
 public:
  [[nodiscard]] uint64_t size() const override { return uint64_t{1} << 20; }
  [[nodiscard]] int submit(const BackendRequest& request) override {
    const std::lock_guard lock(mutex_);
    held_.push_back(request);
    return kBackendPending;
  }
  [[nodiscard]] std::size_t poll(std::span<BackendCompletion> out) override {
    const std::lock_guard lock(mutex_);
    if (!ended_) return 0;
    const std::size_t n = std::min(out.size(), held_.size());
    for (std::size_t i = 0; i < n; ++i) out[i] = {held_[i].context, 0};
    held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(n));
    return n;
  }
  [[nodiscard]] std::string describe() const override { return "held"; }
  [[nodiscard]] std::size_t held() const {
    const std::lock_guard lock(mutex_);
    return held_.size();
  }
  // The I/O ends: reads write their buffers, and poll() reports every request.
  void end_requests() {
    const std::lock_guard lock(mutex_);
    for (const BackendRequest& r : held_) {
      if (r.op == BackendOp::kRead) std::memset(r.data, 0xA5, r.length);
    }
    ended_ = true;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<BackendRequest> held_;
  bool ended_ = false;
};

// The target stops while a backend still runs a host's read: the transport's end starts none of the host's new
// commands, waits for the read at most its stop timeout, and then leaves the queue's buffers allocated, so the read
// that ends afterwards writes into memory nobody else was given. They used to be freed under it (under ASan, the
// write below is a use after free), and the wait kept starting the host's new commands, so a host that kept its
// queue full held the stop to its deadline.
TEST_F(RdmaTransportTest, AStopWithAReadStillInTheBackendLeavesItsBufferAllocated) {
  const auto backend = std::make_shared<HeldBackend>();
  start_target({}, backend, std::chrono::milliseconds(200));
  std::atomic<bool> polling{true};
  std::thread poller([&] {
    while (polling.load()) (void)transport_->poll();
  });
  HostControllerOptions options;
  options.source = host_address_;
  options.target = target_address_;
  options.subnqn = kSubsystemNqn;
  options.hostnqn = kHostNqn;
  options.io_queues = 1;
  options.io_entries = 4;
  options.io_data_bytes = 4096;
  options.timeout = std::chrono::seconds(2);
  std::string error;
  std::unique_ptr<HostController> host = HostController::connect(adapter(), options, error);
  ASSERT_TRUE(host) << error;
  HostQueue& queue = *host->io_queues().front();
  Sqe read = host_sqe(0x02, 1, 1);  // Read, one 512-byte block from LBA 0 (CDW12 NLB 0: one block)
  set_keyed_sgl(read, queue.address_of(queue.data().data()), 512, queue.remote_key());
  ASSERT_TRUE(queue.submit(read));
  EXPECT_TRUE(ndk::testing::eventually([&] { return backend->held() == 1; }));
  polling.store(false);
  poller.join();

  // The host keeps sending while the target stops: nothing more reaches the backend.
  for (uint16_t cid = 2; cid <= 3; ++cid) {
    Sqe more = read;
    std::memcpy(more.data() + 2, &cid, 2);
    EXPECT_TRUE(queue.submit(more));
  }
  transport_.reset();
  EXPECT_EQ(backend->held(), 1u) << "the commands sent during the stop were not started";
  backend->end_requests();  // writes 512 bytes into the queue's slot: freed, this is a use after free
  host.reset();             // its shutdown finds the target gone
  target_.reset();
}

}  // namespace
}  // namespace uroce::nvmf
