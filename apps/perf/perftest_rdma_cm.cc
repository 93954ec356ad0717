#include "apps/perf/perftest_rdma_cm.h"

#include <cstring>

namespace uroce::apps::perf {

using namespace uroce::ndk;

std::string RdmaCmExchange::open() {
  NTSTATUS s = adapter_.NdkCreateCq(2, nullptr, nullptr, nullptr, nullptr, nullptr, &send_cq_);
  if (s == STATUS_SUCCESS) s = adapter_.NdkCreateCq(2, nullptr, nullptr, nullptr, nullptr, nullptr, &recv_cq_);
  if (s == STATUS_SUCCESS) s = adapter_.NdkCreatePd(nullptr, nullptr, &pd_);
  if (s == STATUS_SUCCESS) s = pd_->NdkCreateMr(false, nullptr, nullptr, &mr_);
  if (s == STATUS_SUCCESS)
    s = mr_->NdkRegisterMr(buffers_, sizeof buffers_, NDK_MR_FLAG_ALLOW_LOCAL_WRITE, nullptr, nullptr);
  // One receive and one SEND at a time (perftest's tx and rx depth 1 on this QP).
  if (s == STATUS_SUCCESS) s = pd_->NdkCreateQp(recv_cq_, send_cq_, this, 1, 1, 1, 1, 0, nullptr, nullptr, &qp_);
  if (s != STATUS_SUCCESS) return std::string("the exchange's QP: ") + NdkStatusName(s);
  if (!post_receive()) return "the exchange's QP takes no receive";
  return {};
}

bool RdmaCmExchange::post_receive() {
  const NdkSge sge{buffers_ + kMessageBytes, kMessageBytes, mr_->NdkGetLocalTokenFromMr()};
  return qp_->NdkReceive(nullptr, &sge, 1) == STATUS_SUCCESS;
}

std::unique_ptr<RdmaCmExchange> RdmaCmExchange::connect(Adapter& adapter, const sockaddr_storage& source,
                                                        const sockaddr_storage& server,
                                                        std::chrono::milliseconds timeout, std::string& error) {
  std::unique_ptr<RdmaCmExchange> x(new RdmaCmExchange(adapter, timeout));
  if (error = x->open(); !error.empty()) return nullptr;
  // perftest connects this QP with no READs either way and no private data.
  CmConnectParams params;
  params.refused_retries = static_cast<int>(timeout / std::chrono::milliseconds(100));
  params.timeout = timeout;
  x->connector_ = connect_qp(adapter, *x->qp_, source, server, params, error);
  if (x->connector_ == nullptr) {
    error = "the exchange's connection: " + error;
    return nullptr;
  }
  return x;
}

std::unique_ptr<RdmaCmExchange> RdmaCmExchange::accept(Adapter& adapter, CmListener& listener,
                                                       CmClock::time_point deadline, std::chrono::milliseconds timeout,
                                                       std::string& error) {
  std::unique_ptr<RdmaCmExchange> x(new RdmaCmExchange(adapter, timeout));
  if (error = x->open(); !error.empty()) return nullptr;
  Connector* incoming = listener.next(deadline);
  if (incoming == nullptr) {
    error = "no client connected in time";
    return nullptr;
  }
  CmConnectParams params;
  params.timeout = timeout;
  if (const NTSTATUS s = accept_qp(*incoming, *x->qp_, params); s != STATUS_SUCCESS) {  // it closed the connector
    error = std::string("accepting the exchange's connection: ") + NdkStatusName(s);
    return nullptr;
  }
  x->connector_ = incoming;
  return x;
}

RdmaCmExchange::~RdmaCmExchange() {
  // perftest leaves this connection to its process's end, when the kernel's CM disconnects it: a DREQ of ours may
  // cross that one, which the CM answers either way.
  (void)disconnect_and_close(connector_, timeout_);
  close_connection_resources(qp_, mr_, pd_, send_cq_, recv_cq_);
}

bool RdmaCmExchange::send(const void* data, std::size_t n) {
  if (n > kMessageBytes) {  // larger than the peer's receive: a bug of ours, never sent
    failure_ = "a " + std::to_string(n) + "-byte step does not fit perftest's receive";
    return false;
  }
  std::memcpy(buffers_, data, n);
  const NdkSge sge{buffers_, static_cast<uint32_t>(n), mr_->NdkGetLocalTokenFromMr()};
  if (const NTSTATUS s = qp_->NdkSend(nullptr, &sge, 1, 0); s != STATUS_SUCCESS) {
    failure_ = std::string("NdkSend: ") + NdkStatusName(s);
    return false;
  }
  // Signalled, and waited for: the buffer is reused by the next step (as perftest's rdma_write_data).
  const auto deadline = Clock::now() + timeout_;
  NdkResult result;
  while (send_cq_->NdkGetCqResults(&result, 1) == 0) {
    if (Clock::now() > deadline) {
      failure_ = "a SEND did not complete in time";
      return false;
    }
  }
  if (result.Status != STATUS_SUCCESS) failure_ = std::string("a SEND completed with ") + NdkStatusName(result.Status);
  return result.Status == STATUS_SUCCESS;
}

bool RdmaCmExchange::receive(void* data, std::size_t n, Clock::time_point deadline) {
  NdkResult result;
  while (recv_cq_->NdkGetCqResults(&result, 1) == 0) {
    if (Clock::now() > deadline) {
      failure_ = "the peer sent nothing in time";
      return false;
    }
  }
  // A flushed receive (the peer disconnected) or a step of another size: the two sides are not in step.
  if (result.Status != STATUS_SUCCESS) {
    failure_ = std::string("a receive completed with ") + NdkStatusName(result.Status);
    return false;
  }
  if (result.BytesTransferred != n) {
    failure_ = "the peer sent " + std::to_string(result.BytesTransferred) + " bytes where this step has " +
               std::to_string(n) + ": do both sides run the same test?";
    return false;
  }
  std::memcpy(data, buffers_ + kMessageBytes, n);
  return post_receive();  // before our answer goes out, so the peer's next step finds it
}

}  // namespace uroce::apps::perf
