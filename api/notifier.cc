#include "api/notifier.h"

#include <algorithm>
#include <chrono>

#include <pthread.h>

namespace uroce::ndk::detail {

namespace {

uint32_t next_pow2(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Idle backoff of the notifier thread: spin, then yield, then sleep in short steps. Latency of an idle
// notification is at most one sleep; a busy notifier never sleeps.
constexpr unsigned kSpins = 256;
constexpr unsigned kYields = 256;
constexpr auto kIdleSleep = std::chrono::microseconds(50);

}  // namespace

Notifier::Notifier(uint32_t max_targets, int concurrency)
    : queue_(next_pow2(max_targets)),
      parallelism_(
          tbb::global_control::max_allowed_parallelism,
          std::max<std::size_t>(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism),
                                static_cast<std::size_t>(concurrency) + 1)),
      arena_(concurrency, 0),
      queue_capacity_(next_pow2(max_targets)),
      thread_([this] { thread_main(); }) {
  (void)pthread_setname_np(thread_.native_handle(), "uroce-notify");  // what top -H shows
}

Notifier::~Notifier() { stop(); }

void Notifier::notify(void* target) noexcept {
  auto* n = static_cast<Notifiable*>(target);
  handed_.fetch_add(1, std::memory_order_relaxed);
  // acq_rel: the 0 -> 1 transition orders this notify after the previous delivery task's last decrement.
  if (n->notifications_owed.fetch_add(1, std::memory_order_acq_rel) == 0) {
    n->retain_for_delivery();
    // The queue has a cell for every target that can exist, and a target is in it at most once.
    (void)queue_.push(n);
  }
}

void Notifier::run(std::function<void()> task) {
  handed_.fetch_add(1, std::memory_order_relaxed);
  submit([this, task = std::move(task)] {
    task();
    delivered_.fetch_add(1, std::memory_order_release);
  });
}

void Notifier::submit(std::function<void()> job) {
  jobs_pending_.fetch_add(1, std::memory_order_relaxed);
  {
    const std::lock_guard lock(jobs_mutex_);
    jobs_.push_back(std::move(job));
  }
  arena_.enqueue([this] { run_one_job(); });  // never blocks the submitting thread
}

// One task per submitted job; which job a task runs does not matter (each job is independent, and a
// target's deliveries are serialised by its owed count, not by task order).
void Notifier::run_one_job() {
  std::function<void()> job;
  {
    const std::lock_guard lock(jobs_mutex_);
    job = std::move(jobs_.front());
    jobs_.pop_front();
  }
  job();
  jobs_pending_.fetch_sub(1, std::memory_order_release);
}

void Notifier::deliver_all(Notifiable* target) noexcept {
  do {
    target->deliver_notification();
    delivered_.fetch_add(1, std::memory_order_release);
  } while (target->notifications_owed.fetch_sub(1, std::memory_order_acq_rel) != 1);
  target->release_after_delivery();  // may destroy it (a pending close completes here)
}

void Notifier::thread_main() {
  held_.reserve(queue_capacity_);  // here, not in the constructor: this thread already runs there
  const auto now_ns = [] {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  };
  unsigned idle = 0;
  while (!stopping_.load(std::memory_order_acquire)) {
    bool worked = false;
    // Held by interrupt moderation: released once due (enough completions queued, or the interval passed).
    if (!held_.empty()) {
      const uint64_t now = now_ns();
      for (std::size_t i = 0; i < held_.size();) {
        if (!held_[i].target->notification_due(held_[i].since_ns, now)) {
          ++i;
          continue;
        }
        Notifiable* n = held_[i].target;
        held_[i] = held_.back();
        held_.pop_back();
        submit([this, n] { deliver_all(n); });
        worked = true;
      }
    }
    if (const auto target = queue_.pop()) {
      Notifiable* n = *target;
      if (const uint64_t now = now_ns(); !n->notification_due(now, now)) {
        held_.push_back({n, now});
      } else {
        submit([this, n] { deliver_all(n); });
      }
      worked = true;
    }
    if (worked) {
      idle = 0;
      continue;
    }
    // Idle: spin, yield, then pause kIdleSleep at a time. Held notifications are looked at after every pause, so a
    // moderation interval is honoured to about kIdleSleep.
    if (++idle < kSpins) continue;
    if (idle < kSpins + kYields) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kIdleSleep);
    }
  }
}

void Notifier::wait_idle() const {
  const uint64_t handed = handed_.load(std::memory_order_acquire);
  while (delivered_.load(std::memory_order_acquire) < handed)
    std::this_thread::sleep_for(std::chrono::microseconds(20));
}

void Notifier::stop() {
  if (thread_.joinable()) {
    wait_idle();
    stopping_.store(true, std::memory_order_release);
    thread_.join();
  }
  while (jobs_pending_.load(std::memory_order_acquire) != 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
}

}  // namespace uroce::ndk::detail
