// Connectors (connection.h): NDK's connect, accept, reject and disconnect over the CM agent (ndkpi.md §9.7, §10.5).
//
// Who runs what: the consumer's calls check and record under mutex_, then hand the CM work to the CM thread
// (ConnectionManager::post) and anything that waits on the network or an engine (ARP, moving the QP to RTS) to
// the notifier. CM events arrive on the CM thread (on_cm_event). Completions and the disconnect event run on the
// notifier. Every continuation looks at state_ first: a close may have overtaken it.
#include <algorithm>
#include <cstring>

#include "api/connection.h"

namespace uroce::ndk::detail {

namespace {

const uint8_t* bytes(const void* p) { return static_cast<const uint8_t*>(p); }

}  // namespace

ConnectorImpl::ConnectorImpl(AdapterImpl& adapter)
    : Connector(adapter.Version, NdkObjectTypeConnector),
      Lifetime(&adapter),
      adapter_(adapter),
      cm_(adapter.connections()) {}

ConnectorImpl::ConnectorImpl(AdapterImpl& adapter, ListenerImpl& listener, const proto::CmEvent& request,
                             dataplane::PortIndex port, const SocketEndpoint& local, const SocketEndpoint& peer)
    : ConnectorImpl(adapter) {
  const proto::CmConnectParams& r = request.request;
  state_ = State::kIncoming;
  listener.retain();  // ndkpi.md §10.4: the listener's close pends until its connectors have closed
  listener_ = &listener;
  in_backlog_ = true;  // the CM took the place (ConnectionManager::on_request)
  cm_id_ = request.id;
  port_ = port;
  local_ = local;
  peer_ = peer;
  peer_mac_ = cm_route_mac(r.route);  // the REQ's own frame source: no other datagram's
  peer_qpn_ = r.qpn;
  send_psn_ = r.starting_psn;  // the REQ's starting PSN is what the active side expects us to send first
  peer_inbound_read_limit_ = r.responder_resources;
  peer_outbound_read_limit_ = r.initiator_depth;
  path_mtu_ = std::min<uint32_t>(mtu_of_ib_code(r.path_mtu), adapter.config().rdma.path_mtu);
  // The consumer's part of the REQ's private data: what follows the cma_hdr.
  peer_private_data_.assign(r.private_data.begin() + proto::CmaHdr::kSize, r.private_data.end());
  peer_private_data_size_ = proto::kRdmaCmReqPrivateDataMax;
}

ConnectorImpl::~ConnectorImpl() {
  if (qp_ != nullptr) qp_->release();
  if (listener_ != nullptr) listener_->release();
  if (shared_ != nullptr) shared_->release();
  if (bound_) cm_.unbind(this);
}

void ConnectorImpl::begin_request(RequestCompletion completion, void* context) {
  pending_ = completion;
  pending_context_ = context;
  retain();  // until the completion has run
}

void ConnectorImpl::finish_request(NTSTATUS status) {
  RequestCompletion completion = nullptr;
  void* context = nullptr;
  {
    const std::lock_guard lock(mutex_);
    std::swap(completion, pending_);
    std::swap(context, pending_context_);
  }
  if (completion == nullptr) return;
  adapter_.notifier().run([this, completion, context, status] {
    completion(context, status);
    release();  // begin_request's reference
  });
}

// ------------------------------------------------------------------------------------------ active side

NTSTATUS ConnectorImpl::NdkConnect(Qp* qp, const sockaddr* source, uint32_t source_length, const sockaddr* destination,
                                   uint32_t destination_length, uint32_t inbound_read_limit,
                                   uint32_t outbound_read_limit, const void* private_data, uint32_t private_data_length,
                                   RequestCompletion completion, void* request_context) {
  const std::optional<SocketEndpoint> src = endpoint_of(source, source_length);
  if (!src) return STATUS_INVALID_PARAMETER;
  return connect(qp, *src, nullptr, destination, destination_length, inbound_read_limit, outbound_read_limit,
                 private_data, private_data_length, completion, request_context);
}

NTSTATUS ConnectorImpl::NdkConnectWithSharedEndpoint(Qp* qp, SharedEndpoint* endpoint, const sockaddr* destination,
                                                     uint32_t destination_length, uint32_t inbound_read_limit,
                                                     uint32_t outbound_read_limit, const void* private_data,
                                                     uint32_t private_data_length, RequestCompletion completion,
                                                     void* request_context) {
  if (endpoint == nullptr || endpoint->ObjectType != NdkObjectTypeSharedEndpoint) return STATUS_INVALID_PARAMETER;
  auto* shared = static_cast<SharedEndpointImpl*>(endpoint);
  if (&shared->adapter() != &adapter_) return STATUS_INVALID_PARAMETER;  // another adapter's endpoint
  return connect(qp, shared->endpoint(), shared, destination, destination_length, inbound_read_limit,
                 outbound_read_limit, private_data, private_data_length, completion, request_context);
}

NTSTATUS ConnectorImpl::connect(Qp* qp, const SocketEndpoint& source, SharedEndpointImpl* shared,
                                const sockaddr* destination, uint32_t destination_length, uint32_t inbound_read_limit,
                                uint32_t outbound_read_limit, const void* private_data, uint32_t private_data_length,
                                RequestCompletion completion, void* request_context) {
  const std::optional<SocketEndpoint> dst = endpoint_of(destination, destination_length);
  if (qp == nullptr || qp->ObjectType != NdkObjectTypeQp || completion == nullptr || !dst || dst->port == 0 ||
      dst->ip.is_v6 != source.ip.is_v6 || is_any_address(dst->ip) ||
      private_data_length > proto::kRdmaCmReqPrivateDataMax || (private_data == nullptr && private_data_length > 0) ||
      &static_cast<QpImpl*>(qp)->adapter() != &adapter_)  // another adapter's QP
    return STATUS_INVALID_PARAMETER;
  SocketEndpoint local = source;
  const auto port =
      port_for(adapter_.config(), is_any_address(local.ip) ? std::nullopt : std::optional(local.ip), local.ip.is_v6);
  if (!port) return STATUS_INVALID_ADDRESS;
  if (is_any_address(local.ip)) {
    for (const config::IpAddress& a : adapter_.config().ports[*port].addresses) {
      if (a.is_v6 == local.ip.is_v6) {
        local.ip = a;
        break;
      }
    }
  }
  auto* qp_impl = static_cast<QpImpl*>(qp);
  const std::lock_guard lock(mutex_);
  if (state_ != State::kIdle) return STATUS_CONNECTION_INVALID;
  if (!qp_impl->claim_for_connect()) return STATUS_CONNECTION_INVALID;
  if (shared == nullptr) {
    const NTSTATUS status = cm_.bind(local, this);
    if (status != STATUS_SUCCESS) {
      qp_impl->release_connect_claim();
      return status;
    }
    bound_ = true;
  } else {
    shared->retain();  // ndkpi.md §10.4: the shared endpoint's close pends until its connectors have closed
    shared_ = shared;
  }
  qp_impl->retain();  // QP -> connector (ndkpi.md §2): the QP closes after the connector
  qp_ = qp_impl;
  port_ = *port;
  local_ = local;
  peer_ = *dst;
  const NdkAdapterInfo& info = adapter_.info();
  inbound_read_limit_ = std::min(inbound_read_limit, info.MaxInboundReadLimit);
  outbound_read_limit_ = std::min(outbound_read_limit, info.MaxOutboundReadLimit);
  path_mtu_ = adapter_.config().rdma.path_mtu;
  private_data_.assign(bytes(private_data), bytes(private_data) + private_data_length);
  state_ = State::kConnecting;
  begin_request(completion, request_context);
  retain();  // for the continuation below
  adapter_.notifier().run([this] {
    // ARP/ND may take a while: on the notifier, never on the CM thread.
    auto mac = adapter_.dataplane().resolve(port_, peer_.ip, std::chrono::seconds(3));
    {
      const std::lock_guard relock(mutex_);
      if (state_ == State::kConnecting && mac.ok()) {
        peer_mac_ = mac.value();
        retain();
        cm_.post([this] {
          send_request();
          release();
        });
      }
    }
    if (!mac.ok()) {
      // The post keeps the connector alive until it has run: a close meanwhile may drop every other reference.
      retain();
      cm_.post([this] {
        fail(STATUS_HOST_UNREACHABLE);
        release();
      });
    }
    release();
  });
  return STATUS_PENDING;
}

void ConnectorImpl::send_request() {
  const std::lock_guard lock(mutex_);
  if (state_ != State::kConnecting) return;
  const config::RdmaConfig& rdma = adapter_.config().rdma;
  proto::CmConnectParams p;
  p.service_id = proto::rdma_cm_service_id(peer_.port);
  p.local_gid = dataplane::gid_of(local_.ip);
  p.remote_gid = dataplane::gid_of(peer_.ip);
  p.qpn = proto::Qpn{qp_->UroceGetQpNumber()};
  // A REQ's starting PSN is the one the requester expects to receive first; the REP's, the one it sends first
  // (Linux cm.c: the active side's sq_psn is the REP's starting PSN, the passive side's the REQ's).
  receive_psn_ = ConnectionManager::random_psn();
  p.starting_psn = receive_psn_;
  p.responder_resources = static_cast<uint8_t>(inbound_read_limit_);
  p.initiator_depth = static_cast<uint8_t>(outbound_read_limit_);
  p.path_mtu = ib_mtu_code(path_mtu_);
  p.retry_count = rdma.retry_count;
  p.rnr_retry_count = rdma.rnr_retry;
  p.local_ack_timeout = rdma.ack_timeout;
  p.private_data.resize(proto::CmaHdr::kSize);
  proto::write_cma_hdr(std::span<uint8_t, proto::CmaHdr::kSize>(p.private_data.data(), proto::CmaHdr::kSize),
                       {proto::IpAddress{p.local_gid}, local_.port}, {proto::IpAddress{p.remote_gid}, peer_.port});
  p.private_data.insert(p.private_data.end(), private_data_.begin(), private_data_.end());
  p.route = cm_route(port_, *peer_mac_);
  const std::optional<proto::CmId> id = cm_.agent().connect(p, cm_.now_ms());
  if (!id) {
    state_ = State::kDone;
    qp_->release_connect_claim();
    // finish_request takes mutex_: complete after this scope through the CM thread's queue, holding a reference
    // until then (send_request's caller releases its own as soon as this returns).
    retain();
    cm_.post([this] {
      finish_request(STATUS_INSUFFICIENT_RESOURCES);
      release();
    });
    return;
  }
  cm_id_ = *id;
  cm_.attach(*id, this);
}

NTSTATUS ConnectorImpl::NdkCompleteConnect(DisconnectEventCallback disconnect_event, void* disconnect_event_context,
                                           RequestCompletion completion, void* request_context) {
  if (completion == nullptr) return STATUS_INVALID_PARAMETER;
  const std::lock_guard lock(mutex_);
  if (state_ != State::kReplied) return STATUS_CONNECTION_INVALID;
  state_ = State::kCompleting;
  disconnect_event_ = disconnect_event;
  disconnect_event_context_ = disconnect_event_context;
  begin_request(completion, request_context);
  connect_in_flight_ = true;
  retain();
  adapter_.notifier().run([this] {
    const NTSTATUS status = connect_qp();
    cm_.post([this, status] {
      bool completing = false;
      {
        const std::lock_guard relock(mutex_);
        connect_in_flight_ = false;
        completing = state_ == State::kCompleting;  // else a close or the peer overtook us and ended the request
        if (!completing) abandon_qp();              // the QP it may just have connected is flushed
        if (completing && status == STATUS_SUCCESS) {
          (void)cm_.agent().establish(*cm_id_);  // the RTU
          state_ = State::kEstablished;
        } else if (completing) {
          (void)cm_.agent().reject(*cm_id_, proto::CmRejectReason::kNoResources, {});
          state_ = State::kDone;
        }
      }
      if (completing) finish_request(status);
      release();
    });
  });
  return STATUS_PENDING;
}

// ----------------------------------------------------------------------------------------- passive side

NTSTATUS ConnectorImpl::NdkAccept(Qp* qp, uint32_t inbound_read_limit, uint32_t outbound_read_limit,
                                  const void* private_data, uint32_t private_data_length,
                                  DisconnectEventCallback disconnect_event, void* disconnect_event_context,
                                  RequestCompletion completion, void* request_context) {
  if (qp == nullptr || qp->ObjectType != NdkObjectTypeQp || completion == nullptr ||
      private_data_length > proto::kRdmaCmRepPrivateDataMax || (private_data == nullptr && private_data_length > 0) ||
      &static_cast<QpImpl*>(qp)->adapter() != &adapter_)  // another adapter's QP
    return STATUS_INVALID_PARAMETER;
  auto* qp_impl = static_cast<QpImpl*>(qp);
  const std::lock_guard lock(mutex_);
  if (state_ == State::kDone) return STATUS_CONNECTION_ABORTED;  // the peer gave up meanwhile
  if (state_ != State::kIncoming) return STATUS_CONNECTION_INVALID;
  if (!qp_impl->claim_for_connect()) return STATUS_CONNECTION_INVALID;
  leave_backlog();
  qp_impl->retain();
  qp_ = qp_impl;
  // ndkpi.md §9.7: the effective limits are the smallest of what the consumer asks, the adapter allows and the
  // peer offers (its initiator depth for our inbound READs, its responder resources for our outbound ones).
  const NdkAdapterInfo& info = adapter_.info();
  inbound_read_limit_ = std::min({inbound_read_limit, info.MaxInboundReadLimit, peer_outbound_read_limit_});
  outbound_read_limit_ = std::min({outbound_read_limit, info.MaxOutboundReadLimit, peer_inbound_read_limit_});
  receive_psn_ = ConnectionManager::random_psn();
  disconnect_event_ = disconnect_event;
  disconnect_event_context_ = disconnect_event_context;
  state_ = State::kAccepting;
  begin_request(completion, request_context);
  proto::CmReplyParams reply;
  reply.qpn = proto::Qpn{qp_impl->UroceGetQpNumber()};
  reply.starting_psn = receive_psn_;  // what the active side sends with first
  reply.responder_resources = static_cast<uint8_t>(inbound_read_limit_);
  reply.initiator_depth = static_cast<uint8_t>(outbound_read_limit_);
  reply.private_data.assign(bytes(private_data), bytes(private_data) + private_data_length);
  connect_in_flight_ = true;
  retain();
  adapter_.notifier().run([this, reply = std::move(reply)]() mutable {
    const NTSTATUS status = connect_qp();  // RTS before the REP leaves: the peer may send once it has the REP
    cm_.post([this, status, reply = std::move(reply)] {
      if (status == STATUS_SUCCESS) {
        accept_on_cm_thread(reply);
      } else {
        {
          const std::lock_guard relock(mutex_);
          connect_in_flight_ = false;
          if (state_ != State::kAccepting) {
            abandon_qp();
          } else if (cm_id_) {
            (void)cm_.agent().reject(*cm_id_, proto::CmRejectReason::kNoResources, {});
          }
        }
        fail(status);
      }
      release();
    });
  });
  return STATUS_PENDING;
}

void ConnectorImpl::accept_on_cm_thread(const proto::CmReplyParams& reply) {
  const std::lock_guard lock(mutex_);
  connect_in_flight_ = false;
  if (state_ != State::kAccepting || !cm_id_) {  // a close or the peer ended it meanwhile
    abandon_qp();
    return;
  }
  if (cm_.agent().accept(*cm_id_, reply, cm_.now_ms()) != proto::CmCallStatus::kOk) {
    state_ = State::kDone;
    retain();  // the caller's reference ends when this returns
    cm_.post([this] {
      finish_request(STATUS_CONNECTION_ABORTED);
      release();
    });
    return;
  }
  cm_.await_first_request(*cm_id_, qp_->transport_qp());
}

NTSTATUS ConnectorImpl::NdkReject(const void* private_data, uint32_t private_data_length) {
  if (private_data_length > proto::kRdmaCmRejPrivateDataMax || (private_data == nullptr && private_data_length > 0))
    return STATUS_INVALID_PARAMETER;
  const std::lock_guard lock(mutex_);
  if ((state_ != State::kIncoming && state_ != State::kReplied) || !cm_id_) return STATUS_CONNECTION_ABORTED;
  if (state_ == State::kReplied) qp_->release_connect_claim();
  leave_backlog();
  state_ = State::kDone;
  std::vector<uint8_t> data(bytes(private_data), bytes(private_data) + private_data_length);
  retain();
  cm_.post([this, id = *cm_id_, data = std::move(data)] {
    (void)cm_.agent().reject(id, proto::CmRejectReason::kConsumerDefined, data);
    cm_.detach(id);
    release();
  });
  return STATUS_SUCCESS;
}

// ------------------------------------------------------------------------------------------- teardown

NTSTATUS ConnectorImpl::NdkDisconnect(RequestCompletion completion, void* request_context) {
  if (completion == nullptr) return STATUS_INVALID_PARAMETER;
  const std::lock_guard lock(mutex_);
  if (state_ != State::kEstablished) return STATUS_CONNECTION_INVALID;
  if (peer_disconnected_) {
    // The peer's DREQ came first and was answered: nothing left to say. ndkpi.md §10.5: done once DMA stopped.
    state_ = State::kDone;
    qp_->NdkFlush();
    return STATUS_SUCCESS;
  }
  state_ = State::kDisconnecting;
  begin_request(completion, request_context);
  retain();
  cm_.post([this, id = *cm_id_] {
    (void)cm_.agent().disconnect(id, cm_.now_ms());
    release();
  });
  return STATUS_PENDING;
}

NTSTATUS ConnectorImpl::NdkCloseConnector(CloseCompletion completion, void* request_context) {
  {
    const std::lock_guard lock(mutex_);
    const State was = state_;
    state_ = State::kClosed;
    leave_backlog();
    if (cm_id_ && was != State::kDone && was != State::kClosed) {
      // Abortive: the CM withdraws a REQ, rejects a request or a reply, or sends a DREQ (proto::CmAgent::destroy).
      retain();
      cm_.post([this, id = *cm_id_] {
        cm_.agent().destroy(id, cm_.now_ms());
        cm_.detach(id);
        release();
      });
    } else if (cm_id_) {
      retain();
      cm_.post([this, id = *cm_id_] {
        cm_.detach(id);
        release();
      });
    }
    if (qp_ != nullptr && (qp_->connected() || was == State::kConnecting || was == State::kReplied ||
                           was == State::kCompleting || was == State::kAccepting))
      abandon_qp();
  }
  finish_request(STATUS_CANCELLED);  // ndkpi.md §10.3: a close cancels what is pending
  return close(completion, request_context);
}

// ------------------------------------------------------------------------------------------ CM events

void ConnectorImpl::on_cm_event(const proto::CmEvent& e) {
  NTSTATUS complete_with = STATUS_PENDING;  // PENDING: nothing to complete
  bool disconnect_event = false;
  {
    const std::lock_guard lock(mutex_);
    switch (e.type) {
      case proto::CmEventType::kReply:
        if (state_ != State::kConnecting) break;
        peer_qpn_ = e.reply.qpn;
        send_psn_ = e.reply.starting_psn;
        peer_inbound_read_limit_ = e.reply.responder_resources;
        peer_outbound_read_limit_ = e.reply.initiator_depth;
        // Our READs in flight may not exceed what the peer accepts (its responder resources).
        outbound_read_limit_ = std::min<uint32_t>(outbound_read_limit_, e.reply.responder_resources);
        peer_private_data_ = e.reply.private_data;
        peer_private_data_size_ = proto::kRdmaCmRepPrivateDataMax;
        state_ = State::kReplied;
        complete_with = STATUS_SUCCESS;
        break;
      case proto::CmEventType::kEstablished:
        if (state_ != State::kAccepting) break;
        state_ = State::kEstablished;
        complete_with = STATUS_SUCCESS;
        break;
      case proto::CmEventType::kRejected:
        if (state_ == State::kConnecting) {
          peer_private_data_ = e.private_data;  // NdkGetConnectionData returns the reject's private data
          peer_private_data_size_ = proto::kRdmaCmRejPrivateDataMax;
          complete_with = STATUS_CONNECTION_REFUSED;
        } else if (state_ == State::kAccepting || state_ == State::kCompleting) {
          complete_with = STATUS_CONNECTION_ABORTED;
        } else if (state_ != State::kIncoming && state_ != State::kReplied) {
          break;
        }
        abandon_qp();
        state_ = State::kDone;
        break;
      case proto::CmEventType::kTimeout:
        if (state_ == State::kIncoming) {  // undecided past the peer's patience: the CM has ended the request
          state_ = State::kDone;
          break;
        }
        if (state_ != State::kConnecting && state_ != State::kAccepting) break;
        abandon_qp();
        state_ = State::kDone;
        complete_with = STATUS_IO_TIMEOUT;
        break;
      case proto::CmEventType::kDisconnectRequest:
        peer_disconnected_ = true;
        // ndkpi.md §9.9: the event, at most once, unless the consumer is already disconnecting; no flush.
        disconnect_event = (state_ == State::kEstablished || state_ == State::kAccepting) &&
                           disconnect_event_ != nullptr && !disconnect_delivered_;
        disconnect_delivered_ |= disconnect_event;
        if (state_ == State::kAccepting) {  // the peer gave up before confirming
          state_ = State::kDone;
          abandon_qp();
          complete_with = STATUS_CONNECTION_ABORTED;
        }
        break;
      case proto::CmEventType::kDisconnected:
        if (state_ != State::kDisconnecting) break;
        qp_->NdkFlush();  // ndkpi.md §10.5: the provider flushes after a graceful disconnect
        state_ = State::kDone;
        complete_with = e.timed_out ? STATUS_IO_TIMEOUT : STATUS_SUCCESS;
        break;
      case proto::CmEventType::kRequest:
      case proto::CmEventType::kTimeWaitDone:
        break;
    }
    if (state_ == State::kDone) leave_backlog();  // a request that ended undecided frees its place in the backlog
  }
  if (complete_with != STATUS_PENDING) finish_request(complete_with);
  if (disconnect_event) deliver_disconnect_event();
}

void ConnectorImpl::fail(NTSTATUS status) {
  {
    const std::lock_guard lock(mutex_);
    if (state_ != State::kConnecting && state_ != State::kAccepting) return;
    state_ = State::kDone;
    if (qp_ != nullptr && !qp_->connected()) qp_->release_connect_claim();
  }
  finish_request(status);
}

// After the connection was given up (a reject, a timeout, the peer's DREQ before its RTU, a close): a QP that
// reached RTS for it is flushed, and one that did not gives its connect claim back. While connect_qp() still runs on
// the notifier nothing is decided here: its continuation, which sees that the state moved on, does it, so a QP that
// reaches RTS after the connection was given up is flushed too, and no other connector can claim the QP meanwhile.
void ConnectorImpl::abandon_qp() {
  if (qp_ == nullptr || connect_in_flight_) return;
  if (qp_->connected()) {
    qp_->NdkFlush();
  } else {
    qp_->release_connect_claim();
  }
}

void ConnectorImpl::leave_backlog() {
  if (!in_backlog_) return;
  in_backlog_ = false;
  listener_->leave_backlog();
}

void ConnectorImpl::deliver_disconnect_event() {
  retain();
  adapter_.notifier().run([this] {
    DisconnectEventCallback callback = nullptr;
    void* context = nullptr;
    {
      const std::lock_guard lock(mutex_);
      if (state_ != State::kClosed) {
        callback = disconnect_event_;
        context = disconnect_event_context_;
      }
    }
    if (callback != nullptr) callback(context);
    release();
  });
}

NTSTATUS ConnectorImpl::connect_qp() {
  dataplane::RcPeer peer;
  proto::RcQpAttributes attrs = qp_->default_attributes();
  {
    const std::lock_guard lock(mutex_);
    peer.qpn = peer_qpn_;
    peer.psn = receive_psn_;
    peer.ip = peer_.ip;
    peer.mac = peer_mac_;
    peer.path_mtu = path_mtu_;
    peer.max_dest_rd_atomic = static_cast<uint8_t>(outbound_read_limit_);
    peer.local_port = port_;
    attrs.send_psn = send_psn_;
    attrs.path_mtu = path_mtu_;
    attrs.max_rd_atomic = static_cast<uint8_t>(outbound_read_limit_);
    attrs.max_dest_rd_atomic = static_cast<uint8_t>(inbound_read_limit_);
  }
  return qp_->connect_transport(peer, attrs);  // ARP and the engines' mailboxes: outside the lock
}

// -------------------------------------------------------------------------------------------- queries

NTSTATUS ConnectorImpl::NdkGetConnectionData(uint32_t* inbound_read_limit, uint32_t* outbound_read_limit,
                                             void* private_data, uint32_t* private_data_length) {
  if (private_data_length == nullptr || (private_data == nullptr && *private_data_length > 0))
    return STATUS_INVALID_PARAMETER;
  const std::lock_guard lock(mutex_);
  if (peer_private_data_size_ == 0) return STATUS_CONNECTION_INVALID;  // nothing received from a peer yet
  if (inbound_read_limit != nullptr) *inbound_read_limit = peer_inbound_read_limit_;
  if (outbound_read_limit != nullptr) *outbound_read_limit = peer_outbound_read_limit_;
  // ndkpi.md §9.7: the required size is the CM's room, not what the peer sent; copy what fits.
  const auto required = static_cast<uint32_t>(peer_private_data_size_);
  if (private_data != nullptr) {
    std::memset(private_data, 0, std::min(*private_data_length, required));
    std::memcpy(private_data, peer_private_data_.data(),
                std::min<std::size_t>({*private_data_length, required, peer_private_data_.size()}));
  }
  const bool fits = *private_data_length >= required;
  *private_data_length = required;
  return private_data == nullptr || fits ? STATUS_SUCCESS : STATUS_BUFFER_TOO_SMALL;
}

NTSTATUS ConnectorImpl::NdkGetLocalAddress(sockaddr* address, uint32_t* address_length) {
  const std::lock_guard lock(mutex_);
  if (state_ == State::kIdle) return STATUS_CONNECTION_INVALID;
  return write_endpoint(local_, address, address_length);
}

NTSTATUS ConnectorImpl::NdkGetPeerAddress(sockaddr* address, uint32_t* address_length) {
  const std::lock_guard lock(mutex_);
  if (state_ == State::kIdle) return STATUS_CONNECTION_INVALID;
  return write_endpoint(peer_, address, address_length);
}

}  // namespace uroce::ndk::detail
