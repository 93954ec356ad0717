// rte_flow steering on net_tap, which implements rte_flow with TC rules on its kernel netdev (issue #15 part 3).
// Runs as root where the kernel has TC flower, multiq, skbedit, gact and BPF (the rxe-peer guest's Debian 6.1;
// run_steering_guest.sh stages it there). One Dataplane after another on a net_tap port; for each case, raw frames
// are sent into the kernel side of the tap (an AF_PACKET socket on the tap's netdev, so each one crosses the PMD's
// TC rules on its way to the PMD's queues) and the engines' per-queue RX counters (telemetry's rx<q>_packets) say
// where they went. Every case sends 16 UDP/4791 flows (one UDP source port each, 8 frames), then 32 UDP/9999 frames,
// an ARP request and one more frame of a known RoCE flow per queue (once those are in, whatever came before is):
//   rte_flow-1engine    steering rte_flow, one engine: the port runs rte_flow_isolated. The RoCE frames and the ARP
//                       request reach the engine and the UDP/9999 frames do not (the PMD's isolation rule drops
//                       them; they would have reached it without: see rss-2engines).
//   rte_flow-2engines   steering rte_flow, two engines: start-up fails, naming the RSS rule and the PMD's reason.
//                       DPDK 22.11's net_tap builds an RSS action from a BPF program that Linux 6.1's verifier
//                       rejects ("Failed to load BPF section l3_l4 (13): Permission denied"), so it has rte_flow
//                       and isolation but no RSS action.
//   auto-2engines       steering auto, two engines: the same refusal, logged ("falling back to RSS"), and the port
//                       runs on RSS: every frame reaches an engine, each flow whole on one queue (the tap's kernel
//                       side picks the queue by a flow hash), and the flows use both queues.
//   rss-2engines        steering rss: no rules, no fallback message, the same checks as auto-2engines.
// usage: steering_tap_test [--iface NAME] [--case NAME]... [-- EAL arguments (e.g. -d librte_net_tap.so)]
// Prints one PASS/FAIL line per case; exit status 0 only if every case passed.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_log.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config/config.h"
#include "dataplane/dataplane.h"
#include "dataplane/eal.h"
#include "dataplane/port.h"
#include "dataplane/steering.h"

namespace {

using uroce::dataplane::Dataplane;
using uroce::dataplane::EngineId;
using uroce::dataplane::SteeringMode;

constexpr std::chrono::seconds kArrivalDeadline{20};  // a TCG guest on a loaded host stalls for seconds
constexpr unsigned kFramesPerFlow = 8;
constexpr unsigned kRoceFlows = 16;
constexpr unsigned kOtherFrames = 32;
constexpr uint16_t kRoceV2Port = 4791;
constexpr uint16_t kOtherPort = 9999;

// Everything DPDK logs goes to stderr as before and into a buffer the cases search (the fallback message).
class LogTap {
 public:
  static LogTap& instance() {
    static LogTap tap;
    return tap;
  }
  void install() {
    cookie_io_functions_t io{};
    io.write = [](void*, const char* buffer, std::size_t size) -> ssize_t {
      LogTap& self = instance();
      const std::lock_guard lock(self.mutex_);
      self.text_.append(buffer, size);
      (void)fwrite(buffer, 1, size, stderr);
      return static_cast<ssize_t>(size);
    };
    FILE* stream = fopencookie(nullptr, "w", io);
    if (stream == nullptr) return;
    setvbuf(stream, nullptr, _IONBF, 0);
    (void)rte_openlog_stream(stream);
  }
  std::size_t mark() {
    const std::lock_guard lock(mutex_);
    return text_.size();
  }
  std::string since(std::size_t mark) {
    const std::lock_guard lock(mutex_);
    return text_.substr(std::min(mark, text_.size()));
  }

 private:
  std::mutex mutex_;
  std::string text_;
};

// The kernel keeps IPv6 off on netdevs created while this lives (the tap's), so it sends nothing of its own
// (router solicitations, MLD) into the PMD's queues and the counts below are exact.
class NoIpv6OnNewNetdevs {
 public:
  NoIpv6OnNewNetdevs() {
    std::ifstream in(kPath);
    std::getline(in, saved_);
    std::ofstream(kPath) << "1\n";
  }
  ~NoIpv6OnNewNetdevs() {
    if (!saved_.empty()) std::ofstream(kPath) << saved_ << "\n";
  }
  NoIpv6OnNewNetdevs(const NoIpv6OnNewNetdevs&) = delete;
  NoIpv6OnNewNetdevs& operator=(const NoIpv6OnNewNetdevs&) = delete;

 private:
  static constexpr const char* kPath = "/proc/sys/net/ipv6/conf/default/disable_ipv6";
  std::string saved_;
};

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// Eth / IPv4 198.18.1.2 -> 198.18.1.1 / UDP source_port -> dest_port, then a BTH-sized body and 4 bytes where an
// ICRC would be. The engines count it on receipt and then drop it (no such QP); only the counting matters here.
std::vector<uint8_t> udp_frame(const std::array<uint8_t, 6>& dst_mac, uint16_t source_port, uint16_t dest_port) {
  constexpr std::size_t kBody = 12 + 4;
  std::vector<uint8_t> f(14 + 20 + 8 + kBody, 0);
  std::copy(dst_mac.begin(), dst_mac.end(), f.begin());
  const std::array<uint8_t, 6> src_mac{0x02, 0x00, 0x00, 0x12, 0x01, 0x02};
  std::copy(src_mac.begin(), src_mac.end(), f.begin() + 6);
  put16(&f[12], 0x0800);
  uint8_t* ip = &f[14];
  ip[0] = 0x45;
  put16(ip + 2, static_cast<uint16_t>(20 + 8 + kBody));
  ip[6] = 0x40;  // DF
  ip[8] = 64;
  ip[9] = 17;  // UDP
  const std::array<uint8_t, 8> addresses{198, 18, 1, 2, 198, 18, 1, 1};
  std::copy(addresses.begin(), addresses.end(), ip + 12);
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += static_cast<uint32_t>(ip[i] << 8 | ip[i + 1]);
  while (sum > 0xFFFF) sum = (sum & 0xFFFF) + (sum >> 16);
  put16(ip + 10, static_cast<uint16_t>(~sum));
  uint8_t* udp = ip + 20;
  put16(udp, source_port);
  put16(udp + 2, dest_port);
  put16(udp + 4, static_cast<uint16_t>(8 + kBody));
  udp[8] = 0x04;  // a BTH opcode (RC SEND_ONLY); UDP checksum 0 (none), as RoCEv2 senders do
  return f;
}

// An ARP request for 198.18.1.1 from 198.18.1.2, broadcast.
std::vector<uint8_t> arp_request() {
  std::vector<uint8_t> f(14 + 28, 0);
  std::fill_n(f.begin(), 6, uint8_t{0xFF});
  const std::array<uint8_t, 6> src_mac{0x02, 0x00, 0x00, 0x12, 0x01, 0x02};
  std::copy(src_mac.begin(), src_mac.end(), f.begin() + 6);
  put16(&f[12], 0x0806);
  uint8_t* arp = &f[14];
  put16(arp, 1);           // Ethernet
  put16(arp + 2, 0x0800);  // IPv4
  arp[4] = 6;
  arp[5] = 4;
  put16(arp + 6, 1);  // request
  std::copy(src_mac.begin(), src_mac.end(), arp + 8);
  const std::array<uint8_t, 4> sender{198, 18, 1, 2};
  const std::array<uint8_t, 4> target{198, 18, 1, 1};
  std::copy(sender.begin(), sender.end(), arp + 14);
  std::copy(target.begin(), target.end(), arp + 24);
  return f;
}

// Sends frames out of the kernel side of the tap: through its qdisc, where the PMD's TC rules classify them.
class KernelSender {
 public:
  explicit KernelSender(const std::string& iface) : fd_(socket(AF_PACKET, SOCK_RAW, 0)) {
    address_.sll_family = AF_PACKET;
    address_.sll_ifindex = static_cast<int>(if_nametoindex(iface.c_str()));
    address_.sll_halen = 6;
  }
  ~KernelSender() {
    if (fd_ >= 0) close(fd_);
  }
  KernelSender(const KernelSender&) = delete;
  KernelSender& operator=(const KernelSender&) = delete;

  [[nodiscard]] std::string problem() const {
    if (fd_ < 0) return std::string("socket(AF_PACKET): ") + rte_strerror(errno);
    if (address_.sll_ifindex == 0) return "no netdev for the tap";
    return {};
  }
  [[nodiscard]] bool send(const std::vector<uint8_t>& frame) {
    const auto n =
        sendto(fd_, frame.data(), frame.size(), 0, reinterpret_cast<const sockaddr*>(&address_), sizeof(address_));
    return n == static_cast<ssize_t>(frame.size());
  }

 private:
  int fd_;
  sockaddr_ll address_{};
};

struct Case {
  std::string name;
  uroce::config::Steering steering;
  unsigned engines;
  bool start_fails;         // start-up must fail, naming the refused rule
  SteeringMode expect;      // otherwise, the port's steering mode
  bool fallback_message;    // the log says it fell back to RSS
  bool reassert_isolation;  // net_tap's isolation quirk: see run_traffic
};

uroce::config::Config make_config(const Case& c, const std::string& iface, const std::vector<std::string>& eal) {
  uroce::config::Config config;
  config.eal.lcores = uroce::dataplane::test_engine_cpus();  // two CPUs, or one CPU twice on a one-CPU machine
  config.eal.lcores.resize(c.engines);
  config.eal.hugepages = uroce::config::HugePages::kOff;
  config.eal.memory_mb = 192;
  config.eal.extra_args = eal;
  config.engine.idle = uroce::config::IdlePolicy::kBackoff;
  config.engine.mbufs_per_engine = 1023;
  config.engine.mbuf_cache = 32;
  config.engine.max_qps_per_engine = 64;
  config.engine.redirect_ring_size = 256;
  uroce::config::PortConfig port;
  port.name = "tap";
  port.device = "net_tap0,iface=" + iface;
  port.mac = uroce::config::MacAddress{0x02, 0x00, 0x00, 0x12, 0x01, 0x01};
  port.rx_descriptors = 256;
  port.tx_descriptors = 256;
  port.steering = c.steering;
  uroce::config::IpAddress v4;
  v4.bytes = {198, 18, 1, 1};
  v4.prefix_length = 24;
  port.addresses.push_back(v4);
  config.ports.push_back(port);
  return config;
}

std::vector<uint64_t> rx_counts(const Dataplane& dp) {
  std::vector<uint64_t> counts;
  for (EngineId e = 0; e < dp.engine_count(); ++e) counts.push_back(dp.engine(e).port_counters(0).rx_packets.read());
  return counts;
}

uint64_t total(const std::vector<uint64_t>& v) { return std::accumulate(v.begin(), v.end(), uint64_t{0}); }

std::vector<uint64_t> minus(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  std::vector<uint64_t> d(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

std::string show(const std::vector<uint64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i != 0) s += ' ';
    s += 'q';
    s += std::to_string(i);
    s += '=';
    s += std::to_string(v[i]);
  }
  return s;
}

// Waits until the engines together have received `count` frames more than `before`, or the deadline passes;
// returns what each received meanwhile.
std::vector<uint64_t> wait_for(const Dataplane& dp, const std::vector<uint64_t>& before, uint64_t count) {
  const auto deadline = std::chrono::steady_clock::now() + kArrivalDeadline;
  while (total(minus(rx_counts(dp), before)) < count && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return minus(rx_counts(dp), before);
}

// The RoCE flows: each source port's frames whole on one queue, and the flows over every queue. Sets
// flow_of_queue[q] to a source port queue q receives. An empty string when everything held, else what did not.
std::string roce_flows(const Dataplane& dp, KernelSender& sender, const std::array<uint8_t, 6>& dst,
                       std::vector<uint16_t>& flow_of_queue) {
  flow_of_queue.assign(dp.engine_count(), 0);
  std::vector<unsigned> flows_per_queue(dp.engine_count(), 0);
  for (unsigned flow = 0; flow < kRoceFlows; ++flow) {
    const auto source_port = static_cast<uint16_t>(0xC000 + flow * 0x101);
    const auto before = rx_counts(dp);
    for (unsigned i = 0; i < kFramesPerFlow; ++i) {
      if (!sender.send(udp_frame(dst, source_port, kRoceV2Port)))
        return "sendto failed: " + std::string(rte_strerror(errno));
    }
    const auto got = wait_for(dp, before, kFramesPerFlow);
    const auto queues_used = std::count_if(got.begin(), got.end(), [](uint64_t n) { return n != 0; });
    std::printf("  UDP/4791 from port %u: %s\n", source_port, show(got).c_str());
    if (total(got) != kFramesPerFlow || queues_used != 1) {
      return "UDP source port " + std::to_string(source_port) + ": " + std::to_string(kFramesPerFlow) +
             " frames expected on one queue, got " + show(got);
    }
    const auto q =
        static_cast<std::size_t>(std::find_if(got.begin(), got.end(), [](uint64_t n) { return n != 0; }) - got.begin());
    flow_of_queue[q] = source_port;
    ++flows_per_queue[q];
  }
  std::string spread;
  for (std::size_t q = 0; q < flows_per_queue.size(); ++q)
    spread += " q" + std::to_string(q) + ":" + std::to_string(flows_per_queue[q]);
  std::printf("  %u flows over the queues:%s\n", kRoceFlows, spread.c_str());
  if (std::count(flows_per_queue.begin(), flows_per_queue.end(), 0U) != 0)
    return "the RoCE flows did not use every engine's queue:" + spread;
  return {};
}

// Sends one frame of a known flow per queue and waits for them on top of `expected`.
std::string markers(const Dataplane& dp, KernelSender& sender, const std::array<uint8_t, 6>& dst,
                    const std::vector<uint16_t>& flow_of_queue, const std::vector<uint64_t>& before, uint64_t expected,
                    std::vector<uint64_t>& got) {
  for (uint16_t source_port : flow_of_queue) {
    if (!sender.send(udp_frame(dst, source_port, kRoceV2Port)))
      return "sendto failed: " + std::string(rte_strerror(errno));
  }
  got = wait_for(dp, before, expected + flow_of_queue.size());
  return {};
}

// Non-RoCE UDP and an ARP request, then one more frame of a known flow per queue: once those arrive, whatever the
// kernel queued before them to any queue has arrived too (each queue is a FIFO, and the qdisc, where the rules
// act, runs in sendto). A second round of markers confirms it. `isolated`: only the ARP request and the markers
// may arrive, else every frame must. `check` false: only report what arrived.
std::string others(const Dataplane& dp, KernelSender& sender, const std::array<uint8_t, 6>& dst,
                   const std::vector<uint16_t>& flow_of_queue, bool isolated, bool check) {
  const auto before = rx_counts(dp);
  for (unsigned i = 0; i < kOtherFrames; ++i) {
    if (!sender.send(udp_frame(dst, static_cast<uint16_t>(0xC000 + i * 0x33), kOtherPort)))
      return "sendto failed: " + std::string(rte_strerror(errno));
  }
  if (!sender.send(arp_request())) return "sendto failed: " + std::string(rte_strerror(errno));
  const uint64_t queues = flow_of_queue.size();
  const uint64_t expected = 2 * queues + 1 + (isolated ? 0 : kOtherFrames);
  std::vector<uint64_t> got;
  if (std::string e = markers(dp, sender, dst, flow_of_queue, before, expected - 2 * queues, got); !e.empty()) return e;
  if (std::string e = markers(dp, sender, dst, flow_of_queue, before, total(got), got); !e.empty()) return e;
  const std::string verdict = check ? std::to_string(expected) + " expected in all" : "not checked";
  std::printf("  %u UDP/%u frames, 1 ARP request, 2x%lu UDP/4791 markers: %s (%s)\n", kOtherFrames, kOtherPort,
              static_cast<unsigned long>(queues), show(got).c_str(), verdict.c_str());
  if (check && total(got) != expected) {
    return std::string(isolated ? "non-RoCE frames reached the engines' queues under isolation: "
                                : "not every frame reached an engine: ") +
           show(got) + ", expected " + std::to_string(expected) + " in all";
  }
  return {};
}

// Everything a case sends; an empty string when everything held, else what did not.
std::string run_traffic(const Dataplane& dp, const std::string& iface, bool isolated, bool reassert_isolation) {
  KernelSender sender(iface);
  if (std::string p = sender.problem(); !p.empty()) return p;
  uint64_t mac = dp.port(0).mac.value();
  std::array<uint8_t, 6> dst{};
  for (int i = 5; i >= 0; --i, mac >>= 8) dst[static_cast<std::size_t>(i)] = static_cast<uint8_t>(mac);
  std::vector<uint16_t> flow_of_queue;
  if (std::string e = roce_flows(dp, sender, dst, flow_of_queue); !e.empty()) return e;
  if (!reassert_isolation) return others(dp, sender, dst, flow_of_queue, isolated, true);

  // net_tap (DPDK 22.11) accepts rte_flow_isolate() before rte_eth_dev_configure(), where uroce asks for it (mlx5
  // needs it there), but installs its isolation rule (a catch-all drop) only when isolation changes once its
  // queues exist: tap_flow_isolate() leaves it to tun_alloc(), which never does. Show what uroce's rules do on
  // their own, then ask the PMD again (off, on) and check isolation.
  std::printf("  as uroce leaves the port (net_tap has not applied isolation):\n");
  // Waits for every frame (not isolated), so no straggler lands in the count below; checks nothing.
  if (std::string e = others(dp, sender, dst, flow_of_queue, false, false); !e.empty()) return e;
  rte_flow_error error{};
  if (rte_flow_isolate(dp.port(0).port_id, 0, &error) != 0 || rte_flow_isolate(dp.port(0).port_id, 1, &error) != 0)
    return std::string("rte_flow_isolate off/on: ") + (error.message != nullptr ? error.message : "failed");
  std::printf("  isolation asked for again:\n");
  return others(dp, sender, dst, flow_of_queue, true, true);
}

void print_port_stats(const Dataplane& dp) {
  rte_eth_stats stats{};
  if (rte_eth_stats_get(dp.port(0).port_id, &stats) != 0) return;
  std::vector<uint64_t> queues;
  for (EngineId e = 0; e < dp.engine_count(); ++e) queues.push_back(stats.q_ipackets[e]);
  std::printf("  rte_eth_stats: ipackets=%lu q_ipackets: %s\n", static_cast<unsigned long>(stats.ipackets),
              show(queues).c_str());
}

void print_tc_rules(const std::string& iface) {
  const std::string command = "tc -s filter show dev " + iface + " 2>&1";
  FILE* out = popen(command.c_str(), "r");
  if (out == nullptr) return;
  std::array<char, 512> line{};
  std::printf("  $ %s\n", command.c_str());
  while (fgets(line.data(), static_cast<int>(line.size()), out) != nullptr) std::printf("    %s", line.data());
  (void)pclose(out);
}

// One case: the Dataplane up (or its refusal), the traffic, the Dataplane down.
std::string run_case(const Case& c, const std::string& iface, const std::vector<std::string>& eal) {
  const std::size_t log_mark = LogTap::instance().mark();
  auto dp = Dataplane::start(make_config(c, iface, eal));
  const std::string log = LogTap::instance().since(log_mark);
  const bool fell_back = log.find("falling back to RSS") != std::string::npos;
  if (c.start_fails) {
    if (dp.ok())
      return "start-up succeeded (steering " + std::string(steering_mode_name(dp.value()->port(0).steering)) + ")";
    std::printf("  start-up refused: %s\n", dp.error().c_str());
    if (dp.error().find("steering is rte_flow but the PMD refuses it") == std::string::npos ||
        dp.error().find("UDP/4791 -> RSS") == std::string::npos)
      return "start-up failed, but not for the RSS rule: " + dp.error();
    return {};
  }
  if (!dp.ok()) return "start-up failed: " + dp.error();
  Dataplane& dataplane = *dp.value();
  const SteeringMode mode = dataplane.port(0).steering;
  std::printf("  port steering: %s; fallback message: %s\n", steering_mode_name(mode), fell_back ? "yes" : "no");
  if (mode != c.expect)
    return "steering is " + std::string(steering_mode_name(mode)) + ", expected " + steering_mode_name(c.expect);
  if (fell_back != c.fallback_message)
    return c.fallback_message ? "no 'falling back to RSS' message in the log" : "an unexpected fallback message";
  std::string failure = run_traffic(dataplane, iface, mode == SteeringMode::kRteFlowIsolated, c.reassert_isolation);
  print_port_stats(dataplane);
  if (mode != SteeringMode::kRss) print_tc_rules(iface);
  dataplane.stop();
  return failure;
}

}  // namespace

int main(int argc, char** argv) {
  std::string iface = "dtap0";
  std::vector<std::string> only;
  std::vector<std::string> eal;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--iface" && i + 1 < argc) {
      iface = argv[++i];
    } else if (arg == "--case" && i + 1 < argc) {
      only.emplace_back(argv[++i]);
    } else if (arg == "--") {
      eal.assign(argv + i + 1, argv + argc);
      break;
    } else {
      std::fprintf(stderr, "usage: %s [--iface NAME] [--case NAME]... [-- EAL arguments]\n", argv[0]);
      return 2;
    }
  }
  using uroce::config::Steering;
  const std::vector<Case> cases = {
      {"rte_flow-1engine", Steering::kRteFlow, 1, false, SteeringMode::kRteFlowIsolated, false, true},
      {"rte_flow-2engines", Steering::kRteFlow, 2, true, SteeringMode::kRss, false, false},
      {"auto-2engines", Steering::kAuto, 2, false, SteeringMode::kRss, true, false},
      {"rss-2engines", Steering::kRss, 2, false, SteeringMode::kRss, false, false},
  };
  LogTap::instance().install();
  const NoIpv6OnNewNetdevs no_ipv6;
  // The EAL once, with as many engine lcores as any case needs.
  if (const auto s = uroce::dataplane::init_eal(make_config(cases[1], iface, eal)); !s.ok()) {
    std::fprintf(stderr, "FAIL: %s\n", s.message().c_str());
    return 1;
  }
  int failures = 0;
  int ran = 0;
  for (const Case& c : cases) {
    if (!only.empty() && std::find(only.begin(), only.end(), c.name) == only.end()) continue;
    ++ran;
    std::printf("case %s\n", c.name.c_str());
    std::fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string failure = run_case(c, iface, eal);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    if (failure.empty()) {
      std::printf("PASS %s (%lld ms)\n", c.name.c_str(), static_cast<long long>(ms));
    } else {
      ++failures;
      std::printf("FAIL %s: %s\n", c.name.c_str(), failure.c_str());
    }
    std::fflush(stdout);
  }
  if (ran == 0) {
    std::fprintf(stderr, "no case matched\n");
    return 2;
  }
  std::printf("%d of %d cases passed\n", ran - failures, ran);
  return failures == 0 ? 0 : 1;
}
