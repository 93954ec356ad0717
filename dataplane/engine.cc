// The engine loop (the datapath) and its control side.
#include "dataplane/engine.h"

#include <bit>
#include <cassert>
#include <chrono>
#include <optional>
#include <thread>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_pause.h>
#include <rte_prefetch.h>
#include <rte_ring.h>
#include <sys/prctl.h>
#include <time.h>

#include "dataplane/fault_injector.h"
#include "dataplane/link_model.h"
#include "dataplane/ring.h"
#include "dataplane/work_queues.h"

namespace uroce::dataplane {

namespace {

constexpr unsigned kMaxCommandsPerIteration = 4;
constexpr uint32_t kTimerSlots = 4096;  // ~3 ms per rotation at ~0.8 us ticks
// Backoff idle policy: empty iterations spent spinning, then pausing, before short sleeps.
constexpr uint32_t kIdleSpinIterations = 64;
constexpr uint32_t kIdlePauseIterations = 2048;
constexpr long kIdleSleepNanoseconds = 30'000;
constexpr uint64_t kNeighborLifetimeSeconds = 60;  // neighbor.h: a learned address is asked for again after this
constexpr unsigned kBacklogRoundsPerFlush = 4;

// The timer tick: the power of two of TSC cycles closest below one microsecond.
unsigned tick_shift_for(uint64_t tsc_hz) {
  const uint64_t cycles_per_us = tsc_hz / 1'000'000;
  return cycles_per_us <= 1 ? 0 : static_cast<unsigned>(std::bit_width(cycles_per_us) - 1);
}

// Pairs with command_is_done(): everything the command did (a reply it wrote, a QP it registered) is visible to
// the waiting control thread once it sees done.
void publish_command_done(EngineCommand& command) { command.done.store(true, std::memory_order_release); }
bool command_is_done(const EngineCommand& command) { return command.done.load(std::memory_order_acquire); }

constexpr bool is_not_roce(proto::ParseError e) noexcept {
  return e == proto::ParseError::kNotIp || e == proto::ParseError::kNotUdp || e == proto::ParseError::kNotRoceV2;
}

constexpr uint8_t kIcmpv6NextHeader = 58;

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Construction (control path)

EngineContext::EngineContext(const EngineSetup& s)
    : id_(s.id),
      engine_count_(s.engine_count),
      rx_burst_(s.config->engine.rx_burst),
      tx_burst_(s.config->engine.tx_burst),
      busy_poll_(s.config->engine.idle == config::IdlePolicy::kBusyPoll),
      tsc_hz_(rte_get_tsc_hz()),
      ports_(*s.ports),
      pool_(s.pool),
      mailbox_(s.mailbox),
      redirect_out_(s.redirect_out),
      redirect_in_(s.redirect_in),
      redirect_batches_(s.engine_count),
      port_index_of_id_(RTE_MAX_ETHPORTS, 0),
      tx_(s.ports->size()),
      port_counters_(std::make_unique<PortCounters[]>(s.ports->size())),
      qps_(qp_table_size(s.config->engine.max_qps_per_engine)),
      qp_slot_mask_(static_cast<uint32_t>(qps_.size() - 1)),
      timers_(tick_shift_for(rte_get_tsc_hz()), kTimerSlots, rte_rdtsc()),
      capture_(s.capture),
      activity_(s.activity) {
  for (const Port& p : s.ports->ports()) {
    port_index_of_id_[p.port_id] = p.index;
    TxQueue& q = tx_[p.index];
    q.port_id = p.port_id;
    q.backlog.assign(s.config->engine.tx_backlog, nullptr);
  }
  if (s.config->faults.random_enabled()) {
    for (const Port& p : s.ports->ports()) {
      faults_.push_back(
          std::make_unique<FaultInjector>(s.config->faults, uint64_t{id_} << 16 | p.index, pool_, counters_));
    }
  }
  if (s.config->faults.bottleneck.enabled()) {
    for (const Port& p : s.ports->ports()) {
      links_.push_back(std::make_unique<LinkModel>(s.config->faults.bottleneck, tsc_hz_, s.config->faults.seed,
                                                   uint64_t{id_} << 16 | p.index, counters_));
    }
  }
  if (id_ == 0) neighbors_ = std::make_unique<NeighborTable>(tsc_hz_ * kNeighborLifetimeSeconds);
}

EngineContext::~EngineContext() = default;

// ---------------------------------------------------------------------------------------------------------
// The loop

namespace {
thread_local const EngineContext* t_running_here = nullptr;  // set for the duration of run()
}  // namespace

const EngineContext* EngineContext::running_here() noexcept { return t_running_here; }

void EngineContext::run() noexcept {
  t_running_here = this;
  // Sleeps in the backoff policy should be ~30 us, not the default 50 us timer slack on top.
  if (!busy_poll_) (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  bool previous_found_work = false;
  now_ = rte_rdtsc();
  while (running_) {
    // The iteration that just ended, timed with the one TSC read each iteration makes anyway.
    const uint64_t previous = now_;
    now_ = rte_rdtsc();
    counters_.total_cycles.add(now_ - previous);
    if (previous_found_work) counters_.busy_cycles.add(now_ - previous);
    uint32_t work = run_commands();
    for (std::size_t p = 0; p < tx_.size(); ++p) work += poll_port(static_cast<PortIndex>(p));
    for (EngineId owner = 0; owner < engine_count_; ++owner) flush_redirect(owner);
    work += drain_redirects();
    const uint32_t fired = timers_.advance(now_, *this);
    counters_.timers_fired.add(fired);
    work += fired;
    work += poll_pollers();
    work += flush_all_tx();
    publish_completion_events();
    leave_iteration();
    previous_found_work = work != 0;
    idle(work);
  }
  // Commands posted before the stop are answered; none can be posted after it (Engine::stop).
  while (run_commands() != 0) {
  }
  (void)flush_all_tx();
  publish_completion_events();
  release_held_mbufs();
  leave_iteration();
  t_running_here = nullptr;
}

// Dekker's pattern with an invalidation (wait_for_engines): the engine makes its epoch odd and then, after a seq_cst
// fence, reads memory table slots; the invalidating engine makes the slot invalid and then, after a seq_cst fence,
// reads the epoch. Of the two fences one comes first, so either this iteration's resolves see the key invalid, or
// the invalidation sees the odd epoch and waits for the even one. The fence is the loop's one full barrier (an
// mfence or locked instruction on x86, some 20-40 cycles), paid by an iteration that reads the table, once, and by
// no idle one: an idle engine's loop is the time a packet from another engine waits to be seen.
// (uroce_bench_latency: about 8% off the half round trip against a fence in every iteration.)
void EngineContext::enter_iteration() noexcept {
  std::atomic<uint64_t>& epoch = activity_[id_].epoch;
  epoch.store(epoch.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  inside_ = true;
}

// Release: every copy into or out of registered memory this iteration made happens before an invalidation that
// reads the even epoch (acquire) completes.
void EngineContext::leave_iteration() noexcept {
  if (!inside_) return;
  std::atomic<uint64_t>& epoch = activity_[id_].epoch;
  epoch.store(epoch.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  inside_ = false;
}

void EngineContext::wait_for_engines(uint32_t engines) noexcept {
  engines &= ~(1U << id_);
  if (engines == 0) return;
  // The caller made the slot invalid before this fence: an engine that enters an iteration after it sees the key
  // invalid (enter_iteration), so only one that is inside an iteration now is waited for.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  leave_iteration();  // between packets: an engine waiting for this one goes on
  bool waited = false;
  for (EngineId e = 0; e < engine_count_; ++e) {
    if ((engines & (1U << e)) == 0) continue;
    const std::atomic<uint64_t>& epoch = activity_[e].epoch;
    // Acquire: pairs with leave_iteration()'s release, so that engine's copies are complete once it moved on.
    const uint64_t seen = epoch.load(std::memory_order_acquire);
    if ((seen & 1) == 0) continue;
    waited = true;
    while (epoch.load(std::memory_order_acquire) == seen) rte_pause();
  }
  enter_iteration();
  if (waited) counters_.invalidation_waits.add();
}

uint32_t EngineContext::run_commands() noexcept {
  EngineCommand* commands[kMaxCommandsPerIteration];
  // The ring's dequeue is an acquire of the producer's release: the command's fields are visible here.
  const unsigned n = ring_sc_dequeue_burst(mailbox_, commands, kMaxCommandsPerIteration);
  for (unsigned i = 0; i < n; ++i) {
    commands[i]->run(commands[i]->arg, *this);
    // What the command completed is announced before the poster hears it is done: it may destroy the CQ next.
    publish_completion_events();
    counters_.commands_executed.add();
    publish_command_done(*commands[i]);  // the poster may free it from here on: do not touch it again
  }
  return n;
}

uint32_t EngineContext::poll_port(PortIndex p) noexcept {
  const uint16_t port_id = tx_[p].port_id;
  rte_mbuf* received[kMaxBurst];
  uint16_t n = rte_eth_rx_burst(port_id, id_, received, rx_burst_);
  rte_mbuf** pkts = received;
  rte_mbuf* faulted[kMaxBurst * FaultInjector::kOutputsPerInput];
  if (!faults_.empty()) [[unlikely]] {
    n = n != 0 ? faults_[p]->apply(received, n, faulted) : faults_[p]->release_held(faulted);
    pkts = faulted;
  }
  rte_mbuf* shaped[LinkModel::kMaxReleased];
  uint32_t queued = 0;  // a packet still in the bottleneck is work to come: the backoff policy must not sleep on it
  if (!links_.empty()) [[unlikely]] {
    n = links_[p]->process(pkts, n, rte_rdtsc(), shaped);
    pkts = shaped;
    queued = links_[p]->empty() ? 0 : 1;
  }
  if (n == 0) return queued;
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < n; ++i) {
    if (i + 1 < n) rte_prefetch0(rte_pktmbuf_mtod(pkts[i + 1], void*));
    rte_mbuf* const m = pkts[i];
    m->port = port_id;  // a redirected mbuf finds its port again through this
    bytes += m->pkt_len;
    if (capture_ != nullptr) capture(p, CaptureDirection::kInbound, m);
    dispatch(p, m, true);
  }
  flush_freed_mbufs();
  counters_.rx_packets.add(n);
  counters_.rx_bytes.add(bytes);
  port_counters_[p].rx_packets.add(n);
  port_counters_[p].rx_bytes.add(bytes);
  return n;
}

// `from_wire` is false for a packet another engine already received, checked (ICRC, IP checksum) and
// redirected here: it is parsed again only to find its headers, and is never redirected a second time.
void EngineContext::dispatch(PortIndex p, rte_mbuf* m, bool from_wire) noexcept {
  if (m->nb_segs > 1 && rte_pktmbuf_linearize(m) != 0) [[unlikely]] {
    counters_.rx_drop_nonlinear.add();
    rte_pktmbuf_free(m);
    return;
  }
  const auto* const frame = rte_pktmbuf_mtod(m, const uint8_t*);
  const uint16_t length = m->data_len;
  if (length >= proto::Eth::kSize) [[likely]] {
    const proto::EthView eth{frame};
    // Unicast to another MAC (a promiscuous port, or our MAC set in software only): not ours.
    if ((frame[0] & 1) == 0 && eth.get(proto::Eth::dst) != ports_[p].mac) [[unlikely]] {
      counters_.rx_not_for_us.add();
      rte_pktmbuf_free(m);
      return;
    }
    const uint16_t ether_type = eth.get(proto::Eth::ether_type);
    if (ether_type == proto::kEtherTypeArp) [[unlikely]]
      return dispatch_neighbor(p, m, true, from_wire);
    if (ether_type == proto::kEtherTypeIpv6 && length >= proto::Eth::kSize + proto::Ipv6::kSize &&
        proto::Ipv6View{frame + proto::Eth::kSize}.get(proto::Ipv6::next_header) == kIcmpv6NextHeader) [[unlikely]]
      return dispatch_neighbor(p, m, false, from_wire);
  }
  // A large RC WRITE's ICRC is left to the QP's responder, which checks it while it copies the payload into
  // registered memory (one read of the payload instead of two); nothing acts on the packet before that check
  // (RcQp::fused_write_candidate). A packet that leaves this engine, or goes to an endpoint that does not check
  // deferred ICRCs, is checked here first: the redirect's owner takes what it receives as checked.
  // Two constant option sets rather than one built from `from_wire`: built, its three bytes were stored one by one
  // and reloaded as one word, a load no store can forward, so every packet waited here for the engine's older
  // stores to drain (10% of the engine's time in nvmf randread).
  static constexpr proto::ParseOptions kFromWire{
      .verify_icrc = true, .verify_ip_checksum = true, .defer_payload_icrc = true};
  static constexpr proto::ParseOptions kFromWireIpChecked{
      .verify_icrc = true, .verify_ip_checksum = false, .defer_payload_icrc = true};
  static constexpr proto::ParseOptions kRedirected{
      .verify_icrc = false, .verify_ip_checksum = false, .defer_payload_icrc = false};
  // A NIC with RTE_ETH_RX_OFFLOAD_IPV4_CKSUM (port.cc) checked the IPv4 header checksum already: a frame it found
  // good is not summed again, and one it found bad is dropped as the parser would drop it. Without a verdict
  // (vdevs, IPv6, a NIC without the offload) the parser sums.
  const uint64_t ip_checksum = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
  if (from_wire && ip_checksum == RTE_MBUF_F_RX_IP_CKSUM_BAD) [[unlikely]] {
    count_parse_error(proto::ParseError::kBadIpChecksum);
    rte_pktmbuf_free(m);
    return;
  }
  const std::span<const uint8_t> bytes(frame, length);
  const proto::ParseResult parsed = !from_wire ? proto::parse_packet(bytes, kRedirected)
                                    : ip_checksum == RTE_MBUF_F_RX_IP_CKSUM_GOOD
                                        ? proto::parse_packet(bytes, kFromWireIpChecked)
                                        : proto::parse_packet(bytes, kFromWire);
  if (!parsed.ok()) [[unlikely]] {
    count_parse_error(parsed.error);
    rte_pktmbuf_free(m);
    return;
  }
  const proto::Qpn qpn = parsed.packet.bth().get(proto::Bth::dest_qp);
  const EngineId owner = engine_of(qpn);
  if (owner != id_) {
    if (from_wire && owner < engine_count_) {
      if (parsed.packet.icrc_deferred && !proto::icrc_matches(parsed.packet)) return drop_bad_icrc(m);
      return redirect(owner, m);
    }
    counters_.rx_unknown_qp.add();
    rte_pktmbuf_free(m);
    return;
  }
  const QpSlot& slot = qps_[local_index_of(qpn) & qp_slot_mask_];
  if (slot.qpn != qpn || slot.endpoint.on_packet == nullptr) [[unlikely]] {
    counters_.rx_unknown_qp.add();
    rte_pktmbuf_free(m);
    return;
  }
  if (parsed.packet.icrc_deferred && !slot.endpoint.checks_deferred_icrc && !proto::icrc_matches(parsed.packet))
      [[unlikely]] {
    return drop_bad_icrc(m);
  }
  counters_.rx_delivered.add();
  slot.endpoint.on_packet(slot.endpoint.self, *this, parsed.packet, p, m);
}

void EngineContext::dispatch_neighbor(PortIndex p, rte_mbuf* m, bool is_arp, bool from_wire) noexcept {
  if (id_ != 0) {  // engine 0 owns ARP/ND (neighbor.h)
    if (from_wire) return redirect(0, m);
    rte_pktmbuf_free(m);
    return;
  }
  if (is_arp) {
    handle_arp(*this, *neighbors_, ports_[p], m);
  } else {
    handle_icmpv6(*this, *neighbors_, ports_[p], m);
  }
}

void EngineContext::drop_bad_icrc(rte_mbuf* m) noexcept {
  count_parse_error(proto::ParseError::kBadIcrc);
  rte_pktmbuf_free(m);
}

void EngineContext::count_parse_error(proto::ParseError e) noexcept {
  if (is_not_roce(e)) {
    counters_.rx_not_roce.add();
  } else {
    counters_.rx_drop[static_cast<std::size_t>(e)].add();
  }
}

void EngineContext::redirect(EngineId owner, rte_mbuf* m) noexcept {
  RedirectBatch& batch = redirect_batches_[owner];
  batch.mbufs[batch.count++] = m;
  if (batch.count == kMaxBurst) flush_redirect(owner);
}

void EngineContext::flush_redirect(EngineId owner) noexcept {
  RedirectBatch& batch = redirect_batches_[owner];
  if (batch.count == 0) return;
  // Hands the mbufs to their owner. The ring's enqueue publishes its tail with a release and the owner's
  // dequeue reads it with an acquire, so the packet bytes and mbuf fields written here are visible there.
  const unsigned enqueued = ring_sp_enqueue_burst(redirect_out_[owner], batch.mbufs.data(), batch.count);
  counters_.redirect_enqueued.add(enqueued);
  if (enqueued < batch.count) [[unlikely]] {
    counters_.redirect_ring_full.add(batch.count - enqueued);
    rte_pktmbuf_free_bulk(batch.mbufs.data() + enqueued, batch.count - enqueued);
  }
  batch.count = 0;
}

uint32_t EngineContext::drain_redirects() noexcept {
  uint32_t total = 0;
  for (EngineId source = 0; source < engine_count_; ++source) {
    if (source == id_) continue;
    rte_mbuf* pkts[kMaxBurst];
    const unsigned n = ring_sc_dequeue_burst(redirect_in_[source], pkts, rx_burst_);
    for (unsigned i = 0; i < n; ++i) dispatch(port_index_of_id_[pkts[i]->port], pkts[i], false);
    flush_freed_mbufs();
    total += n;
  }
  if (total != 0) counters_.redirect_received.add(total);
  return total;
}

uint32_t EngineContext::poll_pollers() noexcept {
  uint32_t work = 0;
  for (std::size_t i = 0; i < poller_count_; ++i) work += pollers_[i].poll(pollers_[i].self, *this) ? 1 : 0;
  return work;
}

void EngineContext::capture(PortIndex p, CaptureDirection direction, const rte_mbuf* m) noexcept {
  if (capture_->push(p, direction, m, rte_rdtsc())) {
    counters_.capture_packets.add();
  } else {
    counters_.capture_drops.add();
  }
}

void EngineContext::idle(uint32_t work) noexcept {
  if (work != 0 || busy_poll_) {
    idle_iterations_ = 0;
    return;
  }
  if (idle_iterations_ < kIdlePauseIterations) {
    if (++idle_iterations_ > kIdleSpinIterations) rte_pause();
    return;
  }
  // The one syscall on the datapath, and only when there has been nothing to do for a while.
  const timespec pause{0, kIdleSleepNanoseconds};
  nanosleep(&pause, nullptr);
}

// ---------------------------------------------------------------------------------------------------------
// TX

namespace {

// PREFETCHW: the line comes in exclusive, so the stores that build the frame into it need no ownership request when
// they come. GCC emits it for __builtin_prefetch(p, 1) only with -mprfchw, which the baseline -march lacks, and
// otherwise a read prefetch, which leaves the line shared with the core that read it last (the other engine, which
// received the frame built in it before): each store of the new frame then waited for that core to give the line
// up. Every x86-64 CPU decodes the instruction: AMD since K8 and Intel since Broadwell prefetch for writing, and
// older Intel cores treat it as a NOP.
inline void prefetch_for_write(const void* p) noexcept {
#if defined(__x86_64__)
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1);
#endif
}

}  // namespace

rte_mbuf* EngineContext::alloc_mbuf() noexcept {
  if (mbuf_stash_count_ == 0 && !refill_mbuf_stash()) [[unlikely]] {
    counters_.mbuf_alloc_failures.add();
    return nullptr;
  }
  rte_mbuf* const m = mbuf_stash_[--mbuf_stash_count_];
  // The frame the next call returns, prefetched for writing: mbufs circulate between engines (the receiver frees
  // what the sender allocated), so its data lines are usually in another core's cache, and a packet built into
  // them would wait for each line in turn. Three lines cover a 64 B WRITE's frame; its header was reset locally
  // when the stash was filled. (uroce_bench_latency, two engines: half round trip 1.95 -> 1.67 us.)
  if (mbuf_stash_count_ != 0) {
    const auto* next = rte_pktmbuf_mtod(mbuf_stash_[mbuf_stash_count_ - 1], const char*);
    constexpr std::ptrdiff_t kLine = RTE_CACHE_LINE_SIZE;
    prefetch_for_write(next);
    prefetch_for_write(next + kLine);
    prefetch_for_write(next + 2 * kLine);
  }
  return m;
}

bool EngineContext::refill_mbuf_stash() noexcept {
  if (rte_pktmbuf_alloc_bulk(pool_, mbuf_stash_.data(), kMbufStash) == 0) {
    mbuf_stash_count_ = kMbufStash;
    return true;
  }
  // Fewer than a stash's worth left (the bulk call takes all or nothing): the pool's last mbufs one at a time.
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) return false;
  mbuf_stash_[0] = m;
  mbuf_stash_count_ = 1;
  return true;
}

void EngineContext::free_after_burst(rte_mbuf* m) noexcept {
  freed_mbufs_[freed_mbuf_count_++] = m;
  if (freed_mbuf_count_ == freed_mbufs_.size()) flush_freed_mbufs();
}

void EngineContext::owe_completion_events(CompletionQueue& cq) noexcept {
  if (owed_event_count_ == owed_events_.size()) [[unlikely]] {
    cq.publish_events();  // a full list: this one at once
    return;
  }
  owed_events_[owed_event_count_++] = &cq;
}

void EngineContext::publish_completion_events() noexcept {
  for (uint16_t i = 0; i < owed_event_count_; ++i) owed_events_[i]->publish_events();
  owed_event_count_ = 0;
}

// A received frame this engine's pool lent, and that nothing else holds (one reference, one segment, its own
// buffer), goes straight back into the TX stash while it has room, reset as rte_pktmbuf_alloc would hand it out:
// no mempool round trip (free, then a bulk allocation), and the next frame built is one whose lines this core
// has just read. The rest are freed in one bulk call.
void EngineContext::flush_freed_mbufs() noexcept {
  if (freed_mbuf_count_ == 0) return;
  uint16_t to_free = 0;
  for (uint16_t i = 0; i < freed_mbuf_count_; ++i) {
    rte_mbuf* const m = freed_mbufs_[i];
    if (mbuf_stash_count_ < mbuf_stash_.size() && m->pool == pool_ && m->next == nullptr && RTE_MBUF_DIRECT(m) &&
        rte_mbuf_refcnt_read(m) == 1) {
      rte_pktmbuf_reset(m);
      mbuf_stash_[mbuf_stash_count_++] = m;
    } else {
      freed_mbufs_[to_free++] = m;
    }
  }
  if (to_free != 0) rte_pktmbuf_free_bulk(freed_mbufs_.data(), to_free);
  freed_mbuf_count_ = 0;
}

bool EngineContext::send(PortIndex port, rte_mbuf* m) noexcept {
  assert(port < tx_.size());
  TxQueue& q = tx_[port];
  if (capture_ != nullptr) capture(port, CaptureDirection::kOutbound, m);
  if (q.backlog_size != 0) return push_backlog(q, m);  // stay behind the packets already waiting
  q.batch[q.count++] = m;
  if (q.count == tx_burst_) flush_tx(q);
  return true;
}

uint32_t EngineContext::flush_all_tx() noexcept {
  uint32_t sent = 0;
  for (TxQueue& q : tx_) sent += flush_tx(q);
  return sent;
}

uint32_t EngineContext::flush_tx(TxQueue& q) noexcept {
  uint32_t sent = 0;
  if (q.backlog_size != 0) {
    sent += drain_backlog(q);
    if (q.backlog_size != 0) {  // the queue is still full: the batch waits behind the backlog
      for (uint16_t i = 0; i < q.count; ++i) push_backlog(q, q.batch[i]);
      q.count = 0;
      return sent;
    }
  }
  if (q.count == 0) return sent;
  const uint16_t n = transmit(q, q.batch.data(), q.count);
  for (uint16_t i = n; i < q.count; ++i) push_backlog(q, q.batch[i]);
  q.count = 0;
  return sent + n;
}

uint32_t EngineContext::drain_backlog(TxQueue& q) noexcept {
  const auto capacity = static_cast<uint32_t>(q.backlog.size());
  uint32_t sent = 0;
  for (unsigned round = 0; round < kBacklogRoundsPerFlush && q.backlog_size != 0; ++round) {
    uint32_t chunk = capacity - q.backlog_head;  // contiguous part of the circular backlog
    if (chunk > q.backlog_size) chunk = q.backlog_size;
    if (chunk > tx_burst_) chunk = tx_burst_;
    const uint16_t n = transmit(q, q.backlog.data() + q.backlog_head, static_cast<uint16_t>(chunk));
    q.backlog_head += n;
    if (q.backlog_head == capacity) q.backlog_head = 0;
    q.backlog_size -= n;
    sent += n;
    if (n < chunk) break;  // the queue is full again
  }
  return sent;
}

uint16_t EngineContext::transmit(TxQueue& q, rte_mbuf** pkts, uint16_t n) noexcept {
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < n; ++i) bytes += pkts[i]->pkt_len;  // before the burst: sent mbufs are not ours after
  const uint16_t sent = rte_eth_tx_burst(q.port_id, id_, pkts, n);
  for (uint16_t i = sent; i < n; ++i) bytes -= pkts[i]->pkt_len;
  if (sent != 0) {
    const PortIndex p = port_index_of_id_[q.port_id];
    counters_.tx_packets.add(sent);
    counters_.tx_bytes.add(bytes);
    port_counters_[p].tx_packets.add(sent);
    port_counters_[p].tx_bytes.add(bytes);
  }
  return sent;
}

bool EngineContext::push_backlog(TxQueue& q, rte_mbuf* m) noexcept {
  const auto capacity = static_cast<uint32_t>(q.backlog.size());
  if (q.backlog_size == capacity) [[unlikely]] {
    counters_.tx_backlog_drops.add();
    rte_pktmbuf_free(m);
    return false;
  }
  uint32_t slot = q.backlog_head + q.backlog_size;
  if (slot >= capacity) slot -= capacity;
  q.backlog[slot] = m;
  ++q.backlog_size;
  return true;
}

void EngineContext::release_held_mbufs() noexcept {
  flush_freed_mbufs();
  rte_pktmbuf_free_bulk(mbuf_stash_.data(), mbuf_stash_count_);
  mbuf_stash_count_ = 0;
  for (TxQueue& q : tx_) {
    rte_pktmbuf_free_bulk(q.batch.data(), q.count);
    q.count = 0;
    for (; q.backlog_size != 0; --q.backlog_size) {
      rte_pktmbuf_free(q.backlog[q.backlog_head]);
      if (++q.backlog_head == q.backlog.size()) q.backlog_head = 0;
    }
  }
  for (RedirectBatch& b : redirect_batches_) {
    rte_pktmbuf_free_bulk(b.mbufs.data(), b.count);
    b.count = 0;
  }
  for (auto& f : faults_) {
    rte_mbuf* held = nullptr;
    if (f->release_held(&held) != 0) rte_pktmbuf_free(held);
  }
  for (auto& l : links_) l->clear();
}

// ---------------------------------------------------------------------------------------------------------
// Control side

Engine::Engine(const EngineSetup& setup) : context_(setup) {}

Engine::~Engine() { (void)stop(); }

int Engine::lcore_main(void* engine) {
  static_cast<Engine*>(engine)->context_.run();
  return 0;
}

Status Engine::launch() {
  const std::lock_guard lock(control_mutex_);
  const unsigned lc = lcore();
  if (state_ != State::kIdle) return Status::error("engine " + std::to_string(id()) + " was already launched");
  if (!rte_lcore_is_enabled(lc) || lc == rte_get_main_lcore()) {
    return Status::error("engine " + std::to_string(id()) + ": EAL lcore " + std::to_string(lc) +
                         " is not a worker lcore (the EAL was started for fewer engines)");
  }
  if (rte_eal_get_lcore_state(lc) != WAIT)
    return Status::error("engine " + std::to_string(id()) + ": lcore " + std::to_string(lc) + " is busy");
  if (const int rc = rte_eal_remote_launch(&Engine::lcore_main, this, lc); rc != 0)
    return Status::error("engine " + std::to_string(id()) + ": rte_eal_remote_launch: " + rte_strerror(-rc));
  state_ = State::kRunning;
  return {};
}

Status Engine::stop() {
  EngineCommand command;
  command.run = [](void*, EngineContext& ctx) { ctx.running_ = false; };
  {
    const std::lock_guard lock(control_mutex_);
    if (state_ == State::kIdle) state_ = State::kStopped;
    if (state_ != State::kRunning) return {};
    if (Status s = post_locked(command); !s.ok()) return s;
    state_ = State::kStopping;  // no command can be posted after the stop
  }
  wait_until_done(command);
  (void)rte_eal_wait_lcore(lcore());
  const std::lock_guard lock(control_mutex_);
  state_ = State::kStopped;
  return {};
}

Status Engine::post_locked(EngineCommand& command) {
  // SP enqueue under control_mutex_; the ring's release pairs with the engine's acquire on dequeue.
  if (!ring_sp_enqueue(context_.mailbox_, &command))
    return Status::error("engine " + std::to_string(id()) + ": the mailbox is full");
  return {};
}

void Engine::wait_until_done(const EngineCommand& command) {
  // The engine answers within one loop iteration (or one backoff sleep): spin briefly, then sleep.
  for (unsigned spins = 0; !command_is_done(command); ++spins) {
    if (spins < 1000) {
      rte_pause();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

Status Engine::post(EngineCommand& command) {
  // An engine never blocks: waiting on itself would deadlock, and waiting on another engine stalls its datapath.
  if (rte_lcore_id() != LCORE_ID_ANY && rte_lcore_id() != rte_get_main_lcore())
    return Status::error("engine " + std::to_string(id()) + ": commands are posted from control threads, not engines");
  for (;;) {
    {
      const std::lock_guard lock(control_mutex_);
      if (state_ == State::kRunning && ring_sp_enqueue(context_.mailbox_, &command))
        return {};  // release: pairs with the engine's dequeue
      // Refused means inert: callers then free what the engine used (a destroyed QP's queues, a resized CQ's old
      // ring, memory a deregistration waits on). A stopping engine still finishes the iteration its stop command
      // runs in, so the refusal waits until stop() has seen it leave its loop.
      if (state_ != State::kRunning && state_ != State::kStopping)
        return Status::error("engine " + std::to_string(id()) + " is not running");
    }
    // Full, or stopping: each queued command is answered within one loop iteration. A caller that waits for its
    // command (a deregistration's no-op among them) must not skip the engine for that.
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

Status Engine::execute(EngineCommand& command) {
  if (Status s = post(command); !s.ok()) return s;
  wait_until_done(command);
  return {};
}

Status Engine::register_qp(proto::Qpn qpn, QpEndpoint endpoint) {
  if (engine_of(qpn) != id()) {
    return Status::error("QPN " + std::to_string(qpn.value()) + " belongs to engine " + std::to_string(engine_of(qpn)) +
                         ", not engine " + std::to_string(id()));
  }
  if (endpoint.on_packet == nullptr) return Status::error("register_qp: the endpoint has no packet handler");
  const uint32_t slot = local_index_of(qpn) & context_.qp_slot_mask_;  // the table's size never changes
  std::optional<proto::Qpn> taken;
  Status s = call([&](EngineContext& ctx) {
    EngineContext::QpSlot& entry = ctx.qps_[slot];
    if (entry.endpoint.on_packet != nullptr) {
      taken = entry.qpn;
    } else {
      entry = {endpoint, qpn};
    }
  });
  if (!s.ok()) return s;
  if (taken) {
    return Status::error("QPN " + std::to_string(qpn.value()) + ": its slot " + std::to_string(slot) + " serves QPN " +
                         std::to_string(taken->value()));
  }
  return {};
}

Status Engine::unregister_qp(proto::Qpn qpn) {
  if (engine_of(qpn) != id())
    return Status::error("QPN " + std::to_string(qpn.value()) + " is not on engine " + std::to_string(id()));
  const uint32_t slot = local_index_of(qpn) & context_.qp_slot_mask_;
  bool registered = false;
  Status s = call([&](EngineContext& ctx) {
    EngineContext::QpSlot& entry = ctx.qps_[slot];
    registered = entry.qpn == qpn && entry.endpoint.on_packet != nullptr;
    if (registered) entry = {};
  });
  if (!s.ok()) return s;
  if (!registered) return Status::error("QPN " + std::to_string(qpn.value()) + " is not registered");
  return {};
}

Status Engine::add_poller(Poller poller) {
  if (poller.poll == nullptr) return Status::error("add_poller: no poll function");
  bool full = false;
  Status s = call([&](EngineContext& ctx) {
    full = ctx.poller_count_ == kMaxPollers;
    if (full) return;
    // In order of registration, except that a poller without after_others goes ahead of those with it.
    std::size_t at = ctx.poller_count_;
    while (!poller.after_others && at > 0 && ctx.pollers_[at - 1].after_others) {
      ctx.pollers_[at] = ctx.pollers_[at - 1];
      --at;
    }
    ctx.pollers_[at] = poller;
    ++ctx.poller_count_;
  });
  if (!s.ok()) return s;
  if (full)
    return Status::error("engine " + std::to_string(id()) + " already has " + std::to_string(kMaxPollers) + " pollers");
  return {};
}

Status Engine::remove_poller(void* self) {
  bool found = false;
  Status s = call([&](EngineContext& ctx) {
    for (std::size_t i = 0; i < ctx.poller_count_; ++i) {
      if (ctx.pollers_[i].self != self) continue;
      // Shifted, not swapped with the last: the order is kept (Poller::after_others).
      std::copy(ctx.pollers_.begin() + static_cast<std::ptrdiff_t>(i + 1),
                ctx.pollers_.begin() + static_cast<std::ptrdiff_t>(ctx.poller_count_),
                ctx.pollers_.begin() + static_cast<std::ptrdiff_t>(i));
      --ctx.poller_count_;
      found = true;
      return;
    }
  });
  if (!s.ok()) return s;
  if (!found) return Status::error("remove_poller: no such poller");
  return {};
}

}  // namespace uroce::dataplane
