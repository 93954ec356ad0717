// Port bring-up: every configured port opened with one RX and one TX queue per engine, started, link up, and RoCE
// steered to the engines' queues by rte_flow rules where the PMD takes them (steering.h).
//
//   net_<driver><n>[,args]  a vdev: the one EAL probed from --vdev, else hot-plugged here with rte_vdev_init
//   <PCI address>[,args]    a device EAL probed from -a
//   ring:<link>             one end of an in-process net_ring link, made here with rte_eth_from_rings: queue q
//                           of one end transmits into queue q of the other end's receive side
//
// Closing stops every port and closes it: ring ports are destroyed with their rings (mbufs still in them are
// freed), vdevs are removed with rte_vdev_uninit so that a later PortSet in the same process can probe them
// again, and PCI ports are closed (they cannot be reopened in this process). A set with a memif port does all of
// that on the EAL interrupt thread, where the memif PMD handles its peer's disconnect (see close()).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "dataplane/eal.h"
#include "dataplane/qpn.h"
#include "dataplane/status.h"
#include "dataplane/steering.h"
#include "proto/packet_builder.h"
#include "proto/types.h"

struct rte_mempool;
struct rte_ring;

namespace uroce::dataplane {

using Ipv6Bytes = std::array<uint8_t, 16>;

struct Port {
  PortIndex index = 0;
  std::string name;
  DeviceSpec device;
  uint16_t port_id = 0;               // DPDK's
  proto::MacAddr mac;                 // our L2 address: the configured one, else the device's
  std::vector<proto::Ipv4Addr> ipv4;  // our addresses, answered by ARP
  std::vector<Ipv6Bytes> ipv6;        // our addresses, answered by ND
  uint16_t mtu = 1500;
  uint32_t link_speed_mbps = 0;                // as the PMD reports it once the link is up; 0: unknown (some vdevs)
  SteeringMode steering = SteeringMode::kRss;  // how RoCE reaches the engines' queues (steering.h)

  [[nodiscard]] bool owns(proto::Ipv4Addr a) const noexcept;
  [[nodiscard]] bool owns(const Ipv6Bytes& a) const noexcept;
};

class PortSet {
 public:
  // Opens every port in config.ports; pools[e] is engine e's mempool, used by queue e of every port.
  [[nodiscard]] static Result<std::unique_ptr<PortSet>> open(const config::Config& config,
                                                             std::span<rte_mempool* const> pools,
                                                             std::chrono::milliseconds link_timeout);
  ~PortSet();  // close()
  PortSet(const PortSet&) = delete;
  PortSet& operator=(const PortSet&) = delete;

  [[nodiscard]] std::size_t size() const noexcept { return ports_.size(); }
  [[nodiscard]] const Port& operator[](PortIndex i) const noexcept { return ports_[i]; }
  [[nodiscard]] std::span<const Port> ports() const noexcept { return ports_; }
  [[nodiscard]] std::optional<PortIndex> find(std::string_view name) const noexcept;
  // Stops and closes every port (see above). Idempotent; the Port descriptions stay readable.
  void close() noexcept;

 private:
  PortSet() = default;
  [[gnu::cold]] Status create_ring_links(const config::Config& config, unsigned queues);
  // Opens and starts one port; open() then waits for every link.
  [[gnu::cold]] Status open_one(Port& port, const config::PortConfig& pc, std::span<rte_mempool* const> pools);

  std::vector<Port> ports_;
  std::vector<bool> have_ethdev_;  // port_id is valid and ours to close
  std::vector<bool> started_;
  std::vector<PortSteering> steering_;  // [port]: its rte_flow rules, removed before it stops
  std::vector<rte_ring*> rings_;        // ring links' rings, freed after their ports close
  unsigned instance_ = 0;
  bool closed_ = false;  // makes ring and ethdev names unique across PortSets in one process
};

// Conversions between DPDK's byte-array MAC and the strong wire type.
[[nodiscard]]  // An address as its RoCEv2 GID (IPv4 mapped as ::ffff:a.b.c.d), and back.
[[nodiscard]] proto::Gid
gid_of(const config::IpAddress& ip) noexcept;
[[nodiscard]] config::IpAddress ip_of_gid(const proto::Gid& gid) noexcept;
proto::MacAddr mac_from_bytes(const uint8_t* bytes) noexcept;
void mac_to_bytes(proto::MacAddr mac, uint8_t* bytes) noexcept;
[[nodiscard]] std::string mac_to_string(proto::MacAddr mac);

}  // namespace uroce::dataplane
