// Engine-side load generators for the end-to-end benchmarks (see README.md "rc_loopback").
//
// Both run as a dataplane Poller on the engine's own lcore, so the whole workload (posting, protocol, packet
// I/O, completions) is on one core and nothing crosses cores while it is timed:
//
//   WriteLoad  keeps `window` RDMA WRITEs outstanding on one RC QP through the application interface: it
//              patches a pre-filled SendQueue slot (context + flags), publishes the tail, rings the doorbell
//              with RcTransport::ring_doorbell, and drains the send CQ. Every `signal_every`-th WRITE is
//              signaled; a completion retires every WRITE before it.
//   RawLoop    the baseline: a plain net_ring tx+rx loop on two ports of its own (alloc bulk, 42-byte header +
//              the same payload bytes uroce copies in and out, tx_burst on one port, rx_burst on the other,
//              free bulk): dpdk-env.md §5's loop plus the payload copies.
//
// The control thread only starts them, reads their counters and stops them. With `callgrind` set, the first
// poll starts callgrind instrumentation and zeroes its counters, and reaching `limit` dumps them: the dump
// then holds exactly the engine's instructions for the workload (run_callgrind.sh).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "config/config.h"
#include "dataplane/engine.h"
#include "dataplane/rc_transport.h"
#include "dataplane/work_queues.h"
#include "proto/rc_types.h"

struct rte_mempool;

namespace uroce::bench {

inline constexpr uint64_t kUnlimited = ~uint64_t{0};

struct WriteLoadSetup {
  dataplane::RcTransport* transport = nullptr;
  dataplane::RcQueuePair* qp = nullptr;
  dataplane::SendQueue* send_queue = nullptr;
  dataplane::CompletionQueue* send_cq = nullptr;  // drained by poll(); a driver sharing one CQ calls complete()
  uint64_t context_base = 0;  // WRITE i carries context context_base + i (a shared CQ's driver tells loads apart)
  proto::SendWqe wqe;         // the WRITE every slot carries (op, sge, remote_addr, rkey, length)
  uint32_t window = 128;      // WRITEs outstanding (posted, not known complete)
  uint32_t signal_every = 1;  // 1: every WRITE signaled
  uint64_t limit = kUnlimited;
  bool callgrind = false;
};

class WriteLoad {
 public:
  // Fills every SQ slot with `setup.wqe` (control thread, before the poller is added).
  explicit WriteLoad(const WriteLoadSetup& setup);
  WriteLoad(const WriteLoad&) = delete;
  WriteLoad& operator=(const WriteLoad&) = delete;

  // The poller: drains send_cq into complete(), then post_more().
  [[nodiscard]] dataplane::Poller poller() { return dataplane::Poller{&WriteLoad::poll, this}; }
  // Engine: for a driver that polls one CQ for many loads. complete() takes this load's next completion;
  // post_more() posts up to the window and returns whether it posted.
  void complete(const dataplane::CompletionEntry& e) noexcept;
  bool post_more() noexcept;

  // Control thread. stop(): post no more than needed to end on a signaled WRITE.
  void stop() noexcept { stop_.store(true, std::memory_order_relaxed); }
  [[nodiscard]] uint64_t completed() const noexcept { return completed_pub_.load(std::memory_order_acquire); }
  [[nodiscard]] uint64_t posted() const noexcept { return posted_pub_.load(std::memory_order_acquire); }
  // Stopped (or at the limit) and everything posted has completed.
  [[nodiscard]] bool drained() const noexcept { return drained_.load(std::memory_order_acquire); }
  // The first completion that was not a success (kSuccess if none).
  [[nodiscard]] proto::CompletionStatus failure() const noexcept { return failure_.load(std::memory_order_acquire); }

 private:
  static bool poll(void* self, dataplane::EngineContext& ctx);

  WriteLoadSetup setup_;
  // Engine-only.
  uint64_t posted_ = 0;
  uint64_t completed_ = 0;
  uint64_t next_signaled_ = 1;  // posted count (index + 1) of the next every-k-th signaled WRITE
  bool started_ = false;
  bool dumped_ = false;
  // Published for the control thread.
  alignas(64) std::atomic<uint64_t> completed_pub_{0};
  std::atomic<uint64_t> posted_pub_{0};
  std::atomic<bool> drained_{false};
  std::atomic<proto::CompletionStatus> failure_{proto::CompletionStatus::kSuccess};
  alignas(64) std::atomic<bool> stop_{false};
};

struct RawLoopSetup {
  uint16_t tx_port = 0;  // DPDK port ids
  uint16_t rx_port = 0;
  rte_mempool* pool = nullptr;
  uint32_t payload = 64;  // bytes copied into each frame after the 42-byte header, and out again on RX
  uint32_t span = 64;     // payload bytes cycle through [src, src + span) and [dst, dst + span)
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  uint16_t burst = 32;
  uint64_t limit = kUnlimited;  // packets
  bool callgrind = false;
  bool transmit = true;  // false: RX only (the receiving process of a two-process run)
  bool receive = true;   // false: TX only (the sending process)
};

class RawLoop {
 public:
  explicit RawLoop(const RawLoopSetup& setup);
  RawLoop(const RawLoop&) = delete;
  RawLoop& operator=(const RawLoop&) = delete;

  [[nodiscard]] dataplane::Poller poller() { return dataplane::Poller{&RawLoop::poll, this}; }
  // One call of the loop (up to 16 bursts each way) outside a Dataplane, e.g. from an lcore function.
  bool step() noexcept;
  void stop() noexcept { stop_.store(true, std::memory_order_relaxed); }
  [[nodiscard]] uint64_t received() const noexcept { return received_pub_.load(std::memory_order_acquire); }
  [[nodiscard]] uint64_t sent() const noexcept { return sent_pub_.load(std::memory_order_acquire); }
  [[nodiscard]] bool drained() const noexcept { return drained_.load(std::memory_order_acquire); }
  [[nodiscard]] uint64_t alloc_failures() const noexcept { return alloc_failures_pub_.load(std::memory_order_relaxed); }

 private:
  static bool poll(void* self, dataplane::EngineContext& ctx);
  void fill(uint8_t* frame) noexcept;

  RawLoopSetup setup_;
  uint8_t header_[42]{};
  uint64_t sent_ = 0;
  uint64_t received_ = 0;
  uint32_t tx_offset_ = 0;
  uint32_t rx_offset_ = 0;
  uint64_t alloc_failures_ = 0;
  bool started_ = false;
  bool dumped_ = false;
  alignas(64) std::atomic<uint64_t> received_pub_{0};
  std::atomic<uint64_t> sent_pub_{0};
  std::atomic<uint64_t> alloc_failures_pub_{0};
  std::atomic<bool> drained_{false};
  alignas(64) std::atomic<bool> stop_{false};
};

// Two ethdevs joined by a pair of SP/SC rings (like a "ring:<link>" pair, but outside the Dataplane, so no
// engine polls them): frames sent on `a` arrive on `b`. Queue 0 only, RX mbufs from `pool`.
struct RawRingPair {
  uint16_t a = 0;
  uint16_t b = 0;
};
[[nodiscard]] dataplane::Result<RawRingPair> make_raw_ring_pair(rte_mempool* pool, unsigned ring_size = 1024);

// The two ports every in-process benchmark runs uroce over: "a" (02:..:0a, 198.18.0.1/24) and "b" (02:..:0b,
// 198.18.0.2/24), joined by one net_ring link, MTU 4200 (a PMTU-4096 frame fits), appended to `config.ports`.
void add_ring_link_ports(config::Config& config);

// The last CPU this process may run on: where the benchmarks put their engine (CPU 0 takes more of the host's
// interrupts).
[[nodiscard]] unsigned last_allowed_cpu();

// Configures and starts an ethdev the EAL already probed (e.g. --vdev=net_memif0,...) with one RX and one TX
// queue, and waits for its link: the raw baseline of a two-process run, with no Dataplane.
[[nodiscard]] dataplane::Result<uint16_t> start_raw_port(const std::string& name, rte_mempool* pool,
                                                         std::chrono::milliseconds link_timeout);

// The 1, 5 and 15 minute load averages, for the report ("0.12 0.30 0.41").
[[nodiscard]] std::string load_average();

// How much of the wall time a thread spent on a CPU, from /proc/self/task/<tid>/schedstat: a sample whose
// engine thread ran less than ~99% of the time was preempted by something else on its core.
class CpuShare {
 public:
  // The thread whose name (comm) is `name`, e.g. DPDK's "lcore-worker-0"; none found: share() is 0.
  explicit CpuShare(const std::string& thread_name);
  void start();
  // On-CPU time / wall time since start().
  [[nodiscard]] double share() const;

 private:
  [[nodiscard]] uint64_t run_ns() const;
  std::string path_;
  uint64_t run0_ = 0;
  uint64_t wall0_ = 0;
};

}  // namespace uroce::bench
