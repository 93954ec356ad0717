#include "apps/stat/stat_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace uroce::stat {
namespace {

using ::testing::HasSubstr;

TEST(Json, ParsesWhatTelemetryWritesWithExactCounters) {
  const auto j = parse_json(R"({"/uroce/engine": {"engine": 0, "rx_packets": 18446744073709551615,)"
                            R"( "name": "a\"b\u00e9", "list": [1, 2], "ratio": 0.5, "neg": -3, "none": null}})");
  ASSERT_TRUE(j);
  const Json* e = j->find("/uroce/engine");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->find("rx_packets")->unsigned_integer(), 18446744073709551615ull);
  EXPECT_EQ(*e->find("name")->string(), "a\"b\xc3\xa9");
  EXPECT_EQ(e->find("list")->array()->size(), 2u);
  EXPECT_EQ(e->find("ratio")->number(), 0.5);
  EXPECT_FALSE(e->find("neg")->unsigned_integer());
  EXPECT_TRUE(e->find("none")->is_null());
  EXPECT_EQ(parse_json(e->dump())->dump(), e->dump());
}

TEST(Json, RefusesWhatIsNotJson) {
  for (const char* bad :
       {"", "{", "{\"a\" 1}", "[1,]", "{\"a\": 1} x", "\"\\q\"", "nul", "[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]"})
    EXPECT_FALSE(parse_json(bad)) << bad;
}

Json::Object engine(uint64_t busy, uint64_t total, uint64_t rx) {
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
  const Json& rates = *(*j.find("engines")->array())[0].find("rates");
  EXPECT_EQ(rates.find("rx_packets")->number(), 2000.0);
  EXPECT_EQ(rates.find("mempool_in_use"), nullptr);  // a gauge has no rate
  EXPECT_EQ(j.find("interval_seconds")->number(), 2.0);
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
