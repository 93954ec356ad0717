// The notifier: runs consumer callbacks (CQ and SRQ notifications, completions of async creates and
// connects) on a TBB task arena, never on an engine thread (ARCHITECTURE.md "Notifications").
//
//   engine / consumer --notify(target)--> NotificationQueue (MPSC, lock-free) --> notifier thread
//        --> task on the arena --> target->deliver_notification(), once per notify, serialised per target
//
// Serialisation per CQ without a lock: each target counts the notifications it is owed. Only the notify()
// that moves the count from 0 to 1 queues the target, and the task that delivers keeps delivering until it
// brings the count back to 0, so at most one task per target exists at a time. The queued target holds a
// reference (retain_for_delivery), so a CQ's close completes only after its last callback returned.
//
// The notifier thread is off the datapath. Idle, it spins, then polls the queue every 50 us while notifications
// came recently (so a stream of them costs the engines nothing), and after 100 ms without any it blocks on a futex;
// the notify() that finds it blocked wakes it with one FUTEX_WAKE. That is the only system call a notification can
// cost an engine, paid once per quiet spell, and it means the first callback after one waits for no sleep (before,
// the thread slept in 50 us steps forever, costing the CPU 20 000 wakes a second when idle and the first callback
// up to 50 us).
//
// Callbacks run where the CQ's or SRQ's affinity asks (NdkCreateCq's Affinity: the preferred processors for its
// callbacks): each distinct CPU set gets an executor, a TBB arena whose threads an observer pins to those CPUs on
// entry. Objects without one share the unpinned default executor. Work reaches an arena through its executor's
// mutex-protected list (off the datapath too): each task enqueued on the arena takes one job from it, so the
// handoff is visible to ThreadSanitizer, which cannot see inside libtbb.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <sched.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>
#include <tbb/task_scheduler_observer.h>

#include "api/notification_queue.h"
#include "dataplane/work_queues.h"

namespace uroce::ndk::detail {

inline constexpr uint32_t kDefaultExecutor = 0;  // unpinned

// A CQ or SRQ as the notifier sees it.
class Notifiable {
 public:
  // Runs the consumer's callback once (or nothing, if the object is closing). Never concurrently for one
  // object, never on an engine.
  virtual void deliver_notification() noexcept = 0;
  virtual void retain_for_delivery() noexcept = 0;
  virtual void release_after_delivery() noexcept = 0;
  // Interrupt moderation (NdkControlCqInterruptModeration): may a notification that reached the notifier at
  // `since_ns` be delivered at `now_ns` (steady clock)? Called on the notifier thread only; a held notification
  // is asked again on every notifier loop until it is due.
  [[nodiscard]] virtual bool notification_due(uint64_t since_ns, uint64_t now_ns) noexcept {
    (void)since_ns;
    (void)now_ns;
    return true;
  }

  // A fatal error (the engines stopped under the object, Stack::fail_live_notifiables): it fails for good and
  // tells its consumer once with STATUS_INTERNAL_ERROR (ndkpi.md §9.9).
  virtual void fail_fatally() noexcept = 0;
  // retain_for_delivery(), unless the object is already being destroyed (its last reference is gone).
  [[nodiscard]] virtual bool retain_if_alive() noexcept = 0;

  std::atomic<uint32_t> notifications_owed{0};
  // Where its callbacks run (Notifier::executor_for); set before the first notification, never changed.
  uint32_t executor = kDefaultExecutor;

 protected:
  ~Notifiable() = default;
};

class Notifier final : public dataplane::EventNotifier {
 public:
  // `max_targets`: how many Notifiables may exist at once (each sits in the queue at most once).
  explicit Notifier(uint32_t max_targets, int concurrency = 2);
  ~Notifier();
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;

  // Engines and consumers: `target` is a Notifiable*. Lock-free, no allocation; a FUTEX_WAKE only if the notifier
  // thread is blocked.
  void notify(void* target) noexcept override;
  // Control path: runs `task` on the default executor (async creates and connects).
  void run(std::function<void()> task);
  // Control path: the executor whose threads run on exactly the CPUs of `cpus` (bit n: CPU n), created on first
  // use; 0 (the unpinned default) for an empty set.
  uint32_t executor_for(uint64_t cpus);
  // Returns once everything notified or run before the call has been delivered. Not from a callback.
  void wait_idle() const;
  // Stops the thread and waits for every job (adapter close).
  void stop();

 private:
  // An arena and the jobs waiting for it. Pinned executors pin every thread that enters the arena.
  struct Executor;
  void thread_main();
  void handle(Notifiable* target, uint64_t now_ns) noexcept;
  void deliver_all(Notifiable* target) noexcept;
  void submit(uint32_t executor, std::function<void()> job);
  void wake() noexcept;

  NotificationQueue<Notifiable*> queue_;
  // TBB sizes its worker pool for "one external thread plus workers": on a 2-CPU machine that is one
  // worker. Our jobs are enqueued, never joined by an external thread, so we ask for `concurrency` workers.
  tbb::global_control parallelism_;
  const int concurrency_;
  cpu_set_t unpinned_{};        // where callbacks of objects without an affinity run
  std::mutex executors_mutex_;  // executor_for() against itself; submit() reads a slot published before use
  std::vector<std::unique_ptr<Executor>> executors_;  // [0]: the default; never shrinks, reserved up front
  std::atomic<uint64_t> jobs_pending_{0};             // submitted and not finished
  std::atomic<uint64_t> handed_{0};                   // notify() calls and run() calls
  std::atomic<uint64_t> delivered_{0};                // deliveries and tasks finished
  std::atomic<bool> stopping_{false};
  // The futex the notifier thread blocks on (a count of wakes), and whether it may be blocked on it. notify()
  // pushes, then (after a seq_cst fence) reads sleeping_; the thread sets sleeping_, then (after its fence) looks at
  // the queue once more before it blocks: Dekker's pattern, so a notification never waits for a timeout.
  std::atomic<uint32_t> wake_word_{0};
  std::atomic<bool> sleeping_{false};
  // Notifications held back by a CQ's interrupt moderation: notifier thread only, capacity reserved for every
  // target, so no allocation.
  struct Held {
    Notifiable* target;
    uint64_t since_ns;
  };
  std::vector<Held> held_;
  const uint32_t queue_capacity_;  // every target that can exist
  std::thread thread_;
};

}  // namespace uroce::ndk::detail
