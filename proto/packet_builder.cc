#include "proto/packet_builder.h"

#include <cstring>

namespace uroce::proto {

namespace {

std::size_t l2_size(const PacketSpec& s) noexcept { return Eth::kSize + (s.vlan_tci ? Vlan::kSize : 0); }
std::size_t l3_header_size(IpVersion v) noexcept { return v == IpVersion::kV4 ? Ipv4::kSize : Ipv6::kSize; }
std::size_t pad_for(std::size_t payload) noexcept { return (4 - payload % 4) % 4; }

void write_ext_headers(const PacketSpec& s, const OpcodeInfo& info, uint8_t* ext) noexcept {
  auto at = [&](ExtHeader h) { return ext + info.offset_of(h); };
  if (info.carries(ExtHeader::kDeth)) {
    const MutView<Deth> v{at(ExtHeader::kDeth)};
    v.set(Deth::qkey, s.deth.qkey);
    v.set(Deth::reserved, 0);
    v.set(Deth::src_qp, s.deth.src_qp);
  }
  if (info.carries(ExtHeader::kFeth)) {
    const MutView<Feth> v{at(ExtHeader::kFeth)};
    std::memset(v.data(), 0, Feth::kSize);
    v.set(Feth::selectivity, s.feth.selectivity);
    v.set(Feth::placement_type, s.feth.placement_type);
  }
  if (info.carries(ExtHeader::kReth)) {
    const MutView<Reth> v{at(ExtHeader::kReth)};
    v.set(Reth::va, s.reth.va);
    v.set(Reth::rkey, s.reth.rkey);
    v.set(Reth::dma_length, s.reth.dma_length);
  }
  if (info.carries(ExtHeader::kAtomicEth)) {
    const MutView<AtomicEth> v{at(ExtHeader::kAtomicEth)};
    v.set(AtomicEth::va, s.atomic_eth.va);
    v.set(AtomicEth::rkey, s.atomic_eth.rkey);
    v.set(AtomicEth::swap_or_add, s.atomic_eth.swap_or_add);
    v.set(AtomicEth::compare, s.atomic_eth.compare);
  }
  if (info.carries(ExtHeader::kImmDt)) MutView<ImmDt>{at(ExtHeader::kImmDt)}.set(ImmDt::immediate, s.immediate);
  if (info.carries(ExtHeader::kIeth)) MutView<Ieth>{at(ExtHeader::kIeth)}.set(Ieth::rkey, s.invalidate_rkey);
  if (info.carries(ExtHeader::kAeth)) {
    const MutView<Aeth> v{at(ExtHeader::kAeth)};
    v.set(Aeth::syndrome, s.aeth.syndrome);
    v.set(Aeth::msn, s.aeth.msn);
  }
  if (info.carries(ExtHeader::kAtomicAckEth))
    MutView<AtomicAckEth>{at(ExtHeader::kAtomicAckEth)}.set(AtomicAckEth::original_data, s.atomic_ack_original);
  if (info.carries(ExtHeader::kCnpBody)) std::memset(at(ExtHeader::kCnpBody), 0, CnpBody::kSize);
}

}  // namespace

std::size_t packet_size(const PacketSpec& s) noexcept {
  const OpcodeInfo& info = opcode_info(s.opcode);
  return l2_size(s) + l3_header_size(s.ip_version()) + Udp::kSize + Bth::kSize + info.ext_length + s.payload.size() +
         pad_for(s.payload.size()) + kIcrcSize;
}

std::size_t build_packet(const PacketSpec& s, std::span<uint8_t> out) noexcept {
  const OpcodeInfo& info = opcode_info(s.opcode);
  if (!info.valid() || s.payload.size() > kMaxPayload) return 0;
  const std::size_t total = packet_size(s);
  if (out.size() < total) return 0;
  uint8_t* const base = out.data();
  const IpVersion version = s.ip_version();
  const std::size_t pad = pad_for(s.payload.size());

  const MutView<Eth> eth{base};
  eth.set(Eth::dst, s.dst_mac);
  eth.set(Eth::src, s.src_mac);
  std::size_t offset = Eth::kSize;
  const uint16_t l3_type = version == IpVersion::kV4 ? kEtherTypeIpv4 : kEtherTypeIpv6;
  if (s.vlan_tci) {
    eth.set(Eth::ether_type, kEtherTypeVlan);
    const MutView<Vlan> vlan{base + offset};
    vlan.set(Vlan::tci, *s.vlan_tci);
    vlan.set(Vlan::ether_type, l3_type);
    offset += Vlan::kSize;
  } else {
    eth.set(Eth::ether_type, l3_type);
  }

  uint8_t* const l3 = base + offset;
  const std::size_t udp_length = total - offset - l3_header_size(version);
  if (version == IpVersion::kV4) {
    const MutView<Ipv4> ip{l3};
    ip.set(Ipv4::version, 4);
    ip.set(Ipv4::ihl, 5);
    ip.set(Ipv4::tos, s.traffic_class);
    ip.set(Ipv4::total_length, static_cast<uint16_t>(Ipv4::kSize + udp_length));
    ip.set(Ipv4::id, s.ip_id);
    ip.set(Ipv4::flags_fragment, s.dont_fragment ? 0x4000 : 0);
    ip.set(Ipv4::ttl, s.hop_limit);
    ip.set(Ipv4::protocol, kIpProtoUdp);
    ip.set(Ipv4::src, gid_to_ipv4(s.src_gid));
    ip.set(Ipv4::dst, gid_to_ipv4(s.dst_gid));
    ip.set(Ipv4::checksum, ipv4_header_checksum(l3));
  } else {
    const MutView<Ipv6> ip{l3};
    l3[0] = l3[1] = l3[2] = l3[3] = 0;
    ip.set(Ipv6::version, 6);
    ip.set(Ipv6::traffic_class, s.traffic_class);
    ip.set(Ipv6::flow_label, s.flow_label);
    ip.set(Ipv6::payload_length, static_cast<uint16_t>(udp_length));
    ip.set(Ipv6::next_header, kIpProtoUdp);
    ip.set(Ipv6::hop_limit, s.hop_limit);
    std::memcpy(l3 + Ipv6::kSrcOffset, s.src_gid.data(), Ipv6::kAddrSize);
    std::memcpy(l3 + Ipv6::kDstOffset, s.dst_gid.data(), Ipv6::kAddrSize);
  }
  offset += l3_header_size(version);

  const MutView<Udp> udp{base + offset};
  udp.set(Udp::src_port, s.udp_src_port);
  udp.set(Udp::dst_port, kRoceV2UdpPort);
  udp.set(Udp::length, static_cast<uint16_t>(udp_length));
  udp.set(Udp::checksum, s.udp_checksum);
  offset += Udp::kSize;

  const MutView<Bth> bth{base + offset};
  bth.set(Bth::opcode, s.opcode);
  base[offset + 1] = 0;  // SE, M, PadCnt, TVer = 0 before the fields go in
  bth.set(Bth::solicited, s.solicited);
  bth.set(Bth::mig_req, s.mig_req);
  bth.set(Bth::pad_count, static_cast<uint8_t>(pad));
  bth.set(Bth::pkey, s.pkey);
  bth.set(Bth::resv8a, s.resv8a);
  bth.set(Bth::dest_qp, s.dest_qp);
  base[offset + 8] = s.ack_req ? 0x80 : 0;
  bth.set(Bth::psn, s.psn);
  offset += Bth::kSize;

  write_ext_headers(s, info, base + offset);
  offset += info.ext_length;
  if (!s.payload.empty()) std::memcpy(base + offset, s.payload.data(), s.payload.size());
  offset += s.payload.size();
  std::memset(base + offset, 0, pad);
  offset += pad;
  icrc_store(base + offset, icrc_compute(l3, static_cast<std::size_t>(base + offset - l3), version));
  return total;
}

PacketSpec spec_from_packet(const ParsedPacket& p) noexcept {
  PacketSpec s;
  const EthView eth = p.eth();
  s.dst_mac = eth.get(Eth::dst);
  s.src_mac = eth.get(Eth::src);
  if (p.has_vlan) s.vlan_tci = p.vlan().get(Vlan::tci);
  const uint8_t* const l3 = p.frame.data() + p.l3_offset;
  if (p.ip_version == IpVersion::kV4) {
    const Ipv4View ip = p.ipv4();
    s.src_gid = gid_from_ipv4(ip.get(Ipv4::src));
    s.dst_gid = gid_from_ipv4(ip.get(Ipv4::dst));
    s.traffic_class = ip.get(Ipv4::tos);
    s.hop_limit = ip.get(Ipv4::ttl);
    s.ip_id = ip.get(Ipv4::id);
    s.dont_fragment = ip.get(Ipv4::dont_fragment);
  } else {
    const Ipv6View ip = p.ipv6();
    std::memcpy(s.src_gid.data(), l3 + Ipv6::kSrcOffset, Ipv6::kAddrSize);
    std::memcpy(s.dst_gid.data(), l3 + Ipv6::kDstOffset, Ipv6::kAddrSize);
    s.traffic_class = ip.get(Ipv6::traffic_class);
    s.hop_limit = ip.get(Ipv6::hop_limit);
    s.flow_label = ip.get(Ipv6::flow_label);
  }
  const UdpView udp = p.udp();
  s.udp_src_port = udp.get(Udp::src_port);
  s.udp_checksum = udp.get(Udp::checksum);

  const BthView bth = p.bth();
  s.opcode = bth.get(Bth::opcode);
  s.solicited = bth.get(Bth::solicited);
  s.mig_req = bth.get(Bth::mig_req);
  s.pkey = bth.get(Bth::pkey);
  s.resv8a = bth.get(Bth::resv8a);
  s.dest_qp = bth.get(Bth::dest_qp);
  s.ack_req = bth.get(Bth::ack_req);
  s.psn = bth.get(Bth::psn);

  if (p.has(ExtHeader::kDeth)) {
    const auto v = p.ext<Deth>(ExtHeader::kDeth);
    s.deth = {v.get(Deth::qkey), v.get(Deth::src_qp)};
  }
  if (p.has(ExtHeader::kFeth)) {
    const auto v = p.ext<Feth>(ExtHeader::kFeth);
    s.feth = {v.get(Feth::selectivity), v.get(Feth::placement_type)};
  }
  if (p.has(ExtHeader::kReth)) {
    const auto v = p.ext<Reth>(ExtHeader::kReth);
    s.reth = {v.get(Reth::va), v.get(Reth::rkey), v.get(Reth::dma_length)};
  }
  if (p.has(ExtHeader::kAtomicEth)) {
    const auto v = p.ext<AtomicEth>(ExtHeader::kAtomicEth);
    s.atomic_eth = {v.get(AtomicEth::va), v.get(AtomicEth::rkey), v.get(AtomicEth::swap_or_add),
                    v.get(AtomicEth::compare)};
  }
  if (p.has(ExtHeader::kImmDt)) s.immediate = p.ext<ImmDt>(ExtHeader::kImmDt).get(ImmDt::immediate);
  if (p.has(ExtHeader::kIeth)) s.invalidate_rkey = p.ext<Ieth>(ExtHeader::kIeth).get(Ieth::rkey);
  if (p.has(ExtHeader::kAeth)) {
    const auto v = p.ext<Aeth>(ExtHeader::kAeth);
    s.aeth = {v.get(Aeth::syndrome), v.get(Aeth::msn)};
  }
  if (p.has(ExtHeader::kAtomicAckEth))
    s.atomic_ack_original = p.ext<AtomicAckEth>(ExtHeader::kAtomicAckEth).get(AtomicAckEth::original_data);
  s.payload = p.payload();
  return s;
}

}  // namespace uroce::proto
