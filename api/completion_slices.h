// The rings of one CQ: a single-producer/single-consumer slice per engine (a QP completes into the slice of
// the engine that owns it), drained in turn by the one consumer, plus the CQ's arm and failure state
// (dataplane::CompletionEvents). No DPDK here: the unit tests run it under ThreadSanitizer.
//
// Per-QP order holds because a QP's completions all go to one slice, which is FIFO; NDK orders nothing
// across QPs (ndkpi.md §10.2). A resize gives each slice a new ring: producers are switched to it on their
// engine (RcTransport::retarget_completions), and the consumer drains the old ring, now final, before the
// new one.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "dataplane/work_queues.h"

namespace uroce::ndk::detail {

class CompletionSlices {
 public:
  CompletionSlices(uint32_t depth, unsigned slice_count, dataplane::EventNotifier* notifier, void* target)
      : events_(notifier, target), draining_(slice_count) {
    for (unsigned s = 0; s < slice_count; ++s) rings_.push_back(make_ring(depth));
  }

  // Slices hold at least `depth` entries each (rounded up to a power of two).
  static uint32_t ring_capacity(uint32_t depth) noexcept {
    uint32_t capacity = 1;
    while (capacity < depth) capacity <<= 1;
    return capacity;
  }

  [[nodiscard]] unsigned slice_count() const noexcept { return static_cast<unsigned>(rings_.size()); }
  // The ring producers on engine `slice` write (handed to a QP when it is created).
  [[nodiscard]] dataplane::CompletionQueue& ring(unsigned slice) noexcept { return *rings_[slice]; }
  [[nodiscard]] dataplane::CompletionEvents& events() noexcept { return events_; }
  [[nodiscard]] bool failed() const noexcept { return events_.failed(); }

  // --- consumer ---
  // Calls visit(entry) for up to `max` completions, slice after slice starting where the last call stopped
  // (so no engine's completions starve another's), and publishes the consumer index of every ring it read
  // once, at the end (lazily, as work_queues.h describes).
  template <class Visit>
  uint32_t consume(uint32_t max, Visit&& visit) {
    uint32_t taken = 0;
    const unsigned n = slice_count();
    for (unsigned i = 0; i < n && taken < max; ++i) {
      const unsigned s = (next_slice_ + i) % n;
      auto& old = draining_[s];
      while (!old.empty() && taken < max) {  // a resize's old rings first: their entries are older
        taken += drain(*old.front(), max - taken, visit);
        if (old.front()->peek() != nullptr) break;
        old.pop_front();
      }
      if (old.empty()) taken += drain(*rings_[s], max - taken, visit);
    }
    if (++next_slice_ >= n) next_slice_ = 0;
    return taken;
  }

  // Completions queued and not consumed (exact from the consumer's side, up to those being appended now).
  [[nodiscard]] uint32_t queued() const noexcept {
    return sum_over_rings([](const dataplane::CompletionQueue& r) { return r.pending(); });
  }

  // The same from any thread, with published consumer indices (CompletionQueue::unconsumed). The caller keeps
  // resize out (CqImpl's attach mutex): it replaces the rings.
  [[nodiscard]] uint32_t unconsumed() const noexcept {
    return sum_over_rings([](const dataplane::CompletionQueue& r) { return r.unconsumed(); });
  }

  // NdkArmCq: merge the arm, then fire at once if something already queued satisfies it (ndkpi.md §10.2:
  // required when it arrived after the previous notification, permitted otherwise; we do both).
  void arm(dataplane::ArmLevel level) noexcept {
    using dataplane::ArmLevel;
    const ArmLevel merged = events_.arm(level);  // the RMW that orders the reads below after the engines'
    if (failed()) {
      (void)events_.fire_if_armed(ArmLevel::kErrors);
    } else if (merged == ArmLevel::kAny && any_queued(ArmLevel::kAny)) {
      (void)events_.fire_if_armed(ArmLevel::kAny);
    } else if (merged >= ArmLevel::kSolicited && any_queued(ArmLevel::kSolicited)) {
      (void)events_.fire_if_armed(ArmLevel::kSolicited);
    }
  }

  // --- resize (consumer thread, with producers switched in between) ---
  // New rings for every slice, not yet visible to producers.
  [[nodiscard]] std::vector<std::unique_ptr<dataplane::CompletionQueue>> make_rings(uint32_t depth) {
    std::vector<std::unique_ptr<dataplane::CompletionQueue>> rings;
    for (unsigned s = 0; s < slice_count(); ++s) rings.push_back(make_ring(depth));
    return rings;
  }
  // After every producer writes the new rings: the old ones drain first.
  void adopt_rings(std::vector<std::unique_ptr<dataplane::CompletionQueue>> rings) {
    for (unsigned s = 0; s < slice_count(); ++s) {
      draining_[s].push_back(std::move(rings_[s]));
      rings_[s] = std::move(rings[s]);
    }
  }

 private:
  // `count` of every ring, the old ones still draining included.
  template <class Count>
  [[nodiscard]] uint32_t sum_over_rings(Count count) const noexcept {
    uint32_t total = 0;
    for (unsigned s = 0; s < slice_count(); ++s) {
      for (const auto& old : draining_[s]) total += count(*old);
      total += count(*rings_[s]);
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
        if (matches(*old)) return true;
      if (matches(*rings_[s])) return true;
    }
    return false;
  }

  // Engines RMW the arm word on every append: keep it off the consumer's lines.
  alignas(dataplane::kCacheLine) dataplane::CompletionEvents events_;
  alignas(dataplane::kCacheLine) std::vector<std::unique_ptr<dataplane::CompletionQueue>> rings_;  // [slice]
  std::vector<std::deque<std::unique_ptr<dataplane::CompletionQueue>>> draining_;  // [slice], oldest first
  unsigned next_slice_ = 0;
};

}  // namespace uroce::ndk::detail
