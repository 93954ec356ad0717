#include "config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace uroce::config {

// Readable gtest output for error lists.
// NOLINTNEXTLINE(readability-identifier-naming): gtest looks for this name
void PrintTo(const ConfigError& e, std::ostream* os) { *os << "{" << e.key << ": " << e.message << "}"; }

namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Eq;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using ::testing::Not;

auto is_error(const std::string& key, const std::string& message) {
  return AllOf(Field("key", &ConfigError::key, Eq(key)), Field("message", &ConfigError::message, HasSubstr(message)));
}

// A document with one valid port; `top` adds top-level sections, `port_extra` adds keys to the port's flow map.
std::string doc(std::string_view top, std::string_view port_extra = "") {
  std::string text(top);
  text += "\nports:\n  - {name: p0, device: net_null0, addresses: [198.18.0.1/24]";
  if (!port_extra.empty()) text.append(", ").append(port_extra);
  return text + "}\n";
}

Config load_valid(std::string_view text) {
  LoadResult result = load_config(text);
  EXPECT_THAT(result.errors, IsEmpty()) << text;
  if (!result.config) return Config{};
  return *result.config;
}

std::filesystem::path config_dir() {
  const char* dir = std::getenv("UROCE_CONFIG_DIR");  // NOLINT(concurrency-mt-unsafe): no thread sets it
  return dir != nullptr ? std::filesystem::path(dir) : std::filesystem::path("config");
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(Config, DefaultsFillEveryKeyNotGiven) {
  const Config c = load_valid(doc(""));
  const Config d;
  EXPECT_EQ(c.eal.lcores, d.eal.lcores);
  EXPECT_EQ(c.eal.hugepages, HugePages::kAuto);
  EXPECT_EQ(c.eal.memory_mb, 512u);
  EXPECT_EQ(c.eal.file_prefix, "");
  EXPECT_THAT(c.eal.extra_args, IsEmpty());

  ASSERT_EQ(c.ports.size(), 1u);
  const PortConfig& p = c.ports[0];
  EXPECT_EQ(p.name, "p0");
  EXPECT_EQ(p.device, "net_null0");
  EXPECT_FALSE(p.mac.has_value());
  EXPECT_EQ(p.mtu, 1500);
  EXPECT_EQ(p.rx_descriptors, 1024);
  EXPECT_EQ(p.tx_descriptors, 1024);

  EXPECT_EQ(c.engine.idle, IdlePolicy::kBusyPoll);
  EXPECT_EQ(c.engine.rx_burst, d.engine.rx_burst);
  EXPECT_EQ(c.engine.tx_burst, d.engine.tx_burst);
  EXPECT_EQ(c.engine.mbufs_per_engine, d.engine.mbufs_per_engine);
  EXPECT_EQ(c.engine.mbuf_cache, d.engine.mbuf_cache);
  EXPECT_EQ(c.engine.mbuf_data_room, d.engine.mbuf_data_room);
  EXPECT_EQ(c.engine.redirect_ring_size, d.engine.redirect_ring_size);
  EXPECT_EQ(c.engine.max_qps_per_engine, d.engine.max_qps_per_engine);
  EXPECT_EQ(c.engine.tx_backlog, d.engine.tx_backlog);

  EXPECT_EQ(c.rdma.path_mtu, 1024);
  EXPECT_EQ(c.rdma.ack_timeout, d.rdma.ack_timeout);
  EXPECT_EQ(c.rdma.retry_count, d.rdma.retry_count);
  EXPECT_EQ(c.rdma.rnr_retry, d.rdma.rnr_retry);
  EXPECT_EQ(c.rdma.min_rnr_timer, d.rdma.min_rnr_timer);
  EXPECT_EQ(c.rdma.ack_request_interval, d.rdma.ack_request_interval);
  EXPECT_EQ(c.rdma.max_rd_atomic, d.rdma.max_rd_atomic);
  EXPECT_EQ(c.rdma.max_dest_rd_atomic, d.rdma.max_dest_rd_atomic);
  EXPECT_EQ(c.rdma.udp_source_port_base, 0xC000);

  EXPECT_FALSE(c.faults.enabled());
  EXPECT_EQ(c.faults.seed, 1u);
  EXPECT_EQ(c.capture.pcapng_path, "");
  EXPECT_EQ(c.capture.snap_length, 65535u);
}

TEST(Config, EveryKeyOverridesItsDefault) {
  const Config c = load_valid(R"(
eal:
  lcores: [3, 1]
  hugepages: off
  memory_mb: 2048
  file_prefix: test-prefix
  extra_args: [--log-level=7, --no-telemetry]
ports:
  - name: left
    device: ring:l
    mac: "02:0a:0B:0c:0d:0e"
    addresses: [198.18.0.1/24, "fd00::1/64"]
    mtu: 9000
    rx_descriptors: 512
    tx_descriptors: 256
  - name: right
    device: ring:l
    addresses: [198.18.0.2]
    mtu: 9000
engine:
  idle: backoff
  rx_burst: 64
  tx_burst: 16
  mbufs_per_engine: 32767
  mbuf_cache: 128
  mbuf_data_room: 9300
  redirect_ring_size: 1024
  max_qps_per_engine: 100
  tx_backlog: 77
rdma:
  path_mtu: 2048
  ack_timeout: 20
  retry_count: 3
  rnr_retry: 2
  min_rnr_timer: 5
  ack_request_interval: 8
  max_rd_atomic: 4
  max_dest_rd_atomic: 5
  udp_source_port_base: 50000
faults:
  loss: 0.1
  reorder: 0.2
  duplicate: 0.3
  corrupt: 0.25
  seed: 42
capture:
  pcapng_path: /tmp/x.pcapng
  snap_length: 128
)");
  EXPECT_EQ(c.eal.lcores, (std::vector<unsigned>{3, 1}));
  EXPECT_EQ(c.eal.hugepages, HugePages::kOff);
  EXPECT_EQ(c.eal.memory_mb, 2048u);
  EXPECT_EQ(c.eal.file_prefix, "test-prefix");
  EXPECT_EQ(c.eal.extra_args, (std::vector<std::string>{"--log-level=7", "--no-telemetry"}));

  ASSERT_EQ(c.ports.size(), 2u);
  const PortConfig& p = c.ports[0];
  EXPECT_EQ(p.name, "left");
  EXPECT_EQ(p.device, "ring:l");
  EXPECT_EQ(p.mac, (MacAddress{0x02, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e}));
  ASSERT_EQ(p.addresses.size(), 2u);
  EXPECT_FALSE(p.addresses[0].is_v6);
  EXPECT_TRUE(p.addresses[1].is_v6);
  EXPECT_EQ(p.mtu, 9000);
  EXPECT_EQ(p.rx_descriptors, 512);
  EXPECT_EQ(p.tx_descriptors, 256);
  EXPECT_EQ(c.ports[1].name, "right");

  EXPECT_EQ(c.engine.idle, IdlePolicy::kBackoff);
  EXPECT_EQ(c.engine.rx_burst, 64);
  EXPECT_EQ(c.engine.tx_burst, 16);
  EXPECT_EQ(c.engine.mbufs_per_engine, 32767u);
  EXPECT_EQ(c.engine.mbuf_cache, 128u);
  EXPECT_EQ(c.engine.mbuf_data_room, 9300);
  EXPECT_EQ(c.engine.redirect_ring_size, 1024u);
  EXPECT_EQ(c.engine.max_qps_per_engine, 100u);
  EXPECT_EQ(c.engine.tx_backlog, 77u);

  EXPECT_EQ(c.rdma.path_mtu, 2048);
  EXPECT_EQ(c.rdma.ack_timeout, 20);
  EXPECT_EQ(c.rdma.retry_count, 3);
  EXPECT_EQ(c.rdma.rnr_retry, 2);
  EXPECT_EQ(c.rdma.min_rnr_timer, 5);
  EXPECT_EQ(c.rdma.ack_request_interval, 8);
  EXPECT_EQ(c.rdma.max_rd_atomic, 4);
  EXPECT_EQ(c.rdma.max_dest_rd_atomic, 5);
  EXPECT_EQ(c.rdma.udp_source_port_base, 50000);

  EXPECT_DOUBLE_EQ(c.faults.loss, 0.1);
  EXPECT_DOUBLE_EQ(c.faults.reorder, 0.2);
  EXPECT_DOUBLE_EQ(c.faults.duplicate, 0.3);
  EXPECT_DOUBLE_EQ(c.faults.corrupt, 0.25);
  EXPECT_EQ(c.faults.seed, 42u);
  EXPECT_TRUE(c.faults.enabled());

  EXPECT_EQ(c.capture.pcapng_path, "/tmp/x.pcapng");
  EXPECT_EQ(c.capture.snap_length, 128u);
}

TEST(Config, CongestionReadsEveryKey) {
  const Config d = load_valid(doc(""));
  EXPECT_EQ(d.congestion.max_bytes_in_flight, 1u << 20);
  EXPECT_TRUE(d.congestion.ecn);
  EXPECT_TRUE(d.congestion.notification_point.enabled);
  EXPECT_TRUE(d.congestion.reaction_point.enabled);
  const Config c = load_valid(doc(R"(
congestion:
  max_bytes_in_flight: 0
  ecn: false
  notification_point: {enabled: false, min_time_between_cnps_us: 50, cnp_dscp: 26}
  reaction_point:
    enabled: False
    max_rate_mbps: 25000
    min_rate_mbps: 100
    ai_rate_mbps: 40
    hai_rate_mbps: 400
    time_reset_us: 55
    byte_reset: 10485760
    threshold: 5
    min_dec_fac: 80
    dce_tcp_g: 1020
    dce_tcp_rtt_us: 55
    initial_alpha_value: 512
    rate_reduce_monitor_period_us: 50
    rate_to_set_on_first_cnp_mbps: 10000
)"));
  const CongestionConfig& g = c.congestion;
  EXPECT_EQ(g.max_bytes_in_flight, 0u);
  EXPECT_FALSE(g.ecn);
  EXPECT_FALSE(g.notification_point.enabled);
  EXPECT_EQ(g.notification_point.min_time_between_cnps_us, 50u);
  EXPECT_EQ(g.notification_point.cnp_dscp, 26);
  const ReactionPointConfig& rp = g.reaction_point;
  EXPECT_FALSE(rp.enabled);
  EXPECT_EQ(rp.max_rate_mbps, 25000u);
  EXPECT_EQ(rp.min_rate_mbps, 100u);
  EXPECT_EQ(rp.ai_rate_mbps, 40u);
  EXPECT_EQ(rp.hai_rate_mbps, 400u);
  EXPECT_EQ(rp.time_reset_us, 55u);
  EXPECT_EQ(rp.byte_reset, 10485760u);
  EXPECT_EQ(rp.threshold, 5u);
  EXPECT_EQ(rp.min_dec_fac, 80u);
  EXPECT_EQ(rp.dce_tcp_g, 1020u);
  EXPECT_EQ(rp.dce_tcp_rtt_us, 55u);
  EXPECT_EQ(rp.initial_alpha_value, 512u);
  EXPECT_EQ(rp.rate_reduce_monitor_period_us, 50u);
  EXPECT_EQ(rp.rate_to_set_on_first_cnp_mbps, 10000u);
}

TEST(Config, FaultsBottleneckReadsEveryKeyAndTurnsFaultsOn) {
  const Config c = load_valid(doc(R"(
faults:
  bottleneck:
    rate_mbps: 10000
    buffer_bytes: 200000
    ecn_kmin_bytes: 5000
    ecn_kmax_bytes: 50000
    ecn_pmax: 0.2
)"));
  const BottleneckConfig& b = c.faults.bottleneck;
  EXPECT_EQ(b.rate_mbps, 10000u);
  EXPECT_EQ(b.buffer_bytes, 200000u);
  EXPECT_EQ(b.ecn_kmin_bytes, 5000u);
  EXPECT_EQ(b.ecn_kmax_bytes, 50000u);
  EXPECT_DOUBLE_EQ(b.ecn_pmax, 0.2);
  EXPECT_TRUE(b.enabled());
  EXPECT_TRUE(c.faults.enabled());  // the engines create the model from this alone
  EXPECT_FALSE(c.faults.random_enabled());
}

TEST(Config, FaultsBottleneckIsOffUnlessARateIsGiven) {
  const BottleneckConfig d;
  for (const char* text : {"", "faults:", "faults: {bottleneck: }", "faults: {bottleneck: {rate_mbps: 0}}"}) {
    const Config c = load_valid(doc(text));
    EXPECT_FALSE(c.faults.bottleneck.enabled()) << text;
    EXPECT_FALSE(c.faults.enabled()) << text;
    EXPECT_EQ(c.faults.bottleneck.buffer_bytes, d.buffer_bytes) << text;
    EXPECT_EQ(c.faults.bottleneck.ecn_kmax_bytes, 0u) << text;  // no marking
  }
  // A step (kmin == kmax) and a queue that marks nothing (the defaults) are both valid.
  EXPECT_TRUE(load_config(doc("faults: {bottleneck: {rate_mbps: 1, ecn_kmin_bytes: 9000, ecn_kmax_bytes: 9000}}"))
                  .config.has_value());
  EXPECT_TRUE(load_config(doc("faults: {bottleneck: {rate_mbps: 1000000}}")).config.has_value());
}

TEST(Config, EnumSpellings) {
  EXPECT_EQ(load_valid(doc("eal: {hugepages: on}")).eal.hugepages, HugePages::kOn);
  EXPECT_EQ(load_valid(doc("eal: {hugepages: auto}")).eal.hugepages, HugePages::kAuto);
  EXPECT_EQ(load_valid(doc("engine: {idle: busy_poll}")).engine.idle, IdlePolicy::kBusyPoll);
}

TEST(Config, NullSectionsAndNullMacKeepDefaults) {
  // A section whose keys are all commented out is null in YAML.
  const Config c = load_valid(doc("eal:\nengine:\nrdma:\nfaults:\ncapture:\n", "mac: ~"));
  EXPECT_EQ(c.eal.lcores, (std::vector<unsigned>{0}));
  EXPECT_EQ(c.rdma.path_mtu, 1024);
  EXPECT_FALSE(c.ports[0].mac.has_value());
}

TEST(Config, HexAndSignedIntegers) {
  EXPECT_EQ(load_valid(doc("rdma: {udp_source_port_base: 0xC001}")).rdma.udp_source_port_base, 0xC001);
  EXPECT_EQ(load_valid(doc("rdma: {retry_count: +3}")).rdma.retry_count, 3);
  EXPECT_EQ(load_valid(doc("faults: {seed: 18446744073709551615}")).faults.seed, UINT64_MAX);
}

// ---- lcores ----

struct LcoreCase {
  std::string yaml;
  std::vector<unsigned> expected;
};

class LcoreForms : public ::testing::TestWithParam<LcoreCase> {};

TEST_P(LcoreForms, Parse) {
  EXPECT_EQ(load_valid(doc("eal: {lcores: " + GetParam().yaml + "}")).eal.lcores, GetParam().expected);
}

TEST(Config, LcoresAutoLeavesTheFirstAllowedCpuToTheApplication) {
  EXPECT_EQ(auto_engine_lcores({}), (std::vector<unsigned>{0}));
  EXPECT_EQ(auto_engine_lcores({3}), (std::vector<unsigned>{3}));  // one CPU: the engine shares it
  EXPECT_EQ(auto_engine_lcores({0, 1}), (std::vector<unsigned>{1}));
  EXPECT_EQ(auto_engine_lcores({2, 5, 7}), (std::vector<unsigned>{5, 7}));
  EXPECT_EQ(auto_engine_lcores({0, 1, 2, 3, 4, 5, 6, 7}), (std::vector<unsigned>{6, 7}));  // kAutoMaxEngines
  EXPECT_EQ(load_valid(doc("eal: {lcores: auto}")).eal.lcores, auto_engine_lcores(process_allowed_cpus()));
}

INSTANTIATE_TEST_SUITE_P(Config, LcoreForms,
                         ::testing::Values(LcoreCase{"0-1", {0, 1}}, LcoreCase{"'0,2'", {0, 2}}, LcoreCase{"3", {3}},
                                           LcoreCase{"'0-2,5'", {0, 1, 2, 5}}, LcoreCase{"'4, 1-2'", {4, 1, 2}},
                                           LcoreCase{"'127'", {127}}, LcoreCase{"[2, 0]", {2, 0}},
                                           LcoreCase{"[7]", {7}}));

// ---- addresses and MACs ----

TEST(Config, Ipv4AddressWithAndWithoutPrefix) {
  const Config c = load_valid("ports: [{name: a, device: net_null0, addresses: [198.18.0.1/24, 198.19.255.254]}]");
  const auto& a = c.ports[0].addresses;
  ASSERT_EQ(a.size(), 2u);
  EXPECT_FALSE(a[0].is_v6);
  EXPECT_EQ(a[0].prefix_length, 24);
  EXPECT_EQ(a[0].bytes, (std::array<uint8_t, 16>{198, 18, 0, 1}));
  EXPECT_EQ(a[1].prefix_length, 32);
  EXPECT_EQ(a[1].bytes, (std::array<uint8_t, 16>{198, 19, 255, 254}));
}

TEST(Config, Ipv6AddressWithAndWithoutPrefixInABlockList) {
  const Config c = load_valid(R"(
ports:
  - name: p0
    device: net_null0
    addresses:
      - fd00::1/64
      - fd00:18::ff
      - ::ffff:198.18.0.9/96
)");
  const auto& a = c.ports[0].addresses;
  ASSERT_EQ(a.size(), 3u);
  EXPECT_TRUE(a[0].is_v6);
  EXPECT_EQ(a[0].prefix_length, 64);
  EXPECT_EQ(a[0].bytes, (std::array<uint8_t, 16>{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(a[1].prefix_length, 128);
  EXPECT_EQ(a[1].bytes, (std::array<uint8_t, 16>{0xfd, 0, 0, 0x18, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff}));
  EXPECT_EQ(a[2].prefix_length, 96);
}

TEST(Config, MacIsParsedInEitherCase) {
  EXPECT_EQ(load_valid(doc("", "mac: '02:00:00:00:00:01'")).ports[0].mac, (MacAddress{2, 0, 0, 0, 0, 1}));
  EXPECT_EQ(load_valid(doc("", "mac: '02:AB:cd:00:Ff:10'")).ports[0].mac,
            (MacAddress{0x02, 0xab, 0xcd, 0x00, 0xff, 0x10}));
}

TEST(Config, DeviceForms) {
  for (const char* device : {"net_null0", "'net_memif0,role=server,socket=/run/x.sock,socket-abstract=no'",
                             "'0000:3b:00.0'", "'3b:00.1'", "'0000:af:1f.7,txq_inline_max=128'"}) {
    const Config c =
        load_valid("ports:\n  - {name: p, device: " + std::string(device) + ", addresses: [198.18.0.1]}\n");
    EXPECT_FALSE(c.ports.empty()) << device;
  }
}

TEST(Config, RingLinkJoinsTwoPorts) {
  const Config c = load_valid(R"(
ports:
  - {name: a, device: ring:x, addresses: [198.18.0.1/24]}
  - {name: b, device: ring:x, addresses: [198.18.0.2/24]}
  - {name: c, device: ring:y-2, addresses: [198.18.1.1/24]}
  - {name: d, device: ring:y-2, addresses: [198.18.1.2/24]}
engine: {mbufs_per_engine: 32767}  # four ports' descriptors
)");
  EXPECT_EQ(c.ports.size(), 4u);
}

// ---- One rule, one error ----

struct RuleCase {
  std::string name;
  std::string yaml;
  std::string key;
  std::string message;  // a substring of the message; it includes the value seen
};

// NOLINTNEXTLINE(readability-identifier-naming): gtest looks for this name
void PrintTo(const RuleCase& c, std::ostream* os) { *os << c.name; }

class Rule : public ::testing::TestWithParam<RuleCase> {};

TEST_P(Rule, GivesExactlyItsError) {
  const LoadResult result = load_config(GetParam().yaml);
  EXPECT_FALSE(result.config.has_value());
  EXPECT_THAT(result.errors, ElementsAre(is_error(GetParam().key, GetParam().message))) << GetParam().yaml;
}

std::string one_port(std::string_view body) { return "ports:\n  - {" + std::string(body) + "}\n"; }

std::vector<RuleCase> rule_cases() {
  return {
      // Keys and types.
      {"UnknownTopLevelKey", doc("portz: 1"), "portz", "unknown key 'portz'; did you mean 'ports'?"},
      {"UnknownPortKey", doc("", "mtuu: 1500"), "ports[0].mtuu", "unknown key 'mtuu'; did you mean 'mtu'?"},
      {"UnknownKeyCaseSuggestion", doc("engine: {RX_BURST: 1}"), "engine.RX_BURST", "did you mean 'rx_burst'?"},
      {"DuplicateKey", doc("", "mtu: 1500, mtu: 9000"), "ports[0].mtu", "duplicate key 'mtu'"},
      {"NotAnInteger", doc("", "mtu: abc"), "ports[0].mtu", "must be an integer, got 'abc'"},
      {"IntegerGivenList", doc("engine: {rx_burst: [1]}"), "engine.rx_burst", "must be an integer, got a list"},
      {"IntegerGivenNothing", doc("engine: {rx_burst: }"), "engine.rx_burst", "must be an integer, got nothing"},
      {"FractionIsNotInteger", doc("engine: {rx_burst: 1.5}"), "engine.rx_burst", "must be an integer, got '1.5'"},
      {"SectionNotMap", doc("eal: 5"), "eal", "must be a map of keys, got '5'"},
      {"DocumentNotMap", "- a\n- b\n", "<document>", "must be a map of keys, got a list"},
      {"MultipleDocuments", doc("") + "---\n" + doc(""), "<yaml>", "must hold one YAML document, got 2"},
      // Integer ranges: no silent truncation into narrow fields.
      {"MtuTooLarge", doc("", "mtu: 99999"), "ports[0].mtu", "must be between 576 and 9216, got 99999"},
      {"MtuTooSmall", doc("", "mtu: 575"), "ports[0].mtu", "must be between 576 and 9216, got 575"},
      {"BurstAboveEngineArrays", doc("engine: {tx_burst: 65}"), "engine.tx_burst", "must be between 1 and 64, got 65"},
      {"TooManyEngines", doc("eal: {lcores: '0-16'}"), "eal.lcores", "names 17 lcores; at most 16 engines"},
      {"Uint16Overflow", doc("rdma: {ack_request_interval: 65536}"), "rdma.ack_request_interval",
       "must be between 1 and 65535, got 65536"},
      {"Uint16OverflowSourcePort", doc("rdma: {udp_source_port_base: 70000}"), "rdma.udp_source_port_base",
       "must be between 49152 and 65535, got 70000"},
      {"Uint64Overflow", doc("faults: {seed: 18446744073709551616}"), "faults.seed",
       "must be between 0 and 18446744073709551615, got 18446744073709551616"},
      {"Negative", doc("rdma: {retry_count: -1}"), "rdma.retry_count", "must be between 0 and 7, got -1"},
      {"RxDescriptors", doc("", "rx_descriptors: 70000"), "ports[0].rx_descriptors",
       "must be between 64 and 32768, got 70000"},
      {"TxDescriptors", doc("", "tx_descriptors: 32"), "ports[0].tx_descriptors",
       "must be between 64 and 32768, got 32"},
      // Ports.
      {"NoPorts", "ports: []\n", "ports", "at least one port is required, got none"},
      {"PortsMissing", "eal: {lcores: [0]}\n", "ports", "at least one port is required"},
      {"EmptyText", "", "ports", "at least one port is required"},
      {"PortsNotList", "ports: {name: a}\n", "ports", "must be a list of ports, got a map"},
      {"PortNotMap", "ports: [a]\n", "ports[0]", "must be a map of keys, got 'a'"},
      {"DuplicatePortName", R"(
ports:
  - {name: p0, device: net_null0, addresses: [198.18.0.1/24]}
  - {name: p0, device: net_null1, addresses: [198.18.0.2/24]}
)",
       "ports[1].name", "'p0' is already used by ports[0]"},
      {"EmptyPortName", one_port("name: '', device: net_null0, addresses: [198.18.0.1]"), "ports[0].name",
       "must not be empty, got ''"},
      {"MissingPortName", one_port("device: net_null0, addresses: [198.18.0.1]"), "ports[0].name", "is required"},
      {"MissingDevice", one_port("name: a, addresses: [198.18.0.1]"), "ports[0].device", "is required"},
      {"UnknownDeviceForm", one_port("name: a, device: eth0, addresses: [198.18.0.1]"), "ports[0].device",
       "must be a DPDK vdev 'net_<driver><n>[,args]', a PCI address like 0000:3b:00.0 or 3b:00.0, or "
       "'ring:<link>', "
       "got 'eth0'"},
      {"BareNetPrefix", one_port("name: a, device: 'net_,x=1', addresses: [198.18.0.1]"), "ports[0].device",
       "got 'net_,x=1'"},
      {"BadPciFunction", one_port("name: a, device: '0000:3b:00.8', addresses: [198.18.0.1]"), "ports[0].device",
       "got '0000:3b:00.8'"},
      {"ShortPciDomain", one_port("name: a, device: '00:3b:00.0', addresses: [198.18.0.1]"), "ports[0].device",
       "got '00:3b:00.0'"},
      {"EmptyRingLink", one_port("name: a, device: 'ring:', addresses: [198.18.0.1]"), "ports[0].device",
       "got 'ring:'"},
      {"SteeringUnknown", doc("", "steering: flow"), "ports[0].steering",
       "must be one of auto, rte_flow, rss, got 'flow'"},
      {"SteeringRteFlowOnARingLink", R"(
ports:
  - {name: a, device: ring:x, addresses: [198.18.0.1], steering: rte_flow}
  - {name: b, device: ring:x, addresses: [198.18.0.2]}
)",
       "ports[0].steering", "must be auto or rss on a ring link ('ring:x'): net_ring has no rte_flow"},
      {"RingLinkWithOnePort", one_port("name: a, device: ring:x, addresses: [198.18.0.1]"), "ports[0].device",
       "ring link 'x' must be named by exactly two ports (its two ends), got 1 (ports[0])"},
      {"RingLinkWithThreePorts", R"(
ports:
  - {name: a, device: ring:x, addresses: [198.18.0.1]}
  - {name: b, device: ring:x, addresses: [198.18.0.2]}
  - {name: c, device: ring:x, addresses: [198.18.0.3]}
)",
       "ports[0].device",
       "ring link 'x' must be named by exactly two ports (its two ends), got 3 (ports[0], ports[1], "
       "ports[2])"},
      {"NoAddresses", one_port("name: a, device: net_null0, addresses: []"), "ports[0].addresses",
       "must list at least one IP address (RoCEv2 runs over UDP/IP), got none"},
      {"AddressesMissing", one_port("name: a, device: net_null0"), "ports[0].addresses",
       "must list at least one IP address"},
      {"DuplicateAddressAcrossPorts", R"(
ports:
  - {name: a, device: net_null0, addresses: [198.18.0.1/24]}
  - {name: b, device: net_null1, addresses: [198.18.0.1/16]}
)",
       "ports[1].addresses[0]", "198.18.0.1 is already used by ports[0].addresses[0]"},
      {"DuplicateIpv6WrittenDifferently", R"(
ports:
  - {name: a, device: net_null0, addresses: ["fd00::1/64"]}
  - {name: b, device: net_null1, addresses: ["198.18.0.2", "fd00:0:0::1"]}
)",
       "ports[1].addresses[1]", "fd00::1 is already used by ports[0].addresses[0]"},
      {"BadIpv4", one_port("name: a, device: net_null0, addresses: [198.18.0.1/24, 198.18.0.300/24]"),
       "ports[0].addresses[1]", "got '198.18.0.300/24'"},
      {"Ipv4PrefixTooLong", one_port("name: a, device: net_null0, addresses: [198.18.0.1/33]"), "ports[0].addresses[0]",
       "must be an IPv4 or IPv6 address with an optional prefix length (at most 32 or 128), like 198.18.0.1/24 or "
       "fd00::1/64, got '198.18.0.1/33'"},
      {"Ipv6PrefixTooLong", one_port("name: a, device: net_null0, addresses: ['fd00::1/129']"), "ports[0].addresses[0]",
       "got 'fd00::1/129'"},
      {"PrefixNotNumber", one_port("name: a, device: net_null0, addresses: [198.18.0.1/x]"), "ports[0].addresses[0]",
       "got '198.18.0.1/x'"},
      {"EmptyPrefix", one_port("name: a, device: net_null0, addresses: [198.18.0.1/]"), "ports[0].addresses[0]",
       "got '198.18.0.1/'"},
      {"AddressesNotList", one_port("name: a, device: net_null0, addresses: 198.18.0.1/24"), "ports[0].addresses",
       "must be a list of IP addresses like 198.18.0.1/24 or fd00::1/64, got '198.18.0.1/24'"},
      {"MacTooShort", doc("", "mac: '02:00:00:00:00'"), "ports[0].mac",
       "must be a MAC address like 02:00:00:00:00:01, got '02:00:00:00:00'"},
      {"MacNotHex", doc("", "mac: '02:00:00:00:00:zz'"), "ports[0].mac", "got '02:00:00:00:00:zz'"},
      {"MacWrongSeparator", doc("", "mac: '02-00-00-00-00-01'"), "ports[0].mac", "got '02-00-00-00-00-01'"},
      {"MacTooLong", doc("", "mac: '02:00:00:00:00:01:'"), "ports[0].mac", "got '02:00:00:00:00:01:'"},
      {"MacMulticast", doc("", "mac: '01:00:5e:00:00:01'"), "ports[0].mac",
       "must be a unicast MAC address (first octet even, not all zero), got '01:00:5e:00:00:01'"},
      {"MacZero", doc("", "mac: '00:00:00:00:00:00'"), "ports[0].mac", "must be a unicast MAC address"},
      // eal.
      {"LcoresEmpty", doc("eal: {lcores: []}"), "eal.lcores",
       "must name at least one lcore (one engine runs on each), "
       "got an empty list"},
      {"LcoresNull", doc("eal: {lcores: ~}"), "eal.lcores",
       "must name at least one lcore (one engine runs on each), "
       "got nothing"},
      {"LcoresDuplicate", doc("eal: {lcores: [0, 1, 0]}"), "eal.lcores[2]", "lcore 0 is listed twice"},
      {"LcoreTooLarge", doc("eal: {lcores: [0, 128]}"), "eal.lcores[1]", "must be between 0 and 127, got 128"},
      {"LcoreNotInteger", doc("eal: {lcores: [x]}"), "eal.lcores[0]", "must be an integer, got 'x'"},
      {"LcoreStringTooLarge", doc("eal: {lcores: '0-200'}"), "eal.lcores",
       "lcore ids must be between 0 and 127, got '0-200'"},
      {"LcoreStringHuge", doc("eal: {lcores: '0-99999999999999999999999'}"), "eal.lcores",
       "lcore ids must be between 0 and 127, got '0-99999999999999999999999'"},
      {"LcoreStringSingleTooLarge", doc("eal: {lcores: '200'}"), "eal.lcores",
       "lcore ids must be between 0 and 127, got '200'"},
      {"LcoreStringDuplicate", doc("eal: {lcores: '0-2,1'}"), "eal.lcores", "lcore 1 is listed twice, got '0-2,1'"},
      {"LcoreStringSyntax", doc("eal: {lcores: '0-x'}"), "eal.lcores",
       "must be 'auto', a list of lcore ids or a string like '0-3,8', got '0-x'"},
      {"LcoreStringReversed", doc("eal: {lcores: '3-1'}"), "eal.lcores", "got '3-1'"},
      {"LcoreStringNegative", doc("eal: {lcores: '-1'}"), "eal.lcores", "got '-1'"},
      {"LcoreStringTrailingComma", doc("eal: {lcores: '0,'}"), "eal.lcores", "got '0,'"},
      {"LcoresMap", doc("eal: {lcores: {a: 1}}"), "eal.lcores", "got a map"},
      {"Hugepages", doc("eal: {hugepages: maybe}"), "eal.hugepages", "must be one of auto, on, off, got 'maybe'"},
      {"MemoryMb", doc("eal: {memory_mb: 10}"), "eal.memory_mb", "must be between 64 and 1048576, got 10"},
      {"FilePrefixSlash", doc("eal: {file_prefix: a/b}"), "eal.file_prefix",
       "must be a plain name (no '/' or spaces), got 'a/b'"},
      {"ExtraArgsNotList", doc("eal: {extra_args: --foo}"), "eal.extra_args", "must be a list of strings, got '--foo'"},
      {"ExtraArgNotString", doc("eal: {extra_args: [[a]]}"), "eal.extra_args[0]", "must be a string, got a list"},
      // engine.
      {"Idle", doc("engine: {idle: spin}"), "engine.idle", "must be one of busy_poll, backoff, got 'spin'"},
      {"RxBurstZero", doc("engine: {rx_burst: 0}"), "engine.rx_burst", "must be between 1 and 64, got 0"},
      {"MbufsBelowTwiceDescriptors", doc("engine: {mbufs_per_engine: 4095}"), "engine.mbufs_per_engine",
       "must be at least 2 x the descriptors of all ports (2 x 2048 = 4096), got 4095"},
      {"MbufsCountEveryPort", R"(
engine: {mbufs_per_engine: 8000}
ports:
  - {name: a, device: net_null0, addresses: [198.18.0.1]}
  - {name: b, device: net_null1, addresses: [198.18.0.2]}
)",
       "engine.mbufs_per_engine", "(2 x 4096 = 8192), got 8000"},
      {"MbufCacheTooLarge", doc("engine: {mbuf_cache: 513}"), "engine.mbuf_cache",
       "must be between 0 and 512, got 513"},
      {"MbufCacheAbovePoolLimit",
       doc("engine: {mbufs_per_engine: 300, mbuf_cache: 256}", "rx_descriptors: 64, tx_descriptors: 64"),
       "engine.mbuf_cache", "must be at most engine.mbufs_per_engine / 1.5 = 200, got 256"},
      {"MbufDataRoomBelowLargestMtu", R"(
ports:
  - {name: a, device: net_null0, addresses: [198.18.0.1], mtu: 1500}
  - {name: b, device: net_null1, addresses: [198.18.0.2], mtu: 9000}
)",
       "engine.mbuf_data_room",
       "must be at least the largest port mtu + 146 (Ethernet + VLAN header + 128 headroom) = 9146, got 4352 (the "
       "default)"},
      {"MbufDataRoomExplicit", doc("engine: {mbuf_data_room: 1645}"), "engine.mbuf_data_room", "= 1646, got 1645"},
      {"MbufDataRoomOverflow", doc("engine: {mbuf_data_room: 65536}"), "engine.mbuf_data_room",
       "must be between 0 and 65535, got 65536"},
      {"RedirectRingNotPowerOfTwo", doc("engine: {redirect_ring_size: 100}"), "engine.redirect_ring_size",
       "must be a power of two between 64 and 1073741824, got 100"},
      {"RedirectRingTooSmall", doc("engine: {redirect_ring_size: 32}"), "engine.redirect_ring_size", "got 32"},
      {"RedirectRingTooLarge", doc("engine: {redirect_ring_size: 2147483648}"), "engine.redirect_ring_size",
       "got 2147483648"},
      {"MaxQpsOne", doc("engine: {max_qps_per_engine: 1}"), "engine.max_qps_per_engine",
       "must be between 2 and 1048575, got 1"},
      {"TxBacklogZero", doc("engine: {tx_backlog: 0}"), "engine.tx_backlog", "must be between 1 and 1048576, got 0"},
      {"ZeroCopyThresholdTooSmall", doc("engine: {zero_copy_threshold: 63}"), "engine.zero_copy_threshold",
       "must be 0 (off) or between 64 and 4096 bytes of payload, got 63"},
      {"ZeroCopyThresholdTooLarge", doc("engine: {zero_copy_threshold: 4097}"), "engine.zero_copy_threshold",
       "must be 0 (off) or between 64 and 4096 bytes of payload, got 4097"},
      // rdma.
      {"PathMtu", doc("rdma: {path_mtu: 1000}"), "rdma.path_mtu",
       "must be one of 256, 512, 1024, 2048, 4096 (an IB MTU), got 1000"},
      {"PathMtuNotInteger", doc("rdma: {path_mtu: big}"), "rdma.path_mtu", "must be an integer, got 'big'"},
      {"PortMtuBelowPathMtu", doc("rdma: {path_mtu: 4096}"), "ports[0].mtu",
       "must be at least rdma.path_mtu + 80 = 4176 (rxe's rule: room for the RoCE headers around a full PMTU "
       "payload), got 1500 (the default)"},
      {"PortMtuJustBelowPathMtu", doc("rdma: {path_mtu: 2048}", "mtu: 2127"), "ports[0].mtu", "= 2128 (rxe's rule"},
      {"AckTimeout", doc("rdma: {ack_timeout: 32}"), "rdma.ack_timeout", "must be between 0 and 31, got 32"},
      {"RetryCount", doc("rdma: {retry_count: 8}"), "rdma.retry_count", "must be between 0 and 7, got 8"},
      {"RnrRetry", doc("rdma: {rnr_retry: 8}"), "rdma.rnr_retry", "must be between 0 and 7, got 8"},
      {"MinRnrTimer", doc("rdma: {min_rnr_timer: 32}"), "rdma.min_rnr_timer", "must be between 0 and 31, got 32"},
      {"MaxRdAtomicZero", doc("rdma: {max_rd_atomic: 0}"), "rdma.max_rd_atomic", "must be between 1 and 255, got 0"},
      {"MaxRdAtomicOverflow", doc("rdma: {max_rd_atomic: 256}"), "rdma.max_rd_atomic",
       "must be between 1 and 255, got 256"},
      {"MaxDestRdAtomic", doc("rdma: {max_dest_rd_atomic: 0}"), "rdma.max_dest_rd_atomic",
       "must be between 1 and 255, got 0"},
      {"AckRequestIntervalZero", doc("rdma: {ack_request_interval: 0}"), "rdma.ack_request_interval",
       "must be between 1 and 65535, got 0"},
      {"UdpSourcePortBelowRange", doc("rdma: {udp_source_port_base: 0xBFFF}"), "rdma.udp_source_port_base",
       "must be between 49152 and 65535, got 0xBFFF"},
      // congestion.
      {"CongestionEcnNotBoolean", doc("congestion: {ecn: maybe}"), "congestion.ecn",
       "must be true or false, got 'maybe'"},
      {"CongestionInFlightBelowOnePacket", doc("congestion: {max_bytes_in_flight: 100}"),
       "congestion.max_bytes_in_flight", "must be 0 (no cap) or at least 256 bytes"},
      {"CongestionCnpDscp", doc("congestion: {notification_point: {cnp_dscp: 64}}"),
       "congestion.notification_point.cnp_dscp", "must be between 0 and 63, got 64"},
      {"CongestionUnknownKey", doc("congestion: {reaction_point: {rpg_ai_rate: 5}}"),
       "congestion.reaction_point.rpg_ai_rate", "unknown key 'rpg_ai_rate'"},
      {"CongestionMinDecFacZero", doc("congestion: {reaction_point: {min_dec_fac: 0}}"),
       "congestion.reaction_point.min_dec_fac", "must be between 1 and 100, got 0"},
      {"CongestionGainAbove1024", doc("congestion: {reaction_point: {dce_tcp_g: 1025}}"),
       "congestion.reaction_point.dce_tcp_g", "must be between 0 and 1024, got 1025"},
      {"CongestionMinRateAboveMax", doc("congestion: {reaction_point: {max_rate_mbps: 1000, min_rate_mbps: 2000}}"),
       "congestion.reaction_point.min_rate_mbps", "must not exceed max_rate_mbps (1000), got 2000"},
      // faults and capture.
      {"FaultAboveOne", doc("faults: {loss: 1.5}"), "faults.loss", "must be between 0 and 1, got 1.5"},
      {"FaultNegative", doc("faults: {corrupt: -0.1}"), "faults.corrupt", "must be between 0 and 1, got -0.1"},
      {"FaultNaN", doc("faults: {reorder: nan}"), "faults.reorder", "must be between 0 and 1, got nan"},
      {"FaultNotNumber", doc("faults: {duplicate: often}"), "faults.duplicate", "must be a number, got 'often'"},
      {"FaultSumAboveOne", doc("faults: {loss: 0.6, reorder: 0.6}"), "faults",
       "loss + reorder + duplicate + corrupt must be at most 1 (one fault per packet), got 1.2"},
      {"BottleneckWithoutRate", doc("faults: {bottleneck: {buffer_bytes: 100000}}"), "faults.bottleneck.rate_mbps",
       "must be greater than 0 when faults.bottleneck sets other keys (0, the default, is off), got 0"},
      {"BottleneckRateZeroWithThresholds", doc("faults: {bottleneck: {rate_mbps: 0, ecn_kmax_bytes: 9000}}"),
       "faults.bottleneck.rate_mbps", "must be greater than 0 when faults.bottleneck sets other keys"},
      {"BottleneckRateTooHigh", doc("faults: {bottleneck: {rate_mbps: 1000001}}"), "faults.bottleneck.rate_mbps",
       "must be between 0 and 1000000, got 1000001"},
      {"BottleneckRateNotInteger", doc("faults: {bottleneck: {rate_mbps: fast}}"), "faults.bottleneck.rate_mbps",
       "must be an integer, got 'fast'"},
      {"BottleneckBufferZero", doc("faults: {bottleneck: {rate_mbps: 100, buffer_bytes: 0}}"),
       "faults.bottleneck.buffer_bytes", "must be between 1 and 67108864, got 0"},
      {"BottleneckBufferTooLarge", doc("faults: {bottleneck: {rate_mbps: 100, buffer_bytes: 67108865}}"),
       "faults.bottleneck.buffer_bytes", "must be between 1 and 67108864, got 67108865"},
      {"BottleneckBufferBelowOneFrame", doc("faults: {bottleneck: {rate_mbps: 100, buffer_bytes: 1517}}"),
       "faults.bottleneck.buffer_bytes",
       "must hold one frame of the largest port mtu + 18 (Ethernet + VLAN header) = 1518, got 1517"},
      {"BottleneckKminAboveKmax",
       doc("faults: {bottleneck: {rate_mbps: 100, ecn_kmin_bytes: 20000, ecn_kmax_bytes: 10000}}"),
       "faults.bottleneck.ecn_kmin_bytes",
       "must be at most faults.bottleneck.ecn_kmax_bytes (0: no marking) = 10000, got 20000"},
      {"BottleneckKminWithoutKmax", doc("faults: {bottleneck: {rate_mbps: 100, ecn_kmin_bytes: 20000}}"),
       "faults.bottleneck.ecn_kmin_bytes", "(0: no marking) = 0 (the default), got 20000"},
      {"BottleneckKmaxAboveBuffer",
       doc("faults: {bottleneck: {rate_mbps: 100, buffer_bytes: 100000, ecn_kmax_bytes: 100001}}"),
       "faults.bottleneck.ecn_kmax_bytes",
       "must be at most faults.bottleneck.buffer_bytes (the deepest the queue gets) = 100000, got 100001"},
      {"BottleneckKmaxAboveDefaultBuffer", doc("faults: {bottleneck: {rate_mbps: 100, ecn_kmax_bytes: 300000}}"),
       "faults.bottleneck.ecn_kmax_bytes", "gets) = 262144 (the default), got 300000"},
      {"BottleneckPmaxAboveOne", doc("faults: {bottleneck: {rate_mbps: 100, ecn_pmax: 1.5}}"),
       "faults.bottleneck.ecn_pmax", "must be between 0 and 1, got 1.5"},
      {"BottleneckPmaxNegative", doc("faults: {bottleneck: {rate_mbps: 100, ecn_pmax: -0.5}}"),
       "faults.bottleneck.ecn_pmax", "must be between 0 and 1, got -0.5"},
      {"BottleneckUnknownKey", doc("faults: {bottleneck: {rate_mbps: 100, buffer: 9000}}"), "faults.bottleneck.buffer",
       "unknown key 'buffer'"},
      {"BottleneckNotAMap", doc("faults: {bottleneck: 100}"), "faults.bottleneck", "must be a map of keys"},
      {"SnapLength", doc("capture: {snap_length: 10}"), "capture.snap_length", "must be between 64 and 262144, got 10"},
      {"PcapngPathNotString", doc("capture: {pcapng_path: [a]}"), "capture.pcapng_path",
       "must be a string, got a list"},
  };
}

INSTANTIATE_TEST_SUITE_P(Config, Rule, ::testing::ValuesIn(rule_cases()),
                         [](const ::testing::TestParamInfo<RuleCase>& info) { return info.param.name; });

TEST(Config, UnknownKeyFarFromEveryKnownKeyHasNoSuggestion) {
  const LoadResult result = load_config(doc("engine: {frobnicate: 1}"));
  ASSERT_THAT(result.errors, ElementsAre(is_error("engine.frobnicate", "unknown key 'frobnicate'")));
  EXPECT_THAT(result.errors[0].message, Not(HasSubstr("did you mean")));
}

TEST(Config, CollectsEveryErrorInOneRun) {
  const LoadResult result = load_config(R"(
eal:
  lcores: []
  hugepage: on
engine:
  rx_burst: 0
ports:
  - {name: a, device: eth0, addresses: [198.18.0.1], mtu: abc}
  - {name: a, device: net_null0, addresses: [198.18.0.1]}
)");
  EXPECT_FALSE(result.config.has_value());
  EXPECT_THAT(result.errors,
              ElementsAre(is_error("eal.lcores", "must name at least one lcore"),
                          is_error("eal.hugepage", "did you mean 'hugepages'?"), is_error("engine.rx_burst", "got 0"),
                          is_error("ports[0].device", "got 'eth0'"), is_error("ports[0].mtu", "got 'abc'"),
                          is_error("ports[1].name", "already used by ports[0]"),
                          is_error("ports[1].addresses[0]", "198.18.0.1 is already used by ports[0].addresses[0]")));
}

TEST(Config, RulesAcrossKeysSkipValuesThatFailedToParse) {
  // mtu stays at its default 1500 after "abc" is rejected; comparing that against path_mtu 4096 would report a
  // second error about a value the user never wrote.
  const LoadResult result = load_config(doc("rdma: {path_mtu: 4096}", "mtu: abc"));
  EXPECT_THAT(result.errors, ElementsAre(is_error("ports[0].mtu", "must be an integer, got 'abc'")));
}

TEST(Config, CrossKeyErrorsSayWhenTheValueIsTheDefault) {
  const LoadResult given = load_config(doc("rdma: {path_mtu: 2048}", "mtu: 2127"));
  ASSERT_EQ(given.errors.size(), 1u);
  EXPECT_THAT(given.errors[0].message, ::testing::EndsWith("payload), got 2127"));
  const LoadResult defaulted = load_config(doc("rdma: {path_mtu: 2048}"));
  ASSERT_EQ(defaulted.errors.size(), 1u);
  EXPECT_THAT(defaulted.errors[0].message, ::testing::EndsWith("payload), got 1500 (the default)"));
}

TEST(Config, SyntaxErrorNamesLineAndColumn) {
  const LoadResult result = load_config("eal:\n  lcores: [0, 1]\nports: [\n  {name: a\n");
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].key, "<yaml>");
  EXPECT_THAT(result.errors[0].message, MatchesRegex("line [0-9]+, column [0-9]+: .+"));

  const LoadResult tab = load_config("eal:\n  lcores: [0]\n\tmemory_mb: 5\n");
  ASSERT_EQ(tab.errors.size(), 1u);
  EXPECT_EQ(tab.errors[0].key, "<yaml>");
  EXPECT_THAT(tab.errors[0].message, HasSubstr("line 3, column "));
}

TEST(Config, HostileInputsBecomeErrorsNotExceptions) {
  for (const char* text : {"*", "&a [*a, *b]", "!!binary zz", "{", "]", "key: [1, 2", "\xff\xfe\x00", "? [a]\n: b\n",
                           "ports: !!map {}", "ports:\n  - &p {name: a}\n  - *p\n", "'unterminated"}) {
    LoadResult result;
    EXPECT_NO_THROW(result = load_config(text)) << text;
    EXPECT_FALSE(result.config.has_value()) << text;
    EXPECT_THAT(result.errors, Not(IsEmpty())) << text;
  }
}

TEST(Config, NonScalarKeyIsAnError) {
  const LoadResult result = load_config(doc("? [a]\n: 1\n"));
  EXPECT_THAT(result.errors, ElementsAre(is_error("<document>", "keys must be plain names, got a list")));
}

// ---- Files, the embedded default and the examples ----

TEST(Config, EmbeddedDefaultIsValidAndIsTheDemoSetup) {
  const Config c = load_valid(embedded_default_yaml());
  EXPECT_EQ(c.eal.lcores, auto_engine_lcores(process_allowed_cpus()));
  EXPECT_EQ(c.eal.hugepages, HugePages::kAuto);
  EXPECT_EQ(c.eal.memory_mb, 1024u);
  ASSERT_EQ(c.ports.size(), 2u);
  EXPECT_EQ(c.ports[0].name, "a");
  EXPECT_EQ(c.ports[1].name, "b");
  EXPECT_EQ(c.ports[0].device, "ring:link0");
  EXPECT_EQ(c.ports[1].device, "ring:link0");
  EXPECT_EQ(c.ports[0].mtu, 4200);
  EXPECT_EQ(c.rdma.path_mtu, 4096);
  EXPECT_EQ(c.engine.idle, IdlePolicy::kBackoff);
  EXPECT_FALSE(c.faults.enabled());
}

TEST(Config, EmbeddedDefaultIsDefaultYaml) {
  const std::string on_disk = read_file(config_dir() / "default.yaml");
  ASSERT_FALSE(on_disk.empty()) << "set UROCE_CONFIG_DIR to the config/ source folder";
  EXPECT_EQ(embedded_default_yaml(), on_disk);
}

TEST(Config, EveryExampleIsValid) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(config_dir() / "examples")) {
    if (entry.path().extension() != ".yaml") continue;
    names.insert(entry.path().filename().string());
    const LoadResult result = load_config_file(entry.path().string());
    EXPECT_THAT(result.errors, IsEmpty()) << result.describe(entry.path().string());
  }
  for (const char* expected : {"memif-two-process-server.yaml", "memif-two-process-client.yaml",
                               "af-packet-rxe-peer.yaml", "connectx.yaml", "e810.yaml"}) {
    EXPECT_TRUE(names.contains(expected)) << expected;
  }
}

// The NIC examples are what docs point operators at: the settings the README promises must be the ones they hold.
TEST(Config, NicExamplesUsePmtu4096OnMtu4200WithRteFlowSteering) {
  for (const char* name : {"connectx.yaml", "e810.yaml"}) {
    const LoadResult result = load_config_file((config_dir() / "examples" / name).string());
    ASSERT_TRUE(result.config) << result.describe(name);
    const Config& c = *result.config;
    EXPECT_EQ(c.rdma.path_mtu, 4096) << name;
    EXPECT_EQ(c.ports[0].mtu, 4200) << name;
    EXPECT_EQ(c.ports[0].steering, Steering::kRteFlow) << name;
    EXPECT_EQ(c.eal.hugepages, HugePages::kOn) << name;
    EXPECT_EQ(c.engine.idle, IdlePolicy::kBusyPoll) << name;
  }
}

TEST(Config, SteeringDefaultsToAutoAndReadsEachMode) {
  EXPECT_EQ(load_valid(doc("")).ports[0].steering, Steering::kAuto);
  EXPECT_EQ(load_valid(doc("", "steering: rte_flow")).ports[0].steering, Steering::kRteFlow);
  EXPECT_EQ(load_valid(doc("", "steering: rss")).ports[0].steering, Steering::kRss);
  EXPECT_EQ(load_valid(doc("", "steering: auto")).ports[0].steering, Steering::kAuto);
}

// ---- The machine check (LoadOptions::machine) ----

LoadResult load_on(std::string_view text, std::vector<unsigned> present, std::vector<unsigned> allowed) {
  // Built in place: GCC 12 at -O2 with ASan+UBSan warns (falsely, -Wmaybe-uninitialized) about assigning or
  // emplacing into the disengaged optional.
  const LoadOptions options{.overrides = {},
                            .only_port = {},
                            .application_sections = {},
                            .machine = Machine{std::move(present), std::move(allowed)}};
  return load_config(text, options);
}

TEST(ConfigMachine, LcoresTheMachineHasAndMayUseLoad) {
  EXPECT_THAT(load_on(doc("eal: {lcores: [1, 2]}"), {0, 1, 2, 3}, {0, 1, 2, 3}).errors, IsEmpty());
  EXPECT_THAT(load_on(doc("eal: {lcores: 2-3}"), {0, 1, 2, 3}, {2, 3}).errors, IsEmpty());
}

TEST(ConfigMachine, AnLcoreThatDoesNotExistIsAnErrorNamingTheMachinesCpus) {
  EXPECT_THAT(load_on(doc("eal: {lcores: 2-5}"), {0, 1}, {0, 1}).errors,
              ElementsAre(is_error("eal.lcores", "engine 0's CPU 2 does not exist: this machine has CPUs 0-1 (lscpu)"),
                          is_error("eal.lcores", "engine 1's CPU 3 does not exist"),
                          is_error("eal.lcores", "engine 2's CPU 4 does not exist"),
                          is_error("eal.lcores", "engine 3's CPU 5 does not exist")));
  EXPECT_THAT(load_on(doc("eal: {lcores: [0, 9]}"), {0, 1, 2, 3, 6, 7}, {0, 1, 2, 3, 6, 7}).errors,
              ElementsAre(is_error("eal.lcores", "engine 1's CPU 9 does not exist: this machine has CPUs 0-3,6-7")));
}

TEST(ConfigMachine, AnLcoreOutsideTheProcesssAffinityIsAnError) {
  EXPECT_THAT(load_on(doc("eal: {lcores: [1, 3]}"), {0, 1, 2, 3}, {0, 1}).errors,
              ElementsAre(is_error("eal.lcores",
                                   "engine 1's CPU 3 is not one this process may run on (0-1: taskset or a cpuset "
                                   "restricts it); name one of those, or use 'auto'")));
}

TEST(ConfigMachine, ALcoresErrorAlreadyReportedIsNotReportedAgain) {
  EXPECT_THAT(load_on(doc("eal: {lcores: [0, 0]}"), {0}, {0}).errors,
              ElementsAre(is_error("eal.lcores[1]", "is listed twice")));
}

TEST(ConfigMachine, ThisMachineHasTheCpusThisProcessMayUse) {
  const Machine machine = Machine::this_machine();
  EXPECT_EQ(machine.allowed_cpus, process_allowed_cpus());
  ASSERT_FALSE(machine.present_cpus.empty());
  for (const unsigned cpu : machine.allowed_cpus) EXPECT_THAT(machine.present_cpus, ::testing::Contains(cpu));
  // So the embedded default, which takes its lcores from this process's CPUs, passes the check here.
  LoadOptions options;
  options.machine = machine;
  EXPECT_THAT(load_config(embedded_default_yaml(), options).errors, IsEmpty());
}

TEST(Config, MemifExamplesArePairedEnds) {
  const LoadResult server = load_config_file((config_dir() / "examples" / "memif-two-process-server.yaml").string());
  const LoadResult client = load_config_file((config_dir() / "examples" / "memif-two-process-client.yaml").string());
  ASSERT_TRUE(server.config && client.config);
  EXPECT_THAT(server.config->ports[0].device, HasSubstr("role=server"));
  EXPECT_THAT(client.config->ports[0].device, HasSubstr("role=client"));
  EXPECT_NE(server.config->eal.file_prefix, client.config->eal.file_prefix);
  EXPECT_NE(server.config->eal.lcores, client.config->eal.lcores);
  EXPECT_NE(server.config->ports[0].mac, client.config->ports[0].mac);
}

TEST(Config, ReadmeTableListsEveryKeyAndEachIsKnown) {
  const std::string readme = read_file(config_dir() / "README.md");
  const std::size_t begin = readme.find("## Keys"), end = readme.find("\n## ", begin + 1);
  ASSERT_NE(begin, std::string::npos);
  std::set<std::string> documented;
  std::istringstream lines(readme.substr(begin, end - begin));
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("| `")) documented.insert(line.substr(3, line.find('`', 3) - 3));
  }
  const std::set<std::string> expected = {"eal.lcores",
                                          "eal.hugepages",
                                          "eal.memory_mb",
                                          "eal.file_prefix",
                                          "eal.extra_args",
                                          "ports",
                                          "ports[i].name",
                                          "ports[i].device",
                                          "ports[i].mac",
                                          "ports[i].addresses",
                                          "ports[i].mtu",
                                          "ports[i].rx_descriptors",
                                          "ports[i].tx_descriptors",
                                          "ports[i].steering",
                                          "engine.idle",
                                          "engine.rx_burst",
                                          "engine.tx_burst",
                                          "engine.mbufs_per_engine",
                                          "engine.mbuf_cache",
                                          "engine.mbuf_data_room",
                                          "engine.redirect_ring_size",
                                          "engine.max_qps_per_engine",
                                          "engine.tx_backlog",
                                          "engine.zero_copy_threshold",
                                          "rdma.path_mtu",
                                          "rdma.ack_timeout",
                                          "rdma.retry_count",
                                          "rdma.rnr_retry",
                                          "rdma.min_rnr_timer",
                                          "rdma.ack_request_interval",
                                          "rdma.max_rd_atomic",
                                          "rdma.max_dest_rd_atomic",
                                          "rdma.udp_source_port_base",
                                          "congestion.max_bytes_in_flight",
                                          "congestion.ecn",
                                          "congestion.notification_point.enabled",
                                          "congestion.notification_point.min_time_between_cnps_us",
                                          "congestion.notification_point.cnp_dscp",
                                          "congestion.reaction_point.enabled",
                                          "congestion.reaction_point.max_rate_mbps",
                                          "congestion.reaction_point.min_rate_mbps",
                                          "congestion.reaction_point.ai_rate_mbps",
                                          "congestion.reaction_point.hai_rate_mbps",
                                          "congestion.reaction_point.time_reset_us",
                                          "congestion.reaction_point.byte_reset",
                                          "congestion.reaction_point.threshold",
                                          "congestion.reaction_point.min_dec_fac",
                                          "congestion.reaction_point.dce_tcp_g",
                                          "congestion.reaction_point.dce_tcp_rtt_us",
                                          "congestion.reaction_point.initial_alpha_value",
                                          "congestion.reaction_point.rate_reduce_monitor_period_us",
                                          "congestion.reaction_point.rate_to_set_on_first_cnp_mbps",
                                          "faults.loss",
                                          "faults.reorder",
                                          "faults.duplicate",
                                          "faults.corrupt",
                                          "faults.seed",
                                          "faults.bottleneck.rate_mbps",
                                          "faults.bottleneck.buffer_bytes",
                                          "faults.bottleneck.ecn_kmin_bytes",
                                          "faults.bottleneck.ecn_kmax_bytes",
                                          "faults.bottleneck.ecn_pmax",
                                          "capture.pcapng_path",
                                          "capture.snap_length"};
  EXPECT_EQ(documented, expected);
  // Each documented key is one the loader knows: giving it a map is a type error at that key, not "unknown key".
  for (const std::string& key : expected) {
    if (key == "ports") continue;
    const std::size_t dot = key.find('.');
    const std::string section = key.substr(0, dot), name = key.substr(dot + 1);
    // "a.b" -> "a: {b: {x: 1}}": a key inside a nested map ("reaction_point.enabled") opens one map per level.
    std::string entry = "{x: 1}";
    for (std::size_t end = name.size(); end != std::string::npos && end != 0;) {
      const std::size_t start = name.rfind('.', end - 1);
      const std::size_t from = start == std::string::npos ? 0 : start + 1;
      entry = name.substr(from, end - from) + ": " + entry;
      if (start == std::string::npos) break;
      entry = "{" + entry + "}";
      end = start;
    }
    const std::string text = section == "ports[i]"
                                 ? one_port("name: a, device: net_null0, addresses: [198.18.0.1], " + entry)
                                 : doc(std::string(section).append(": {").append(entry).append("}"));
    const LoadResult result = load_config(text);
    const std::string error_key = section == "ports[i]" ? "ports[0]." + name : key;
    EXPECT_THAT(result.errors,
                ::testing::Contains(AllOf(Field("key", &ConfigError::key, Eq(error_key)),
                                          Field("message", &ConfigError::message, Not(HasSubstr("unknown key"))))))
        << text;
  }
}

TEST(Config, UnreadableFileIsAFileError) {
  const LoadResult missing = load_config_file("/nonexistent/uroce.yaml");
  EXPECT_THAT(missing.errors,
              ElementsAre(is_error("<file>", "cannot read '/nonexistent/uroce.yaml': No such file or directory")));
  const LoadResult directory = load_config_file(config_dir().string());
  EXPECT_THAT(directory.errors, ElementsAre(is_error("<file>", "Is a directory")));
}

TEST(Config, DescribeWritesOneLinePerError) {
  LoadResult result;
  result.errors = {{"ports[0].mtu", "must be between 576 and 9216, got 99999"}, {"<yaml>", "line 1, column 2: x"}};
  EXPECT_EQ(result.describe("uroce.yaml"),
            "uroce.yaml: ports[0].mtu: must be between 576 and 9216, got 99999\n"
            "uroce.yaml: <yaml>: line 1, column 2: x\n");
  EXPECT_EQ(load_config(doc("")).describe("x"), "");
  EXPECT_EQ(load_config("ports: []").describe("cfg"), "cfg: ports: at least one port is required, got none\n");
}

TEST(ConfigOverride, SetsScalarsListsAndNewKeysAndIsValidatedLikeTheFile) {
  LoadOptions options;
  options.overrides = {{"rdma.path_mtu", "1024"},
                       {"ports[p0].device", "net_af_packet0,iface=uroce0,framesz=4608"},
                       {"ports[0].addresses", "[198.18.0.100/24, fd00::5/64]"},
                       {"faults.loss", "0.25"},  // a section the document does not have
                       {"eal.lcores", "[3]"}};
  const LoadResult result = load_config(doc("rdma: {path_mtu: 4096}"), options);
  ASSERT_THAT(result.errors, IsEmpty());
  const Config& c = *result.config;
  EXPECT_EQ(c.rdma.path_mtu, 1024);
  EXPECT_EQ(c.ports[0].device, "net_af_packet0,iface=uroce0,framesz=4608");
  ASSERT_EQ(c.ports[0].addresses.size(), 2u);
  EXPECT_EQ(c.ports[0].addresses[0].prefix_length, 24);
  EXPECT_TRUE(c.ports[0].addresses[1].is_v6);
  EXPECT_EQ(c.faults.loss, 0.25);
  EXPECT_THAT(c.eal.lcores, ElementsAre(3u));
}

TEST(ConfigOverride, SetsTheBottleneckInsideFaults) {
  LoadOptions options;
  options.overrides = {{"faults.bottleneck.rate_mbps", "100"}, {"faults.bottleneck.ecn_kmax_bytes", "30000"}};
  const LoadResult result = load_config(doc(""), options);
  ASSERT_THAT(result.errors, IsEmpty());
  EXPECT_EQ(result.config->faults.bottleneck.rate_mbps, 100u);
  EXPECT_EQ(result.config->faults.bottleneck.ecn_kmax_bytes, 30000u);
  EXPECT_TRUE(result.config->faults.enabled());
}

TEST(ConfigOverride, BadValuesAreTheLoadersErrorsAtTheirKey) {
  LoadOptions options;
  options.overrides = {{"rdma.path_mtu", "1000"}, {"rdma.ack_timout", "3"}};
  EXPECT_THAT(load_config(doc(""), options).errors,
              ElementsAre(is_error("rdma.path_mtu", "must be one of"), is_error("rdma.ack_timout", "unknown key")));
}

TEST(ConfigOverride, MalformedKeysAreClearErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "is empty"},
      {"rdma.", "ends with '.'"},
      {"rdma..x", "empty name"},
      {"ports[p9].mtu", "'ports' has no element named 'p9' (it has 1)"},
      {"ports[4].mtu", "'ports' has no element '4'"},
      {"ports[0.mtu", "without its ']'"},
      {"rdma[0]", "not a list"},
      {"ports[0]x", "expected '.' or '['"},
      {"rdma.path_mtu.x", "not a map"},
  };
  for (const auto& [key, message] : cases) {
    LoadOptions options;
    options.overrides = {{key, "1"}};
    EXPECT_THAT(load_config(doc("rdma: {path_mtu: 4096}"), options).errors,
                ElementsAre(AllOf(is_error(key, "(override) "), is_error(key, message))))
        << key;
  }
  LoadOptions options;
  options.overrides = {{"rdma.path_mtu", "[1, 2"}};
  EXPECT_THAT(load_config(doc(""), options).errors, ElementsAre(is_error("rdma.path_mtu", "is not YAML")));
}

TEST(ConfigOverride, OnlyPortKeepsTheNamedPortAfterTheOverrides) {
  // The default's two ports share one ring link; a one-port tool moves its port to a device and drops the other.
  LoadOptions options;
  options.overrides = {{"ports[b].device", "net_null0"}};
  options.only_port = "b";
  const LoadResult result = load_config(embedded_default_yaml(), options);
  ASSERT_THAT(result.errors, IsEmpty());
  ASSERT_EQ(result.config->ports.size(), 1u);
  EXPECT_EQ(result.config->ports[0].name, "b");
  EXPECT_EQ(result.config->ports[0].device, "net_null0");
  options.only_port = "c";
  EXPECT_THAT(load_config(embedded_default_yaml(), options).errors,
              ElementsAre(is_error("ports", "no port named 'c'")));
  options.overrides.clear();
  EXPECT_THAT(load_config("", options).errors, ElementsAre(is_error("ports", "no port named 'c'")));
  options.overrides = {{"ports[1].device", "net_null0"}};
  options.only_port = "1";  // or by index
  ASSERT_THAT(load_config(embedded_default_yaml(), options).errors, IsEmpty());
  EXPECT_EQ(load_config(embedded_default_yaml(), options).config->ports[0].name, "b");
  options.only_port = "2";
  EXPECT_THAT(load_config(embedded_default_yaml(), options).errors, ElementsAre(is_error("ports", "no port '2'")));
}

TEST(Config, ApplicationSectionsAreSkippedOnlyWhenNamed) {
  const std::string text = std::string(embedded_default_yaml()) + "\nnvmf:\n  subsystems: []\n";
  EXPECT_THAT(load_config(text).errors, ElementsAre(is_error("nvmf", "unknown key 'nvmf'")));
  LoadOptions options;
  options.application_sections = {"nvmf"};
  EXPECT_THAT(load_config(text, options).errors, IsEmpty());
}

}  // namespace
}  // namespace uroce::config
