// The NVMe side of uroce-nvmf-target, free of any transport: subsystems and their namespaces, controllers made by
// Fabrics Connect, and every command a queue receives, planned (what data must move, and which way) and then
// executed. The RDMA binding (apps/nvmf/rdma_queue.h) moves the bytes; nothing here knows about QPs, so the whole
// command path is testable and fuzzable without DPDK.
//
// Facts and layouts: ../shared/ref/cm-nvmf-dcqcn.md §2 (NVMe base 1.3/2.0, NVMe-oF 1.1, and Linux's nvmet as the
// model: include/linux/nvme.h, drivers/nvme/target/{admin-cmd,fabrics-cmd,discovery,core}.c).
//
// Threading: a target, its controllers and queues are used from one thread at a time (the transport's poller);
// nothing here locks, allocates per I/O, or blocks. Storage is asynchronous: execute() hands Read, Write, Flush,
// Write Zeroes and Dataset Management to the namespace's backend and may answer `pending`; NvmfTarget::poll()
// collects the backends' completions and NvmfQueue::reap() hands out the finished commands.
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
  bool pending = false;      // a backend runs it: NvmfQueue::reap() gives the result later, under execute()'s tag
};

// A command whose backend I/O finished: the tag execute() was given, and the response.
struct CompletedCommand {
  uint32_t tag = 0;
  CommandResult result;
};

// The storage behind a namespace, asynchronous: submit() starts a request without blocking, and poll() reports
// the requests that finished. Offsets and lengths are in bytes, always within size() and multiples of the block
// size (the controller checks before it calls). A result is 0 or a negative errno (-EIO, -ENOSPC, ...), which
// the controller turns into the NVMe status the specification names (Unrecovered Read Error, Write Fault, ...).
enum class BackendOp : uint8_t {
  kRead,
  kWrite,
  kWriteZeroes,  // the range reads as zeroes afterwards
  kDeallocate,   // Dataset Management deallocate: the range reads as zeroes afterwards (DLFEAT says so)
  kFlush,        // every write completed before this request was submitted is durable once it completes
};
struct BackendRequest {
  BackendOp op = BackendOp::kRead;
  bool fua = false;  // kWrite: durable once it completes (Force Unit Access)
  uint64_t offset = 0;
  uint64_t length = 0;
  uint8_t* data = nullptr;  // kRead, kWrite: `length` bytes, which stay valid until the request completes
  void* context = nullptr;  // handed back with the completion
};
struct BackendCompletion {
  void* context = nullptr;
  int result = 0;  // 0 or a negative errno
};
inline constexpr int kBackendPending = 1;  // submit(): poll() reports the request later

class Backend {
 public:
  virtual ~Backend() = default;
  [[nodiscard]] virtual uint64_t size() const = 0;
  // Starts `request`: kBackendPending if poll() will report it, else its result now (0 or a negative errno).
  [[nodiscard]] virtual int submit(const BackendRequest& request) = 0;
  // Up to out.size() completions of pending requests; never blocks. Returns how many.
  [[nodiscard]] virtual std::size_t poll(std::span<BackendCompletion> out) = 0;
  // What it is, for logs: "RAM", "file /srv/ns1 through io_uring", ...
  [[nodiscard]] virtual std::string describe() const = 0;
};
// Memory of `size` bytes, zeroed; every request completes within submit().
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
  // The transport's: queues (connections) held at once over every controller, and how long a queue may wait for
  // its Fabrics Connect. Each queue holds a QP, its receives and a 1 KiB Connect area per command slot from its accept
  // on, whether or not a controller ever comes; its MDTS-sized data buffers only once its Connect succeeded.
  uint16_t max_queues = 256;
  // Of those, the most one host address may hold (closing ones included): a host cannot take every queue and lock
  // the others out (a REQ beyond is answered NO_RSC). Two controllers' worth of the default max_io_queues.
  uint16_t max_queues_per_host = 130;
  uint32_t connect_timeout_ms = 10000;
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
struct NamespaceState;
struct SubsystemState;
struct IoCommand;
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

  // Collects the backends' completions and hands each finished command to its queue (NvmfQueue::reap()). Never
  // blocks; returns how many backend requests finished.
  std::size_t poll();

  [[nodiscard]] const TargetLimits& limits() const noexcept { return config_.limits; }
  [[nodiscard]] const TargetCounters& counters() const noexcept { return counters_; }
  // Controllers held: the live ones, and those torn down whose queues have not all closed yet (each is freed with
  // its last queue).
  [[nodiscard]] std::size_t controller_count() const noexcept { return controllers_.size(); }

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
  // Backend I/O of one command (io.cc): taken from a pool that grows to the most commands ever in flight.
  [[nodiscard]] detail::IoCommand& start_io(NvmfQueue& queue, uint32_t tag, detail::NamespaceState* ns, BackendOp op,
                                            uint32_t data_length);
  void submit_io(detail::IoCommand& command, Backend& backend, const BackendRequest& request);
  [[nodiscard]] CommandResult end_submission(detail::IoCommand& command);  // pending, or the result at once
  void io_part_done(detail::IoCommand& command, int result);
  [[nodiscard]] CommandResult io_result(const detail::IoCommand& command) const;

  TargetConfig config_;
  TargetCounters counters_;
  std::vector<std::unique_ptr<detail::SubsystemState>> subsystems_;  // [0]: the discovery subsystem
  std::vector<std::unique_ptr<Controller>> controllers_;
  uint16_t next_cntlid_ = 1;
  uint64_t genctr_ = 1;               // discovery log generation
  std::optional<uint64_t> start_ms_;  // the first clock reading (SMART power-on hours)
  std::vector<Backend*> backends_;    // each namespace's, once
  std::vector<std::unique_ptr<detail::IoCommand>> io_commands_;
  std::vector<detail::IoCommand*> free_io_commands_;
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
  // put it; its size is at least plan.length): runs the command. When the result is `pending`, a backend holds
  // `data` until reap() returns the command under `tag`.
  [[nodiscard]] CommandResult execute(std::span<const uint8_t, kSqeSize> sqe, std::span<uint8_t> data, uint64_t now_ms,
                                      uint32_t tag = 0);
  // Commands whose backend I/O finished since the last call (after NvmfTarget::poll()), up to out.size().
  [[nodiscard]] std::size_t reap(std::span<CompletedCommand> out);
  // Commands a backend still runs. Their data buffers must stay, so the transport closes the queue only at 0.
  [[nodiscard]] uint32_t in_flight() const noexcept { return in_flight_; }
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
  uint32_t in_flight_ = 0;
  std::vector<CompletedCommand> completed_;  // backend I/O finished, not reaped yet
  std::size_t reaped_ = 0;                   // completed_[0, reaped_) were handed out
};

// Helpers the transport and the tests share.
[[nodiscard]] Sgl parse_sgl(std::span<const uint8_t, 16> descriptor);
[[nodiscard]] uint16_t command_id(std::span<const uint8_t, kSqeSize> sqe);
// The 16-byte CQE.
[[nodiscard]] std::array<uint8_t, kCqeSize> make_cqe(const CommandResult& result, uint16_t sq_head, uint16_t qid,
                                                     uint16_t command_id);

}  // namespace uroce::nvmf
