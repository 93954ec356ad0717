// Connection management behind ndk.h's connectors, listeners and shared endpoints (ndkpi.md §9.7-9.8, §10.4-10.5;
// ARCHITECTURE.md "Connection management").
//
// One ConnectionManager per adapter runs the IB CM (proto::CmAgent, one CA for all ports) on a thread of its own,
// fed by the GSI channel (dataplane/gsi_channel.h) and by the consumers' calls, which it runs in order (post()).
// Connectors turn the agent's events into NDK completions and drive their QP into RTS through the RC transport;
// every consumer callback runs on the notifier, never on the CM thread or an engine. Timeouts and retries are
// the CM's (proto/cm_agent.h); nothing here blocks the CM thread on the network (ARP runs on the notifier).
//
// Lifetimes: a connector holds its adapter, and from Connect/Accept on its QP (the QP closes after it), its
// listener (an incoming one) or its shared endpoint. While the CM may still report on its CM ID, the manager
// holds a reference too. A listener or shared endpoint's address stays bound until its close, and a connector's
// own (NdkConnect) until the connector closes.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api/addresses.h"
#include "api/provider.h"
#include "dataplane/gsi_channel.h"
#include "proto/cm_agent.h"
#include "proto/entropy.h"
#include "proto/rdma_cm.h"

namespace uroce::ndk::detail {

class ConnectorImpl;
class ListenerImpl;
class SharedEndpointImpl;

// The agent's opaque route to a peer (proto::CmRoute) as this provider fills it: the port in the top 16 bits, the
// next hop's MAC in the low 48. A connection's MADs go by the route it was made with, so the MAC its REQ came from
// (or ARP/ND gave the active side) is the one every later MAD of it, and its RC QP, sends to.
[[nodiscard]] constexpr proto::CmRoute cm_route(dataplane::PortIndex port, proto::MacAddr mac) noexcept {
  return uint64_t{port} << 48 | mac.value();
}
[[nodiscard]] constexpr dataplane::PortIndex cm_route_port(proto::CmRoute route) noexcept {
  return static_cast<dataplane::PortIndex>(route >> 48);
}
[[nodiscard]] constexpr proto::MacAddr cm_route_mac(proto::CmRoute route) noexcept {
  return proto::MacAddr{route & 0xFFFF'FFFF'FFFF};
}

// The requests a listener holds that its consumer has not yet accepted, rejected or closed; a REQ beyond them is
// refused with REJ "no resources", so that no listener's requests take every connection the CM has (shared with
// our own connects). Linux's rdma_listen backlog is capped at 1024 too (ucma.c max_backlog).
inline constexpr uint32_t kListenBacklog = 1024;

class ConnectionManager final : public proto::CmEnv {
 public:
  // One per Stack: every adapter of the process shares it (and the GSI QP it owns).
  [[nodiscard]] static std::unique_ptr<ConnectionManager> start(Stack& stack, std::string& error);
  static constexpr const char* kThreadName = "uroce-cm";  // its thread's name (pthread_setname_np)
  ~ConnectionManager();  // stops the thread; every connector has gone by then (adapter close)
  ConnectionManager(const ConnectionManager&) = delete;
  ConnectionManager& operator=(const ConnectionManager&) = delete;

  // Any thread: runs `work` on the CM thread, after everything posted before it.
  void post(std::function<void()> work);

  // Any thread. Binds a local endpoint for a listener (`listener` set; the address may be 0.0.0.0 / ::), a shared
  // endpoint or a connector; port 0 picks a free one from 49152-65535 and writes it back.
  // STATUS_SHARING_VIOLATION: taken (ndkpi.md §7, §9.8); STATUS_TOO_MANY_ADDRESSES: no free port.
  NTSTATUS bind(SocketEndpoint& endpoint, const void* owner, ListenerImpl* listener = nullptr);
  void unbind(const void* owner);

  // Any thread but the CM's: what connection management holds, counted on the CM thread (the agent's connections)
  // and under the mutex (bound endpoints).
  struct Usage {
    uint32_t cm_ids = 0;
    uint32_t bound_endpoints = 0;
  };
  [[nodiscard]] Usage usage();

  // CM thread only.
  [[nodiscard]] proto::CmAgent& agent() noexcept { return *agent_; }
  [[nodiscard]] uint64_t now_ms() const noexcept;
  // `connector` receives the events of `id` (and is retained) until detach().
  void attach(proto::CmId id, ConnectorImpl* connector);
  void detach(proto::CmId id);
  // Any thread: the CM agent's counters (as of its last step), the live CM IDs, MADs that could not be sent, and
  // the GSI QP's counters. Also /uroce/cm in DPDK telemetry.
  [[nodiscard]] std::vector<std::pair<std::string, uint64_t>> counter_values() const;
  // CM thread only. A passive side whose REP is out: once `qp` has taken a request from the peer, the connection
  // counts as established even if the RTU never comes (the agent's notify_established).
  void await_first_request(proto::CmId id, const dataplane::RcQueuePair* qp) { awaiting_first_request_[id] = qp; }
  [[nodiscard]] static proto::Psn random_psn() { return proto::Psn{proto::random_u32()}; }

  // proto::CmEnv (CM thread)
  void send_mad(std::span<const uint8_t, proto::kMadSize> mad, const proto::Gid& local_gid,
                const proto::Gid& remote_gid, proto::CmRoute route) override;
  uint32_t random32() override { return proto::random_u32(); }

  [[nodiscard]] Stack& stack() noexcept { return stack_; }

 private:
  explicit ConnectionManager(Stack& stack);
  void run();
  bool step();  // one round of work, MADs, timers and events; true if anything happened
  void dispatch(const proto::CmEvent& event);
  void on_request(const proto::CmEvent& event);
  // The listener for (address, port), retained, or nullptr (none, paused or closing).
  ListenerImpl* find_listener(const config::IpAddress& address, uint16_t port);

  struct Binding {
    SocketEndpoint endpoint;
    const void* owner = nullptr;
    ListenerImpl* listener = nullptr;
  };

  Stack& stack_;
  std::unique_ptr<dataplane::GsiChannel> gsi_;
  std::unique_ptr<proto::CmAgent> agent_;
  std::thread thread_;

  std::mutex mutex_;  // guards work_, stopping_, bindings_
  std::condition_variable wake_;
  std::deque<std::function<void()>> work_;
  bool stopping_ = false;
  std::vector<Binding> bindings_;

  // CM thread only.
  std::unordered_map<proto::CmId, ConnectorImpl*> connectors_;
  std::unordered_map<proto::CmId, const dataplane::RcQueuePair*> awaiting_first_request_;
  uint64_t mads_unsent_ = 0;   // the GSI ring was full
  uint64_t over_backlog_ = 0;  // REQs refused: their listener's backlog was full

  // What counter_values() reports of the CM thread's state, copied at the end of each step.
  mutable std::mutex snapshot_mutex_;
  proto::CmCounters agent_counters_;
  uint64_t live_cm_ids_ = 0;
  uint64_t mads_unsent_snapshot_ = 0;
  uint64_t over_backlog_snapshot_ = 0;
};

class ListenerImpl final : public Listener, public Lifetime {
 public:
  ListenerImpl(AdapterImpl& adapter, ConnectEventCallback callback, void* context);
  ~ListenerImpl() override;
  NTSTATUS NdkCloseListener(CloseCompletion completion, void* request_context) override;
  NTSTATUS NdkListen(const sockaddr* address, uint32_t address_length, RequestCompletion completion,
                     void* request_context) override;
  NTSTATUS NdkGetListenerLocalAddress(sockaddr* address, uint32_t* address_length) override;
  void NdkControlConnectEvents(bool pause) override { paused_.store(pause, std::memory_order_release); }

  [[nodiscard]] bool accepting() const noexcept { return !paused_.load(std::memory_order_acquire) && !closing(); }
  // CM thread: takes a place in the backlog for a new request; false when kListenBacklog are taken.
  [[nodiscard]] bool enter_backlog() noexcept;
  // Any thread: the consumer accepted, rejected or closed a request that held a place.
  void leave_backlog() noexcept { backlog_.fetch_sub(1, std::memory_order_relaxed); }
  // Notifier: hands the consumer its new connector (or rejects it if the listener closed meanwhile).
  void deliver(ConnectorImpl* connector);
  [[nodiscard]] AdapterImpl& adapter() noexcept { return adapter_; }
  using Lifetime::release;
  using Lifetime::retain;

 private:
  AdapterImpl& adapter_;
  const ConnectEventCallback callback_;
  void* const context_;
  std::mutex mutex_;
  std::optional<SocketEndpoint> bound_;
  std::atomic<bool> paused_{false};
  std::atomic<uint32_t> backlog_{0};  // places taken (kListenBacklog)
  LiveObject live_{adapter_, NdkObjectTypeListener};
};

class SharedEndpointImpl final : public SharedEndpoint, public Lifetime {
 public:
  explicit SharedEndpointImpl(AdapterImpl& adapter);
  void set_endpoint(const SocketEndpoint& endpoint) { endpoint_ = endpoint; }  // once, when bound at creation
  ~SharedEndpointImpl() override;
  NTSTATUS NdkCloseSharedEndpoint(CloseCompletion completion, void* request_context) override;
  NTSTATUS NdkGetSharedEndpointLocalAddress(sockaddr* address, uint32_t* address_length) override {
    return write_endpoint(endpoint_, address, address_length);
  }
  [[nodiscard]] const SocketEndpoint& endpoint() const noexcept { return endpoint_; }
  [[nodiscard]] const AdapterImpl& adapter() const noexcept { return adapter_; }
  using Lifetime::release;
  using Lifetime::retain;

 private:
  AdapterImpl& adapter_;
  SocketEndpoint endpoint_;  // bound by NdkCreateSharedEndpoint
  LiveObject live_{adapter_, NdkObjectTypeSharedEndpoint};
};

class ConnectorImpl final : public Connector, public Lifetime {
 public:
  explicit ConnectorImpl(AdapterImpl& adapter);
  // An incoming connection request (CM thread), for `listener`'s connect event.
  ConnectorImpl(AdapterImpl& adapter, ListenerImpl& listener, const proto::CmEvent& request, dataplane::PortIndex port,
                const SocketEndpoint& local, const SocketEndpoint& peer);
  ~ConnectorImpl() override;

  NTSTATUS NdkCloseConnector(CloseCompletion completion, void* request_context) override;
  NTSTATUS NdkConnect(Qp* qp, const sockaddr* source, uint32_t source_length, const sockaddr* destination,
                      uint32_t destination_length, uint32_t inbound_read_limit, uint32_t outbound_read_limit,
                      const void* private_data, uint32_t private_data_length, RequestCompletion completion,
                      void* request_context) override;
  NTSTATUS NdkConnectWithSharedEndpoint(Qp* qp, SharedEndpoint* endpoint, const sockaddr* destination,
                                        uint32_t destination_length, uint32_t inbound_read_limit,
                                        uint32_t outbound_read_limit, const void* private_data,
                                        uint32_t private_data_length, RequestCompletion completion,
                                        void* request_context) override;
  NTSTATUS NdkCompleteConnect(DisconnectEventCallback disconnect_event, void* disconnect_event_context,
                              RequestCompletion completion, void* request_context) override;
  NTSTATUS NdkAccept(Qp* qp, uint32_t inbound_read_limit, uint32_t outbound_read_limit, const void* private_data,
                     uint32_t private_data_length, DisconnectEventCallback disconnect_event,
                     void* disconnect_event_context, RequestCompletion completion, void* request_context) override;
  NTSTATUS NdkReject(const void* private_data, uint32_t private_data_length) override;
  NTSTATUS NdkGetConnectionData(uint32_t* inbound_read_limit, uint32_t* outbound_read_limit, void* private_data,
                                uint32_t* private_data_length) override;
  NTSTATUS NdkGetLocalAddress(sockaddr* address, uint32_t* address_length) override;
  NTSTATUS NdkGetPeerAddress(sockaddr* address, uint32_t* address_length) override;
  NTSTATUS NdkDisconnect(RequestCompletion completion, void* request_context) override;

  // CM thread: an event of this connector's CM ID.
  void on_cm_event(const proto::CmEvent& event);
  using Lifetime::release;
  using Lifetime::retain;

 private:
  enum class State : uint8_t {
    kIdle,        // created, nothing asked yet
    kConnecting,  // NdkConnect: resolving the peer, then the REQ is out
    kReplied,     // the peer accepted: NdkCompleteConnect (or NdkReject) next
    kCompleting,  // NdkCompleteConnect: QP to RTS, then the RTU
    kIncoming,    // a request for the consumer: NdkAccept or NdkReject
    kAccepting,   // NdkAccept: the REP is out, waiting for the RTU
    kEstablished,
    kDisconnecting,  // NdkDisconnect: the DREQ is out
    kDone,           // disconnected, rejected, refused, timed out or aborted
    kClosed,
  };

  NTSTATUS connect(Qp* qp, const SocketEndpoint& source, SharedEndpointImpl* shared, const sockaddr* destination,
                   uint32_t destination_length, uint32_t inbound_read_limit, uint32_t outbound_read_limit,
                   const void* private_data, uint32_t private_data_length, RequestCompletion completion,
                   void* request_context);
  // Under mutex_: makes `completion` the pending request (the connector stays alive until it completes).
  void begin_request(RequestCompletion completion, void* context);
  // Completes the pending request (if any) with `status` on the notifier.
  void finish_request(NTSTATUS status);
  void send_request();  // CM thread: the REQ
  void accept_on_cm_thread(const proto::CmReplyParams& reply);
  void fail(NTSTATUS status);  // CM thread: the connection is over before it was established
  void leave_backlog();        // under mutex_: the consumer has answered or closed an incoming request, or it ended
  void abandon_qp();           // under mutex_: the connection was given up; settle the QP (connector.cc)
  void deliver_disconnect_event();
  // Notifier: moves the QP to RTS towards the peer with what the CM negotiated.
  NTSTATUS connect_qp();

  AdapterImpl& adapter_;
  ConnectionManager& cm_;
  std::mutex mutex_;
  State state_ = State::kIdle;
  QpImpl* qp_ = nullptr;
  ListenerImpl* listener_ = nullptr;
  SharedEndpointImpl* shared_ = nullptr;
  bool bound_ = false;              // our own endpoint, bound by NdkConnect
  bool in_backlog_ = false;         // an incoming request holding a place in listener_'s backlog
  bool connect_in_flight_ = false;  // connect_qp() runs on the notifier: its continuation settles the QP
  std::optional<proto::CmId> cm_id_;
  dataplane::PortIndex port_ = 0;
  SocketEndpoint local_{};
  SocketEndpoint peer_{};
  std::optional<proto::MacAddr> peer_mac_;
  uint32_t inbound_read_limit_ = 0;  // ours, as negotiated
  uint32_t outbound_read_limit_ = 0;
  uint32_t path_mtu_ = 1024;
  // First PSNs: ours on the wire, and the peer's. The CM's starting PSNs name the sender's receive PSN: a REQ's
  // is the requester's, a REP's the replier's.
  proto::Psn send_psn_{};
  proto::Psn receive_psn_{};
  // The peer's, from its REQ or REP.
  proto::Qpn peer_qpn_{};
  uint32_t peer_inbound_read_limit_ = 0;   // its responder resources
  uint32_t peer_outbound_read_limit_ = 0;  // its initiator depth
  std::vector<uint8_t> peer_private_data_;
  std::size_t peer_private_data_size_ = 0;  // the CM's room for it (NdkGetConnectionData's required size)
  std::vector<uint8_t> private_data_;       // ours, for the REQ
  RequestCompletion pending_ = nullptr;
  void* pending_context_ = nullptr;
  DisconnectEventCallback disconnect_event_ = nullptr;
  void* disconnect_event_context_ = nullptr;
  bool peer_disconnected_ = false;
  bool disconnect_delivered_ = false;
  LiveObject live_{adapter_, NdkObjectTypeConnector};
};

}  // namespace uroce::ndk::detail
