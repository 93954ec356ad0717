// NvmfTarget and NvmfQueue: configuration, the queues' two steps (plan, execute) with the checks every command
// shares (SQE flags, the queue's state, MDTS, the SGL), controllers' lives (dynamic controller IDs, keep-alive
// expiry, teardown when the admin queue closes), and the helpers the transport shares. The commands themselves are
// in fabrics.cc, admin.cc, discovery.cc and io.cc.
#include "apps/nvmf/nvme/nvmf_target.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <set>
#include <utility>

#include "apps/nvmf/nvme/controller.h"
#include "apps/nvmf/nvme/nvme_defs.h"

namespace uroce::nvmf {

using namespace detail;

namespace {

constexpr std::size_t kNqnMaxLength = 223;  // NVMe base 2.0 §4.5: an NQN is at most 223 bytes

bool printable_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c <= 0x7E; });
}

std::optional<std::string> check_nqn(std::string_view nqn, const std::string& what) {
  if (nqn.size() < 5 || nqn.substr(0, 4) != "nqn.") return what + ": an NQN starts with \"nqn.\"";
  if (nqn.size() > kNqnMaxLength) return what + ": an NQN is at most 223 bytes";
  if (!printable_ascii(nqn)) return what + ": an NQN is printable ASCII";
  return std::nullopt;
}

// The SGL of a command that moves `length` bytes in `direction` (nvmet-rdma's nvmet_rdma_map_sgl and the brief's
// rules): keyed data blocks (address or invalidate) anywhere; in-capsule data (data block, offset) only on I/O
// queues, only host to controller, at offset 0 (ICDOFF 0) and within the capsule; anything else is refused.
NvmeStatus check_sgl(std::span<const uint8_t, 16> descriptor, uint16_t qid, DataDirection direction, uint32_t length,
                     std::size_t in_capsule_length, Sgl& sgl) {
  sgl = parse_sgl(descriptor);
  const uint8_t type = descriptor[15];
  uint64_t covered = 0;
  switch (type >> 4) {
    case kSglTypeKeyedDataBlock:
      if ((type & 0xF) != kSglSubtypeAddress && (type & 0xF) != kSglSubtypeInvalidate) return kScInvalidField;
      covered = load_le<uint32_t>(descriptor, 8) & 0xFFFFFF;
      break;
    case kSglTypeDataBlock: {
      if ((type & 0xF) != kSglSubtypeOffset) return kScInvalidField;
      if (qid == 0) return kScSglType;  // the admin capsule is the SQE alone
      if (direction != DataDirection::kHostToController) return kScInvalidField;
      const uint64_t offset = load_le<uint64_t>(descriptor, 0);
      covered = load_le<uint32_t>(descriptor, 8);
      // Each on its own: offset + length could wrap (the nvmet-rdma inline bounds bug).
      if (offset != 0 || covered > in_capsule_length) return kScSglOffset;
      break;
    }
    default:
      return kScSglType;
  }
  if (direction != DataDirection::kNone && covered < length) return kScSglDataLength;
  return kStatusSuccess;
}

}  // namespace

// --- Helpers ----------------------------------------------------------------------------------------------------

void detail::put_padded(std::span<uint8_t> field, std::string_view text, uint8_t pad) {
  const std::size_t n = std::min(field.size(), text.size());
  std::copy_n(text.begin(), n, field.begin());
  std::fill(field.begin() + static_cast<std::ptrdiff_t>(n), field.end(), pad);
}

Sgl parse_sgl(std::span<const uint8_t, 16> descriptor) {
  Sgl sgl;
  const uint8_t type = descriptor[15];
  if (type >> 4 == kSglTypeKeyedDataBlock &&
      ((type & 0xF) == kSglSubtypeAddress || (type & 0xF) == kSglSubtypeInvalidate)) {
    sgl.address = load_le<uint64_t>(descriptor, 0);
    sgl.length = load_le<uint32_t>(descriptor, 8) & 0xFFFFFF;  // 24 bits
    sgl.key = load_le<uint32_t>(descriptor, 11);
    sgl.invalidate = (type & 0xF) == kSglSubtypeInvalidate;  // kept when length is 0: the host still wants it
    sgl.kind = sgl.length != 0 ? SglKind::kKeyed : SglKind::kNone;
  } else if (type == ((kSglTypeDataBlock << 4) | kSglSubtypeOffset)) {
    sgl.address = load_le<uint64_t>(descriptor, 0);
    sgl.length = load_le<uint32_t>(descriptor, 8);
    sgl.kind = sgl.length != 0 ? SglKind::kInCapsule : SglKind::kNone;
  }
  return sgl;
}

uint16_t command_id(std::span<const uint8_t, kSqeSize> sqe) { return load_le<uint16_t>(sqe, kSqeCid); }

std::array<uint8_t, kCqeSize> make_cqe(const CommandResult& result, uint16_t sq_head, uint16_t qid,
                                       uint16_t command_id) {
  std::array<uint8_t, kCqeSize> cqe{};
  store_le<uint32_t>(cqe, 0, result.dw0);
  store_le<uint32_t>(cqe, 4, result.dw1);
  store_le<uint16_t>(cqe, 8, sq_head);
  store_le<uint16_t>(cqe, 10, qid);
  store_le<uint16_t>(cqe, 12, command_id);
  store_le<uint16_t>(cqe, 14, static_cast<uint16_t>(result.status << 1));  // phase 0: fabrics ignore it
  return cqe;
}

// --- Subsystems -------------------------------------------------------------------------------------------------

const NamespaceState* SubsystemState::find(uint32_t nsid) const {
  auto it = std::lower_bound(namespaces.begin(), namespaces.end(), nsid,
                             [](const NamespaceState& ns, uint32_t id) { return ns.nsid < id; });
  return it != namespaces.end() && it->nsid == nsid ? &*it : nullptr;
}

NamespaceState* SubsystemState::find(uint32_t nsid) {
  return const_cast<NamespaceState*>(std::as_const(*this).find(nsid));
}

bool SubsystemState::host_allowed(std::string_view host_nqn) const {
  return discovery || allowed_hosts.empty() ||
         std::find(allowed_hosts.begin(), allowed_hosts.end(), host_nqn) != allowed_hosts.end();
}

void detail::derive_namespace_ids(std::string_view nqn, uint32_t nsid, std::array<uint8_t, 16>& nguid,
                                  std::array<uint8_t, 16>& uuid) {
  auto fnv = [&](uint64_t seed) {
    uint64_t h = seed;
    auto mix = [&h](uint8_t byte) {
      h ^= byte;
      h *= 0x100000001B3ULL;
    };
    for (char c : nqn) mix(static_cast<uint8_t>(c));
    for (int i = 0; i < 4; ++i) mix(static_cast<uint8_t>(nsid >> (8 * i)));
    return h;
  };
  const uint64_t words[4] = {fnv(0xCBF29CE484222325ULL), fnv(0x84222325CBF29CE4ULL), fnv(0x9E3779B97F4A7C15ULL),
                             fnv(0xD6E8FEB86659FD93ULL)};
  for (std::size_t i = 0; i < 8; ++i) {
    nguid[i] = static_cast<uint8_t>(words[0] >> (8 * i));
    nguid[8 + i] = static_cast<uint8_t>(words[1] >> (8 * i));
    uuid[i] = static_cast<uint8_t>(words[2] >> (8 * i));
    uuid[8 + i] = static_cast<uint8_t>(words[3] >> (8 * i));
  }
  uuid[6] = static_cast<uint8_t>((uuid[6] & 0x0F) | 0x80);  // version 8: custom
  uuid[8] = static_cast<uint8_t>((uuid[8] & 0x3F) | 0x80);  // variant 10b
}

// --- NvmfTarget -------------------------------------------------------------------------------------------------

std::optional<std::string> NvmfTarget::validate(const TargetConfig& config) {
  std::set<std::string> nqns;
  for (std::size_t s = 0; s < config.subsystems.size(); ++s) {
    const SubsystemConfig& sub = config.subsystems[s];
    const std::string where = "subsystems[" + std::to_string(s) + "]";
    if (auto problem = check_nqn(sub.nqn, where + ".nqn")) return problem;
    if (sub.nqn == kDiscoveryNqn) return where + ".nqn: the discovery NQN is the target's own";
    if (!nqns.insert(sub.nqn).second) return where + ".nqn: " + sub.nqn + " appears twice";
    if (sub.serial.empty() || sub.serial.size() > 20 || !printable_ascii(sub.serial))
      return where + ".serial: 1 to 20 printable ASCII characters";
    if (sub.model.empty() || sub.model.size() > 40 || !printable_ascii(sub.model))
      return where + ".model: 1 to 40 printable ASCII characters";
    for (std::size_t h = 0; h < sub.allowed_hosts.size(); ++h) {
      if (auto problem = check_nqn(sub.allowed_hosts[h], where + ".allowed_hosts[" + std::to_string(h) + "]"))
        return problem;
    }
    std::set<uint32_t> nsids;
    for (std::size_t n = 0; n < sub.namespaces.size(); ++n) {
      const NamespaceConfig& ns = sub.namespaces[n];
      const std::string at = where + ".namespaces[" + std::to_string(n) + "]";
      if (ns.nsid == 0 || ns.nsid >= 0xFFFFFFFE) return at + ".nsid: 1 to 0xFFFFFFFD";
      if (!nsids.insert(ns.nsid).second) return at + ".nsid: " + std::to_string(ns.nsid) + " appears twice";
      if (ns.block_size != 512 && ns.block_size != 4096) return at + ".block_size: 512 or 4096";
      if (!ns.backend) return at + ": no backend";
      if (ns.backend->size() < ns.block_size || ns.backend->size() % ns.block_size != 0)
        return at + ": the backend's size is a non-zero multiple of the block size";
    }
  }
  for (std::size_t p = 0; p < config.ports.size(); ++p) {
    const PortAddress& port = config.ports[p];
    const std::string where = "ports[" + std::to_string(p) + "]";
    if (port.address.empty() || port.address.size() > 255 || !printable_ascii(port.address))
      return where + ".address: 1 to 255 printable ASCII characters";
    if (port.port == 0) return where + ".port: not 0";
  }
  const TargetLimits& l = config.limits;
  if (l.max_queue_size < 2) return std::string("limits.max_queue_size: at least 2");
  if (l.max_io_queues == 0 || l.max_io_queues == 0xFFFF) return std::string("limits.max_io_queues: 1 to 65534");
  if (l.inline_data_size % 16 != 0 || l.inline_data_size > 16384)
    return std::string("limits.inline_data_size: a multiple of 16, at most 16384");
  if (l.mdts == 0 || l.mdts > 15) return std::string("limits.mdts: 1 to 15 (8 KiB to 128 MiB)");
  if (l.keep_alive_granularity_ms < 100 || l.keep_alive_granularity_ms % 100 != 0)
    return std::string("limits.keep_alive_granularity_ms: a multiple of 100");
  if (l.max_queues == 0) return std::string("limits.max_queues: at least 1");
  if (l.max_queues_per_host == 0) return std::string("limits.max_queues_per_host: at least 1");
  if (l.connect_timeout_ms == 0) return std::string("limits.connect_timeout_ms: at least 1");
  return std::nullopt;
}

NvmfTarget::NvmfTarget(TargetConfig config) : config_(std::move(config)) {
  if (validate(config_)) std::abort();  // the caller's contract: validate first
  auto discovery = std::make_unique<SubsystemState>();
  discovery->nqn = kDiscoveryNqn;
  discovery->serial = config_.subsystems.empty() ? std::string("uroce0001") : config_.subsystems.front().serial;
  discovery->model = "uroce NVMe-oF discovery";
  discovery->discovery = true;
  subsystems_.push_back(std::move(discovery));
  for (const SubsystemConfig& sub : config_.subsystems) {
    auto state = std::make_unique<SubsystemState>();
    state->nqn = sub.nqn;
    state->serial = sub.serial;
    state->model = sub.model;
    state->allowed_hosts = sub.allowed_hosts;
    for (const NamespaceConfig& ns : sub.namespaces) {
      NamespaceState n;
      n.nsid = ns.nsid;
      n.block_size = ns.block_size;
      n.block_shift = ns.block_size == 4096 ? 12 : 9;
      n.blocks = ns.backend->size() >> n.block_shift;
      n.backend = ns.backend;
      if (std::find(backends_.begin(), backends_.end(), ns.backend.get()) == backends_.end())
        backends_.push_back(ns.backend.get());
      derive_namespace_ids(sub.nqn, ns.nsid, n.nguid, n.uuid);
      state->namespaces.push_back(std::move(n));
      state->max_nsid = std::max(state->max_nsid, ns.nsid);
    }
    std::sort(state->namespaces.begin(), state->namespaces.end(),
              [](const NamespaceState& a, const NamespaceState& b) { return a.nsid < b.nsid; });
    subsystems_.push_back(std::move(state));
  }
}

NvmfTarget::~NvmfTarget() = default;

std::unique_ptr<NvmfQueue> NvmfTarget::open_queue(uint16_t qid, uint16_t sq_size) {
  return std::unique_ptr<NvmfQueue>(new NvmfQueue(*this, qid, std::max<uint16_t>(sq_size, 1)));
}

void NvmfTarget::clock(uint64_t now_ms) noexcept {
  if (!start_ms_) start_ms_ = now_ms;
}

void NvmfTarget::tick(uint64_t now_ms) {
  clock(now_ms);
  for (auto& controller : controllers_) {
    if (controller->dead || !controller->keep_alive_expired(now_ms)) continue;
    ++counters_.keep_alive_expired;
    destroy_controller(*controller);
  }
}

SubsystemState* NvmfTarget::find_subsystem(std::string_view nqn) const {
  for (const auto& subsystem : subsystems_)
    if (subsystem->nqn == nqn) return subsystem.get();
  return nullptr;
}

std::optional<uint16_t> NvmfTarget::allocate_cntlid() const {
  uint16_t id = next_cntlid_;
  for (uint32_t tries = 0; tries < kCntlidMax; ++tries, id = id >= kCntlidMax ? 1 : static_cast<uint16_t>(id + 1)) {
    const bool used = std::any_of(controllers_.begin(), controllers_.end(),
                                  [id](const std::unique_ptr<Controller>& c) { return c->cntlid == id; });
    if (!used) return id;
  }
  return std::nullopt;
}

void NvmfTarget::destroy_controller(Controller& controller) {
  if (controller.dead) return;
  controller.dead = true;
  ++counters_.controllers_destroyed;
}

void NvmfTarget::detach(NvmfQueue& queue) {
  Controller* controller = queue.controller_;
  if (controller == nullptr) return;
  queue.controller_ = nullptr;
  if (queue.qid_ == 0) {
    destroy_controller(*controller);
  } else if (!queue.disconnected_ && queue.qid_ < controller->io_qid.size()) {
    controller->io_qid[queue.qid_] = false;
  }
  if (--controller->queue_refs == 0 && controller->dead) {
    std::erase_if(controllers_, [controller](const std::unique_ptr<Controller>& c) { return c.get() == controller; });
  }
}

void NvmfTarget::count(NvmeStatus status, bool connect) {
  if (status == kStatusSuccess) return;
  ++counters_.errors;
  switch (status_code(status)) {
    case status_code(kScInvalidOpcode):
      ++counters_.invalid_opcode;
      break;
    case status_code(kScInvalidField):
      ++counters_.invalid_field;
      break;
    case status_code(kScLbaOutOfRange):
      ++counters_.lba_out_of_range;
      break;
    default:
      break;
  }
  if (connect) ++counters_.connect_rejected;
}

// --- NvmfQueue --------------------------------------------------------------------------------------------------

NvmfQueue::~NvmfQueue() {
  if (in_flight_ != 0) {  // the transport's contract is to wait; if it did not, the completions go nowhere
    for (auto& command : target_.io_commands_)
      if (command->queue == this) command->queue = nullptr;
  }
  target_.detach(*this);
}

std::size_t NvmfQueue::reap(std::span<CompletedCommand> out) {
  const std::size_t n = std::min(out.size(), completed_.size() - reaped_);
  std::copy_n(completed_.begin() + static_cast<std::ptrdiff_t>(reaped_), n, out.begin());
  reaped_ += n;
  if (reaped_ == completed_.size()) {
    completed_.clear();  // keeps its capacity: no allocation once the queue has seen its deepest burst
    reaped_ = 0;
  }
  return n;
}

bool NvmfQueue::dead() const noexcept { return disconnected_ || (controller_ != nullptr && controller_->dead); }

std::vector<uint16_t> NvmfQueue::take_held() { return std::exchange(held_, {}); }

CommandPlan NvmfQueue::prepare(const SqeView& sqe) const {
  // nvmet_req_init: no fused commands; fabrics hosts describe data with SGLs (PSDT 01b).
  if ((sqe.flags() & kFlagsFuseMask) != 0 || (sqe.flags() & kFlagsPsdtMask) != kFlagsPsdtSglMetabuf)
    return refuse(kScInvalidField);
  if (dead()) return refuse(kScAbortSqDeletion);
  CommandPlan plan =
      controller_ != nullptr ? controller_->prepare(*this, sqe) : target_.prepare_unconnected(*this, sqe);
  const uint64_t max_transfer = uint64_t{4096} << target_.config_.limits.mdts;
  if (plan.status == kStatusSuccess && plan.length > max_transfer) return refuse(kScInvalidField);
  return plan;
}

CommandPlan NvmfQueue::plan(std::span<const uint8_t, kSqeSize> sqe, std::size_t in_capsule_length) {
  sq_head_ = static_cast<uint16_t>((sq_head_ + 1U) % sq_size_);
  ++target_.counters_.commands;
  if (controller_ != nullptr) controller_->saw_traffic();
  const SqeView view(sqe);
  CommandPlan plan = prepare(view);
  if (plan.status == kStatusSuccess)
    plan.status = check_sgl(view.dptr(), qid_, plan.direction, plan.length, in_capsule_length, plan.sgl);
  if (plan.status != kStatusSuccess) {
    target_.count(plan.status, view.opcode() == kOpFabrics && view.fctype() == kFctypeConnect);
    plan.direction = DataDirection::kNone;
    plan.length = 0;
  }
  return plan;
}

CommandResult NvmfQueue::execute(std::span<const uint8_t, kSqeSize> sqe, std::span<uint8_t> data, uint64_t now_ms,
                                 uint32_t tag) {
  target_.clock(now_ms);
  const SqeView view(sqe);
  const bool connect = view.opcode() == kOpFabrics && view.fctype() == kFctypeConnect && controller_ == nullptr;
  const CommandPlan plan = prepare(view);
  CommandResult result;
  if (plan.status != kStatusSuccess) {
    result.status = plan.status;
  } else if (data.size() < plan.length) {
    result.status = kScInternal;  // the transport broke plan()'s contract
  } else if (connect) {
    result = target_.connect(*this, view, data.first(plan.length), now_ms);
  } else {
    Controller& controller = *controller_;
    result = controller.run(*this, view, data.first(plan.length), now_ms, tag);
    controller.heard_at(now_ms);
  }
  if (result.status == kStatusSuccess && !result.pending && plan.direction == DataDirection::kControllerToHost)
    result.data_length = plan.length;
  if (result.held) held_.push_back(command_id(sqe));
  target_.count(result.status, connect);
  return result;
}

}  // namespace uroce::nvmf
