// NVM command set I/O (NVMe NVM command set 1.0 §3): Read, Write, Flush, Write Zeroes and Dataset Management
// (deallocate). Every range is checked against the namespace before the backend sees it, so no command reaches a
// byte outside its namespace.
#include <algorithm>

#include "apps/nvmf/nvme/controller.h"
#include "apps/nvmf/nvme/nvme_defs.h"

namespace uroce::nvmf {

using namespace detail;

namespace {

constexpr uint32_t kCdw12Fua = 1U << 30;
constexpr uint32_t kDsmAttributeDeallocate = 1U << 2;  // CDW11 AD
constexpr std::size_t kDsmRangeSize = 16;              // struct nvme_dsm_range: cattr, nlb, slba

uint64_t start_lba(const SqeView& sqe) { return sqe.cdw(10) | (uint64_t{sqe.cdw(11)} << 32); }
uint64_t block_count(const SqeView& sqe) { return (sqe.cdw(12) & 0xFFFF) + 1U; }  // NLB, 0's based
bool in_namespace(const NamespaceState& ns, uint64_t slba, uint64_t nlb) {
  return slba <= ns.blocks && nlb <= ns.blocks - slba;  // no sum that could wrap
}

}  // namespace

CommandPlan Controller::prepare_io(const SqeView& sqe) const {
  if (!ready()) return refuse(kScCommandSequence);
  const uint8_t opcode = sqe.opcode();
  if (opcode != kIoFlush && opcode != kIoWrite && opcode != kIoRead && opcode != kIoWriteZeroes &&
      opcode != kIoDatasetManagement)
    return refuse(kScInvalidOpcode);
  if (opcode == kIoFlush && sqe.nsid() == kNsidAll) return {};  // every namespace
  const NamespaceState* ns = subsystem.find(sqe.nsid());
  if (ns == nullptr) return refuse(kScInvalidNamespace);
  switch (opcode) {
    case kIoRead:
    case kIoWrite: {
      if (!in_namespace(*ns, start_lba(sqe), block_count(sqe))) return refuse(kScLbaOutOfRange);
      // At most 65536 blocks of 4 KiB: 256 MiB fits; MDTS is checked by the caller.
      const auto length = static_cast<uint32_t>(block_count(sqe) << ns->block_shift);
      return moves(opcode == kIoRead ? DataDirection::kControllerToHost : DataDirection::kHostToController, length);
    }
    case kIoWriteZeroes:
      if (!in_namespace(*ns, start_lba(sqe), block_count(sqe))) return refuse(kScLbaOutOfRange);
      return {};
    case kIoDatasetManagement:  // the ranges come as data; each is checked when it has arrived
      return moves(DataDirection::kHostToController,
                   static_cast<uint32_t>(((sqe.cdw(10) & 0xFF) + 1U) * kDsmRangeSize));
    default:  // flush
      return {};
  }
}

CommandResult Controller::run_io(const SqeView& sqe, std::span<uint8_t> data) {
  CommandResult result;
  auto media = [&result](NamespaceState& ns, bool ok) {
    if (!ok) {
      ++ns.media_errors;
      result.status = kScInternal;
    }
  };
  if (sqe.opcode() == kIoFlush && sqe.nsid() == kNsidAll) {
    for (NamespaceState& ns : subsystem.namespaces) media(ns, ns.backend->flush());
    return result;
  }
  NamespaceState* ns = subsystem.find(sqe.nsid());
  if (ns == nullptr) return answer(kScInvalidNamespace);  // prepare_io said otherwise: cannot happen
  const uint64_t offset = start_lba(sqe) << ns->block_shift;
  switch (sqe.opcode()) {
    case kIoRead:
      ++ns->read_commands;
      ns->bytes_read += data.size();
      media(*ns, ns->backend->read(offset, data));
      break;
    case kIoWrite:
      ++ns->write_commands;
      ns->bytes_written += data.size();
      media(*ns, ns->backend->write(offset, data));
      if (result.status == kStatusSuccess && (sqe.cdw(12) & kCdw12Fua) != 0) media(*ns, ns->backend->flush());
      break;
    case kIoWriteZeroes:
      media(*ns, ns->backend->write_zeroes(offset, block_count(sqe) << ns->block_shift));
      break;
    case kIoDatasetManagement:
      result.status = dataset_management(*ns, sqe, data);
      break;
    default:
      media(*ns, ns->backend->flush());
      break;
  }
  return result;
}

NvmeStatus Controller::dataset_management(NamespaceState& ns, const SqeView& sqe, std::span<const uint8_t> ranges) {
  if ((sqe.cdw(11) & kDsmAttributeDeallocate) == 0) return kStatusSuccess;  // only hints (IDR, IDW): nothing to do
  const std::size_t count = ranges.size() / kDsmRangeSize;
  auto range = [&](std::size_t i) {
    return std::pair{load_le<uint64_t>(ranges, i * kDsmRangeSize + 8),
                     uint64_t{load_le<uint32_t>(ranges, i * kDsmRangeSize + 4)}};
  };
  for (std::size_t i = 0; i < count; ++i) {  // all or nothing
    const auto [slba, nlb] = range(i);
    if (!in_namespace(ns, slba, nlb)) return kScLbaOutOfRange;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const auto [slba, nlb] = range(i);
    if (nlb == 0) continue;
    if (!ns.backend->write_zeroes(slba << ns.block_shift, nlb << ns.block_shift)) {
      ++ns.media_errors;
      return kScInternal;
    }
  }
  return kStatusSuccess;
}

}  // namespace uroce::nvmf
