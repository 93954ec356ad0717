// The CM state machine (cm_agent.h). Section numbers are IBTA vol. 1 ch. 12; "Linux" is drivers/infiniband/core/cm.c,
// whose choices a Linux peer expects (cm-nvmf-dcqcn.md §1.5-1.6).
#include "proto/cm_agent.h"

#include <algorithm>
#include <utility>

namespace uroce::proto {

namespace {

template <class Layout>
using In = CmView<Layout>;
template <class Layout>
using Out = CmMutView<Layout>;

template <class Bytes>
void copy_in(std::array<uint8_t, kMadSize>& mad, Bytes field, std::span<const uint8_t> data) {
  std::copy_n(data.begin(), std::min(data.size(), field.kSize),
              mad.begin() + static_cast<std::ptrdiff_t>(field.kOffset));
}

template <class Bytes>
std::vector<uint8_t> copy_out(std::span<const uint8_t, kMadSize> mad, Bytes field) {
  const auto* p = mad.data() + field.kOffset;
  return {p, p + field.kSize};
}

template <class Bytes>
Gid gid_at(std::span<const uint8_t, kMadSize> mad, Bytes field) {
  static_assert(Bytes::kSize == 16);
  Gid g;
  std::copy_n(mad.begin() + static_cast<std::ptrdiff_t>(field.kOffset), 16, g.begin());
  return g;
}

// What a peer may make us wait. Its time codes are 5 bits: 31 is 2^31 x 4.096 us, 2.4 hours a try, so a REP
// retransmitted by its REQ's CM response timeout and 15 retries, or an MRA of 31, held a connection for ~37 hours.
// A try is cut at 24 (67 s), the longest any peer we know asks for: Linux's MRAs (cma.c CMA_CM_MRA_SETTING) and
// ours (CmParams::mra_service_timeout); Linux's CM response timeout is 20 (4 s).
constexpr uint8_t kMaxPeerTimeCode = 24;
// And however the peer stretches one exchange (a message and its retransmissions, lengthened by MRAs; a REQ
// waiting for our consumer), it ends within this: well over the 74 s (16 tries of 4.6 s) a Linux REQ or REP waits
// unanswered, and two MRAs' worth.
constexpr uint64_t kMaxPeerWaitMs = 180'000;

uint64_t peer_time_ms(uint8_t code) { return cm_time_code_to_ms(std::min(code, kMaxPeerTimeCode)); }

// Retransmission interval of a REQ (Linux cm_init_av + cm_req_handler's timeout: twice the packet life time plus
// the response time we allow the peer).
uint64_t request_interval_ms(const CmParams& p) {
  return 2 * cm_time_code_to_ms(p.packet_life_time) + cm_time_code_to_ms(p.cm_response_timeout);
}

CmEvent event(CmEventType type, CmRejectReason reason = {}, std::vector<uint8_t> private_data = {}) {
  CmEvent e;
  e.type = type;
  e.reason = reason;
  e.private_data = std::move(private_data);
  return e;
}

}  // namespace

CmAgent::CmAgent(const CmParams& params, CmEnv* env)
    : params_(params), env_(env), next_tid_(uint64_t{env->random32()} << 32) {}

const char* cm_event_name(CmEventType type) noexcept {
  switch (type) {
    case CmEventType::kRequest:
      return "request";
    case CmEventType::kReply:
      return "reply";
    case CmEventType::kEstablished:
      return "established";
    case CmEventType::kRejected:
      return "rejected";
    case CmEventType::kTimeout:
      return "timeout";
    case CmEventType::kDisconnectRequest:
      return "disconnect request";
    case CmEventType::kDisconnected:
      return "disconnected";
    case CmEventType::kTimeWaitDone:
      return "time-wait done";
  }
  return "?";
}

// ---- inputs ----

void CmAgent::on_mad(std::span<const uint8_t> bytes, const Gid& source, const Gid& destination, CmRoute route,
                     uint64_t now_ms) {
  ++counters_.rx_mads;
  // The MAD layer takes exactly one 256-byte MAD per datagram (IBTA 13.4.2); anything else is not a MAD.
  if (bytes.size() != kMadSize) {
    ++counters_.rx_malformed;
    return;
  }
  const std::span<const uint8_t, kMadSize> mad(bytes.data(), kMadSize);
  const In<Mad> h(mad.data());
  if (h.get(Mad::base_version) != kMadBaseVersion || h.get(Mad::management_class) != kCmManagementClass ||
      h.get(Mad::class_version) != kCmClassVersion) {
    ++counters_.rx_malformed;  // Linux registers CM class version 2 only; the MAD layer drops the rest
    return;
  }
  const MadMethod method = h.get(Mad::method);
  if (method == MadMethod::kGet) return on_get(mad, source, destination, route);
  if (method != MadMethod::kSend) {
    ++counters_.rx_unsupported;
    return;
  }
  switch (h.get(Mad::attribute_id)) {
    case CmAttribute::kReq:
      return on_req(mad, source, destination, route, now_ms);
    case CmAttribute::kRep:
      return on_rep(mad, source, destination, route);
    case CmAttribute::kRtu:
      return on_rtu(mad, source);
    case CmAttribute::kMra:
      return on_mra(mad, source, now_ms);
    case CmAttribute::kRej:
      return on_rej(mad, source, route, now_ms);
    case CmAttribute::kDreq:
      return on_dreq(mad, source, destination, route, now_ms);
    case CmAttribute::kDrep:
      return on_drep(mad, source, now_ms);
    default:  // SIDR (UD service resolution), LAP and APR (path migration): not offered on RoCE here
      ++counters_.rx_unsupported;
      return;
  }
}

void CmAgent::on_get(std::span<const uint8_t, kMadSize> mad, const Gid& source, const Gid& destination, CmRoute route) {
  const In<Mad> h(mad.data());
  auto reply = cm_send_mad(h.get(Mad::attribute_id), h.get(Mad::transaction_id));
  Out<Mad>(reply.data()).set(Mad::method, MadMethod::kGetResponse);
  if (h.get(Mad::attribute_id) == CmAttribute::kClassPortInfo) {
    const Out<CmClassPortInfo> info(reply.data());
    info.set(CmClassPortInfo::base_version, kMadBaseVersion);
    info.set(CmClassPortInfo::class_version, kCmClassVersion);
    info.set(CmClassPortInfo::response_time_value, params_.cm_response_timeout);
  } else {
    ++counters_.rx_unsupported;
    Out<Mad>(reply.data()).set(Mad::status, MadStatus::kMethodAttributeNotSupported);
  }
  send(reply, destination, source, route);
}

void CmAgent::on_req(std::span<const uint8_t, kMadSize> mad, const Gid& source, const Gid& destination, CmRoute route,
                     uint64_t now) {
  const In<Mad> h(mad.data());
  const In<CmReq> req(mad.data());
  const uint64_t tid = h.get(Mad::transaction_id);
  const uint32_t peer_id = req.get(CmReq::local_comm_id);
  const uint64_t peer_guid = req.get(CmReq::local_ca_guid);

  // A REQ we already hold (12.9.8.1): answer as before instead of starting a second connection.
  if (const auto it = by_peer_id_.find({peer_id, peer_guid, source}); it != by_peer_id_.end()) {
    ++counters_.rx_duplicate_req;
    Connection& c = connections_.at(it->second);
    switch (c.state) {
      case State::kReqReceived: {  // the consumer is deciding: ask the peer to wait (12.6.6)
        auto mra = cm_send_mad(CmAttribute::kMra, c.request_tid);
        const Out<CmMra> m(mra.data());
        m.set(CmMra::local_comm_id, c.id);
        m.set(CmMra::remote_comm_id, c.remote_id);
        m.set(CmMra::message_mraed, static_cast<uint8_t>(CmMessageAnswered::kReq));
        m.set(CmMra::service_timeout, params_.mra_service_timeout);
        send(c, mra);
        // The peer now waits that long before it tries again: so does the consumer's deadline (below).
        const uint64_t asked =
            now + cm_time_code_to_ms(params_.mra_service_timeout) + 2 * cm_time_code_to_ms(params_.packet_life_time);
        set_deadline(c, std::max(c.deadline_ms, std::min(asked, c.give_up_ms)));
        return;
      }
      case State::kRepSent:
      case State::kMraRepReceived:
        ++counters_.retransmits;
        return send(c, c.pending);
      case State::kTimeWait:
        ++counters_.req_rejected;
        return send_rej(c.local_gid, c.remote_gid, c.route, tid, 0, peer_id, CmMessageAnswered::kReq,
                        CmRejectReason::kStaleConnection);
      default:
        return;
    }
  }

  auto reject = [&](CmRejectReason reason) {
    ++counters_.req_rejected;
    send_rej(destination, source, route, tid, 0, peer_id, CmMessageAnswered::kReq, reason);
  };
  // What this CM can serve: RC (12.7.2 transport service type), an IB MTU code, and a primary path between the
  // GIDs the datagram itself travelled between (a REQ may not steer our replies elsewhere).
  if (req.get(CmReq::transport_service_type) != 0) return reject(CmRejectReason::kInvalidTransportType);
  const uint8_t mtu = req.get(CmReq::path_mtu);
  if (mtu < 1 || mtu > 5) return reject(CmRejectReason::kInvalidMtu);
  if (gid_at(mad, CmReq::primary_local_gid) != source || gid_at(mad, CmReq::primary_remote_gid) != destination)
    return reject(CmRejectReason::kInvalidGid);
  const Qpn peer_qpn = req.get(CmReq::local_qpn);

  // Stale connection (12.9.8.3.1): the peer's QPN still belongs to one of our connections with it, so the peer
  // lost that one. Reject, and end ours (12.9.8.3.3; Linux sends the old connection a DREQ). Only the peer itself
  // can: the lookup is by the REQ's source GID too, and the REQ must come by the connection's own route, so neither
  // a REQ from another address nor one from a neighbour that sends with the peer's address (and names its QPN and
  // CA GUID, which need no secret) ends the connection; it gets the REJ only. (Linux's lookup, keyed without the
  // GID, lets any host end them.)
  if (const auto it = by_peer_qpn_.find({peer_qpn.value(), peer_guid, source}); it != by_peer_qpn_.end()) {
    reject(CmRejectReason::kStaleConnection);
    Connection& old = connections_.at(it->second);
    if (old.route != route) {
      ++counters_.rx_unmatched;
      return;
    }
    if (old.state == State::kEstablished) {
      send_dreq(old, now, /*retransmit=*/false);
      enter_time_wait(old, now);
      emit(old, event(CmEventType::kDisconnectRequest));
    }
    return;
  }
  if (connections_.size() >= params_.max_connections) return reject(CmRejectReason::kNoResources);

  Connection c;
  c.id = allocate_id();
  c.state = State::kReqReceived;
  c.remote_id = peer_id;
  c.remote_ca_guid = peer_guid;
  c.remote_qpn = peer_qpn;
  c.remote_qpn_known = true;
  c.local_gid = destination;
  c.remote_gid = source;
  c.route = route;
  c.request_tid = tid;
  c.peer_cm_response_timeout = req.get(CmReq::local_cm_response_timeout);
  c.peer_max_cm_retries = req.get(CmReq::max_cm_retries);

  CmEvent e = event(CmEventType::kRequest);
  CmConnectParams& r = e.request;
  r.service_id = req.get(CmReq::service_id);
  r.local_gid = source;
  r.remote_gid = destination;
  r.qpn = peer_qpn;
  r.starting_psn = req.get(CmReq::starting_psn);
  r.responder_resources = req.get(CmReq::responder_resources);
  r.initiator_depth = req.get(CmReq::initiator_depth);
  r.path_mtu = mtu;
  r.retry_count = req.get(CmReq::retry_count);
  r.rnr_retry_count = req.get(CmReq::rnr_retry_count);
  r.srq = req.get(CmReq::srq);
  r.end_to_end_flow_control = req.get(CmReq::end_to_end_flow_control);
  r.hop_limit = req.get(CmReq::primary_hop_limit);
  r.traffic_class = req.get(CmReq::primary_traffic_class);
  r.flow_label = req.get(CmReq::primary_flow_label);
  r.local_ack_timeout = req.get(CmReq::primary_local_ack_timeout);
  r.private_data = copy_out(mad, CmReq::private_data);
  r.route = route;
  r.peer_ca_guid = peer_guid;
  r.peer_cm_response_timeout = c.peer_cm_response_timeout;
  r.peer_max_cm_retries = c.peer_max_cm_retries;

  by_peer_id_[{peer_id, peer_guid, source}] = c.id;
  by_peer_qpn_[{peer_qpn.value(), peer_guid, source}] = c.id;
  Connection& stored = connections_.emplace(c.id, c).first->second;
  // The consumer answers within the time the peer waits for our answer: each of its tries waits the response time
  // its REQ allows us, plus a packet life time each way (Linux cm_send_req), and it makes max CM retries of them
  // after the first; within what a peer may ask (kMaxPeerTimeCode, kMaxPeerWaitMs). After that the peer has given
  // up, so a request still undecided is ended (on_timer) rather than held, however many REQs come.
  const uint64_t peer_waits =
      (uint64_t{c.peer_max_cm_retries} + 1) *
      (peer_time_ms(req.get(CmReq::remote_cm_response_timeout)) + 2 * cm_time_code_to_ms(params_.packet_life_time));
  stored.give_up_ms = now + kMaxPeerWaitMs;
  set_deadline(stored, std::min(now + peer_waits, stored.give_up_ms));
  emit(stored, std::move(e));
}

void CmAgent::on_rep(std::span<const uint8_t, kMadSize> mad, const Gid& source, const Gid& destination, CmRoute route) {
  const In<CmRep> rep(mad.data());
  const uint32_t our_id = rep.get(CmRep::remote_comm_id);
  const uint32_t peer_id = rep.get(CmRep::local_comm_id);
  const auto it = connections_.find(our_id);
  if (it == connections_.end() || it->second.remote_gid != source) {
    // A REP for no REQ of ours (12.6.8): tell the sender its ID is unknown here.
    ++counters_.rx_unmatched;
    return send_rej(destination, source, route, In<Mad>(mad.data()).get(Mad::transaction_id), 0, peer_id,
                    CmMessageAnswered::kRep, CmRejectReason::kInvalidCommId);
  }
  Connection& c = it->second;
  if (c.state == State::kEstablished && c.remote_id == peer_id) {
    // Our RTU was lost: the peer retransmits its REP; send the RTU again (Linux does).
    auto rtu = cm_send_mad(CmAttribute::kRtu, c.request_tid);
    Out<CmRtu>(rtu.data()).set(CmRtu::local_comm_id, c.id);
    Out<CmRtu>(rtu.data()).set(CmRtu::remote_comm_id, c.remote_id);
    ++counters_.retransmits;
    return send(c, rtu);
  }
  if (c.state != State::kReqSent && c.state != State::kMraReqReceived) {
    ++counters_.rx_wrong_state;
    return;
  }
  const uint64_t peer_guid = rep.get(CmRep::local_ca_guid);
  const Qpn peer_qpn = rep.get(CmRep::local_qpn);
  if (by_peer_id_.contains({peer_id, peer_guid, source})) {
    // Another connection of ours has that peer ID already: a duplicate REP, which Linux drops (cm_rep_handler).
    // Taking the ID over would take that connection's duplicate-REQ and timeout-REJ lookups with it.
    ++counters_.rx_unmatched;
    return;
  }
  if (by_peer_qpn_.contains({peer_qpn.value(), peer_guid, source})) {
    // The peer's QPN is still another connection's here (12.9.8.3.1).
    ++counters_.req_rejected;
    send_rej(c.local_gid, c.remote_gid, c.route, c.request_tid, c.id, peer_id, CmMessageAnswered::kRep,
             CmRejectReason::kStaleConnection);
    emit(c, event(CmEventType::kRejected, CmRejectReason::kStaleConnection));
    return erase(c.id);
  }
  set_deadline(c, UINT64_MAX);
  c.state = State::kRepReceived;
  c.remote_id = peer_id;
  c.remote_ca_guid = peer_guid;
  c.remote_qpn = peer_qpn;
  c.remote_qpn_known = true;
  by_peer_id_[{peer_id, peer_guid, source}] = c.id;
  by_peer_qpn_[{peer_qpn.value(), peer_guid, source}] = c.id;

  CmEvent e = event(CmEventType::kReply);
  CmReplyParams& r = e.reply;
  r.qpn = peer_qpn;
  r.starting_psn = rep.get(CmRep::starting_psn);
  r.responder_resources = rep.get(CmRep::responder_resources);
  r.initiator_depth = rep.get(CmRep::initiator_depth);
  r.rnr_retry_count = rep.get(CmRep::rnr_retry_count);
  r.srq = rep.get(CmRep::srq);
  r.private_data = copy_out(mad, CmRep::private_data);
  r.peer_ca_guid = peer_guid;
  emit(c, std::move(e));
}

void CmAgent::on_rtu(std::span<const uint8_t, kMadSize> mad, const Gid& source) {
  const In<CmRtu> rtu(mad.data());
  Connection* c = match(rtu.get(CmRtu::remote_comm_id), rtu.get(CmRtu::local_comm_id), source);
  if (c == nullptr) return;
  if (c->state != State::kRepSent && c->state != State::kMraRepReceived) {
    ++counters_.rx_wrong_state;  // a duplicate RTU, or one that overtook nothing
    return;
  }
  set_deadline(*c, UINT64_MAX);
  c->state = State::kEstablished;
  emit(*c, event(CmEventType::kEstablished));
}

void CmAgent::on_mra(std::span<const uint8_t, kMadSize> mad, const Gid& source, uint64_t now) {
  const In<CmMra> mra(mad.data());
  Connection* c = match(mra.get(CmMra::remote_comm_id), mra.get(CmMra::local_comm_id), source);
  if (c == nullptr) return;
  const auto mraed = static_cast<CmMessageAnswered>(mra.get(CmMra::message_mraed));
  State next;
  if (mraed == CmMessageAnswered::kReq && c->state == State::kReqSent) {
    next = State::kMraReqReceived;
  } else if (mraed == CmMessageAnswered::kRep && c->state == State::kRepSent) {
    next = State::kMraRepReceived;
  } else {
    ++counters_.rx_wrong_state;
    return;
  }
  // 12.6.6: wait the service time the peer asked for (plus a packet life time) before retransmitting, within
  // what a peer may ask (kMaxPeerTimeCode, kMaxPeerWaitMs).
  c->state = next;
  c->retry_interval_ms = peer_time_ms(mra.get(CmMra::service_timeout)) + cm_time_code_to_ms(params_.packet_life_time);
  set_deadline(*c, std::min(now + c->retry_interval_ms, c->give_up_ms));
}

void CmAgent::on_rej(std::span<const uint8_t, kMadSize> mad, const Gid& source, CmRoute route, uint64_t now) {
  const In<CmRej> rej(mad.data());
  const auto reason = static_cast<CmRejectReason>(rej.get(CmRej::reason));
  Connection* found = nullptr;
  if (reason == CmRejectReason::kTimeout) {
    // A peer withdrawing its REQ does not know our ID: it names itself, with its CA GUID as the ARI (12.6.7.2),
    // and Linux looks the connection up by those. Nothing in that is secret, so it must also come by the
    // connection's route, and name our ID if it names one.
    const uint64_t guid = detail::load_be<8>(mad.data() + CmRej::additional_reject_info.kOffset);
    const auto it = by_peer_id_.find({rej.get(CmRej::local_comm_id), guid, source});
    if (it == by_peer_id_.end()) {
      ++counters_.rx_unmatched;
      return;
    }
    found = &connections_.at(it->second);
    const CmId ours = rej.get(CmRej::remote_comm_id);
    if (found->route != route || (ours != 0 && ours != found->id)) {
      ++counters_.rx_unmatched;
      return;
    }
  } else {
    // A REJ of our REQ may name no peer ID (Linux's, when it made none): match() takes any before we know it.
    found = match(rej.get(CmRej::remote_comm_id), rej.get(CmRej::local_comm_id), source);
    if (found == nullptr) return;
  }
  Connection& c = *found;
  switch (c.state) {
    case State::kReqSent:
    case State::kMraReqReceived:
    case State::kRepSent:
    case State::kMraRepReceived:
    case State::kRepReceived:
    case State::kReqReceived:
      break;
    default:
      ++counters_.rx_wrong_state;
      return;
  }
  emit(c, event(CmEventType::kRejected, reason, copy_out(mad, CmRej::private_data)));
  // A stale-connection REJ means the peer still holds our QPN: keep it out of use for a time-wait (12.9.8.3.1).
  if (reason == CmRejectReason::kStaleConnection) return enter_time_wait(c, now);
  erase(c.id);
}

void CmAgent::on_dreq(std::span<const uint8_t, kMadSize> mad, const Gid& source, const Gid& destination, CmRoute route,
                      uint64_t now) {
  const In<CmDreq> dreq(mad.data());
  const uint64_t tid = In<Mad>(mad.data()).get(Mad::transaction_id);
  const auto it = connections_.find(dreq.get(CmDreq::remote_comm_id));
  if (it == connections_.end() || it->second.remote_gid != source ||
      dreq.get(CmDreq::local_comm_id) != it->second.remote_id) {
    // 12.9.8.5: a DREQ for a connection we do not have still gets its DREP, so the peer can finish.
    ++counters_.rx_unmatched;
    auto drep = cm_send_mad(CmAttribute::kDrep, tid);
    Out<CmDrep>(drep.data()).set(CmDrep::local_comm_id, dreq.get(CmDreq::remote_comm_id));
    Out<CmDrep>(drep.data()).set(CmDrep::remote_comm_id, dreq.get(CmDreq::local_comm_id));
    return send(drep, destination, source, route);
  }
  Connection& c = it->second;
  if (dreq.get(CmDreq::remote_qpn) != c.local_qpn) {
    ++counters_.rx_dreq_wrong_qpn;  // Linux drops these too (cm_dreq_handler)
    return;
  }
  switch (c.state) {
    case State::kRepSent:
    case State::kMraRepReceived:
    case State::kEstablished:
      send_drep(c, tid);
      enter_time_wait(c, now);
      return emit(c, event(CmEventType::kDisconnectRequest, {}, copy_out(mad, CmDreq::private_data)));
    case State::kDreqSent:  // both sides disconnected at once: ours is answered too
      send_drep(c, tid);
      enter_time_wait(c, now);
      return emit(c, event(CmEventType::kDisconnected));
    case State::kTimeWait:  // our DREP was lost
      ++counters_.retransmits;
      return send_drep(c, tid);
    default:
      ++counters_.rx_wrong_state;
      return;
  }
}

void CmAgent::on_drep(std::span<const uint8_t, kMadSize> mad, const Gid& source, uint64_t now) {
  const In<CmDrep> drep(mad.data());
  Connection* c = match(drep.get(CmDrep::remote_comm_id), drep.get(CmDrep::local_comm_id), source);
  if (c == nullptr) return;
  if (c->state != State::kDreqSent) {
    ++counters_.rx_wrong_state;
    return;
  }
  enter_time_wait(*c, now);
  emit(*c, event(CmEventType::kDisconnected));
}

void CmAgent::on_timer(uint64_t now_ms) {
  while (!timers_.empty() && timers_.begin()->first <= now_ms) {
    Connection& c = connections_.at(timers_.begin()->second);
    timers_.erase(timers_.begin());
    c.deadline_ms = UINT64_MAX;
    if (c.state == State::kTimeWait) {
      const bool destroyed = c.destroyed;
      c.destroyed = false;  // kTimeWaitDone reaches the consumer even after destroy(): the QPN is free again
      emit(c, event(CmEventType::kTimeWaitDone));
      c.destroyed = destroyed;
      erase(c.id);
      continue;
    }
    if (c.retries_left > 0 && now_ms < c.give_up_ms) {
      --c.retries_left;
      ++counters_.retransmits;
      send(c, c.pending);
      set_deadline(c, std::min(now_ms + c.retry_interval_ms, c.give_up_ms));
      continue;
    }
    ++counters_.timeouts;
    switch (c.state) {
      case State::kReqSent:
      case State::kMraReqReceived:
        emit(c, event(CmEventType::kTimeout));
        erase(c.id);
        break;
      case State::kReqReceived:
        // The consumer let the request wait past the peer's patience (on_req): it is ended as the consumer's
        // destroy() would end it, with the REJ Linux sends then (cm_destroy_id in REQ_RCVD: consumer defined),
        // which the peer's CM finds by its own ID. The consumer's accept() or reject() finds nothing now.
        emit(c, event(CmEventType::kTimeout));
        destroy(c.id, now_ms);
        break;
      case State::kRepSent:
      case State::kMraRepReceived:
        // 12.6.5: the active side never answered our REP; tell it, in case only our REPs were lost.
        send_rej(c.local_gid, c.remote_gid, c.route, c.request_tid, c.id, c.remote_id, CmMessageAnswered::kRep,
                 CmRejectReason::kTimeout);
        emit(c, event(CmEventType::kTimeout));
        erase(c.id);
        break;
      case State::kDreqSent:
        enter_time_wait(c, now_ms);
        {
          CmEvent e = event(CmEventType::kDisconnected);
          e.timed_out = true;
          emit(c, std::move(e));
        }
        break;
      default:
        break;
    }
  }
}

uint64_t CmAgent::next_deadline_ms() const noexcept { return timers_.empty() ? UINT64_MAX : timers_.begin()->first; }

// ---- consumer calls ----

std::optional<CmId> CmAgent::connect(const CmConnectParams& p, uint64_t now_ms) {
  if (p.private_data.size() > CmReq::private_data.kSize || p.path_mtu < 1 || p.path_mtu > 5) return std::nullopt;
  if (connections_.size() >= params_.max_connections) return std::nullopt;
  Connection c;
  c.id = allocate_id();
  c.state = State::kReqSent;
  c.local_qpn = p.qpn;
  c.local_gid = p.local_gid;
  c.remote_gid = p.remote_gid;
  c.route = p.route;
  c.request_tid = next_tid_++;

  auto mad = cm_send_mad(CmAttribute::kReq, c.request_tid);
  const Out<CmReq> req(mad.data());
  req.set(CmReq::local_comm_id, c.id);
  req.set(CmReq::service_id, p.service_id);
  req.set(CmReq::local_ca_guid, params_.local_ca_guid);
  req.set(CmReq::local_qpn, p.qpn);
  req.set(CmReq::responder_resources, p.responder_resources);
  req.set(CmReq::initiator_depth, p.initiator_depth);
  req.set(CmReq::remote_cm_response_timeout, params_.cm_response_timeout);
  req.set(CmReq::transport_service_type, 0);  // RC
  req.set(CmReq::end_to_end_flow_control, p.end_to_end_flow_control);
  req.set(CmReq::starting_psn, p.starting_psn);
  req.set(CmReq::local_cm_response_timeout, params_.cm_response_timeout);
  req.set(CmReq::retry_count, std::min<uint8_t>(p.retry_count, 7));
  req.set(CmReq::pkey, kDefaultPKey);
  req.set(CmReq::path_mtu, p.path_mtu);
  req.set(CmReq::rnr_retry_count, std::min<uint8_t>(p.rnr_retry_count, 7));
  req.set(CmReq::max_cm_retries, params_.max_cm_retries);
  req.set(CmReq::srq, p.srq);
  // RoCE has no LIDs: the permissive LID, and a routed (not subnet-local) path, as Linux's cm_format_req does.
  req.set(CmReq::primary_local_lid, 0xFFFF);
  req.set(CmReq::primary_remote_lid, 0xFFFF);
  copy_in(mad, CmReq::primary_local_gid, p.local_gid);
  copy_in(mad, CmReq::primary_remote_gid, p.remote_gid);
  req.set(CmReq::primary_flow_label, p.flow_label);
  req.set(CmReq::primary_traffic_class, p.traffic_class);
  req.set(CmReq::primary_hop_limit, p.hop_limit);
  req.set(CmReq::primary_local_ack_timeout, p.local_ack_timeout);
  copy_in(mad, CmReq::private_data, p.private_data);

  const CmId id = c.id;
  auto& stored = connections_.emplace(id, c).first->second;
  send_and_retransmit(stored, mad, request_interval_ms(params_), params_.max_cm_retries, now_ms);
  return id;
}

CmCallStatus CmAgent::accept(CmId id, const CmReplyParams& p, uint64_t now_ms) {
  const auto it = connections_.find(id);
  if (it == connections_.end() || it->second.state != State::kReqReceived) return CmCallStatus::kInvalidState;
  if (p.private_data.size() > CmRep::private_data.kSize) return CmCallStatus::kInvalidParameter;
  Connection& c = it->second;
  c.local_qpn = p.qpn;
  c.state = State::kRepSent;
  auto mad = cm_send_mad(CmAttribute::kRep, c.request_tid);
  const Out<CmRep> rep(mad.data());
  rep.set(CmRep::local_comm_id, c.id);
  rep.set(CmRep::remote_comm_id, c.remote_id);
  rep.set(CmRep::local_qpn, p.qpn);
  rep.set(CmRep::starting_psn, p.starting_psn);
  rep.set(CmRep::responder_resources, p.responder_resources);
  rep.set(CmRep::initiator_depth, p.initiator_depth);
  rep.set(CmRep::target_ack_delay, params_.target_ack_delay);
  rep.set(CmRep::failover_accepted, 0);
  rep.set(CmRep::end_to_end_flow_control, true);
  rep.set(CmRep::rnr_retry_count, std::min<uint8_t>(p.rnr_retry_count, 7));
  rep.set(CmRep::srq, p.srq);
  rep.set(CmRep::local_ca_guid, params_.local_ca_guid);
  copy_in(mad, CmRep::private_data, p.private_data);
  // The peer said how long it takes to answer and how often to try (its REQ's local CM response timeout and max
  // CM retries, a 4-bit field): retransmit the REP by those, as Linux does, with our packet life time on top, within
  // what a peer may ask (kMaxPeerTimeCode, kMaxPeerWaitMs).
  const uint64_t interval = peer_time_ms(c.peer_cm_response_timeout) + 2 * cm_time_code_to_ms(params_.packet_life_time);
  send_and_retransmit(c, mad, interval, c.peer_max_cm_retries, now_ms);
  return CmCallStatus::kOk;
}

CmCallStatus CmAgent::reject(CmId id, CmRejectReason reason, std::span<const uint8_t> private_data) {
  const auto it = connections_.find(id);
  if (it == connections_.end()) return CmCallStatus::kInvalidState;
  if (private_data.size() > CmRej::private_data.kSize) return CmCallStatus::kInvalidParameter;
  Connection& c = it->second;
  CmMessageAnswered answered;
  if (c.state == State::kReqReceived) {
    answered = CmMessageAnswered::kReq;
  } else if (c.state == State::kRepReceived) {
    answered = CmMessageAnswered::kRep;
  } else {
    return CmCallStatus::kInvalidState;
  }
  ++counters_.req_rejected;
  send_rej(c.local_gid, c.remote_gid, c.route, c.request_tid, c.id, c.remote_id, answered, reason, private_data);
  erase(id);
  return CmCallStatus::kOk;
}

CmCallStatus CmAgent::establish(CmId id, std::span<const uint8_t> private_data) {
  const auto it = connections_.find(id);
  if (it == connections_.end() || it->second.state != State::kRepReceived) return CmCallStatus::kInvalidState;
  if (private_data.size() > CmRtu::private_data.kSize) return CmCallStatus::kInvalidParameter;
  Connection& c = it->second;
  auto rtu = cm_send_mad(CmAttribute::kRtu, c.request_tid);
  Out<CmRtu>(rtu.data()).set(CmRtu::local_comm_id, c.id);
  Out<CmRtu>(rtu.data()).set(CmRtu::remote_comm_id, c.remote_id);
  copy_in(rtu, CmRtu::private_data, private_data);
  send(c, rtu);
  c.state = State::kEstablished;
  return CmCallStatus::kOk;
}

CmCallStatus CmAgent::notify_established(CmId id) {
  const auto it = connections_.find(id);
  if (it == connections_.end()) return CmCallStatus::kInvalidState;
  Connection& c = it->second;
  if (c.state == State::kEstablished) return CmCallStatus::kOk;
  if (c.state != State::kRepSent && c.state != State::kMraRepReceived) return CmCallStatus::kInvalidState;
  set_deadline(c, UINT64_MAX);
  c.state = State::kEstablished;
  emit(c, event(CmEventType::kEstablished));
  return CmCallStatus::kOk;
}

CmCallStatus CmAgent::disconnect(CmId id, uint64_t now_ms) {
  const auto it = connections_.find(id);
  if (it == connections_.end() || it->second.state != State::kEstablished) return CmCallStatus::kInvalidState;
  send_dreq(it->second, now_ms, /*retransmit=*/true);
  return CmCallStatus::kOk;
}

void CmAgent::destroy(CmId id, uint64_t now_ms) {
  const auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  c.destroyed = true;
  switch (c.state) {
    case State::kReqSent:
    case State::kMraReqReceived:
      // Linux's cm_destroy_id: a REQ in flight is withdrawn with a REJ "timeout".
      send_rej(c.local_gid, c.remote_gid, c.route, c.request_tid, c.id, 0, CmMessageAnswered::kReq,
               CmRejectReason::kTimeout);
      return erase(id);
    case State::kReqReceived:
      send_rej(c.local_gid, c.remote_gid, c.route, c.request_tid, c.id, c.remote_id, CmMessageAnswered::kReq,
               CmRejectReason::kConsumerDefined);
      return erase(id);
    case State::kRepReceived:
      send_rej(c.local_gid, c.remote_gid, c.route, c.request_tid, c.id, c.remote_id, CmMessageAnswered::kRep,
               CmRejectReason::kConsumerDefined);
      return erase(id);
    case State::kRepSent:
    case State::kMraRepReceived:
    case State::kEstablished:
      // Tell the peer once; the QPN still waits out a time-wait before it serves another connection.
      send_dreq(c, now_ms, /*retransmit=*/false);
      return enter_time_wait(c, now_ms);
    case State::kDreqSent:
      return enter_time_wait(c, now_ms);
    case State::kTimeWait:
      return;
  }
}

std::vector<CmEvent> CmAgent::take_events() { return std::exchange(events_, {}); }

// ---- helpers ----

CmAgent::Connection* CmAgent::match(uint32_t our_id, uint32_t peer_id, const Gid& source) {
  const auto it = connections_.find(our_id);
  if (it == connections_.end() || (it->second.remote_id != 0 && it->second.remote_id != peer_id) ||
      it->second.remote_gid != source) {
    ++counters_.rx_unmatched;
    return nullptr;
  }
  return &it->second;
}

CmId CmAgent::allocate_id() {
  // Random, so that nobody can guess the ID of a connection it has not seen (a MAD for a connection must name it).
  // Peers key duplicate and stale detection on it while they remember a connection (its time-wait, seconds); a
  // random 32-bit ID comes back within that time with odds too small to matter.
  CmId id = 0;
  do {
    id = env_->random32();
  } while (id == 0 || connections_.contains(id));
  return id;
}

void CmAgent::send(const std::array<uint8_t, kMadSize>& mad, const Gid& local, const Gid& remote, CmRoute route) {
  ++counters_.tx_mads;
  env_->send_mad(mad, local, remote, route);
}

void CmAgent::send_and_retransmit(Connection& c, const std::array<uint8_t, kMadSize>& mad, uint64_t interval_ms,
                                  uint8_t retries, uint64_t now) {
  c.pending = mad;
  c.retry_interval_ms = interval_ms;
  c.retries_left = retries;
  c.give_up_ms = now + kMaxPeerWaitMs;
  send(c, mad);
  set_deadline(c, std::min(now + interval_ms, c.give_up_ms));
}

void CmAgent::send_rej(const Gid& local, const Gid& remote, CmRoute route, uint64_t tid, uint32_t our_id,
                       uint32_t peer_id, CmMessageAnswered answered, CmRejectReason reason,
                       std::span<const uint8_t> private_data) {
  auto mad = cm_send_mad(CmAttribute::kRej, tid);
  const Out<CmRej> rej(mad.data());
  rej.set(CmRej::local_comm_id, our_id);
  rej.set(CmRej::remote_comm_id, peer_id);
  rej.set(CmRej::message_rejected, static_cast<uint8_t>(answered));
  rej.set(CmRej::reason, static_cast<uint16_t>(reason));
  if (reason == CmRejectReason::kTimeout) {  // 12.6.7.2: the ARI of a timeout REJ is our CA GUID
    rej.set(CmRej::reject_info_length, 8);
    detail::store_be<8>(mad.data() + CmRej::additional_reject_info.kOffset, params_.local_ca_guid);
  }
  copy_in(mad, CmRej::private_data, private_data);
  send(mad, local, remote, route);
}

void CmAgent::send_drep(const Connection& c, uint64_t tid) {
  auto drep = cm_send_mad(CmAttribute::kDrep, tid);
  Out<CmDrep>(drep.data()).set(CmDrep::local_comm_id, c.id);
  Out<CmDrep>(drep.data()).set(CmDrep::remote_comm_id, c.remote_id);
  send(c, drep);
}

void CmAgent::send_dreq(Connection& c, uint64_t now, bool retransmit) {
  auto dreq = cm_send_mad(CmAttribute::kDreq, next_tid_++);
  const Out<CmDreq> d(dreq.data());
  d.set(CmDreq::local_comm_id, c.id);
  d.set(CmDreq::remote_comm_id, c.remote_id);
  d.set(CmDreq::remote_qpn, c.remote_qpn);  // Linux drops a DREQ that does not name its QPN
  if (!retransmit) return send(c, dreq);
  c.state = State::kDreqSent;
  send_and_retransmit(c, dreq, request_interval_ms(params_), params_.max_cm_retries, now);
}

void CmAgent::set_deadline(Connection& c, uint64_t deadline_ms) {
  if (c.deadline_ms != UINT64_MAX) timers_.erase({c.deadline_ms, c.id});
  c.deadline_ms = deadline_ms;
  if (deadline_ms != UINT64_MAX) timers_.insert({deadline_ms, c.id});
}

uint64_t CmAgent::time_wait_ms() const noexcept {
  // Linux: the address vector's timeout, one more than the packet life time; never below a second, so a stray
  // packet of the old connection cannot reach a new one on the same QPN.
  return std::max<uint64_t>(1000, cm_time_code_to_ms(static_cast<uint8_t>(params_.packet_life_time + 1)));
}

void CmAgent::enter_time_wait(Connection& c, uint64_t now) {
  c.state = State::kTimeWait;
  set_deadline(c, now + time_wait_ms());
}

void CmAgent::erase(CmId id) {
  const auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  set_deadline(c, UINT64_MAX);
  if (const auto p = by_peer_id_.find({c.remote_id, c.remote_ca_guid, c.remote_gid});
      p != by_peer_id_.end() && p->second == id)
    by_peer_id_.erase(p);
  if (c.remote_qpn_known) {
    if (const auto q = by_peer_qpn_.find({c.remote_qpn.value(), c.remote_ca_guid, c.remote_gid});
        q != by_peer_qpn_.end() && q->second == id)
      by_peer_qpn_.erase(q);
  }
  connections_.erase(it);
}

void CmAgent::emit(const Connection& c, CmEvent event) {
  if (c.destroyed) return;
  event.id = c.id;
  events_.push_back(std::move(event));
}

}  // namespace uroce::proto
