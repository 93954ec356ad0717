#include "apps/stat/stat_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "apps/stat/telemetry_client.h"

namespace uroce::stat {
namespace {

using ::testing::HasSubstr;

// A process that accepts the connection but never answers (stopped with SIGSTOP, or hung) used to hang uroce-stat
// in its first read for ever; it now gives up with an error that says so.
TEST(TelemetryClient, AProcessThatNeverAnswersIsGivenUpOn) {
  std::string dir = ::testing::TempDir() + "stat_timeout.XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string path = dir + "/dpdk_telemetry.v2";
  const int server = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  ASSERT_GE(server, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof(address.sun_path));
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(::bind(server, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(server, 4), 0);  // connections queue; none is accepted, no greeting is ever sent
  std::string error;
  const auto client = TelemetryClient::connect(path, error, std::chrono::milliseconds(200));
  EXPECT_FALSE(client.has_value());
  EXPECT_THAT(error, HasSubstr("did not answer in time"));
  ::close(server);
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());
}

TEST(TelemetryJson, ParsesWhatTelemetryWritesWithExactCounters) {
  const auto j = parse_telemetry_json(
      R"({"/uroce/engine": {"engine": 0, "rx_packets": 18446744073709551615, "big": 9007199254740993,)"
      R"( "name": "a\"b\u00e9", "list": [1, 2], "ratio": 0.5, "neg": -3, "none": null}})");
  ASSERT_TRUE(j);
  const Json& e = j->at("/uroce/engine");
  EXPECT_EQ(unsigned_integer(e.at("rx_packets")), 18446744073709551615ull);
  EXPECT_EQ(unsigned_integer(e.at("big")), 9007199254740993ull);  // 2^53 + 1: a double would round it
  EXPECT_EQ(e.at("name"), "a\"b\xc3\xa9");
  EXPECT_EQ(e.at("list").size(), 2u);
  EXPECT_EQ(e.at("ratio"), 0.5);
  EXPECT_FALSE(unsigned_integer(e.at("neg")));
  EXPECT_FALSE(unsigned_integer(e.at("ratio")));
  EXPECT_TRUE(e.at("none").is_null());
  EXPECT_EQ(dump_json(*parse_telemetry_json(dump_json(e))), dump_json(e));
  EXPECT_THAT(dump_json(e), HasSubstr("\"rx_packets\":18446744073709551615"));
}

TEST(TelemetryJson, RefusesWhatIsNotJson) {
  for (const char* bad : {"", "{", "{\"a\" 1}", "[1,]", "{\"a\": 1} x", "\"\\q\"", "nul", "\"\xff\"",
                          "[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]"})
    EXPECT_FALSE(parse_telemetry_json(bad)) << bad;
}

TEST(TelemetryJson, DeepNestingIsRefusedNotACrash) {
  for (const std::size_t depth : {std::size_t{17}, std::size_t{100000}}) {
    const std::string closed = std::string(depth, '[') + std::string(depth, ']');
    EXPECT_FALSE(parse_telemetry_json(closed)) << depth;
    EXPECT_FALSE(parse_telemetry_json(std::string(depth, '['))) << depth;  // and unterminated
    EXPECT_FALSE(parse_telemetry_json(R"({"a": )" + closed + "}")) << depth;
  }
  EXPECT_TRUE(parse_telemetry_json(std::string(16, '[') + std::string(16, ']')));  // the limit itself
}

TEST(TelemetryJson, DumpNeverThrowsOnBytesThatAreNotUtf8) {
  EXPECT_EQ(dump_json(Json{{"name", "a\xff"}}), "{\"name\":\"a\xef\xbf\xbd\"}");
}

Json::object_t engine(uint64_t busy, uint64_t total, uint64_t rx) {
  return {{"engine", Json(uint64_t{0})},
          {"lcore", Json(uint64_t{1})},
          {"busy_cycles", Json(busy)},
          {"total_cycles", Json(total)},
          {"rx_packets", Json(rx)},
          {"tx_packets", Json(uint64_t{7})},
          {"rx_drop_bad_bth", Json(uint64_t{2})},
          {"rx_icrc_encapsulated", Json(uint64_t{3})},
          {"mempool_in_use", Json(uint64_t{100})},
          {"mempool_size", Json(uint64_t{16383})}};
}

TEST(StatReport, EngineTableShowsBusyShareDropsAndMempool) {
  Snapshot s;
  s.engines.push_back(engine(250, 1000, 42));
  const std::string table = render_tables(s, nullptr, {Section::kEngines});
  EXPECT_THAT(table, HasSubstr("ENGINE  LCORE   BUSY  RX_PACKETS"));
  EXPECT_THAT(table, HasSubstr("25.0%"));
  EXPECT_THAT(table, HasSubstr("100/16383"));
  EXPECT_THAT(table, ::testing::ContainsRegex("0 +1 +25.0% +42 +7 +5 "));  // drops: 2 + 3
}

TEST(StatReport, WatchShowsRatesAndTheIntervalsBusyShare) {
  Snapshot before, now;
  before.seconds = 10;
  now.seconds = 12;
  before.engines.push_back(engine(100, 1000, 1000));
  now.engines.push_back(engine(1000, 2000, 5000));  // 900 busy of 1000 cycles; 4000 packets in 2 s
  EXPECT_EQ(busy_share(now.engines[0], &before.engines[0]), 0.9);
  EXPECT_THAT(render_tables(now, &before, {Section::kEngines}), HasSubstr("90.0%"));
  EXPECT_THAT(render_tables(now, &before, {Section::kEngines}), HasSubstr("2000/s"));
  const Json j = to_json(now, &before);
  const Json& rates = j.at("engines").at(0).at("rates");
  EXPECT_EQ(rates.at("rx_packets"), 2000.0);
  EXPECT_FALSE(rates.contains("mempool_in_use"));  // a gauge has no rate
  EXPECT_EQ(j.at("interval_seconds"), 2.0);
  EXPECT_EQ(j.at("engines").at(0).at("busy_share"), 0.9);
  // The counters themselves stay exact integers next to the rates.
  EXPECT_EQ(unsigned_integer(j.at("engines").at(0).at("rx_packets")), 5000u);
}

TEST(StatReport, QpTableFollowsRdmaResourceShowQp) {
  Snapshot s;
  s.qps.push_back({{"lqpn", Json(uint64_t{0x100011})},
                   {"rqpn", Json(uint64_t{0x200012})},
                   {"type", Json("RC")},
                   {"state", Json("RTS")},
                   {"peer", Json("198.18.0.2")},
                   {"sq_psn", Json(uint64_t{77})},
                   {"retransmitted_packets", Json(uint64_t{4})}});
  const std::string table = render_tables(s, nullptr, {Section::kQps});
  EXPECT_THAT(table, ::testing::ContainsRegex("LQPN +RQPN +TYPE +STATE"));
  EXPECT_THAT(table, ::testing::ContainsRegex("1048593 +2097170 +RC +RTS +198.18.0.2"));
  EXPECT_THAT(render_tables(Snapshot{}, nullptr, {Section::kQps}), HasSubstr("qps: none"));
}

}  // namespace
}  // namespace uroce::stat
