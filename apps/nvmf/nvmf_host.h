// The host side of NVMe over Fabrics RDMA on the NDK API, for uroce-nvmf-perf: queues as RC connections made
// through the connection manager with NVMe-oF's private data (include/linux/nvme-rdma.h: recfmt, qid, hrqsize,
// hsqsize, cntlid), 64-byte command capsules sent inline, a 16-byte receive per command it may have outstanding,
// and data in its own registered memory, which the target reaches through keyed SGLs (type 0x40: the host's
// address and R_Key; the target RDMA READs what the host writes and RDMA WRITEs what it reads).
//
// The controller comes up as Linux's nvme-rdma host brings it up (../shared/ref/cm-nvmf-dcqcn.md §2.5): the admin
// queue's Fabrics Connect, Property Get CAP, Property Set CC.EN, Property Get CSTS until RDY, Identify Controller
// and Namespace, Set Features Number of Queues, then each I/O queue's connection and Connect; at the end CC.SHN
// and CSTS.SHST, then the queues disconnect.
//
// One thread uses a controller and its queues; the waits poll (control path).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <sys/socket.h>

#include "api/ndk.h"

namespace uroce::nvmf {

struct HostCompletion {
  uint16_t cid = 0;
  uint16_t status = 0;  // the CQE status field without the phase bit (SCT << 8 | SC, DNR at bit 14)
  uint32_t dw0 = 0;
  uint32_t dw1 = 0;
};

using Sqe = std::array<uint8_t, 64>;

// SQEs as the Linux host builds them: PSDT 01b, a keyed data block (0x40) for data or the null keyed SGL.
[[nodiscard]] Sqe host_sqe(uint8_t opcode, uint16_t cid, uint32_t nsid = 0);
void set_keyed_sgl(Sqe& sqe, uint64_t address, uint32_t length, uint32_t key);
void set_cdw(Sqe& sqe, unsigned n, uint32_t value);

struct HostQueueOptions {
  uint16_t qid = 0;
  uint16_t entries = 32;  // commands outstanding at once (hsqsize + 1; the admin queue takes at most 32)
  uint16_t cntlid = 0xFFFF;
  std::size_t data_bytes = 0;  // registered memory for the queue's commands' data (besides a 4 KiB scratch)
  uint32_t read_limit = 16;    // RDMA READs the target may have outstanding from this memory (our IRD)
  uint16_t engine = 0;
  sockaddr_storage source{};
  sockaddr_storage target{};
  std::chrono::milliseconds timeout{std::chrono::seconds(10)};
};

class HostQueue {
 public:
  // The connected queue (its receives posted before the request), or nothing with `error` saying why.
  [[nodiscard]] static std::unique_ptr<HostQueue> connect(ndk::Adapter& adapter, const HostQueueOptions& options,
                                                          std::string& error);
  ~HostQueue();  // disconnects and closes
  HostQueue(const HostQueue&) = delete;
  HostQueue& operator=(const HostQueue&) = delete;

  // Sends a command capsule. False: the QP refused it (the queue has failed).
  [[nodiscard]] bool submit(const Sqe& sqe);
  // Responses that arrived, at most out.size(); their receives are posted again.
  [[nodiscard]] std::size_t poll(std::span<HostCompletion> out);
  // Sends `sqe` and waits for its response (admin and Connect commands): nothing on a timeout or failure.
  [[nodiscard]] std::optional<HostCompletion> run(const Sqe& sqe, std::chrono::milliseconds timeout);

  [[nodiscard]] bool failed() const { return failed_ || peer_gone_.load(std::memory_order_relaxed); }
  [[nodiscard]] uint16_t qid() const { return options_.qid; }
  [[nodiscard]] uint16_t entries() const { return options_.entries; }
  // The 4 KiB scratch area (Connect data, Identify) and the data area, with their addresses for SGLs.
  [[nodiscard]] std::span<uint8_t> scratch() { return {scratch_, 4096}; }
  [[nodiscard]] std::span<uint8_t> data() { return {data_, options_.data_bytes}; }
  [[nodiscard]] uint64_t address_of(const uint8_t* p) const { return reinterpret_cast<uint64_t>(p); }
  [[nodiscard]] uint32_t remote_key() const;

 private:
  explicit HostQueue(ndk::Adapter& adapter, const HostQueueOptions& options) : adapter_(adapter), options_(options) {}
  std::string open();
  bool post_receive(uint32_t i);
  static void on_disconnect(void* context) {
    static_cast<HostQueue*>(context)->peer_gone_.store(true, std::memory_order_relaxed);
  }

  ndk::Adapter& adapter_;
  HostQueueOptions options_;
  std::unique_ptr<uint8_t, decltype(&std::free)> memory_{nullptr, &std::free};
  uint8_t* receives_ = nullptr;  // entries x 16 bytes
  uint8_t* scratch_ = nullptr;
  uint8_t* data_ = nullptr;
  ndk::Cq* recv_cq_ = nullptr;
  ndk::Cq* send_cq_ = nullptr;
  ndk::Pd* pd_ = nullptr;
  ndk::Mr* mr_ = nullptr;
  ndk::Qp* qp_ = nullptr;
  ndk::Connector* connector_ = nullptr;
  bool failed_ = false;
  std::atomic<bool> peer_gone_{false};  // set by the notifier
};

struct HostControllerOptions {
  sockaddr_storage source{};
  sockaddr_storage target{};  // address and port (4420)
  std::string subnqn;
  std::string hostnqn = "nqn.2014-08.org.nvmexpress:uuid:75726f63-652d-6e76-6d66-2d7065726600";
  uint32_t nsid = 1;
  uint32_t kato_ms = 0;  // 0: no keep-alive
  uint16_t io_queues = 1;
  uint16_t io_entries = 128;
  std::size_t io_data_bytes = 0;
  uint32_t read_limit = 16;
  std::chrono::milliseconds timeout{std::chrono::seconds(10)};
};

class HostController {
 public:
  [[nodiscard]] static std::unique_ptr<HostController> connect(ndk::Adapter& adapter,
                                                               const HostControllerOptions& options,
                                                               std::string& error);
  ~HostController();  // shutdown (CC.SHN), then the I/O queues and the admin queue disconnect
  HostController(const HostController&) = delete;
  HostController& operator=(const HostController&) = delete;

  [[nodiscard]] std::vector<std::unique_ptr<HostQueue>>& io_queues() { return io_; }
  uint16_t cntlid = 0;
  uint32_t block_size = 512;
  uint64_t blocks = 0;             // the namespace's size
  uint64_t max_transfer = 0;       // bytes per command (MDTS), 0: no limit
  uint16_t max_queue_entries = 0;  // CAP.MQES + 1
  std::string model;

 private:
  HostController(ndk::Adapter& adapter, const HostControllerOptions& options) : adapter_(adapter), options_(options) {}
  std::string bring_up();
  std::optional<HostCompletion> admin(Sqe sqe, std::string& error, const char* what);
  std::string fabrics_connect(HostQueue& queue, uint16_t cntlid_in, uint16_t& cntlid_out);

  ndk::Adapter& adapter_;
  HostControllerOptions options_;
  std::unique_ptr<HostQueue> admin_;
  std::vector<std::unique_ptr<HostQueue>> io_;
  uint16_t next_cid_ = 1;
};

// "SCT 0x2 SC 0x81 (Unrecovered Read Error)"-style text for a status field.
[[nodiscard]] std::string status_text(uint16_t status);

}  // namespace uroce::nvmf
