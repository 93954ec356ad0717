// Queue pairs: creation, the out-of-band connect, and every work request.
//
// Posting (ARCHITECTURE.md "A Send, end to end"): validate, write the WQE in place in the SQ ring (copying
// inline data now), then publish the producer index and ring the engine's doorbell unless DEFER asks to
// wait. A post that fails returns its status and leaves no completion, after publishing whatever DEFER held
// back (ndkpi.md §10.6). No locks, no allocation, no waiting on any of these paths.
#include <cstring>
#include <mutex>

#include <arpa/inet.h>

#include "api/addresses.h"
#include "api/cpu_access.h"
#include "api/provider.h"

namespace uroce::ndk::detail {

namespace {

constexpr uint32_t kSendFlags = NDK_OP_FLAG_SILENT_SUCCESS | NDK_OP_FLAG_READ_FENCE |
                                NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT | NDK_OP_FLAG_INLINE | NDK_OP_FLAG_DEFER;
// INLINE on Write: the NdkWrite page omits it but the inline limits speak of "send or write" (ndkpi.md §6.1).
constexpr uint32_t kWriteFlags =
    NDK_OP_FLAG_SILENT_SUCCESS | NDK_OP_FLAG_READ_FENCE | NDK_OP_FLAG_INLINE | NDK_OP_FLAG_DEFER;
// RDMA_READ_LOCAL_INVALIDATE is accepted and ignored: the adapter flag is not advertised (ndkpi.md §6.1).
constexpr uint32_t kReadFlags =
    NDK_OP_FLAG_SILENT_SUCCESS | NDK_OP_FLAG_READ_FENCE | NDK_OP_FLAG_RDMA_READ_LOCAL_INVALIDATE | NDK_OP_FLAG_DEFER;
constexpr uint32_t kBindFlags = NDK_OP_FLAG_SILENT_SUCCESS | NDK_OP_FLAG_READ_FENCE | NDK_OP_FLAG_ALLOW_REMOTE_READ |
                                NDK_OP_FLAG_ALLOW_REMOTE_WRITE | NDK_OP_FLAG_DEFER;
constexpr uint32_t kFastRegisterFlags = NDK_OP_FLAG_SILENT_SUCCESS | NDK_OP_FLAG_READ_FENCE |
                                        NDK_OP_FLAG_ALLOW_REMOTE_READ | NDK_OP_FLAG_ALLOW_LOCAL_WRITE |
                                        NDK_OP_FLAG_ALLOW_REMOTE_WRITE | NDK_OP_FLAG_RDMA_READ_SINK | NDK_OP_FLAG_DEFER;
constexpr uint32_t kInvalidateFlags = NDK_OP_FLAG_SILENT_SUCCESS | NDK_OP_FLAG_READ_FENCE | NDK_OP_FLAG_DEFER;
// The bit ALLOW_REMOTE_WRITE (0x30) adds to ALLOW_LOCAL_WRITE (0x10).
constexpr uint32_t kRemoteWriteBit = NDK_OP_FLAG_ALLOW_REMOTE_WRITE & ~NDK_OP_FLAG_ALLOW_LOCAL_WRITE;

uint32_t ring_capacity(uint32_t depth) noexcept { return CompletionSlices::ring_capacity(depth); }

}  // namespace

// ---------------------------------------------------------------------------------------------- creation

NTSTATUS PdImpl::NdkCreateQp(Cq* receive_cq, Cq* initiator_cq, void* qp_context, uint32_t receive_queue_depth,
                             uint32_t initiator_queue_depth, uint32_t max_receive_request_sge,
                             uint32_t max_initiator_request_sge, uint32_t inline_data_size, CreateCompletion completion,
                             void* request_context, Qp** qp) {
  if (receive_cq == nullptr || initiator_cq == nullptr || receive_cq->ObjectType != NdkObjectTypeCq ||
      initiator_cq->ObjectType != NdkObjectTypeCq)
    return STATUS_INVALID_PARAMETER;
  auto& rcq = static_cast<CqImpl&>(*receive_cq);
  auto& icq = static_cast<CqImpl&>(*initiator_cq);
  if (&rcq.adapter() != &adapter_ || &icq.adapter() != &adapter_) return STATUS_INVALID_PARAMETER;
  if (receive_queue_depth == 0 || receive_queue_depth > kMaxQueueDepth || initiator_queue_depth == 0 ||
      initiator_queue_depth > kMaxQueueDepth || max_receive_request_sge > kMaxSge ||
      max_initiator_request_sge > kMaxSge || inline_data_size > kMaxInlineDataSize)
    return STATUS_INVALID_PARAMETER;
  const QpImpl::Shape shape{receive_queue_depth, initiator_queue_depth, max_receive_request_sge,
                            max_initiator_request_sge, inline_data_size};
  return create_qp(rcq, icq, nullptr, qp_context, shape, completion, request_context, qp);
}

// The CQs (and SRQ) stay referenced while an asynchronous create runs: their closes wait for it.
NTSTATUS PdImpl::create_qp(CqImpl& rcq, CqImpl& icq, SrqImpl* srq, void* qp_context, const QpShape& shape,
                           CreateCompletion completion, void* request_context, Qp** qp) {
  if (completion == nullptr && qp == nullptr) return STATUS_INVALID_PARAMETER;
  rcq.retain();
  icq.retain();
  if (srq != nullptr) srq->retain();
  return adapter_.create(*this, completion, request_context, qp, [=, this, &rcq, &icq]() -> std::pair<NTSTATUS, Qp*> {
    auto* q = new QpImpl(*this, rcq, icq, srq, qp_context, shape);
    const NTSTATUS status = q->start();
    if (status != STATUS_SUCCESS) (void)q->NdkCloseQp(nullptr, nullptr);
    rcq.release();
    icq.release();
    if (srq != nullptr) srq->release();
    return {status, status == STATUS_SUCCESS ? q : nullptr};
  });
}

NTSTATUS PdImpl::NdkCreateQpWithSrq(Cq* receive_cq, Cq* initiator_cq, Srq* srq, void* qp_context,
                                    uint32_t initiator_queue_depth, uint32_t max_initiator_request_sge,
                                    uint32_t inline_data_size, CreateCompletion completion, void* request_context,
                                    Qp** qp) {
  if (receive_cq == nullptr || initiator_cq == nullptr || srq == nullptr || receive_cq->ObjectType != NdkObjectTypeCq ||
      initiator_cq->ObjectType != NdkObjectTypeCq || srq->ObjectType != NdkObjectTypeSrq)
    return STATUS_INVALID_PARAMETER;
  auto& rcq = static_cast<CqImpl&>(*receive_cq);
  auto& icq = static_cast<CqImpl&>(*initiator_cq);
  auto& shared = static_cast<SrqImpl&>(*srq);
  if (&rcq.adapter() != &adapter_ || &icq.adapter() != &adapter_ || &shared.pd() != this)
    return STATUS_INVALID_PARAMETER;
  if (initiator_queue_depth == 0 || initiator_queue_depth > kMaxQueueDepth || max_initiator_request_sge > kMaxSge ||
      inline_data_size > kMaxInlineDataSize)
    return STATUS_INVALID_PARAMETER;
  const QpImpl::Shape shape{0, initiator_queue_depth, 0, max_initiator_request_sge, inline_data_size};
  return create_qp(rcq, icq, &shared, qp_context, shape, completion, request_context, qp);
}

// A QP runs on its SRQ's engine if it has one (the SRQ's ring has one consumer), else on its initiator CQ's.
QpImpl::QpImpl(PdImpl& pd, CqImpl& receive_cq, CqImpl& initiator_cq, SrqImpl* srq, void* context, const Shape& shape)
    : Qp(kNdkVersion, NdkObjectTypeQp),
      Lifetime(&pd),
      adapter_(pd.adapter()),
      pd_(pd),
      receive_cq_(receive_cq),
      initiator_cq_(initiator_cq),
      srq_(srq),
      context_(context),
      shape_(shape),
      engine_(srq != nullptr ? srq->engine() : initiator_cq.home_engine()),
      sq_(ring_capacity(shape.initiator_depth)),
      rq_(srq != nullptr ? nullptr : std::make_unique<dataplane::ReceiveQueue>(ring_capacity(shape.receive_depth))) {
  if (shape.inline_size != 0) {
    inline_stride_ = (shape.inline_size + 63) & ~63u;
    inline_data_ = std::make_unique<uint8_t[]>(std::size_t{sq_.capacity()} * inline_stride_);
  }
}

NTSTATUS QpImpl::start() {
  dataplane::RcQueuePairSetup setup;
  setup.port = 0;  // chosen at connect, from the local address
  setup.pd = pd_.id();
  setup.send_queue = &sq_;
  setup.receive_queue = srq_ != nullptr ? &srq_->ring() : rq_.get();
  setup.completion_context = reinterpret_cast<uintptr_t>(context_);
  setup.receive_queue_shared = srq_ != nullptr;
  setup.receive_limit_events = srq_ != nullptr ? &srq_->limit_events() : nullptr;
  // The CQs' rings may not change (resize) between choosing them and attaching.
  std::unique_lock first(initiator_cq_.attach_mutex(), std::defer_lock);
  std::unique_lock second(receive_cq_.attach_mutex(), std::defer_lock);
  if (&initiator_cq_ == &receive_cq_) {
    first.lock();
  } else {
    std::lock(first, second);
  }
  setup.send_cq = &initiator_cq_.ring(engine_);
  setup.receive_cq = &receive_cq_.ring(engine_);
  auto created = adapter_.transport().create_qp(engine_, setup);
  if (!created.ok()) return STATUS_INSUFFICIENT_RESOURCES;
  transport_qp_ = created.value();
  initiator_cq_.attach(this);
  receive_cq_.attach(this);
  if (srq_ != nullptr) srq_->retain();
  return STATUS_SUCCESS;
}

QpImpl::~QpImpl() {
  if (transport_qp_ == nullptr) return;
  // On the engine: flush what is left (its completions go to the CQs, which are still ours) and forget it.
  (void)adapter_.transport().destroy_qp(transport_qp_);
  initiator_cq_.detach(this);
  receive_cq_.detach(this);
  if (srq_ != nullptr) srq_->release();
}

bool QpImpl::destroy_elsewhere() noexcept {
  if (transport_qp_ == nullptr) return false;  // never started: nothing on an engine
  try {
    adapter_.notifier().run([this] { last_reference_gone(); });
  } catch (...) {
    return false;  // no memory for the task: destroy inline after all
  }
  return true;
}

NTSTATUS QpImpl::NdkCloseQp(CloseCompletion completion, void* request_context) {
  if (transport_qp_ != nullptr) NdkFlush();  // ndkpi.md §10.3: close starts cancelling pending work
  return close(completion, request_context);
}

// ndkpi.md §9.6 and §10.6: every post that returned STATUS_SUCCESS completes, so the flush (and a close, which
// flushes) first submits what DEFER held back; the engine then cancels everything up to the published tail. NDK
// lets a flush run while another thread posts (§10.1): the acquire load pairs with commit_send's release, so
// the WQEs before that index are complete, and publish_tail_at_least never moves the tail back under the
// poster's own doorbell. A DEFER post that returns after this load is the poster's chain to end, as always.
void QpImpl::NdkFlush() {
  flushed_.store(true, std::memory_order_relaxed);
  if (transport_qp_ == nullptr) return;
  sq_.publish_tail_at_least(sq_written_.load(std::memory_order_acquire));
  adapter_.transport().flush(*transport_qp_);
}

uint32_t QpImpl::UroceGetQpNumber() { return transport_qp_ != nullptr ? transport_qp_->qpn().value() : 0; }

// ------------------------------------------------------------------------------------------------ connect

NTSTATUS QpImpl::UroceConnect(const UroceConnectAttributes& a, RequestCompletion completion, void* request_context) {
  const std::optional<config::IpAddress> remote = ip_of(a.RemoteAddress);
  if (!remote || a.RemoteQpNumber == 0 || a.RemoteQpNumber > 0xFFFFFF || a.RemotePsn > 0xFFFFFF ||
      a.LocalPsn > 0xFFFFFF)
    return STATUS_INVALID_PARAMETER;
  const std::optional<config::IpAddress> local = ip_of(a.LocalAddress);
  if (a.LocalAddress != nullptr && (!local || local->is_v6 != remote->is_v6)) return STATUS_INVALID_PARAMETER;
  const config::RdmaConfig& rdma = adapter_.config().rdma;
  const uint32_t mtu = a.PathMtu != 0 ? a.PathMtu : rdma.path_mtu;
  const uint32_t ird = a.InboundReadLimit != 0 ? a.InboundReadLimit : adapter_.info().MaxInboundReadLimit;
  const uint32_t ord = a.OutboundReadLimit != 0 ? a.OutboundReadLimit : adapter_.info().MaxOutboundReadLimit;
  if (!is_valid_path_mtu(mtu) || ird > adapter_.info().MaxInboundReadLimit ||
      ord > adapter_.info().MaxOutboundReadLimit || a.AckTimeout.value_or(0) > 31 || a.RetryCount.value_or(0) > 7 ||
      a.RnrRetry.value_or(0) > 7 || a.MinRnrTimer.value_or(0) > 31 ||
      a.HopLimit == 0)  // RFC 1122 3.2.1.7: a host must not send a datagram with TTL 0
    return STATUS_INVALID_PARAMETER;
  const std::optional<dataplane::PortIndex> port = port_for(adapter_.config(), local, remote->is_v6);
  if (!port) return STATUS_INVALID_ADDRESS;
  if (!claim_for_connect()) return STATUS_CONNECTION_INVALID;

  dataplane::RcPeer peer;
  peer.qpn = proto::Qpn{a.RemoteQpNumber};
  peer.psn = proto::Psn{a.RemotePsn};
  peer.ip = *remote;
  if (a.RemoteMac) peer.mac = dataplane::mac_from_bytes(a.RemoteMac->data());
  peer.path_mtu = mtu;
  peer.hop_limit = a.HopLimit;
  peer.traffic_class = a.TrafficClass;
  peer.max_dest_rd_atomic = static_cast<uint8_t>(ord);  // agreed out of band: at most the peer's IRD
  peer.local_port = *port;
  proto::RcQpAttributes attrs;
  attrs.send_psn = proto::Psn{a.LocalPsn};
  attrs.path_mtu = mtu;
  attrs.ack_timeout = a.AckTimeout.value_or(rdma.ack_timeout);
  attrs.retry_count = a.RetryCount.value_or(rdma.retry_count);
  attrs.rnr_retry = a.RnrRetry.value_or(rdma.rnr_retry);
  attrs.min_rnr_timer = a.MinRnrTimer.value_or(rdma.min_rnr_timer);
  attrs.max_rd_atomic = static_cast<uint8_t>(ord);
  attrs.max_dest_rd_atomic = static_cast<uint8_t>(ird);
  attrs.ack_request_interval = rdma.ack_request_interval;

  auto run = [this, peer, attrs]() { return connect_transport(peer, attrs); };
  if (completion == nullptr) return run();
  retain();  // the QP's close waits for the connect
  adapter_.notifier().run([this, run, completion, request_context]() mutable {
    completion(request_context, run());
    release();
  });
  return STATUS_PENDING;
}

bool QpImpl::claim_for_connect() noexcept {
  return !flushed_.load(std::memory_order_relaxed) && !connecting_.exchange(true, std::memory_order_acq_rel);
}

NTSTATUS QpImpl::connect_transport(dataplane::RcPeer peer, const proto::RcQpAttributes& attrs) {
  if (!peer.mac) {
    auto mac = adapter_.dataplane().resolve(*peer.local_port, peer.ip, std::chrono::seconds(3));
    if (!mac.ok()) {
      connecting_.store(false, std::memory_order_release);  // may be tried again
      return STATUS_HOST_UNREACHABLE;
    }
    peer.mac = mac.value();
  }
  if (!adapter_.transport().connect(*transport_qp_, peer, attrs).ok()) {
    connecting_.store(false, std::memory_order_release);
    return STATUS_INVALID_PARAMETER;
  }
  connected_.store(true, std::memory_order_release);  // initiator posts may start
  return STATUS_SUCCESS;
}

void QpImpl::release_connect_claim() noexcept { connecting_.store(false, std::memory_order_release); }

proto::RcQpAttributes QpImpl::default_attributes() const {
  const config::RdmaConfig& rdma = adapter_.config().rdma;
  proto::RcQpAttributes attrs;
  attrs.path_mtu = rdma.path_mtu;
  attrs.ack_timeout = rdma.ack_timeout;
  attrs.retry_count = rdma.retry_count;
  attrs.rnr_retry = rdma.rnr_retry;
  attrs.min_rnr_timer = rdma.min_rnr_timer;
  attrs.max_rd_atomic = rdma.max_rd_atomic;
  attrs.max_dest_rd_atomic = rdma.max_dest_rd_atomic;
  attrs.ack_request_interval = rdma.ack_request_interval;
  return attrs;
}

// ------------------------------------------------------------------------------------- initiator queue

NTSTATUS QpImpl::check_initiator_post(uint32_t flags, uint32_t allowed_flags) {
  // ndkpi.md §9.9: after its CQ overran the QP is unusable and the CQ reports nothing further, so a post must
  // fail inline rather than succeed without a completion (§9.6). STATUS_INTERNAL_ERROR is §7's "fatal CQ/QP
  // error". A post racing with the overrun may still be accepted; the engine then drops it with the QP's other
  // work (the notification tells the consumer that the QP's outstanding requests are lost).
  if (cq_failed()) [[unlikely]]
    return STATUS_INTERNAL_ERROR;
  // ndkpi.md §9.6: initiator posts on an unconnected QP fail with CONNECTION_INVALID.
  if (!connected_.load(std::memory_order_acquire)) return STATUS_CONNECTION_INVALID;
  if ((flags & ~allowed_flags) != 0) return STATUS_INVALID_PARAMETER;
  // Acquire (consumer_head): the engine is done with the slot we are about to overwrite.
  if (written() - sq_.consumer_head() >= shape_.initiator_depth) return STATUS_INSUFFICIENT_RESOURCES;
  return STATUS_SUCCESS;
}

proto::SendWqe& QpImpl::next_send_slot(void* context, proto::WorkOp op, uint32_t flags) noexcept {
  proto::SendWqe& w = sq_.slot(written());
  w.context = reinterpret_cast<uintptr_t>(context);
  w.op = op;
  w.flags = 0;
  if (!(flags & NDK_OP_FLAG_SILENT_SUCCESS)) w.flags |= proto::kWqeSignaled;
  if (flags & NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT) w.flags |= proto::kWqeSolicited;
  if (flags & NDK_OP_FLAG_READ_FENCE) w.flags |= proto::kWqeReadFence;
  w.num_sge = 0;
  w.length = 0;
  return w;
}

// The doorbell: publish_tail() is a release, so the engine that reads the tail sees every WQE before it.
void QpImpl::publish_sends() noexcept {
  sq_.publish_tail(written());
  adapter_.transport().ring_doorbell(*transport_qp_);
}

NTSTATUS QpImpl::commit_send(uint32_t flags) noexcept {
  // Release: NdkFlush, on another thread, may read this index and publish the WQEs before it.
  sq_written_.store(written() + 1, std::memory_order_release);
  if (!(flags & NDK_OP_FLAG_DEFER)) publish_sends();
  return STATUS_SUCCESS;
}

// ndkpi.md §10.6: whenever a post fails inline, first submit everything accepted earlier with DEFER.
NTSTATUS QpImpl::fail_send(NTSTATUS status) noexcept {
  if (transport_qp_ != nullptr && written() != sq_.producer_tail()) publish_sends();
  return status;
}

NTSTATUS QpImpl::post_transfer(proto::WorkOp op, void* context, const NdkSge* sgl, uint32_t sge_count, uint32_t flags,
                               uint32_t allowed_flags, uint64_t remote_address, uint32_t remote_token,
                               uint32_t invalidate_token) {
  if (const NTSTATUS s = check_initiator_post(flags, allowed_flags); s != STATUS_SUCCESS) return fail_send(s);
  if (sge_count != 0 && sgl == nullptr) return fail_send(STATUS_INVALID_PARAMETER);
  const bool is_inline = (flags & NDK_OP_FLAG_INLINE) != 0;
  // ndkpi.md §5: with INLINE the SGE count limit does not apply (the inline size limit does).
  if (!is_inline && sge_count > shape_.max_initiator_sge) return fail_send(STATUS_INVALID_PARAMETER);
  uint64_t total = 0;
  for (uint32_t i = 0; i < sge_count; ++i) {
    total += sgl[i].Length;
    if (is_inline && sgl[i].Length != 0 && sgl[i].VirtualAddress == nullptr) return fail_send(STATUS_INVALID_PARAMETER);
  }
  if (total > kMaxTransferLength) return fail_send(STATUS_INVALID_PARAMETER);
  if (is_inline && total > shape_.inline_size) return fail_send(STATUS_INVALID_PARAMETER);
  if (!is_inline) {  // a READ's SGEs are its sink: the engine writes them
    if (const NTSTATUS s = pd_.check_privileged_sges(sgl, sge_count, op == proto::WorkOp::kRdmaRead);
        s != STATUS_SUCCESS)
      return fail_send(s);
  }

  proto::SendWqe& w = next_send_slot(context, op, flags);
  w.length = static_cast<uint32_t>(total);
  if (is_inline) {
    // Copied now: the buffers may be reused as soon as we return, and their tokens are never looked at.
    uint8_t* data = inline_data_.get() + std::size_t{written() & (sq_.capacity() - 1)} * inline_stride_;
    uint8_t* out = data;
    for (uint32_t i = 0; i < sge_count; ++i) {
      if (sgl[i].Length != 0) std::memcpy(out, sgl[i].VirtualAddress, sgl[i].Length);
      out += sgl[i].Length;
    }
    w.flags |= proto::kWqeInline;
    w.num_sge = total != 0 ? 1 : 0;
    w.sge[0] = {reinterpret_cast<uint64_t>(data), static_cast<uint32_t>(total), proto::LocalToken{}};
  } else {
    w.num_sge = static_cast<uint8_t>(sge_count);
    for (uint32_t i = 0; i < sge_count; ++i) {
      w.sge[i] = {sge_address(sgl[i]), sgl[i].Length, proto::LocalToken{sgl[i].MemoryRegionToken}};
    }
  }
  w.remote_addr = remote_address;
  w.rkey = proto::RemoteToken{remote_token};
  w.invalidate_rkey = proto::RemoteToken{invalidate_token};
  return commit_send(flags);
}

NTSTATUS QpImpl::NdkSend(void* request_context, const NdkSge* sgl, uint32_t sge_count, uint32_t flags) {
  return post_transfer(proto::WorkOp::kSend, request_context, sgl, sge_count, flags, kSendFlags, 0, 0, 0);
}

NTSTATUS QpImpl::NdkSendAndInvalidate(void* request_context, const NdkSge* sgl, uint32_t sge_count, uint32_t flags,
                                      uint32_t remote_token) {
  return post_transfer(proto::WorkOp::kSendWithInvalidate, request_context, sgl, sge_count, flags, kSendFlags, 0, 0,
                       remote_token);
}

NTSTATUS QpImpl::NdkWrite(void* request_context, const NdkSge* sgl, uint32_t sge_count, uint64_t remote_address,
                          uint32_t remote_token, uint32_t flags) {
  return post_transfer(proto::WorkOp::kRdmaWrite, request_context, sgl, sge_count, flags, kWriteFlags, remote_address,
                       remote_token, 0);
}

NTSTATUS QpImpl::NdkRead(void* request_context, const NdkSge* sgl, uint32_t sge_count, uint64_t remote_address,
                         uint32_t remote_token, uint32_t flags) {
  // MaxReadRequestSge equals MaxInitiatorRequestSge here, so the QP's initiator limit covers reads too.
  return post_transfer(proto::WorkOp::kRdmaRead, request_context, sgl, sge_count, flags, kReadFlags, remote_address,
                       remote_token, 0);
}

// Type-2 window bind: the new token is known (and returned by NdkGetRemoteTokenFromMw) as soon as we return;
// the table changes when the engine reaches the WQE, in SQ order.
NTSTATUS QpImpl::NdkBind(void* request_context, Mr* mr, Mw* mw, void* virtual_address, std::size_t length,
                         uint32_t flags) {
  if (const NTSTATUS s = check_initiator_post(flags, kBindFlags); s != STATUS_SUCCESS) return fail_send(s);
  if (mr == nullptr || mw == nullptr || mr->ObjectType != NdkObjectTypeMr || mw->ObjectType != NdkObjectTypeMw)
    return fail_send(STATUS_INVALID_PARAMETER);
  auto& region = static_cast<MrImpl&>(*mr);
  auto& window = static_cast<MwImpl&>(*mw);
  if (&region.pd() != &pd_ || &window.pd() != &pd_) return fail_send(STATUS_INVALID_PARAMETER);
  // A fast-register MR's range and rights are those of the FastRegister executed last before this Bind on the
  // engine (the SQ runs in order): the engine checks the window against them when it binds, and a window
  // outside them completes in error. An ordinary MR is checked here, at post time, as well.
  if (region.fast_register() ? region.page_capacity() == 0 : !region.registered())
    return fail_send(STATUS_INVALID_PARAMETER);
  const auto address = reinterpret_cast<uint64_t>(virtual_address);
  if (length == 0 ||
      (!region.fast_register() && (address < region.address() || address - region.address() > region.length() ||
                                   length > region.length() - (address - region.address()))))
    return fail_send(STATUS_INVALID_PARAMETER);
  if ((flags & NDK_OP_FLAG_ALLOW_LOCAL_WRITE) && !(flags & kRemoteWriteBit))
    return fail_send(STATUS_INVALID_PARAMETER);  // ALLOW_LOCAL_WRITE alone is not a Bind flag
  uint32_t access = 0;
  if (flags & NDK_OP_FLAG_ALLOW_REMOTE_READ) access |= proto::kAccessRemoteRead;
  if (flags & kRemoteWriteBit) access |= proto::kAccessRemoteWrite;
  // ndkpi.md §9.6: a remote-write window needs a local-write MR.
  if (!region.fast_register() && (access & proto::kAccessRemoteWrite) && !(region.access() & proto::kAccessLocalWrite))
    return fail_send(STATUS_ACCESS_VIOLATION);
  proto::SendWqe& w = next_send_slot(request_context, proto::WorkOp::kBindMemoryWindow, flags);
  w.memory = {address, length, window.bind_to(region), region.token(), access};
  return commit_send(flags);
}

NTSTATUS QpImpl::NdkFastRegister(void* request_context, Mr* mr, uint32_t adapter_page_count,
                                 const NdkLogicalAddress* adapter_page_array, uint32_t fbo, std::size_t length,
                                 void* base_virtual_address, uint32_t flags) {
  if (const NTSTATUS s = check_initiator_post(flags, kFastRegisterFlags); s != STATUS_SUCCESS) return fail_send(s);
  if (mr == nullptr || mr->ObjectType != NdkObjectTypeMr) return fail_send(STATUS_INVALID_PARAMETER);
  auto& region = static_cast<MrImpl&>(*mr);
  if (&region.pd() != &pd_ || !region.fast_register() || region.page_capacity() == 0)
    return fail_send(STATUS_INVALID_PARAMETER);
  const auto base = reinterpret_cast<uint64_t>(base_virtual_address);
  if (adapter_page_count == 0 || adapter_page_count > region.page_capacity() || adapter_page_array == nullptr ||
      fbo >= kPageSize || length == 0 || length > uint64_t{adapter_page_count} * kPageSize - fbo ||
      base % kPageSize != fbo || base + length < base)
    return fail_send(STATUS_INVALID_PARAMETER);         // ndkpi.md §9.6: BaseVirtualAddress = FBO + n x PAGE_SIZE
  bool in_place = base == adapter_page_array[0] + fbo;  // the pages follow each other from where base is
  for (uint32_t i = 0; i < adapter_page_count; ++i) {
    if (adapter_page_array[i] % kPageSize != 0) return fail_send(STATUS_INVALID_PARAMETER);
    in_place = in_place && adapter_page_array[i] == adapter_page_array[0] + uint64_t{i} * kPageSize;
  }
  uint32_t access = 0;
  if (flags & NDK_OP_FLAG_ALLOW_LOCAL_WRITE) access |= proto::kAccessLocalWrite;
  if (flags & NDK_OP_FLAG_ALLOW_REMOTE_READ) access |= proto::kAccessRemoteRead;
  if (flags & kRemoteWriteBit) access |= proto::kAccessRemoteWrite | proto::kAccessLocalWrite;
  // ndkpi.md §9.6: remote rights on an MR initialised without RemoteAccess.
  if ((access & (proto::kAccessRemoteRead | proto::kAccessRemoteWrite)) && !region.remote_access())
    return fail_send(STATUS_ACCESS_VIOLATION);
  // The engines will touch these pages as `access` says: each run of consecutive pages the length covers must be
  // mapped with those rights (cpu_access.h), or a peer's access would fault an engine. The consumer may hand pages
  // that no NdkBuildLam mapped, or that it unmapped since.
  const CpuAccess cpu = cpu_access_of(access);
  const uint64_t used_pages = (fbo + length - 1) / kPageSize + 1;
  for (uint64_t run = 0, i = 1; i <= used_pages; ++i) {
    if (i < used_pages && adapter_page_array[i] == adapter_page_array[i - 1] + kPageSize) continue;
    if (const NTSTATUS s = status_of(check_cpu_access(adapter_page_array[run], (i - run) * kPageSize, cpu));
        s != STATUS_SUCCESS)
      return fail_send(s);
    run = i;
  }
  // Anything else is paged memory: the page list is copied now (the caller's array is its own again when we
  // return) into a list of the MR's slot that the engine takes when it executes the WQE.
  uint8_t page_list = 0;
  if (!in_place) {
    page_list = adapter_.transport().memory().stage_pages(region.token(), adapter_page_array, adapter_page_count, fbo);
    if (page_list == 0) return fail_send(STATUS_INSUFFICIENT_RESOURCES);
  }
  proto::SendWqe& w = next_send_slot(request_context, proto::WorkOp::kFastRegister, flags);
  w.memory = {base, length, region.next_token(), 0, access, page_list};
  return commit_send(flags);
}

NTSTATUS QpImpl::NdkInvalidate(void* request_context, ObjectHeader* mr_or_mw, uint32_t flags) {
  if (const NTSTATUS s = check_initiator_post(flags, kInvalidateFlags); s != STATUS_SUCCESS) return fail_send(s);
  if (mr_or_mw == nullptr) return fail_send(STATUS_INVALID_PARAMETER);
  uint32_t token = 0;
  if (mr_or_mw->ObjectType == NdkObjectTypeMr) {
    auto& region = static_cast<MrImpl&>(static_cast<Mr&>(*mr_or_mw));
    // Fast-register MRs only: ordinary MRs end with NdkDeregisterMr (ndkpi.md §9.6).
    if (&region.pd() != &pd_ || !region.fast_register() || region.page_capacity() == 0)
      return fail_send(STATUS_INVALID_PARAMETER);
    token = region.token();
  } else if (mr_or_mw->ObjectType == NdkObjectTypeMw) {
    auto& window = static_cast<MwImpl&>(static_cast<Mw&>(*mr_or_mw));
    if (&window.pd() != &pd_) return fail_send(STATUS_INVALID_PARAMETER);
    token = window.token();
  } else {
    return fail_send(STATUS_INVALID_PARAMETER);
  }
  proto::SendWqe& w = next_send_slot(request_context, proto::WorkOp::kLocalInvalidate, flags);
  w.memory = {0, 0, token, 0, 0};
  return commit_send(flags);
}

// --------------------------------------------------------------------------------------- receive queue

NTSTATUS QpImpl::NdkReceive(void* request_context, const NdkSge* sgl, uint32_t sge_count) {
  if (rq_ == nullptr) return STATUS_INVALID_DEVICE_REQUEST;  // the QP receives through its SRQ
  if (cq_failed()) [[unlikely]]
    return STATUS_INTERNAL_ERROR;  // as check_initiator_post
  if (sge_count > shape_.max_receive_sge || (sge_count != 0 && sgl == nullptr)) return STATUS_INVALID_PARAMETER;
  uint64_t total = 0;
  for (uint32_t i = 0; i < sge_count; ++i) total += sgl[i].Length;
  if (total > kMaxTransferLength) return STATUS_INVALID_PARAMETER;
  if (const NTSTATUS s = pd_.check_privileged_sges(sgl, sge_count, true); s != STATUS_SUCCESS) return s;
  if (rq_written_ - rq_->consumer_head() >= shape_.receive_depth) return STATUS_INSUFFICIENT_RESOURCES;
  proto::RecvWqe& r = rq_->slot(rq_written_);
  r.context = reinterpret_cast<uintptr_t>(request_context);
  r.num_sge = static_cast<uint8_t>(sge_count);
  for (uint32_t i = 0; i < sge_count; ++i) {
    r.sge[i] = {sge_address(sgl[i]), sgl[i].Length, proto::LocalToken{sgl[i].MemoryRegionToken}};
  }
  rq_->publish_tail(++rq_written_);  // release: the engine's pop sees the WQE
  // Receives are taken when a message arrives; a dead QP instead flushes them when polled, so wake it.
  if (flushed_.load(std::memory_order_relaxed) || transport_qp_->failed_after_receive_post())
    adapter_.transport().ring_doorbell(*transport_qp_);
  return STATUS_SUCCESS;
}

}  // namespace uroce::ndk::detail
