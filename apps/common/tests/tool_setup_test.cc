#include "apps/common/tool_setup.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>

namespace uroce::apps {
namespace {

using ::testing::ElementsAre;

// An argv the function can rearrange, and what is left of it afterwards.
struct Argv {
  explicit Argv(std::vector<std::string> args) : storage(std::move(args)) {
    for (std::string& a : storage) pointers.push_back(a.data());
    pointers.push_back(nullptr);
    argc = static_cast<int>(storage.size());
  }
  std::vector<std::string> left() const { return {pointers.begin(), pointers.begin() + argc}; }
  std::vector<std::string> storage;
  std::vector<char*> pointers;
  int argc;
};

TEST(ToolSetup, TakesItsOptionsAndLeavesTheToolsInOrder) {
  Argv a({"tool", "-s", "64", "--ip", "198.18.0.9/24", "--set=rdma.path_mtu=1024", "--port", "b", "host", "--device",
          "net_null0", "--", "--ip"});
  const auto options = take_config_options(a.argc, a.pointers.data(), "tool");
  ASSERT_TRUE(options);
  EXPECT_THAT(a.left(), ElementsAre("tool", "-s", "64", "host", "--", "--ip"));
  EXPECT_EQ(a.pointers[static_cast<std::size_t>(a.argc)], nullptr);
  EXPECT_EQ(options->port, "b");
  ASSERT_EQ(options->settings.size(), 3u);
  EXPECT_TRUE(options->settings[0].on_port);
  EXPECT_EQ(options->settings[0].override.key, "addresses");
  EXPECT_EQ(options->settings[0].override.value, "[\"198.18.0.9/24\"]");
  EXPECT_FALSE(options->settings[1].on_port);
  EXPECT_EQ(options->settings[1].override.key, "rdma.path_mtu");
  EXPECT_EQ(options->settings[1].override.value, "1024");
  EXPECT_EQ(options->settings[2].override.key, "device");
}

TEST(ToolSetup, MissingOrMalformedValuesAreErrors) {
  Argv missing({"tool", "--config"});
  EXPECT_FALSE(take_config_options(missing.argc, missing.pointers.data(), "tool"));
  Argv no_equals({"tool", "--set", "rdma.path_mtu"});
  EXPECT_FALSE(take_config_options(no_equals.argc, no_equals.pointers.data(), "tool"));
  Argv no_key({"tool", "--set", "=3"});
  EXPECT_FALSE(take_config_options(no_key.argc, no_key.pointers.data(), "tool"));
  Argv empty_config({"tool", "--config="});  // an unset $CFG: an error, not the embedded default
  EXPECT_FALSE(take_config_options(empty_config.argc, empty_config.pointers.data(), "tool"));
  Argv empty_config_apart({"tool", "--config", ""});
  EXPECT_FALSE(take_config_options(empty_config_apart.argc, empty_config_apart.pointers.data(), "tool"));
}

TEST(ToolSetup, OverridesApplyToTheChosenPortAndOnePortToolsKeepOnlyIt) {
  Argv a({"tool", "--port", "b", "--device", "net_null0", "--ip", "198.18.0.9/24", "--lcores", "0"});
  const auto options = take_config_options(a.argc, a.pointers.data(), "tool");
  ASSERT_TRUE(options);
  const auto one = load_tool_config(*options, true, "tool");
  ASSERT_TRUE(one);
  ASSERT_EQ(one->config.ports.size(), 1u);
  EXPECT_EQ(one->port, 0u);
  EXPECT_EQ(one->config.ports[0].name, "b");
  EXPECT_EQ(one->config.ports[0].device, "net_null0");
  EXPECT_EQ(one->config.ports[0].addresses[0].bytes[3], 9);
  EXPECT_THAT(one->config.eal.lcores, ElementsAre(0u));
  // Both ports stay for a two-port tool, so the ring link must stay whole: only the address changes.
  Argv b({"tool", "--port", "b", "--ip", "198.18.0.9/24"});
  const auto both_options = take_config_options(b.argc, b.pointers.data(), "tool");
  const auto both = load_tool_config(*both_options, false, "tool");
  ASSERT_TRUE(both);
  EXPECT_EQ(both->config.ports.size(), 2u);
  EXPECT_EQ(both->port, 1u);
}

// A shortcut's value is a string, whatever YAML would make of it unquoted: '#' starts no comment, ': ' makes no map.
TEST(ToolSetup, ShortcutValuesAreTakenLiterally) {
  Argv a({"tool", "--capture", "/tmp/run #1.pcapng", "--device", "net_null0,a: \"b\""});
  const auto options = take_config_options(a.argc, a.pointers.data(), "tool");
  ASSERT_TRUE(options);
  const auto loaded = load_tool_config(*options, true, "tool");
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->config.capture.pcapng_path, "/tmp/run #1.pcapng");
  EXPECT_EQ(loaded->config.ports[0].device, "net_null0,a: \"b\"");
}

TEST(ToolSetup, BadOverridesAndUnknownPortsFailTheLoad) {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"tool", "--ip", "300.1.1.1"}, std::vector<std::string>{"tool", "--port", "nope"},
        std::vector<std::string>{"tool", "--set", "rdma.nope=1"},
        std::vector<std::string>{"tool", "--config", "/nonexistent.yaml"}}) {
    Argv a(args);
    const auto options = take_config_options(a.argc, a.pointers.data(), "tool");
    ASSERT_TRUE(options);
    EXPECT_FALSE(load_tool_config(*options, true, "tool")) << args[1];
  }
}

TEST(ToolSetup, GidsOfIpv4AreMappedAndReadBack) {
  config::IpAddress ip;
  ip.bytes = {198, 18, 0, 100};
  const auto gid = gid_of(ip);
  EXPECT_THAT(gid, ElementsAre(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 198, 18, 0, 100));
  const sockaddr_storage s = sockaddr_of_gid(gid);
  ASSERT_EQ(s.ss_family, AF_INET);
  EXPECT_EQ(reinterpret_cast<const sockaddr_in*>(&s)->sin_addr.s_addr, htonl(0xC6120064));
  std::array<uint8_t, 16> v6{0xfd};
  v6[15] = 5;
  EXPECT_EQ(sockaddr_of_gid(v6).ss_family, AF_INET6);
}

}  // namespace
}  // namespace uroce::apps
