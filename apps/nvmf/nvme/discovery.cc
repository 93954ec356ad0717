// The discovery log page (LID 0x70; NVMe-oF 1.1 §5.3, struct nvmf_disc_rsp_page_hdr / _entry): a 1024-byte header
// (GENCTR, NUMREC, RECFMT), then one 1024-byte entry per port and NVM subsystem that the discovery controller's host
// may connect to. libnvme reads it in pieces (the header at LPO 0, then the entries from LPO 1024 in chunks of at
// most 4096 bytes, then the header again to compare GENCTR), so any window [LPO, LPO + NUMD * 4) is answered.
#include <algorithm>
#include <array>
#include <string>

#include "apps/nvmf/nvme/controller.h"
#include "apps/nvmf/nvme/nvme_defs.h"

namespace uroce::nvmf {

using namespace detail;

namespace {

// Entry offsets.
constexpr std::size_t kEntryTrtype = 0, kEntryAdrfam = 1, kEntrySubtype = 2, kEntryTreq = 3, kEntryPortid = 4,
                      kEntryCntlid = 6, kEntryAsqsz = 8, kEntryTrsvcid = 32, kEntrySubnqn = 256, kEntryTraddr = 512,
                      kEntryTsasQptype = 768, kEntryTsasPrtype = 769, kEntryTsasCms = 770;
constexpr std::size_t kTrsvcidSize = 32, kTraddrSize = 256;

}  // namespace

uint64_t Controller::discovery_log_size() const {
  uint64_t records = 0;
  for (std::size_t s = 1; s < target.subsystems_.size(); ++s)
    if (target.subsystems_[s]->host_allowed(host_nqn)) ++records;
  return kDiscoveryRecordSize * (1 + records * target.config_.ports.size());
}

void Controller::discovery_log(uint64_t offset, std::span<uint8_t> out) const {
  const uint64_t end = offset + out.size();  // out is at most MDTS: no wrap
  std::array<uint8_t, kDiscoveryRecordSize> record{};
  // Copies the part of record `index` that the window holds.
  auto emit = [&](uint64_t index) {
    const uint64_t first = index * kDiscoveryRecordSize;
    const uint64_t from = std::max(first, offset), to = std::min(first + kDiscoveryRecordSize, end);
    if (from >= to) return;
    std::copy(record.begin() + static_cast<std::ptrdiff_t>(from - first),
              record.begin() + static_cast<std::ptrdiff_t>(to - first),
              out.begin() + static_cast<std::ptrdiff_t>(from - offset));
  };
  const uint64_t numrec = discovery_log_size() / kDiscoveryRecordSize - 1;
  store_le<uint64_t>(record, 0, target.genctr_);
  store_le<uint64_t>(record, 8, numrec);
  store_le<uint16_t>(record, 16, 0);  // RECFMT
  emit(0);

  uint64_t index = 1;
  const std::vector<PortAddress>& ports = target.config_.ports;
  for (std::size_t p = 0; p < ports.size(); ++p) {
    for (std::size_t s = 1; s < target.subsystems_.size(); ++s) {
      const SubsystemState& nvm = *target.subsystems_[s];
      if (!nvm.host_allowed(host_nqn)) continue;
      if ((index + 1) * kDiscoveryRecordSize > offset && index * kDiscoveryRecordSize < end) {
        record.fill(0);
        record[kEntryTrtype] = kTrtypeRdma;
        record[kEntryAdrfam] = ports[p].ipv6 ? kAdrfamIpv6 : kAdrfamIpv4;
        record[kEntrySubtype] = kSubtypeNvm;
        record[kEntryTreq] = 0;  // secure channel not specified; SQ flow control stays on
        store_le<uint16_t>(record, kEntryPortid, static_cast<uint16_t>(p));
        store_le<uint16_t>(record, kEntryCntlid, kCntlidDynamic);
        store_le<uint16_t>(record, kEntryAsqsz, kAdminQueueDepth);
        put_padded(std::span(record).subspan(kEntryTrsvcid, kTrsvcidSize), std::to_string(ports[p].port), ' ');
        put_padded(std::span(record).subspan(kEntrySubnqn, kNqnFieldSize), nvm.nqn, 0);
        put_padded(std::span(record).subspan(kEntryTraddr, kTraddrSize), ports[p].address, ' ');
        record[kEntryTsasQptype] = kRdmaQptypeConnected;
        record[kEntryTsasPrtype] = kRdmaPrtypeNotSpecified;
        record[kEntryTsasCms] = kRdmaCmsRdmaCm;
        emit(index);
      }
      ++index;
    }
  }
}

}  // namespace uroce::nvmf
