#include "bench/bench_loads.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <sched.h>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define UROCE_BENCH_HAVE_CALLGRIND 1
#else
#define UROCE_BENCH_HAVE_CALLGRIND 0
#endif

namespace uroce::bench {

namespace {

// Instrumentation window for run_callgrind.sh (no-ops when not under valgrind).
void callgrind_begin() {
#if UROCE_BENCH_HAVE_CALLGRIND
  CALLGRIND_START_INSTRUMENTATION;
  CALLGRIND_ZERO_STATS;
#endif
}

void callgrind_end(const char* what) {
#if UROCE_BENCH_HAVE_CALLGRIND
  CALLGRIND_DUMP_STATS_AT(what);
  CALLGRIND_STOP_INSTRUMENTATION;
#else
  (void)what;
#endif
}

constexpr unsigned kRawBurstsPerPoll = 16;  // raw loop iterations per engine-loop iteration
constexpr uint16_t kMaxRawBurst = 64;

}  // namespace

// ---------------------------------------------------------------------------------------------------- WriteLoad

WriteLoad::WriteLoad(const WriteLoadSetup& setup) : setup_(setup) {
  if (setup_.signal_every == 0) setup_.signal_every = 1;
  next_signaled_ = setup_.signal_every;
  dataplane::SendQueue& sq = *setup_.send_queue;
  for (uint32_t i = 0; i < sq.capacity(); ++i) sq.slot(i) = setup_.wqe;
}

bool WriteLoad::poll(void* self, dataplane::EngineContext&) {
  auto& w = *static_cast<WriteLoad*>(self);
  dataplane::CompletionQueue& cq = *w.setup_.send_cq;
  bool worked = false;
  while (const dataplane::CompletionEntry* e = cq.peek()) {
    w.complete(*e);
    cq.pop();
    worked = true;
  }
  if (worked) cq.publish_consumed();
  return w.post_more() || worked;
}

// Completions come in order, so the last one seen retires every WRITE up to its context.
void WriteLoad::complete(const dataplane::CompletionEntry& e) noexcept {
  if (e.completion.status != proto::CompletionStatus::kSuccess) [[unlikely]] {
    proto::CompletionStatus none = proto::CompletionStatus::kSuccess;
    failure_.compare_exchange_strong(none, e.completion.status, std::memory_order_release);
  }
  completed_ = e.completion.context - setup_.context_base + 1;
  completed_pub_.store(completed_, std::memory_order_release);
}

bool WriteLoad::post_more() noexcept {
  if (!started_) {
    started_ = true;
    if (setup_.callgrind) callgrind_begin();
  }
  // Up to `window` beyond what is known complete; once stopped (or failed), only up to the next signaled WRITE so
  // the load ends on a completion.
  const uint64_t k = setup_.signal_every;
  uint64_t target;
  const bool stopping = stop_.load(std::memory_order_relaxed) ||
                        failure_.load(std::memory_order_relaxed) != proto::CompletionStatus::kSuccess;
  if (stopping) [[unlikely]] {
    target = std::min((posted_ + k - 1) / k * k, setup_.limit);
  } else {
    target = std::min(completed_ + setup_.window, setup_.limit);
  }
  dataplane::SendQueue& sq = *setup_.send_queue;
  uint32_t tail = sq.producer_tail();
  const uint32_t head = sq.consumer_head();
  const uint32_t room = sq.capacity() - (tail - head);
  const uint64_t n = std::min<uint64_t>(target > posted_ ? target - posted_ : 0, room);
  if (n != 0) {
    for (uint64_t i = 0; i < n; ++i, ++tail) {
      proto::SendWqe& slot = sq.slot(tail);
      const uint64_t index = posted_ + i;
      slot.context = setup_.context_base + index;
      // Every k-th WRITE, counted without a division per WRITE (a 64-bit div was ~4% of the engine's time).
      const bool every_kth = index + 1 == next_signaled_;
      if (every_kth) next_signaled_ += k;
      const bool signaled = every_kth || index + 1 == setup_.limit;
      slot.flags = signaled ? uint8_t{proto::kWqeSignaled} : uint8_t{0};
    }
    posted_ += n;
    sq.publish_tail(tail);
    setup_.transport->ring_doorbell(*setup_.qp);
    posted_pub_.store(posted_, std::memory_order_relaxed);
  }
  if (!drained_.load(std::memory_order_relaxed) && completed_ == posted_ &&
      (posted_ == setup_.limit || (stopping && posted_ % k == 0))) {
    if (setup_.callgrind && !dumped_) {
      dumped_ = true;
      callgrind_end("uroce write load");
    }
    drained_.store(true, std::memory_order_release);
  }
  return n != 0;
}

// ----------------------------------------------------------------------------------------------------- RawLoop

RawLoop::RawLoop(const RawLoopSetup& setup) : setup_(setup) {
  setup_.burst = std::clamp<uint16_t>(setup_.burst, 1, kMaxRawBurst);
  if (setup_.span < setup_.payload) setup_.span = setup_.payload;
  // Eth (02:..:0b <- 02:..:0a, IPv4) + IPv4 (198.18.0.1 -> 198.18.0.2, UDP) + UDP (-> 4791): 42 bytes, the
  // headers every RoCEv2 frame starts with. Built once; each frame is a copy.
  static constexpr uint8_t kHeader[42] = {
      0x02, 0,    0,    0,    0, 0x0b, 0x02, 0, 0,    0,    0, 0x0a, 0x08, 0x00,                       // Ethernet
      0x45, 0,    0,    0,    0, 0,    0x40, 0, 0x40, 0x11, 0, 0,    198,  18,   0, 1, 198, 18, 0, 2,  // IPv4
      0xc0, 0x00, 0x12, 0xb7, 0, 0,    0,    0};                                                       // UDP
  std::memcpy(header_, kHeader, sizeof(header_));
}

void RawLoop::fill(uint8_t* frame) noexcept {
  std::memcpy(frame, header_, sizeof(header_));
  if (setup_.payload != 0) {
    std::memcpy(frame + sizeof(header_), setup_.src + tx_offset_, setup_.payload);
    tx_offset_ += setup_.payload;
    if (tx_offset_ + setup_.payload > setup_.span) tx_offset_ = 0;
  }
}

bool RawLoop::poll(void* self, dataplane::EngineContext&) { return static_cast<RawLoop*>(self)->step(); }

bool RawLoop::step() noexcept {
  RawLoop& r = *this;
  if (!r.started_) {
    r.started_ = true;
    if (r.setup_.callgrind) callgrind_begin();
  }
  const bool stopping = r.stop_.load(std::memory_order_relaxed);
  const uint16_t burst = r.setup_.burst;
  const auto frame_length = static_cast<uint16_t>(sizeof(r.header_) + r.setup_.payload);
  rte_mbuf* pkts[kMaxRawBurst];
  unsigned bursts = 0;
  for (; bursts < kRawBurstsPerPoll; ++bursts) {
    // TX: as many frames as the limit allows.
    uint64_t want = stopping || !r.setup_.transmit ? 0 : std::min<uint64_t>(burst, r.setup_.limit - r.sent_);
    if (want != 0) {
      if (rte_pktmbuf_alloc_bulk(r.setup_.pool, pkts, static_cast<unsigned>(want)) != 0) [[unlikely]] {
        ++r.alloc_failures_;
        want = 0;
      }
    }
    if (want != 0) {
      for (uint64_t i = 0; i < want; ++i) {
        rte_mbuf* m = pkts[i];
        r.fill(rte_pktmbuf_mtod(m, uint8_t*));
        m->data_len = frame_length;
        m->pkt_len = frame_length;
      }
      const uint16_t sent = rte_eth_tx_burst(r.setup_.tx_port, 0, pkts, static_cast<uint16_t>(want));
      if (sent < want) rte_pktmbuf_free_bulk(pkts + sent, static_cast<unsigned>(want - sent));
      r.sent_ += sent;
    }
    // RX: copy the payload out, as a receiver writing into registered memory would.
    const uint16_t n = r.setup_.receive ? rte_eth_rx_burst(r.setup_.rx_port, 0, pkts, burst) : 0;
    for (uint16_t i = 0; i < n; ++i) {
      if (r.setup_.payload != 0 && pkts[i]->data_len >= sizeof(r.header_) + r.setup_.payload) {
        std::memcpy(r.setup_.dst + r.rx_offset_, rte_pktmbuf_mtod_offset(pkts[i], const uint8_t*, sizeof(r.header_)),
                    r.setup_.payload);
        r.rx_offset_ += r.setup_.payload;
        if (r.rx_offset_ + r.setup_.payload > r.setup_.span) r.rx_offset_ = 0;
      }
    }
    if (n != 0) rte_pktmbuf_free_bulk(pkts, n);
    r.received_ += n;
    if (n == 0 && want == 0) break;
  }
  r.received_pub_.store(r.received_, std::memory_order_release);
  r.sent_pub_.store(r.sent_, std::memory_order_release);
  r.alloc_failures_pub_.store(r.alloc_failures_, std::memory_order_relaxed);
  // One process of a pair stops when told to; a loopback stops once everything sent has arrived.
  const bool done = r.setup_.transmit && r.setup_.receive
                        ? r.received_ == r.sent_ && (r.sent_ == r.setup_.limit || stopping)
                        : stopping || r.sent_ == r.setup_.limit;
  if (!r.drained_.load(std::memory_order_relaxed) && done) {
    if (r.setup_.callgrind && !r.dumped_) {
      r.dumped_ = true;
      callgrind_end("raw loop");
    }
    r.drained_.store(true, std::memory_order_release);
  }
  return bursts != 0;
}

// ------------------------------------------------------------------------------------------------ RawRingPair

unsigned last_allowed_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  unsigned last = 0;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (unsigned c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) last = c;
    }
  }
  return last;
}

void add_ring_link_ports(config::Config& config) {
  for (const char* name : {"a", "b"}) {
    const bool is_a = name[0] == 'a';
    config::PortConfig p;
    p.name = name;
    p.device = "ring:ab";
    p.mac = config::MacAddress{0x02, 0, 0, 0, 0, static_cast<uint8_t>(is_a ? 0x0a : 0x0b)};
    config::IpAddress ip;
    ip.bytes[0] = 198;
    ip.bytes[1] = 18;
    ip.bytes[3] = is_a ? 1 : 2;
    ip.prefix_length = 24;
    p.addresses = {ip};
    p.mtu = 4200;  // >= 4096 + 80
    config.ports.push_back(p);
  }
}

dataplane::Result<RawRingPair> make_raw_ring_pair(rte_mempool* pool, unsigned ring_size) {
  static unsigned instance = 0;
  const unsigned id = instance++;
  rte_ring* rings[2];
  for (int d = 0; d < 2; ++d) {
    const std::string name = "bench_raw" + std::to_string(id) + "_" + std::to_string(d);
    rings[d] = rte_ring_create(name.c_str(), ring_size, static_cast<int>(rte_socket_id()),
                               RING_F_SP_ENQ | RING_F_SC_DEQ | RING_F_EXACT_SZ);
    if (rings[d] == nullptr)
      return dataplane::Status::error("rte_ring_create(" + name + "): " + rte_strerror(rte_errno));
  }
  uint16_t ids[2];
  for (int end = 0; end < 2; ++end) {
    // End 0 transmits on ring 0 and receives on ring 1; end 1 the reverse.
    const std::string name = "bench_raw" + std::to_string(id) + (end == 0 ? "_a" : "_b");
    const int port = rte_eth_from_rings(name.c_str(), &rings[1 - end], 1, &rings[end], 1, rte_socket_id());
    if (port < 0) return dataplane::Status::error("rte_eth_from_rings(" + name + "): " + rte_strerror(rte_errno));
    ids[end] = static_cast<uint16_t>(port);
    rte_eth_conf conf{};
    if (rte_eth_dev_configure(ids[end], 1, 1, &conf) != 0 ||
        rte_eth_rx_queue_setup(ids[end], 0, static_cast<uint16_t>(ring_size), rte_socket_id(), nullptr, pool) != 0 ||
        rte_eth_tx_queue_setup(ids[end], 0, static_cast<uint16_t>(ring_size), rte_socket_id(), nullptr) != 0 ||
        rte_eth_dev_start(ids[end]) != 0) {
      return dataplane::Status::error("cannot start the raw ring port " + name);
    }
  }
  return RawRingPair{ids[0], ids[1]};
}

dataplane::Result<uint16_t> start_raw_port(const std::string& name, rte_mempool* pool,
                                           std::chrono::milliseconds link_timeout) {
  uint16_t id = 0;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &id) != 0) return dataplane::Status::error("no ethdev " + name);
  rte_eth_conf conf{};
  rte_eth_dev_info info{};
  if (rte_eth_dev_info_get(id, &info) == 0 && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS))
    conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  if (rte_eth_dev_configure(id, 1, 1, &conf) != 0 ||
      rte_eth_rx_queue_setup(id, 0, 1024, rte_socket_id(), nullptr, pool) != 0 ||
      rte_eth_tx_queue_setup(id, 0, 1024, rte_socket_id(), nullptr) != 0 || rte_eth_dev_start(id) != 0) {
    return dataplane::Status::error("cannot start " + name);
  }
  const auto deadline = std::chrono::steady_clock::now() + link_timeout;
  for (;;) {
    rte_eth_link link{};
    if (rte_eth_link_get_nowait(id, &link) == 0 && link.link_status == RTE_ETH_LINK_UP) break;
    if (std::chrono::steady_clock::now() > deadline) return dataplane::Status::error(name + ": link down");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return id;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

CpuShare::CpuShare(const std::string& thread_name) {
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name == thread_name) {
      path_ = (task.path() / "schedstat").string();
      break;
    }
  }
}

uint64_t CpuShare::run_ns() const {
  std::ifstream in(path_);
  uint64_t run = 0;
  in >> run;
  return run;
}

namespace {
uint64_t wall_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}
}  // namespace

void CpuShare::start() {
  run0_ = run_ns();
  wall0_ = wall_ns();
}

double CpuShare::share() const {
  if (path_.empty()) return 0;
  const uint64_t wall = wall_ns() - wall0_;
  return wall == 0 ? 0 : static_cast<double>(run_ns() - run0_) / static_cast<double>(wall);
}

}  // namespace uroce::bench
