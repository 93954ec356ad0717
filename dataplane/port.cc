#include "dataplane/port.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <thread>

#include <rte_bus_vdev.h>
#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include "dataplane/ring.h"

namespace uroce::dataplane {

namespace {

std::string errno_text(int error) { return rte_strerror(error < 0 ? -error : error); }

std::string port_label(const config::PortConfig& pc) { return "port " + pc.name + " (" + pc.device + ")"; }

// The first ethdev whose name or whose device's name is `name` (mlx5 names ports after their device).
std::optional<uint16_t> find_ethdev(const std::string& name) {
  uint16_t id = 0;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &id) == 0) return id;
  RTE_ETH_FOREACH_DEV(id) {
    rte_eth_dev_info info{};
    if (rte_eth_dev_info_get(id, &info) == 0 && info.device != nullptr && name == rte_dev_name(info.device)) return id;
  }
  return std::nullopt;
}

void free_ring_contents(rte_ring* ring) {
  rte_mbuf* mbufs[kMaxRingBurst];
  while (const unsigned n = ring_sc_dequeue_burst(ring, mbufs, kMaxRingBurst)) rte_pktmbuf_free_bulk(mbufs, n);
}

std::atomic<unsigned> g_next_instance{0};

}  // namespace

bool Port::owns(proto::Ipv4Addr a) const noexcept { return std::find(ipv4.begin(), ipv4.end(), a) != ipv4.end(); }
bool Port::owns(const Ipv6Bytes& a) const noexcept { return std::find(ipv6.begin(), ipv6.end(), a) != ipv6.end(); }

proto::Gid gid_of(const config::IpAddress& ip) noexcept {
  if (!ip.is_v6) {
    return proto::gid_from_ipv4(proto::Ipv4Addr{static_cast<uint32_t>(ip.bytes[0]) << 24 |
                                                static_cast<uint32_t>(ip.bytes[1]) << 16 |
                                                static_cast<uint32_t>(ip.bytes[2]) << 8 | ip.bytes[3]});
  }
  proto::Gid g;
  std::copy(ip.bytes.begin(), ip.bytes.end(), g.begin());
  return g;
}

config::IpAddress ip_of_gid(const proto::Gid& gid) noexcept {
  config::IpAddress ip;
  if (proto::gid_is_ipv4_mapped(gid)) {
    std::copy_n(gid.begin() + 12, 4, ip.bytes.begin());
  } else {
    ip.is_v6 = true;
    ip.prefix_length = 128;
    std::copy(gid.begin(), gid.end(), ip.bytes.begin());
  }
  return ip;
}

proto::MacAddr mac_from_bytes(const uint8_t* b) noexcept {
  uint64_t v = 0;
  for (int i = 0; i < 6; ++i) v = v << 8 | b[i];
  return proto::MacAddr{v};
}

void mac_to_bytes(proto::MacAddr mac, uint8_t* b) noexcept {
  for (int i = 0; i < 6; ++i) b[i] = static_cast<uint8_t>(mac.value() >> (8 * (5 - i)));
}

std::string mac_to_string(proto::MacAddr mac) {
  uint8_t b[6];
  mac_to_bytes(mac, b);
  char text[18];
  std::snprintf(text, sizeof(text), "%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4], b[5]);
  return text;
}

std::optional<PortIndex> PortSet::find(std::string_view name) const noexcept {
  for (const Port& p : ports_)
    if (p.name == name) return p.index;
  return std::nullopt;
}

Result<std::unique_ptr<PortSet>> PortSet::open(const config::Config& config, std::span<rte_mempool* const> pools,
                                               std::chrono::milliseconds link_timeout) {
  std::unique_ptr<PortSet> set(new PortSet());
  set->instance_ = g_next_instance.fetch_add(1, std::memory_order_relaxed);
  const unsigned queues = static_cast<unsigned>(pools.size());
  set->ports_.resize(config.ports.size());
  set->started_.assign(config.ports.size(), false);
  set->have_ethdev_.assign(config.ports.size(), false);
  set->steering_.resize(config.ports.size());
  for (std::size_t i = 0; i < config.ports.size(); ++i) {
    const config::PortConfig& pc = config.ports[i];
    Port& p = set->ports_[i];
    p.index = static_cast<PortIndex>(i);
    p.name = pc.name;
    p.mtu = pc.mtu;
    auto spec = parse_device(pc.device);
    if (!spec.ok()) return Status::error("ports[" + std::to_string(i) + "]." + spec.error());
    p.device = std::move(spec.value());
    for (const config::IpAddress& a : pc.addresses) {
      if (a.is_v6) {
        p.ipv6.push_back(a.bytes);
      } else {
        p.ipv4.emplace_back(uint32_t{a.bytes[0]} << 24 | uint32_t{a.bytes[1]} << 16 | uint32_t{a.bytes[2]} << 8 |
                            a.bytes[3]);
      }
    }
  }
  if (Status s = set->create_ring_links(config, queues); !s.ok()) return s;
  for (std::size_t i = 0; i < config.ports.size(); ++i) {
    if (Status s = set->open_one(set->ports_[i], config.ports[i], pools); !s.ok()) return s;
  }
  // Links come up only once every port has started, so that two ports of this set may be each other's peer (both
  // ends of one memif socket).
  const auto deadline = std::chrono::steady_clock::now() + link_timeout;
  for (std::size_t i = 0; i < config.ports.size(); ++i) {
    for (;;) {
      rte_eth_link link{};
      if (rte_eth_link_get_nowait(set->ports_[i].port_id, &link) == 0 && link.link_status == RTE_ETH_LINK_UP) {
        set->ports_[i].link_speed_mbps = link.link_speed == RTE_ETH_SPEED_NUM_UNKNOWN ? 0 : link.link_speed;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return Status::error(port_label(config.ports[i]) + ": the link is still down after " +
                             std::to_string(link_timeout.count()) + " ms (is the peer running?)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return set;
}

Status PortSet::create_ring_links(const config::Config& config, unsigned queues) {
  std::map<std::string, std::vector<std::size_t>> links;  // link name -> port positions
  for (std::size_t i = 0; i < ports_.size(); ++i)
    if (ports_[i].device.kind == DeviceKind::kRingLink) links[ports_[i].device.name].push_back(i);
  unsigned link_number = 0;
  for (const auto& [link, ends] : links) {
    if (ends.size() != 2) {
      return Status::error("ring link '" + link + "' has " + std::to_string(ends.size()) +
                           " ports; exactly two ports must name it");
    }
    // rings[d][q]: direction d (0: end 0 -> end 1, 1: end 1 -> end 0), queue q. SP/SC: one engine produces,
    // the peer port's same-numbered queue (one engine) consumes.
    std::vector<rte_ring*> rings[2];
    for (int d = 0; d < 2; ++d) {
      const config::PortConfig& receiver = config.ports[ends[1 - d]];
      for (unsigned q = 0; q < queues; ++q) {
        char name[RTE_RING_NAMESIZE];
        std::snprintf(name, sizeof(name), "uroce%u_l%u_%d_%u", instance_, link_number, d, q);
        rte_ring* r = rte_ring_create(name, receiver.rx_descriptors, rte_lcore_to_socket_id(engine_lcore(q)),
                                      RING_F_SP_ENQ | RING_F_SC_DEQ | RING_F_EXACT_SZ);
        if (r == nullptr)
          return Status::error("ring link '" + link + "': rte_ring_create(" + name + "): " + errno_text(rte_errno));
        rings_.push_back(r);
        rings[d].push_back(r);
      }
    }
    for (int end = 0; end < 2; ++end) {
      Port& p = ports_[ends[end]];
      const std::string ethdev = "uroce" + std::to_string(instance_) + "_" + p.name;
      // End 0 receives direction 1 and transmits direction 0; end 1 the reverse.
      const int id =
          rte_eth_from_rings(ethdev.c_str(), rings[1 - end].data(), queues, rings[end].data(), queues, rte_socket_id());
      if (id < 0)
        return Status::error(port_label(config.ports[ends[end]]) + ": rte_eth_from_rings: " + errno_text(rte_errno));
      p.port_id = static_cast<uint16_t>(id);
      have_ethdev_[p.index] = true;
    }
    ++link_number;
  }
  return {};
}

Status PortSet::open_one(Port& port, const config::PortConfig& pc, std::span<rte_mempool* const> pools) {
  const std::string label = port_label(pc);
  const auto queues = static_cast<uint16_t>(pools.size());

  if (port.device.kind == DeviceKind::kVdev) {
    auto id = find_ethdev(port.device.name);
    if (!id) {
      // Not on the EAL command line (or removed by an earlier PortSet): hot-plug it.
      if (const int rc = rte_vdev_init(port.device.name.c_str(), port.device.args.c_str()); rc < 0) {
        return Status::error(label + ": the vdev failed to probe: " + errno_text(rc) +
                             " (see the PMD's message above)");
      }
      id = find_ethdev(port.device.name);
    }
    if (!id) return Status::error(label + ": the vdev probed but created no ethdev named " + port.device.name);
    port.port_id = *id;
    have_ethdev_[port.index] = true;
  } else if (port.device.kind == DeviceKind::kPci) {
    const auto id = find_ethdev(port.device.name);
    if (!id) return Status::error(label + ": no ethdev for this PCI device: did it fail to probe? (see the EAL log)");
    port.port_id = *id;
    have_ethdev_[port.index] = true;
  }
  const uint16_t id = port.port_id;

  rte_eth_dev_info info{};
  if (const int rc = rte_eth_dev_info_get(id, &info); rc != 0)
    return Status::error(label + ": rte_eth_dev_info_get: " + errno_text(rc));
  if (info.max_rx_queues < queues || info.max_tx_queues < queues) {
    return Status::error(label + ": " + std::to_string(queues) + " engines need as many RX and TX queues; the " +
                         info.driver_name + " device has " + std::to_string(info.max_rx_queues) + " RX and " +
                         std::to_string(info.max_tx_queues) + " TX");
  }
  const SteeringTarget steering_target{id, queues, !port.ipv4.empty(), !port.ipv6.empty(), label};
  // A ring link has no rte_flow and nothing to steer: its queues are rings. `auto` skips it without a word.
  const config::Steering steering = port.device.kind == DeviceKind::kRingLink ? config::Steering::kRss : pc.steering;
  PortSteering& port_steering = steering_[port.index];
  port_steering.request_isolation(steering_target, steering);

  rte_eth_conf conf{};
  // RSS over the UDP 4-tuple, where the device hashes UDP at all: one QP's packets (fixed addresses and UDP ports)
  // stay on one queue, in order, and QPs spread over the engines. It is what the fallback runs on, and what
  // traffic no rule matches takes when rte_flow rules run un-isolated.
  const uint64_t udp_hash = info.flow_type_rss_offloads & (RTE_ETH_RSS_NONFRAG_IPV4_UDP | RTE_ETH_RSS_NONFRAG_IPV6_UDP);
  if (queues > 1 && udp_hash != 0 && !port_steering.isolated()) {
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_hf = udp_hash;
  }
  if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  // The NIC checks received IPv4 header checksums and says so in each mbuf; the engine then skips its own sum
  // (EngineContext::dispatch). Vdevs (ring, memif, af_packet) have no such offload and report nothing.
  if (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM) conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
  if (const int rc = rte_eth_dev_configure(id, queues, queues, &conf); rc != 0)
    return Status::error(label + ": rte_eth_dev_configure: " + errno_text(rc));
  uint16_t rx_descriptors = pc.rx_descriptors;
  uint16_t tx_descriptors = pc.tx_descriptors;
  if (const int rc = rte_eth_dev_adjust_nb_rx_tx_desc(id, &rx_descriptors, &tx_descriptors); rc != 0)
    return Status::error(label + ": rte_eth_dev_adjust_nb_rx_tx_desc: " + errno_text(rc));
  for (uint16_t q = 0; q < queues; ++q) {
    const auto socket = static_cast<int>(rte_lcore_to_socket_id(engine_lcore(q)));
    if (const int rc = rte_eth_rx_queue_setup(id, q, rx_descriptors, socket, nullptr, pools[q]); rc != 0)
      return Status::error(label + ": rte_eth_rx_queue_setup(queue " + std::to_string(q) + "): " + errno_text(rc));
    if (const int rc = rte_eth_tx_queue_setup(id, q, tx_descriptors, socket, nullptr); rc != 0)
      return Status::error(label + ": rte_eth_tx_queue_setup(queue " + std::to_string(q) + "): " + errno_text(rc));
  }

  // MTU: ring, memif and pcap have no MTU (-ENOTSUP) and af_packet refuses > 1500 (-EINVAL), yet all carry
  // 4 KiB frames (dpdk-env.md §4). A vdev's refusal is therefore only a warning; a NIC's is an error.
  if (const int rc = rte_eth_dev_set_mtu(id, pc.mtu); rc != 0 && rc != -ENOTSUP) {
    if (port.device.kind == DeviceKind::kPci)
      return Status::error(label + ": rte_eth_dev_set_mtu(" + std::to_string(pc.mtu) + "): " + errno_text(rc));
    RTE_LOG(WARNING, USER1, "uroce: %s: rte_eth_dev_set_mtu(%u): %s; continuing (vdevs carry large frames anyway)\n",
            label.c_str(), pc.mtu, errno_text(rc).c_str());
  }

  if (pc.mac) {
    rte_ether_addr addr{};
    std::memcpy(addr.addr_bytes, pc.mac->data(), 6);
    if (rte_eth_dev_default_mac_addr_set(id, &addr) != 0) {
      // The device keeps its own MAC: receive everything and filter on ours in software.
      (void)rte_eth_promiscuous_enable(id);
    }
    port.mac = mac_from_bytes(pc.mac->data());
  } else {
    rte_ether_addr addr{};
    if (const int rc = rte_eth_macaddr_get(id, &addr); rc != 0)
      return Status::error(label + ": rte_eth_macaddr_get: " + errno_text(rc));
    port.mac = mac_from_bytes(addr.addr_bytes);
  }
  // Neighbor Solicitations go to solicited-node multicast MACs (33:33:ff:..).
  if (!port.ipv6.empty()) (void)rte_eth_allmulticast_enable(id);

  if (const int rc = rte_eth_dev_start(id); rc != 0)
    return Status::error(label + ": rte_eth_dev_start: " + errno_text(rc));
  started_[port.index] = true;

  auto mode = port_steering.install(steering_target, steering);
  if (!mode.ok()) return mode.status();
  port.steering = *mode;
  return {};
}

PortSet::~PortSet() { close(); }

void PortSet::close() noexcept {
  if (closed_) return;
  closed_ = true;
  const std::function<void()> stop_and_close = [this] {
    for (Port& p : ports_) {
      if (have_ethdev_[p.index]) steering_[p.index].remove(p.port_id);
      if (started_[p.index]) (void)rte_eth_dev_stop(p.port_id);
    }
    for (Port& p : ports_) {
      if (!have_ethdev_[p.index]) continue;
      if (p.device.kind == DeviceKind::kVdev) {
        (void)rte_vdev_uninit(p.device.name.c_str());  // closes the ethdev and lets a later PortSet probe it again
      } else {
        (void)rte_eth_dev_close(p.port_id);
      }
    }
  };
  // net_memif handles its peer's hang-up on the EAL interrupt thread: memif_disconnect() there closes the queue
  // interrupts and frees the shared regions. Stopping and closing the port do the same from this thread, and DPDK 22.11
  // orders neither against the other. A peer that closes at about the moment we do thus gets them freed twice, or after
  // the close freed the port's private data: a SEGV in rte_free() under memif_free_regions() on the interrupt thread
  // (seen in CI, after all the traffic). Run on that thread, our teardown waits its turn behind the PMD's handler.
  // Other PMDs still close on this thread: none of ours hands teardown work to the interrupt thread.
  const bool any_memif = std::any_of(ports_.begin(), ports_.end(), [this](const Port& p) {
    rte_eth_dev_info info{};
    return have_ethdev_[p.index] && rte_eth_dev_info_get(p.port_id, &info) == 0 && info.driver_name != nullptr &&
           std::strcmp(info.driver_name, "net_memif") == 0;
  });
  if (any_memif) {
    run_on_interrupt_thread(stop_and_close);
  } else {
    stop_and_close();
  }
  // The ports are gone, so nothing else touches the rings: free what the peers sent but nobody received.
  for (rte_ring* r : rings_) {
    free_ring_contents(r);
    rte_ring_free(r);
  }
  rings_.clear();
}

}  // namespace uroce::dataplane
