// EngineTransport: the RC transport's poller on one engine. Its doorbell ring (QPs the API woke), its list of
// active QPs, and the handshake that lets a QP go quiet without losing a post.
#include <string>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ring.h>

#include "dataplane/rc_transport.h"
#include "dataplane/ring.h"

namespace uroce::dataplane {

namespace {

uint32_t next_pow2(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

EngineTransport::EngineTransport(EngineId id, MemoryTable& memory, uint32_t doorbell_capacity, std::size_t port_count)
    : memory_(memory), starved_(port_count) {
  const std::string name = "uroce_db" + std::to_string(id);
  // Many application threads ring, one engine drains: MP/SC.
  doorbells_ = rte_ring_create(name.c_str(), next_pow2(doorbell_capacity + 1), SOCKET_ID_ANY, RING_F_SC_DEQ);
  active_.reserve(doorbell_capacity);  // never grows on the datapath
  ns_per_tsc_q32_ = static_cast<uint64_t>((static_cast<unsigned __int128>(1'000'000'000) << 32) / rte_get_tsc_hz());
  tsc_per_ns_q32_ = static_cast<uint64_t>((static_cast<unsigned __int128>(rte_get_tsc_hz()) << 32) / 1'000'000'000);
  iova_is_va_ = rte_eal_iova_mode() == RTE_IOVA_VA;
}

EngineTransport::~EngineTransport() { rte_ring_free(doorbells_); }

void EngineTransport::activate(RcQueuePair& qp) noexcept {
  if (qp.active) return;
  qp.active = true;
  active_.push_back(&qp);  // capacity reserved for every QP of the engine
}

void EngineTransport::forget(RcQueuePair& qp, EngineContext& ctx) noexcept {
  qp.cancel_wake(ctx);
  if (qp.starved_) {
    // Every port's queue: the QP is in the one of the port it sent on, whatever its setup says by now.
    for (StarvedQueue& q : starved_) {
      RcQueuePair* previous = nullptr;
      for (RcQueuePair** link = &q.head; *link != nullptr; link = &(*link)->next_starved_) {
        if (*link != &qp) {
          previous = *link;
          continue;
        }
        *link = qp.next_starved_;
        if (q.tail == &qp) q.tail = previous;
        break;
      }
    }
    qp.starved_ = false;
  } else if (qp.active) {
    active_.erase(std::find(active_.begin(), active_.end(), &qp));
  }
  qp.active = false;
  // The application may not post while it closes the QP (NDK object lifetime rules),
  // so no new doorbell for it can arrive; drop those already queued.
  RcQueuePair* rung[kMaxRingBurst];
  std::vector<RcQueuePair*> others;
  while (unsigned n = ring_sc_dequeue_burst(doorbells_, rung, kMaxRingBurst)) {
    for (unsigned i = 0; i < n; ++i)
      if (rung[i] != &qp) others.push_back(rung[i]);
  }
  for (RcQueuePair* o : others) {
    o->release_doorbell();
    activate(*o);
  }
}

bool EngineTransport::enqueue_doorbell(RcQueuePair& qp) noexcept {
  return doorbells_ != nullptr && ring_mp_enqueue(doorbells_, &qp);
}

bool EngineTransport::poll(void* self, EngineContext& ctx) {
  auto& et = *static_cast<EngineTransport*>(self);
  RcQueuePair* rung[kMaxRingBurst];
  const unsigned n = ring_sc_dequeue_burst(et.doorbells_, rung, kMaxRingBurst);
  // A rung QP stays claimed while it is active: its posts find the flag set and skip the ring, and this loop
  // reads its SQ tail on every poll anyway (acquire, pairing with the poster's publish_tail()).
  for (unsigned i = 0; i < n; ++i) et.activate(*rung[i]);
  bool worked = n != 0;
  // Idle QPs sync their counters as they leave the active list; busy ones every millisecond or so, so that
  // telemetry also moves while a QP always has work (a request outstanding, a peer that never answers).
  const bool sync_busy = ctx.now() >= et.next_counter_sync_tsc_;
  if (sync_busy) et.next_counter_sync_tsc_ = ctx.now() + ctx.tsc_hz() / 1000;
  // The QPs that found their port's TX full go first, oldest first, while their port has room again.
  for (std::size_t p = 0; p < et.starved_.size(); ++p) {
    StarvedQueue& q = et.starved_[p];
    while (q.head != nullptr && ctx.tx_has_room(static_cast<PortIndex>(p))) {
      RcQueuePair* qp = q.head;
      q.head = qp->next_starved_;
      if (q.head == nullptr) q.tail = nullptr;  // before anything below queues a QP again
      qp->starved_ = false;
      const PollResult r = qp->poll(ctx);
      if (r == PollResult::kStarved) {
        // To the back, even if it sent nothing: a QP with a long message fills the backlog whenever it is polled,
        // and kept at the front it would shut out the QPs behind it until their retries ran out.
        et.push_starved(*qp);
        break;
      }
      worked = true;
      if (r == PollResult::kBusy) {
        et.active_.push_back(qp);  // polled again below; capacity reserved for every QP of the engine
      } else {
        et.go_quiet(*qp, ctx);
      }
    }
  }
  for (std::size_t i = 0; i < et.active_.size();) {
    RcQueuePair* qp = et.active_[i];
    const PollResult r = qp->poll(ctx);
    if (r == PollResult::kBusy) {
      if (sync_busy) qp->sync_counters(ctx.counters());
      worked = true;
      ++i;
      continue;
    }
    et.active_[i] = et.active_.back();
    et.active_.pop_back();
    if (r == PollResult::kStarved) {
      // Its port's TX is full: polling it again before there is room only burns the iteration (with thousands
      // of QPs, most of it), so it waits in its port's queue, in order.
      worked = true;
      et.push_starved(*qp);
    } else {
      worked |= et.go_quiet(*qp, ctx);
    }
  }
  return worked;
}

// Idle, or waiting for a packet or a deadline: clear the doorbell, then look once more. The poster publishes its
// tail, then claims; we clear, then read the tail; both flag accesses are RMWs (release_doorbell), so either its
// claim finds the flag clear and rings again, or this poll sees what it posted. Returns whether that poll worked.
bool EngineTransport::go_quiet(RcQueuePair& qp, EngineContext& ctx) noexcept {
  qp.release_doorbell();
  switch (qp.poll(ctx)) {
    case PollResult::kBusy:
      active_.push_back(&qp);
      return true;
    case PollResult::kStarved:
      push_starved(qp);
      return true;
    case PollResult::kWaiting:
      // Off the list: a QP waiting for ACKs costs nothing per iteration (with 10 000 QPs on one engine, polling
      // those that only waited took nearly all its time). on_packet, a doorbell or the wake timer brings it back.
      qp.sleep_until_deadline(ctx);
      break;
    case PollResult::kIdle:
      break;
  }
  qp.sync_counters(ctx.counters());  // exact whenever the QP leaves the list
  qp.active = false;
  return false;
}

void EngineTransport::push_starved(RcQueuePair& qp) noexcept {
  StarvedQueue& q = starved_[qp.setup().port];
  qp.starved_ = true;
  qp.next_starved_ = nullptr;
  if (q.tail != nullptr) {
    q.tail->next_starved_ = &qp;
  } else {
    q.head = &qp;
  }
  q.tail = &qp;
}

}  // namespace uroce::dataplane
