// config/: files, the embedded default and the examples, the machine check (lcores this machine has), the
// README's key table, and --set overrides.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/tests/config_test_support.h"

namespace uroce::config {
namespace {

using test_support::config_dir;
using test_support::doc;
using test_support::is_error;
using test_support::load_valid;
using test_support::one_port;
using test_support::read_file;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Eq;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

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
                                          "congestion.slow_restart",
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
      entry = name.substr(from, end - from).append(": ").append(entry);
      if (start == std::string::npos) break;
      entry = std::string("{").append(entry).append("}");
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

}  // namespace
}  // namespace uroce::config
