#include "dataplane/gsi_channel.h"

#include <algorithm>
#include <atomic>

#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>

#include "dataplane/engine.h"

namespace uroce::dataplane {

namespace {

constexpr EngineId kGsiEngine = 0;  // engine_of(QPN 1)
constexpr unsigned kSendsPerPoll = 16;
static_assert(sizeof(GsiDatagram) % 4 == 0, "rte_ring elements are multiples of 4 bytes");

bool port_owns(const Port& port, const proto::Gid& gid) noexcept {
  if (proto::gid_is_ipv4_mapped(gid)) return port.owns(proto::gid_to_ipv4(gid));
  return port.owns(gid);
}

proto::Gid ip_source_gid(const proto::ParsedPacket& p) noexcept {
  if (p.ip_version == proto::IpVersion::kV4) return proto::gid_from_ipv4(p.ipv4().get(proto::Ipv4::src));
  proto::Gid g;
  std::copy_n(p.frame.data() + p.l3_offset + proto::Ipv6::kSrcOffset, 16, g.begin());
  return g;
}

proto::Gid ip_destination_gid(const proto::ParsedPacket& p) noexcept {
  if (p.ip_version == proto::IpVersion::kV4) return proto::gid_from_ipv4(p.ipv4().get(proto::Ipv4::dst));
  proto::Gid g;
  std::copy_n(p.frame.data() + p.l3_offset + proto::Ipv6::kDstOffset, 16, g.begin());
  return g;
}

}  // namespace

Result<std::unique_ptr<GsiChannel>> GsiChannel::start(Dataplane& dataplane) {
  std::unique_ptr<GsiChannel> channel(new GsiChannel(dataplane));
  static std::atomic<unsigned> instance{0};
  const std::string suffix = std::to_string(instance.fetch_add(1, std::memory_order_relaxed));
  const int socket = static_cast<int>(rte_lcore_to_socket_id(engine_lcore(kGsiEngine)));
  const unsigned flags = RING_F_SP_ENQ | RING_F_SC_DEQ;
  channel->up_ = rte_ring_create_elem(("gsi_up" + suffix).c_str(), sizeof(GsiDatagram), kRingSize, socket, flags);
  channel->down_ = rte_ring_create_elem(("gsi_dn" + suffix).c_str(), sizeof(GsiDatagram), kRingSize, socket, flags);
  if (channel->up_ == nullptr || channel->down_ == nullptr)
    return Status::error("GSI rings: " + std::string(rte_strerror(rte_errno)));
  Engine& engine = dataplane.engine(kGsiEngine);
  if (Status s = engine.register_qp(proto::kGsiQpn, QpEndpoint{&GsiChannel::on_packet, channel.get()}); !s.ok())
    return s;
  channel->registered_ = true;
  if (Status s = engine.add_poller(Poller{&GsiChannel::poll, channel.get()}); !s.ok()) return s;
  channel->polling_ = true;
  return channel;
}

GsiChannel::~GsiChannel() {
  Engine& engine = dataplane_.engine(kGsiEngine);
  // Both fail harmlessly once the engines have stopped: then nothing can call us any more either.
  if (polling_) {
    // What the CM sent last still leaves: the DREP that answers a peer's DREQ as the adapter closes, for one, which
    // the peer would otherwise retry until its disconnect timed out. The engine runs commands before pollers, so
    // the poller may never run again before its removal; this drains the ring on the engine first. Nothing adds to
    // it any more (the CM's thread, its one producer, has ended).
    (void)engine.call([this](EngineContext& ctx) {
      while (poll(this, ctx)) {
      }
    });
    (void)engine.remove_poller(this);
  }
  if (registered_) (void)engine.unregister_qp(proto::kGsiQpn);
  rte_ring_free(up_);
  rte_ring_free(down_);
}

bool GsiChannel::send(const GsiDatagram& datagram) noexcept {
  // The ring's enqueue is a release: the engine's dequeue sees the whole datagram.
  return rte_ring_sp_enqueue_elem(down_, const_cast<GsiDatagram*>(&datagram), sizeof(GsiDatagram)) == 0;
}

std::size_t GsiChannel::receive(std::span<GsiDatagram> out) noexcept {
  return rte_ring_sc_dequeue_burst_elem(up_, out.data(), sizeof(GsiDatagram), static_cast<unsigned>(out.size()),
                                        nullptr);
}

bool GsiChannel::pending() const noexcept { return !rte_ring_empty(up_); }

void GsiChannel::on_packet(void* self, EngineContext& ctx, const proto::ParsedPacket& p, PortIndex port,
                           rte_mbuf* mbuf) {
  static_cast<GsiChannel*>(self)->take(ctx, p, port);
  // Only after the last read of the packet: with a full batch the mbuf goes back to its pool at once, and one from
  // another engine's pool may then be reused there while we still read it.
  ctx.free_after_burst(mbuf);
}

bool GsiChannel::is_martian_source(const proto::Gid& gid) noexcept {
  if (proto::gid_is_ipv4_mapped(gid)) {
    const proto::Ipv4Addr a = proto::gid_to_ipv4(gid);
    return a.value() == 0 || proto::is_group_ipv4(a);
  }
  return std::all_of(gid.begin(), gid.end(), [](uint8_t b) { return b == 0; }) || gid[0] == 0xFF;
}

void GsiChannel::take(EngineContext& ctx, const proto::ParsedPacket& p, PortIndex port) noexcept {
  const auto deth =
      p.has(proto::ExtHeader::kDeth) ? std::optional(p.ext<proto::Deth>(proto::ExtHeader::kDeth)) : std::nullopt;
  if (p.opcode() != proto::Opcode::kUdSendOnly || !deth || deth->get(proto::Deth::qkey) != proto::kGsiQKey ||
      deth->get(proto::Deth::src_qp) != proto::kGsiQpn) {
    counters_.rx_not_gsi.add();
    return;
  }
  if (p.payload_length != proto::kMadSize) {
    counters_.rx_bad_length.add();
    return;
  }
  // The port's one P_Key is the default (full member, 0xFFFF): a MAD must carry a P_Key that matches it (IBTA
  // C9-42, as every QP checks); the invalid P_Keys 0x0000 and 0x8000 never do.
  if (!proto::pkey_matches(p.bth().get(proto::Bth::pkey), proto::kDefaultPKey)) {
    counters_.rx_bad_pkey.add();
    return;
  }
  GsiDatagram d;
  d.port = port;
  d.local_gid = ip_destination_gid(p);
  if (!port_owns(ctx.port(port), d.local_gid)) {
    counters_.rx_not_our_address.add();
    return;
  }
  d.remote_gid = ip_source_gid(p);
  d.remote_mac = p.eth().get(proto::Eth::src);
  // The source becomes the route of everything the CM answers, and of a passive connection's QP: a group MAC
  // (broadcast, multicast), a group or unspecified IP, or one of our own addresses is no peer's.
  if (proto::is_group_mac(d.remote_mac) || is_martian_source(d.remote_gid) || port_owns(ctx.port(port), d.remote_gid)) {
    counters_.rx_bad_source.add();
    return;
  }
  const auto payload = p.payload();
  std::copy(payload.begin(), payload.end(), d.mad.begin());
  if (rte_ring_sp_enqueue_elem(up_, &d, sizeof(GsiDatagram)) != 0) {
    counters_.rx_ring_full.add();
    return;
  }
  counters_.rx_mads.add();
}

bool GsiChannel::poll(void* self, EngineContext& ctx) {
  auto& g = *static_cast<GsiChannel*>(self);
  // Every engine loop iteration comes here: look before constructing the batch, whose datagrams are
  // value-initialised (~5 KB cleared per call, 7% of a busy engine's time on a 64 B WRITE stream).
  if (rte_ring_empty(g.down_)) return false;
  std::array<GsiDatagram, kSendsPerPoll> batch;
  const unsigned n = rte_ring_sc_dequeue_burst_elem(g.down_, batch.data(), sizeof(GsiDatagram), kSendsPerPoll, nullptr);
  for (unsigned i = 0; i < n; ++i) g.transmit(ctx, batch[i]);
  return n > 0;
}

void GsiChannel::transmit(EngineContext& ctx, const GsiDatagram& d) noexcept {
  if (d.port >= ctx.port_count() || !port_owns(ctx.port(d.port), d.local_gid) ||
      proto::gid_is_ipv4_mapped(d.local_gid) != proto::gid_is_ipv4_mapped(d.remote_gid)) {
    counters_.tx_bad_datagram.add();
    return;
  }
  proto::PacketSpec s;
  s.src_mac = ctx.port(d.port).mac;
  s.dst_mac = d.remote_mac;
  s.src_gid = d.local_gid;
  s.dst_gid = d.remote_gid;
  s.udp_src_port = proto::roce_udp_source_port(proto::kGsiQpn, proto::kGsiQpn);
  s.opcode = proto::Opcode::kUdSendOnly;
  s.dest_qp = proto::kGsiQpn;
  s.psn = next_psn_;
  next_psn_ = next_psn_ + 1;
  s.deth.qkey = proto::kGsiQKey;
  s.deth.src_qp = proto::kGsiQpn;
  s.payload = d.mad;
  rte_mbuf* m = ctx.alloc_mbuf();
  if (m == nullptr) {
    counters_.tx_no_mbuf.add();
    return;
  }
  const std::size_t length =
      proto::build_packet(s, std::span<uint8_t>(rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_tailroom(m)));
  if (length == 0 || rte_pktmbuf_append(m, static_cast<uint16_t>(length)) == nullptr) {
    rte_pktmbuf_free(m);
    counters_.tx_bad_datagram.add();
    return;
  }
  if (ctx.send(d.port, m)) counters_.tx_mads.add();
}

std::vector<std::pair<std::string, uint64_t>> GsiChannel::counter_values() const {
  return {{"gsi_rx_mads", counters_.rx_mads.read()},
          {"gsi_rx_not_gsi", counters_.rx_not_gsi.read()},
          {"gsi_rx_bad_length", counters_.rx_bad_length.read()},
          {"gsi_rx_bad_pkey", counters_.rx_bad_pkey.read()},
          {"gsi_rx_not_our_address", counters_.rx_not_our_address.read()},
          {"gsi_rx_bad_source", counters_.rx_bad_source.read()},
          {"gsi_rx_ring_full", counters_.rx_ring_full.read()},
          {"gsi_tx_mads", counters_.tx_mads.read()},
          {"gsi_tx_no_mbuf", counters_.tx_no_mbuf.read()},
          {"gsi_tx_bad_datagram", counters_.tx_bad_datagram.read()}};
}

}  // namespace uroce::dataplane
