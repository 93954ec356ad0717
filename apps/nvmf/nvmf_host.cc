#include "apps/nvmf/nvmf_host.h"

#include <cstdio>
#include <cstring>
#include <thread>

#include "apps/common/cm_connection.h"

namespace uroce::nvmf {

using namespace uroce::ndk;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kCqe = 16;
constexpr std::size_t kScratch = 4096;
constexpr uint32_t kInlineCapsule = 64;

void put16(std::span<uint8_t> b, std::size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v);
  b[at + 1] = static_cast<uint8_t>(v >> 8);
}
void put32(std::span<uint8_t> b, std::size_t at, uint32_t v) {
  for (std::size_t i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(std::span<uint8_t> b, std::size_t at, uint64_t v) {
  for (std::size_t i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t get16(std::span<const uint8_t> b, std::size_t at) { return static_cast<uint16_t>(b[at] | b[at + 1] << 8); }
uint32_t get32(std::span<const uint8_t> b, std::size_t at) {
  return static_cast<uint32_t>(get16(b, at)) | static_cast<uint32_t>(get16(b, at + 2)) << 16;
}
uint64_t get64(std::span<const uint8_t> b, std::size_t at) {
  return get32(b, at) | static_cast<uint64_t>(get32(b, at + 4)) << 32;
}

std::string hex(uint32_t v, int width) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%0*x", width, v);
  return text;
}

}  // namespace

Sqe host_sqe(uint8_t opcode, uint16_t cid, uint32_t nsid) {
  Sqe s{};
  s[0] = opcode;
  s[1] = 0x40;  // PSDT 01b: SGLs (NVME_CMD_SGL_METABUF)
  put16(s, 2, cid);
  put32(s, 4, nsid);
  s[39] = 0x40;  // the null keyed SGL
  return s;
}

void set_keyed_sgl(Sqe& sqe, uint64_t address, uint32_t length, uint32_t key) {
  put64(sqe, 24, address);
  put32(sqe, 32, length & 0xFFFFFF);
  put32(sqe, 35, key);  // bytes 35-38, then the type byte
  sqe[39] = 0x40;       // keyed data block, address: no invalidation (the MR lives as long as the queue)
}

void set_cdw(Sqe& sqe, unsigned n, uint32_t value) { put32(sqe, std::size_t{4} * n, value); }

std::string status_text(uint16_t status) {
  const unsigned sct = (status >> 8) & 0x7, sc = status & 0xFF;
  const char* name = "";
  if (sct == 0 && sc == 0x01) name = " (Invalid Opcode)";
  if (sct == 0 && sc == 0x02) name = " (Invalid Field)";
  if (sct == 0 && sc == 0x04) name = " (Data Transfer Error)";
  if (sct == 0 && sc == 0x06) name = " (Internal Error)";
  if (sct == 0 && sc == 0x0B) name = " (Invalid Namespace)";
  if (sct == 0 && sc == 0x80) name = " (LBA Out of Range)";
  if (sct == 0 && sc == 0x81) name = " (Capacity Exceeded)";
  if (sct == 1 && sc == 0x82) name = " (Connect Invalid Parameters)";
  if (sct == 2 && sc == 0x80) name = " (Write Fault)";
  if (sct == 2 && sc == 0x81) name = " (Unrecovered Read Error)";
  return "SCT " + hex(sct, 1) + " SC " + hex(sc, 2) + name + ((status & 0x4000) != 0 ? ", DNR" : "");
}

// ------------------------------------------------------------------------------------------------- HostQueue

std::unique_ptr<HostQueue> HostQueue::connect(Adapter& adapter, const HostQueueOptions& options, std::string& error) {
  std::unique_ptr<HostQueue> q(new HostQueue(adapter, options));
  if (options.entries < 2) return error = "a queue holds at least 2 entries", nullptr;
  if (error = q->open(); !error.empty()) return nullptr;
  // struct nvme_rdma_cm_req: recfmt 0, qid, hrqsize (responses we take), hsqsize (0's based), cntlid.
  std::string private_data(32, '\0');
  auto bytes = std::span(reinterpret_cast<uint8_t*>(private_data.data()), private_data.size());
  put16(bytes, 2, options.qid);
  put16(bytes, 4, options.entries);
  put16(bytes, 6, static_cast<uint16_t>(options.entries - 1));
  put16(bytes, 8, options.qid == 0 ? 0 : options.cntlid);
  apps::CmConnectParams params;
  params.inbound_read_limit = options.read_limit;  // the target READs our write data
  params.outbound_read_limit = 0;                  // we never READ from it
  params.private_data = private_data;
  params.timeout = options.timeout;
  params.refused_retries = static_cast<int>(options.timeout / std::chrono::milliseconds(100));  // a target starting
  params.on_disconnect = &HostQueue::on_disconnect;
  params.disconnect_context = q.get();
  q->connector_ = apps::connect_qp(adapter, *q->qp_, options.source, options.target, params, error);
  if (q->connector_ == nullptr) {
    error = "queue " + std::to_string(options.qid) + ": connecting through the CM: " + error;
    // The target's reject says why (struct nvme_rdma_cm_rej: recfmt, sts).
    return nullptr;
  }
  return q;
}

std::string HostQueue::open() {
  const std::size_t receive_bytes = std::size_t{options_.entries} * kCqe;
  const std::size_t bytes = (receive_bytes + kScratch + options_.data_bytes + 4095) / 4096 * 4096 + 4096;
  memory_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  if (!memory_) return "no memory for the queue's buffers";
  std::memset(memory_.get(), 0, bytes);
  scratch_ = memory_.get();
  data_ = scratch_ + kScratch;  // page aligned
  receives_ = data_ + (options_.data_bytes + 4095) / 4096 * 4096;
  const GroupAffinity affinity = adapter_.UroceEngineAffinity(options_.engine);
  const uint32_t send_depth = 2U * options_.entries + 2;
  NTSTATUS s = adapter_.NdkCreateCq(options_.entries, nullptr, nullptr, &affinity, nullptr, nullptr, &recv_cq_);
  if (s == STATUS_SUCCESS) {
    s = adapter_.NdkCreateCq(send_depth, nullptr, nullptr, &affinity, nullptr, nullptr, &send_cq_);
  }
  if (s == STATUS_SUCCESS) s = adapter_.NdkCreatePd(nullptr, nullptr, &pd_);
  if (s == STATUS_SUCCESS) s = pd_->NdkCreateMr(false, nullptr, nullptr, &mr_);
  if (s == STATUS_SUCCESS) {
    s = mr_->NdkRegisterMr(memory_.get(), bytes, NDK_MR_FLAG_ALLOW_REMOTE_WRITE | NDK_MR_FLAG_ALLOW_REMOTE_READ,
                           nullptr, nullptr);
  }
  if (s == STATUS_SUCCESS) {
    s = pd_->NdkCreateQp(recv_cq_, send_cq_, this, options_.entries, send_depth, 1, 1, kInlineCapsule, nullptr, nullptr,
                         &qp_);
  }
  if (s != STATUS_SUCCESS) return std::string("the queue's QP and buffers: ") + NdkStatusName(s);
  for (uint32_t i = 0; i < options_.entries; ++i) {
    if (!post_receive(i)) return "posting the queue's receives failed";
  }
  return {};
}

HostQueue::~HostQueue() {
  if (connector_ != nullptr) (void)apps::disconnect_and_close(connector_, std::chrono::seconds(2));
  apps::close_connection_resources(qp_, mr_, pd_, send_cq_, recv_cq_);
}

uint32_t HostQueue::remote_key() const { return mr_->NdkGetRemoteTokenFromMr(); }

bool HostQueue::post_receive(uint32_t i) {
  const NdkSge sge{receives_ + std::size_t{i} * kCqe, static_cast<uint32_t>(kCqe), mr_->NdkGetLocalTokenFromMr()};
  if (qp_->NdkReceive(reinterpret_cast<void*>(static_cast<uintptr_t>(i)), &sge, 1) == STATUS_SUCCESS) return true;
  failed_ = true;
  return false;
}

bool HostQueue::submit(const Sqe& sqe) {
  const NdkSge sge{const_cast<uint8_t*>(sqe.data()), kInlineCapsule, 0};
  if (qp_->NdkSend(nullptr, &sge, 1, NDK_OP_FLAG_INLINE) == STATUS_SUCCESS) return true;
  failed_ = true;
  return false;
}

std::size_t HostQueue::poll(std::span<HostCompletion> out) {
  std::array<NdkResult, 32> results;
  // Our SENDs' completions: only failures matter.
  for (uint32_t n; (n = send_cq_->NdkGetCqResults(results.data(), results.size())) != 0;) {
    for (uint32_t i = 0; i < n; ++i) failed_ |= results[i].Status != STATUS_SUCCESS;
  }
  const auto want = static_cast<uint32_t>(std::min<std::size_t>(out.size(), results.size()));
  const uint32_t n = recv_cq_->NdkGetCqResults(results.data(), want);
  std::size_t got = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const NdkResult& r = results[i];
    const auto index = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(r.RequestContext));
    if (r.Status != STATUS_SUCCESS || r.BytesTransferred != kCqe) {
      failed_ = true;  // a flushed receive, or a response that is not a CQE
      continue;
    }
    const std::span<const uint8_t> cqe(receives_ + std::size_t{index} * kCqe, kCqe);
    out[got++] =
        HostCompletion{get16(cqe, 12), static_cast<uint16_t>(get16(cqe, 14) >> 1), get32(cqe, 0), get32(cqe, 4)};
    (void)post_receive(index);
  }
  return got;
}

std::optional<HostCompletion> HostQueue::run(const Sqe& sqe, std::chrono::milliseconds timeout) {
  if (!submit(sqe)) return std::nullopt;
  const uint16_t cid = get16(sqe, 2);
  const auto deadline = Clock::now() + timeout;
  std::array<HostCompletion, 4> done;
  while (!failed() && Clock::now() < deadline) {
    const std::size_t n = poll(done);
    for (std::size_t i = 0; i < n; ++i) {
      if (done[i].cid == cid) return done[i];
    }
    if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return std::nullopt;
}

// -------------------------------------------------------------------------------------------- HostController

std::unique_ptr<HostController> HostController::connect(Adapter& adapter, const HostControllerOptions& options,
                                                        std::string& error) {
  std::unique_ptr<HostController> c(new HostController(adapter, options));
  error = c->bring_up();
  if (!error.empty()) return nullptr;
  return c;
}

std::optional<HostCompletion> HostController::admin(Sqe sqe, std::string& error, const char* what) {
  put16(sqe, 2, next_cid_++);
  std::optional<HostCompletion> c = admin_->run(sqe, options_.timeout);
  if (!c) {
    error = std::string(what) + ": no response (the admin queue failed or timed out)";
  } else if (c->status != 0) {
    error = std::string(what) + ": " + status_text(c->status);
    c.reset();
  }
  return c;
}

// Fabrics Connect (opcode 0x7F, fctype 0x01) on `queue`, its 1024 bytes of data read by the target from the scratch.
std::string HostController::fabrics_connect(HostQueue& queue, uint16_t cntlid_in, uint16_t& cntlid_out) {
  Sqe s = host_sqe(0x7F, 0);
  s[4] = 0x01;
  put16(s, 42, queue.qid());
  put16(s, 44, static_cast<uint16_t>(queue.entries() - 1));  // SQSIZE, 0's based
  put32(s, 48, queue.qid() == 0 ? options_.kato_ms : 0);
  std::span<uint8_t> data = queue.scratch().first(1024);
  std::fill(data.begin(), data.end(), uint8_t{0});
  for (std::size_t i = 0; i < 16; ++i)
    data[i] = static_cast<uint8_t>(options_.hostnqn[options_.hostnqn.size() - 16 + i]);
  put16(data, 16, cntlid_in);
  std::memcpy(data.data() + 256, options_.subnqn.data(), std::min<std::size_t>(options_.subnqn.size(), 255));
  std::memcpy(data.data() + 512, options_.hostnqn.data(), std::min<std::size_t>(options_.hostnqn.size(), 255));
  set_keyed_sgl(s, queue.address_of(data.data()), 1024, queue.remote_key());
  put16(s, 2, next_cid_++);
  const std::optional<HostCompletion> c = queue.run(s, options_.timeout);
  const std::string what = "Fabrics Connect on queue " + std::to_string(queue.qid());
  if (!c) return what + ": no response";
  if (c->status != 0) return what + ": " + status_text(c->status) + " (DW0 " + hex(c->dw0, 8) + ")";
  cntlid_out = static_cast<uint16_t>(c->dw0);
  return {};
}

std::string HostController::bring_up() {
  std::string error;
  if (options_.subnqn.empty() || options_.subnqn.size() > 223) return "the subsystem NQN is 1 to 223 bytes";
  if (options_.hostnqn.size() < 16 || options_.hostnqn.size() > 223) return "the host NQN is 16 to 223 bytes";
  HostQueueOptions aq;
  aq.qid = 0;
  aq.entries = 32;  // NVME_AQ_DEPTH
  aq.source = options_.source;
  aq.target = options_.target;
  aq.timeout = options_.timeout;
  aq.read_limit = options_.read_limit;
  if (!(admin_ = HostQueue::connect(adapter_, aq, error))) return error;
  if (error = fabrics_connect(*admin_, 0xFFFF, cntlid); !error.empty()) return error;

  // nvme_enable_ctrl: CAP, CC.EN, CSTS.RDY.
  Sqe get_cap = host_sqe(0x7F, 0);
  get_cap[4] = 0x04;
  get_cap[40] = 1;  // 8 bytes
  const std::optional<HostCompletion> cap = admin(get_cap, error, "Property Get CAP");
  if (!cap) return error;
  const uint64_t cap_value = cap->dw0 | uint64_t{cap->dw1} << 32;
  max_queue_entries = static_cast<uint16_t>((cap_value & 0xFFFF) + 1);
  const uint64_t ready_timeout_ms = std::max<uint64_t>(((cap_value >> 24) & 0xFF) * 500, 500);
  Sqe set_cc = host_sqe(0x7F, 0);
  set_cc[4] = 0x00;
  put32(set_cc, 44, 0x14);
  put64(set_cc, 48, 0x00460001);  // IOCQES 4, IOSQES 6, EN
  if (!admin(set_cc, error, "Property Set CC.EN")) return error;
  Sqe get_csts = host_sqe(0x7F, 0);
  get_csts[4] = 0x04;
  put32(get_csts, 44, 0x1C);
  const auto ready_deadline = Clock::now() + std::chrono::milliseconds(ready_timeout_ms);
  for (;;) {
    const std::optional<HostCompletion> csts = admin(get_csts, error, "Property Get CSTS");
    if (!csts) return error;
    if ((csts->dw0 & 2) != 0) return "the controller reports a fatal status (CSTS.CFS)";
    if ((csts->dw0 & 1) != 0) break;
    if (Clock::now() > ready_deadline) return "the controller did not become ready (CSTS.RDY) within CAP.TO";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  // Identify Controller and the namespace.
  std::span<uint8_t> scratch = admin_->scratch();
  Sqe id = host_sqe(0x06, 0);
  set_cdw(id, 10, 0x01);
  set_keyed_sgl(id, admin_->address_of(scratch.data()), 4096, admin_->remote_key());
  if (!admin(id, error, "Identify Controller")) return error;
  const uint8_t mdts = scratch[77];
  max_transfer = mdts == 0 ? 0 : uint64_t{4096} << mdts;  // CAP.MPSMIN is 4 KiB on every fabrics target here
  model.assign(reinterpret_cast<const char*>(scratch.data() + 24), 40);
  model.erase(model.find_last_not_of(' ') + 1);
  if (get16(scratch, 78) != cntlid) return "Identify Controller names another controller ID than Connect gave";
  Sqe id_ns = host_sqe(0x06, 0, options_.nsid);
  set_cdw(id_ns, 10, 0x00);
  set_keyed_sgl(id_ns, admin_->address_of(scratch.data()), 4096, admin_->remote_key());
  if (!admin(id_ns, error, "Identify Namespace")) return error;
  blocks = get64(scratch, 0);
  const unsigned format = scratch[26] & 0xF;
  const unsigned ds = scratch[128 + 4 * format + 2];
  if (blocks == 0) return "namespace " + std::to_string(options_.nsid) + " does not exist (Identify: NSZE 0)";
  if (ds < 9 || ds > 16)
    return "namespace " + std::to_string(options_.nsid) + ": a block size of 2^" + std::to_string(ds);
  block_size = 1U << ds;

  // Number of Queues, then each I/O queue.
  Sqe queues = host_sqe(0x09, 0);
  set_cdw(queues, 10, 0x07);
  const uint32_t asked = options_.io_queues - 1U;
  set_cdw(queues, 11, asked | asked << 16);
  const std::optional<HostCompletion> granted = admin(queues, error, "Set Features Number of Queues");
  if (!granted) return error;
  if (std::min(granted->dw0 & 0xFFFF, granted->dw0 >> 16) < asked) {
    return "the controller grants " + std::to_string(std::min(granted->dw0 & 0xFFFF, granted->dw0 >> 16) + 1) +
           " I/O queues, fewer than " + std::to_string(options_.io_queues);
  }
  if (options_.io_entries > max_queue_entries) {
    return "queue depth " + std::to_string(options_.io_entries) +
           " is more than the controller's CAP.MQES + 1 = " + std::to_string(max_queue_entries);
  }
  const uint16_t engines = adapter_.UroceEngineCount();
  for (uint16_t qid = 1; qid <= options_.io_queues; ++qid) {
    HostQueueOptions q;
    q.qid = qid;
    q.entries = options_.io_entries;
    q.cntlid = cntlid;
    q.data_bytes = options_.io_data_bytes;
    q.read_limit = options_.read_limit;
    q.engine = static_cast<uint16_t>(qid % engines);
    q.source = options_.source;
    q.target = options_.target;
    q.timeout = options_.timeout;
    std::unique_ptr<HostQueue> queue = HostQueue::connect(adapter_, q, error);
    if (!queue) return error;
    uint16_t echoed = 0;
    if (error = fabrics_connect(*queue, cntlid, echoed); !error.empty()) return error;
    io_.push_back(std::move(queue));
  }
  return {};
}

HostController::~HostController() {
  io_.clear();  // the I/O queues disconnect first, as nvme_rdma_teardown_io_queues
  if (!admin_ || admin_->failed()) return;
  // nvme_shutdown_ctrl: CC.SHN = 01b, then CSTS.SHST = 10b.
  std::string ignored;
  Sqe set_cc = host_sqe(0x7F, 0);
  put32(set_cc, 44, 0x14);
  put64(set_cc, 48, 0x00464001);
  if (!admin(set_cc, ignored, "CC.SHN")) return;
  Sqe get_csts = host_sqe(0x7F, 0);
  get_csts[4] = 0x04;
  put32(get_csts, 44, 0x1C);
  for (int i = 0; i < 200; ++i) {
    const std::optional<HostCompletion> csts = admin(get_csts, ignored, "CSTS");
    if (!csts || (csts->dw0 & 0xC) == 0x8) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace uroce::nvmf
