// The GSI QP (QPN 1, Q_Key 0x80010000) of every port, which carries connection management (ARCHITECTURE.md
// "Connection management"; cm-nvmf-dcqcn.md §1.9). It is a UD binding on engine 0, the engine QPN 1 maps to:
// received MADs go up to the control side, which runs the CM (api/), through an SPSC ring, and MADs to send come
// down through another, which a poller on engine 0 drains. Neither side ever waits on the other: a full ring drops
// the MAD and counts it, and the CM's retransmissions recover it.
//
// A datagram reaches the ring only if it is what a GSI QP accepts: UD SEND_ONLY from QP 1 with the GSI Q_Key
// (IBTA C10-15), exactly one 256-byte MAD (IBTA 13.4.2), sent to one of the arrival port's own addresses (a
// datagram for another host must not steer our CM). Everything else is counted and freed.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>

#include "dataplane/counters.h"
#include "dataplane/dataplane.h"
#include "proto/cm_messages.h"
#include "proto/packet_builder.h"

struct rte_ring;

namespace uroce::dataplane {

struct GsiDatagram {
  PortIndex port = 0;
  proto::Gid local_gid{};       // received: the IP destination (ours); to send: our source address
  proto::Gid remote_gid{};      // received: the IP source; to send: the destination
  proto::MacAddr remote_mac{};  // received: the frame's source; to send: the next hop's
  std::array<uint8_t, proto::kMadSize> mad{};
};

struct GsiCounters {
  Counter rx_mads;             // delivered to the control side
  Counter rx_not_gsi;          // not UD SEND_ONLY from QP 1 with the GSI Q_Key
  Counter rx_bad_length;       // not exactly one MAD
  Counter rx_bad_pkey;         // a BTH P_Key that does not match the port's (0xFFFF; IBTA C9-42), 0 and 0x8000 included
  Counter rx_not_our_address;  // sent to an address the port does not own
  Counter rx_bad_source;       // from a group MAC, or a group, unspecified or own IP address
  Counter rx_ring_full;        // the control side is behind: dropped (the CM retransmits)
  Counter tx_mads;
  Counter tx_no_mbuf;       // dropped: engine 0's pool was empty
  Counter tx_bad_datagram;  // dropped: no such port, or an address the port does not own
};

class GsiChannel {
 public:
  static constexpr unsigned kRingSize = 1024;  // datagrams each way

  // Registers QPN 1 and the send poller on engine 0 of a running dataplane.
  [[nodiscard]] static Result<std::unique_ptr<GsiChannel>> start(Dataplane& dataplane);
  ~GsiChannel();  // unregisters (the engines may have stopped already)
  GsiChannel(const GsiChannel&) = delete;
  GsiChannel& operator=(const GsiChannel&) = delete;

  // Control side, one thread. Queues a MAD for engine 0 to send; false when the ring is full.
  [[nodiscard]] bool send(const GsiDatagram& datagram) noexcept;
  // Control side, one thread. Takes up to out.size() received MADs; returns how many.
  [[nodiscard]] std::size_t receive(std::span<GsiDatagram> out) noexcept;
  // Control side: whether receive() would return anything (a cheap look at the ring, no copy).
  [[nodiscard]] bool pending() const noexcept;

  [[nodiscard]] const GsiCounters& counters() const noexcept { return counters_; }
  // The counters as (name, value), for telemetry and tests.
  [[nodiscard]] std::vector<std::pair<std::string, uint64_t>> counter_values() const;

 private:
  explicit GsiChannel(Dataplane& dataplane) : dataplane_(dataplane) {}
  static void on_packet(void* self, EngineContext& ctx, const proto::ParsedPacket& packet, PortIndex port,
                        rte_mbuf* mbuf);
  void take(EngineContext& ctx, const proto::ParsedPacket& packet, PortIndex port) noexcept;
  static bool is_martian_source(const proto::Gid& gid) noexcept;
  static bool poll(void* self, EngineContext& ctx);
  void transmit(EngineContext& ctx, const GsiDatagram& d) noexcept;

  Dataplane& dataplane_;
  rte_ring* up_ = nullptr;    // engine 0 -> control
  rte_ring* down_ = nullptr;  // control -> engine 0
  bool registered_ = false;
  bool polling_ = false;
  proto::Psn next_psn_{0};  // informational on UD (rxe increments it per packet too)
  GsiCounters counters_;
};

}  // namespace uroce::dataplane
