// A bounded multi-producer / single-consumer queue of pointers: how engines (and consumers arming a CQ)
// hand objects that owe a callback to the notifier thread, without locks, waits or allocation.
//
// Dmitry Vyukov's bounded queue: every cell carries a sequence number. A producer claims position p with
// a CAS on the enqueue index when cell p's sequence says "free for lap p", writes the value, and publishes
// it by storing p + 1 into the sequence (release). The consumer sees the value once the sequence reads
// p + 1 (acquire), takes it, and frees the cell for the next lap by storing p + capacity (release, so the
// producer of that lap writes after our read). No producer ever waits for another's progress except the
// consumer, which simply finds the cell not yet published and tries again later.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

namespace uroce::ndk::detail {

inline constexpr std::size_t kCacheLine = 64;

template <class T>
class NotificationQueue {
 public:
  explicit NotificationQueue(uint32_t capacity_pow2)
      : cells_(std::make_unique<Cell[]>(capacity_pow2)), mask_(capacity_pow2 - 1) {
    for (uint32_t i = 0; i < capacity_pow2; ++i) cells_[i].sequence.store(i, std::memory_order_relaxed);
  }

  [[nodiscard]] uint32_t capacity() const noexcept { return mask_ + 1; }

  // Any thread. False if the queue is full (callers size it so that it never is).
  bool push(T value) noexcept {
    uint32_t position = enqueue_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[position & mask_];
      const uint32_t sequence = cell.sequence.load(std::memory_order_acquire);  // pairs with pop()'s release
      const auto lag = static_cast<int32_t>(sequence - position);
      if (lag == 0) {
        if (enqueue_.compare_exchange_weak(position, position + 1, std::memory_order_relaxed)) {
          cell.value = value;
          publish_cell(cell, position + 1);
          return true;
        }
      } else if (lag < 0) {
        return false;  // the consumer has not freed this cell for our lap yet: full
      } else {
        position = enqueue_.load(std::memory_order_relaxed);
      }
    }
  }

  // The single consumer.
  std::optional<T> pop() noexcept {
    Cell& cell = cells_[dequeue_ & mask_];
    if (!cell_is_published(cell, dequeue_ + 1)) return std::nullopt;
    T value = cell.value;
    publish_cell(cell, dequeue_ + capacity());  // free for the next lap, after our read of the value
    ++dequeue_;
    return value;
  }

 private:
  struct Cell {
    std::atomic<uint32_t> sequence{0};
    T value{};
  };
  // Release: the value written before is visible to whoever acquires this sequence.
  static void publish_cell(Cell& cell, uint32_t sequence) noexcept {
    cell.sequence.store(sequence, std::memory_order_release);
  }
  // Acquire: pairs with publish_cell(), so the value is complete.
  static bool cell_is_published(const Cell& cell, uint32_t sequence) noexcept {
    return cell.sequence.load(std::memory_order_acquire) == sequence;
  }

  std::unique_ptr<Cell[]> cells_;
  uint32_t mask_;
  alignas(kCacheLine) std::atomic<uint32_t> enqueue_{0};
  alignas(kCacheLine) uint32_t dequeue_ = 0;  // consumer-private
};

}  // namespace uroce::ndk::detail
