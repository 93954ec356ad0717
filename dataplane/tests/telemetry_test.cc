// /uroce/engine, /uroce/port and /uroce/cm: the callbacks directly, and through the telemetry socket when there is one.
#include "dataplane/telemetry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>

#include <rte_telemetry.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "dataplane/eal.h"
#include "loopback_fixture.h"

namespace uroce::dataplane::testing {
namespace {

using ::testing::HasSubstr;

class TelemetryTest : public LoopbackTest {};

int call_engine_command(const char* params) {
  rte_tel_data* data = rte_tel_data_alloc();
  const int rc = telemetry_engine_command("/uroce/engine", params, data);
  rte_tel_data_free(data);
  return rc;
}

std::string socket_path() {
  for (const auto& arg : eal_args())
    if (arg.rfind("--file-prefix=", 0) == 0) return "/var/run/dpdk/" + arg.substr(14) + "/dpdk_telemetry.v2";
  return {};
}

// One request over the telemetry v2 socket (SOCK_SEQPACKET: the server first sends its info message).
std::string query(const std::string& path, const std::string& request) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    char buffer[16384];
    if (read(fd, buffer, sizeof(buffer)) > 0 && write(fd, request.data(), request.size()) > 0) {
      const ssize_t n = read(fd, buffer, sizeof(buffer));
      if (n > 0) reply.assign(buffer, static_cast<std::size_t>(n));
    }
  }
  close(fd);
  return reply;
}

TEST_F(TelemetryTest, EngineCommandAnswersForRunningEnginesOnly) {
  EXPECT_EQ(call_engine_command("0"), -ENODEV);  // no Dataplane yet
  start(loopback_config());
  EXPECT_EQ(call_engine_command("0"), 0);
  EXPECT_EQ(call_engine_command("1"), 0);
  EXPECT_EQ(call_engine_command("2"), -EINVAL);
  EXPECT_EQ(call_engine_command("x"), -EINVAL);
  EXPECT_EQ(call_engine_command(""), -EINVAL);
  EXPECT_EQ(call_engine_command(nullptr), -EINVAL);
  dp_->stop();
  EXPECT_EQ(call_engine_command("0"), -ENODEV);
}

TEST_F(TelemetryTest, CountersAreServedOverTheTelemetrySocket) {
  const std::string path = socket_path();
  if (path.empty() || !std::filesystem::exists(path)) GTEST_SKIP() << "no telemetry socket at '" << path << "'";
  Dataplane& dp = start(loopback_config());
  ASSERT_TRUE(dp.resolve(kPortA, ipv4(198, 18, 0, 2), std::chrono::seconds(10)).ok());
  EXPECT_THAT(query(path, "/"), HasSubstr("/uroce/engine"));
  const std::string engine = query(path, "/uroce/engine,0");
  EXPECT_THAT(engine, HasSubstr("\"engine\":0"));
  EXPECT_THAT(engine, HasSubstr("\"rx_icrc_encapsulated\":0"));
  EXPECT_THAT(engine, HasSubstr("\"arp_requests_answered\":1"));
  EXPECT_THAT(engine, HasSubstr("\"local_ack_timeout_err\":0"));
  const std::string port = query(path, "/uroce/port,1");
  EXPECT_THAT(port, HasSubstr("\"name\":\"b\""));
  EXPECT_THAT(port, HasSubstr("\"rx_packets\":1"));  // the ARP request
}

// /uroce/cm serves whichever connection manager published last, until that one withdraws.
TEST_F(TelemetryTest, CmCountersComeFromTheirPublisherUntilItWithdraws) {
  const std::string path = socket_path();
  if (path.empty() || !std::filesystem::exists(path)) GTEST_SKIP() << "no telemetry socket at '" << path << "'";
  rte_tel_data* data = rte_tel_data_alloc();
  EXPECT_EQ(telemetry_cm_command("/uroce/cm", nullptr, data), -ENODEV);
  int first = 0, second = 0;
  publish_cm_counters(&first, [] { return std::vector<std::pair<std::string, uint64_t>>{{"cm_rx_mads", 7}}; });
  publish_cm_counters(&second, [] { return std::vector<std::pair<std::string, uint64_t>>{{"cm_rx_mads", 9}}; });
  EXPECT_THAT(query(path, "/uroce/cm"), HasSubstr("\"cm_rx_mads\":9"));
  withdraw_cm_counters(&first);  // not the publisher: changes nothing
  EXPECT_THAT(query(path, "/uroce/cm"), HasSubstr("\"cm_rx_mads\":9"));
  withdraw_cm_counters(&second);
  EXPECT_EQ(telemetry_cm_command("/uroce/cm", nullptr, data), -ENODEV);
  rte_tel_data_free(data);
}

}  // namespace
}  // namespace uroce::dataplane::testing
