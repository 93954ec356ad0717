// NVM command set I/O (NVMe NVM command set 1.0 §3): Read, Write, Flush, Write Zeroes and Dataset Management
// (deallocate). Every range is checked against the namespace before the backend sees it, so no command reaches a
// byte outside its namespace.
#include <algorithm>
#include <array>
#include <cerrno>

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

CommandResult Controller::run_io(NvmfQueue& queue, const SqeView& sqe, std::span<uint8_t> data, uint32_t tag) {
  if (sqe.opcode() == kIoFlush && sqe.nsid() == kNsidAll) {
    NamespaceState* first = subsystem.namespaces.empty() ? nullptr : &subsystem.namespaces.front();
    IoCommand& command = target.start_io(queue, tag, first, BackendOp::kFlush, 0);
    for (NamespaceState& ns : subsystem.namespaces) {
      BackendRequest request;
      request.op = BackendOp::kFlush;
      target.submit_io(command, *ns.backend, request);
    }
    return target.end_submission(command);
  }
  NamespaceState* ns = subsystem.find(sqe.nsid());
  if (ns == nullptr) return answer(kScInvalidNamespace);  // prepare_io said otherwise: cannot happen
  if (sqe.opcode() == kIoDatasetManagement) return dataset_management(queue, *ns, sqe, data, tag);
  BackendRequest request;
  request.offset = start_lba(sqe) << ns->block_shift;
  switch (sqe.opcode()) {
    case kIoRead:
      ++ns->read_commands;
      ns->bytes_read += data.size();
      request.op = BackendOp::kRead;
      request.length = data.size();
      request.data = data.data();
      break;
    case kIoWrite:
      ++ns->write_commands;
      ns->bytes_written += data.size();
      request.op = BackendOp::kWrite;
      request.fua = (sqe.cdw(12) & kCdw12Fua) != 0;
      request.length = data.size();
      request.data = data.data();
      break;
    case kIoWriteZeroes:
      request.op = BackendOp::kWriteZeroes;
      request.length = block_count(sqe) << ns->block_shift;
      break;
    default:
      request.op = BackendOp::kFlush;
      request.offset = 0;
      break;
  }
  IoCommand& command = target.start_io(queue, tag, ns, request.op,
                                       request.op == BackendOp::kRead ? static_cast<uint32_t>(data.size()) : 0);
  target.submit_io(command, *ns->backend, request);
  return target.end_submission(command);
}

CommandResult Controller::dataset_management(NvmfQueue& queue, NamespaceState& ns, const SqeView& sqe,
                                             std::span<const uint8_t> ranges, uint32_t tag) {
  if ((sqe.cdw(11) & kDsmAttributeDeallocate) == 0) return {};  // only hints (IDR, IDW): nothing to do
  const std::size_t count = ranges.size() / kDsmRangeSize;
  auto range = [&](std::size_t i) {
    return std::pair{load_le<uint64_t>(ranges, i * kDsmRangeSize + 8),
                     uint64_t{load_le<uint32_t>(ranges, i * kDsmRangeSize + 4)}};
  };
  uint64_t blocks = 0;                       // at most 256 ranges of under 2^32 blocks: no overflow
  for (std::size_t i = 0; i < count; ++i) {  // all or nothing
    const auto [slba, nlb] = range(i);
    if (!in_namespace(ns, slba, nlb)) return answer(kScLbaOutOfRange);
    blocks += nlb;
  }
  // Past DMSL (or DMRSL), which Identify CNS 06h advertises: the NVM command set's Command Size Limit Exceeded.
  if (blocks > kDsmMaxBlocks) return answer(kScCommandSizeLimit);
  IoCommand& command = target.start_io(queue, tag, &ns, BackendOp::kDeallocate, 0);
  for (std::size_t i = 0; i < count; ++i) {
    const auto [slba, nlb] = range(i);
    if (nlb == 0) continue;
    BackendRequest request;
    request.op = BackendOp::kDeallocate;
    request.offset = slba << ns.block_shift;
    request.length = nlb << ns.block_shift;
    target.submit_io(command, *ns.backend, request);
  }
  return target.end_submission(command);
}

// --- Backend I/O: commands in flight, their completions, and the status a failure maps to ---------------------

IoCommand& NvmfTarget::start_io(NvmfQueue& queue, uint32_t tag, NamespaceState* ns, BackendOp op,
                                uint32_t data_length) {
  if (free_io_commands_.empty()) {  // grows to the most commands ever in flight, then allocates no more
    io_commands_.push_back(std::make_unique<IoCommand>());
    free_io_commands_.push_back(io_commands_.back().get());
  }
  IoCommand& command = *free_io_commands_.back();
  free_io_commands_.pop_back();
  command = IoCommand{};
  command.queue = &queue;
  command.ns = ns;
  command.tag = tag;
  command.op = op;
  command.data_length = data_length;
  command.parts = 1;  // the submission itself, until end_submission()
  return command;
}

void NvmfTarget::submit_io(IoCommand& command, Backend& backend, const BackendRequest& request) {
  BackendRequest r = request;
  r.context = &command;
  ++command.parts;
  const int result = backend.submit(r);
  if (result != kBackendPending) io_part_done(command, result);
}

CommandResult NvmfTarget::end_submission(IoCommand& command) {
  if (command.parts == 1) {  // everything finished within submit()
    const CommandResult result = io_result(command);
    free_io_commands_.push_back(&command);
    return result;
  }
  --command.parts;
  ++command.queue->in_flight_;
  CommandResult pending;
  pending.pending = true;
  return pending;
}

void NvmfTarget::io_part_done(IoCommand& command, int result) {
  if (result < 0 && command.error == 0) command.error = result;
  if (--command.parts != 0) return;
  // The last part of a command that end_submission() left pending.
  if (NvmfQueue* queue = command.queue) {
    CompletedCommand done{command.tag, io_result(command)};
    count(done.result.status, false);
    queue->completed_.push_back(done);
    --queue->in_flight_;
  }
  free_io_commands_.push_back(&command);
}

CommandResult NvmfTarget::io_result(const IoCommand& command) const {
  CommandResult result;
  if (command.error == 0) {
    result.data_length = command.data_length;
    return result;
  }
  if (command.ns != nullptr) ++command.ns->media_errors;
  // NVMe base 2.0 figure 104 (media and data integrity errors) and nvmet's errno_to_nvme_status().
  if (command.error == -ENOSPC) {
    result.status = kScCapacityExceeded;
  } else if (command.error == -EIO || command.error == -EUCLEAN || command.error == -EBADMSG) {
    result.status = command.op == BackendOp::kRead ? kScUnrecoveredReadError : kScWriteFault;
  } else {
    result.status = kScInternal;
  }
  return result;
}

std::size_t NvmfTarget::poll() {
  std::array<BackendCompletion, 32> completions;
  std::size_t total = 0;
  for (Backend* backend : backends_) {
    for (std::size_t n; (n = backend->poll(completions)) != 0;) {
      for (std::size_t i = 0; i < n; ++i)
        io_part_done(*static_cast<IoCommand*>(completions[i].context), completions[i].result);
      total += n;
      if (n < completions.size()) break;
    }
  }
  return total;
}

}  // namespace uroce::nvmf
