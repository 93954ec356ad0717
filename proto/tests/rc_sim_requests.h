// Work requests and frames for GoogleTest tests that drive rc_sim.h's QPs, by hand or through SimNetwork.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "proto/packet_builder.h"
#include "proto/tests/rc_sim.h"

namespace uroce::proto::testing {

// PMTU 1024 (or `mtu`), send PSN 0x100, receive PSN 0xABC, a short ACK timeout.
inline RcQpAttributes sim_attrs(uint32_t mtu = 1024) {
  RcQpAttributes a;
  a.path_mtu = mtu;
  a.send_psn = Psn{0x100};
  a.receive_psn = Psn{0xABC};
  a.ack_timeout = 10;
  return a;
}

// A send-queue WQE of `op` over `length` bytes of `local` (one SGE).
inline SendWqe wqe(WorkOp op, const Region& local, uint32_t length, uint64_t context, uint8_t flags = kWqeSignaled) {
  SendWqe w;
  w.context = context;
  w.op = op;
  w.flags = flags;
  w.num_sge = 1;
  w.length = length;
  w.sge[0] = {local.addr(), length, LocalToken{local.key}};
  return w;
}

// The same for an RDMA READ, WRITE or atomic at the start of `remote` (its address and key).
inline SendWqe rdma_wqe(WorkOp op, const Region& local, uint32_t length, const Region& remote, uint64_t context) {
  SendWqe w = wqe(op, local, length, context);
  w.remote_addr = remote.addr();
  w.rkey = RemoteToken{remote.key};
  return w;
}

inline RecvWqe recv_wqe(const Region& r, uint32_t length, uint64_t context) {
  RecvWqe w;
  w.context = context;
  w.num_sge = 1;
  w.sge[0] = {r.addr(), length, LocalToken{r.key}};
  return w;
}

// `frame` parsed; it must parse.
inline ParsedPacket parsed(const std::vector<uint8_t>& frame) {
  const ParseResult r = parse_packet(std::span<const uint8_t>(frame));
  EXPECT_TRUE(r.ok());
  return r.packet;
}

// The frames `from` has queued, taken out of its outbox.
inline std::vector<std::vector<uint8_t>> take(SimEndpoint& from) {
  std::vector<std::vector<uint8_t>> frames;
  frames.swap(from.outbox);
  return frames;
}

inline void deliver(SimEndpoint& to, const std::vector<uint8_t>& frame) { to.qp.on_packet(parsed(frame)); }

// The addresses of a frame from B to A's QP in SimNetwork, for frames a test builds itself (forged answers).
inline PacketSpec b_to_a_spec() {
  PacketSpec s;
  s.src_mac = MacAddr{0x020000000002ull};
  s.dst_mac = MacAddr{0x020000000001ull};
  s.src_gid = gid_from_ipv4(Ipv4Addr{0xC6120002u});
  s.dst_gid = gid_from_ipv4(Ipv4Addr{0xC6120001u});
  s.dest_qp = Qpn{0x11};
  return s;
}

}  // namespace uroce::proto::testing
