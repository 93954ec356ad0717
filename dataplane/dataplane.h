// The dataplane of one process: EAL, mempools, ports, engines, redirect rings, capture, telemetry.
//
// Dataplane::start(config) brings everything up in order and launches one engine per configured lcore;
// stop() (or the destructor) takes it down in reverse. At most one Dataplane runs in a process at a time:
// its engines own their lcores. The control path (QP registration, resolve) runs on the caller's thread and
// reaches engines through their mailboxes (Engine::call).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "dataplane/engine.h"
#include "dataplane/pcapng_writer.h"
#include "dataplane/port.h"
#include "dataplane/qpn.h"
#include "dataplane/status.h"

struct rte_mempool;
struct rte_ring;

namespace uroce::dataplane {

class Dataplane {
 public:
  // Validates what the dataplane relies on, initialises the EAL if needed (init_eal), creates the pools,
  // opens the ports (waiting up to link_timeout for each link), and launches the engines.
  [[nodiscard]] static Result<std::unique_ptr<Dataplane>> start(
      const config::Config& config, std::chrono::milliseconds link_timeout = std::chrono::seconds(10));
  ~Dataplane();
  Dataplane(const Dataplane&) = delete;
  Dataplane& operator=(const Dataplane&) = delete;

  // Stops the engines, closes the capture file, the ports and the pools. Idempotent. Counters stay readable.
  void stop();
  // Stops the engines only: no packet is received or sent any more, while the ports stay open. Idempotent; after
  // it only stop() is useful. Lets two processes on a shared-memory link (net_memif) both stop polling before
  // either closes its end: DPDK 22.11's memif PMD unmaps its rings on disconnect even while the other side's
  // lcore is inside a burst, and that side crashes (dpdk-env.md §4).
  void stop_engines();

  // At most kMaxEngines: start() refuses more lcores.
  [[nodiscard]] EngineId engine_count() const noexcept { return static_cast<EngineId>(engines_.size()); }
  [[nodiscard]] Engine& engine(EngineId e) noexcept { return *engines_[e]; }
  [[nodiscard]] const Engine& engine(EngineId e) const noexcept { return *engines_[e]; }
  [[nodiscard]] std::size_t port_count() const noexcept { return ports_ ? ports_->size() : 0; }
  [[nodiscard]] const Port& port(PortIndex p) const noexcept { return (*ports_)[p]; }
  [[nodiscard]] std::optional<PortIndex> port_index(std::string_view name) const noexcept;
  [[nodiscard]] rte_mempool* pool(EngineId e) const noexcept { return pools_[e]; }
  [[nodiscard]] const config::Config& config() const noexcept { return config_; }

  // The MAC of `ip` on `port`: engine 0 looks it up in its neighbour table and, until it is there, sends an
  // ARP request (IPv4) or Neighbor Solicitation (IPv6) every ~100 ms. Call before a QP's first packet.
  [[nodiscard]] Result<proto::MacAddr> resolve(PortIndex port, const config::IpAddress& ip,
                                               std::chrono::milliseconds timeout);

  // A port's counters summed over the engines, as (name, value).
  [[nodiscard]] std::vector<std::pair<std::string, uint64_t>> port_counter_values(PortIndex p) const;

 private:
  Dataplane() = default;
  [[gnu::cold]] Status bring_up(std::chrono::milliseconds link_timeout);

  config::Config config_;
  std::vector<rte_mempool*> pools_;  // [engine]
  std::unique_ptr<PortSet> ports_;
  std::vector<rte_ring*> mailboxes_;              // [engine]
  std::vector<std::vector<rte_ring*>> redirect_;  // [from][to], nullptr on the diagonal
  std::unique_ptr<PcapngWriter> capture_;
  std::unique_ptr<EngineActivity[]> activity_;  // [engine], read by engines that wait for each other
  std::vector<std::unique_ptr<Engine>> engines_;
  bool published_ = false;  // to telemetry
  bool active_ = false;     // holds the one-per-process slot
};

}  // namespace uroce::dataplane
