// Unreliable Datagram transport (IBTA 9.8; rocev2.md §6): one SEND_ONLY (with
// immediate) packet per message, carrying a DETH with the Q_Key and the source QP.
// No ACKs, no retries, no RNR: a datagram with no receive WQE, a wrong Q_Key or no
// room is dropped and counted. Connection management runs on the GSI QP (QPN 1,
// Q_Key 0x80010000) over this transport.
#pragma once

#include <cstdint>

#include "proto/packet_parser.h"
#include "proto/packet_template.h"
#include "proto/rc_types.h"

namespace uroce::proto {

// Bytes before a UD payload in the receive buffer, holding the network header:
// the IPv6 header, or for IPv4 20 undefined bytes then the IPv4 header (rocev2.md §6).
inline constexpr uint32_t kUdGrhSize = 40;

// Where a datagram goes: headers stamped for the destination (its MACs, addresses
// and QPN in the BTH), and the destination's Q_Key.
struct UdAddress {
  PacketTemplate headers;
  Qpn remote_qpn{};
  QKey remote_qkey{};
};

class UdEnv {
 public:
  virtual uint8_t* tx_begin(std::size_t length) = 0;
  virtual void tx_commit(std::size_t length) = 0;
  virtual uint8_t* resolve_local(LocalToken token, uint64_t addr, uint32_t length, uint32_t access) = 0;
  virtual const RecvWqe* pop_receive() = 0;
  virtual void complete_send(const Completion& c) = 0;
  // A datagram arrived: `source` is the sender's QPN (DETH SrcQP), for the reply.
  virtual void complete_receive(const Completion& c, Qpn source) = 0;

 protected:
  ~UdEnv() = default;
};

struct UdCounters {
  uint64_t tx_datagrams = 0;
  uint64_t rx_datagrams = 0;
  uint64_t rx_qkey_mismatch = 0;  // dropped: DETH Q_Key is not ours (IBTA C10-15)
  uint64_t rx_no_receive = 0;     // dropped: no receive WQE posted (UD has no RNR)
  uint64_t rx_too_long = 0;       // completed with a local length error: buffer smaller than GRH + payload
  uint64_t tx_backpressure = 0;
};

class UdQp {
 public:
  UdQp(Qpn qpn, QKey qkey, uint32_t path_mtu, UdEnv* env) : qpn_(qpn), qkey_(qkey), path_mtu_(path_mtu), env_(env) {}

  // Sends WQE `w` (kSend or kSendWithImmediate, at most one PMTU) to `to`. Returns
  // kSuccess once the packet is on its way, or the status the WQE completes with.
  // nullopt-like backpressure is reported as kLocalQpOperationError with
  // counters().tx_backpressure incremented, so the caller can retry.
  CompletionStatus send(const SendWqe& w, const UdAddress& to) noexcept;

  // Handles one received packet addressed to this QP.
  void on_packet(const ParsedPacket& p) noexcept;

  [[nodiscard]] Qpn qpn() const noexcept { return qpn_; }
  [[nodiscard]] QKey qkey() const noexcept { return qkey_; }
  [[nodiscard]] const UdCounters& counters() const noexcept { return counters_; }

 private:
  Qpn qpn_;
  QKey qkey_;
  uint32_t path_mtu_;
  UdEnv* env_;
  Psn next_psn_{0};  // informational on UD; incremented per packet as rxe does
  UdCounters counters_{};
};

}  // namespace uroce::proto
