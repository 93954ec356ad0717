// Completion queues: results, arming and notification delivery, resize, close.
#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "api/completion_status.h"
#include "api/provider.h"

namespace uroce::ndk::detail {

namespace {

NdkOperationType operation_type(const dataplane::CompletionEntry& e) noexcept {
  using proto::WorkOp;
  if (e.is_receive) {
    return (e.completion.flags & proto::kCompletionWithInvalidate) ? NdkOperationTypeReceiveAndInvalidate
                                                                   : NdkOperationTypeReceive;
  }
  switch (e.completion.op) {
    case WorkOp::kRdmaWrite:
    case WorkOp::kRdmaWriteWithImmediate:
      return NdkOperationTypeWrite;
    case WorkOp::kRdmaRead:
      return NdkOperationTypeRead;
    case WorkOp::kFastRegister:
      return NdkOperationTypeFastRegister;
    case WorkOp::kLocalInvalidate:
      return NdkOperationTypeInvalidate;
    case WorkOp::kBindMemoryWindow:
      return NdkOperationTypeBind;
    default:
      return NdkOperationTypeSend;  // Send, SendAndInvalidate (ndkpi.md §5: the sender sees Send)
  }
}

void fill(NdkResult& r, const dataplane::CompletionEntry& e) noexcept {
  r.Status = ntstatus_of(e.completion.status, e.is_receive);
  r.BytesTransferred = e.completion.byte_length;
  r.QPContext = reinterpret_cast<void*>(static_cast<uintptr_t>(e.qp_context));
  r.RequestContext = reinterpret_cast<void*>(static_cast<uintptr_t>(e.completion.context));
}

void fill(NdkResultEx& r, const dataplane::CompletionEntry& e) noexcept {
  r.Status = ntstatus_of(e.completion.status, e.is_receive);
  r.BytesTransferred = e.completion.byte_length;
  r.QPContext = reinterpret_cast<void*>(static_cast<uintptr_t>(e.qp_context));
  r.RequestContext = reinterpret_cast<void*>(static_cast<uintptr_t>(e.completion.context));
  r.Type = operation_type(e);
  r.ProviderErrorCode = static_cast<uint32_t>(e.completion.status);  // 0 on success
  r.TypeSpecificCompletionOutput =
      r.Type == NdkOperationTypeReceiveAndInvalidate ? e.completion.invalidated_rkey.value() : 0;
}

}  // namespace

CqImpl::CqImpl(AdapterImpl& adapter, uint32_t depth, dataplane::EngineId home, CqNotificationCallback callback,
               void* callback_context)
    : Cq(kNdkVersion, NdkObjectTypeCq),
      Lifetime(&adapter),
      adapter_(adapter),
      slices_(depth, static_cast<unsigned>(adapter.dataplane().engine_count()), &adapter.notifier(),
              static_cast<Notifiable*>(this)),
      home_(home),
      callback_(callback),
      callback_context_(callback_context),
      depth_(depth) {}

CqImpl::~CqImpl() {
  adapter_.stack().delist(*this);
  adapter_.release_notifiable();
}

// The engines stopped under the CQ: it fails as on an overrun (posts on its QPs fail, nothing further is
// reported), and an armed consumer, or the next arm, hears STATUS_INTERNAL_ERROR.
void CqImpl::fail_fatally() noexcept { slices_.fail_fatally(); }

NTSTATUS CqImpl::NdkCloseCq(CloseCompletion completion, void* request_context) {
  // From here on deliver_notification() calls nothing; the close completes once attached QPs are closed and
  // a delivery in progress has returned (each holds a reference).
  return close(completion, request_context);
}

void CqImpl::attach(QpImpl* qp) {
  retain();
  qps_.push_back(qp);
}

void CqImpl::detach(QpImpl* qp) {
  {
    const std::lock_guard lock(attach_mutex_);
    qps_.erase(std::find(qps_.begin(), qps_.end(), qp));
  }
  release();
}

template <class Result, class Fill>
uint32_t CqImpl::get_results(Result* results, uint32_t count, Fill&& fill_one) {
  if (results == nullptr) return 0;
  uint32_t n = 0;
  // ndkpi.md §9.9: an overrun reaches the consumer through the notification status only (no result is made up
  // for it: a result with null contexts is nothing a consumer can act on). The entries queued before it stay
  // readable; the failed CQ takes no more (CompletionQueue::push), so nothing further appears.
  n = slices_.consume(count, [&](const dataplane::CompletionEntry& e) {
    fill_one(results[n], e);
    ++n;
  });
  return n;
}

uint32_t CqImpl::NdkGetCqResults(NdkResult* results, uint32_t count) {
  return get_results(results, count, [](NdkResult& r, const dataplane::CompletionEntry& e) { fill(r, e); });
}

uint32_t CqImpl::NdkGetCqResultsEx(NdkResultEx* results, uint32_t count) {
  return get_results(results, count, [](NdkResultEx& r, const dataplane::CompletionEntry& e) { fill(r, e); });
}

void CqImpl::NdkArmCq(uint32_t notify_type) {
  using dataplane::ArmLevel;
  switch (notify_type) {
    case NDK_CQ_NOTIFY_ERRORS:
      slices_.arm(ArmLevel::kErrors);
      break;
    case NDK_CQ_NOTIFY_ANY:
      slices_.arm(ArmLevel::kAny);
      break;
    case NDK_CQ_NOTIFY_SOLICITED:
      slices_.arm(ArmLevel::kSolicited);
      break;
    default:
      break;  // VOID function: an unknown type arms nothing
  }
}

// One notification per arm (the engine or NdkArmCq cleared the arm before handing us over), none after the
// close began, and none after the overrun was reported.
void CqImpl::deliver_notification() noexcept {
  if (closing() || callback_ == nullptr || overrun_notified_) return;
  const bool failed = slices_.failed();
  overrun_notified_ = failed;
  callback_(callback_context_, !failed           ? STATUS_SUCCESS
                               : slices_.fatal() ? STATUS_INTERNAL_ERROR  // ndkpi.md §9.9: fatal
                                                 : STATUS_BUFFER_OVERFLOW);
}

// ndkpi.md §9.2. ModerationInterval (us) 0 or ModerationCount 0 or 1: off. Interval MAXULONG: no timer, the count
// alone; count MAXULONG or above the CQ's depth: the interval alone; both unlimited is no moderation at all
// (STATUS_INVALID_PARAMETER_MIX). A notification (one per arm, as always) then waits until that many completions
// are queued or the interval has passed since it was raised; the notifier applies the newest setting.
NTSTATUS CqImpl::NdkControlCqInterruptModeration(uint32_t interval_us, uint32_t count) {
  constexpr uint32_t kUnlimited = UINT32_MAX;
  if (interval_us == kUnlimited && (count == kUnlimited || count > depth_.load(std::memory_order_relaxed)))
    return STATUS_INVALID_PARAMETER_MIX;
  const bool off = interval_us == 0 || count <= 1;
  moderation_count_.store(off ? 0 : count, std::memory_order_relaxed);
  moderation_interval_ns_.store(off                         ? 0
                                : interval_us == kUnlimited ? kNoLimit
                                                            : uint64_t{interval_us} * 1000,
                                std::memory_order_relaxed);
  return STATUS_SUCCESS;
}

bool CqImpl::notification_due(uint64_t since_ns, uint64_t now_ns) noexcept {
  const uint64_t interval = moderation_interval_ns_.load(std::memory_order_relaxed);
  if (interval == 0 || closing() || slices_.failed()) return true;  // never hold back a close or an overrun
  if (interval != kNoLimit && now_ns - since_ns >= interval) return true;
  const uint32_t count = moderation_count_.load(std::memory_order_relaxed);
  const bool count_applies = count != UINT32_MAX && count <= depth_.load(std::memory_order_relaxed);
  if (!count_applies) return interval == kNoLimit;  // a resize left no limit at all: deliver
  // The consumer or a resize may hold the ring lists right now: then look again on the notifier's next loop.
  const std::optional<uint32_t> unconsumed = slices_.try_unconsumed();
  return unconsumed && *unconsumed >= count;
}

// Never loses entries, never quiesces the consumer and never waits for an engine (ndkpi.md §9.2): every slice
// gets a new ring, each engine with QPs on this CQ is sent a command that switches them to it, and the consumer,
// polling meanwhile or not, drains each old ring before its new one once that engine has switched
// (CompletionSlices). Completes inline: the new depth holds from the engines' next loop iteration.
NTSTATUS CqImpl::NdkResizeCq(uint32_t cq_depth, RequestCompletion, void*) {
  if (cq_depth == 0 || cq_depth > kMaxCqDepth) return STATUS_INVALID_PARAMETER;
  if (slices_.failed()) return STATUS_INVALID_DEVICE_REQUEST;
  const std::lock_guard lock(attach_mutex_);
  if (cq_depth < slices_.unconsumed()) return STATUS_BUFFER_OVERFLOW;
  auto rings = slices_.make_rings(cq_depth);
  std::vector<CompletionSlices::Seal> seals(rings.size());
  for (std::size_t e = 0; e < rings.size(); ++e) {
    auto retarget = std::make_shared<dataplane::RcTransport::Retarget>();
    for (QpImpl* qp : qps_)
      if (qp->engine() == e) retarget->qps.push_back(qp->transport_qp());
    if (retarget->qps.empty()) continue;  // no producer: the old ring is final as it is
    retarget->from = &slices_.ring(e);
    retarget->to = rings[e].get();
    // Fails only when the engine has stopped (the adapter is going away): then nothing writes either ring.
    if (!adapter_.transport().post_retarget(static_cast<dataplane::EngineId>(e), *retarget).ok()) continue;
    seals[e] = {&retarget->command.done, retarget};
  }
  slices_.replace_rings(std::move(rings), std::move(seals));
  depth_.store(cq_depth, std::memory_order_relaxed);
  return STATUS_SUCCESS;
}

}  // namespace uroce::ndk::detail
