// libFuzzer target for the CM state machine (proto/cm_agent.h). A client agent (198.18.0.1) and a server agent
// (198.18.0.2) talk through a network the script controls, a third host (198.18.0.9) forges MADs, and both
// consumers act when the script says. The input is a script of steps; step % 8 is
//   0  deliver the oldest MAD in flight (step & 8: from the server, else from the client); step & 16 loses it
//   1  a forged MAD to one agent (step & 8: the client): [attribute index][source: client, server, third]
//      [n patches][n x (offset, byte)] over a well-formed MAD of that attribute that names the live IDs and QPNs
//   2  raw bytes to one agent: [u8 length][bytes] (any size, any header)
//   3  the client connects: [QPN byte][MTU code][private data length]
//   4  the server's consumer answers its oldest open request: [accept / reject / MRA-by-waiting selector]
//   5  the client's consumer answers its oldest reply: establish or reject
//   6  disconnect or destroy a connection of either side: [which][index]
//   7  the clock moves 1 ms << (step >> 3 & 15); both agents' timers run
// Oracles (abort()): every event names a connection the agent reported before or a new one; no connection
// count exceeds max_connections; every MAD an agent sends is a 256-byte CM MAD of class version 2 from the
// agent's own GID; and after the script, with the network draining and the clock running, both agents stop
// retransmitting within a bounded number of steps (no endless timer) and end with no connection in time-wait.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <set>
#include <span>
#include <vector>

#include "proto/cm_agent.h"
#include "proto/rdma_cm.h"

namespace {

using namespace uroce::proto;

const Gid kClient = IpAddress::from_ipv4(0xC6120001).gid;
const Gid kServer = IpAddress::from_ipv4(0xC6120002).gid;
const Gid kThird = IpAddress::from_ipv4(0xC6120009).gid;
constexpr std::size_t kMaxConnections = 8;

// The route a MAD from `gid` comes by: its last address byte.
CmRoute route_of(const Gid& gid) { return gid[15]; }

void check(bool ok) {
  if (!ok) std::abort();
}

struct Wire {
  std::array<uint8_t, kMadSize> mad;
  Gid from, to;
};

class Host final : public CmEnv {
 public:
  explicit Host(const Gid& gid, uint32_t seed) : gid_(gid), seed_(seed) {}
  void send_mad(std::span<const uint8_t, kMadSize> mad, const Gid& local, const Gid& remote, CmRoute) override {
    const CmView<Mad> h(mad.data());
    check(h.get(Mad::base_version) == kMadBaseVersion && h.get(Mad::management_class) == kCmManagementClass &&
          h.get(Mad::class_version) == kCmClassVersion);
    check(local == gid_);
    Wire w;
    std::copy(mad.begin(), mad.end(), w.mad.begin());
    w.from = local;
    w.to = remote;
    out.push_back(w);
  }
  uint32_t random32() override { return seed_ = seed_ * 1664525 + 1013904223; }
  std::deque<Wire> out;

 private:
  Gid gid_;
  uint32_t seed_;
};

struct Side {
  Host host;
  CmAgent agent;
  std::set<CmId> known;           // IDs the agent has reported
  std::deque<CmId> requests;      // kRequest not yet answered
  std::deque<CmId> replies;       // kReply not yet answered
  std::vector<CmId> connections;  // established or in teardown, for disconnect/destroy
  Side(const Gid& gid, uint32_t seed, uint64_t guid)
      : host(gid, seed), agent(CmParams{.local_ca_guid = guid, .max_connections = kMaxConnections}, &host) {}

  void take_events() {
    for (const CmEvent& e : agent.take_events()) {
      check(e.id != 0);
      if (e.type != CmEventType::kRequest) check(known.contains(e.id));
      known.insert(e.id);
      switch (e.type) {
        case CmEventType::kRequest:
          requests.push_back(e.id);
          break;
        case CmEventType::kReply:
          replies.push_back(e.id);
          break;
        case CmEventType::kEstablished:
          connections.push_back(e.id);
          break;
        default:
          break;
      }
    }
    check(agent.connections() <= kMaxConnections);
  }
};

class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> d) : d_(d) {}
  bool empty() const { return d_.empty(); }
  uint8_t u8() {
    if (d_.empty()) return 0;
    const uint8_t v = d_[0];
    d_ = d_.subspan(1);
    return v;
  }
  std::span<const uint8_t> take(std::size_t n) {
    n = std::min(n, d_.size());
    const auto s = d_.first(n);
    d_ = d_.subspan(n);
    return s;
  }

 private:
  std::span<const uint8_t> d_;
};

constexpr std::array<CmAttribute, 8> kAttributes = {CmAttribute::kReq,  CmAttribute::kRep,          CmAttribute::kRtu,
                                                    CmAttribute::kMra,  CmAttribute::kRej,          CmAttribute::kDreq,
                                                    CmAttribute::kDrep, CmAttribute::kClassPortInfo};

// A well-formed MAD of `attribute` from `sender` to `receiver`, naming their latest connection's IDs.
std::array<uint8_t, kMadSize> forge(CmAttribute attribute, const Side& sender, const Side& receiver, const Gid& source,
                                    const Gid& destination) {
  std::array<uint8_t, kMadSize> mad{};
  const CmMutView<Mad> h(mad.data());
  h.set(Mad::base_version, kMadBaseVersion);
  h.set(Mad::management_class, kCmManagementClass);
  h.set(Mad::class_version, kCmClassVersion);
  h.set(Mad::method, attribute == CmAttribute::kClassPortInfo ? MadMethod::kGet : MadMethod::kSend);
  h.set(Mad::attribute_id, attribute);
  const uint32_t ours = sender.known.empty() ? 1 : *sender.known.rbegin();
  const uint32_t theirs = receiver.known.empty() ? 1 : *receiver.known.rbegin();
  // Every message has (local comm ID, remote comm ID) first, except the REQ.
  CmMutView<CmRep>(mad.data()).set(CmRep::local_comm_id, ours);
  CmMutView<CmRep>(mad.data()).set(CmRep::remote_comm_id, theirs);
  if (attribute == CmAttribute::kReq) {
    const CmMutView<CmReq> r(mad.data());
    r.set(CmReq::local_comm_id, ours);
    r.set(CmReq::local_qpn, Qpn{0x10 + ours % 4});
    r.set(CmReq::path_mtu, 3);
    r.set(CmReq::max_cm_retries, 2);
    r.set(CmReq::local_cm_response_timeout, 10);
    std::copy(source.begin(), source.end(), mad.begin() + CmReq::primary_local_gid.kOffset);
    std::copy(destination.begin(), destination.end(), mad.begin() + CmReq::primary_remote_gid.kOffset);
  } else if (attribute == CmAttribute::kRep) {
    CmMutView<CmRep>(mad.data()).set(CmRep::local_qpn, Qpn{0x20 + ours % 4});
  } else if (attribute == CmAttribute::kDreq) {
    CmMutView<CmDreq>(mad.data()).set(CmDreq::remote_qpn, Qpn{0x20});
  }
  return mad;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Cursor in({data, size});
  Side client(kClient, 1, 0x0202C9FFFE000001), server(kServer, 2, 0x0202C9FFFE000002);
  uint64_t now = 1;
  Side* sides[2] = {&client, &server};

  auto deliver = [&](Side& from, bool lose) {
    if (from.host.out.empty()) return;
    const Wire w = from.host.out.front();
    from.host.out.pop_front();
    if (lose) return;
    Side& to = w.to == kClient ? client : server;
    if (w.to != kClient && w.to != kServer) return;  // to the third host: gone
    to.agent.on_mad(w.mad, w.from, w.to, route_of(w.from), now);
    to.take_events();
  };

  uint16_t next_qpn = 0x100;
  while (!in.empty()) {
    const uint8_t step = in.u8();
    switch (step % 8) {
      case 0:
        deliver(step & 8 ? server : client, (step & 16) != 0);
        break;
      case 1: {
        Side& to = step & 8 ? client : server;
        Side& posing = &to == &client ? server : client;
        const CmAttribute attribute = kAttributes[in.u8() % kAttributes.size()];
        const uint8_t who = in.u8() % 3;
        const Gid& source = who == 0 ? kClient : who == 1 ? kServer : kThird;
        const Gid& destination = &to == &client ? kClient : kServer;
        auto mad = forge(attribute, posing, to, source, destination);
        for (uint8_t n = in.u8() % 8; n > 0; --n) {
          const uint8_t offset = in.u8();
          mad[offset] = in.u8();
        }
        to.agent.on_mad(mad, source, destination, route_of(source), now);
        to.take_events();
        break;
      }
      case 2: {
        Side& to = step & 8 ? client : server;
        const auto bytes = in.take(in.u8() + (step & 16 ? 256 : 0));
        to.agent.on_mad(bytes, kThird, &to == &client ? kClient : kServer, route_of(kThird), now);
        to.take_events();
        break;
      }
      case 3: {
        CmConnectParams p;
        p.service_id = rdma_cm_service_id(4420);
        p.local_gid = kClient;
        p.remote_gid = step & 8 ? kThird : kServer;
        p.qpn = Qpn{next_qpn++};
        p.path_mtu = in.u8() % 7;
        p.route = route_of(p.remote_gid);
        p.private_data.assign(in.u8() % 100, 0x5A);
        const auto id = client.agent.connect(p, now);
        if (id) client.known.insert(*id);
        break;
      }
      case 4: {
        if (server.requests.empty()) break;
        const CmId id = server.requests.front();
        server.requests.pop_front();
        const uint8_t how = in.u8() % 3;
        if (how == 0) {
          CmReplyParams r;
          r.qpn = Qpn{next_qpn++};
          r.private_data.assign(in.u8(), 0xA5);
          (void)server.agent.accept(id, r, now);
        } else if (how == 1) {
          const uint8_t pdata[200] = {};
          (void)server.agent.reject(id, CmRejectReason::kConsumerDefined, std::span(pdata, in.u8()));
        } else {
          server.requests.push_back(id);  // still deciding: a duplicate REQ now gets an MRA
        }
        break;
      }
      case 5: {
        if (client.replies.empty()) break;
        const CmId id = client.replies.front();
        client.replies.pop_front();
        if (in.u8() & 1) {
          (void)client.agent.establish(id);
        } else {
          (void)client.agent.reject(id, CmRejectReason::kConsumerDefined, {});
        }
        break;
      }
      case 6: {
        Side& s = *sides[in.u8() & 1];
        if (s.known.empty()) break;
        auto it = s.known.begin();
        std::advance(it, in.u8() % s.known.size());
        if (step & 8) {
          s.agent.destroy(*it, now);
        } else {
          (void)s.agent.disconnect(*it, now);
        }
        break;
      }
      case 7:
        now += uint64_t{1} << (step >> 3 & 15);
        client.agent.on_timer(now);
        server.agent.on_timer(now);
        client.take_events();
        server.take_events();
        break;
    }
  }

  // Drain: deliver everything, run the clocks; retransmissions and time-waits must end.
  for (int round = 0; round < 10000; ++round) {
    while (!client.host.out.empty() || !server.host.out.empty()) {
      deliver(client, false);
      deliver(server, false);
    }
    // Consumers that still owe an answer give one, so no connection waits on them forever.
    while (!server.requests.empty()) {
      (void)server.agent.reject(server.requests.front(), CmRejectReason::kConsumerDefined, {});
      server.requests.pop_front();
    }
    while (!client.replies.empty()) {
      (void)client.agent.reject(client.replies.front(), CmRejectReason::kConsumerDefined, {});
      client.replies.pop_front();
    }
    const uint64_t next = std::min(client.agent.next_deadline_ms(), server.agent.next_deadline_ms());
    if (next == UINT64_MAX && client.host.out.empty() && server.host.out.empty()) return 0;
    now = std::max(now, next);
    client.agent.on_timer(now);
    server.agent.on_timer(now);
    client.take_events();
    server.take_events();
  }
  check(false);  // a timer that never ends
  return 0;
}
