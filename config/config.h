// uroce's configuration: typed, defaulted, validated once at start-up.
//
// load_config() turns YAML text into a Config or into a list of errors, each naming
// the key path and saying what is wrong ("ports[0].mtu: must be between 576 and 9216, got 99999").
// Nothing here is read on the datapath: the dataplane copies what it needs at
// bring-up. See config/README.md for every key, and default.yaml for the embedded
// default (two engines in one process joined by DPDK virtual devices, no NIC).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace uroce::config {

enum class HugePages : uint8_t { kAuto, kOn, kOff };      // auto: use them if enough are free, else --no-huge
enum class IdlePolicy : uint8_t { kBusyPoll, kBackoff };  // backoff: pause, then short sleeps when idle (tests)
// How RoCEv2 packets reach the engines' RX queues (dataplane/steering.h):
//   kRteFlow  rte_flow rules send UDP/4791 to the engines' queues (RSS over the UDP source port, the RoCE entropy
//             field) and leave everything else to the kernel (flow isolation) or to engine 0's queue; start-up
//             fails if the PMD refuses them
//   kRss      no rules: the port's RSS (where it has any) spreads packets over the queues, and an engine that gets
//             another engine's QP's packet passes it on through a redirect ring
//   kAuto     kRteFlow where the PMD accepts the rules, else kRss, saying so in the log
enum class Steering : uint8_t { kAuto, kRteFlow, kRss };

struct EalConfig {
  // One engine per entry, pinned to that CPU, in order. The YAML value `auto` is resolved when the config is
  // loaded, by auto_engine_lcores() over the CPUs this process may run on.
  std::vector<unsigned> lcores = {0};
  HugePages hugepages = HugePages::kAuto;
  unsigned memory_mb = 512;             // -m for --no-huge (pools must fit: 2-3x their total)
  std::string file_prefix;              // empty: "uroce-<pid>", so processes never collide
  std::vector<std::string> extra_args;  // appended verbatim to the EAL arguments
  friend bool operator==(const EalConfig&, const EalConfig&) = default;
};

// The CPUs this process may run on (sched_getaffinity: taskset, cpusets), ascending; empty if unreadable.
[[nodiscard]] std::vector<unsigned> process_allowed_cpus();

// `eal.lcores: auto`: engines on their own CPUs, and the first allowed CPU left to the application threads, which
// would otherwise compete with a polling engine for its core. That is every allowed CPU after the first, at most
// kAutoMaxEngines of them (the embedded default's two endpoints need no more, and each engine's mempool costs
// memory); with one allowed CPU, one engine shares it. Production configs name their cores instead.
inline constexpr std::size_t kAutoMaxEngines = 2;
[[nodiscard]] std::vector<unsigned> auto_engine_lcores(const std::vector<unsigned>& allowed_cpus);

using MacAddress = std::array<uint8_t, 6>;

struct IpAddress {
  bool is_v6 = false;
  std::array<uint8_t, 16> bytes{};  // IPv4 in bytes 0..3
  uint8_t prefix_length = 32;       // on-link subnet; peers outside it are unreachable (no routing)
  friend bool operator==(const IpAddress&, const IpAddress&) = default;
};

struct PortConfig {
  std::string name;  // how QPs and tools refer to the port
  // What to open:
  //   "net_<driver><n>[,args]"  a DPDK vdev, e.g. "net_memif0,role=server,socket=/run/x.sock,socket-abstract=no"
  //   "0000:3b:00.0[,args]"     a PCI device (mlx5, ice, ...)
  //   "ring:<link>"             one end of an in-process net_ring link; exactly two ports name the same link
  std::string device;
  std::optional<MacAddress> mac;     // default: the device's own MAC
  std::vector<IpAddress> addresses;  // our IPs on this port; ARP/ND answers for these
  uint16_t mtu = 1500;               // Ethernet MTU (IP packet size); RoCE PMTU must fit: mtu >= pmtu + 80
  uint16_t rx_descriptors = 1024;
  uint16_t tx_descriptors = 1024;
  Steering steering = Steering::kAuto;
  friend bool operator==(const PortConfig&, const PortConfig&) = default;
};

struct EngineConfig {
  IdlePolicy idle = IdlePolicy::kBusyPoll;
  uint16_t rx_burst = 32;
  uint16_t tx_burst = 32;
  uint32_t mbufs_per_engine = 16383;  // mempool size (2^n - 1 is optimal for rte_mempool)
  uint32_t mbuf_cache = 256;
  uint16_t mbuf_data_room = 4096 + 128 + 128;  // enough for a 4096-PMTU frame plus headroom
  uint32_t redirect_ring_size = 4096;          // SPSC ring per engine pair, power of two
  uint32_t max_qps_per_engine = 4096;
  uint32_t tx_backlog = 1024;  // packets held when a TX burst is short
  // RC request packets whose payload is at least this many bytes of registered memory go out zero-copy (an
  // mbuf attached to the memory with rte_pktmbuf_attach_extbuf); 0 = always copy. See config/README.md.
  uint32_t zero_copy_threshold = 0;
  friend bool operator==(const EngineConfig&, const EngineConfig&) = default;
};

struct RdmaConfig {
  uint16_t path_mtu = 1024;            // IB MTU in bytes: 256, 512, 1024, 2048 or 4096
  uint8_t ack_timeout = 14;            // local ACK timeout 4.096 us * 2^n (0..31), 0 = none
  uint8_t retry_count = 7;             // 0..7
  uint8_t rnr_retry = 7;               // 0..7, 7 = infinite
  uint8_t min_rnr_timer = 12;          // RNR NAK timer code 0..31
  uint16_t ack_request_interval = 64;  // AckReq every N packets besides a message's last
  uint8_t max_rd_atomic = 16;          // initiator depth: our outstanding READ/ATOMIC
  uint8_t max_dest_rd_atomic = 16;     // responder resources
  uint16_t udp_source_port_base = 0xC000;
  friend bool operator==(const RdmaConfig&, const RdmaConfig&) = default;
};

// Test-only bottleneck link on every (engine, port) RX queue (dataplane/link_model.h): a FIFO served at
// rate_mbps with a buffer_bytes limit and RED-style ECN marking. Off (rate_mbps 0) by default.
struct BottleneckConfig {
  uint32_t rate_mbps = 0;             // service rate in Mb/s of frame bytes; 0 = off
  uint32_t buffer_bytes = 256 << 10;  // queue limit; a frame that does not fit is dropped
  // ECN: no mark while the queue holds <= kmin bytes, probability rising linearly to pmax at kmax, every
  // ECN-capable packet above kmax. kmin == kmax is a step at that depth; kmax 0 = no marking.
  uint32_t ecn_kmin_bytes = 0;
  uint32_t ecn_kmax_bytes = 0;
  double ecn_pmax = 1;
  [[nodiscard]] bool enabled() const { return rate_mbps > 0; }
  friend bool operator==(const BottleneckConfig&, const BottleneckConfig&) = default;
};

// Congestion control (rocev2.md §7, cm-nvmf-dcqcn.md §4): what uroce does as a DCQCN notification point (CE-marked
// packets -> CNPs) and reaction point (CNPs -> a paced rate per QP), and the cap on packets in flight. The
// reaction point's knobs carry the names of NVIDIA's ConnectX firmware (rpg_*, dce_tcp_*).
struct NotificationPointConfig {
  bool enabled = true;
  uint32_t min_time_between_cnps_us = 50;  // per QP (the paper's N)
  uint8_t cnp_dscp = 48;
  friend bool operator==(const NotificationPointConfig&, const NotificationPointConfig&) = default;
};

// Defaults: the SIGCOMM 2015 paper's parameters (cm-nvmf-dcqcn.md §4.1), which hold an 8-to-1 incast at the
// bottleneck's rate in bench/README.md "incast"; config/examples/connectx.yaml has NVIDIA's values.
struct ReactionPointConfig {
  bool enabled = true;
  uint32_t max_rate_mbps = 0;  // where a QP starts and the limiter switches off; 0: the port's link speed
  uint32_t min_rate_mbps = 1;
  uint32_t ai_rate_mbps = 40;
  uint32_t hai_rate_mbps = 400;
  uint32_t time_reset_us = 55;
  uint32_t byte_reset = 10'000'000;
  uint32_t threshold = 5;
  uint32_t min_dec_fac = 50;  // percent
  uint32_t dce_tcp_g = 1020;  // of 1024: g = 1/256
  uint32_t dce_tcp_rtt_us = 55;
  uint32_t initial_alpha_value = 1023;  // of 1024
  uint32_t rate_reduce_monitor_period_us = 50;
  uint32_t rate_to_set_on_first_cnp_mbps = 0;
  friend bool operator==(const ReactionPointConfig&, const ReactionPointConfig&) = default;
};

struct CongestionConfig {
  // Per QP: request packets in flight are capped at this many bytes' worth of path-MTU packets (IRN's BDP cap),
  // so a slow receiver meets a bounded burst, not a whole send queue of go-back-N; 0 = no cap.
  uint32_t max_bytes_in_flight = 1u << 20;
  // Slow restart under that cap: a loss halves a QP's window, acknowledged windows grow it back one packet each.
  bool slow_restart = true;
  bool ecn = true;  // send RoCE packets ECN-capable (ECT(0)), so congested switches mark them instead of dropping
  NotificationPointConfig notification_point;
  ReactionPointConfig reaction_point;
  friend bool operator==(const CongestionConfig&, const CongestionConfig&) = default;
};

// Test-only fault injection on every port's RX and TX; all zero (off) by default.
struct FaultConfig {
  double loss = 0;  // probabilities in [0, 1]
  double reorder = 0;
  double duplicate = 0;
  double corrupt = 0;  // flip one bit; the ICRC must catch it
  uint64_t seed = 1;
  BottleneckConfig bottleneck;
  // Any of the random faults (dataplane/fault_injector.h).
  [[nodiscard]] bool random_enabled() const { return loss > 0 || reorder > 0 || duplicate > 0 || corrupt > 0; }
  // Anything at all: the random faults or the bottleneck.
  [[nodiscard]] bool enabled() const { return random_enabled() || bottleneck.enabled(); }
  friend bool operator==(const FaultConfig&, const FaultConfig&) = default;
};

struct CaptureConfig {
  std::string pcapng_path;  // empty: off. Every packet each engine sends and receives, from the engine itself
  uint32_t snap_length = 65535;
  friend bool operator==(const CaptureConfig&, const CaptureConfig&) = default;
};

struct Config {
  EalConfig eal;
  std::vector<PortConfig> ports;
  EngineConfig engine;
  RdmaConfig rdma;
  CongestionConfig congestion;
  FaultConfig faults;
  CaptureConfig capture;
  friend bool operator==(const Config&, const Config&) = default;
};

struct ConfigError {
  std::string key;      // e.g. "ports[1].addresses[0]"
  std::string message;  // what is wrong, with the value seen
};

struct LoadResult {
  std::optional<Config> config;
  std::vector<ConfigError> errors;                                    // non-empty exactly when config is empty
  [[nodiscard]] std::string describe(std::string_view source) const;  // one "source: key: message" line each
};

// A setting given on a command line, applied to the YAML before it is read, so it is checked like the file.
//   key:   the path as error messages spell it, with a port named or numbered: "rdma.path_mtu",
//          "ports[0].device", "ports[veth].addresses". A map key that is missing is added.
//   value: YAML text: a scalar ("4096", "net_af_packet0,iface=uroce0") or a flow list ("[198.18.0.100/24]").
struct Override {
  std::string key;
  std::string value;
};

// What the loader may check against the machine it runs on (LoadOptions::machine). this_machine() reads it; tests
// make their own.
struct Machine {
  std::vector<unsigned> present_cpus;  // /sys/devices/system/cpu/present: the CPUs that exist
  std::vector<unsigned> allowed_cpus;  // process_allowed_cpus(): the ones this process may run on
  [[nodiscard]] static Machine this_machine();
};

struct LoadOptions {
  std::vector<Override> overrides;  // applied in order
  std::string only_port;            // non-empty: keep only the port it names ("0" or "veth"), for a one-port tool
  // Top-level sections an application reads itself from the same file (uroce-nvmf-target's `nvmf`): skipped
  // here rather than reported as unknown keys.
  std::vector<std::string> application_sections;
  // Given: also check the config against this machine (eal.lcores that do not exist or that this process may not
  // run on). Tools pass Machine::this_machine(); without it a config written for another machine still loads.
  std::optional<Machine> machine;
};

// Parses and validates. Unknown keys are errors (a typo must not silently fall back to a default).
[[nodiscard]] LoadResult load_config(std::string_view yaml_text, const LoadOptions& options = {});
[[nodiscard]] LoadResult load_config_file(const std::string& path, const LoadOptions& options = {});

// The configuration compiled into every binary: default.yaml.
[[nodiscard]] std::string_view embedded_default_yaml();

}  // namespace uroce::config
