#include "proto/ud_qp.h"

#include <algorithm>
#include <cstring>

namespace uroce::proto {

CompletionStatus UdQp::send(const SendWqe& w, const UdAddress& to) noexcept {
  if ((w.op != WorkOp::kSend && w.op != WorkOp::kSendWithImmediate) || w.length > path_mtu_)
    return CompletionStatus::kLocalLengthError;  // a UD message is one packet (IBTA C10-?)
  if (!(w.flags & kWqeInline)) {
    for (unsigned i = 0; i < w.num_sge; ++i) {
      const Sge& s = w.sge[i];
      // The memory must be at the SGE's address: UD QPs do not take paged fast-register memory.
      if (s.length != 0 && env_->resolve_local(s.lkey, s.addr, s.length, 0) != reinterpret_cast<uint8_t*>(s.addr))
        return CompletionStatus::kLocalProtectionError;
    }
  }
  const Opcode op = w.op == WorkOp::kSendWithImmediate ? Opcode::kUdSendOnlyWithImmediate : Opcode::kUdSendOnly;
  uint8_t* out = env_->tx_begin(to.headers.frame_length(op, w.length));
  if (out == nullptr) {
    ++counters_.tx_backpressure;
    return CompletionStatus::kLocalQpOperationError;
  }
  const auto st = to.headers.stamp(out, op, w.length, next_psn_, (w.flags & kWqeSolicited) ? kBthSolicited : 0);
  const OpcodeInfo& info = opcode_info(op);
  const MutView<Deth> deth{st.ext + info.offset_of(ExtHeader::kDeth)};
  // A Q_Key with bit 31 set is "controlled": the QP's own Q_Key goes out instead (IBTA 10.2.5).
  deth.set(Deth::qkey, (to.remote_qkey.value() & 0x80000000u) ? qkey_ : to.remote_qkey);
  deth.set(Deth::reserved, 0);
  deth.set(Deth::src_qp, qpn_);
  if (info.carries(ExtHeader::kImmDt))
    MutView<ImmDt>{st.ext + info.offset_of(ExtHeader::kImmDt)}.set(ImmDt::immediate, w.immediate);
  uint8_t* payload = st.payload;
  for (unsigned i = 0; i < w.num_sge; ++i) {
    std::memcpy(payload, reinterpret_cast<const uint8_t*>(w.sge[i].addr), w.sge[i].length);
    payload += w.sge[i].length;
  }
  to.headers.seal(out, st, w.length);
  env_->tx_commit(st.frame_length);
  ++next_psn_;
  ++counters_.tx_datagrams;
  if (w.flags & kWqeSignaled) {
    Completion c;
    c.context = w.context;
    c.op = w.op;
    c.byte_length = w.length;
    env_->complete_send(c);
  }
  return CompletionStatus::kSuccess;
}

void UdQp::on_packet(const ParsedPacket& p) noexcept {
  if (p.info->transport != Transport::kUd) return;
  const auto deth = p.ext<Deth>(ExtHeader::kDeth);
  if (deth.get(Deth::qkey) != qkey_) {
    ++counters_.rx_qkey_mismatch;
    return;
  }
  const RecvWqe* r = env_->pop_receive();
  if (r == nullptr) {
    ++counters_.rx_no_receive;
    return;
  }
  // Scatter the 40-byte network header area, then the payload.
  uint8_t grh[kUdGrhSize] = {};
  const uint8_t* l3 = p.frame.data() + p.l3_offset;
  if (p.ip_version == IpVersion::kV6) {
    std::memcpy(grh, l3, Ipv6::kSize);
  } else {
    std::memcpy(grh + kUdGrhSize - Ipv4::kSize, l3, Ipv4::kSize);
  }
  Completion c;
  c.context = r->context;
  uint32_t capacity = 0;
  for (unsigned i = 0; i < r->num_sge; ++i) {
    const Sge& s = r->sge[i];
    if (s.length != 0 &&
        env_->resolve_local(s.lkey, s.addr, s.length, kAccessLocalWrite) != reinterpret_cast<uint8_t*>(s.addr)) {
      c.status = CompletionStatus::kLocalProtectionError;
      env_->complete_receive(c, deth.get(Deth::src_qp));
      return;
    }
    capacity += s.length;
  }
  const uint32_t total = kUdGrhSize + p.payload_length;
  if (capacity < total) {
    ++counters_.rx_too_long;
    c.status = CompletionStatus::kLocalLengthError;
    env_->complete_receive(c, deth.get(Deth::src_qp));
    return;
  }
  const uint8_t* pieces[2] = {grh, p.payload().data()};
  const uint32_t lengths[2] = {kUdGrhSize, p.payload_length};
  unsigned sge = 0;
  uint32_t sge_offset = 0;
  for (int k = 0; k < 2; ++k) {
    const uint8_t* in = pieces[k];
    uint32_t left = lengths[k];
    while (left > 0) {
      const Sge& s = r->sge[sge];
      const uint32_t n = std::min(left, s.length - sge_offset);
      std::memcpy(reinterpret_cast<uint8_t*>(s.addr) + sge_offset, in, n);
      in += n;
      left -= n;
      sge_offset += n;
      if (sge_offset == s.length) {
        ++sge;
        sge_offset = 0;
      }
    }
  }
  c.byte_length = total;
  c.op = WorkOp::kSend;
  if (p.bth().get(Bth::solicited)) c.flags |= kCompletionSolicited;
  if (p.info->is(kImmediate)) {
    c.op = WorkOp::kSendWithImmediate;
    c.flags |= kCompletionWithImmediate;
    c.immediate = p.ext<ImmDt>(ExtHeader::kImmDt).get(ImmDt::immediate);
  }
  ++counters_.rx_datagrams;
  env_->complete_receive(c, deth.get(Deth::src_qp));
}

}  // namespace uroce::proto
