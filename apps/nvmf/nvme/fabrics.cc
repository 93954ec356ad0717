// Fabrics commands (NVMe-oF 1.1 §3.3 and §3.5; Linux's drivers/nvme/target/fabrics-cmd.c is the model): Connect,
// which makes a controller (admin queue) or joins one (I/O queue); Property Get and Set over CAP, VS, CC and CSTS,
// with enable and shutdown; Disconnect of an I/O queue.
#include <algorithm>
#include <cstring>

#include "apps/nvmf/nvme/controller.h"
#include "apps/nvmf/nvme/nvme_defs.h"
#include "apps/nvmf/nvme/nvmf_target.h"

namespace uroce::nvmf {

using namespace detail;

namespace {

// An NQN field of the connect data: up to its first NUL, and never its last byte (nvmet terminates it there).
std::string_view nqn_field(std::span<const uint8_t> data, std::size_t offset) {
  const auto* begin = reinterpret_cast<const char*>(data.data() + offset);
  return {begin, strnlen(begin, kNqnFieldSize - 1)};
}

CommandResult reject(NvmeStatus status, uint32_t dw0 = 0) { return answer(status, dw0); }

}  // namespace

// --- Connect ----------------------------------------------------------------------------------------------------

CommandPlan NvmfTarget::prepare_unconnected(const NvmfQueue& /*queue*/, const SqeView& sqe) const {
  // Only Connect before Connect (NVMe-oF 1.1 §3.3: anything else is a Command Sequence Error). Its fields are
  // checked with its data in connect(), where the answer can carry IATTR/IPO in DW0.
  if (sqe.opcode() != kOpFabrics || sqe.fctype() != kFctypeConnect) return refuse(kScCommandSequence);
  return moves(DataDirection::kHostToController, kConnectDataSize);
}

CommandResult NvmfTarget::connect(NvmfQueue& queue, const SqeView& sqe, std::span<const uint8_t> data,
                                  uint64_t now_ms) {
  if (sqe.u16(kConnectRecfmt) != 0) return reject(kScConnectFormat);
  const uint16_t qid = sqe.u16(kConnectQid);
  if (qid != queue.qid_) return reject(kScConnectInvalidParam, ipo_sqe(kConnectQid));  // not the CM's queue
  const uint32_t entries = sqe.u16(kConnectSqsize) + 1U;
  const uint32_t most = qid == 0 ? kAdminQueueDepth : config_.limits.max_queue_size;
  if (entries == 1 || entries > most || entries > queue.sq_size_)
    return reject(kScConnectInvalidParam, ipo_sqe(kConnectSqsize));

  const uint16_t cntlid = load_le<uint16_t>(data, kConnectDataCntlid);
  const std::string_view subnqn = nqn_field(data, kConnectDataSubnqn);
  const std::string_view hostnqn = nqn_field(data, kConnectDataHostnqn);
  SubsystemState* subsystem = find_subsystem(subnqn);
  if (subsystem == nullptr) return reject(kScConnectInvalidParam, ipo_data(kConnectDataSubnqn));
  if (!subsystem->host_allowed(hostnqn)) return reject(kScConnectInvalidHost, ipo_data(kConnectDataHostnqn));

  Controller* controller = nullptr;
  if (qid == 0) {
    if (cntlid != kCntlidDynamic) return reject(kScConnectInvalidParam, ipo_data(kConnectDataCntlid));
    const std::optional<uint16_t> id = allocate_cntlid();
    if (!id) return reject(kScConnectBusy);
    uint64_t kato = sqe.u32(kConnectKato);
    if (subsystem->discovery && kato == 0) kato = kDiscoveryDefaultKatoMs;
    const uint64_t granule = config_.limits.keep_alive_granularity_ms;
    kato = std::min<uint64_t>((kato + granule - 1) / granule * granule, UINT32_MAX);
    controllers_.push_back(std::make_unique<Controller>(*this, *subsystem, *id, std::string(hostnqn),
                                                        static_cast<uint32_t>(kato), now_ms));
    controller = controllers_.back().get();
    next_cntlid_ = *id >= kCntlidMax ? 1 : static_cast<uint16_t>(*id + 1);
    ++counters_.controllers_created;
  } else {
    if (subsystem->discovery) return reject(kScConnectInvalidParam, ipo_sqe(kConnectQid));  // no I/O queues
    for (auto& c : controllers_)
      if (!c->dead && &c->subsystem == subsystem && c->cntlid == cntlid && c->host_nqn == hostnqn) controller = c.get();
    if (controller == nullptr) return reject(kScConnectInvalidParam, ipo_data(kConnectDataCntlid));
    if (!controller->ready()) return reject(kScCommandSequence);  // SPDK: no I/O queue before CC.EN
    if (qid > controller->io_queue_limit()) return reject(kScConnectInvalidParam, ipo_sqe(kConnectQid));
    if (controller->io_qid[qid]) return reject(kScCommandSequence);  // nvmet: "qid has already been created"
    controller->io_qid[qid] = true;
    controller->heard_at(now_ms);
  }
  ++controller->queue_refs;
  queue.controller_ = controller;
  queue.sq_size_ = static_cast<uint16_t>(entries);
  return answer(kStatusSuccess, controller->cntlid);
}

// --- Property Get / Set, Disconnect -------------------------------------------------------------------------------

uint64_t Controller::cap() const {
  uint64_t cap = target.limits().max_queue_size - 1U;  // MQES, 0's based
  cap |= uint64_t{15} << 24;                           // TO: 7.5 s in 500 ms units
  cap |= uint64_t{1} << 37;                            // CSS: the NVM command set (and no I/O command set bit 43)
  return cap;                                          // MPSMIN = MPSMAX = 0: 4 KiB pages
}

NvmeStatus Controller::property_get(uint32_t offset, bool eight_bytes, uint64_t& value) const {
  if (eight_bytes) {
    if (offset != kPropCap) return kScInvalidField;
    value = cap();
    return kStatusSuccess;
  }
  switch (offset) {
    case kPropCap:
      value = cap() & 0xFFFFFFFF;
      return kStatusSuccess;
    case kPropCap + 4:
      value = cap() >> 32;
      return kStatusSuccess;
    case kPropVs:
      value = kVersion13;
      return kStatusSuccess;
    case kPropCc:
      value = cc_;
      return kStatusSuccess;
    case kPropCsts:
      value = csts_;
      return kStatusSuccess;
    default:
      return kScInvalidField;
  }
}

// nvmet_update_cc: enabling checks the queue entry sizes (I/O controllers), page size, arbitration and command set,
// and sets CSTS.RDY or CSTS.CFS; disabling clears RDY; a shutdown notification completes at once.
void Controller::write_cc(uint32_t value) {
  const uint32_t old = cc_;
  cc_ = value;
  if ((value & kCcEnable) && !(old & kCcEnable)) {
    const bool queue_sizes_ok = subsystem.discovery || (cc_iosqes(value) == kSqesLog2 && cc_iocqes(value) == kCqesLog2);
    const bool ok = queue_sizes_ok && cc_mps(value) == 0 && cc_ams(value) == 0 && cc_css(value) == 0;
    csts_ = (csts_ & ~(kCstsReady | kCstsFatal)) | (ok ? kCstsReady : kCstsFatal);
  }
  if (!(value & kCcEnable) && (old & kCcEnable)) csts_ &= ~(kCstsReady | kCstsFatal);
  if (cc_shn(value) != 0 && cc_shn(old) == 0) csts_ = (csts_ & ~kCstsReady) | kCstsShutdownComplete;
  if (cc_shn(value) == 0 && cc_shn(old) != 0) csts_ &= ~kCstsShutdownMask;
}

CommandPlan Controller::prepare_fabrics(const NvmfQueue& queue, const SqeView& sqe) const {
  switch (sqe.fctype()) {
    case kFctypeConnect:
      return refuse(kScCommandSequence);  // this queue is connected already
    case kFctypePropertyGet:
    case kFctypePropertySet:
      if (queue.qid_ != 0) return refuse(kScInvalidOpcode);
      return {};
    case kFctypeDisconnect:
      if (queue.qid_ == 0) return refuse(kScInvalidOpcode);  // the admin queue ends with its connection
      return {};
    default:
      return refuse(kScInvalidOpcode);
  }
}

CommandResult Controller::run_fabrics(NvmfQueue& queue, const SqeView& sqe) {
  CommandResult result;
  const bool eight_bytes = (sqe.u8(kPropertyAttrib) & 1) != 0;
  const uint32_t offset = sqe.u32(kPropertyOffset);
  switch (sqe.fctype()) {
    case kFctypePropertyGet: {
      uint64_t value = 0;
      result.status = property_get(offset, eight_bytes, value);
      result.dw0 = static_cast<uint32_t>(value);
      result.dw1 = static_cast<uint32_t>(value >> 32);
      break;
    }
    case kFctypePropertySet:
      if (eight_bytes || offset != kPropCc) {
        result.status = kScInvalidField;  // CC is the only property a host writes
        break;
      }
      write_cc(static_cast<uint32_t>(sqe.u64(kPropertyValue)));
      break;
    case kFctypeDisconnect:
      if (queue.qid_ < io_qid.size()) io_qid[queue.qid_] = false;
      queue.disconnected_ = true;  // dead() from now on: the transport closes the connection after this answer
      break;
    default:
      result.status = kScInvalidOpcode;
      break;
  }
  return result;
}

}  // namespace uroce::nvmf
