#include "dataplane/dataplane.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include <arpa/inet.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include "dataplane/eal.h"
#include "dataplane/neighbor.h"
#include "dataplane/ring.h"
#include "dataplane/telemetry.h"

namespace uroce::dataplane {

namespace {

constexpr unsigned kMailboxSize = 64;  // each poster waits for its command, so this bounds control threads
constexpr std::size_t kMaxPorts = 16;
constexpr auto kSolicitInterval = std::chrono::milliseconds(100);

// One Dataplane per process: its engines own their lcores.
std::atomic<bool> g_dataplane_active{false};
std::atomic<unsigned> g_next_instance{0};

bool is_power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

Status validate(const config::Config& c) {
  const config::EngineConfig& e = c.engine;
  if (c.eal.lcores.empty() || c.eal.lcores.size() > kMaxEngines) {
    return Status::error("eal.lcores: 1.." + std::to_string(kMaxEngines) + " engines, got " +
                         std::to_string(c.eal.lcores.size()));
  }
  if (e.rx_burst == 0 || e.rx_burst > kMaxBurst || e.tx_burst == 0 || e.tx_burst > kMaxBurst)
    return Status::error("engine.rx_burst and engine.tx_burst must be 1.." + std::to_string(kMaxBurst));
  if (!is_power_of_two(e.redirect_ring_size) || e.redirect_ring_size < 2) {
    return Status::error("engine.redirect_ring_size must be a power of two >= 2, got " +
                         std::to_string(e.redirect_ring_size));
  }
  if (e.max_qps_per_engine < 2 || e.max_qps_per_engine > kQpnLocalMask)
    return Status::error("engine.max_qps_per_engine must be 2.." + std::to_string(kQpnLocalMask));
  if (e.mbufs_per_engine == 0) return Status::error("engine.mbufs_per_engine must be positive");
  if (e.mbuf_data_room < RTE_PKTMBUF_HEADROOM + 128) {
    return Status::error("engine.mbuf_data_room must leave room for a frame after the " +
                         std::to_string(RTE_PKTMBUF_HEADROOM) + "-byte headroom");
  }
  if (c.ports.size() > kMaxPorts) return Status::error("at most " + std::to_string(kMaxPorts) + " ports");
  std::set<std::string> names;
  for (std::size_t i = 0; i < c.ports.size(); ++i) {
    if (c.ports[i].name.empty() || !names.insert(c.ports[i].name).second)
      return Status::error("ports[" + std::to_string(i) + "].name: empty or repeated ('" + c.ports[i].name + "')");
  }
  return {};
}

std::string ip_to_string(const config::IpAddress& ip) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(ip.is_v6 ? AF_INET6 : AF_INET, ip.bytes.data(), text, sizeof(text));
  return text;
}

void free_ring(rte_ring*& ring) {
  if (ring == nullptr) return;
  rte_mbuf* mbufs[kMaxRingBurst];
  while (const unsigned n = ring_sc_dequeue_burst(ring, mbufs, kMaxRingBurst)) rte_pktmbuf_free_bulk(mbufs, n);
  rte_ring_free(ring);
  ring = nullptr;
}

}  // namespace

Result<std::unique_ptr<Dataplane>> Dataplane::start(const config::Config& config,
                                                    std::chrono::milliseconds link_timeout) {
  if (Status s = validate(config); !s.ok()) return s;
  bool expected = false;
  if (!g_dataplane_active.compare_exchange_strong(expected, true))
    return Status::error("another Dataplane is running in this process (its engines own the lcores): stop it first");
  std::unique_ptr<Dataplane> dp(new Dataplane());
  dp->active_ = true;
  dp->config_ = config;
  if (Status s = dp->bring_up(link_timeout); !s.ok()) return s;  // the destructor undoes what was done
  return dp;
}

Status Dataplane::bring_up(std::chrono::milliseconds link_timeout) {
  if (Status s = init_eal(config_); !s.ok()) return s;
  const auto engines = static_cast<EngineId>(config_.eal.lcores.size());
  const unsigned instance = g_next_instance.fetch_add(1, std::memory_order_relaxed);
  const config::EngineConfig& ec = config_.engine;

  for (EngineId e = 0; e < engines; ++e) {
    const std::string name = "uroce" + std::to_string(instance) + "_pool" + std::to_string(e);
    // A per-lcore cache may hold at most 1/1.5 of the pool (rte_mempool_create's rule) and 512 objects.
    const unsigned cache = std::min<unsigned>(
        {ec.mbuf_cache, RTE_MEMPOOL_CACHE_MAX_SIZE, static_cast<unsigned>(ec.mbufs_per_engine / 1.5)});
    rte_mempool* pool = rte_pktmbuf_pool_create(name.c_str(), ec.mbufs_per_engine, cache, 0, ec.mbuf_data_room,
                                                static_cast<int>(rte_lcore_to_socket_id(engine_lcore(e))));
    if (pool == nullptr) {
      return Status::error("engine " + std::to_string(e) + ": rte_pktmbuf_pool_create(" +
                           std::to_string(ec.mbufs_per_engine) + " mbufs of " + std::to_string(ec.mbuf_data_room) +
                           " bytes): " + rte_strerror(rte_errno) +
                           " (without hugepages, eal.memory_mb must be 2-3x the pools)");
    }
    pools_.push_back(pool);
  }

  auto ports = PortSet::open(config_, pools_, link_timeout);
  if (!ports.ok()) return ports.status();
  ports_ = std::move(ports.value());

  auto make_ring = [&](const std::string& name, unsigned size, EngineId consumer) -> rte_ring* {
    return rte_ring_create(name.c_str(), size, static_cast<int>(rte_lcore_to_socket_id(engine_lcore(consumer))),
                           RING_F_SP_ENQ | RING_F_SC_DEQ);
  };
  const std::string prefix = "uroce" + std::to_string(instance) + "_";
  redirect_.assign(engines, std::vector<rte_ring*>(engines, nullptr));
  for (EngineId e = 0; e < engines; ++e) {
    rte_ring* mailbox = make_ring(prefix + "mbox" + std::to_string(e), kMailboxSize, e);
    if (mailbox == nullptr) return Status::error("rte_ring_create(mailbox): " + std::string(rte_strerror(rte_errno)));
    mailboxes_.push_back(mailbox);
    for (EngineId to = 0; to < engines; ++to) {
      if (to == e) continue;
      redirect_[e][to] =
          make_ring(prefix + "r" + std::to_string(e) + "_" + std::to_string(to), ec.redirect_ring_size, to);
      if (redirect_[e][to] == nullptr) {
        return Status::error("rte_ring_create(redirect " + std::to_string(e) + "->" + std::to_string(to) +
                             "): " + rte_strerror(rte_errno));
      }
    }
  }

  if (!config_.capture.pcapng_path.empty()) {
    std::vector<std::string> names;
    for (const Port& p : ports_->ports()) names.push_back(p.name);
    auto writer = PcapngWriter::open(config_.capture.pcapng_path, names, config_.capture.snap_length, engines);
    if (!writer.ok()) return writer.status();
    capture_ = std::move(writer.value());
  }

  activity_ = std::make_unique<EngineActivity[]>(engines);
  for (EngineId e = 0; e < engines; ++e) {
    EngineSetup setup;
    setup.id = e;
    setup.engine_count = engines;
    setup.config = &config_;
    setup.ports = ports_.get();
    setup.pool = pools_[e];
    setup.mailbox = mailboxes_[e];
    setup.redirect_out = redirect_[e];
    for (EngineId from = 0; from < engines; ++from) setup.redirect_in.push_back(redirect_[from][e]);
    setup.capture = capture_ ? &capture_->ring(e) : nullptr;
    setup.activity = activity_.get();
    engines_.push_back(std::make_unique<Engine>(setup));
  }
  publish_to_telemetry(this);
  published_ = true;
  for (auto& engine : engines_)
    if (Status s = engine->launch(); !s.ok()) return s;
  return {};
}

Dataplane::~Dataplane() { stop(); }

void Dataplane::stop_engines() {
  for (auto& engine : engines_) (void)engine->stop();
}

void Dataplane::stop() {
  if (published_) {
    publish_to_telemetry(nullptr);
    published_ = false;
  }
  stop_engines();
  // Engines are stopped: the rings below have no producer or consumer left.
  if (capture_) {
    capture_->close();
    // Control path, once: a full disk (or a removed medium) leaves the capture cut short, which its reader
    // cannot tell from a quiet link.
    if (const uint64_t failed = capture_->write_errors(); failed != 0) {
      RTE_LOG(WARNING, USER1, "uroce: capture.pcapng_path '%s': %lu writes failed: the capture is incomplete\n",
              config_.capture.pcapng_path.c_str(), static_cast<unsigned long>(failed));
    }
  }
  for (auto& row : redirect_)
    for (rte_ring*& ring : row) free_ring(ring);
  for (rte_ring*& ring : mailboxes_) free_ring(ring);
  if (ports_) ports_->close();
  for (rte_mempool*& pool : pools_) {
    rte_mempool_free(pool);
    pool = nullptr;
  }
  if (active_) {
    active_ = false;
    g_dataplane_active.store(false);
  }
}

std::optional<PortIndex> Dataplane::port_index(std::string_view name) const noexcept {
  return ports_ ? ports_->find(name) : std::nullopt;
}

std::vector<std::pair<std::string, uint64_t>> Dataplane::port_counter_values(PortIndex p) const {
  std::vector<std::pair<std::string, uint64_t>> sum;
  for (const auto& engine : engines_) {
    const auto values = counter_values(engine->port_counters(p));
    if (sum.empty()) {
      sum = values;
    } else {
      for (std::size_t i = 0; i < values.size(); ++i) sum[i].second += values[i].second;
    }
  }
  return sum;
}

Result<proto::MacAddr> Dataplane::resolve(PortIndex port, const config::IpAddress& ip,
                                          std::chrono::milliseconds timeout) {
  if (engines_.empty() || !ports_ || port >= ports_->size()) return Status::error("resolve: no such port");
  const Port& p = (*ports_)[port];
  if (ip.is_v6 ? p.ipv6.empty() : p.ipv4.empty()) {
    return Status::error("resolve " + ip_to_string(ip) + ": port " + p.name + " has no " +
                         (ip.is_v6 ? "IPv6" : "IPv4") + " address to ask from");
  }
  const NeighborKey key = neighbor_key(port, ip);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::optional<std::chrono::steady_clock::time_point> last_solicit;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    const bool solicit = !last_solicit || now - *last_solicit >= kSolicitInterval;
    std::optional<proto::MacAddr> mac;
    Status s = engines_[0]->call([&](EngineContext& ctx) {
      mac = ctx.neighbors()->lookup(key, ctx.now());
      if (mac || !solicit) return;
      ctx.neighbors()->await(key);  // the answer completes it; an unsolicited one finds no entry
      if (ip.is_v6) {
        (void)send_neighbor_solicitation(ctx, p, ip.bytes);
      } else {
        (void)send_arp_request(ctx, p,
                               proto::Ipv4Addr{uint32_t{ip.bytes[0]} << 24 | uint32_t{ip.bytes[1]} << 16 |
                                               uint32_t{ip.bytes[2]} << 8 | ip.bytes[3]});
      }
    });
    if (!s.ok()) return s;
    if (mac) return *mac;
    if (solicit) last_solicit = now;
    if (now >= deadline) {
      return Status::error("resolve " + ip_to_string(ip) + " on port " + p.name + ": no " +
                           (ip.is_v6 ? "Neighbor Advertisement" : "ARP reply") + " within " +
                           std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace uroce::dataplane
