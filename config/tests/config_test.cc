// config/: every key read, its default, and the forms of lcores, addresses, MACs and devices.
#include "config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "config/tests/config_test_support.h"

namespace uroce::config {
namespace {

using test_support::doc;
using test_support::is_error;
using test_support::load_valid;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

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
  EXPECT_TRUE(d.congestion.slow_restart);
  EXPECT_TRUE(d.congestion.ecn);
  EXPECT_TRUE(d.congestion.notification_point.enabled);
  EXPECT_TRUE(d.congestion.reaction_point.enabled);
  const Config c = load_valid(doc(R"(
congestion:
  max_bytes_in_flight: 0
  slow_restart: false
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
  EXPECT_FALSE(g.slow_restart);
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

TEST(Config, ApplicationSectionsAreSkippedOnlyWhenNamed) {
  const std::string text = std::string(embedded_default_yaml()) + "\nnvmf:\n  subsystems: []\n";
  EXPECT_THAT(load_config(text).errors, ElementsAre(is_error("nvmf", "unknown key 'nvmf'")));
  LoadOptions options;
  options.application_sections = {"nvmf"};
  EXPECT_THAT(load_config(text, options).errors, IsEmpty());
}

}  // namespace
}  // namespace uroce::config
