// The NVMe side of uroce-nvmf-target, free of any transport: subsystems and their namespaces, controllers made by
// Fabrics Connect, and every command a queue receives, planned (what data must move, and which way) and then
// executed. The RDMA binding (apps/nvmf/rdma_queue.h) moves the bytes; nothing here knows about QPs, so the whole
// command path is testable and fuzzable without DPDK.
//
// Facts and layouts: ../shared/ref/cm-nvmf-dcqcn.md §2 (NVMe base 1.3/2.0, NVMe-oF 1.1, and Linux's nvmet as the
// model: include/linux/nvme.h, drivers/nvme/target/{admin-cmd,fabrics-cmd,discovery,core}.c).
//
// Threading: a target, its controllers and queues are used from one thread at a time (the transport's poller);
// nothing here locks, allocates per I/O, or blocks, except the backends' own I/O.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace uroce::nvmf {

inline constexpr std::size_t kSqeSize = 64;            // a command capsule's SQE
inline constexpr std::size_t kCqeSize = 16;            // a response capsule: exactly this, the host's receive size
inline constexpr std::size_t kConnectDataSize = 1024;  // Fabrics Connect's data
inline constexpr const char* kDiscoveryNqn = "nqn.2014-08.org.nvmexpress.discovery";

// The CQE status field (CQE bytes 14-15) without the phase bit: bits 7:0 SC, 10:8 SCT, 14 DNR, as Linux's
// NVME_SC_* values (e.g. 0x4002 = Invalid Field, DNR). The transport shifts it left by one into the CQE.
using NvmeStatus = uint16_t;
inline constexpr NvmeStatus kStatusSuccess = 0;

// Where a command's data is, as its SGL descriptor (SQE bytes 24..39) says.
enum class SglKind : uint8_t {
  kNone,       // no data (a null keyed SGL: length 0)
  kKeyed,      // keyed data block (type 0x40 or 0x4F): the host's memory, by address and R_Key
  kInCapsule,  // data block, offset (0x01): in the command capsule, after the SQE
};
struct Sgl {
  SglKind kind = SglKind::kNone;
  uint64_t address = 0;     // keyed: the host's virtual address; in-capsule: the offset after the SQE
  uint32_t length = 0;      // bytes the descriptor covers
  uint32_t key = 0;         // keyed: the R_Key
  bool invalidate = false;  // keyed 0x4F: answer with SEND with Invalidate of `key`
};

enum class DataDirection : uint8_t { kNone, kHostToController, kControllerToHost };

// What a command needs before it can run. A non-success status is the answer, at once, with no data moved.
struct CommandPlan {
  NvmeStatus status = kStatusSuccess;
  DataDirection direction = DataDirection::kNone;
  uint32_t length = 0;  // bytes to move: at most the SGL's length and the queue's data buffer
  Sgl sgl;
};

// A command's response (the transport adds SQ head, SQ ID and the command ID to the CQE).
struct CommandResult {
  NvmeStatus status = kStatusSuccess;
  uint32_t dw0 = 0;
  uint32_t dw1 = 0;
  uint32_t data_length = 0;  // kControllerToHost: bytes of `data` to send before the response
  bool held = false;         // no response now (an Asynchronous Event Request): take_held() gives it back
};

// The storage behind a namespace. Offsets and lengths are in bytes, always within size() and multiples of the
// block size (the controller checks before it calls). False: a media error (Internal Error to the host).
class Backend {
 public:
  virtual ~Backend() = default;
  [[nodiscard]] virtual uint64_t size() const = 0;
  [[nodiscard]] virtual bool read(uint64_t offset, std::span<uint8_t> out) = 0;
  [[nodiscard]] virtual bool write(uint64_t offset, std::span<const uint8_t> in) = 0;
  [[nodiscard]] virtual bool write_zeroes(uint64_t offset, uint64_t length) = 0;
  [[nodiscard]] virtual bool flush() = 0;  // what was written is durable once this returns true
};
// Memory of `size` bytes, zeroed.
[[nodiscard]] std::unique_ptr<Backend> make_ram_backend(uint64_t size);

struct NamespaceConfig {
  uint32_t nsid = 1;
  uint32_t block_size = 512;  // 512 or 4096
  std::shared_ptr<Backend> backend;
};

struct SubsystemConfig {
  std::string nqn;
  std::string serial = "uroce0001";            // ASCII, at most 20
  std::string model = "uroce NVMe-oF target";  // ASCII, at most 40
  std::vector<NamespaceConfig> namespaces;
  std::vector<std::string> allowed_hosts;  // host NQNs; empty: any host
};

struct PortAddress {  // what the discovery log lists for each subsystem
  bool ipv6 = false;
  std::string address;  // "198.18.0.100"
  uint16_t port = 4420;
};

struct TargetLimits {
  uint16_t max_queue_size = 128;     // CAP.MQES + 1; the admin queue takes at most 32
  uint16_t max_io_queues = 64;       // per controller (Set Features Number of Queues answers with at most this)
  uint32_t inline_data_size = 4096;  // in-capsule data an I/O command may carry (ioccsz = (64 + this) / 16)
  uint8_t mdts = 5;                  // max data transfer 2^mdts * 4 KiB (the transport's buffer per command)
  uint16_t keep_alive_granularity_ms = 1000;  // KAS in Identify Controller, in units of 100 ms
};

struct TargetConfig {
  std::vector<SubsystemConfig> subsystems;
  std::vector<PortAddress> ports;
  TargetLimits limits;
};

// Counted events that are the host's fault or the target's decision, for logs and telemetry.
struct TargetCounters {
  uint64_t commands = 0;
  uint64_t errors = 0;  // commands answered with a non-success status
  uint64_t invalid_opcode = 0;
  uint64_t invalid_field = 0;
  uint64_t lba_out_of_range = 0;
  uint64_t connect_rejected = 0;
  uint64_t keep_alive_expired = 0;
  uint64_t controllers_created = 0;
  uint64_t controllers_destroyed = 0;
};

class Controller;
class NvmfQueue;
namespace detail {
struct SubsystemState;
class SqeView;
}  // namespace detail

class NvmfTarget {
 public:
  // Validates the configuration (NQNs, unique NSIDs, sizes): nothing on success, else the first problem.
  [[nodiscard]] static std::optional<std::string> validate(const TargetConfig& config);
  explicit NvmfTarget(TargetConfig config);  // config must validate
  ~NvmfTarget();
  NvmfTarget(const NvmfTarget&) = delete;
  NvmfTarget& operator=(const NvmfTarget&) = delete;

  // A queue for a new transport connection, before its Fabrics Connect. qid and the queue sizes come from the
  // transport's connection request (RDMA CM private data), which the transport has checked against limits():
  // sq_size counts entries (hsqsize + 1), and the Connect's SQSIZE may not ask for more. Queues must be closed
  // before the target is destroyed.
  [[nodiscard]] std::unique_ptr<NvmfQueue> open_queue(uint16_t qid, uint16_t sq_size);

  // Keep-alive enforcement: a controller whose host has sent nothing for its KATO (plus the spec's grace) is
  // torn down; its queues then report dead(). Call every few hundred milliseconds with a monotonic clock.
  void tick(uint64_t now_ms);

  [[nodiscard]] const TargetLimits& limits() const noexcept { return config_.limits; }
  [[nodiscard]] const TargetCounters& counters() const noexcept { return counters_; }

 private:
  friend class NvmfQueue;
  friend class Controller;
  // Fabrics Connect on a queue that has no controller yet (fabrics.cc).
  [[nodiscard]] CommandPlan prepare_unconnected(const NvmfQueue& queue, const detail::SqeView& sqe) const;
  [[nodiscard]] CommandResult connect(NvmfQueue& queue, const detail::SqeView& sqe, std::span<const uint8_t> data,
                                      uint64_t now_ms);
  [[nodiscard]] detail::SubsystemState* find_subsystem(std::string_view nqn) const;
  [[nodiscard]] std::optional<uint16_t> allocate_cntlid() const;
  void destroy_controller(Controller& controller);  // its queues turn dead(); freed when the last one closes
  void detach(NvmfQueue& queue);                    // a connected queue closes
  void count(NvmeStatus status, bool connect);
  void clock(uint64_t now_ms) noexcept;

  TargetConfig config_;
  TargetCounters counters_;
  std::vector<std::unique_ptr<detail::SubsystemState>> subsystems_;  // [0]: the discovery subsystem
  std::vector<std::unique_ptr<Controller>> controllers_;
  uint16_t next_cntlid_ = 1;
  uint64_t genctr_ = 1;               // discovery log generation
  std::optional<uint64_t> start_ms_;  // the first clock reading (SMART power-on hours)
};

// One submission/completion queue pair of a controller, as one transport connection carries it.
class NvmfQueue {
 public:
  ~NvmfQueue();  // the admin queue's going destroys its controller (and so ends its I/O queues)
  NvmfQueue(const NvmfQueue&) = delete;
  NvmfQueue& operator=(const NvmfQueue&) = delete;

  // Step 1: what the command needs. `in_capsule` is the data after the SQE in the capsule (empty on the admin
  // queue). Checks the opcode, the fields, the LBA range and the SGL (type advertised, length enough, in-capsule
  // data within the capsule) before any byte moves.
  [[nodiscard]] CommandPlan plan(std::span<const uint8_t, kSqeSize> sqe, std::size_t in_capsule_length);
  // Step 2, once the plan's host-to-controller data is in `data` (or for controller-to-host, `data` is where to
  // put it; its size is at least plan.length): runs the command.
  [[nodiscard]] CommandResult execute(std::span<const uint8_t, kSqeSize> sqe, std::span<uint8_t> data, uint64_t now_ms);
  // The command IDs of held commands (AERs) to answer with "Aborted - SQ Deletion" when the queue closes.
  [[nodiscard]] std::vector<uint16_t> take_held();

  [[nodiscard]] uint16_t qid() const noexcept { return qid_; }
  [[nodiscard]] bool connected() const noexcept { return controller_ != nullptr; }
  // The controller is gone (keep-alive expiry, its admin queue closed) or the host sent Fabrics Disconnect on this
  // I/O queue: the transport disconnects. A shutdown (CC.SHN) does not end the controller: the host still reads
  // CSTS.SHST on the admin queue, then disconnects.
  [[nodiscard]] bool dead() const noexcept;
  // The SQ head pointer for the next CQE (0's based, wraps at sq_size); the transport reports it in CQE DW2.
  [[nodiscard]] uint16_t sq_head() const noexcept { return sq_head_; }

 private:
  friend class NvmfTarget;
  friend class Controller;
  NvmfQueue(NvmfTarget& target, uint16_t qid, uint16_t sq_size) : target_(target), qid_(qid), sq_size_(sq_size) {}
  // What plan() decides before the SGL, without changing anything (execute() asks again).
  [[nodiscard]] CommandPlan prepare(const detail::SqeView& sqe) const;

  NvmfTarget& target_;
  uint16_t qid_;
  uint16_t sq_size_;  // entries; after Connect, the Connect's SQSIZE + 1
  uint16_t sq_head_ = 0;
  Controller* controller_ = nullptr;  // stays valid while this queue holds its reference (Controller::queue_refs)
  bool disconnected_ = false;         // Fabrics Disconnect on this I/O queue
  std::vector<uint16_t> held_;
};

// Helpers the transport and the tests share.
[[nodiscard]] Sgl parse_sgl(std::span<const uint8_t, 16> descriptor);
[[nodiscard]] uint16_t command_id(std::span<const uint8_t, kSqeSize> sqe);
// The 16-byte CQE.
[[nodiscard]] std::array<uint8_t, kCqeSize> make_cqe(const CommandResult& result, uint16_t sq_head, uint16_t qid,
                                                     uint16_t command_id);

}  // namespace uroce::nvmf
