// The NVMe-oF RDMA transport binding (NVMe-oF 1.1 §7.3; Linux's drivers/nvme/target/rdma.c is the model) on the
// NDK API: queues arrive as RDMA CM connections whose private data names the queue and its sizes; each command
// capsule lands in a posted receive, its data moves by RDMA READ (host to controller, keyed SGL), in the capsule
// (in-capsule data), or by RDMA WRITE (controller to host), and the 16-byte response goes back as a SEND, or as a
// SEND with Invalidate of the host's key when its SGL asked for it (sub-type 0xF).
//
// Facts: ../shared/ref/cm-nvmf-dcqcn.md §2.2-2.3. Everything runs on the thread that calls poll(); the notifier
// only queues incoming connections (CmListener) and disconnect events.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include <sys/socket.h>

#include "api/ndk.h"
#include "apps/common/cm_connection.h"
#include "apps/nvmf/nvme/nvmf_target.h"

namespace uroce::nvmf {

// The RDMA CM private data of NVMe-oF (include/linux/nvme-rdma.h): the host's request, 32 bytes little-endian.
struct RdmaCmRequest {
  uint16_t recfmt = 0;
  uint16_t qid = 0;
  uint16_t hrqsize = 0;  // the host's receive queue: responses it can take
  uint16_t hsqsize = 0;  // the host's send queue, 0's based: commands it may have outstanding
  uint16_t cntlid = 0;
};
inline constexpr std::size_t kRdmaCmPrivateDataSize = 32;
// NVMe RDMA reject codes (struct nvme_rdma_cm_rej's sts).
enum class RdmaCmReject : uint16_t {
  kInvalidLength = 1,
  kInvalidRecfmt = 2,
  kInvalidQid = 3,
  kInvalidHsqsize = 4,
  kInvalidHrqsize = 5,
  kNoResources = 6,
  kInvalidIrd = 7,
};
// Parses and checks a request (its private data, and the responder resources the host offers in the REQ, which
// bound our RDMA READs of its data) against the target's limits (the admin queue holds at most 32 entries): the
// request, or the reject code to answer with.
[[nodiscard]] std::variant<RdmaCmRequest, RdmaCmReject> check_cm_request(std::span<const uint8_t> private_data,
                                                                         uint32_t responder_resources,
                                                                         const TargetLimits& limits);

struct TransportCounters {
  uint64_t queues_accepted = 0;
  uint64_t queues_rejected = 0;   // REQs answered with a REJ (or withdrawn before the accept), each counted once
  uint64_t accept_failed = 0;     // of those, REQs that passed the checks but whose queue could not be set up
  uint64_t queue_limit = 0;       // of those, REQs that came while limits.max_queues queues were held (NO_RSC)
  uint64_t host_queue_limit = 0;  // of those, REQs from a host address holding limits.max_queues_per_host (NO_RSC)
  uint64_t connect_timeouts = 0;  // queues closed for want of a Fabrics Connect within limits.connect_timeout_ms
  uint64_t queues_closed = 0;
  uint64_t capsules = 0;
  uint64_t bad_capsules = 0;       // shorter than an SQE: the queue is closed, as nvmet does
  uint64_t capsules_held = 0;      // came while every command slot was taken: waited for one
  uint64_t capsules_dropped = 0;   // came while the target was stopping, or the queue closing: no command started
  uint64_t buffers_abandoned = 0;  // queues whose buffers a backend still held when the target's stop timed out
  uint64_t rdma_reads = 0;
  uint64_t rdma_writes = 0;
  uint64_t send_with_invalidate = 0;
};

class RdmaQueue;

class RdmaTransport {
 public:
  // Listens on every address in `listen` (port included) through `adapter`.
  // Its end waits up to `stop_timeout` for the commands backends still run (their data buffers are the queues').
  [[nodiscard]] static std::unique_ptr<RdmaTransport> start(
      ndk::Adapter& adapter, NvmfTarget& target, const std::vector<sockaddr_storage>& listen, std::string& error,
      std::chrono::milliseconds stop_timeout = std::chrono::seconds(30));
  // Disconnects every queue. No queue starts a command from then on; commands that backends still run finish
  // first (their responses sent), for stop_timeout at most, and a queue whose buffers a backend holds after that
  // leaves them allocated.
  ~RdmaTransport();
  RdmaTransport(const RdmaTransport&) = delete;
  RdmaTransport& operator=(const RdmaTransport&) = delete;

  // Accepts new queues, runs every queue's completions, drops queues whose host or controller is gone, and ticks
  // the target's keep-alive timers. Returns true if anything happened (the caller may idle otherwise).
  bool poll();

  [[nodiscard]] const TransportCounters& counters() const noexcept { return counters_; }
  [[nodiscard]] std::size_t queue_count() const noexcept { return queues_.size(); }
  [[nodiscard]] std::size_t closing_queue_count() const noexcept { return closing_.size(); }
  // Bytes of buffers the queues hold now, closing ones included: each holds its receives (entries x (64 B + in-capsule
  // data)) and a 1 KiB Connect area per command slot from its accept on, and a data buffer of MDTS per slot only
  // once its Fabrics Connect made or joined a controller.
  [[nodiscard]] std::size_t buffer_bytes() const;

 private:
  RdmaTransport(ndk::Adapter& adapter, NvmfTarget& target, uint32_t max_reads, std::chrono::milliseconds stop_timeout);
  void accept(ndk::Connector* connector);
  // Queues held (closing ones included) whose host has the IP address of `peer`.
  [[nodiscard]] std::size_t queues_of_host(const sockaddr_storage& peer) const;
  // Destroys the closing queues whose disconnect settled; returns how many.
  std::size_t reap_closed(std::chrono::steady_clock::time_point now);

  ndk::Adapter& adapter_;
  NvmfTarget& target_;
  uint32_t max_reads_;  // RDMA READs a QP of this adapter may have outstanding (its MaxOutboundReadLimit)
  std::chrono::milliseconds stop_timeout_;
  std::vector<std::unique_ptr<apps::CmListener>> listeners_;
  std::vector<std::unique_ptr<RdmaQueue>> queues_;
  std::vector<std::unique_ptr<RdmaQueue>> closing_;  // disconnecting: no longer polled, destroyed once settled
  TransportCounters counters_;
  std::chrono::steady_clock::time_point last_tick_{};
  uint16_t next_engine_ = 0;
};

}  // namespace uroce::nvmf
