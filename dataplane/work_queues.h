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
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <new>

#include "proto/rc_types.h"

namespace uroce::dataplane {

inline constexpr std::size_t kCacheLine = 64;

// A ring of `T` written by one thread and read by another. Indices are free-running
// uint32; slot i lives at i & mask. The producer and consumer indices sit on
// separate cache lines so the two threads never write the same line.
template <class T>
class SpscQueue {
 public:
  explicit SpscQueue(uint32_t capacity_pow2)
      : slots_(std::make_unique<T[]>(capacity_pow2)), mask_(capacity_pow2 - 1) {}

  [[nodiscard]] uint32_t capacity() const noexcept { return mask_ + 1; }
  [[nodiscard]] T& slot(uint32_t index) noexcept { return slots_[index & mask_]; }
  [[nodiscard]] const T& slot(uint32_t index) const noexcept { return slots_[index & mask_]; }
  [[nodiscard]] const T* data() const noexcept { return slots_.get(); }

  // Producer side. The producer's own copy of the tail needs no ordering.
  [[nodiscard]] uint32_t producer_tail() const noexcept { return tail_.load(std::memory_order_relaxed); }
  // Doorbell: the slots before `tail` are complete. Release: their bytes become
  // visible before the new tail does.
  void publish_tail(uint32_t tail) noexcept { tail_.store(tail, std::memory_order_release); }
  // Acquire: once the consumer says it is done with a slot, our next write to it
  // cannot be reordered before the consumer's last read of it.
  [[nodiscard]] uint32_t consumer_head() const noexcept { return head_.load(std::memory_order_acquire); }
  [[nodiscard]] bool full() const noexcept { return producer_tail() - consumer_head() >= capacity(); }

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
};

using SendQueue = SpscQueue<proto::SendWqe>;
using ReceiveQueue = SpscQueue<proto::RecvWqe>;

// One completion. The phase byte is written last: it flips meaning on every lap of
// the ring, so a consumer never mistakes last lap's entry for a new one.
struct CompletionEntry {
  proto::Completion completion;
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
  // which the owner reports as an error instead of overwriting unread entries.
  bool push(const proto::Completion& c, uint32_t qp_id, bool is_receive) noexcept {
    if (producer_index_ - consumer_cache_ >= capacity()) {
      consumer_cache_ = consumer_index_.load(std::memory_order_acquire);  // pairs with publish_consumed()
      if (producer_index_ - consumer_cache_ >= capacity()) {
        overrun_.store(true, std::memory_order_relaxed);
        return false;
      }
    }
    CompletionEntry& e = entries_[producer_index_ & mask_];
    e.completion = c;
    e.qp_id = qp_id;
    e.is_receive = is_receive;
    // cqe_is_ours(): the fields above become visible before the phase says the entry is valid.
    e.phase.store(phase_for(producer_index_), std::memory_order_release);
    ++producer_index_;
    produced_.store(producer_index_, std::memory_order_release);
    return true;
  }

  // --- consumer ---
  // The entry at the consumer's position if the producer has written it this lap.
  [[nodiscard]] const CompletionEntry* peek() const noexcept {
    const CompletionEntry& e = entries_[consumer_position_ & mask_];
    // Acquire pairs with the producer's release of the phase: the fields are complete.
    return e.phase.load(std::memory_order_acquire) == phase_for(consumer_position_) ? &e : nullptr;
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
  [[nodiscard]] uint32_t consumed() const noexcept { return consumer_position_; }
  [[nodiscard]] bool overrun() const noexcept { return overrun_.load(std::memory_order_relaxed); }

 private:
  // Lap 0 writes phase 1, lap 1 writes 0, ...; entries start at 0, so none is valid at first.
  [[nodiscard]] uint8_t phase_for(uint32_t index) const noexcept {
    return static_cast<uint8_t>(((index / capacity()) & 1) ^ 1);
  }

  std::unique_ptr<CompletionEntry[]> entries_;
  uint32_t mask_;
  // Producer-private.
  alignas(kCacheLine) uint32_t producer_index_ = 0;
  uint32_t consumer_cache_ = 0;
  std::atomic<uint32_t> produced_{0};
  std::atomic<bool> overrun_{false};
  // Consumer-private position, and the index it publishes.
  alignas(kCacheLine) uint32_t consumer_position_ = 0;
  std::atomic<uint32_t> consumer_index_{0};
};

}  // namespace uroce::dataplane
