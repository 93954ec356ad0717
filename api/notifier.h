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
// The notifier thread is off the datapath: it backs off (pause, yield, short sleeps) when idle. Work reaches
// the arena through a mutex-protected list (off the datapath too): each task enqueued on the arena takes one
// job from it, so the handoff is visible to ThreadSanitizer, which cannot see inside libtbb.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include "api/notification_queue.h"
#include "dataplane/work_queues.h"

namespace uroce::ndk::detail {

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

  std::atomic<uint32_t> notifications_owed{0};

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

  // Engines and consumers: `target` is a Notifiable*. Lock-free, no allocation.
  void notify(void* target) noexcept override;
  // Control path: runs `task` on the arena (async creates and connects).
  void run(std::function<void()> task);
  // Returns once everything notified or run before the call has been delivered. Not from a callback.
  void wait_idle() const;
  // Stops the thread and waits for every job (adapter close).
  void stop();

 private:
  void thread_main();
  void deliver_all(Notifiable* target) noexcept;
  void submit(std::function<void()> job);  // onto the arena
  void run_one_job();

  NotificationQueue<Notifiable*> queue_;
  // TBB sizes its worker pool for "one external thread plus workers": on a 2-CPU machine that is one
  // worker. Our jobs are enqueued, never joined by an external thread, so we ask for `concurrency` workers.
  tbb::global_control parallelism_;
  std::mutex jobs_mutex_;
  std::deque<std::function<void()>> jobs_;
  tbb::task_arena arena_;                  // every thread in it is a worker: callbacks of different CQs overlap
  std::atomic<uint64_t> jobs_pending_{0};  // submitted and not finished
  std::atomic<uint64_t> handed_{0};        // notify() calls and run() calls
  std::atomic<uint64_t> delivered_{0};     // deliveries and tasks finished
  std::atomic<bool> stopping_{false};
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
