#include "apps/nvmf/rdma_transport.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <variant>

#include <netinet/in.h>

namespace uroce::nvmf {

using namespace uroce::ndk;
using Clock = std::chrono::steady_clock;

namespace {

uint16_t le16(std::span<const uint8_t> bytes, std::size_t at) {
  return static_cast<uint16_t>(bytes[at] | bytes[at + 1] << 8);
}

uint64_t ms_of(Clock::time_point t) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
}
uint64_t now_ms() { return ms_of(Clock::now()); }

// Request contexts: what a completion is about, and which receive buffer or command slot.
enum class Work : uint64_t { kReceive = 1, kRead = 2, kWrite = 3, kResponse = 4 };
void* context_of(Work work, uint32_t index) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(static_cast<uint64_t>(work) << 32 | index));
}
Work work_of(void* context) { return static_cast<Work>(reinterpret_cast<uintptr_t>(context) >> 32); }
uint32_t index_of(void* context) { return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(context)); }

// How long a closing queue waits for the host's DREP (the CM retries its DREQ meanwhile).
constexpr auto kDisconnectTimeout = std::chrono::seconds(2);

constexpr NvmeStatus kDataTransferError = 0x4004;  // generic status 0x04, DNR: the RDMA READ of its data failed
constexpr NvmeStatus kInternalError = 0x0006;      // generic status 0x06 (NVME_SC_INTERNAL)

CommandResult failed_with(NvmeStatus status) {
  CommandResult r;
  r.status = status;
  return r;
}

}  // namespace

std::variant<RdmaCmRequest, RdmaCmReject> check_cm_request(std::span<const uint8_t> private_data,
                                                           uint32_t responder_resources, const TargetLimits& limits) {
  if (private_data.size() < kRdmaCmPrivateDataSize) return RdmaCmReject::kInvalidLength;
  RdmaCmRequest r;
  r.recfmt = le16(private_data, 0);
  r.qid = le16(private_data, 2);
  r.hrqsize = le16(private_data, 4);
  r.hsqsize = le16(private_data, 6);
  r.cntlid = le16(private_data, 8);
  if (r.recfmt != 0) return RdmaCmReject::kInvalidRecfmt;
  if (r.qid > limits.max_io_queues) return RdmaCmReject::kInvalidQid;
  // The admin queue holds at most 32 commands (NVME_AQ_DEPTH); an I/O queue at most CAP.MQES + 1.
  const uint32_t max_entries = r.qid == 0 ? 32u : limits.max_queue_size;
  if (r.hsqsize + 1u > max_entries) return RdmaCmReject::kInvalidHsqsize;
  // The host must take a response for every command it may have outstanding (nvmet's check).
  if (r.hrqsize < r.hsqsize + 1u || r.hrqsize > max_entries + 1u) return RdmaCmReject::kInvalidHrqsize;
  // Data from the host comes by our RDMA READs, at most as many at once as its responder resources (the REQ's IRD;
  // the accept clamps our ORD to it). With none, no such command ever runs, the admin queue's Connect among them
  // (its data is always fetched by keyed SGL), and the queue would stall: NVME_RDMA_CM_INVALID_IRD.
  if (responder_resources == 0) return RdmaCmReject::kInvalidIrd;
  return r;
}

// ------------------------------------------------------------------------------------------------ one queue

// A first-in first-out queue of at most `capacity` items, its storage made once: nothing is allocated per command.
template <class T>
class BoundedFifo {
 public:
  void reserve(uint32_t capacity) { items_.resize(capacity); }
  [[nodiscard]] bool empty() const { return count_ == 0; }
  void push(const T& item) {  // the caller keeps to the capacity
    assert(count_ < items_.size());
    items_[(head_ + count_++) % items_.size()] = item;
  }
  T pop() {
    assert(count_ != 0);
    const T item = items_[head_];
    head_ = (head_ + 1) % static_cast<uint32_t>(items_.size());
    --count_;
    return item;
  }

 private:
  std::vector<T> items_;
  uint32_t head_ = 0;
  uint32_t count_ = 0;
};

// One NVMe queue pair on one RC connection: a receive per command the host may have outstanding (posted before
// the accept, as the host may send as soon as it has the REP), and a command slot (SQE copy and data buffer) per
// command in flight, free again once its response SEND completed. Until a Fabrics Connect has made or joined a
// controller, a slot's data buffer is only the Connect's 1 KiB (the one command that moves data then); the MDTS-sized
// buffers come with the controller, so that a peer's CM REQs alone, up to limits.max_queues of them, hold little
// memory (they held 2 x entries x MDTS each, ~32 MiB for 128 entries).
class RdmaQueue {
 public:
  // Sets the queue up and accepts the connection. Only an accepted connection's connector becomes the queue's (it
  // disconnects and closes it); when this fails (nullptr, `error` says why), the connector stays the caller's to
  // reject and close, so that exactly one of them ever closes it.
  static std::unique_ptr<RdmaQueue> create(Adapter& adapter, NvmfTarget& target, Connector* connector,
                                           const RdmaCmRequest& request, uint16_t engine, uint32_t read_limit,
                                           const sockaddr_storage& peer, std::string& error);
  ~RdmaQueue();
  RdmaQueue(const RdmaQueue&) = delete;
  RdmaQueue& operator=(const RdmaQueue&) = delete;

  // `clock_ms`: the transport's clock for this poll (keep-alive), read once per poll rather than per command.
  bool poll(TransportCounters& counters, uint64_t clock_ms);
  // The host disconnected, the connection failed, the controller is gone, or none came in time: the transport
  // closes the queue.
  [[nodiscard]] bool finished() const {
    return peer_gone_.load(std::memory_order_relaxed) || failed_ || connect_expired_ ||
           (queue_->connected() && queue_->dead());
  }
  // True once, when limits.connect_timeout_ms has passed since the accept without a controller (no Fabrics Connect
  // succeeded): the queue is finished from then on. Keep-alive (NVMe base 2.0 §3.9) only starts with a controller,
  // so nothing else ends a queue whose host stays silent, and each holds a QP and its buffers.
  [[nodiscard]] bool expire_unconnected(Clock::time_point now) {
    if (connect_expired_ || queue_->connected() || now < connect_deadline_) return false;
    connect_expired_ = true;
    return true;
  }
  // No backend holds one of its data buffers: it may close.
  [[nodiscard]] bool drained() const { return queue_->in_flight() == 0; }
  // Bytes of buffers the queue holds: receives and Connect areas from the accept on, data buffers once connected.
  [[nodiscard]] std::size_t buffer_bytes() const { return memory_bytes_ + io_memory_bytes_; }
  // Starts no command from now on (the target is stopping): capsules that arrive are dropped, and their receives
  // are not posted again.
  void stop_intake() { intake_stopped_ = true; }
  // A backend still holds the queue's buffers when it must go (the target's stop timed out): they outlive the queue,
  // kept where nothing frees them, rather than be freed under the backend.
  void abandon_buffers();
  // Closing without blocking the poller: begin_close() sends the DREQ (or ends a connection the host already
  // ended) and returns at once; the queue may be destroyed once close_settled() says the DREP came or
  // kDisconnectTimeout passed. Other connections are served meanwhile: a host that went silent (keep-alive
  // expiry) never answers the DREQ, and its reconnect must not wait behind it.
  void begin_close(Clock::time_point now);
  [[nodiscard]] const sockaddr_storage& peer() const { return peer_; }
  [[nodiscard]] bool close_settled(Clock::time_point now) const {
    return disconnected_.done.load(std::memory_order_acquire) || now >= close_deadline_;
  }

 private:
  struct Slot {
    std::array<uint8_t, kSqeSize> sqe{};
    CommandPlan plan;
    uint8_t* data = nullptr;  // the command's data buffer (use_data_buffer), `capacity` bytes under `lkey`
    uint32_t capacity = 0;
    uint32_t lkey = 0;
    bool invalidate = false;  // the SGL asked for SEND with Invalidate of `key`
    uint32_t key = 0;
  };

  explicit RdmaQueue(Adapter& adapter) : adapter_(adapter) {}
  std::string open(uint16_t engine);
  enum class DataBuffers : uint8_t { kReady, kRegistering, kFailed };
  [[nodiscard]] DataBuffers open_data_buffers();
  void answer_held_connect(TransportCounters& counters);
  void use_data_buffer(uint32_t slot);
  bool post_receive(uint32_t buffer);
  uint8_t* receive_buffer(uint32_t i) { return memory_.get() + std::size_t{i} * capsule_size_; }
  void on_capsule(uint32_t buffer, uint32_t length, TransportCounters& counters);
  void start_command(uint32_t buffer, uint32_t length, TransportCounters& counters);
  void run(uint32_t slot, std::span<uint8_t> data, TransportCounters& counters);
  void finish(uint32_t slot, const CommandResult& result, TransportCounters& counters);
  void post_read(uint32_t slot, TransportCounters& counters);
  void respond(uint32_t slot, const CommandResult& result, TransportCounters& counters);
  void fail() { failed_ = true; }
  // A failed queue (its connection broke, or it could not set up its data buffers) starts nothing either: it is
  // about to close, and capsules later in the same poll must not reach a backend.
  [[nodiscard]] bool takes_commands() const { return !intake_stopped_ && !failed_; }
  static void on_disconnect(void* context) {
    static_cast<RdmaQueue*>(context)->peer_gone_.store(true, std::memory_order_relaxed);
  }

  Adapter& adapter_;
  sockaddr_storage peer_{};         // the host's address (RdmaTransport::queues_of_host)
  Connector* connector_ = nullptr;  // set once NdkAccept took the connection: from then on, ours to close
  std::unique_ptr<NvmfQueue> queue_;
  uint32_t entries_ = 0;       // commands the host may have outstanding: receives and slots
  uint32_t capsule_size_ = 0;  // SQE plus in-capsule data (I/O queues)
  uint32_t data_size_ = 0;     // per slot, once connected: the largest transfer (MDTS)
  // Receives, then a Connect area (kConnectDataSize) per slot: registered as mr_ from the accept on.
  std::unique_ptr<uint8_t, decltype(&std::free)> memory_{nullptr, &std::free};
  std::size_t memory_bytes_ = 0;
  std::size_t receive_bytes_ = 0;
  // A data_size_ buffer per slot, registered as data_mr_ once a Connect made or joined a controller.
  std::unique_ptr<uint8_t, decltype(&std::free)> io_memory_{nullptr, &std::free};
  std::size_t io_memory_bytes_ = 0;
  Mr* data_mr_ = nullptr;
  bool data_buffers_ready_ = false;  // io_memory_ allocated and registered: commands use it from now on
  // The registration of io_memory_, when NdkRegisterMr took it off this thread (tens of MiB: milliseconds). The
  // Connect that made or joined the controller waits for it, unanswered: its host sends no command before the answer.
  apps::Request data_registered_;
  struct HeldConnect {
    uint32_t slot = 0;
    CommandResult result;
  };
  std::optional<HeldConnect> held_connect_;
  bool intake_stopped_ = false;
  Cq* recv_cq_ = nullptr;
  Cq* send_cq_ = nullptr;
  Pd* pd_ = nullptr;
  Mr* mr_ = nullptr;
  Qp* qp_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  BoundedFifo<uint32_t> waiting_reads_;  // slots whose RDMA READ waits for the host's responder resources
  struct HeldCapsule {
    uint32_t buffer;
    uint32_t length;
  };
  // Capsules that came while every slot was taken. Their receives stay unposted until a slot frees, so at most
  // `entries_` (the receives) wait, and a host that ignores the SQ head meets RNR NAKs, not lost commands.
  BoundedFifo<HeldCapsule> held_capsules_;
  uint32_t reads_outstanding_ = 0;
  uint32_t read_limit_ = 1;
  apps::Request accepted_;
  apps::Request disconnected_;
  bool closing_ = false;
  Clock::time_point close_deadline_{};
  Clock::time_point connect_deadline_{};
  std::atomic<bool> peer_gone_{false};
  bool failed_ = false;
  bool connect_expired_ = false;
  uint64_t now_ms_ = 0;  // poll()'s clock, for the commands it runs
};

std::unique_ptr<RdmaQueue> RdmaQueue::create(Adapter& adapter, NvmfTarget& target, Connector* connector,
                                             const RdmaCmRequest& request, uint16_t engine, uint32_t read_limit,
                                             const sockaddr_storage& peer, std::string& error) {
  std::unique_ptr<RdmaQueue> q(new RdmaQueue(adapter));
  q->peer_ = peer;
  const TargetLimits& limits = target.limits();
  q->entries_ = request.hsqsize + 1u;
  q->capsule_size_ = static_cast<uint32_t>(kSqeSize) + (request.qid == 0 ? 0 : limits.inline_data_size);
  q->data_size_ = 4096u << limits.mdts;
  q->read_limit_ = read_limit;
  q->queue_ = target.open_queue(request.qid, static_cast<uint16_t>(q->entries_));
  q->connect_deadline_ = Clock::now() + std::chrono::milliseconds(limits.connect_timeout_ms);
  if (error = q->open(engine); !error.empty()) return nullptr;
  // The REP's private data: recfmt 0 and crqsize, the receives we keep posted (struct nvme_rdma_cm_rep).
  std::array<uint8_t, kRdmaCmPrivateDataSize> reply{};
  reply[2] = static_cast<uint8_t>(q->entries_);
  reply[3] = static_cast<uint8_t>(q->entries_ >> 8);
  // We never let the host READ from us; our READs of its data are limited by its responder resources.
  const NTSTATUS s = connector->NdkAccept(q->qp_, 0, q->read_limit_, reply.data(), reply.size(), &on_disconnect,
                                          q.get(), &apps::Request::complete, &q->accepted_);
  if (s != STATUS_PENDING && s != STATUS_SUCCESS) {
    // E.g. STATUS_CONNECTION_ABORTED: the host withdrew its REQ (a REJ, reason timeout) before we answered it.
    error = std::string("NdkAccept: ") + NdkStatusName(s);
    return nullptr;  // `q` never held the connector: its destructor leaves it alone
  }
  q->connector_ = connector;
  if (s == STATUS_SUCCESS) apps::Request::complete(&q->accepted_, s);
  return q;
}

std::string RdmaQueue::open(uint16_t engine) {
  // Twice as many slots as commands: a slot is free again when its response SEND completes, and the host may
  // send the next command as soon as it has the response, before our side has seen the SEND's ACK. Should that
  // lag grow past `entries_` responses, capsules wait for a slot (on_capsule).
  const uint32_t slots = 2 * entries_;
  receive_bytes_ = std::size_t{entries_} * capsule_size_;
  const std::size_t bytes = (receive_bytes_ + std::size_t{slots} * kConnectDataSize + 4095) / 4096 * 4096;
  memory_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  if (!memory_) return "no memory for the queue's buffers";
  memory_bytes_ = bytes;
  slots_.resize(slots);
  held_capsules_.reserve(entries_);
  waiting_reads_.reserve(slots);
  for (uint32_t i = 0; i < slots; ++i) free_slots_.push_back(slots - 1 - i);
  const GroupAffinity affinity = adapter_.UroceEngineAffinity(engine);
  // Per slot at most an RDMA READ or WRITE and the response SEND.
  const uint32_t send_depth = 2 * 2 * entries_ + 2;
  NTSTATUS s = adapter_.NdkCreateCq(entries_, nullptr, nullptr, &affinity, nullptr, nullptr, &recv_cq_);
  if (s == STATUS_SUCCESS)
    s = adapter_.NdkCreateCq(send_depth, nullptr, nullptr, &affinity, nullptr, nullptr, &send_cq_);
  if (s == STATUS_SUCCESS) s = adapter_.NdkCreatePd(nullptr, nullptr, &pd_);
  if (s == STATUS_SUCCESS) s = pd_->NdkCreateMr(false, nullptr, nullptr, &mr_);
  if (s == STATUS_SUCCESS)
    s = mr_->NdkRegisterMr(memory_.get(), bytes, NDK_MR_FLAG_ALLOW_LOCAL_WRITE, nullptr, nullptr);
  if (s == STATUS_SUCCESS)
    s = pd_->NdkCreateQp(recv_cq_, send_cq_, this, entries_, send_depth, 1, 1, kCqeSize, nullptr, nullptr, &qp_);
  if (s != STATUS_SUCCESS) return std::string("the queue's QP and buffers: ") + NdkStatusName(s);
  for (uint32_t i = 0; i < entries_; ++i) {
    if (!post_receive(i)) return "posting the queue's receives failed";
  }
  return {};
}

// Once the queue has a controller: an MDTS-sized data buffer per slot. A command already running keeps the buffer
// it started with (its Slot says which), so the Connect areas stay until the queue goes. The registration of more
// than 1 MiB completes off this thread (the poller serves every other queue meanwhile): kRegistering, and
// answer_held_connect() takes it from there.
RdmaQueue::DataBuffers RdmaQueue::open_data_buffers() {
  const std::size_t bytes = slots_.size() * std::size_t{data_size_};
  io_memory_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  if (!io_memory_) return DataBuffers::kFailed;
  io_memory_bytes_ = bytes;
  NTSTATUS s = pd_->NdkCreateMr(false, nullptr, nullptr, &data_mr_);
  if (s == STATUS_SUCCESS) {
    s = data_mr_->NdkRegisterMr(io_memory_.get(), bytes, NDK_MR_FLAG_ALLOW_LOCAL_WRITE, &apps::Request::complete,
                                &data_registered_);
  }
  if (s == STATUS_PENDING) return DataBuffers::kRegistering;
  data_buffers_ready_ = s == STATUS_SUCCESS;
  return data_buffers_ready_ ? DataBuffers::kReady : DataBuffers::kFailed;
}

// The data buffers' registration finished: the Connect that waited for it is answered, or the queue fails (its
// host then sees it disconnect, as when the buffers could not be had at all).
void RdmaQueue::answer_held_connect(TransportCounters& counters) {
  if (!held_connect_ || !data_registered_.done.load(std::memory_order_acquire)) return;
  const HeldConnect held = *held_connect_;
  held_connect_.reset();
  data_buffers_ready_ = data_registered_.status.load(std::memory_order_relaxed) == STATUS_SUCCESS;
  if (!data_buffers_ready_) {
    fail();
    return;
  }
  finish(held.slot, held.result, counters);
}

// The buffer a command starting in `slot` moves its data through: the slot's Connect area until the queue has its
// data buffers.
void RdmaQueue::use_data_buffer(uint32_t slot) {
  Slot& s = slots_[slot];
  if (data_buffers_ready_) {
    s.data = io_memory_.get() + std::size_t{slot} * data_size_;
    s.capacity = data_size_;
    s.lkey = data_mr_->NdkGetLocalTokenFromMr();
  } else {
    s.data = memory_.get() + receive_bytes_ + std::size_t{slot} * kConnectDataSize;
    s.capacity = kConnectDataSize;
    s.lkey = mr_->NdkGetLocalTokenFromMr();
  }
}

void RdmaQueue::begin_close(Clock::time_point now) {
  if (closing_) return;
  closing_ = true;
  close_deadline_ = now + kDisconnectTimeout;
  // A connection the host already ended disconnects at once; else a DREQ, answered or timed out by the CM.
  if (connector_ == nullptr) return apps::Request::complete(&disconnected_, STATUS_SUCCESS);
  const NTSTATUS s = connector_->NdkDisconnect(&apps::Request::complete, &disconnected_);
  if (s != STATUS_PENDING) apps::Request::complete(&disconnected_, s);
}

namespace {

// Buffers of queues that closed while a backend still held them: reachable, never freed, so that whatever the
// backend still reads or writes lands in memory nobody else was given.
std::mutex g_abandoned_mutex;
std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> g_abandoned;

}  // namespace

void RdmaQueue::abandon_buffers() {
  const std::lock_guard lock(g_abandoned_mutex);
  g_abandoned.push_back(std::move(memory_));
  if (io_memory_) g_abandoned.push_back(std::move(io_memory_));
}

RdmaQueue::~RdmaQueue() {
  begin_close(Clock::now());  // a queue destroyed without begin_close() still sends its DREQ
  // Closing the connector cancels a disconnect still waiting for its DREP; no callback runs after it returns.
  if (connector_ != nullptr) connector_->NdkCloseConnector(nullptr, nullptr);
  apps::close_connection_resources(qp_, mr_, nullptr, nullptr, nullptr);
  apps::close_connection_resources(nullptr, data_mr_, pd_, send_cq_, recv_cq_);
  queue_.reset();  // the admin queue's controller goes with it
}

bool RdmaQueue::post_receive(uint32_t buffer) {
  const NdkSge sge{receive_buffer(buffer), capsule_size_, mr_->NdkGetLocalTokenFromMr()};
  if (qp_->NdkReceive(context_of(Work::kReceive, buffer), &sge, 1) == STATUS_SUCCESS) return true;
  fail();
  return false;
}

bool RdmaQueue::poll(TransportCounters& counters, uint64_t clock_ms) {
  now_ms_ = clock_ms;
  bool busy = held_connect_.has_value();
  answer_held_connect(counters);
  if (accepted_.done.load(std::memory_order_acquire) && accepted_.status.load() != STATUS_SUCCESS) fail();
  std::array<NdkResult, 16> results;
  // Sends first: a finished response frees its slot for the commands below.
  for (uint32_t n; (n = send_cq_->NdkGetCqResults(results.data(), results.size())) != 0;) {
    busy = true;
    for (uint32_t i = 0; i < n; ++i) {
      const NdkResult& r = results[i];
      const uint32_t slot = index_of(r.RequestContext);
      if (r.Status != STATUS_SUCCESS) {
        fail();  // the connection broke (or is being flushed): the transport closes the queue
        continue;
      }
      switch (work_of(r.RequestContext)) {
        case Work::kRead:
          --reads_outstanding_;
          run(slot, std::span(slots_[slot].data, slots_[slot].plan.length), counters);
          while (!waiting_reads_.empty() && reads_outstanding_ < read_limit_) post_read(waiting_reads_.pop(), counters);
          break;
        case Work::kResponse:
          free_slots_.push_back(slot);
          if (!held_capsules_.empty() && takes_commands()) {
            const HeldCapsule held = held_capsules_.pop();
            start_command(held.buffer, held.length, counters);
          }
          break;
        default:
          break;  // WRITEs are silent unless they fail
      }
    }
  }
  for (uint32_t n; (n = recv_cq_->NdkGetCqResults(results.data(), results.size())) != 0;) {
    busy = true;
    for (uint32_t i = 0; i < n; ++i) {
      if (results[i].Status != STATUS_SUCCESS) {
        fail();
        continue;
      }
      on_capsule(index_of(results[i].RequestContext), results[i].BytesTransferred, counters);
    }
  }
  // Commands the backends finished (NvmfTarget::poll() collected them): data and response.
  std::array<CompletedCommand, 16> done;
  for (std::size_t n; (n = queue_->reap(done)) != 0;) {
    busy = true;
    for (std::size_t i = 0; i < n; ++i) finish(done[i].tag, done[i].result, counters);
  }
  return busy;
}

void RdmaQueue::on_capsule(uint32_t buffer, uint32_t length, TransportCounters& counters) {
  ++counters.capsules;
  // A stopping target starts nothing new: a host that kept sending would otherwise keep its commands running (and
  // the queue's buffers in use) for as long as it liked.
  if (!takes_commands()) {
    ++counters.capsules_dropped;
    return;
  }
  // A capsule shorter than an SQE has no command ID to answer: a transport error that ends the queue (nvmet's
  // "Ctrl Fatal Error: capsule size less than 64 bytes"), and with an admin queue its controller. Dropping it alone
  // left the host's command to time out on a queue that went on as if nothing had happened.
  if (length < kSqeSize) {
    ++counters.bad_capsules;
    fail();
    return;
  }
  // Every slot taken: the host has the responses of commands whose SENDs we have not yet seen complete (it may
  // send the next command before its ACK reaches us), or it ignored the SQ head. The command waits for a slot,
  // as nvmet gives it a response allocated on the spot; dropping it would leave the host waiting forever.
  if (free_slots_.empty() || !held_capsules_.empty()) {
    ++counters.capsules_held;
    held_capsules_.push({buffer, length});
    return;
  }
  start_command(buffer, length, counters);
}

// A slot is free: the capsule in receive `buffer` becomes a command, and the receive goes back.
void RdmaQueue::start_command(uint32_t buffer, uint32_t length, TransportCounters& counters) {
  const uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  Slot& s = slots_[slot];
  use_data_buffer(slot);
  const uint8_t* capsule = receive_buffer(buffer);
  std::memcpy(s.sqe.data(), capsule, kSqeSize);
  const Sgl sgl = parse_sgl(std::span<const uint8_t, 16>(capsule + 24, 16));
  s.invalidate = sgl.invalidate;  // sub-type 0xF, whatever the length
  s.key = sgl.key;
  s.plan = queue_->plan(std::span<const uint8_t, kSqeSize>(s.sqe), length - kSqeSize);
  // plan() keeps to MDTS, and before the Connect only the Connect moves data: this holds whenever plan() does.
  if (s.plan.status == kStatusSuccess && s.plan.length > s.capacity) s.plan.status = kInternalError;
  if (s.plan.status != kStatusSuccess) {
    (void)post_receive(buffer);
    respond(slot, failed_with(s.plan.status), counters);
    return;
  }
  if (s.plan.direction == DataDirection::kHostToController && s.plan.sgl.kind == SglKind::kInCapsule) {
    // The data is in this receive buffer: run before the buffer goes back (plan() checked it lies within).
    std::memcpy(s.data, capsule + kSqeSize + s.plan.sgl.address, s.plan.length);
    (void)post_receive(buffer);
    run(slot, std::span(s.data, s.plan.length), counters);
    return;
  }
  (void)post_receive(buffer);
  if (s.plan.direction == DataDirection::kHostToController) {
    if (reads_outstanding_ < read_limit_) {
      post_read(slot, counters);
    } else {
      waiting_reads_.push(slot);
    }
    return;
  }
  run(slot, std::span(s.data, s.capacity), counters);
}

void RdmaQueue::post_read(uint32_t slot, TransportCounters& counters) {
  Slot& s = slots_[slot];
  const NdkSge sge{s.data, s.plan.length, s.lkey};
  const NTSTATUS st = qp_->NdkRead(context_of(Work::kRead, slot), &sge, 1, s.plan.sgl.address, s.plan.sgl.key, 0);
  if (st != STATUS_SUCCESS) {
    respond(slot, failed_with(kDataTransferError), counters);
    return;
  }
  ++reads_outstanding_;
  ++counters.rdma_reads;
}

void RdmaQueue::run(uint32_t slot, std::span<uint8_t> data, TransportCounters& counters) {
  Slot& s = slots_[slot];
  const bool was_connected = queue_->connected();
  const CommandResult result = queue_->execute(std::span<const uint8_t, kSqeSize>(s.sqe), data, now_ms_, slot);
  // The Connect made or joined a controller: the commands from now on get their data buffers. Without them the queue
  // cannot serve its host, which then sees it disconnect after the Connect's answer.
  if (!was_connected && queue_->connected()) {
    switch (open_data_buffers()) {
      case DataBuffers::kReady:
        break;
      case DataBuffers::kRegistering:
        held_connect_ = HeldConnect{slot, result};  // answered once the buffers are registered
        return;
      case DataBuffers::kFailed:
        fail();
        break;
    }
  }
  if (result.held) return;     // an AER: its slot stays taken until an event or the queue's end
  if (result.pending) return;  // a backend runs it: reap() hands it to finish()
  finish(slot, result, counters);
}

void RdmaQueue::finish(uint32_t slot, const CommandResult& result, TransportCounters& counters) {
  Slot& s = slots_[slot];
  if (result.status == kStatusSuccess && s.plan.direction == DataDirection::kControllerToHost &&
      result.data_length != 0) {
    // WRITE then SEND on one QP: the host sees the data before the response (IBTA C9-28, in-order delivery).
    // DEFER: the response's post rings the doorbell for both (ndkpi.md: a failed post submits the chain first).
    const NdkSge sge{s.data, std::min(result.data_length, s.plan.length), s.lkey};
    if (qp_->NdkWrite(context_of(Work::kWrite, slot), &sge, 1, s.plan.sgl.address, s.plan.sgl.key,
                      NDK_OP_FLAG_SILENT_SUCCESS | NDK_OP_FLAG_DEFER) != STATUS_SUCCESS) {
      fail();
      return;
    }
    ++counters.rdma_writes;
  }
  respond(slot, result, counters);
}

void RdmaQueue::respond(uint32_t slot, const CommandResult& result, TransportCounters& counters) {
  Slot& s = slots_[slot];
  std::array<uint8_t, kCqeSize> cqe =
      make_cqe(result, queue_->sq_head(), queue_->qid(), command_id(std::span<const uint8_t, kSqeSize>(s.sqe)));
  // Inline: the CQE is copied at post time, so it needs no buffer of its own.
  const NdkSge sge{cqe.data(), kCqeSize, 0};
  NTSTATUS st;
  if (s.invalidate) {
    st = qp_->NdkSendAndInvalidate(context_of(Work::kResponse, slot), &sge, 1, NDK_OP_FLAG_INLINE, s.key);
    ++counters.send_with_invalidate;
  } else {
    st = qp_->NdkSend(context_of(Work::kResponse, slot), &sge, 1, NDK_OP_FLAG_INLINE);
  }
  if (st != STATUS_SUCCESS) fail();
}

// ---------------------------------------------------------------------------------------------- transport

std::unique_ptr<RdmaTransport> RdmaTransport::start(Adapter& adapter, NvmfTarget& target,
                                                    const std::vector<sockaddr_storage>& listen, std::string& error,
                                                    std::chrono::milliseconds stop_timeout) {
  NdkAdapterInfo info{};
  uint32_t info_size = sizeof info;
  if (const NTSTATUS s = adapter.NdkQueryAdapterInfo(&info, &info_size); s != STATUS_SUCCESS) {
    error = std::string("NdkQueryAdapterInfo: ") + NdkStatusName(s);
    return nullptr;
  }
  std::unique_ptr<RdmaTransport> t(new RdmaTransport(adapter, target, info.MaxOutboundReadLimit, stop_timeout));
  for (const sockaddr_storage& address : listen) {
    std::unique_ptr<apps::CmListener> l = apps::CmListener::listen(adapter, address, error);
    if (!l) return nullptr;
    t->listeners_.push_back(std::move(l));
  }
  return t;
}

RdmaTransport::RdmaTransport(Adapter& adapter, NvmfTarget& target, uint32_t max_reads,
                             std::chrono::milliseconds stop_timeout)
    : adapter_(adapter), target_(target), max_reads_(max_reads), stop_timeout_(stop_timeout) {}

RdmaTransport::~RdmaTransport() {
  // No queue starts another command; those backends still run finish first, their responses still sent, for
  // stop_timeout_ at most. The queues used to keep taking commands here, so a host that kept its queue full kept
  // the drain going to its deadline, and the buffers were then freed under the backend's I/O.
  for (auto& q : queues_) q->stop_intake();
  const auto deadline = Clock::now() + stop_timeout_;
  auto drained = [this] { return std::all_of(queues_.begin(), queues_.end(), [](auto& q) { return q->drained(); }); };
  while (!drained() && Clock::now() < deadline) {
    bool busy = target_.poll() != 0;  // backend completions, to each command's queue
    const uint64_t now = now_ms();
    for (auto& q : queues_) busy |= q->poll(counters_, now);
    if (!busy) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  // Every queue's DREQ goes out at once, and the hosts answer in parallel: one wait of kDisconnectTimeout at
  // most, however many hosts went silent. A queue whose buffers a backend still holds leaves them allocated.
  for (auto& q : queues_) {
    if (!q->drained()) {
      q->abandon_buffers();
      ++counters_.buffers_abandoned;
    }
    q->begin_close(Clock::now());
    closing_.push_back(std::move(q));
  }
  queues_.clear();
  while (!closing_.empty()) {  // ends: a queue's close settles by its deadline at the latest
    if (reap_closed(Clock::now()) == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // every connection ends before the listeners that handed them out
  listeners_.clear();
}

void RdmaTransport::accept(Connector* connector) {
  uint32_t ird = 0, ord = 0, length = 0;
  (void)connector->NdkGetConnectionData(nullptr, nullptr, nullptr, &length);
  std::vector<uint8_t> data(length);
  const NTSTATUS s = connector->NdkGetConnectionData(&ird, &ord, data.data(), &length);
  std::variant<RdmaCmRequest, RdmaCmReject> checked =
      s == STATUS_SUCCESS ? check_cm_request(std::span(data.data(), length), ird, target_.limits())
                          : std::variant<RdmaCmRequest, RdmaCmReject>(RdmaCmReject::kInvalidLength);
  RdmaCmReject reject = RdmaCmReject::kNoResources;
  sockaddr_storage peer{};
  auto peer_length = static_cast<uint32_t>(sizeof peer);
  if (connector->NdkGetPeerAddress(reinterpret_cast<sockaddr*>(&peer), &peer_length) != STATUS_SUCCESS)
    peer = {};  // AF_UNSPEC: one "host" with every other queue whose address was not to be had
  if (!std::holds_alternative<RdmaCmRequest>(checked)) {
    reject = std::get<RdmaCmReject>(checked);
  } else if (queues_.size() + closing_.size() >= target_.limits().max_queues) {
    // Closing queues count too: their QPs and buffers stay until the DREP (or kDisconnectTimeout).
    ++counters_.queue_limit;
  } else if (queues_of_host(peer) >= target_.limits().max_queues_per_host) {
    // One host must not take every queue: its REQs alone (each waits connect_timeout_ms for its Fabrics Connect),
    // or discovery controllers it never ends, would otherwise lock every other host out.
    ++counters_.host_queue_limit;
  } else {
    const RdmaCmRequest& request = std::get<RdmaCmRequest>(checked);
    std::string error;
    const uint16_t engine = static_cast<uint16_t>(next_engine_++ % adapter_.UroceEngineCount());
    // Our READs of the host's data: as many at once as its responder resources (its IRD, not 0) and our QP allow,
    // which is what NdkAccept makes the QP's ORD.
    const uint32_t read_limit = std::min(ird, max_reads_);
    if (std::unique_ptr<RdmaQueue> q =
            RdmaQueue::create(adapter_, target_, connector, request, engine, read_limit, peer, error)) {
      queues_.push_back(std::move(q));
      ++counters_.queues_accepted;
      return;
    }
    ++counters_.accept_failed;  // no memory or QP, or the host withdrew its REQ: rejected below, once
  }
  // struct nvme_rdma_cm_rej: recfmt 0, then the status, little-endian. (A REQ the host withdrew needs no answer:
  // NdkReject then sends nothing.)
  const std::array<uint8_t, 4> rej{0, 0, static_cast<uint8_t>(reject), 0};
  (void)connector->NdkReject(rej.data(), rej.size());
  connector->NdkCloseConnector(nullptr, nullptr);
  ++counters_.queues_rejected;
}

std::size_t RdmaTransport::queues_of_host(const sockaddr_storage& peer) const {
  auto same_host = [&peer](const std::unique_ptr<RdmaQueue>& q) {
    const sockaddr_storage& a = q->peer();
    if (a.ss_family != peer.ss_family) return false;
    if (a.ss_family == AF_INET) {
      return reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr ==
             reinterpret_cast<const sockaddr_in&>(peer).sin_addr.s_addr;
    }
    if (a.ss_family == AF_INET6) {
      return std::memcmp(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr,
                         &reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr, sizeof(in6_addr)) == 0;
    }
    return true;  // neither address known
  };
  return static_cast<std::size_t>(std::count_if(queues_.begin(), queues_.end(), same_host) +
                                  std::count_if(closing_.begin(), closing_.end(), same_host));
}

bool RdmaTransport::poll() {
  bool busy = false;
  for (auto& l : listeners_) {
    while (Connector* c = l->next(Clock::time_point::min())) {
      accept(c);
      busy = true;
    }
  }
  busy |= target_.poll() != 0;  // backend completions, to each command's queue
  const auto now = Clock::now();
  const uint64_t now_in_ms = ms_of(now);
  for (auto& q : queues_) {
    busy |= q->poll(counters_, now_in_ms);
    if (q->expire_unconnected(now)) ++counters_.connect_timeouts;
    // A finished queue that waits for its backends' commands starts no new one: a host whose controller or
    // connection is gone would otherwise keep it (and its buffers) for as long as it kept sending.
    if (q->finished()) q->stop_intake();
  }
  // I/O queues before their admin queue: the admin queue's end destroys the controller. A queue whose commands a
  // backend still runs stays (and is polled) until they finish: their data buffers are its own.
  const auto gone = std::stable_partition(queues_.begin(), queues_.end(),
                                          [](const auto& q) { return !(q->finished() && q->drained()); });
  if (gone != queues_.end()) {
    for (auto it = gone; it != queues_.end(); ++it) {
      (*it)->begin_close(now);
      closing_.push_back(std::move(*it));
    }
    queues_.erase(gone, queues_.end());
    busy = true;
  }
  busy |= reap_closed(now) != 0;
  if (now - last_tick_ > std::chrono::milliseconds(100)) {
    target_.tick(now_in_ms);
    last_tick_ = now;
  }
  return busy;
}

std::size_t RdmaTransport::buffer_bytes() const {
  std::size_t bytes = 0;
  for (const auto* list : {&queues_, &closing_})
    for (const auto& q : *list) bytes += q->buffer_bytes();
  return bytes;
}

std::size_t RdmaTransport::reap_closed(Clock::time_point now) {
  // In the order they began closing, which keeps a controller's I/O queues ahead of its admin queue; the
  // controller is freed with whichever of its queues closes last (NvmfTarget::detach), so any order is safe.
  const auto settled =
      std::stable_partition(closing_.begin(), closing_.end(), [now](const auto& q) { return !q->close_settled(now); });
  const auto n = static_cast<std::size_t>(closing_.end() - settled);
  counters_.queues_closed += n;
  closing_.erase(settled, closing_.end());
  return n;
}

}  // namespace uroce::nvmf
