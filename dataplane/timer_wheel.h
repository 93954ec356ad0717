// A hashed timer wheel with intrusive timers: O(1) schedule and cancel, no allocation, one owner thread.
//
// Why not rte_timer: rte_timer_reset() inserts into a per-lcore skip list (O(log n) with random levels) under
// a spinlock, because any lcore may arm a timer on any other; rte_timer_manage() takes the same lock. An
// engine's timers (retransmit, RNR, ACK coalescing) are only ever armed and cancelled by that engine, so a
// single-threaded wheel needs neither the lock nor the skip list, and cancel is an O(1) unlink.
//
// Time is the TSC. A tick is 2^tick_shift cycles (about 1 us, see Engine); the wheel has a power-of-two number
// of slots, and a timer due more than one rotation ahead waits in its slot until its tick comes round (its
// expiry tick is compared, not a round count). A timer never fires early; it fires at the first advance() at or
// after its expiry, rounded up to a tick.
//
// A bitmap marks the slots that may hold timers, so advance() skips empty slots 64 at a time: a loop iteration
// that takes several ticks (a long burst, a sleep in the backoff policy, or any run under valgrind, where one
// iteration spanned hundreds of ticks and visiting each slot cost the engine 135 instructions per 64 B message)
// no longer pays a slot visit per tick.
#pragma once

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdint>
#include <memory>

namespace uroce::dataplane {

template <class Context>
class TimerWheel;

namespace detail {
// Doubly-linked list node; a list's head is a sentinel node pointing at itself when empty.
struct TimerLink {
  TimerLink* prev = nullptr;
  TimerLink* next = nullptr;
  void make_empty_list() noexcept { prev = next = this; }
  [[nodiscard]] bool list_empty() const noexcept { return next == this; }
  void unlink() noexcept {
    prev->next = next;
    next->prev = prev;
    prev = next = nullptr;
  }
  void push_back(TimerLink* node) noexcept {
    node->prev = prev;
    node->next = this;
    prev->next = node;
    prev = node;
  }
};
}  // namespace detail

// Embed one in the object that needs the timeout (a QP, say). It must not move or die while armed.
template <class Context>
class Timer : private detail::TimerLink {
 public:
  using Callback = void (*)(Timer& timer, Context& context);

  Timer() = default;
  Timer(Callback callback, void* owner) noexcept : callback_(callback), owner_(owner) {}
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  ~Timer() { assert(!armed() && "a timer must be cancelled before it is destroyed"); }

  void set_callback(Callback callback, void* owner) noexcept {
    callback_ = callback;
    owner_ = owner;
  }
  [[nodiscard]] bool armed() const noexcept { return next != nullptr; }
  [[nodiscard]] void* owner() const noexcept { return owner_; }

 private:
  friend class TimerWheel<Context>;
  uint64_t expiry_tick_ = 0;
  Callback callback_ = nullptr;
  void* owner_ = nullptr;
};

template <class Context>
class TimerWheel {
 public:
  using TimerType = Timer<Context>;

  // slot_count must be a power of two. now_cycles is the current TSC.
  TimerWheel(unsigned tick_shift, uint32_t slot_count, uint64_t now_cycles)
      : tick_shift_(tick_shift),
        slot_mask_(slot_count - 1),
        slots_(std::make_unique<detail::TimerLink[]>(slot_count)),
        occupied_(std::make_unique<uint64_t[]>((slot_count + 63) / 64)),
        current_tick_(now_cycles >> tick_shift),
        now_cycles_(now_cycles) {
    assert(slot_count != 0 && (slot_count & (slot_count - 1)) == 0);
    for (uint32_t i = 0; i < slot_count; ++i) slots_[i].make_empty_list();
  }
  TimerWheel(const TimerWheel&) = delete;
  TimerWheel& operator=(const TimerWheel&) = delete;

  // Arms (or re-arms) `timer` to fire at or after TSC `expiry_cycles`.
  void schedule_at(TimerType& timer, uint64_t expiry_cycles) noexcept {
    if (timer.armed()) cancel(timer);
    uint64_t tick = (expiry_cycles + (uint64_t{1} << tick_shift_) - 1) >> tick_shift_;
    if (tick <= current_tick_) tick = current_tick_ + 1;
    timer.expiry_tick_ = tick;
    const uint64_t slot = tick & slot_mask_;
    slots_[slot].push_back(&timer);
    occupied_[slot / 64] |= uint64_t{1} << (slot % 64);
    ++armed_count_;
  }
  // Relative to the time of the last advance(): the engine advances once per loop iteration, so this is the
  // start of the current iteration and saves reading the TSC again.
  void schedule_after(TimerType& timer, uint64_t delay_cycles) noexcept {
    schedule_at(timer, now_cycles_ + delay_cycles);
  }
  // Leaves the slot's bit set even if the slot is now empty: the next advance() past it clears it.
  void cancel(TimerType& timer) noexcept {
    if (!timer.armed()) return;
    timer.unlink();
    --armed_count_;
  }

  // Fires every timer due at or before `now_cycles`, in no particular order within a tick, and returns how
  // many fired. Bounded: it visits at most one rotation of slots however long the caller was away.
  // Callbacks may schedule and cancel any timer, including the one firing.
  uint32_t advance(uint64_t now_cycles, Context& context) noexcept {
    now_cycles_ = now_cycles;
    const uint64_t now_tick = now_cycles >> tick_shift_;
    if (now_tick <= current_tick_) return 0;
    const uint64_t ticks = now_tick - current_tick_;
    const uint64_t visits = ticks < slot_mask_ + 1 ? ticks : slot_mask_ + 1;
    // Collect first, fire after: a callback then sees a consistent wheel whose current tick is already now.
    detail::TimerLink due;
    due.make_empty_list();
    for (uint64_t i = 1; i <= visits;) {
      const uint64_t slot = (current_tick_ + i) & slot_mask_;
      // The occupied slots from `slot` to the end of its bitmap word. No bit past the last slot is ever set, so
      // with fewer than 64 slots the wheel's end comes first.
      const uint64_t pending = occupied_[slot / 64] >> (slot % 64);
      if (pending == 0) {
        i += std::min<uint64_t>(64 - slot % 64, slot_mask_ + 1 - slot);
        continue;
      }
      const auto skip = static_cast<uint64_t>(std::countr_zero(pending));
      i += skip;
      if (i > visits) break;
      collect_due(slot + skip, now_tick, due);
      ++i;
    }
    current_tick_ = now_tick;
    uint32_t fired = 0;
    while (!due.list_empty()) {
      auto* const timer = static_cast<TimerType*>(due.next);
      timer->unlink();  // a callback may cancel a later timer in `due`: it unlinks from `due` just the same
      --armed_count_;
      ++fired;
      timer->callback_(*timer, context);
    }
    return fired;
  }

  [[nodiscard]] uint64_t now() const noexcept { return now_cycles_; }
  [[nodiscard]] uint64_t tick_cycles() const noexcept { return uint64_t{1} << tick_shift_; }
  [[nodiscard]] uint32_t armed_count() const noexcept { return armed_count_; }

 private:
  // Moves the timers of `slot` that are due by `now_tick` to `due`; clears the slot's bit if it is left empty.
  void collect_due(uint64_t slot, uint64_t now_tick, detail::TimerLink& due) noexcept {
    detail::TimerLink& head = slots_[slot];
    for (detail::TimerLink* node = head.next; node != &head;) {
      detail::TimerLink* const next = node->next;
      if (static_cast<TimerType*>(node)->expiry_tick_ <= now_tick) {
        node->unlink();
        due.push_back(node);
      }
      node = next;
    }
    if (head.list_empty()) occupied_[slot / 64] &= ~(uint64_t{1} << (slot % 64));
  }

  unsigned tick_shift_;
  uint64_t slot_mask_;
  std::unique_ptr<detail::TimerLink[]> slots_;
  std::unique_ptr<uint64_t[]> occupied_;  // bit s%64 of word s/64: slot s may hold timers (make_unique zeroes)
  uint64_t current_tick_;                 // every timer due at or before this tick has fired
  uint64_t now_cycles_;
  uint32_t armed_count_ = 0;
};

}  // namespace uroce::dataplane
