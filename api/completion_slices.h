// The rings of one CQ: a single-producer/single-consumer slice per engine (a QP completes into the slice of
// the engine that owns it), drained in turn by the one consumer, plus the CQ's arm and failure state
// (dataplane::CompletionEvents). No DPDK here: the unit tests run it under ThreadSanitizer.
//
// Per-QP order holds because a QP's completions all go to one slice, which is FIFO; NDK orders nothing
// across QPs (ndkpi.md §10.2). A resize gives each slice a new ring, concurrently with the consumer and without
// waiting for the engines (ndkpi.md §9.2: never quiesce): the producers switch to it on their engine
// (RcTransport::post_retarget), and the consumer, at its next poll, takes the new rings in and drains each old
// ring before its new one, reading the new one only once the old is sealed (its engine has switched, so it
// takes nothing more) and empty.
//
// Threads: one consumer (consume, queued, arm); control threads under the CQ's attach mutex (ring, make_rings,
// replace_rings); any thread (unconsumed, try_unconsumed). The ring lists change only under structure_mutex_: a resize
// queues its rings in pending_ and bumps generation_; the consumer, the one that moves rings between the lists,
// locks only when generation_ moved or an old ring is done, so its polls stay lock-free.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "dataplane/work_queues.h"

namespace uroce::ndk::detail {

class CompletionSlices {
 public:
  // When an old ring takes nothing more: `done` turns true (acquire) once its producers have switched; null means
  // at once. `owner` keeps what `done` points into alive until the ring is dropped.
  struct Seal {
    const std::atomic<bool>* done = nullptr;
    std::shared_ptr<void> owner;
    [[nodiscard]] bool sealed() const noexcept { return done == nullptr || done->load(std::memory_order_acquire); }
  };

  CompletionSlices(uint32_t depth, unsigned slice_count, dataplane::EventNotifier* notifier, void* target)
      : events_(notifier, target), draining_(slice_count) {
    for (unsigned s = 0; s < slice_count; ++s) {
      rings_.push_back(make_ring(depth));
      newest_.push_back(rings_.back().get());
    }
  }
  // A seal still open belongs to an engine command in flight that points into it: wait for it (one engine loop
  // iteration; the engines finish posted commands even when they stop).
  ~CompletionSlices() {
    const auto wait = [](const Seal& seal) {
      while (!seal.sealed()) std::this_thread::sleep_for(std::chrono::microseconds(10));
    };
    for (const auto& resize : pending_) {
      for (const Seal& seal : resize.seals) wait(seal);
    }
    for (const auto& old : draining_) {
      for (const OldRing& r : old) wait(r.seal);
    }
  }
  CompletionSlices(const CompletionSlices&) = delete;
  CompletionSlices& operator=(const CompletionSlices&) = delete;

  // Slices hold at least `depth` entries each (rounded up to a power of two).
  static uint32_t ring_capacity(uint32_t depth) noexcept {
    uint32_t capacity = 1;
    while (capacity < depth) capacity <<= 1;
    return capacity;
  }

  [[nodiscard]] unsigned slice_count() const noexcept { return static_cast<unsigned>(newest_.size()); }
  // Control path (under the CQ's attach mutex): the ring producers on engine `slice` write now, the newest
  // resize's (handed to a QP when it is created, and switched from by the next resize).
  [[nodiscard]] dataplane::CompletionQueue& ring(unsigned slice) noexcept { return *newest_[slice]; }
  [[nodiscard]] dataplane::CompletionEvents& events() noexcept { return events_; }
  [[nodiscard]] bool failed() const noexcept { return events_.failed(); }
  [[nodiscard]] bool fatal() const noexcept { return events_.fatal(); }
  void fail_fatally() noexcept { events_.on_fatal(); }

  // --- consumer ---
  // Calls visit(entry) for up to `max` completions, slice after slice starting where the last call stopped
  // (so no engine's completions starve another's), and publishes the consumer index of every ring it read
  // once, at the end (lazily, as work_queues.h describes).
  template <class Visit>
  uint32_t consume(uint32_t max, Visit&& visit) {
    // Acquire pairs with replace_rings()'s release: the rings it queued are complete here.
    if (generation_.load(std::memory_order_acquire) != adopted_generation_) [[unlikely]]
      adopt_pending();
    uint32_t taken = 0;
    const unsigned n = slice_count();
    for (unsigned i = 0; i < n && taken < max; ++i) {
      const unsigned s = (next_slice_ + i) % n;
      auto& old = draining_[s];
      while (!old.empty() && taken < max) {  // a resize's old rings first: their entries are older
        OldRing& front = old.front();
        taken += drain(*front.ring, max - taken, visit);
        // Sealed (acquire: every entry its producers wrote is visible), then empty: final. Until then the newer
        // ring waits, or a QP's newer completion could overtake an older one still on its way into this ring.
        if (!front.seal.sealed() || front.ring->peek() != nullptr) break;
        const std::lock_guard lock(structure_mutex_);
        old.pop_front();
      }
      if (old.empty()) taken += drain(*rings_[s], max - taken, visit);
    }
    if (++next_slice_ >= n) next_slice_ = 0;
    return taken;
  }

  // Completions queued and not consumed (consumer thread: exact, up to those being appended now).
  [[nodiscard]] uint32_t queued() const {
    const std::lock_guard lock(structure_mutex_);
    return sum_over_rings([](const dataplane::CompletionQueue& r) { return r.pending(); });
  }

  // The same from any thread, with published consumer indices (CompletionQueue::unconsumed).
  [[nodiscard]] uint32_t unconsumed() const {
    const std::lock_guard lock(structure_mutex_);
    return sum_over_rings([](const dataplane::CompletionQueue& r) { return r.unconsumed(); });
  }
  // As unconsumed(), or nothing if the lists are changing right now (the notifier looks again later).
  [[nodiscard]] std::optional<uint32_t> try_unconsumed() const {
    const std::unique_lock lock(structure_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return std::nullopt;
    return sum_over_rings([](const dataplane::CompletionQueue& r) { return r.unconsumed(); });
  }

  // NdkArmCq: merge the arm, then fire at once if something already queued satisfies it (ndkpi.md §10.2:
  // required when it arrived after the previous notification, permitted otherwise; we do both).
  void arm(dataplane::ArmLevel level) {
    using dataplane::ArmLevel;
    const ArmLevel merged = events_.arm(level);  // the RMW that orders the reads below after the engines'
    const std::lock_guard lock(structure_mutex_);
    if (failed()) {
      (void)events_.fire_if_armed(ArmLevel::kErrors);
    } else if (merged == ArmLevel::kAny && any_queued(ArmLevel::kAny)) {
      (void)events_.fire_if_armed(ArmLevel::kAny);
    } else if (merged >= ArmLevel::kSolicited && any_queued(ArmLevel::kSolicited)) {
      (void)events_.fire_if_armed(ArmLevel::kSolicited);
    }
  }

  // --- resize (control path, under the CQ's attach mutex; any time, the consumer polling or not) ---
  // New rings for every slice, not yet visible to producers.
  [[nodiscard]] std::vector<std::unique_ptr<dataplane::CompletionQueue>> make_rings(uint32_t depth) {
    std::vector<std::unique_ptr<dataplane::CompletionQueue>> rings;
    for (unsigned s = 0; s < slice_count(); ++s) rings.push_back(make_ring(depth));
    return rings;
  }
  // `rings` follow the current ones: slice s's producers switch to rings[s] on their own (seals[s] says when
  // they have), and the consumer drains the current ring first.
  void replace_rings(std::vector<std::unique_ptr<dataplane::CompletionQueue>> rings, std::vector<Seal> seals) {
    const std::lock_guard lock(structure_mutex_);
    for (unsigned s = 0; s < slice_count(); ++s) newest_[s] = rings[s].get();
    pending_.push_back({std::move(rings), std::move(seals)});
    generation_.fetch_add(1, std::memory_order_release);
  }

 private:
  struct OldRing {
    std::unique_ptr<dataplane::CompletionQueue> ring;
    Seal seal;
  };
  struct Resize {
    std::vector<std::unique_ptr<dataplane::CompletionQueue>> rings;  // [slice]
    std::vector<Seal> seals;                                         // [slice]: when the ring before is final
  };

  // Consumer: the resizes queued since the last poll, in order: each current ring starts draining, sealed as
  // that resize's switch says, and its new ring becomes current.
  void adopt_pending() {
    const std::lock_guard lock(structure_mutex_);
    for (Resize& r : pending_) {
      for (unsigned s = 0; s < slice_count(); ++s) {
        draining_[s].push_back({std::move(rings_[s]), std::move(r.seals[s])});
        rings_[s] = std::move(r.rings[s]);
      }
    }
    pending_.clear();
    adopted_generation_ = generation_.load(std::memory_order_relaxed);  // under the mutex: no resize between
  }

  // `count` of every ring: old ones still draining, current ones, and those of resizes not yet taken in. Under
  // structure_mutex_.
  template <class Count>
  [[nodiscard]] uint32_t sum_over_rings(Count count) const noexcept {
    uint32_t total = 0;
    for (unsigned s = 0; s < slice_count(); ++s) {
      for (const auto& old : draining_[s]) total += count(*old.ring);
      total += count(*rings_[s]);
    }
    for (const Resize& r : pending_) {
      for (const auto& ring : r.rings) total += count(*ring);
    }
    return total;
  }

  std::unique_ptr<dataplane::CompletionQueue> make_ring(uint32_t depth) {
    auto ring = std::make_unique<dataplane::CompletionQueue>(ring_capacity(depth));
    ring->attach_events(&events_);
    return ring;
  }

  template <class Visit>
  static uint32_t drain(dataplane::CompletionQueue& ring, uint32_t max, Visit& visit) {
    uint32_t taken = 0;
    while (taken < max) {
      const dataplane::CompletionEntry* e = ring.peek();
      if (e == nullptr) break;
      visit(*e);
      ring.pop();
      ++taken;
    }
    if (taken != 0) ring.publish_consumed();
    return taken;
  }

  // Is anything queued that satisfies an arm at `level` (kAny: anything; kSolicited: a solicited receive
  // or an error)? Reads without consuming (peek_ahead).
  [[nodiscard]] bool any_queued(dataplane::ArmLevel level) const noexcept {
    const auto matches = [&](const dataplane::CompletionQueue& ring) {
      for (uint32_t ahead = 0;; ++ahead) {
        const dataplane::CompletionEntry* e = ring.peek_ahead(ahead);
        if (e == nullptr) return false;
        if (dataplane::arm_level_needed(e->completion, e->is_receive) <= level) return true;
      }
    };
    for (unsigned s = 0; s < slice_count(); ++s) {
      for (const auto& old : draining_[s])
        if (matches(*old.ring)) return true;
      if (matches(*rings_[s])) return true;
    }
    for (const Resize& r : pending_) {
      for (const auto& ring : r.rings)
        if (matches(*ring)) return true;
    }
    return false;
  }

  // Engines RMW the arm word on every append: keep it off the consumer's lines.
  alignas(dataplane::kCacheLine) dataplane::CompletionEvents events_;
  // The consumer's lines.
  alignas(dataplane::kCacheLine) std::vector<std::unique_ptr<dataplane::CompletionQueue>> rings_;  // [slice]
  std::vector<std::deque<OldRing>> draining_;  // [slice], oldest first
  unsigned next_slice_ = 0;
  uint64_t adopted_generation_ = 0;
  // A resize's.
  alignas(dataplane::kCacheLine) std::atomic<uint64_t> generation_{0};  // resizes queued so far
  mutable std::mutex structure_mutex_;
  std::vector<Resize> pending_;                      // queued, not yet taken in by the consumer
  std::vector<dataplane::CompletionQueue*> newest_;  // [slice]: where producers go now (attach mutex)
};

}  // namespace uroce::ndk::detail
