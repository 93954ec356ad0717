// Private to apps/nvmf/nvme/: the state behind NvmfTarget's public face. A subsystem as it runs (its namespaces
// with their identifiers and counters), and a controller: what one host's Fabrics Connect on an admin queue made,
// the I/O queues that joined it, its properties (CC, CSTS), features and keep-alive clock.
//
// Commands go through two steps, as the public NvmfQueue does: prepare_*() decides what a command needs without
// changing anything (so execute can ask again and the fuzzer can call both in any order), run_*() does it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "apps/nvmf/nvme/nvme_defs.h"
#include "apps/nvmf/nvme/nvmf_target.h"

namespace uroce::nvmf::detail {

// nvmet gives a discovery controller whose host asked for no keep-alive (KATO 0, in its Connect or a later Set
// Features) two minutes anyway (NVMET_DISC_KATO_MS), so that stale discovery sessions end: any host may open one,
// and each holds a queue.
inline constexpr uint32_t kDiscoveryDefaultKatoMs = 120000;

struct NamespaceState {
  uint32_t nsid = 0;
  uint32_t block_size = 512;
  unsigned block_shift = 9;
  uint64_t blocks = 0;  // nsze = ncap = nuse
  std::shared_ptr<Backend> backend;
  std::array<uint8_t, 16> nguid{};  // derived from the subsystem NQN and NSID: stable across restarts
  std::array<uint8_t, 16> uuid{};
  // For the SMART / Health log.
  uint64_t read_commands = 0;
  uint64_t write_commands = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t media_errors = 0;
};

struct SubsystemState {
  std::string nqn;
  std::string serial;
  std::string model;
  bool discovery = false;
  std::vector<NamespaceState> namespaces;  // ascending NSID
  std::vector<std::string> allowed_hosts;  // empty: any host
  uint32_t max_nsid = 0;                   // Identify Controller NN

  [[nodiscard]] NamespaceState* find(uint32_t nsid);
  [[nodiscard]] const NamespaceState* find(uint32_t nsid) const;
  [[nodiscard]] bool host_allowed(std::string_view host_nqn) const;
};

// One command's backend I/O: a request per namespace (Flush of every namespace) or per range (Dataset
// Management), and the command's response once the last one finished. NvmfTarget owns them; a queue that closes
// first leaves `queue` null and the response is dropped.
struct IoCommand {
  NvmfQueue* queue = nullptr;
  NamespaceState* ns = nullptr;  // for the media error count (the first namespace for a Flush of all)
  uint32_t tag = 0;
  BackendOp op = BackendOp::kRead;
  uint32_t data_length = 0;  // a Read's bytes
  uint32_t parts = 0;        // requests not finished yet
  int error = 0;             // the first failure
};

// The NGUID and UUID of namespace `nsid` in subsystem `nqn` (FNV-1a over both, two seeds; the UUID carries the
// RFC 9562 version 8 and variant bits).
void derive_namespace_ids(std::string_view nqn, uint32_t nsid, std::array<uint8_t, 16>& nguid,
                          std::array<uint8_t, 16>& uuid);

}  // namespace uroce::nvmf::detail

namespace uroce::nvmf {

class Controller {
 public:
  Controller(NvmfTarget& target, detail::SubsystemState& subsystem, uint16_t cntlid, std::string host_nqn,
             uint32_t kato_ms, uint64_t now_ms);

  // Commands on a queue connected to this controller (qid 0: admin, else I/O).
  [[nodiscard]] CommandPlan prepare(const NvmfQueue& queue, const detail::SqeView& sqe) const;
  [[nodiscard]] CommandResult run(NvmfQueue& queue, const detail::SqeView& sqe, std::span<uint8_t> data,
                                  uint64_t now_ms, uint32_t tag);

  [[nodiscard]] bool ready() const noexcept { return (cc_ & detail::kCcEnable) && (csts_ & detail::kCstsReady); }
  [[nodiscard]] uint64_t cap() const;
  // The I/O queue IDs a host may connect: what Set Features Number of Queues granted, else the limit.
  [[nodiscard]] uint16_t io_queue_limit() const noexcept;
  // Keep-alive: a command arrived (plan() has no clock: tick() stamps it unless execute() does first) or ran at
  // now_ms.
  void saw_traffic() noexcept { traffic_seen_ = true; }
  void heard_at(uint64_t now_ms) noexcept;
  [[nodiscard]] bool keep_alive_expired(uint64_t now_ms) noexcept;

  NvmfTarget& target;
  detail::SubsystemState& subsystem;
  const uint16_t cntlid;
  const std::string host_nqn;
  bool dead = false;         // destroyed: its queues report dead(); freed once the last one goes
  uint32_t queue_refs = 0;   // connected queues (the admin queue included)
  std::vector<bool> io_qid;  // I/O queue IDs in use, by qid

 private:
  // Fabrics (fabrics.cc).
  [[nodiscard]] CommandPlan prepare_fabrics(const NvmfQueue& queue, const detail::SqeView& sqe) const;
  [[nodiscard]] CommandResult run_fabrics(NvmfQueue& queue, const detail::SqeView& sqe);
  [[nodiscard]] NvmeStatus property_get(uint32_t offset, bool eight_bytes, uint64_t& value) const;
  void write_cc(uint32_t value);
  // Admin (admin.cc) and discovery (discovery.cc).
  [[nodiscard]] CommandPlan prepare_admin(const detail::SqeView& sqe) const;
  [[nodiscard]] CommandResult run_admin(NvmfQueue& queue, const detail::SqeView& sqe, std::span<uint8_t> data,
                                        uint64_t now_ms);
  void identify_controller(std::span<uint8_t> out) const;
  void identify_namespace(const detail::NamespaceState& ns, std::span<uint8_t> out) const;
  [[nodiscard]] NvmeStatus identify(const detail::SqeView& sqe, std::span<uint8_t> out);
  [[nodiscard]] NvmeStatus get_log_page(const detail::SqeView& sqe, std::span<uint8_t> out, uint64_t now_ms);
  void smart_log(uint32_t nsid, uint64_t now_ms, std::span<uint8_t, detail::kSmartLogSize> log) const;
  [[nodiscard]] uint64_t discovery_log_size() const;
  void discovery_log(uint64_t offset, std::span<uint8_t> out) const;
  [[nodiscard]] CommandResult set_features(const detail::SqeView& sqe, uint64_t now_ms);
  [[nodiscard]] CommandResult get_features(const detail::SqeView& sqe) const;
  // NVM I/O (io.cc).
  [[nodiscard]] CommandPlan prepare_io(const detail::SqeView& sqe) const;
  [[nodiscard]] CommandResult run_io(NvmfQueue& queue, const detail::SqeView& sqe, std::span<uint8_t> data,
                                     uint32_t tag);
  [[nodiscard]] CommandResult dataset_management(NvmfQueue& queue, detail::NamespaceState& ns,
                                                 const detail::SqeView& sqe, std::span<const uint8_t> ranges,
                                                 uint32_t tag);

  uint32_t kato_ms_;
  uint64_t last_heard_ms_;
  bool traffic_seen_ = false;
  uint32_t cc_ = 0;
  uint32_t csts_ = 0;
  uint16_t granted_io_queues_ = 0;  // 0: Number of Queues not set yet
  uint32_t async_event_config_ = 0;
};

}  // namespace uroce::nvmf
