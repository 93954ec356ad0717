// The IB Communication Manager of one port (IBTA vol. 1 ch. 12.6-12.9; Linux cm.c), as a pure state machine.
//
// It owns every connection's CM state, keyed by our local communication ID (CmId): the messages it sends and
// retransmits, duplicate and stale detection, and time-wait. Inputs are MADs received on the GSI QP, the time
// (on_timer), and the consumer's calls (connect, accept, reject, establish, disconnect, destroy). Outputs are
// MADs to send (CmEnv::send_mad) and events, which the consumer takes with take_events() after each call, so a
// consumer never runs inside the agent. Nothing here knows about QPs: the consumer (api/'s connectors) moves its
// QP through INIT, RTR and RTS with what the events carry. Not thread-safe: one thread drives it.
//
// Every MAD from the wire is treated as hostile: wrong sizes, versions, classes and methods are counted and
// dropped; a message for a connection must name both communication IDs, come from the connection's peer GID and
// suit its state, or it is counted and dropped; a REQ that cannot be honoured gets the REJ the CM defines. What
// the agent sends for a connection goes by the route the connection was made with (CmRoute), never by one a
// later MAD brought.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "proto/cm_messages.h"
#include "proto/types.h"

namespace uroce::proto {

using CmId = uint32_t;  // our local communication ID; never 0

// Where the consumer's network sends a MAD beyond its GIDs (api/ packs the port and the next hop's MAC into it),
// opaque to the agent. A connection keeps one for its life: the route its REQ came by (passive side), or the one
// connect() was given (active side). Every MAD of the connection goes by it, and nothing a later MAD claims
// changes it, so a neighbour sending with the peer's address cannot steer the connection's MADs. An answer to a
// MAD that belongs to no connection goes back by the route that MAD came by, and nothing of it is kept.
using CmRoute = uint64_t;

struct CmParams {
  uint64_t local_ca_guid = 0;
  // IBTA time codes (4.096 us x 2^code). Linux advertises 20 (4 s) as its CM response timeout; 18 (1 s) keeps a
  // lost MAD from stalling a connect for long, and Linux tolerates early retransmissions as duplicates.
  uint8_t cm_response_timeout = 18;
  uint8_t max_cm_retries = 15;
  uint8_t packet_life_time = 16;        // RoCE: Linux's CMA_IBOE_PACKET_LIFETIME
  uint8_t mra_service_timeout = 24;     // asked for in our MRA while the consumer decides (Linux: 24)
  uint8_t target_ack_delay = 15;        // REP's target ACK delay (rxe's CA ACK delay)
  std::size_t max_connections = 65536;  // REQs beyond this get REJ "no resources"
};

// The fields of a REQ: what connect() sends, and what a kRequest event carries.
struct CmConnectParams {
  uint64_t service_id = 0;
  Gid local_gid{};   // the sender's
  Gid remote_gid{};  // the receiver's
  Qpn qpn{};         // the sender's RC QP
  // The PSN the sender expects to receive first, so the receiver's first send PSN (Linux cm.c: the passive side's
  // sq_psn is the REQ's starting PSN, the active side's the REP's). Verified against rxe on the wire.
  Psn starting_psn{};
  uint8_t responder_resources = 0;  // RDMA READ/atomic requests the sender accepts in flight
  uint8_t initiator_depth = 0;      // RDMA READ/atomic requests the sender issues in flight
  uint8_t path_mtu = 3;             // IB MTU code: 1 = 256 ... 5 = 4096
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  bool srq = false;
  bool end_to_end_flow_control = true;  // rdma_cm's conn_param.flow_control (nvme-rdma: 1, rping: 0)
  uint8_t hop_limit = 64;
  uint8_t traffic_class = 0;
  uint32_t flow_label = 0;
  uint8_t local_ack_timeout = 18;
  std::vector<uint8_t> private_data;  // at most CmReq::private_data.kSize (RDMA CM: cma_hdr + the consumer's)
  CmRoute route = 0;                  // connect(): to the receiver; kRequest: the route the REQ came by
  // Set on a received REQ only:
  uint64_t peer_ca_guid = 0;
  uint8_t peer_cm_response_timeout = 0;
  uint8_t peer_max_cm_retries = 0;
};

// The fields of a REP: what accept() sends, and what a kReply event carries.
struct CmReplyParams {
  Qpn qpn{};
  Psn starting_psn{};  // the PSN the replier expects to receive first: the active side's first send PSN
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t rnr_retry_count = 7;
  bool srq = false;
  std::vector<uint8_t> private_data;  // at most CmRep::private_data.kSize
  uint64_t peer_ca_guid = 0;          // set on a received REP
};

enum class CmEventType : uint8_t {
  kRequest,            // passive: a new REQ (`request`); answer with accept() or reject()
  kReply,              // active: the REP (`reply`); set the QP up, then establish() (RTU) or reject()
  kEstablished,        // passive: the RTU arrived (or the consumer reported the first packet)
  kRejected,           // the peer rejected our REQ or REP (`reason`, `private_data`)
  kTimeout,            // our REQ or REP went unanswered through every retry, or a kRequest past the peer's patience
  kDisconnectRequest,  // the peer disconnected (DREQ, answered with a DREP) or its QP went stale
  kDisconnected,       // our DREQ was answered (or crossed the peer's), or timed out (`timed_out`)
  kTimeWaitDone,       // the connection is gone after time-wait; its QPN may serve a new one
};

[[nodiscard]] const char* cm_event_name(CmEventType type) noexcept;

struct CmEvent {
  CmEventType type{};
  CmId id = 0;
  CmRejectReason reason{};
  bool timed_out = false;
  CmConnectParams request;            // kRequest
  CmReplyParams reply;                // kReply
  std::vector<uint8_t> private_data;  // kRejected, kDisconnectRequest: the peer's
};

struct CmCounters {
  uint64_t rx_mads = 0;
  uint64_t tx_mads = 0;
  uint64_t retransmits = 0;
  uint64_t rx_malformed = 0;       // not 256 bytes, or not a CM MAD of version 1/2
  uint64_t rx_unsupported = 0;     // a method or attribute the CM does not handle here
  uint64_t rx_unmatched = 0;       // names no connection of ours (or not its peer's IDs, GID or route)
  uint64_t rx_wrong_state = 0;     // right connection, wrong moment: ignored
  uint64_t rx_duplicate_req = 0;   // answered with the REP or MRA already given
  uint64_t rx_dreq_wrong_qpn = 0;  // DREQ naming another QPN (as Linux, dropped)
  uint64_t req_rejected = 0;       // REQs we rejected ourselves (invalid, stale, no resources)
  uint64_t timeouts = 0;
};

enum class CmCallStatus : uint8_t { kOk, kInvalidParameter, kInvalidState, kNoResources };

class CmEnv {
 public:
  // Sends one MAD to the GSI QP at `remote_gid` from `local_gid` (UD, Q_Key 0x80010000), by `route`.
  virtual void send_mad(std::span<const uint8_t, kMadSize> mad, const Gid& local_gid, const Gid& remote_gid,
                        CmRoute route) = 0;
  virtual uint32_t random32() = 0;

 protected:
  ~CmEnv() = default;
};

class CmAgent {
 public:
  CmAgent(const CmParams& params, CmEnv* env);

  // A MAD from the GSI QP: `source` and `destination` are the GIDs of its IP header, `route` the way back to
  // the frame's sender.
  void on_mad(std::span<const uint8_t> mad, const Gid& source, const Gid& destination, CmRoute route, uint64_t now_ms);
  // Retransmissions, timeouts and time-wait ends due by `now_ms`.
  void on_timer(uint64_t now_ms);
  // When on_timer() next has work (UINT64_MAX: none).
  [[nodiscard]] uint64_t next_deadline_ms() const noexcept;

  // Active side: sends a REQ. nullopt: private data too long, or no room for another connection.
  std::optional<CmId> connect(const CmConnectParams& request, uint64_t now_ms);
  // Passive side, after kRequest and before the peer stops waiting for an answer (then kTimeout): sends the REP.
  CmCallStatus accept(CmId id, const CmReplyParams& reply, uint64_t now_ms);
  // After kRequest (REJ of the REQ) or kReply (REJ of the REP): the connection is gone.
  CmCallStatus reject(CmId id, CmRejectReason reason, std::span<const uint8_t> private_data);
  // Active side, after kReply: sends the RTU. The connection is established.
  CmCallStatus establish(CmId id, std::span<const uint8_t> private_data = {});
  // Passive side: the first packet arrived on the QP before the RTU (IBTA "communication established").
  CmCallStatus notify_established(CmId id);
  // Established: sends a DREQ; kDisconnected follows.
  CmCallStatus disconnect(CmId id, uint64_t now_ms);
  // Abortive close in any state: REJ during setup, a DREQ once established, then no more events for `id` but
  // kTimeWaitDone once its QPN may serve again.
  void destroy(CmId id, uint64_t now_ms);

  // Events since the last call, oldest first.
  [[nodiscard]] std::vector<CmEvent> take_events();
  [[nodiscard]] const CmCounters& counters() const noexcept { return counters_; }
  [[nodiscard]] std::size_t connections() const noexcept { return connections_.size(); }

 private:
  enum class State : uint8_t {
    kReqSent,
    kMraReqReceived,  // our REQ was MRA'd
    kReqReceived,     // waiting for the consumer's accept or reject
    kRepSent,
    kMraRepReceived,  // our REP was MRA'd
    kRepReceived,     // waiting for the consumer's establish or reject
    kEstablished,
    kDreqSent,
    kTimeWait,
  };
  struct Connection {
    CmId id = 0;
    State state{};
    uint32_t remote_id = 0;
    uint64_t remote_ca_guid = 0;
    Qpn local_qpn{};
    Qpn remote_qpn{};
    Gid local_gid{};
    Gid remote_gid{};
    CmRoute route = 0;              // every MAD of the connection goes by it (CmRoute)
    uint64_t request_tid = 0;       // the REQ's: REP, RTU, MRA and REJ answering it reuse it
    bool destroyed = false;         // no events but kTimeWaitDone
    bool remote_qpn_known = false;  // in stale_ index
    // The message being retransmitted, and when.
    std::array<uint8_t, kMadSize> pending{};
    uint64_t deadline_ms = UINT64_MAX;
    uint64_t retry_interval_ms = 0;
    uint64_t give_up_ms = UINT64_MAX;  // the exchange ends by then, however the peer stretches it (cm_agent.cc)
    uint8_t retries_left = 0;
    uint8_t peer_cm_response_timeout = 0;
    uint8_t peer_max_cm_retries = 0;
  };
  // (remote comm ID or QPN, remote CA GUID, remote GID). Linux keys by the first two only; with the GID a MAD from
  // elsewhere that names another peer's IDs or QPN never meets that peer's connections.
  using PeerKey = std::tuple<uint32_t, uint64_t, Gid>;

  void on_req(std::span<const uint8_t, kMadSize> mad, const Gid& source, const Gid& destination, CmRoute route,
              uint64_t now);
  void on_rep(std::span<const uint8_t, kMadSize> mad, const Gid& source, const Gid& destination, CmRoute route);
  void on_rtu(std::span<const uint8_t, kMadSize> mad, const Gid& source);
  void on_mra(std::span<const uint8_t, kMadSize> mad, const Gid& source, uint64_t now);
  void on_rej(std::span<const uint8_t, kMadSize> mad, const Gid& source, CmRoute route, uint64_t now);
  void on_dreq(std::span<const uint8_t, kMadSize> mad, const Gid& source, const Gid& destination, CmRoute route,
               uint64_t now);
  void on_drep(std::span<const uint8_t, kMadSize> mad, const Gid& source, uint64_t now);
  void on_get(std::span<const uint8_t, kMadSize> mad, const Gid& source, const Gid& destination, CmRoute route);

  // The connection a message names by (our ID, the peer's ID), from the connection's peer; else counted. Before
  // the peer's ID is known (our REQ in flight), any peer ID matches.
  Connection* match(uint32_t our_id, uint32_t peer_id, const Gid& source);
  CmId allocate_id();
  void send(const std::array<uint8_t, kMadSize>& mad, const Gid& local, const Gid& remote, CmRoute route);
  void send(const Connection& c, const std::array<uint8_t, kMadSize>& mad) {
    send(mad, c.local_gid, c.remote_gid, c.route);
  }
  void send_and_retransmit(Connection& c, const std::array<uint8_t, kMadSize>& mad, uint64_t interval_ms,
                           uint8_t retries, uint64_t now);
  void send_rej(const Gid& local, const Gid& remote, CmRoute route, uint64_t tid, uint32_t our_id, uint32_t peer_id,
                CmMessageAnswered answered, CmRejectReason reason, std::span<const uint8_t> private_data = {});
  void send_drep(const Connection& c, uint64_t tid);
  void send_dreq(Connection& c, uint64_t now, bool retransmit);
  void set_deadline(Connection& c, uint64_t deadline_ms);
  void enter_time_wait(Connection& c, uint64_t now);
  void erase(CmId id);
  void emit(const Connection& c, CmEvent event);
  [[nodiscard]] uint64_t time_wait_ms() const noexcept;

  CmParams params_;
  CmEnv* env_;
  std::unordered_map<CmId, Connection> connections_;
  std::map<PeerKey, CmId> by_peer_id_;   // duplicate REQ detection (IBTA 12.9.8.1, cm.c cm_insert_remote_id)
  std::map<PeerKey, CmId> by_peer_qpn_;  // stale connection detection (IBTA 12.9.8.3.1, cm_insert_remote_qpn)
  std::set<std::pair<uint64_t, CmId>> timers_;
  std::vector<CmEvent> events_;
  uint64_t next_tid_;
  CmCounters counters_{};
};

}  // namespace uroce::proto
