// The CM thread, the endpoint registry, listeners and shared endpoints (connection.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>

#include <pthread.h>

#include "api/connection.h"
#include "dataplane/telemetry.h"

namespace uroce::ndk::detail {

namespace {

constexpr uint16_t kEphemeralFirst = 49152;  // ndkpi.md §2: port 0 -> the provider picks from 49152-65535
constexpr uint32_t kEphemeralCount = 65536 - kEphemeralFirst;
constexpr auto kIdleWait = std::chrono::milliseconds(1);  // the GSI ring is polled: the CM is not latency-bound

// The CA GUID as Linux derives it for RoCE: the EUI-64 of the first port's MAC (universal/local bit flipped).
uint64_t ca_guid_of(proto::MacAddr mac) {
  const uint64_t m = mac.value();
  const uint64_t upper = (m >> 24) ^ 0x020000;
  return upper << 40 | uint64_t{0xFFFE} << 24 | (m & 0xFFFFFF);
}

bool endpoints_overlap(const SocketEndpoint& a, const SocketEndpoint& b) {
  return a.port == b.port && a.ip.is_v6 == b.ip.is_v6 &&
         (is_any_address(a.ip) || is_any_address(b.ip) || same_address(a.ip, b.ip));
}

}  // namespace

// ------------------------------------------------------------------------------------------- the manager

ConnectionManager::ConnectionManager(Stack& stack) : stack_(stack) {}

std::unique_ptr<ConnectionManager> ConnectionManager::start(Stack& stack, std::string& error) {
  std::unique_ptr<ConnectionManager> cm(new ConnectionManager(stack));
  auto gsi = dataplane::GsiChannel::start(stack.dataplane());
  if (!gsi.ok()) {
    error = "the GSI QP: " + gsi.error();
    return nullptr;
  }
  cm->gsi_ = std::move(gsi.value());
  proto::CmParams params;
  params.local_ca_guid = stack.dataplane().port_count() > 0 ? ca_guid_of(stack.dataplane().port(0).mac) : 0;
  cm->agent_ = std::make_unique<proto::CmAgent>(params, cm.get());
  cm->thread_ = std::thread([m = cm.get()] { m->run(); });
  (void)pthread_setname_np(cm->thread_.native_handle(), kThreadName);  // what top -H and the tests see
  dataplane::publish_cm_counters(cm.get(), [m = cm.get()] { return m->counter_values(); });
  return cm;
}

ConnectionManager::~ConnectionManager() {
  dataplane::withdraw_cm_counters(this);
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Connectors still attached hold a reference from us; every one has been closed by its consumer by now.
  for (auto& [id, connector] : connectors_) connector->release();
}

uint64_t ConnectionManager::now_ms() const noexcept {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

void ConnectionManager::post(std::function<void()> work) {
  {
    const std::lock_guard lock(mutex_);
    work_.push_back(std::move(work));
  }
  wake_.notify_one();
}

void ConnectionManager::run() {
  for (;;) {
    if (step()) continue;
    std::unique_lock lock(mutex_);
    if (stopping_) return;
    // In unsigned milliseconds until the cap: with no timer the deadline is UINT64_MAX, whose distance as a signed
    // std::chrono count was negative, and a negative wait returns at once (the thread spun on its CPU, which is
    // the application's CPU on a 2-core machine).
    const uint64_t deadline = agent_->next_deadline_ms();
    const uint64_t now = now_ms();
    const uint64_t cap = static_cast<uint64_t>(kIdleWait.count());
    const auto wait = std::chrono::milliseconds(deadline <= now ? 0 : std::min(cap, deadline - now));
    wake_.wait_for(lock, wait, [&] { return stopping_ || !work_.empty(); });
    if (stopping_) return;
  }
}

bool ConnectionManager::step() {
  bool busy = false;
  {
    std::unique_lock lock(mutex_);
    if (!work_.empty()) {
      std::deque<std::function<void()>> work;
      work.swap(work_);
      lock.unlock();
      for (auto& w : work) w();
      busy = true;
    }
  }

  const uint64_t now = now_ms();
  // The batch only when MADs wait: constructing 16 datagrams clears ~5 KB, on every step of a mostly idle ring.
  if (gsi_->pending()) {
    std::array<dataplane::GsiDatagram, 16> batch;
    const std::size_t n = gsi_->receive(batch);
    for (std::size_t i = 0; i < n; ++i) {
      const dataplane::GsiDatagram& d = batch[i];
      // The frame's source MAC goes in with this MAD only: the agent keeps it if the MAD makes a connection, and
      // answers by it if the MAD belongs to none. No other connection's MADs go by what an unchecked frame claims.
      agent_->on_mad(d.mad, d.remote_gid, d.local_gid, cm_route(d.port, d.remote_mac), now);
    }
    busy |= n > 0;
  }
  // Before the timers, which would send the REP again: a peer already sending on the QP has the REP, and its RTU
  // was lost. The agent's kEstablished event then completes the accept as the RTU would have.
  for (auto it = awaiting_first_request_.begin(); it != awaiting_first_request_.end();) {
    if (it->second->peer_request_seen()) {
      (void)agent_->notify_established(it->first);
      it = awaiting_first_request_.erase(it);
    } else {
      ++it;
    }
  }
  agent_->on_timer(now);
  // Handling an event may call the agent again (reject, accept): repeat until nothing new comes out.
  for (std::vector<proto::CmEvent> events = agent_->take_events(); !events.empty(); events = agent_->take_events()) {
    busy = true;
    for (const proto::CmEvent& e : events) dispatch(e);
  }
  {
    const std::lock_guard lock(snapshot_mutex_);
    agent_counters_ = agent_->counters();
    live_cm_ids_ = connectors_.size();
    mads_unsent_snapshot_ = mads_unsent_;
    over_backlog_snapshot_ = over_backlog_;
  }
  return busy;
}

void ConnectionManager::dispatch(const proto::CmEvent& event) {
  if (event.type == proto::CmEventType::kRequest) return on_request(event);
  awaiting_first_request_.erase(event.id);  // whatever came (RTU, REJ, timeout), the REP is answered
  const auto it = connectors_.find(event.id);
  if (it == connectors_.end()) return;  // its connector has closed
  ConnectorImpl* connector = it->second;
  connector->on_cm_event(event);
  // After time-wait the CM forgets the ID; so do we.
  if (event.type == proto::CmEventType::kTimeWaitDone) detach(event.id);
}

void ConnectionManager::on_request(const proto::CmEvent& event) {
  const proto::CmConnectParams& req = event.request;
  auto reject = [&](proto::CmRejectReason reason) { (void)agent_->reject(event.id, reason, {}); };
  // The RDMA CM's TCP port space, and a cma_hdr that names the path the REQ itself came by (cma.c checks the
  // same: the destination is ours, the source is the sender).
  if (!proto::is_rdma_cm_service_id(req.service_id) || req.private_data.size() < proto::CmaHdr::kSize)
    return reject(proto::CmRejectReason::kInvalidServiceId);
  const auto hdr = proto::read_cma_hdr(
      std::span<const uint8_t, proto::CmaHdr::kSize>(req.private_data.data(), proto::CmaHdr::kSize));
  if (!hdr) return reject(proto::CmRejectReason::kInvalidServiceId);
  if (hdr->destination.gid != req.remote_gid || hdr->source.address.gid != req.local_gid)
    return reject(proto::CmRejectReason::kInvalidGid);
  const config::IpAddress local_ip = dataplane::ip_of_gid(req.remote_gid);
  const auto port = port_for(stack_.config(), local_ip, local_ip.is_v6);
  if (!port) return reject(proto::CmRejectReason::kInvalidGid);
  const uint16_t service_port = proto::rdma_cm_port(req.service_id);
  ListenerImpl* listener = find_listener(local_ip, service_port);
  // No listener (or a paused one): rejected at once, so the peer sees "refused" rather than a timeout.
  if (listener == nullptr) return reject(proto::CmRejectReason::kInvalidServiceId);
  // A full backlog: REJ "no resources", as the agent answers beyond max_connections. Linux's ucma refuses
  // beyond its backlog too, without a REJ (cm_destroy_id with -ENOMEM), leaving the peer to retry after its timeout.
  if (!listener->enter_backlog()) {
    ++over_backlog_;
    listener->release();  // find_listener's reference
    return reject(proto::CmRejectReason::kNoResources);
  }

  // The passive side's connector belongs to the listener's adapter.
  auto* connector =
      new ConnectorImpl(listener->adapter(), *listener, event, *port, SocketEndpoint{local_ip, service_port},
                        SocketEndpoint{dataplane::ip_of_gid(req.local_gid), hdr->source.port});
  attach(event.id, connector);
  stack_.notifier().run([listener, connector] {
    listener->deliver(connector);
    listener->release();  // find_listener's reference
  });
}

ListenerImpl* ConnectionManager::find_listener(const config::IpAddress& address, uint16_t port) {
  const std::lock_guard lock(mutex_);
  ListenerImpl* wildcard = nullptr;
  for (const Binding& b : bindings_) {
    if (b.listener == nullptr || b.endpoint.port != port || b.endpoint.ip.is_v6 != address.is_v6) continue;
    if (same_address(b.endpoint.ip, address)) {
      wildcard = b.listener;
      break;
    }
    if (is_any_address(b.endpoint.ip)) wildcard = b.listener;
  }
  if (wildcard == nullptr || !wildcard->accepting()) return nullptr;
  wildcard->retain();
  return wildcard;
}

NTSTATUS ConnectionManager::bind(SocketEndpoint& endpoint, const void* owner, ListenerImpl* listener) {
  const std::lock_guard lock(mutex_);
  auto taken = [&](const SocketEndpoint& e) {
    return std::any_of(bindings_.begin(), bindings_.end(),
                       [&](const Binding& b) { return endpoints_overlap(b.endpoint, e); });
  };
  if (endpoint.port == 0) {
    const uint32_t start = proto::random_u32() % kEphemeralCount;
    for (uint32_t i = 0; i < kEphemeralCount; ++i) {
      SocketEndpoint candidate = endpoint;
      candidate.port = static_cast<uint16_t>(kEphemeralFirst + (start + i) % kEphemeralCount);
      if (taken(candidate)) continue;
      endpoint = candidate;
      bindings_.push_back({endpoint, owner, listener});
      return STATUS_SUCCESS;
    }
    return STATUS_TOO_MANY_ADDRESSES;
  }
  if (taken(endpoint)) return STATUS_SHARING_VIOLATION;  // ndkpi.md §7: the local address is in use
  bindings_.push_back({endpoint, owner, listener});
  return STATUS_SUCCESS;
}

void ConnectionManager::unbind(const void* owner) {
  const std::lock_guard lock(mutex_);
  std::erase_if(bindings_, [&](const Binding& b) { return b.owner == owner; });
}

ConnectionManager::Usage ConnectionManager::usage() {
  // The agent belongs to the CM thread: ask it there, after the work queued before us.
  std::promise<uint32_t> cm_ids;
  std::future<uint32_t> answer = cm_ids.get_future();
  post([this, &cm_ids] { cm_ids.set_value(static_cast<uint32_t>(agent_->connections())); });
  Usage u;
  u.cm_ids = answer.get();
  const std::lock_guard lock(mutex_);
  u.bound_endpoints = static_cast<uint32_t>(bindings_.size());
  return u;
}

void ConnectionManager::attach(proto::CmId id, ConnectorImpl* connector) {
  connector->retain();
  connectors_[id] = connector;
}

void ConnectionManager::detach(proto::CmId id) {
  awaiting_first_request_.erase(id);
  const auto it = connectors_.find(id);
  if (it == connectors_.end()) return;
  ConnectorImpl* connector = it->second;
  connectors_.erase(it);
  connector->release();
}

std::vector<std::pair<std::string, uint64_t>> ConnectionManager::counter_values() const {
  std::vector<std::pair<std::string, uint64_t>> v;
  {
    const std::lock_guard lock(snapshot_mutex_);
    const proto::CmCounters& c = agent_counters_;
    v = {{"cm_rx_mads", c.rx_mads},
         {"cm_tx_mads", c.tx_mads},
         {"cm_retransmits", c.retransmits},
         {"cm_rx_malformed", c.rx_malformed},
         {"cm_rx_unsupported", c.rx_unsupported},
         {"cm_rx_unmatched", c.rx_unmatched},
         {"cm_rx_wrong_state", c.rx_wrong_state},
         {"cm_rx_duplicate_req", c.rx_duplicate_req},
         {"cm_rx_dreq_wrong_qpn", c.rx_dreq_wrong_qpn},
         {"cm_req_rejected", c.req_rejected},
         {"cm_timeouts", c.timeouts},
         {"cm_live_ids", live_cm_ids_},
         {"cm_mads_unsent", mads_unsent_snapshot_},
         {"cm_req_over_backlog", over_backlog_snapshot_}};
  }
  for (auto& value : gsi_->counter_values()) v.push_back(std::move(value));
  return v;
}

void ConnectionManager::send_mad(std::span<const uint8_t, proto::kMadSize> mad, const proto::Gid& local_gid,
                                 const proto::Gid& remote_gid, proto::CmRoute route) {
  // The GSI channel drops (and counts) a datagram whose port does not own local_gid.
  dataplane::GsiDatagram d;
  d.port = cm_route_port(route);
  d.local_gid = local_gid;
  d.remote_gid = remote_gid;
  d.remote_mac = cm_route_mac(route);
  std::copy(mad.begin(), mad.end(), d.mad.begin());
  if (!gsi_->send(d)) ++mads_unsent_;
}

// ------------------------------------------------------------------------------------------ listeners

ListenerImpl::ListenerImpl(AdapterImpl& adapter, ConnectEventCallback callback, void* context)
    : Listener(adapter.Version, NdkObjectTypeListener),
      Lifetime(&adapter),
      adapter_(adapter),
      callback_(callback),
      context_(context) {}

NTSTATUS ListenerImpl::NdkListen(const sockaddr* address, uint32_t address_length, RequestCompletion, void*) {
  std::optional<SocketEndpoint> endpoint = endpoint_of(address, address_length);
  if (!endpoint) return STATUS_INVALID_PARAMETER;
  if (!is_any_address(endpoint->ip) && !port_for(adapter_.config(), endpoint->ip, endpoint->ip.is_v6))
    return STATUS_INVALID_ADDRESS;
  const std::lock_guard lock(mutex_);
  if (bound_) return STATUS_INVALID_DEVICE_REQUEST;  // already listening
  const NTSTATUS status = adapter_.connections().bind(*endpoint, this, this);
  if (status != STATUS_SUCCESS) return status;
  bound_ = endpoint;
  return STATUS_SUCCESS;  // listening from here on: the completion is never called
}

NTSTATUS ListenerImpl::NdkGetListenerLocalAddress(sockaddr* address, uint32_t* address_length) {
  const std::lock_guard lock(mutex_);
  if (!bound_) return STATUS_INVALID_DEVICE_REQUEST;
  return write_endpoint(*bound_, address, address_length);
}

ListenerImpl::~ListenerImpl() { adapter_.connections().unbind(this); }

NTSTATUS ListenerImpl::NdkCloseListener(CloseCompletion completion, void* request_context) {
  // ndkpi.md §10.3: a listener refuses new connections as soon as its close is issued (accepting()). Connectors
  // it handed out hold it, and its address stays bound until the last of them has closed too (§10.4).
  return close(completion, request_context);
}

bool ListenerImpl::enter_backlog() noexcept {
  // Only the CM thread takes places, so no other can be taken between the test and the increment.
  if (backlog_.load(std::memory_order_relaxed) >= kListenBacklog) return false;
  backlog_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void ListenerImpl::deliver(ConnectorImpl* connector) {
  if (closing()) {
    (void)connector->NdkCloseConnector([](void*) {}, nullptr);  // rejects the request; never waits here
    return;
  }
  callback_(context_, connector);
}

// ------------------------------------------------------------------------------------ shared endpoints

SharedEndpointImpl::SharedEndpointImpl(AdapterImpl& adapter)
    : SharedEndpoint(adapter.Version, NdkObjectTypeSharedEndpoint), Lifetime(&adapter), adapter_(adapter) {}

SharedEndpointImpl::~SharedEndpointImpl() { adapter_.connections().unbind(this); }

// Connectors that use the endpoint hold it: the close pends, and the address stays bound, until they close.
NTSTATUS SharedEndpointImpl::NdkCloseSharedEndpoint(CloseCompletion completion, void* request_context) {
  return close(completion, request_context);
}

}  // namespace uroce::ndk::detail
