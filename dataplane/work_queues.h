// The queues an application thread shares with the engine that owns its QP: the
// send queue, the receive queue (or SRQ) and the completion queue, each a
// single-producer/single-consumer ring in ordinary memory (ARCHITECTURE.md
// "Threads and ownership"). No locks on any post or poll path.
//
// Every cross-thread handoff is one named function with the reordering it prevents:
//   SQ/RQ: the application writes a WQE in place, then publish_tail() (release) is
//          the doorbell; the engine's tail() (acquire) sees the WQE's bytes.
//          The engine publishes how far it has retired with publish_head(), so the
//          application knows which slots it may overwrite.
//   CQ:    the engine writes a CQE's fields, then its phase byte last (release);
//          the consumer sees a CQE as its own once the phase matches (acquire), and
//          publishes its consumer index lazily, once per poll call.
//   Arm:   CompletionEvents (optional, per CQ): the engine appends, then reads the arm
//          state; the consumer arms, then reads what is queued (Dekker's pattern). Both
//          sides do it with a read-modify-write of the same arm word (acq_rel), so the two
//          RMWs are ordered and the later one sees the earlier side's work: either the
//          engine sees the arm, or the consumer sees the completion. No matching completion
//          is missed. The winner of the CAS that clears the arm hands the CQ to the
//          notifier: one notification per arm, never one without an arm.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

#include "proto/rc_types.h"

namespace uroce::dataplane {

inline constexpr std::size_t kCacheLine = 64;

// A ring of `T` written by one thread and read by another. Indices are free-running
// uint32; slot i lives at i & mask. The producer and consumer indices sit on
// separate cache lines so the two threads never write the same line.
template <class T>
class SpscQueue {
 public:
  explicit SpscQueue(uint32_t capacity_pow2) : slots_(std::make_unique<T[]>(capacity_pow2)), mask_(capacity_pow2 - 1) {}

  [[nodiscard]] uint32_t capacity() const noexcept { return mask_ + 1; }
  [[nodiscard]] T& slot(uint32_t index) noexcept { return slots_[index & mask_]; }
  [[nodiscard]] const T& slot(uint32_t index) const noexcept { return slots_[index & mask_]; }
  [[nodiscard]] const T* data() const noexcept { return slots_.get(); }

  // Producer side. The producer's own copy of the tail needs no ordering.
  [[nodiscard]] uint32_t producer_tail() const noexcept { return tail_.load(std::memory_order_relaxed); }
  // Doorbell: the slots before `tail` are complete. Release: their bytes become
  // visible before the new tail does.
  void publish_tail(uint32_t tail) noexcept { tail_.store(tail, std::memory_order_release); }
  // The doorbell rung by a thread other than the producer (NdkFlush submitting a DEFER chain): moves the tail
  // forward to `tail` unless it is there or past it already. A CAS, so that the tail never goes back: the
  // producer's own publish_tail() always stores its newest index, never less than any index another thread
  // could have read from it before. Release, as publish_tail(); the caller read `tail` with acquire from the
  // producer's release, so the slots' bytes are visible to the consumer through it.
  void publish_tail_at_least(uint32_t tail) noexcept {
    uint32_t current = tail_.load(std::memory_order_relaxed);
    while (static_cast<int32_t>(tail - current) > 0 &&
           !tail_.compare_exchange_weak(current, tail, std::memory_order_release, std::memory_order_relaxed)) {
    }
  }
  // Acquire: once the consumer says it is done with a slot, our next write to it
  // cannot be reordered before the consumer's last read of it.
  [[nodiscard]] uint32_t consumer_head() const noexcept { return head_.load(std::memory_order_acquire); }
  [[nodiscard]] bool full() const noexcept { return producer_tail() - consumer_head() >= capacity(); }

  // A queue that grows (an SRQ, NdkModifySrq) continues in a larger ring: the producer links it here, then
  // writes only there; the consumer moves on once this ring is empty (consumer_successor). Release: every
  // publish_tail() to this ring happens before the link.
  void link_successor(SpscQueue* next) noexcept { successor_.store(next, std::memory_order_release); }
  [[nodiscard]] SpscQueue* successor() const noexcept { return successor_.load(std::memory_order_acquire); }

  // Consumer side. Acquire pairs with publish_tail(): the WQE bytes are visible.
  [[nodiscard]] uint32_t tail() const noexcept { return tail_.load(std::memory_order_acquire); }
  // Release: our reads of the retired slots happen before the producer may reuse them.
  void publish_head(uint32_t head) noexcept { head_.store(head, std::memory_order_release); }
  [[nodiscard]] uint32_t consumer_own_head() const noexcept { return head_.load(std::memory_order_relaxed); }

 private:
  std::unique_ptr<T[]> slots_;
  uint32_t mask_;
  alignas(kCacheLine) std::atomic<uint32_t> tail_{0};
  alignas(kCacheLine) std::atomic<uint32_t> head_{0};
  std::atomic<SpscQueue*> successor_{nullptr};  // written once by the producer, read by the consumer when empty
};

using SendQueue = SpscQueue<proto::SendWqe>;
using ReceiveQueue = SpscQueue<proto::RecvWqe>;

// Where engines hand objects that owe their consumer a callback (a CQ notification, an
// SRQ limit event). Implementations are lock-free, never block and never allocate: the
// engine calls notify() on its datapath. `target` is what the object registered.
class EventNotifier {
 public:
  virtual void notify(void* target) noexcept = 0;

 protected:
  ~EventNotifier() = default;
};

// NdkArmCq types as levels: a completion that needs level L notifies any arm >= L, and
// merging two arms is their maximum, which is exactly NDK's merge table (ndkpi.md §10.2):
// ANY wins over everything, SOLICITED over ERRORS, and equal arms stay as they are.
enum class ArmLevel : uint8_t { kNone = 0, kErrors = 1, kSolicited = 2, kAny = 3 };

// The weakest arm an appended completion satisfies: an error completion, or a receive of a
// message sent with the solicited-event bit, satisfies SOLICITED (ndkpi.md §6.3: any error
// also matches); every completion satisfies ANY. ERRORS is for CQ overrun only.
constexpr ArmLevel arm_level_needed(const proto::Completion& c, bool is_receive) noexcept {
  if (c.status != proto::CompletionStatus::kSuccess) return ArmLevel::kSolicited;
  if (is_receive && (c.flags & proto::kCompletionSolicited)) return ArmLevel::kSolicited;
  return ArmLevel::kAny;
}

// The arm state and failure state of one CQ, shared by its slices (one per producing
// engine). Engines call on_append()/on_overrun(); the consumer (who NDK makes serialise
// GetCqResults and ArmCq) calls arm() and fire_if_armed().
class CompletionEvents {
 public:
  CompletionEvents(EventNotifier* notifier, void* target) : notifier_(notifier), target_(target) {}

  // --- producer (engines) ---
  // After the entry is visible (its phase published).
  void on_append(ArmLevel needed) noexcept { fire_from(arm_after_append(), needed); }
  // The ring was full: the CQ fails (ndkpi.md §9.9: it reports nothing further) and an
  // armed consumer hears of it through any arm.
  void on_overrun() noexcept { fail(); }
  // The engines serving the CQ stopped for good (a fatal error, ndkpi.md §9.9 INTERNAL_ERROR): the CQ fails in
  // the same way, and fatal() says why. Release: a notification that sees the failure sees the reason.
  void on_fatal() noexcept {
    fatal_.store(true, std::memory_order_release);
    fail();
  }
  [[nodiscard]] bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  [[nodiscard]] bool fatal() const noexcept { return fatal_.load(std::memory_order_acquire); }

  // --- consumer ---
  // Merges `level` into the arm state (NDK merge table = maximum) and returns the merged
  // level. The caller then looks at what is already queued and calls fire_if_armed() with
  // the weakest level it needs. This is the handshake's consumer half: always an RMW
  // (acq_rel), even when the level does not change, so that it is ordered against the
  // engines' arm_after_append().
  ArmLevel arm(ArmLevel level) noexcept {
    uint8_t current = armed_.load(std::memory_order_relaxed);
    uint8_t merged;
    do {
      merged = current > static_cast<uint8_t>(level) ? current : static_cast<uint8_t>(level);
    } while (!armed_.compare_exchange_weak(current, merged, std::memory_order_acq_rel, std::memory_order_relaxed));
    return static_cast<ArmLevel>(merged);
  }
  [[nodiscard]] ArmLevel armed() const noexcept {
    return static_cast<ArmLevel>(armed_.load(std::memory_order_relaxed));
  }

  // Either side: if the arm covers `needed`, clears it and notifies. Only the CAS winner
  // notifies, so one arm yields at most one notification. acq_rel on the CAS: the
  // notification is ordered after the completion that caused it.
  bool fire_if_armed(ArmLevel needed) noexcept { return fire_from(armed_.load(std::memory_order_relaxed), needed); }

 private:
  void fail() noexcept {
    if (failed_.exchange(true, std::memory_order_acq_rel)) return;
    fire_from(arm_after_append(), ArmLevel::kErrors);
  }
  // The handshake's engine half: reads the arm word with an RMW (acq_rel) after the
  // entry's phase was published, so it is ordered against the consumer's arm().
  uint8_t arm_after_append() noexcept { return armed_.fetch_add(0, std::memory_order_acq_rel); }

  bool fire_from(uint8_t current, ArmLevel needed) noexcept {
    if (needed == ArmLevel::kNone) return false;
    while (current >= static_cast<uint8_t>(needed)) {
      if (armed_.compare_exchange_weak(current, 0, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        if (notifier_ != nullptr) notifier_->notify(target_);
        return true;
      }
    }
    return false;
  }

  EventNotifier* notifier_;
  void* target_;
  std::atomic<uint8_t> armed_{0};
  // Written once, read on every append and by every post of an attached QP (ndkpi.md §9.9): its own line, so the
  // readers share it instead of pulling the arm word's line, which the engines write on every append.
  alignas(kCacheLine) std::atomic<bool> failed_{false};
  std::atomic<bool> fatal_{false};
};

// The one-shot SRQ limit event (NdkModifySrq / NdkCreateSrq NotifyThreshold): armed with a
// threshold, it fires once when the posted receives fall below it. Same handshake as the CQ
// arm: the engine pops then reads the threshold, the consumer arms then reads the count,
// both through RMWs of the threshold word.
class ReceiveLimitEvents {
 public:
  ReceiveLimitEvents(EventNotifier* notifier, void* target) : notifier_(notifier), target_(target) {}

  // Engine, after a pop (its head published): `remaining` receives are still posted. The
  // RMW orders this read against the consumer's arm(), as for CompletionEvents.
  void on_consumed(uint32_t remaining) noexcept {
    fire_if_below(threshold_.fetch_add(0, std::memory_order_acq_rel), remaining);
  }
  // Consumer: arms `threshold` (> 0) with an RMW, then fires at once if `posted()` is
  // already below it.
  template <class Posted>
  void arm(uint32_t threshold, Posted&& posted) noexcept {
    (void)threshold_.exchange(threshold, std::memory_order_acq_rel);
    fire_if_below(threshold_.load(std::memory_order_relaxed), posted());
  }
  [[nodiscard]] uint32_t threshold() const noexcept { return threshold_.load(std::memory_order_relaxed); }

 private:
  void fire_if_below(uint32_t t, uint32_t remaining) noexcept {
    while (t != 0 && remaining < t) {
      if (threshold_.compare_exchange_weak(t, 0, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        if (notifier_ != nullptr) notifier_->notify(target_);
        return;
      }
    }
  }

  EventNotifier* notifier_;
  void* target_;
  std::atomic<uint32_t> threshold_{0};
};

// One completion. The phase byte is written last: it flips meaning on every lap of
// the ring, so a consumer never mistakes last lap's entry for a new one.
struct CompletionEntry {
  proto::Completion completion;
  uint64_t qp_context = 0;  // what the QP's owner asked for (RcQueuePairSetup::completion_context)
  uint32_t qp_id = 0;
  bool is_receive = false;
  std::atomic<uint8_t> phase{0};
};

// A completion queue slice: one producer engine, one consumer (whoever polls; NDK
// makes the consumer serialise GetCqResults/GetCqResultsEx/ArmCq on one CQ).
class CompletionQueue {
 public:
  explicit CompletionQueue(uint32_t capacity_pow2)
      : entries_(std::make_unique<CompletionEntry[]>(capacity_pow2)), mask_(capacity_pow2 - 1) {}

  [[nodiscard]] uint32_t capacity() const noexcept { return mask_ + 1; }

  // --- producer (the owning engine) ---
  // Appends one completion, or returns false if the ring is full: a CQ overrun,
  // which the owner reports as an error instead of overwriting unread entries. With
  // events attached, the append may notify an armed consumer, and a failed CQ (one that
  // overran) takes nothing more.
  bool push(const proto::Completion& c, uint32_t qp_id, bool is_receive, uint64_t qp_context = 0) noexcept {
    if (!append(c, qp_id, is_receive, qp_context)) return false;
    if (events_ != nullptr) events_->on_append(arm_level_needed(c, is_receive));
    return true;
  }
  // The engine's push(): appends, but owes the arm handshake (an RMW, which on x86 also waits for every store
  // before it, the entry's lines included) until publish_events(), which the engine runs once per CQ at the end of
  // its loop iteration, or before it acknowledges a command. The handshake still follows the entries' release, so
  // an arm either sees them or is seen (CompletionEvents); a notification waits at most one iteration. Returns
  // kFirstOwed when this append made the handshake owed: the caller then queues the CQ for publish_events().
  enum class Deferred : uint8_t { kRefused, kAppended, kFirstOwed };
  Deferred push_deferring_events(const proto::Completion& c, uint32_t qp_id, bool is_receive,
                                 uint64_t qp_context) noexcept {
    if (!append(c, qp_id, is_receive, qp_context)) return Deferred::kRefused;
    if (events_ == nullptr) return Deferred::kAppended;
    // The weakest level any of the owed entries needs is what an arm must reach to be satisfied by one of them.
    const ArmLevel needed = arm_level_needed(c, is_receive);
    const bool first = owed_ == ArmLevel::kNone;
    if (first || needed < owed_) owed_ = needed;
    return first ? Deferred::kFirstOwed : Deferred::kAppended;
  }
  // Runs the handshake owed since push_deferring_events() made it owed (producer only).
  void publish_events() noexcept {
    const ArmLevel owed = owed_;
    if (owed == ArmLevel::kNone) return;
    owed_ = ArmLevel::kNone;
    events_->on_append(owed);
  }

  // Before any producer runs: the arm/failure state this slice reports to.
  void attach_events(CompletionEvents* events) noexcept { events_ = events; }
  // The CQ this slice belongs to overran (any slice of it): it takes nothing more.
  [[nodiscard]] bool failed() const noexcept { return events_ != nullptr && events_->failed(); }

  // --- consumer ---
  // The entry at the consumer's position if the producer has written it this lap.
  [[nodiscard]] const CompletionEntry* peek() const noexcept { return peek_at(consumer_position_); }
  // The entry `ahead` places past the consumer's position, if written (for the arm check,
  // which looks at everything queued without consuming it).
  [[nodiscard]] const CompletionEntry* peek_ahead(uint32_t ahead) const noexcept {
    return ahead < capacity() ? peek_at(consumer_position_ + ahead) : nullptr;
  }
  void pop() noexcept { ++consumer_position_; }
  // Lazily tells the producer how far we have read (once per poll call). Release:
  // our reads of those entries happen before the producer may overwrite them.
  void publish_consumed() noexcept { consumer_index_.store(consumer_position_, std::memory_order_release); }

  // Completions written and not yet consumed (approximate from the consumer side).
  [[nodiscard]] uint32_t pending() const noexcept {
    return produced_.load(std::memory_order_acquire) - consumer_position_;
  }
  [[nodiscard]] uint32_t produced() const noexcept { return produced_.load(std::memory_order_acquire); }
  // Any thread: entries appended and not yet reported consumed. The consumer publishes its index once per poll
  // call, so this may count entries it is reading right now (interrupt moderation's count, on the notifier).
  // The consumer may run ahead of produced_ for a moment: it goes by each entry's phase, which push() stores before
  // it advances produced_. So the difference can come out negative, and is clamped at 0 (unclamped it wrapped to ~4
  // billion, and a CQ resize under load refused to shrink with STATUS_BUFFER_OVERFLOW). The consumer's index is read
  // first, which keeps a consumer between the two loads from making it negative as well.
  [[nodiscard]] uint32_t unconsumed() const noexcept {
    const uint32_t consumed = consumer_index_.load(std::memory_order_acquire);
    const auto difference = static_cast<int32_t>(produced_.load(std::memory_order_acquire) - consumed);
    return difference > 0 ? static_cast<uint32_t>(difference) : 0;
  }
  [[nodiscard]] uint32_t consumed() const noexcept { return consumer_position_; }
  [[nodiscard]] bool overrun() const noexcept { return overrun_.load(std::memory_order_relaxed); }

 private:
  [[nodiscard]] const CompletionEntry* peek_at(uint32_t index) const noexcept {
    const CompletionEntry& e = entries_[index & mask_];
    // cqe_is_ours(): acquire pairs with the producer's release of the phase, so the fields are complete.
    return e.phase.load(std::memory_order_acquire) == phase_for(index) ? &e : nullptr;
  }
  // Lap 0 writes phase 1, lap 1 writes 0, ...; entries start at 0, so none is valid at first.
  [[nodiscard]] uint8_t phase_for(uint32_t index) const noexcept {
    return static_cast<uint8_t>(((index / capacity()) & 1) ^ 1);
  }

  // The caller has just written `from` field by field. One wider load spanning several of those stores cannot take
  // its data from them: it waits until they, and every store before them, have reached the cache, and the engine's
  // older stores include CQ entries and frames in lines other cores hold. So each field is loaded at its own width,
  // through volatile because the compiler would otherwise merge neighbouring fields into one load again. (As one
  // struct copy, that load took 64% of complete_receive's samples in nvmf randread.)
  template <class T>
  static T load_at_width(const T& field) noexcept {
    return *static_cast<const volatile T*>(&field);
  }
  static void copy_at_field_width(const proto::Completion& from, proto::Completion& to) noexcept {
    to.context = load_at_width(from.context);
    to.status = load_at_width(from.status);
    to.op = load_at_width(from.op);
    to.flags = load_at_width(from.flags);
    to.byte_length = load_at_width(from.byte_length);
    to.immediate = load_at_width(from.immediate);
    // RemoteToken is standard-layout around one uint32_t: its address is that member's (pointer-interconvertible).
    static_assert(sizeof(proto::RemoteToken) == sizeof(uint32_t) && std::is_standard_layout_v<proto::RemoteToken>);
    to.invalidated_rkey = proto::RemoteToken{*reinterpret_cast<const volatile uint32_t*>(&from.invalidated_rkey)};
  }
  bool append(const proto::Completion& c, uint32_t qp_id, bool is_receive, uint64_t qp_context) noexcept {
    if (events_ != nullptr && events_->failed()) return false;
    if (producer_index_ - consumer_cache_ >= capacity()) {
      consumer_cache_ = consumer_index_.load(std::memory_order_acquire);  // pairs with publish_consumed()
      if (producer_index_ - consumer_cache_ >= capacity()) {
        overrun_.store(true, std::memory_order_relaxed);
        if (events_ != nullptr) events_->on_overrun();
        return false;
      }
    }
    CompletionEntry& e = entries_[producer_index_ & mask_];
    copy_at_field_width(c, e.completion);
    e.qp_context = qp_context;
    e.qp_id = qp_id;
    e.is_receive = is_receive;
    // cqe_is_ours(): the fields above become visible before the phase says the entry is valid.
    e.phase.store(phase_for(producer_index_), std::memory_order_release);
    ++producer_index_;
    produced_.store(producer_index_, std::memory_order_release);
    return true;
  }

  std::unique_ptr<CompletionEntry[]> entries_;
  uint32_t mask_;
  // Producer-private.
  alignas(kCacheLine) uint32_t producer_index_ = 0;
  uint32_t consumer_cache_ = 0;
  ArmLevel owed_ = ArmLevel::kNone;  // the arm handshake push_deferring_events() owes (kNone: none)
  std::atomic<uint32_t> produced_{0};
  std::atomic<bool> overrun_{false};
  CompletionEvents* events_ = nullptr;  // set before producers run; read-only after
  // Consumer-private position, and the index it publishes.
  alignas(kCacheLine) uint32_t consumer_position_ = 0;
  std::atomic<uint32_t> consumer_index_{0};
};

}  // namespace uroce::dataplane
