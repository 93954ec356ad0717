#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "dataplane/eal.h"
#include "dataplane/qpn.h"

namespace uroce::dataplane {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

config::PortConfig port_config(const std::string& name, const std::string& device) {
  config::PortConfig p;
  p.name = name;
  p.device = device;
  return p;
}

config::Config two_engine_config() {
  config::Config c;
  c.eal.lcores = {0, 1};
  c.engine.mbufs_per_engine = 4095;
  c.ports.push_back(port_config("a", "ring:ab"));
  c.ports.push_back(port_config("b", "ring:ab"));
  return c;
}

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(EalArgs, EnginesOnTheirCpusAndAFloatingMainLcore) {
  auto args = build_eal_args(two_engine_config(), {}, {0, 1, 2, 3}, 42);
  ASSERT_TRUE(args.ok()) << args.error();
  EXPECT_THAT(*args, Contains("--lcores=0@0,1@1,2@(2-3)"));
  EXPECT_THAT(*args, Contains("--main-lcore=2"));
  EXPECT_THAT(*args, Contains("--file-prefix=uroce-42"));
  EXPECT_THAT(*args, Contains("--iova-mode=va"));
  EXPECT_THAT(*args, Contains("--no-pci"));
}

TEST(EalArgs, TheMainLcoreFloatsOverEveryCpuWhenTheEnginesTakeThemAll) {
  auto args = build_eal_args(two_engine_config(), {}, {0, 1}, 42);
  ASSERT_TRUE(args.ok()) << args.error();
  EXPECT_THAT(*args, Contains("--lcores=0@0,1@1,2@(0-1)"));
}

TEST(EalArgs, AnEngineOutsideTheProcessAffinityIsAClearError) {
  // As under `taskset -c 0`: pinning engine 1 to CPU 1 would escape the restriction.
  auto args = build_eal_args(two_engine_config(), {}, {0}, 42);
  ASSERT_FALSE(args.ok());
  EXPECT_EQ(args.error(),
            "eal.lcores[1]: CPU 1 is not one this process may run on (0); name one of those, or use 'auto'");
}

TEST(EalArgs, AutoUsesHugepagesOnlyWhenTheyCoverThePools) {
  const auto config = two_engine_config();
  auto with = build_eal_args(config, {.free_bytes = 2 * kGiB}, {0, 1}, 1);
  ASSERT_TRUE(with.ok()) << with.error();
  EXPECT_THAT(*with, Contains("--in-memory"));
  EXPECT_THAT(*with, Not(Contains("--no-huge")));

  auto without = build_eal_args(config, {.free_bytes = 2 << 20}, {0, 1}, 1);
  ASSERT_TRUE(without.ok()) << without.error();
  EXPECT_THAT(*without, Contains("--no-huge"));
  EXPECT_THAT(*without, Contains("--no-shconf"));
  EXPECT_THAT(*without, Contains("512"));  // -m memory_mb
  EXPECT_THAT(*without, Not(Contains("--in-memory")));
}

TEST(EalArgs, HugepagesOnWithoutHugepagesIsAClearError) {
  auto config = two_engine_config();
  config.eal.hugepages = config::HugePages::kOn;
  auto args = build_eal_args(config, {.free_bytes = 0}, {0, 1}, 1);
  ASSERT_FALSE(args.ok());
  EXPECT_THAT(args.error(), HasSubstr("hugepages"));
  EXPECT_THAT(args.error(), HasSubstr("nr_hugepages"));
}

TEST(EalArgs, TooLittleMemoryWithoutHugepagesIsAClearError) {
  auto config = two_engine_config();
  config.eal.hugepages = config::HugePages::kOff;
  config.eal.memory_mb = 64;
  config.engine.mbufs_per_engine = 65535;
  auto args = build_eal_args(config, {.free_bytes = 8 * kGiB}, {0, 1}, 1);
  ASSERT_FALSE(args.ok());
  EXPECT_THAT(args.error(), HasSubstr("memory_mb"));
}

TEST(EalArgs, DevicesBecomeVdevAndAllowListArguments) {
  auto config = two_engine_config();
  config.ports.push_back(port_config("m", "net_memif0,role=server,socket=/run/x.sock,socket-abstract=no"));
  config.ports.push_back(port_config("n", "0000:3b:00.0,dv_flow_en=1"));
  config.eal.file_prefix = "custom";
  config.eal.extra_args = {"--force-max-simd-bitwidth=512"};
  auto args = build_eal_args(config, {}, {0, 1}, 1);
  ASSERT_TRUE(args.ok()) << args.error();
  EXPECT_THAT(*args, Contains("--vdev=net_memif0,role=server,socket=/run/x.sock,socket-abstract=no"));
  EXPECT_THAT(*args, Contains("0000:3b:00.0,dv_flow_en=1"));
  EXPECT_THAT(*args, Not(Contains("--no-pci")));
  EXPECT_THAT(*args, Contains("--file-prefix=custom"));
  EXPECT_EQ(args->back(), "--force-max-simd-bitwidth=512");
}

TEST(EalArgs, BadDevicesAndLcoresAreRejected) {
  auto config = two_engine_config();
  config.ports.push_back(port_config("x", "eth0"));
  auto args = build_eal_args(config, {}, {0, 1}, 1);
  ASSERT_FALSE(args.ok());
  EXPECT_THAT(args.error(), HasSubstr("ports[2]"));

  config = two_engine_config();
  config.eal.lcores.assign(kMaxEngines + 1, 0);
  EXPECT_FALSE(build_eal_args(config, {}, {0, 1}, 1).ok());
  config.eal.lcores.clear();
  EXPECT_FALSE(build_eal_args(config, {}, {0, 1}, 1).ok());
}

TEST(EalArgs, ParseDevice) {
  auto ring = parse_device("ring:ab");
  ASSERT_TRUE(ring.ok());
  EXPECT_EQ(ring->kind, DeviceKind::kRingLink);
  EXPECT_EQ(ring->name, "ab");
  auto vdev = parse_device("net_af_packet0,iface=veth0,framesz=4608");
  ASSERT_TRUE(vdev.ok());
  EXPECT_EQ(vdev->kind, DeviceKind::kVdev);
  EXPECT_EQ(vdev->name, "net_af_packet0");
  EXPECT_EQ(vdev->args, "iface=veth0,framesz=4608");
  auto pci = parse_device("3b:00.0");
  ASSERT_TRUE(pci.ok());
  EXPECT_EQ(pci->kind, DeviceKind::kPci);
  EXPECT_FALSE(parse_device("ring:").ok());
  EXPECT_FALSE(parse_device("ring:ab,x=1").ok());
  EXPECT_FALSE(parse_device("").ok());
}

TEST(EalArgs, ReadsHugepagesFromMeminfo) {
  const std::string path = ::testing::TempDir() + "meminfo";
  {
    std::ofstream out(path);
    out << "MemTotal:       24000000 kB\nHugePages_Total:     100\nHugePages_Free:       64\n"
           "Hugepagesize:       2048 kB\n";
  }
  EXPECT_EQ(read_hugepage_info(path).free_bytes, uint64_t{64} * 2048 * 1024);
  EXPECT_EQ(read_hugepage_info("/nonexistent/meminfo").free_bytes, 0u);
  std::remove(path.c_str());
}

TEST(QpnEncoding, EngineInTheTopBitsAndGsiOnEngineZero) {
  EXPECT_EQ(engine_of(proto::kGsiQpn), 0);
  EXPECT_EQ(engine_of(make_qpn(1, 5)), 1);
  EXPECT_EQ(make_qpn(1, 5).value(), 0x100005u);
  EXPECT_EQ(local_index_of(make_qpn(15, kQpnLocalMask)), kQpnLocalMask);
}

}  // namespace
}  // namespace uroce::dataplane
