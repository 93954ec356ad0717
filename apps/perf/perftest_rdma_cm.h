// perftest's exchange over RDMA (its -R, which implies -z): a connection of its own, made through the connection
// manager on the test's port, over which every exchange step is one signalled SEND of exactly the step's bytes,
// received into the single receive each side keeps posted. The client sends first in every step and the server
// answers, so one posted receive is always enough. perftest's receive buffer is its struct pingpong_dest
// (56 bytes): no step may be larger.
//
// perftest's order (perftest_communication.c, establish_connection; bookworm's 4.5-0.17, protocol "6.06"): the
// client posts its receive, connects and waits for the connection to be established; the server posts its
// receive and accepts. The test's own QPs are connected through the CM afterwards (Role, perf_role.h).
#pragma once

#include <memory>
#include <string>

#include <sys/socket.h>

#include "api/ndk.h"
#include "apps/common/cm_connection.h"
#include "apps/perf/perftest_exchange.h"

namespace uroce::apps::perf {

class RdmaCmExchange final : public ExchangeTransport {
 public:
  // The client's: connects from `source` to the server's exchange port, retrying a refused connect until
  // `timeout` (perftest's server may still be starting; it listens before it answers anything).
  [[nodiscard]] static std::unique_ptr<RdmaCmExchange> connect(ndk::Adapter& adapter, const sockaddr_storage& source,
                                                               const sockaddr_storage& server,
                                                               std::chrono::milliseconds timeout, std::string& error);
  // The server's: accepts the first request that reaches `listener` by `deadline`.
  [[nodiscard]] static std::unique_ptr<RdmaCmExchange> accept(ndk::Adapter& adapter, CmListener& listener,
                                                              CmClock::time_point deadline,
                                                              std::chrono::milliseconds timeout, std::string& error);
  ~RdmaCmExchange() override;  // disconnects (waiting at most the step timeout) and closes everything
  RdmaCmExchange(const RdmaCmExchange&) = delete;
  RdmaCmExchange& operator=(const RdmaCmExchange&) = delete;

  bool send(const void* data, std::size_t n) override;
  bool receive(void* data, std::size_t n, Clock::time_point deadline) override;
  [[nodiscard]] bool binary_keys() const override { return true; }

 private:
  static constexpr uint32_t kMessageBytes = kBinaryKeySize;  // perftest's receive buffer

  RdmaCmExchange(ndk::Adapter& adapter, std::chrono::milliseconds timeout) : adapter_(adapter), timeout_(timeout) {}
  std::string open();  // the QP, its CQs and buffers, and the first receive
  bool post_receive();

  ndk::Adapter& adapter_;
  std::chrono::milliseconds timeout_;
  uint8_t buffers_[2 * kMessageBytes] = {};  // what we send, then what we receive
  ndk::Cq* send_cq_ = nullptr;
  ndk::Cq* recv_cq_ = nullptr;
  ndk::Pd* pd_ = nullptr;
  ndk::Mr* mr_ = nullptr;
  ndk::Qp* qp_ = nullptr;
  ndk::Connector* connector_ = nullptr;
};

}  // namespace uroce::apps::perf
