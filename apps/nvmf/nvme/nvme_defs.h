// Private to apps/nvmf/nvme/: the NVMe and NVMe-oF numbers the controller speaks (opcodes, status codes, register
// and structure offsets), with the Linux include/linux/nvme.h names they correspond to, and little-endian access
// to byte buffers (every NVMe structure is little-endian, none is aligned for us).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "apps/nvmf/nvme/nvmf_target.h"

namespace uroce::nvmf::detail {

// --- Little-endian loads and stores at any byte offset ---------------------------------------------------------
template <typename T>
[[nodiscard]] inline T load_le(std::span<const uint8_t> bytes, std::size_t offset) {
  T value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(static_cast<T>(bytes[offset + i]) << (8 * i));
  return value;
}
template <typename T>
inline void store_le(std::span<uint8_t> bytes, std::size_t offset, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i) bytes[offset + i] = static_cast<uint8_t>(value >> (8 * i));
}

// --- Status codes: (SCT << 8) | SC, and DNR (bit 14 of the status field without the phase bit) ----------------
inline constexpr NvmeStatus kDnr = 0x4000;
inline constexpr NvmeStatus kScInvalidOpcode = 0x001 | kDnr;        // NVME_SC_INVALID_OPCODE
inline constexpr NvmeStatus kScInvalidField = 0x002 | kDnr;         // NVME_SC_INVALID_FIELD
inline constexpr NvmeStatus kScInternal = 0x006;                    // NVME_SC_INTERNAL (a media error: may retry)
inline constexpr NvmeStatus kScAbortSqDeletion = 0x008;             // NVME_SC_ABORT_QUEUE
inline constexpr NvmeStatus kScInvalidNamespace = 0x00B | kDnr;     // NVME_SC_INVALID_NS
inline constexpr NvmeStatus kScCommandSequence = 0x00C | kDnr;      // NVME_SC_CMD_SEQ_ERROR
inline constexpr NvmeStatus kScSglDataLength = 0x00F | kDnr;        // NVME_SC_SGL_INVALID_DATA
inline constexpr NvmeStatus kScSglType = 0x011 | kDnr;              // NVME_SC_SGL_INVALID_TYPE
inline constexpr NvmeStatus kScSglOffset = 0x016 | kDnr;            // NVME_SC_SGL_INVALID_OFFSET
inline constexpr NvmeStatus kScKeepAliveInvalid = 0x01A | kDnr;     // NVME_SC_KA_TIMEOUT_INVALID
inline constexpr NvmeStatus kScLbaOutOfRange = 0x080 | kDnr;        // NVME_SC_LBA_RANGE
inline constexpr NvmeStatus kScCapacityExceeded = 0x081 | kDnr;     // NVME_SC_CAP_EXCEEDED (the backend's ENOSPC)
inline constexpr NvmeStatus kScCommandSizeLimit = 0x183 | kDnr;     // NVME_SC_CMD_SIZE_LIM_EXCEEDED (past DMSL)
inline constexpr NvmeStatus kScWriteFault = 0x280;                  // NVME_SC_WRITE_FAULT (media error, SCT 2)
inline constexpr NvmeStatus kScUnrecoveredReadError = 0x281;        // NVME_SC_READ_ERROR (media error, SCT 2)
inline constexpr NvmeStatus kScAsyncLimit = 0x105 | kDnr;           // NVME_SC_ASYNC_LIMIT
inline constexpr NvmeStatus kScConnectFormat = 0x180 | kDnr;        // NVME_SC_CONNECT_FORMAT
inline constexpr NvmeStatus kScConnectBusy = 0x181 | kDnr;          // NVME_SC_CONNECT_CTRL_BUSY
inline constexpr NvmeStatus kScConnectInvalidParam = 0x182 | kDnr;  // NVME_SC_CONNECT_INVALID_PARAM
inline constexpr NvmeStatus kScConnectInvalidHost = 0x184 | kDnr;   // NVME_SC_CONNECT_INVALID_HOST
// The status code and its type without DNR or More: what counters compare.
[[nodiscard]] constexpr uint16_t status_code(NvmeStatus status) { return status & 0x7FF; }

// --- The SQE (NVMe base 2.0 figure 88; NVMe-oF 1.1 figure 19 for Fabrics commands) ------------------------------
inline constexpr std::size_t kSqeOpcode = 0;
inline constexpr std::size_t kSqeFlags = 1;  // FUSE 1:0, PSDT 7:6
inline constexpr std::size_t kSqeCid = 2;
inline constexpr std::size_t kSqeFctype = 4;  // Fabrics commands only
inline constexpr std::size_t kSqeNsid = 4;
inline constexpr std::size_t kSqeDptr = 24;
[[nodiscard]] constexpr std::size_t sqe_cdw(unsigned n) { return std::size_t{4} * n; }  // CDW10 is byte 40
inline constexpr uint8_t kFlagsFuseMask = 0x03;
inline constexpr uint8_t kFlagsPsdtMask = 0xC0;
inline constexpr uint8_t kFlagsPsdtSglMetabuf = 0x40;  // NVME_CMD_SGL_METABUF: what fabrics hosts set

// Fabrics command fields (struct nvmf_connect_command, nvmf_property_{get,set}_command).
inline constexpr std::size_t kConnectRecfmt = 40;
inline constexpr std::size_t kConnectQid = 42;
inline constexpr std::size_t kConnectSqsize = 44;
inline constexpr std::size_t kConnectCattr = 46;
inline constexpr std::size_t kConnectKato = 48;
inline constexpr std::size_t kPropertyAttrib = 40;  // bit 0: 8-byte property
inline constexpr std::size_t kPropertyOffset = 44;
inline constexpr std::size_t kPropertyValue = 48;
// Connect data (struct nvmf_connect_data).
inline constexpr std::size_t kConnectDataHostId = 0;
inline constexpr std::size_t kConnectDataCntlid = 16;
inline constexpr std::size_t kConnectDataSubnqn = 256;
inline constexpr std::size_t kConnectDataHostnqn = 512;
inline constexpr std::size_t kNqnFieldSize = 256;
inline constexpr uint16_t kCntlidDynamic = 0xFFFF;
inline constexpr uint16_t kCntlidMax = 0xFFEF;  // NVME_CNTLID_MAX
// Connect Invalid Parameters, CQE DW0: IATTR (bit 16: the offset is in the connect data) and IPO.
[[nodiscard]] constexpr uint32_t ipo_sqe(std::size_t offset) { return static_cast<uint32_t>(offset); }
[[nodiscard]] constexpr uint32_t ipo_data(std::size_t offset) { return (1U << 16) | static_cast<uint32_t>(offset); }

// --- Opcodes ------------------------------------------------------------------------------------------------
inline constexpr uint8_t kOpFabrics = 0x7F;
inline constexpr uint8_t kFctypePropertySet = 0x00;
inline constexpr uint8_t kFctypeConnect = 0x01;
inline constexpr uint8_t kFctypePropertyGet = 0x04;
inline constexpr uint8_t kFctypeDisconnect = 0x08;

inline constexpr uint8_t kAdminGetLogPage = 0x02;
inline constexpr uint8_t kAdminIdentify = 0x06;
inline constexpr uint8_t kAdminAbort = 0x08;
inline constexpr uint8_t kAdminSetFeatures = 0x09;
inline constexpr uint8_t kAdminGetFeatures = 0x0A;
inline constexpr uint8_t kAdminAsyncEvent = 0x0C;
inline constexpr uint8_t kAdminKeepAlive = 0x18;

inline constexpr uint8_t kIoFlush = 0x00;
inline constexpr uint8_t kIoWrite = 0x01;
inline constexpr uint8_t kIoRead = 0x02;
inline constexpr uint8_t kIoWriteZeroes = 0x08;
inline constexpr uint8_t kIoDatasetManagement = 0x09;

// --- Controller properties (NVMe-oF 1.1 figure 8; base 2.0 §3.1.3) -------------------------------------------
inline constexpr uint32_t kPropCap = 0x00;
inline constexpr uint32_t kPropVs = 0x08;
inline constexpr uint32_t kPropCc = 0x14;
inline constexpr uint32_t kPropCsts = 0x1C;
inline constexpr uint32_t kVersion13 = 0x00010300;
inline constexpr uint32_t kCcEnable = 1U << 0;
[[nodiscard]] constexpr uint32_t cc_css(uint32_t cc) { return (cc >> 4) & 0x7; }
[[nodiscard]] constexpr uint32_t cc_mps(uint32_t cc) { return (cc >> 7) & 0xF; }
[[nodiscard]] constexpr uint32_t cc_ams(uint32_t cc) { return (cc >> 11) & 0x7; }
[[nodiscard]] constexpr uint32_t cc_shn(uint32_t cc) { return (cc >> 14) & 0x3; }
[[nodiscard]] constexpr uint32_t cc_iosqes(uint32_t cc) { return (cc >> 16) & 0xF; }
[[nodiscard]] constexpr uint32_t cc_iocqes(uint32_t cc) { return (cc >> 20) & 0xF; }
inline constexpr uint32_t kCstsReady = 1U << 0;
inline constexpr uint32_t kCstsFatal = 1U << 1;
inline constexpr uint32_t kCstsShutdownComplete = 2U << 2;  // SHST = 10b
inline constexpr uint32_t kCstsShutdownMask = 3U << 2;
inline constexpr unsigned kSqesLog2 = 6;  // 64-byte SQEs
inline constexpr unsigned kCqesLog2 = 4;  // 16-byte CQEs

// --- Identify (base 2.0 §5.17) ------------------------------------------------------------------------------
inline constexpr std::size_t kIdentifySize = 4096;
inline constexpr uint8_t kCnsNamespace = 0x00;
inline constexpr uint8_t kCnsController = 0x01;
inline constexpr uint8_t kCnsActiveNsList = 0x02;
inline constexpr uint8_t kCnsNsDescriptors = 0x03;
inline constexpr uint8_t kCnsCsController = 0x06;  // I/O command set specific Identify Controller, for CDW11.CSI
inline constexpr uint8_t kCsiNvm = 0x00;
inline constexpr uint32_t kNsidAll = 0xFFFFFFFF;
inline constexpr uint8_t kNidtNguid = 2;
inline constexpr uint8_t kNidtUuid = 3;

// --- Dataset Management (NVM command set 1.0 §3.2.3) -----------------------------------------------------------
// The most logical blocks one deallocate may name, over all its ranges (DMSL) and so in any one of them (DMRSL),
// both in Identify CNS 06h. Ranges may overlap, so the namespace's size bounds nothing, and a RAM or a zeroing file
// backend does work in proportion to the blocks named: this keeps a deallocate to what one Write Zeroes may ask
// (NLB is 16 bits), however many ranges it lists.
inline constexpr uint32_t kDsmMaxBlocks = 65536;

// --- Get Log Page -------------------------------------------------------------------------------------------
inline constexpr uint8_t kLogError = 0x01;
inline constexpr uint8_t kLogSmart = 0x02;
inline constexpr uint8_t kLogDiscovery = 0x70;
inline constexpr std::size_t kSmartLogSize = 512;
inline constexpr std::size_t kDiscoveryRecordSize = 1024;  // the header, and each entry

// --- Features -----------------------------------------------------------------------------------------------
inline constexpr uint8_t kFeatVolatileWriteCache = 0x06;
inline constexpr uint8_t kFeatNumQueues = 0x07;
inline constexpr uint8_t kFeatAsyncEventConfig = 0x0B;
inline constexpr uint8_t kFeatKeepAliveTimer = 0x0F;
inline constexpr uint32_t kAecSmartWarnings = 0x000000FF;  // the critical warnings an NVM controller may report
inline constexpr uint32_t kAecDiscoveryChange = 1U << 31;  // NVME_AEN_CFG_DISC_CHANGE

// --- Discovery (NVMe-oF 1.1 figure 38; struct nvmf_disc_rsp_page_entry) -------------------------------------
inline constexpr uint8_t kTrtypeRdma = 1;
inline constexpr uint8_t kAdrfamIpv4 = 1;
inline constexpr uint8_t kAdrfamIpv6 = 2;
inline constexpr uint8_t kSubtypeNvm = 2;
inline constexpr uint16_t kAdminQueueDepth = 32;  // NVME_AQ_DEPTH: the largest admin queue
inline constexpr uint8_t kRdmaQptypeConnected = 1;
inline constexpr uint8_t kRdmaPrtypeNotSpecified = 1;
inline constexpr uint8_t kRdmaCmsRdmaCm = 1;

// --- SGL descriptor types (type << 4 | subtype) -------------------------------------------------------------
inline constexpr uint8_t kSglTypeDataBlock = 0x0;
inline constexpr uint8_t kSglTypeKeyedDataBlock = 0x4;
inline constexpr uint8_t kSglSubtypeAddress = 0x0;
inline constexpr uint8_t kSglSubtypeOffset = 0x1;
inline constexpr uint8_t kSglSubtypeInvalidate = 0xF;

// A read-only view of one SQE's fields.
class SqeView {
 public:
  explicit SqeView(std::span<const uint8_t, kSqeSize> sqe) : bytes_(sqe) {}
  [[nodiscard]] uint8_t opcode() const { return bytes_[kSqeOpcode]; }
  [[nodiscard]] uint8_t flags() const { return bytes_[kSqeFlags]; }
  [[nodiscard]] uint8_t fctype() const { return bytes_[kSqeFctype]; }
  [[nodiscard]] uint32_t nsid() const { return u32(kSqeNsid); }
  [[nodiscard]] uint32_t cdw(unsigned n) const { return u32(sqe_cdw(n)); }
  [[nodiscard]] uint8_t u8(std::size_t offset) const { return bytes_[offset]; }
  [[nodiscard]] uint16_t u16(std::size_t offset) const { return load_le<uint16_t>(bytes_, offset); }
  [[nodiscard]] uint32_t u32(std::size_t offset) const { return load_le<uint32_t>(bytes_, offset); }
  [[nodiscard]] uint64_t u64(std::size_t offset) const { return load_le<uint64_t>(bytes_, offset); }
  [[nodiscard]] std::span<const uint8_t, 16> dptr() const { return bytes_.subspan<kSqeDptr, 16>(); }

 private:
  std::span<const uint8_t, kSqeSize> bytes_;
};

// Plans and results, spelled briefly (designated initializers would trip -Wmissing-field-initializers).
[[nodiscard]] inline CommandPlan refuse(NvmeStatus status) {
  CommandPlan plan;
  plan.status = status;
  return plan;
}
[[nodiscard]] inline CommandPlan moves(DataDirection direction, uint32_t length) {
  CommandPlan plan;
  plan.direction = direction;
  plan.length = length;
  return plan;
}
[[nodiscard]] inline CommandResult answer(NvmeStatus status, uint32_t dw0 = 0) {
  CommandResult result;
  result.status = status;
  result.dw0 = dw0;
  return result;
}

// Copies `text` into `field`, padded with spaces (Identify sn/mn/fr, discovery traddr/trsvcid) or NULs (NQNs),
// cut at the field's size.
void put_padded(std::span<uint8_t> field, std::string_view text, uint8_t pad);

}  // namespace uroce::nvmf::detail
