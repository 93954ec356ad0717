// RcTransport: the RC transport's control side, called from API threads under its mutex. QPs created, connected
// and destroyed on their engines (commands), memory registration in the shared memory table, doorbells, and the
// reports behind uroce-stat. The per-QP datapath is in rc_queue_pair.cc, the per-engine poller in
// engine_transport.cc.
#include "dataplane/rc_transport.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <string>
#include <thread>

#include <arpa/inet.h>

#include "proto/entropy.h"

namespace uroce::dataplane {

namespace {

constexpr uint32_t kMemorySlots = 1u << 16;

}  // namespace

RcTransport::RcTransport(Dataplane& dataplane) : dataplane_(dataplane), memory_(kMemorySlots) {
  key_generation_ = static_cast<uint8_t>(proto::random_u32());
}

Result<std::unique_ptr<RcTransport>> RcTransport::start(Dataplane& dataplane) {
  std::unique_ptr<RcTransport> t(new RcTransport(dataplane));
  const uint32_t max_qps = dataplane.config().engine.max_qps_per_engine;
  t->qp_table_size_ = qp_table_size(max_qps);
  const uint32_t generations = (kQpnLocalMask + 1) / t->qp_table_size_;
  for (EngineId e = 0; e < dataplane.engine_count(); ++e) {
    t->engines_.push_back(std::make_unique<EngineTransport>(e, t->memory_, max_qps, dataplane.port_count()));
    QpnSpace& space = t->qpn_spaces_.emplace_back();
    space.in_use.assign(max_qps, false);
    space.in_use[0] = true;              // slot 0 serves no QP (it holds QPN 0 on engine 0)
    if (e == 0) space.in_use[1] = true;  // QPN 1 is the GSI QP (connection management)
    space.next_generation.resize(max_qps);
    proto::random_bytes(space.next_generation.data(), space.next_generation.size() * sizeof(uint32_t));
    for (uint32_t& g : space.next_generation) g %= generations;
    const Status s = dataplane.engine(e).add_poller(
        Poller{.poll = &EngineTransport::poll, .self = t->engines_.back().get(), .after_others = true});
    if (!s.ok()) return Status::error("RC transport on engine " + std::to_string(e) + ": " + s.message());
  }
  RcTransport* transport = t.get();
  publish_qp_source(transport, QpSource{[transport] { return transport->qp_numbers(); },
                                        [transport](uint32_t qpn) { return transport->report_qp(qpn); }});
  return t;
}

RcTransport::~RcTransport() {
  withdraw_qp_source(this);  // first, and not under mutex_: a telemetry call holds its lock, then takes mutex_
  for (std::size_t e = 0; e < engines_.size(); ++e) {
    (void)dataplane_.engine(static_cast<EngineId>(e)).remove_poller(engines_[e].get());
  }
  for (auto& qp : qps_) (void)dataplane_.engine(engine_of(qp->qpn())).unregister_qp(qp->qpn());
}

Result<RcQueuePair*> RcTransport::create_qp(EngineId engine, const RcQueuePairSetup& setup) {
  if (engine >= engines_.size()) return Status::error("no engine " + std::to_string(engine));
  if (setup.port >= dataplane_.port_count()) return Status::error("no port " + std::to_string(setup.port));
  if (setup.send_queue == nullptr || setup.receive_queue == nullptr || setup.send_cq == nullptr ||
      setup.receive_cq == nullptr)
    return Status::error("a QP needs a send queue, a receive queue and two completion queues");
  if (setup.receive_limit_events != nullptr && !setup.receive_queue_shared)
    return Status::error("a receive limit event needs a shared receive queue");
  const uint32_t sq = setup.send_queue->capacity();
  if (sq == 0 || (sq & (sq - 1)) != 0) return Status::error("send queue capacity must be a power of two");
  std::lock_guard lock(mutex_);
  QpnSpace& space = qpn_spaces_[engine];
  for (const auto now = std::chrono::steady_clock::now();
       !space.time_wait.empty() && space.time_wait.front().first <= now; space.time_wait.pop_front()) {
    space.waiting.erase(space.waiting.find(space.time_wait.front().second));
  }
  // The first free slot from a random one on (so the QPN is not predictable), wrapping around, whose next number
  // is not in time-wait; if every free slot's is, the first free slot's (the number that slot used longest ago).
  const auto slots = static_cast<uint32_t>(space.in_use.size());
  const uint32_t start = proto::random_u32() % slots;
  std::optional<uint32_t> slot;
  std::optional<uint32_t> first_free;
  for (uint32_t i = 0; i < slots && !slot; ++i) {
    const uint32_t candidate = (start + i) % slots;
    if (space.in_use[candidate]) continue;
    if (!first_free) first_free = candidate;
    if (!space.waiting.contains(next_local_index(space, candidate, false))) slot = candidate;
  }
  if (!slot) slot = first_free;
  if (!slot) return Status::error("engine " + std::to_string(engine) + " has no free QP");
  space.in_use[*slot] = true;
  const proto::Qpn qpn = make_qpn(engine, next_local_index(space, *slot, true));
  auto qp = std::make_unique<RcQueuePair>(qpn, setup, *engines_[engine]);
  const Status s = dataplane_.engine(engine).register_qp(qpn, QpEndpoint{&RcQueuePair::on_packet, qp.get(), true});
  if (!s.ok()) {
    space.in_use[*slot] = false;
    return s;
  }
  qps_.push_back(std::move(qp));
  return qps_.back().get();
}

// The QP's share of config.congestion (rocev2.md §7), once its path MTU is known.
static void set_congestion_control(proto::RcQpAttributes& attrs, const config::CongestionConfig& congestion,
                                   const Port& port) {
  attrs.max_packets_in_flight =
      congestion.max_bytes_in_flight == 0 ? 0 : std::max(1u, congestion.max_bytes_in_flight / attrs.path_mtu);
  attrs.slow_restart = congestion.slow_restart;
  const config::NotificationPointConfig& np = congestion.notification_point;
  attrs.notify_congestion = np.enabled;
  // config/ caps the *_us keys at 4 s, so these products fit the 32-bit nanosecond fields.
  attrs.min_time_between_cnps_ns = np.min_time_between_cnps_us * 1000;
  attrs.cnp_traffic_class =
      static_cast<uint8_t>(np.cnp_dscp << 2 | (congestion.ecn ? proto::kEcnEct0 : proto::kEcnNotEct));
  const config::ReactionPointConfig& rp = congestion.reaction_point;
  attrs.rate_control = rp.enabled;
  proto::DcqcnParameters& d = attrs.dcqcn;
  constexpr uint32_t kUnknownLinkMbps = 100'000;
  d.max_rate_mbps =
      rp.max_rate_mbps != 0 ? rp.max_rate_mbps : (port.link_speed_mbps != 0 ? port.link_speed_mbps : kUnknownLinkMbps);
  d.min_rate_mbps = std::min(rp.min_rate_mbps, d.max_rate_mbps);
  d.ai_rate_mbps = rp.ai_rate_mbps;
  d.hai_rate_mbps = rp.hai_rate_mbps;
  d.time_reset_ns = rp.time_reset_us * 1000;
  d.byte_reset = rp.byte_reset;
  d.threshold = rp.threshold;
  d.min_dec_fac = rp.min_dec_fac;
  d.dce_tcp_g = rp.dce_tcp_g;
  d.dce_tcp_rtt_ns = rp.dce_tcp_rtt_us * 1000;
  d.initial_alpha_value = rp.initial_alpha_value;
  d.rate_reduce_monitor_period_ns = rp.rate_reduce_monitor_period_us * 1000;
  d.rate_to_set_on_first_cnp_mbps = rp.rate_to_set_on_first_cnp_mbps;
}

Status RcTransport::connect(RcQueuePair& qp, const RcPeer& peer, const proto::RcQpAttributes& attributes,
                            std::chrono::milliseconds resolve_timeout) {
  if (peer.local_port) {
    if (*peer.local_port >= dataplane_.port_count())
      return Status::error("no port " + std::to_string(*peer.local_port));
    // The engine reads the port only once the QP is connected (tx_commit): the connect
    // command below publishes this store to it. report_qp() reads it too, on the engine under mutex_.
    const std::lock_guard lock(mutex_);
    qp.setup_.port = *peer.local_port;
  }
  const Port& port = dataplane_.port(qp.setup().port);
  proto::MacAddr mac;
  if (peer.mac) {
    mac = *peer.mac;
  } else {
    Result<proto::MacAddr> resolved = dataplane_.resolve(qp.setup().port, peer.ip, resolve_timeout);
    if (!resolved.ok()) return Status::error("QP " + std::to_string(qp.qpn().value()) + ": " + resolved.error());
    mac = resolved.value();
  }
  // Our source address: the port's first address of the peer's IP version.
  proto::PacketSpec spec;
  if (peer.ip.is_v6) {
    if (port.ipv6.empty()) return Status::error("port " + port.name + " has no IPv6 address for an IPv6 peer");
    std::memcpy(spec.src_gid.data(), port.ipv6.front().data(), 16);
  } else {
    if (port.ipv4.empty()) return Status::error("port " + port.name + " has no IPv4 address for an IPv4 peer");
    spec.src_gid = proto::gid_from_ipv4(port.ipv4.front());
  }
  spec.dst_gid = gid_of(peer.ip);
  spec.src_mac = port.mac;
  spec.dst_mac = mac;
  spec.hop_limit = peer.hop_limit;
  const config::CongestionConfig& congestion =
      qp.setup().congestion != nullptr ? *qp.setup().congestion : dataplane_.config().congestion;
  // ECN is the traffic class's low two bits: ours to set, whatever DSCP the path asked for (RFC 3168).
  spec.traffic_class = static_cast<uint8_t>((peer.traffic_class & ~proto::kEcnCe) |
                                            (congestion.ecn ? proto::kEcnEct0 : proto::kEcnNotEct));
  spec.udp_src_port = proto::roce_udp_source_port(qp.qpn(), peer.qpn);
  spec.dest_qp = peer.qpn;
  proto::PacketTemplate headers;
  headers.init(spec);

  proto::RcQpAttributes attrs = attributes;
  attrs.local_qpn = qp.qpn();
  attrs.remote_qpn = peer.qpn;
  attrs.receive_psn = peer.psn;
  attrs.path_mtu = std::min(attributes.path_mtu, peer.path_mtu);
  attrs.max_rd_atomic = std::min(attributes.max_rd_atomic, peer.max_dest_rd_atomic);
  attrs.access = qp.setup().access;
  attrs.zero_copy_min_payload = dataplane_.config().engine.zero_copy_threshold;
  set_congestion_control(attrs, congestion, port);
  if (attrs.path_mtu < 256 || attrs.path_mtu > 4096 || !std::has_single_bit(attrs.path_mtu))
    return Status::error("path MTU " + std::to_string(attrs.path_mtu) + " is not one of 256, 512, 1024, 2048, 4096");
  if (port.mtu < attrs.path_mtu + 80) {
    return Status::error("port " + port.name + " MTU " + std::to_string(port.mtu) + " cannot carry path MTU " +
                         std::to_string(attrs.path_mtu));
  }
  {
    const std::lock_guard lock(mutex_);  // report_qp() reads them under it
    qp.peer_ = peer;
    qp.peer_->mac = mac;  // as resolved: what the QP's packets go to (its report shows it)
  }
  return dataplane_.engine(engine_of(qp.qpn())).call([&](EngineContext& ctx) {
    qp.ctx_ = &ctx;
    qp.qp_.connect(attrs, headers, qp.setup().send_queue->data(), qp.setup().send_queue->capacity(), &qp);
    // A flush the engine took while the connect was on its way (NdkFlush may race a connect, ndkpi.md §10.1; the
    // CM exchange or an address lookup comes between the two) stays in force: the QP goes to the error state
    // rather than to RTS with every receive still flushed on each poll.
    if (qp.flushed_before_connect_) {
      qp.flushed_before_connect_ = false;
      qp.qp_.enter_error(proto::CompletionStatus::kWorkRequestFlushed);
    }
    qp.published_sq_head_ = qp.qp_.send_queue_head();
    engines_[engine_of(qp.qpn())]->activate(qp);
  });
}

Status RcTransport::destroy_qp(RcQueuePair* qp) {
  std::lock_guard lock(mutex_);
  const auto it = std::find_if(qps_.begin(), qps_.end(), [&](const auto& p) { return p.get() == qp; });
  if (it == qps_.end()) return Status::error("no such QP");
  const EngineId e = engine_of(qp->qpn());
  Status s = dataplane_.engine(e).unregister_qp(qp->qpn());
  if (!s.ok()) return s;
  // Off the active list, on the engine, before the memory goes.
  s = dataplane_.engine(e).call([&](EngineContext& ctx) {
    qp->ctx_ = &ctx;
    qp->flush_for_close();
    qp->sync_counters(ctx.counters());
    engines_[e]->forget(*qp, ctx);
  });
  if (!s.ok()) return s;
  QpnSpace& space = qpn_spaces_[e];
  const uint32_t local = local_index_of(qp->qpn());
  space.in_use[qp_slot_of(qp->qpn(), qp_table_size_)] = false;  // free at once: its next number is another
  space.time_wait.emplace_back(std::chrono::steady_clock::now() + kQpnTimeWait, local);
  space.waiting.insert(local);
  qps_.erase(it);
  return Status{};
}

std::optional<std::size_t> RcTransport::active_qps(EngineId engine) {
  std::size_t count = 0;
  if (!dataplane_.engine(engine).call([&](EngineContext&) { count = engines_[engine]->active_count(); }).ok())
    return std::nullopt;
  return count;
}

uint32_t RcTransport::next_local_index(QpnSpace& space, uint32_t slot, bool take) {
  const uint32_t generations = (kQpnLocalMask + 1) / qp_table_size_;
  uint32_t& generation = space.next_generation[slot];
  // Never the local index kQpnLocalMask: on engine 15 it would make the multicast QPN 0xFFFFFF.
  if (generation * qp_table_size_ + slot == kQpnLocalMask) generation = (generation + 1) % generations;
  const uint32_t local = generation * qp_table_size_ + slot;
  if (take) generation = (generation + 1) % generations;
  return local;
}

RcTransport::Usage RcTransport::usage() {
  std::lock_guard lock(mutex_);
  // Slot 0 is never handed out; every other slot below next_memory_slot_ is in use unless it is on the free list.
  return {static_cast<uint32_t>(qps_.size()), static_cast<uint32_t>(next_memory_slot_ - 1 - free_memory_slots_.size())};
}

// A free slot with the next key byte: a token that no earlier registration of the
// slot had, so stale tokens never match. Call with mutex_ held.
std::optional<uint32_t> RcTransport::new_token_locked() {
  reclaim_drained_locked();
  uint32_t slot;
  if (!free_memory_slots_.empty()) {
    slot = free_memory_slots_.back();
    free_memory_slots_.pop_back();
  } else if (next_memory_slot_ < kMemorySlots) {
    slot = next_memory_slot_++;
  } else {
    return std::nullopt;
  }
  return slot << 8 | ++key_generation_;
}

Result<uint32_t> RcTransport::register_memory(uint64_t addr, uint64_t length, uint32_t access, uint32_t pd,
                                              MemoryKind kind) {
  if (length == 0 || addr + length < addr) return Status::error("memory range is empty or wraps");
  // Remote write/atomic access requires local write too (verbs rule, rocev2.md §5).
  if ((access & (proto::kAccessRemoteWrite | proto::kAccessRemoteAtomic)) && !(access & proto::kAccessLocalWrite))
    return Status::error("remote write or atomic access requires local write access");
  std::lock_guard lock(mutex_);
  const std::optional<uint32_t> token = new_token_locked();
  if (!token) return Status::error("no free memory registration slots");
  MemoryRegion region;
  region.addr = addr;
  region.length = length;
  region.access = access;
  region.pd = pd;
  region.token = *token;
  region.kind = kind;
  memory_.insert(region);  // the release in the slot's seqlock publishes it to every engine
  return region.token;
}

Result<uint32_t> RcTransport::reserve_memory(MemoryKind kind, uint32_t pd) {
  if (kind != MemoryKind::kFastRegisterRegion && kind != MemoryKind::kWindow)
    return Status::error("only fast-register regions and memory windows are reserved");
  std::lock_guard lock(mutex_);
  const std::optional<uint32_t> token = new_token_locked();
  if (!token) return Status::error("no free memory registration slots");
  MemoryRegion region;
  region.pd = pd;
  region.token = *token;
  region.kind = kind;
  region.valid = false;
  if (kind == MemoryKind::kFastRegisterRegion) memory_.prepare_page_map(region.token);
  memory_.insert(region);
  return region.token;
}

Status RcTransport::deregister_memory(uint32_t token) { return retire_memory(token, true); }

void RcTransport::release_memory_slot(uint32_t token) { (void)retire_memory(token, false); }

Status RcTransport::retire_memory(uint32_t token, bool exact_token) {
  bool engine_may_hold = false;
  bool windows = false;
  {
    std::lock_guard lock(mutex_);
    const uint32_t slot = MemoryTable::index_of(token);
    if (slot == 0 || slot >= next_memory_slot_) return Status::error("no such registration");
    if (exact_token) {
      if (!memory_.read_slot(token)) return Status::error("no such registration");
      memory_.erase(token);  // no engine resolves or pins it from now on (MemoryTable::pin_for_tx)
    } else {
      memory_.erase_slot(slot);  // a fast-register region's or a window's key byte moves on with each use
    }
    engine_may_hold = memory_.engine_may_hold(token);
    windows = memory_.windows_may_exist(token);
    if (memory_.tx_pins(token) != 0) {
      draining_memory_tokens_.push_back(token);
    } else {
      free_memory_slots_.push_back(slot);
    }
  }
  // An engine resolves a key and then copies: one that resolved this token just before the erase may still be
  // placing a WRITE packet or a READ response, or filling a READ response from the memory. Commands run between
  // loop iterations, so once a no-op has run on every engine, each has finished the packet it was on, and every
  // later packet finds the token invalid (the responder checks the R_Key, the requester and the responder the
  // L_Keys of the bytes they place, on every packet). Then the memory is the caller's again. An engine that is not
  // running, or the caller's own, fails the call and is skipped. Memory no engine has ever read needs no wait
  // (MemoryTable::engine_may_hold): closing 65k MRs never used took 8.4 s with the wait (ContractRows, a full
  // memory table), 68 ms without. Fast-register MRs and windows end the same way when closed: their slot may be
  // valid still, and is reused by the next reservation.
  const auto quiesce = [this] {
    for (EngineId e = 0; e < dataplane_.engine_count(); ++e) (void)dataplane_.engine(e).call([](EngineContext&) {});
  };
  if (windows) {
    // A window lies in its region (IBTA 10.6.7.2; ndkpi.md §9.6) and must not outlive its registration. After
    // the first round of no-ops every bind that found the region valid has written its window (later ones fail);
    // the windows are then invalidated, and after the second round no engine is still inside a packet that
    // resolved the region or one of its windows.
    quiesce();
    {
      std::lock_guard lock(mutex_);
      memory_.invalidate_windows_of(token, next_memory_slot_);
    }
    quiesce();
  } else if (engine_may_hold) {
    quiesce();
  }
  return Status{};
}

// Moves deregistered slots whose last zero-copy mbuf has been freed to the free list. Call with mutex_ held.
void RcTransport::reclaim_drained_locked() {
  std::erase_if(draining_memory_tokens_, [this](uint32_t token) {
    if (memory_.tx_pins(token) != 0) return false;
    free_memory_slots_.push_back(MemoryTable::index_of(token));
    return true;
  });
}

bool RcTransport::memory_in_flight(uint32_t token) {
  std::lock_guard lock(mutex_);
  reclaim_drained_locked();
  return std::find(draining_memory_tokens_.begin(), draining_memory_tokens_.end(), token) !=
         draining_memory_tokens_.end();
}

void RcTransport::wait_memory_drained(uint32_t token) {
  while (memory_in_flight(token)) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

void RcTransport::ring_doorbell(RcQueuePair& qp) noexcept {
  const EngineId owner = engine_of(qp.qpn());
  EngineTransport& engine = *engines_[owner];
  // A poster on the QP's own engine (an engine poller, or a command) puts it on the active list itself: no ring,
  // and since the transport's poller runs after the other pollers (Poller::after_others), the WQE leaves in this
  // loop iteration. Nothing on the engine rings from inside EngineTransport::poll, whose loop walks that list.
  if (const EngineContext* here = EngineContext::running_here(); here != nullptr && here->id() == owner) {
    engine.activate(qp);
    return;
  }
  if (qp.claim_doorbell() && !engine.enqueue_doorbell(qp)) qp.release_doorbell();
}

void RcTransport::flush(RcQueuePair& qp) noexcept {
  qp.request_flush();
  ring_doorbell(qp);
}

Status RcTransport::post_retarget(EngineId engine, Retarget& retarget) {
  // Under the mutex that destroy_qp holds while it takes a QP off its engine: a QP listed here either is gone
  // already (dropped from the list) or is destroyed by an engine command posted after this one, which the engine
  // runs after it (the mailbox is FIFO), so the engine never touches a freed QP.
  std::lock_guard lock(mutex_);
  std::vector<RcQueuePair*>& listed = retarget.qps;
  std::sort(listed.begin(), listed.end());
  std::vector<bool> exists(listed.size());
  for (const auto& qp : qps_) {
    const auto it = std::lower_bound(listed.begin(), listed.end(), qp.get());
    if (it != listed.end() && *it == qp.get()) exists[static_cast<std::size_t>(it - listed.begin())] = true;
  }
  std::size_t kept = 0;
  for (std::size_t i = 0; i < listed.size(); ++i)
    if (exists[i]) listed[kept++] = listed[i];
  listed.resize(kept);
  retarget.command.run = [](void* arg, EngineContext&) {
    auto& r = *static_cast<Retarget*>(arg);
    for (RcQueuePair* qp : r.qps) qp->retarget_completions(r.from, r.to);
  };
  retarget.command.arg = &retarget;
  return dataplane_.engine(engine).post(retarget.command);
}

namespace {

std::string address_text(const config::IpAddress& ip) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(ip.is_v6 ? AF_INET6 : AF_INET, ip.bytes.data(), text, sizeof(text));
  return text;
}

// The state names of `rdma resource show qp`.
const char* qp_state_name(proto::QpState state) noexcept {
  switch (state) {
    case proto::QpState::kReset:
      return "RESET";
    case proto::QpState::kInit:
      return "INIT";
    case proto::QpState::kReadyToReceive:
      return "RTR";
    case proto::QpState::kReadyToSend:
      return "RTS";
    case proto::QpState::kError:
      return "ERR";
  }
  return "?";
}

}  // namespace

std::vector<uint32_t> RcTransport::qp_numbers() {
  std::lock_guard lock(mutex_);
  std::vector<uint32_t> qpns;
  qpns.reserve(qps_.size());
  for (const auto& qp : qps_) qpns.push_back(qp->qpn().value());
  return qpns;
}

std::optional<QpReport> RcTransport::report_qp(uint32_t qpn) {
  std::lock_guard lock(mutex_);  // keeps the QP from being destroyed while its engine reads it
  const auto it = std::find_if(qps_.begin(), qps_.end(), [&](const auto& qp) { return qp->qpn().value() == qpn; });
  if (it == qps_.end()) return std::nullopt;
  RcQueuePair& qp = **it;
  QpReport report;
  const EngineId engine = engine_of(qp.qpn());
  const Status read = dataplane_.engine(engine).call([&](EngineContext&) {
    const proto::RcQp& state = qp.qp_;
    const proto::RcCounters& c = state.counters();
    report.text = {{"type", "RC"},
                   {"state", qp_state_name(state.state())},
                   {"port", dataplane_.port(qp.setup().port).name},
                   {"peer", qp.peer_ ? address_text(qp.peer_->ip) : std::string()},
                   {"peer_mac", qp.peer_ ? mac_to_string(*qp.peer_->mac) : std::string()}};
    report.numbers = {{"lqpn", qpn},
                      {"rqpn", state.attributes().remote_qpn.value()},
                      {"engine", engine},
                      {"path_mtu", state.attributes().path_mtu},
                      {"sq_psn", state.next_send_psn().value()},
                      {"unacked_psn", state.oldest_unacked_psn().value()},
                      {"rq_psn", state.expected_receive_psn().value()},
                      {"rx_write_requests", c.rx_write_requests},
                      {"rx_read_requests", c.rx_read_requests},
                      {"rx_atomic_requests", c.rx_atomic_requests},
                      {"rx_send_requests", c.rx_send_requests},
                      {"retransmitted_packets", c.retransmitted_packets},
                      {"local_ack_timeout_err", c.local_ack_timeout_err},
                      {"packet_seq_err", c.packet_seq_err},
                      {"roce_slow_restart", c.roce_slow_restart},
                      {"window_packets", state.window_packets()},
                      {"out_of_sequence", c.out_of_sequence},
                      {"duplicate_request", c.duplicate_request},
                      {"rcvd_rnr_err", c.rnr_nak_received},
                      {"send_rnr_err", c.rnr_nak_sent},
                      {"rnr_nak_retry_err", c.rnr_nak_retry_err},
                      {"retry_exceeded_err", c.retry_exceeded_err},
                      {"acks_sent", c.acks_sent},
                      {"naks_sent", c.naks_sent},
                      {"implied_nak_seq_err", c.implied_nak_seq_err},
                      {"rx_qp_not_ready", c.rx_qp_not_ready}};
  });
  if (!read.ok()) return std::nullopt;
  return report;
}

}  // namespace uroce::dataplane
