// Shared receive queues: one SPSC ring from the posting thread to the one engine whose QPs use it, and the
// one-shot limit notification (dataplane::ReceiveLimitEvents).
#include "api/provider.h"

namespace uroce::ndk::detail {

NTSTATUS PdImpl::NdkCreateSrq(uint32_t srq_depth, uint32_t max_receive_request_sge, uint32_t notify_threshold,
                              SrqNotificationCallback notification, void* notification_context,
                              const GroupAffinity* affinity, CreateCompletion completion, void* request_context,
                              Srq** srq) {
  if (srq_depth == 0 || srq_depth > kMaxQueueDepth || max_receive_request_sge > kMaxSge || notify_threshold > srq_depth)
    return STATUS_INVALID_PARAMETER;
  // The SRQ's engine, chosen from the affinity as for a CQ; QPs that use the SRQ run there.
  const dataplane::EngineId engine = adapter_.choose_engine(affinity);
  const uint64_t callback_cpus = adapter_.stack().callback_cpus(affinity);
  // The create-time threshold arms as NdkModifySrq's does (ndkpi.md §9.5), so with fewer receives posted than it
  // (none, at first) the notification comes at once: only once the SRQ is the consumer's, so that its callback
  // may use the pointer (*srq is written by then; with a completion, the notification may run beside it).
  return adapter_.create(
      *this, completion, request_context, srq,
      [=, this]() -> std::pair<NTSTATUS, Srq*> {
        if (!adapter_.reserve_notifiable()) return {STATUS_INSUFFICIENT_RESOURCES, nullptr};
        auto* s = new SrqImpl(*this, srq_depth, max_receive_request_sge, engine, notification, notification_context);
        s->executor = adapter_.notifier().executor_for(callback_cpus);  // before any notification can exist
        adapter_.stack().enlist(*s);
        return {STATUS_SUCCESS, s};
      },
      [notify_threshold](Srq* s) {
        if (notify_threshold != 0) static_cast<SrqImpl*>(s)->arm_limit(notify_threshold);
      });
}

SrqImpl::SrqImpl(PdImpl& pd, uint32_t depth, uint32_t max_sge, dataplane::EngineId engine,
                 SrqNotificationCallback callback, void* callback_context)
    : Srq(kNdkVersion, NdkObjectTypeSrq),
      Lifetime(&pd),
      pd_(pd),
      capacity_(CompletionSlices::ring_capacity(depth)),
      limit_(&pd.adapter().notifier(), static_cast<Notifiable*>(this)),
      engine_(engine),
      max_sge_(max_sge),
      depth_(depth),
      callback_(callback),
      callback_context_(callback_context) {
  rings_.push_back(std::make_unique<dataplane::ReceiveQueue>(capacity_));
  first_ = ring_ = oldest_ = rings_.front().get();
}

SrqImpl::~SrqImpl() {
  pd_.adapter().stack().delist(*this);
  pd_.adapter().release_notifiable();
}

// The engines stopped under the SRQ: it is dead with its QPs (ndkpi.md §9.9). Its consumer hears it once, armed
// or not, and NdkSrqReceive fails from now on. Release: pairs with the acquire loads below.
void SrqImpl::fail_fatally() noexcept {
  if (!fatal_.exchange(true, std::memory_order_acq_rel))
    pd_.adapter().notifier().notify(static_cast<Notifiable*>(this));
}

NTSTATUS SrqImpl::NdkCloseSrq(CloseCompletion completion, void* request_context) {
  return close(completion, request_context);  // pends while QPs use it or a notification is being delivered
}

// Posted and not yet taken by the engine: each ring's published tail minus the engine's head, from the first ring
// through the successors the poster linked (drained rings count 0).
uint32_t SrqImpl::posted() const noexcept {
  uint32_t total = 0;
  for (const dataplane::ReceiveQueue* r = first_; r != nullptr; r = r->successor())
    total += r->producer_tail() - r->consumer_head();
  return total;
}

void SrqImpl::arm_limit(uint32_t threshold) noexcept {
  limit_.arm(threshold, [this] { return posted(); });
}

// ndkpi.md §9.5: depth 0 keeps the depth, any other depth resizes. Growing past the ring gives the SRQ a larger
// ring: the poster adopts it at its next NdkSrqReceive and links it after the current one, and the engine takes
// the old ring's receives first (RcQueuePair::pop_receive), so no receive is lost or reordered and nobody waits
// for the engine. Shrinking below what is posted only refuses new receives until enough were taken.
NTSTATUS SrqImpl::NdkModifySrq(uint32_t srq_depth, uint32_t notify_threshold, RequestCompletion, void*) {
  if (srq_depth > kMaxQueueDepth) return STATUS_INVALID_PARAMETER;
  {
    // The whole read-modify-write of the depth: two modifies at once must not store a depth the other replaced
    // (a "keep the depth" call storing the old depth back would undo a concurrent grow).
    const std::lock_guard lock(grow_mutex_);
    const uint32_t depth = srq_depth != 0 ? srq_depth : depth_.load(std::memory_order_relaxed);
    if (notify_threshold > depth) return STATUS_INVALID_PARAMETER;
    if (depth > capacity_) {
      capacity_ = CompletionSlices::ring_capacity(depth);
      rings_.push_back(std::make_unique<dataplane::ReceiveQueue>(capacity_));
      grown_.store(rings_.back().get(), std::memory_order_release);  // before the depth that needs it
    }
    depth_.store(depth, std::memory_order_release);
  }
  if (notify_threshold != 0) arm_limit(notify_threshold);  // 0 keeps threshold and arm state (ndkpi.md §9.5)
  return STATUS_SUCCESS;
}

NTSTATUS SrqImpl::NdkSrqReceive(void* request_context, const NdkSge* sgl, uint32_t sge_count) {
  if (fatal_.load(std::memory_order_acquire)) [[unlikely]]
    return STATUS_INTERNAL_ERROR;
  if (sge_count > max_sge_ || (sge_count != 0 && sgl == nullptr)) return STATUS_INVALID_PARAMETER;
  uint64_t total = 0;
  for (uint32_t i = 0; i < sge_count; ++i) total += sgl[i].Length;
  if (total > kMaxTransferLength) return STATUS_INVALID_PARAMETER;
  if (const NTSTATUS s = pd_.check_privileged_sges(sgl, sge_count, true); s != STATUS_SUCCESS) return s;
  // Acquire: a depth NdkModifySrq grew comes with the ring it made (grown_), adopted here before it is needed.
  const uint32_t depth = depth_.load(std::memory_order_acquire);
  if (dataplane::ReceiveQueue* grown = grown_.exchange(nullptr, std::memory_order_acquire)) [[unlikely]] {
    ring_->link_successor(grown);  // after our last publish to the old ring
    ring_ = grown;
    written_ = 0;
  }
  // The rings before ring_ take no more receives: the drained ones are skipped for good, the others still count.
  while (oldest_ != ring_ && oldest_->producer_tail() == oldest_->consumer_head()) oldest_ = oldest_->successor();
  uint32_t queued = written_ - ring_->consumer_head();
  for (const dataplane::ReceiveQueue* r = oldest_; r != ring_; r = r->successor())
    queued += r->producer_tail() - r->consumer_head();
  if (queued >= depth) return STATUS_INSUFFICIENT_RESOURCES;
  proto::RecvWqe& r = ring_->slot(written_);
  r.context = reinterpret_cast<uintptr_t>(request_context);
  r.num_sge = static_cast<uint8_t>(sge_count);
  for (uint32_t i = 0; i < sge_count; ++i) {
    r.sge[i] = {sge_address(sgl[i]), sgl[i].Length, proto::LocalToken{sgl[i].MemoryRegionToken}};
  }
  ring_->publish_tail(++written_);  // the engine's pop_receive() acquires it
  return STATUS_SUCCESS;
}

void SrqImpl::deliver_notification() noexcept {
  if (closing() || callback_ == nullptr || fatal_notified_) return;
  fatal_notified_ = fatal_.load(std::memory_order_acquire);
  callback_(callback_context_, fatal_notified_ ? STATUS_INTERNAL_ERROR : STATUS_SUCCESS);  // or: below the threshold
}

}  // namespace uroce::ndk::detail
