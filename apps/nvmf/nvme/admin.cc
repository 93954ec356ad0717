// Admin commands (NVMe base 2.0 §5; Linux's drivers/nvme/target/admin-cmd.c and discovery.c are the models):
// Identify (namespace, controller, active namespace list, namespace identification descriptors), Get Log Page
// (error, SMART / health, discovery), Set and Get Features (number of queues, keep-alive timer, asynchronous event
// configuration, volatile write cache), Asynchronous Event Request (held), Keep Alive and Abort. A discovery
// controller takes what nvmet's does: Identify Controller, the discovery log, KATO and AEC, AER and Keep Alive.
#include <algorithm>
#include <array>
#include <utility>

#include "apps/nvmf/nvme/controller.h"
#include "apps/nvmf/nvme/nvme_defs.h"

namespace uroce::nvmf {

using namespace detail;

namespace {

constexpr const char* kFirmwareRevision = "0.1.0";
constexpr uint8_t kAsyncEventRequestLimit = 3;  // AERL, 0's based: four outstanding, as nvmet
constexpr uint8_t kAbortCommandLimit = 3;       // ACL, 0's based
constexpr std::size_t kErrorLogSize = 64;       // ELPE 0: one 64-byte entry, always empty
constexpr std::size_t kMaxActiveNsids = kIdentifySize / 4;

// Identify Controller offsets (struct nvme_id_ctrl).
constexpr std::size_t kIdSn = 4, kIdMn = 24, kIdFr = 64, kIdRab = 72, kIdMdts = 77, kIdCntlid = 78, kIdVer = 80,
                      kIdCntrltype = 111, kIdAcl = 258, kIdAerl = 259, kIdFrmw = 260, kIdLpa = 261, kIdKas = 320,
                      kIdSqes = 512, kIdCqes = 513, kIdMaxcmd = 514, kIdNn = 516, kIdOncs = 520, kIdVwc = 525,
                      kIdSgls = 536, kIdSubnqn = 768, kIdIoccsz = 1792, kIdIorcsz = 1796, kIdIcdoff = 1800,
                      kIdMsdbd = 1803;
constexpr uint16_t kOncsDsm = 1U << 2;
constexpr uint16_t kOncsWriteZeroes = 1U << 3;
constexpr uint8_t kVwcPresent = 1;  // Flush makes writes durable (the backend's contract), so the host must send it
constexpr uint8_t kLpaExtendedData = 1U << 2;  // LPO and NUMDU honoured
constexpr uint32_t kSglsSupported = 1U << 0, kSglsKeyed = 1U << 2, kSglsOffset = 1U << 20;
// Identify Namespace offsets (struct nvme_id_ns).
constexpr std::size_t kNsNsze = 0, kNsNcap = 8, kNsNuse = 16, kNsDlfeat = 33, kNsNguid = 104, kNsLbaf0Ds = 130;
constexpr uint8_t kDlfeatReadsZero = 1;  // deallocated blocks read as zeroes (DSM deallocate zeroes them)
// I/O command set specific Identify Controller offsets for the NVM command set (struct nvme_id_ctrl_nvm).
constexpr std::size_t kIdNvmDmrsl = 4, kIdNvmDmsl = 8;

uint64_t log_page_offset(const SqeView& sqe) { return sqe.cdw(12) | (uint64_t{sqe.cdw(13)} << 32); }
uint64_t log_page_length(const SqeView& sqe) {
  const uint64_t numd = (sqe.cdw(10) >> 16) | (uint64_t{sqe.cdw(11) & 0xFFFF} << 16);  // NUMDL, NUMDU
  return (numd + 1) * 4;
}

}  // namespace

CommandPlan Controller::prepare_admin(const SqeView& sqe) const {
  if (!ready()) return refuse(kScCommandSequence);  // nvmet_check_ctrl_status: CC.EN and CSTS.RDY
  const uint8_t opcode = sqe.opcode();
  const bool discovery = subsystem.discovery;
  switch (opcode) {
    case kAdminIdentify: {
      const uint8_t cns = sqe.cdw(10) & 0xFF;
      const bool known = discovery ? cns == kCnsController : cns <= kCnsNsDescriptors || cns == kCnsCsController;
      if (!known) return refuse(kScInvalidField);
      return moves(DataDirection::kControllerToHost, kIdentifySize);
    }
    case kAdminGetLogPage: {
      const uint8_t lid = sqe.cdw(10) & 0xFF;
      uint64_t size = 0;
      if (discovery && lid == kLogDiscovery) {
        size = discovery_log_size();
      } else if (!discovery && lid == kLogError) {
        size = kErrorLogSize;
      } else if (!discovery && lid == kLogSmart) {
        size = kSmartLogSize;
        const uint32_t nsid = sqe.nsid();
        if (nsid != 0 && nsid != kNsidAll && std::as_const(subsystem).find(nsid) == nullptr)
          return refuse(kScInvalidNamespace);
      } else {
        return refuse(kScInvalidField);
      }
      const uint64_t offset = log_page_offset(sqe);
      const uint64_t length = log_page_length(sqe);
      if ((offset & 3) != 0 || offset > size) return refuse(kScInvalidField);  // dword aligned, inside the log
      if (length > UINT32_MAX) return refuse(kScInvalidField);                 // past any MDTS
      return moves(DataDirection::kControllerToHost, static_cast<uint32_t>(length));
    }
    case kAdminSetFeatures:
    case kAdminGetFeatures:
    case kAdminAsyncEvent:
    case kAdminKeepAlive:
      return {};
    case kAdminAbort:
      if (discovery) return refuse(kScInvalidOpcode);
      return {};
    default:
      return refuse(kScInvalidOpcode);
  }
}

CommandResult Controller::run_admin(NvmfQueue& queue, const SqeView& sqe, std::span<uint8_t> data, uint64_t now_ms) {
  CommandResult result;
  switch (sqe.opcode()) {
    case kAdminIdentify:
      result.status = identify(sqe, data);
      break;
    case kAdminGetLogPage:
      result.status = get_log_page(sqe, data, now_ms);
      break;
    case kAdminSetFeatures:
      result = set_features(sqe, now_ms);
      break;
    case kAdminGetFeatures:
      result = get_features(sqe);
      break;
    case kAdminAsyncEvent:
      // Held until an event (none yet) or the queue closes (take_held answers them). nvmet_execute_async_event.
      if (queue.held_.size() > kAsyncEventRequestLimit) {
        result.status = kScAsyncLimit;
      } else {
        result.held = true;
      }
      break;
    case kAdminKeepAlive:
      if (kato_ms_ == 0) result.status = kScKeepAliveInvalid;  // nvmet_execute_keep_alive; the caller stamps it
      break;
    case kAdminAbort:
      result.dw0 = 1;  // "not aborted": nvmet's minimal Abort
      break;
    default:
      result.status = kScInvalidOpcode;
      break;
  }
  return result;
}

// --- Identify ---------------------------------------------------------------------------------------------------

void Controller::identify_controller(std::span<uint8_t> out) const {
  const TargetLimits& limits = target.limits();
  const bool discovery = subsystem.discovery;
  put_padded(out.subspan(kIdSn, 20), subsystem.serial, ' ');
  put_padded(out.subspan(kIdMn, 40), subsystem.model, ' ');
  put_padded(out.subspan(kIdFr, 8), kFirmwareRevision, ' ');
  out[kIdRab] = 6;
  out[kIdMdts] = limits.mdts;
  store_le<uint16_t>(out, kIdCntlid, cntlid);
  store_le<uint32_t>(out, kIdVer, kVersion13);
  out[kIdCntrltype] = discovery ? 2 : 1;
  out[kIdAerl] = kAsyncEventRequestLimit;
  out[kIdLpa] = kLpaExtendedData;
  store_le<uint16_t>(out, kIdKas, static_cast<uint16_t>(limits.keep_alive_granularity_ms / 100));
  store_le<uint16_t>(out, kIdMaxcmd, limits.max_queue_size);
  uint32_t sgls = kSglsSupported | kSglsKeyed;
  if (limits.inline_data_size != 0) sgls |= kSglsOffset;
  store_le<uint32_t>(out, kIdSgls, sgls);
  put_padded(out.subspan(kIdSubnqn, kNqnFieldSize), subsystem.nqn, 0);
  if (discovery) return;
  out[kIdAcl] = kAbortCommandLimit;
  out[kIdFrmw] = 0x03;  // one slot, read-only
  out[kIdSqes] = (kSqesLog2 << 4) | kSqesLog2;
  out[kIdCqes] = (kCqesLog2 << 4) | kCqesLog2;
  store_le<uint32_t>(out, kIdNn, subsystem.max_nsid);
  store_le<uint16_t>(out, kIdOncs, kOncsDsm | kOncsWriteZeroes);
  out[kIdVwc] = kVwcPresent;
  store_le<uint32_t>(out, kIdIoccsz, static_cast<uint32_t>((kSqeSize + limits.inline_data_size) / 16));
  store_le<uint32_t>(out, kIdIorcsz, kCqeSize / 16);
  store_le<uint16_t>(out, kIdIcdoff, 0);
  out[kIdMsdbd] = 1;
}

void Controller::identify_namespace(const NamespaceState& ns, std::span<uint8_t> out) const {
  store_le<uint64_t>(out, kNsNsze, ns.blocks);
  store_le<uint64_t>(out, kNsNcap, ns.blocks);
  store_le<uint64_t>(out, kNsNuse, ns.blocks);
  out[kNsDlfeat] = kDlfeatReadsZero;
  std::copy(ns.nguid.begin(), ns.nguid.end(), out.begin() + kNsNguid);
  out[kNsLbaf0Ds] = static_cast<uint8_t>(ns.block_shift);  // NLBAF 0, FLBAS 0: this one format
}

NvmeStatus Controller::identify(const SqeView& sqe, std::span<uint8_t> out) {
  std::fill(out.begin(), out.end(), 0);
  const uint32_t nsid = sqe.nsid();
  switch (sqe.cdw(10) & 0xFF) {
    case kCnsController:
      identify_controller(out);
      return kStatusSuccess;
    case kCnsNamespace: {
      if (nsid == 0 || nsid == kNsidAll) return kScInvalidNamespace;
      if (const NamespaceState* ns = subsystem.find(nsid)) identify_namespace(*ns, out);
      return kStatusSuccess;  // an inactive NSID reads as zeroes (nvmet)
    }
    case kCnsActiveNsList: {
      if (nsid >= 0xFFFFFFFE) return kScInvalidNamespace;
      std::size_t n = 0;
      for (const NamespaceState& ns : subsystem.namespaces) {
        if (ns.nsid <= nsid) continue;
        if (n == kMaxActiveNsids) break;
        store_le<uint32_t>(out, 4 * n++, ns.nsid);
      }
      return kStatusSuccess;
    }
    case kCnsCsController:
      // The NVM command set's I/O Command Set Specific Identify Controller (NVM command set 1.0; Linux's
      // nvme_init_non_mdts_limits asks a VS 1.3 controller too): the size limits of a Dataset Management
      // deallocate. Linux sizes its discards by DMRSL (max_discard_sectors), so they never exceed DMSL either.
      // DMRL 0: as many ranges as NR allows (256).
      if ((sqe.cdw(11) >> 24) != kCsiNvm) return kScInvalidField;
      store_le<uint32_t>(out, kIdNvmDmrsl, kDsmMaxBlocks);
      store_le<uint64_t>(out, kIdNvmDmsl, kDsmMaxBlocks);
      return kStatusSuccess;
    case kCnsNsDescriptors: {
      const NamespaceState* ns = subsystem.find(nsid);
      if (ns == nullptr) return kScInvalidNamespace;
      // Each descriptor: NIDT, NIDL, two reserved bytes, the identifier.
      out[0] = kNidtNguid;
      out[1] = 16;
      std::copy(ns->nguid.begin(), ns->nguid.end(), out.begin() + 4);
      out[20] = kNidtUuid;
      out[21] = 16;
      std::copy(ns->uuid.begin(), ns->uuid.end(), out.begin() + 24);
      return kStatusSuccess;
    }
    default:
      return kScInvalidField;
  }
}

// --- Get Log Page -----------------------------------------------------------------------------------------------

void Controller::smart_log(uint32_t nsid, uint64_t now_ms, std::span<uint8_t, kSmartLogSize> log) const {
  uint64_t reads = 0, writes = 0, bytes_read = 0, bytes_written = 0, media_errors = 0;
  for (const NamespaceState& ns : subsystem.namespaces) {
    if (nsid != 0 && nsid != kNsidAll && ns.nsid != nsid) continue;
    reads += ns.read_commands;
    writes += ns.write_commands;
    bytes_read += ns.bytes_read;
    bytes_written += ns.bytes_written;
    media_errors += ns.media_errors;
  }
  constexpr uint64_t kDataUnit = uint64_t{512} * 1000;  // thousands of 512-byte units, rounded up
  std::fill(log.begin(), log.end(), 0);
  store_le<uint16_t>(log, 1, 313);  // composite temperature, kelvin: 40 °C
  log[3] = 100;                     // available spare, percent
  log[4] = 10;                      // available spare threshold
  store_le<uint64_t>(log, 32, (bytes_read + kDataUnit - 1) / kDataUnit);
  store_le<uint64_t>(log, 48, (bytes_written + kDataUnit - 1) / kDataUnit);
  store_le<uint64_t>(log, 64, reads);
  store_le<uint64_t>(log, 80, writes);
  store_le<uint64_t>(log, 112, 1);  // power cycles
  const uint64_t start = target.start_ms_.value_or(now_ms);
  store_le<uint64_t>(log, 128, now_ms > start ? (now_ms - start) / 3600000 : 0);  // power-on hours
  store_le<uint64_t>(log, 160, media_errors);
}

NvmeStatus Controller::get_log_page(const SqeView& sqe, std::span<uint8_t> out, uint64_t now_ms) {
  const uint64_t offset = log_page_offset(sqe);
  std::fill(out.begin(), out.end(), 0);  // past the log's end reads as zeroes
  switch (sqe.cdw(10) & 0xFF) {
    case kLogError:
      return kStatusSuccess;
    case kLogSmart: {
      std::array<uint8_t, kSmartLogSize> log{};
      smart_log(sqe.nsid(), now_ms, log);
      if (offset < log.size()) {
        const std::size_t n = std::min<std::size_t>(log.size() - offset, out.size());
        std::copy_n(log.begin() + static_cast<std::ptrdiff_t>(offset), n, out.begin());
      }
      return kStatusSuccess;
    }
    case kLogDiscovery:
      discovery_log(offset, out);
      return kStatusSuccess;
    default:
      return kScInvalidField;
  }
}

// --- Features ---------------------------------------------------------------------------------------------------

CommandResult Controller::set_features(const SqeView& sqe, uint64_t now_ms) {
  CommandResult result;
  const uint8_t fid = sqe.cdw(10) & 0xFF;
  uint32_t value = sqe.cdw(11);
  if (subsystem.discovery && fid != kFeatKeepAliveTimer && fid != kFeatAsyncEventConfig) {
    result.status = kScInvalidField;
    return result;
  }
  switch (fid) {
    case kFeatNumQueues: {
      const uint32_t nsqr = value & 0xFFFF, ncqr = value >> 16;  // 0's based
      if (nsqr == 0xFFFF || ncqr == 0xFFFF) {
        result.status = kScInvalidField;
        break;
      }
      const uint32_t limit = target.limits().max_io_queues;
      const uint32_t nsqa = std::min(nsqr + 1, limit), ncqa = std::min(ncqr + 1, limit);
      granted_io_queues_ = static_cast<uint16_t>(std::min(nsqa, ncqa));  // fabrics queues come in pairs
      result.dw0 = (nsqa - 1) | ((ncqa - 1) << 16);
      break;
    }
    case kFeatKeepAliveTimer: {
      if (subsystem.discovery && value == 0) value = kDiscoveryDefaultKatoMs;
      const uint64_t granule = target.limits().keep_alive_granularity_ms;
      kato_ms_ = static_cast<uint32_t>(std::min<uint64_t>((value + granule - 1) / granule * granule, UINT32_MAX));
      heard_at(now_ms);
      break;
    }
    case kFeatAsyncEventConfig: {
      const uint32_t supported = subsystem.discovery ? kAecDiscoveryChange : kAecSmartWarnings;
      if ((value & ~supported) != 0) {
        result.status = kScInvalidField;
        break;
      }
      async_event_config_ = value;
      result.dw0 = value;
      break;
    }
    default:  // the volatile write cache stays on (nvmet answers the same)
      result.status = kScInvalidField;
      break;
  }
  return result;
}

CommandResult Controller::get_features(const SqeView& sqe) const {
  CommandResult result;
  const uint8_t fid = sqe.cdw(10) & 0xFF;
  if (subsystem.discovery && fid != kFeatKeepAliveTimer && fid != kFeatAsyncEventConfig) {
    result.status = kScInvalidField;
    return result;
  }
  switch (fid) {
    case kFeatNumQueues: {
      const uint32_t n = io_queue_limit() - 1U;
      result.dw0 = n | (n << 16);
      break;
    }
    case kFeatKeepAliveTimer:
      result.dw0 = kato_ms_;
      break;
    case kFeatAsyncEventConfig:
      result.dw0 = async_event_config_;
      break;
    case kFeatVolatileWriteCache:
      result.dw0 = 1;  // WCE
      break;
    default:
      result.status = kScInvalidField;
      break;
  }
  return result;
}

}  // namespace uroce::nvmf
