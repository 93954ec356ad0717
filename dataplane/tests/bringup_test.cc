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

class BringUpTest : public LoopbackTest {
 protected:
  // Starts `config` and sends ten SEND Only frames from engine 1 on port 0 to engine 1's QP at port `to`: all ten
  // must arrive.
  void start_and_pass_ten_frames(const config::Config& config, PortIndex to) {
    Dataplane& dp = start(config);
    RecordingEndpoint endpoint;
    ASSERT_TRUE(dp.engine(1).register_qp(make_qpn(1, 2), endpoint.endpoint()).ok());
    FrameGenerator traffic(0, 10, [&](uint64_t i, std::span<uint8_t> out) {
      return proto::build_packet(roce_spec(dp, 0, to, make_qpn(1, 2), Opcode::kRcSendOnly, static_cast<uint32_t>(i)),
                                 out);
    });
    run_generator(dp.engine(1), traffic);
    EXPECT_TRUE(eventually([&] { return endpoint.count() == 10; }));
  }
};

config::PortConfig addressed_port(const std::string& name, const std::string& device, uint8_t host) {
  config::PortConfig port = port_config(name, device);
  port.mac = config::MacAddress{0x02, 0, 0, 0, 0, host};
  port.addresses = {ipv4(198, 18, 1, host)};
  return port;
}

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
  config.ports = {addressed_port("loop", "net_ring0", 1)};  // a net_ring vdev is a loopback port
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    start_and_pass_ten_frames(config, 0);
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
  config.ports = {addressed_port("server", "net_memif0,role=server,id=0,socket-abstract=no,socket=" + socket, 1),
                  addressed_port("client", "net_memif1,role=client,id=0,socket-abstract=no,socket=" + socket, 2)};
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    start_and_pass_ten_frames(config, 1);
    dp_.reset();
  }
}

}  // namespace
}  // namespace uroce::dataplane::testing
