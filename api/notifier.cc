#include "api/notifier.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <ctime>

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace uroce::ndk::detail {

namespace {

uint32_t next_pow2(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Idle backoff of the notifier thread: spin, then sleep kPoll at a time (looking at the queue after each), and once
// kDeepAfter has passed without work, block on the futex until notify() wakes it. While notifications keep coming
// the engines never pay a FUTEX_WAKE (the thread polls); after a quiet spell the thread costs nothing, and the
// first notification wakes it at once instead of waiting out a sleep.
constexpr unsigned kSpins = 256;
constexpr long kPollNs = 50'000;
constexpr auto kDeepAfter = std::chrono::milliseconds(100);
// Executors are created at CQ/SRQ creation and never freed before the notifier; one per distinct CPU set.
constexpr std::size_t kMaxExecutors = 64;

// The futex word is the std::atomic's own storage (lock-free and address-free for uint32_t on Linux).
long futex(std::atomic<uint32_t>& word, int op, uint32_t value, const timespec* timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free);
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), op | FUTEX_PRIVATE_FLAG, value, timeout, nullptr, 0);
}

}  // namespace

// Pins every thread that enters the arena to `cpus`, and gives it back `unpinned` when it leaves: TBB's worker
// threads are one pool that moves between arenas (it calls on_scheduler_entry and _exit on the moving thread).
class PinningObserver final : public tbb::task_scheduler_observer {
 public:
  // `cpus` 0: the arena is the unpinned one, and entering it sets `unpinned`.
  PinningObserver(tbb::task_arena& arena, uint64_t cpus, const cpu_set_t& unpinned)
      : tbb::task_scheduler_observer(arena), unpinned_(unpinned) {
    pinned_ = unpinned;
    if (cpus != 0) {
      CPU_ZERO(&pinned_);
      for (unsigned cpu = 0; cpu < 64; ++cpu)
        if ((cpus >> cpu) & 1) CPU_SET(cpu, &pinned_);
    }
    observe(true);
  }
  ~PinningObserver() override { observe(false); }
  PinningObserver(const PinningObserver&) = delete;
  PinningObserver& operator=(const PinningObserver&) = delete;
  void on_scheduler_entry(bool /*is_worker*/) override {
    (void)pthread_setaffinity_np(pthread_self(), sizeof pinned_, &pinned_);
  }
  void on_scheduler_exit(bool /*is_worker*/) override {
    (void)pthread_setaffinity_np(pthread_self(), sizeof unpinned_, &unpinned_);
  }

 private:
  cpu_set_t pinned_{};
  const cpu_set_t unpinned_;
};

struct Notifier::Executor {
  // The default executor's observer sets the unpinned mask on entry as well: a TBB worker may have been created by
  // (and inherited the mask of) a thread pinned by another executor.
  Executor(int concurrency, uint64_t cpu_set, const cpu_set_t& unpinned)
      : cpus(cpu_set), arena(concurrency, 0), pinning(std::make_unique<PinningObserver>(arena, cpus, unpinned)) {}
  // One task per submitted job; which job a task runs does not matter (each job is independent, and a target's
  // deliveries are serialised by its owed count, not by task order).
  void run_one_job(std::atomic<uint64_t>& pending) {
    std::function<void()> job;
    {
      const std::lock_guard lock(mutex);
      job = std::move(jobs.front());
      jobs.pop_front();
    }
    job();
    pending.fetch_sub(1, std::memory_order_release);
  }

  const uint64_t cpus;    // 0: unpinned
  tbb::task_arena arena;  // every thread in it is a worker: callbacks of different CQs overlap
  std::unique_ptr<PinningObserver> pinning;
  std::mutex mutex;
  std::deque<std::function<void()>> jobs;
};

Notifier::Notifier(uint32_t max_targets, int concurrency)
    : queue_(next_pow2(max_targets)),
      parallelism_(
          tbb::global_control::max_allowed_parallelism,
          std::max<std::size_t>(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism),
                                static_cast<std::size_t>(concurrency) + 1)),
      concurrency_(concurrency),
      queue_capacity_(next_pow2(max_targets)) {
  // Unpinned callbacks run where the thread that opened the adapter may.
  CPU_ZERO(&unpinned_);
  if (sched_getaffinity(0, sizeof unpinned_, &unpinned_) != 0)
    for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu) CPU_SET(cpu, &unpinned_);
  executors_.reserve(kMaxExecutors);  // submit() indexes it while executor_for() appends: it never reallocates
  executors_.push_back(std::make_unique<Executor>(concurrency_, 0, unpinned_));
  thread_ = std::thread([this] { thread_main(); });
  (void)pthread_setname_np(thread_.native_handle(), "uroce-notify");  // what top -H shows
}

Notifier::~Notifier() {
  stop();
  for (auto& e : executors_) e->arena.terminate();
}

uint32_t Notifier::executor_for(uint64_t cpus) {
  if (cpus == 0) return kDefaultExecutor;
  const std::lock_guard lock(executors_mutex_);
  for (uint32_t i = 1; i < executors_.size(); ++i)
    if (executors_[i]->cpus == cpus) return i;
  if (executors_.size() == kMaxExecutors) return kDefaultExecutor;  // honoured "if possible" (ndkpi.md)
  const int threads = std::min(concurrency_, __builtin_popcountll(cpus));
  executors_.push_back(std::make_unique<Executor>(threads, cpus, unpinned_));
  return static_cast<uint32_t>(executors_.size() - 1);
}

void Notifier::notify(void* target) noexcept {
  auto* n = static_cast<Notifiable*>(target);
  handed_.fetch_add(1, std::memory_order_relaxed);
  // acq_rel: the 0 -> 1 transition orders this notify after the previous delivery task's last decrement.
  if (n->notifications_owed.fetch_add(1, std::memory_order_acq_rel) == 0) {
    n->retain_for_delivery();
    // The queue has a cell for every target that can exist, and a target is in it at most once.
    (void)queue_.push(n);
    // Dekker's pattern with thread_main(): the push, then the look at sleeping_.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_relaxed)) wake();
  }
}

void Notifier::wake() noexcept {
  wake_word_.fetch_add(1, std::memory_order_release);
  (void)futex(wake_word_, FUTEX_WAKE, 1, nullptr);
}

void Notifier::run(std::function<void()> task) {
  handed_.fetch_add(1, std::memory_order_relaxed);
  submit(kDefaultExecutor, [this, task = std::move(task)] {
    task();
    delivered_.fetch_add(1, std::memory_order_release);
  });
}

void Notifier::submit(uint32_t executor, std::function<void()> job) {
  jobs_pending_.fetch_add(1, std::memory_order_relaxed);
  Executor* e = nullptr;
  {
    // The slot was published by executor_for() under this mutex before the object naming it existed.
    const std::lock_guard lock(executors_mutex_);
    e = executors_[executor].get();
  }
  {
    const std::lock_guard lock(e->mutex);
    e->jobs.push_back(std::move(job));
  }
  e->arena.enqueue([this, e] { e->run_one_job(jobs_pending_); });  // never blocks the submitting thread
}

void Notifier::deliver_all(Notifiable* target) noexcept {
  do {
    target->deliver_notification();
    delivered_.fetch_add(1, std::memory_order_release);
  } while (target->notifications_owed.fetch_sub(1, std::memory_order_acq_rel) != 1);
  target->release_after_delivery();  // may destroy it (a pending close completes here)
}

// A notification taken from the queue: delivered on its target's executor, or held while moderation holds it.
void Notifier::handle(Notifiable* n, uint64_t now_ns) noexcept {
  if (!n->notification_due(now_ns, now_ns)) {
    held_.push_back({n, now_ns});
  } else {
    submit(n->executor, [this, n] { deliver_all(n); });
  }
}

void Notifier::thread_main() {
  held_.reserve(queue_capacity_);  // here, not in the constructor: this thread already runs there
  const auto now_ns = [] {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  };
  unsigned idle = 0;
  auto last_work = std::chrono::steady_clock::now();
  const timespec poll{0, kPollNs};
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
        submit(n->executor, [this, n] { deliver_all(n); });
        worked = true;
      }
    }
    if (const auto target = queue_.pop()) {
      handle(*target, now_ns());
      worked = true;
    }
    if (worked) {
      idle = 0;
      continue;
    }
    if (++idle < kSpins) continue;
    if (idle == kSpins) last_work = std::chrono::steady_clock::now();  // the spins took about a microsecond
    const uint32_t seen = wake_word_.load(std::memory_order_acquire);
    // Recently busy, or holding a moderated notification: a timed sleep, which no notify() interrupts.
    if (!held_.empty() || std::chrono::steady_clock::now() - last_work < kDeepAfter) {
      (void)futex(wake_word_, FUTEX_WAIT, seen, &poll);
      continue;
    }
    // Quiet for kDeepAfter: block until notify() or stop() wakes us. The word was read before sleeping_ is
    // published: a wake after that read changes it, and FUTEX_WAIT then returns at once.
    sleeping_.store(true, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // Dekker's pattern with notify()
    if (const auto target = queue_.pop()) {
      sleeping_.store(false, std::memory_order_relaxed);
      handle(*target, now_ns());
      idle = 0;
      continue;
    }
    if (!stopping_.load(std::memory_order_acquire)) (void)futex(wake_word_, FUTEX_WAIT, seen, nullptr);
    sleeping_.store(false, std::memory_order_relaxed);
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
    wake();
    thread_.join();
  }
  while (jobs_pending_.load(std::memory_order_acquire) != 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
}

}  // namespace uroce::ndk::detail
