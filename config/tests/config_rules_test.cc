// config/: each validation rule gives exactly its error, every error is collected in one run, and hostile
// input becomes errors, never exceptions.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "config/tests/config_test_support.h"

namespace uroce::config {
namespace {

using test_support::doc;
using test_support::is_error;
using test_support::one_port;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using ::testing::Not;

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
      // An integer selects by index in --port and --set ports[...]: a port so named could never be selected.
      {"NumericPortName", one_port("name: '1', device: net_null0, addresses: [198.18.0.1]"), "ports[0].name",
       "must be a name that is not a number, without '.', '[', ']' or spaces (it selects the port in --port and "
       "--set), got '1'"},
      {"PortNameWithDot", one_port("name: a.b, device: net_null0, addresses: [198.18.0.1]"), "ports[0].name",
       "must be a name that is not a number, without '.', '[', ']' or spaces"},
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
       "must be a plain name (no '/', spaces, '.' or '..'), got 'a/b'"},
      {"FilePrefixParent", doc("eal: {file_prefix: '..'}"), "eal.file_prefix",
       "must be a plain name (no '/', spaces, '.' or '..'), got '..'"},
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
      // Microseconds become 32-bit nanoseconds: 4294968 us used to wrap to 704 ns.
      {"CongestionTimeResetWrapsNanoseconds", doc("congestion: {reaction_point: {time_reset_us: 4294968}}"),
       "congestion.reaction_point.time_reset_us", "must be between 1 and 4000000, got 4294968"},
      {"CongestionCnpIntervalWrapsNanoseconds",
       doc("congestion: {notification_point: {min_time_between_cnps_us: 10000000}}"),
       "congestion.notification_point.min_time_between_cnps_us", "must be between 0 and 4000000, got 10000000"},
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

}  // namespace
}  // namespace uroce::config
