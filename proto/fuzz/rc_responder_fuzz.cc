// libFuzzer target for the RC responder and completer: a sequence of hostile
// packets delivered to a connected QP whose peer (the fuzzer) controls every BTH
// and extension-header field and payload byte. The QP has registered memory,
// posted receives and outstanding work of its own, so requests reach placement,
// keys, READ/atomic replay and NAK paths, and responses reach the completer.
//
// Input: repeated [u16 length][length bytes = BTH, extension headers, payload].
// The harness wraps each chunk in Ethernet/IPv4/UDP (from the peer's address to the
// QP's) and skips the ICRC check.
#include <cstdint>
#include <cstring>
#include <vector>

#include "proto/packet_parser.h"
#include "proto/tests/rc_sim.h"

using namespace uroce::proto;
using uroce::proto::testing::SimEndpoint;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  SimEndpoint ep(16);
  uint64_t clock = 1'000'000;
  ep.set_clock(&clock);
  constexpr uint32_t kAll = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  testing::Region& mem = ep.add_region(16384, kAll);
  for (int i = 0; i < 4; ++i) {
    RecvWqe r;
    r.context = static_cast<uint64_t>(i);
    r.num_sge = 2;
    r.sge[0] = {mem.addr(i * 2048), 1024, LocalToken{mem.key}};
    r.sge[1] = {mem.addr(i * 2048 + 1024), 1024, LocalToken{mem.key}};
    ep.post_receive(r);
  }
  // Outstanding work of our own, so response opcodes have something to complete.
  SendWqe w;
  w.op = WorkOp::kRdmaRead;
  w.flags = kWqeSignaled;
  w.num_sge = 1;
  w.length = 3000;
  w.sge[0] = {mem.addr(8192), 3000, LocalToken{mem.key}};
  w.remote_addr = 0x1000;
  ep.post_send(w);
  w.op = WorkOp::kFetchAdd;
  w.length = 8;
  w.sge[0] = {mem.addr(12000), 8, LocalToken{mem.key}};
  ep.post_send(w);
  w.op = WorkOp::kSend;
  w.length = 100;
  ep.post_send(w);

  RcQpAttributes attrs;
  attrs.local_qpn = Qpn{0x12};
  attrs.remote_qpn = Qpn{0x11};
  attrs.send_psn = Psn{0};
  attrs.receive_psn = Psn{0};
  attrs.path_mtu = 1024;
  attrs.max_dest_rd_atomic = 4;
  PacketSpec base;
  base.src_gid = gid_from_ipv4(Ipv4Addr{0xC6120002});
  base.dst_gid = gid_from_ipv4(Ipv4Addr{0xC6120001});
  base.dest_qp = Qpn{0x11};
  PacketTemplate headers;
  headers.init(base);
  ep.qp.connect(attrs, headers, ep.sq(), ep.sq_size(), &ep);
  ep.qp.send(8);

  // Ethernet + IPv4 + UDP around each chunk; the region's address is patched into
  // RETH/AtomicETH VAs by nothing: the fuzzer finds it through the key/length checks.
  std::vector<uint8_t> frame;
  while (size >= 2) {
    const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(data[0] | data[1] << 8), size - 2);
    data += 2;
    size -= 2;
    frame.assign(42, 0);
    frame[12] = 0x08;
    frame[14] = 0x45;
    frame[23] = 17;
    frame.insert(frame.end(), data, data + n);
    frame.resize(frame.size() + kIcrcSize);
    const std::size_t ip_length = frame.size() - 14;
    MutView<Ipv4>{frame.data() + 14}.set(Ipv4::total_length, static_cast<uint16_t>(ip_length));
    // The connected path's addresses: from the peer (.1) to this QP (.2), or the QP drops the packet.
    MutView<Ipv4>{frame.data() + 14}.set(Ipv4::src, Ipv4Addr{0xC6120001});
    MutView<Ipv4>{frame.data() + 14}.set(Ipv4::dst, Ipv4Addr{0xC6120002});
    MutView<Udp>{frame.data() + 34}.set(Udp::dst_port, kRoceV2UdpPort);
    MutView<Udp>{frame.data() + 34}.set(Udp::length, static_cast<uint16_t>(ip_length - 20));
    data += n;
    size -= n;
    const ParseResult r = parse_packet(frame, {.verify_icrc = false, .verify_ip_checksum = false});
    if (!r.ok()) continue;
    ep.qp.on_packet(r.packet);
    ep.qp.respond(64);
    ep.qp.send(8);
    clock += 100'000'000;
    ep.qp.on_timer();
    ep.outbox.clear();
  }
  return 0;
}
