// Bring-up errors are clear statuses that leave the process able to start a good configuration, and vdev
// ports can be opened, closed and opened again in one process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include "loopback_fixture.h"

namespace uroce::dataplane::testing {
namespace {

using proto::Opcode;
using ::testing::HasSubstr;

class BringUpTest : public LoopbackTest {};

std::string start_error(const config::Config& config) {
  auto dp = Dataplane::start(config);
  return dp.ok() ? std::string("(started)") : dp.error();
}

TEST_F(BringUpTest, BadConfigurationsFailWithAClearMessage) {
  auto config = loopback_config();
  config.engine.rx_burst = 0;
  EXPECT_THAT(start_error(config), HasSubstr("rx_burst"));

  config = loopback_config();
  config.ports.pop_back();
  EXPECT_THAT(start_error(config), HasSubstr("ring link 'ab' has 1 ports"));

  config = loopback_config();
  config.ports[1].name = "a";
  EXPECT_THAT(start_error(config), HasSubstr("repeated"));

  config = loopback_config();
  config.ports.push_back(port_config("bogus", "net_nosuchdriver0"));
  EXPECT_THAT(start_error(config), HasSubstr("port bogus (net_nosuchdriver0): the vdev failed to probe"));

  config = loopback_config();
  config.eal.lcores = {0, 1, 0};
  EXPECT_THAT(start_error(config), HasSubstr("once per process"));

  // After all that, a good configuration still starts.
  start(loopback_config());
}

TEST_F(BringUpTest, VdevPortsOpenCloseAndReopen) {
  config::Config config = loopback_config();
  config::PortConfig loop = port_config("loop", "net_ring0");  // a net_ring vdev is a loopback port
  loop.mac = config::MacAddress{0x02, 0, 0, 0, 0, 0x0c};
  loop.addresses = {ipv4(198, 18, 1, 1)};
  config.ports = {loop};
  for (int round = 0; round < 2; ++round) {
    Dataplane& dp = start(config);
    RecordingEndpoint endpoint;
    ASSERT_TRUE(dp.engine(1).register_qp(make_qpn(1, 2), endpoint.endpoint()).ok());
    FrameGenerator traffic(0, 10, [&](uint64_t i, std::span<uint8_t> out) {
      return proto::build_packet(roce_spec(dp, 0, 0, make_qpn(1, 2), Opcode::kRcSendOnly, static_cast<uint32_t>(i)),
                                 out);
    });
    run_generator(dp.engine(1), traffic);
    EXPECT_TRUE(eventually([&] { return endpoint.count() == 10; })) << "round " << round;
    dp_.reset();
  }
}

// Both ends of one memif socket in one Dataplane: the links come up only once both ports have started, traffic
// crosses, and each close runs on the EAL interrupt thread (PortSet::close), where the PMD also handles the other
// end's disconnect. Few rounds: DPDK 22.11 leaks a server port's listener, still registered with the interrupt
// thread, every time that port closes.
TEST_F(BringUpTest, MemifPairInOneProcessCarriesTrafficAndClosesCleanly) {
  const std::string socket = "/tmp/uroce-bringup-memif-" + std::to_string(::getpid()) + ".sock";
  config::Config config = loopback_config();
  config::PortConfig server = port_config("server", "net_memif0,role=server,id=0,socket-abstract=no,socket=" + socket);
  server.mac = config::MacAddress{0x02, 0, 0, 0, 0, 0x0d};
  server.addresses = {ipv4(198, 18, 1, 1)};
  config::PortConfig client = port_config("client", "net_memif1,role=client,id=0,socket-abstract=no,socket=" + socket);
  client.mac = config::MacAddress{0x02, 0, 0, 0, 0, 0x0e};
  client.addresses = {ipv4(198, 18, 1, 2)};
  config.ports = {server, client};
  for (int round = 0; round < 5; ++round) {
    Dataplane& dp = start(config);
    RecordingEndpoint endpoint;
    ASSERT_TRUE(dp.engine(1).register_qp(make_qpn(1, 2), endpoint.endpoint()).ok());
    FrameGenerator traffic(0, 10, [&](uint64_t i, std::span<uint8_t> out) {
      return proto::build_packet(roce_spec(dp, 0, 1, make_qpn(1, 2), Opcode::kRcSendOnly, static_cast<uint32_t>(i)),
                                 out);
    });
    run_generator(dp.engine(1), traffic);
    EXPECT_TRUE(eventually([&] { return endpoint.count() == 10; })) << "round " << round;
    dp.stop_engines();  // memif unmaps its rings on disconnect: nothing may poll them then (dpdk-env.md §4)
    dp_.reset();
  }
}

}  // namespace
}  // namespace uroce::dataplane::testing
