#include "apps/common/cm_connection.h"

#include <cstring>
#include <thread>

#include <netdb.h>
#include <netinet/in.h>

namespace uroce::apps {

using namespace ndk;

void Request::complete(void* context, NTSTATUS s) {
  auto& r = *static_cast<Request*>(context);
  r.status.store(s);
  r.done.store(true, std::memory_order_release);  // publishes status to wait()
}

NTSTATUS Request::wait(NTSTATUS returned, std::chrono::milliseconds timeout) {
  if (returned != STATUS_PENDING) return returned;
  const auto deadline = CmClock::now() + timeout;
  while (!done.load(std::memory_order_acquire)) {
    if (CmClock::now() > deadline) return STATUS_IO_TIMEOUT;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return status.load();
}

std::optional<sockaddr_storage> parse_socket_address(const std::string& text, uint16_t port) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (getaddrinfo(text.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return std::nullopt;
  sockaddr_storage s{};
  std::memcpy(&s, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  if (s.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&s)->sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6*>(&s)->sin6_port = htons(port);
  }
  return s;
}

uint32_t socket_address_length(const sockaddr_storage& address) {
  return address.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

const sockaddr* as_sockaddr(const sockaddr_storage& address) { return reinterpret_cast<const sockaddr*>(&address); }

Connector* connect_qp(Adapter& adapter, Qp& qp, const sockaddr_storage& source, const sockaddr_storage& destination,
                      const CmConnectParams& params, std::string& error) {
  Connector* connector = nullptr;
  NTSTATUS s = STATUS_PENDING;
  for (int attempt = 0;; ++attempt) {
    s = adapter.NdkCreateConnector(nullptr, nullptr, &connector);
    if (s != STATUS_SUCCESS) {
      error = std::string("NdkCreateConnector: ") + NdkStatusName(s);
      return nullptr;
    }
    Request connected;
    s = connected.wait(
        connector->NdkConnect(&qp, as_sockaddr(source), socket_address_length(source), as_sockaddr(destination),
                              socket_address_length(destination), params.inbound_read_limit, params.outbound_read_limit,
                              params.private_data.data(), static_cast<uint32_t>(params.private_data.size()),
                              &Request::complete, &connected),
        params.timeout);
    if (s == STATUS_SUCCESS) break;
    // A connector serves one attempt (ndkpi.md §9.7): a retry needs a new one.
    connector->NdkCloseConnector(nullptr, nullptr);
    connector = nullptr;
    if (s != STATUS_CONNECTION_REFUSED || attempt >= params.refused_retries) {
      error = std::string("connect: ") + NdkStatusName(s);
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  Request completed;
  s = completed.wait(
      connector->NdkCompleteConnect(params.on_disconnect, params.disconnect_context, &Request::complete, &completed),
      params.timeout);
  if (s != STATUS_SUCCESS) {
    error = std::string("complete connect: ") + NdkStatusName(s);
    connector->NdkCloseConnector(nullptr, nullptr);
    return nullptr;
  }
  return connector;
}

NTSTATUS accept_qp(Connector& connector, Qp& qp, const CmConnectParams& params) {
  Request accepted;
  const NTSTATUS s =
      accepted.wait(connector.NdkAccept(&qp, params.inbound_read_limit, params.outbound_read_limit,
                                        params.private_data.data(), static_cast<uint32_t>(params.private_data.size()),
                                        params.on_disconnect, params.disconnect_context, &Request::complete, &accepted),
                    params.timeout);
  // A timed-out accept is still pending, and its completion writes `accepted`: the close cancels it (ndkpi.md
  // §10.3: the cancellation completes before the close does) while `accepted` still exists. A peer that sends the
  // REQ and never the RTU keeps the REP retransmitted for longer than any step's timeout.
  if (s != STATUS_SUCCESS) connector.NdkCloseConnector(nullptr, nullptr);
  return s;
}

NTSTATUS disconnect_and_close(Connector* connector, std::chrono::milliseconds timeout) {
  if (connector == nullptr) return STATUS_SUCCESS;
  Request disconnected;
  const NTSTATUS s = disconnected.wait(connector->NdkDisconnect(&Request::complete, &disconnected), timeout);
  connector->NdkCloseConnector(nullptr, nullptr);
  return s;
}

void close_connection_resources(Qp* qp, Mr* mr, Pd* pd, Cq* send_cq, Cq* recv_cq) {
  if (qp != nullptr) qp->NdkCloseQp(nullptr, nullptr);  // flushes whatever is still posted
  if (mr != nullptr) {
    mr->NdkDeregisterMr(nullptr, nullptr);
    mr->NdkCloseMr(nullptr, nullptr);
  }
  if (pd != nullptr) pd->NdkClosePd(nullptr, nullptr);
  if (send_cq != nullptr) send_cq->NdkCloseCq(nullptr, nullptr);
  if (recv_cq != nullptr && recv_cq != send_cq) recv_cq->NdkCloseCq(nullptr, nullptr);
}

std::unique_ptr<CmListener> CmListener::listen(Adapter& adapter, const sockaddr_storage& address, std::string& error) {
  std::unique_ptr<CmListener> l(new CmListener());
  NTSTATUS s = adapter.NdkCreateListener(&CmListener::on_connect, l.get(), nullptr, nullptr, &l->listener_);
  if (s == STATUS_SUCCESS)
    s = l->listener_->NdkListen(as_sockaddr(address), socket_address_length(address), nullptr, nullptr);
  if (s != STATUS_SUCCESS) {
    error = std::string("listen: ") + NdkStatusName(s);
    return nullptr;  // the destructor closes the listener
  }
  return l;
}

CmListener::~CmListener() {
  std::deque<Connector*> queued;
  {
    const std::lock_guard lock(mutex_);
    closing_ = true;
    queued.swap(incoming_);
  }
  for (Connector* c : queued) c->NdkCloseConnector(nullptr, nullptr);  // rejects the request
  // With a null completion the close waits for the connectors this listener handed out to close (ndkpi.md §10.4)
  // and for a connect event being delivered; none runs after it returns.
  if (listener_ != nullptr) listener_->NdkCloseListener(nullptr, nullptr);
}

void CmListener::on_connect(void* context, Connector* connector) {
  auto& l = *static_cast<CmListener*>(context);
  const std::lock_guard lock(l.mutex_);
  if (l.closing_) {
    // On the notifier: never wait here, the close completes on its own.
    (void)connector->NdkCloseConnector([](void*) {}, nullptr);
    return;
  }
  // At most the listener's backlog (api/connection.h kListenBacklog): a connector waiting here holds a place in it
  // until it is accepted or closed, and REQs beyond it are refused.
  l.incoming_.push_back(connector);
}

Connector* CmListener::next(CmClock::time_point deadline) {
  for (;;) {
    {
      const std::lock_guard lock(mutex_);
      if (!incoming_.empty()) {
        Connector* c = incoming_.front();
        incoming_.pop_front();
        return c;
      }
    }
    if (CmClock::now() > deadline) return nullptr;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace uroce::apps
