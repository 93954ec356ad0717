// Connecting QPs through the connection manager, for tools that run one step after another: NDK requests are
// asynchronous (every call may return STATUS_PENDING and complete through its callback, ndkpi.md §10), and a tool
// such as uroce-rping or uroce-perf -R simply waits for each, with a deadline.
//
// Control path only: the waits poll with short sleeps, never on an engine.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <sys/socket.h>

#include "api/ndk.h"

namespace uroce::apps {

using CmClock = std::chrono::steady_clock;

// The outcome of one asynchronous NDK request (its RequestCompletion), waited for by polling.
struct Request {
  std::atomic<bool> done{false};
  std::atomic<ndk::NTSTATUS> status{ndk::STATUS_PENDING};
  static void complete(void* context, ndk::NTSTATUS status);
  // The final status of the call that returned `returned`: that status unless it is STATUS_PENDING, else the
  // completion's, or STATUS_IO_TIMEOUT once `timeout` has passed.
  ndk::NTSTATUS wait(ndk::NTSTATUS returned, std::chrono::milliseconds timeout);
};

// A numeric IPv4 or IPv6 address (no name lookup) with `port`; nothing if `text` is not one.
[[nodiscard]] std::optional<sockaddr_storage> parse_socket_address(const std::string& text, uint16_t port);
[[nodiscard]] uint32_t socket_address_length(const sockaddr_storage& address);
[[nodiscard]] const sockaddr* as_sockaddr(const sockaddr_storage& address);

// What a tool asks of a connection besides its QP.
struct CmConnectParams {
  uint32_t inbound_read_limit = 0;   // IRD: READs the peer may have outstanding towards us
  uint32_t outbound_read_limit = 0;  // ORD
  std::string private_data;
  int refused_retries = 0;  // a refused connect (no listener yet) is tried again this often, 100 ms apart
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};  // for each step
  ndk::DisconnectEventCallback on_disconnect = nullptr;         // the peer disconnected (ndkpi.md §9.7)
  void* disconnect_context = nullptr;
};

// NdkConnect then NdkCompleteConnect: the connected connector, or nothing with `error` saying why (e.g.
// "STATUS_CONNECTION_REFUSED"); the QP is in RTS when this returns one.
[[nodiscard]] ndk::Connector* connect_qp(ndk::Adapter& adapter, ndk::Qp& qp, const sockaddr_storage& source,
                                         const sockaddr_storage& destination, const CmConnectParams& params,
                                         std::string& error);

// NdkAccept on an incoming connector, waiting until the peer confirmed (its RTU or first packet). On failure the
// connector is closed (its pending accept cancelled) before this returns: the caller must not close it again.
[[nodiscard]] ndk::NTSTATUS accept_qp(ndk::Connector& connector, ndk::Qp& qp, const CmConnectParams& params);

// NdkDisconnect (graceful, waiting for the peer's answer or the CM's timeout), then NdkCloseConnector. The status
// is the disconnect's; a connection the peer already ended disconnects at once.
ndk::NTSTATUS disconnect_and_close(ndk::Connector* connector, std::chrono::milliseconds timeout);

// Closes what a tool made for one connection, each if it exists, in the order NDKPI needs (ndkpi.md §2: a QP
// before its CQs, an MR deregistered before its close, an MR before its PD). Waits for each close.
void close_connection_resources(ndk::Qp* qp, ndk::Mr* mr, ndk::Pd* pd, ndk::Cq* send_cq, ndk::Cq* recv_cq);

// A listener whose incoming connectors queue up in arrival order until the tool takes them. Each one must be
// accepted, rejected or closed by whoever takes it, before the CmListener goes (closing a listener waits for the
// connectors it handed out, ndkpi.md §10.4); those still queued then are rejected.
class CmListener {
 public:
  // Listens on `address` (0.0.0.0 or :: for every address of that family).
  [[nodiscard]] static std::unique_ptr<CmListener> listen(ndk::Adapter& adapter, const sockaddr_storage& address,
                                                          std::string& error);
  ~CmListener();
  CmListener(const CmListener&) = delete;
  CmListener& operator=(const CmListener&) = delete;

  // The next incoming connector, or nullptr once `deadline` has passed.
  [[nodiscard]] ndk::Connector* next(CmClock::time_point deadline);

 private:
  CmListener() = default;
  static void on_connect(void* context, ndk::Connector* connector);

  ndk::Listener* listener_ = nullptr;
  std::mutex mutex_;  // the notifier thread queues, the tool's thread takes
  std::deque<ndk::Connector*> incoming_;
  bool closing_ = false;
};

}  // namespace uroce::apps
