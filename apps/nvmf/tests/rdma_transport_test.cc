// The RDMA transport binding (rdma_transport.cc) end to end through the engines of the loopback config, against
// a host written on the NDK API here, so that it can do what the Linux host never does on purpose.
#include "apps/nvmf/rdma_transport.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>

#include "api/tests/api_players.h"
#include "apps/common/cm_connection.h"
#include "apps/common/tool_setup.h"
#include "apps/nvmf/nvme/nvmf_target.h"

namespace uroce::nvmf {
namespace {

using ndk::NdkResult;
using ndk::NdkSge;
using ndk::STATUS_SUCCESS;
using ndk::testing::api_test_config;
using ndk::testing::ApiTest;

constexpr uint16_t kPort = 4420;
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
    TargetConfig config;
    SubsystemConfig sub;
    sub.nqn = "nqn.2026-11.io.uroce:test";
    NamespaceConfig ns;
    ns.nsid = 1;
    ns.backend = make_ram_backend(1 << 20);
    sub.namespaces.push_back(ns);
    config.subsystems.push_back(sub);
    config.ports.push_back(PortAddress{false, apps::ip_text(c.ports[1].addresses.front()), kPort});
    ASSERT_FALSE(NvmfTarget::validate(config).has_value());
    target_ = std::make_unique<NvmfTarget>(config);
    std::string error;
    transport_ = RdmaTransport::start(adapter(), *target_, {target_address_}, error);
    ASSERT_TRUE(transport_) << error;
  }
  void TearDown() override {
    transport_.reset();  // disconnects the queues that are left
    target_.reset();
    ApiTest::TearDown();
  }

  // Polls the target on this thread (its only poller) until `done` holds.
  template <class Done>
  bool poll_target_until(Done done) {
    return ndk::testing::eventually([&] {
      (void)transport_->poll();
      return done();
    });
  }

  sockaddr_storage target_address_{};
  sockaddr_storage host_address_{};
  std::unique_ptr<NvmfTarget> target_;
  std::unique_ptr<RdmaTransport> transport_;
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

}  // namespace
}  // namespace uroce::nvmf
