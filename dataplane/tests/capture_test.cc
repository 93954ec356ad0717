// The pcapng file the engines write decodes with tshark: RoCE opcodes, directions, and timestamps of today.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sstream>

#include "loopback_fixture.h"

namespace uroce::dataplane::testing {
namespace {

using namespace std::chrono_literals;
using proto::Opcode;

std::string run(const std::string& command) {
  std::string out;
  if (FILE* pipe = popen(command.c_str(), "r"); pipe != nullptr) {
    char buffer[4096];
    while (std::size_t n = fread(buffer, 1, sizeof(buffer), pipe)) out.append(buffer, n);
    pclose(pipe);
  }
  return out;
}

std::vector<std::vector<std::string>> rows(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> fields;
    std::istringstream cells(line);
    for (std::string cell; std::getline(cells, cell, '\t');) fields.push_back(cell);
    out.push_back(fields);
  }
  return out;
}

class CaptureTest : public LoopbackTest {};

TEST_F(CaptureTest, PcapngDecodesAsRoceWithDirectionsAndCurrentTimestamps) {
  const char* tshark = std::getenv("UROCE_TSHARK");  // NOLINT(concurrency-mt-unsafe): nothing sets the environment
  if (tshark == nullptr) GTEST_SKIP() << "tshark not found at configure time";
  const std::string path = ::testing::TempDir() + "dataplane_capture.pcapng";
  config::Config config = loopback_config();
  config.capture.pcapng_path = path;
  Dataplane& dp = start(config);
  RecordingEndpoint endpoint;
  const proto::Qpn qpn = make_qpn(0, 0x11);
  ASSERT_TRUE(dp.engine(0).register_qp(qpn, endpoint.endpoint()).ok());
  // Neighbour traffic too, so that tshark checks our ARP and ICMPv6 (checksums included).
  ASSERT_TRUE(dp.resolve(kPortA, ipv4(198, 18, 0, 2), 10s).ok());
  ASSERT_TRUE(dp.resolve(kPortA, ipv6("fd00::2"), 10s).ok());

  const Opcode opcodes[] = {Opcode::kRcSendOnly, Opcode::kRcRdmaWriteOnly, Opcode::kRcRdmaReadRequest,
                            Opcode::kRcAcknowledge};
  const uint8_t payload[40] = {0xAB};
  FrameGenerator traffic(kPortA, 4, [&](uint64_t i, std::span<uint8_t> out) {
    const bool has_payload = i < 2;
    return proto::build_packet(roce_spec(dp, kPortA, kPortB, qpn, opcodes[i], 100 + static_cast<uint32_t>(i),
                                         has_payload ? std::span<const uint8_t>(payload) : std::span<const uint8_t>()),
                               out);
  });
  run_generator(dp.engine(0), traffic);
  ASSERT_TRUE(eventually([&] { return endpoint.count() == 4; }));
  dp.stop();  // closes the file after the writer drained every engine
  EXPECT_EQ(counter(0, "capture_drops"), 0u);
  EXPECT_GT(counter(0, "capture_packets"), 8u);

  const auto roce = rows(run(std::string(tshark) + " -r " + path +
                             " -Y infiniband -T fields -e frame.time_epoch -e frame.interface_id"
                             " -e frame.packet_flags_direction -e infiniband.bth.opcode -e infiniband.bth.destqp"
                             " -e infiniband.bth.psn 2>/dev/null"));
  ASSERT_EQ(roce.size(), 8u) << "each packet once leaving a and once entering b";
  const double now = static_cast<double>(std::time(nullptr));
  std::multiset<std::string> seen_opcodes;
  for (const auto& r : roce) {
    ASSERT_EQ(r.size(), 6u);
    EXPECT_NEAR(std::stod(r[0]), now, 60.0) << "timestamp " << r[0];
    const bool on_a = r[1] == "0";
    // epb_flags direction: 1 inbound, 2 outbound (tshark prints the 32-bit flags word in hex)
    EXPECT_EQ(std::stoul(r[2], nullptr, 0) & 3, on_a ? 2u : 1u) << r[1] << " " << r[2];
    seen_opcodes.insert(r[3]);
    EXPECT_EQ(std::stoul(r[4], nullptr, 0), qpn.value());
  }
  EXPECT_EQ(seen_opcodes, (std::multiset<std::string>{"4", "4", "10", "10", "12", "12", "17", "17"}));

  // Our ARP reply and Neighbor Advertisement are well-formed in tshark's eyes.
  const auto arp = rows(run(std::string(tshark) + " -r " + path + " -Y arp -T fields -e arp.opcode 2>/dev/null"));
  EXPECT_GE(arp.size(), 2u);
  const auto nd = rows(run(std::string(tshark) + " -r " + path +
                           " -Y icmpv6 -T fields -e icmpv6.type -e icmpv6.checksum.status 2>/dev/null"));
  ASSERT_GE(nd.size(), 2u);
  for (const auto& r : nd) {
    ASSERT_EQ(r.size(), 2u);
    EXPECT_THAT(r[0], ::testing::AnyOf("135", "136"));
    EXPECT_EQ(r[1], "1") << "icmpv6 checksum status (1 = good)";
  }
  if (!HasFailure()) std::remove(path.c_str());
}

}  // namespace
}  // namespace uroce::dataplane::testing
