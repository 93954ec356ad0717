// A controller's life and its command dispatch: which family a command belongs to on which queue, and the keep-alive
// clock (nvmet's traffic-based keep-alive: any command counts as a sign of life, and a controller whose host has
// been silent for KATO plus a grace of one more KATO is torn down, which is the latest nvmet notices).
#include "apps/nvmf/nvme/controller.h"

#include <algorithm>

namespace uroce::nvmf {

using namespace detail;

Controller::Controller(NvmfTarget& target, SubsystemState& subsystem, uint16_t cntlid, std::string host_nqn,
                       uint32_t kato_ms, uint64_t now_ms)
    : target(target),
      subsystem(subsystem),
      cntlid(cntlid),
      host_nqn(std::move(host_nqn)),
      io_qid(subsystem.discovery ? 1U : target.limits().max_io_queues + 1U, false),
      kato_ms_(kato_ms),
      last_heard_ms_(now_ms) {}

uint16_t Controller::io_queue_limit() const noexcept {
  if (subsystem.discovery) return 0;
  return granted_io_queues_ != 0 ? granted_io_queues_ : target.limits().max_io_queues;
}

void Controller::heard_at(uint64_t now_ms) noexcept {
  last_heard_ms_ = std::max(last_heard_ms_, now_ms);
  traffic_seen_ = false;  // stamped with its own time: tick() need not guess
}

bool Controller::keep_alive_expired(uint64_t now_ms) noexcept {
  if (kato_ms_ == 0) return false;
  if (traffic_seen_) {  // planned since the last tick, not executed: heard about now
    heard_at(now_ms);
    return false;
  }
  return now_ms > last_heard_ms_ && now_ms - last_heard_ms_ > 2 * uint64_t{kato_ms_};
}

CommandPlan Controller::prepare(const NvmfQueue& queue, const SqeView& sqe) const {
  if (sqe.opcode() == kOpFabrics) return prepare_fabrics(queue, sqe);
  return queue.qid() == 0 ? prepare_admin(sqe) : prepare_io(sqe);
}

CommandResult Controller::run(NvmfQueue& queue, const SqeView& sqe, std::span<uint8_t> data, uint64_t now_ms,
                              uint32_t tag) {
  if (sqe.opcode() == kOpFabrics) return run_fabrics(queue, sqe);
  return queue.qid() == 0 ? run_admin(queue, sqe, data, now_ms) : run_io(queue, sqe, data, tag);
}

}  // namespace uroce::nvmf
