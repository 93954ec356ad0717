// The `hostile` suite: an attacker on the segment drives a connected uroce RC QP over real DPDK devices (a
// net_ring link) with forged frames, and every attack must end in the NAK or the silent drop that IBTA
// prescribes, counted under a named counter, with no byte outside a registered range changed or sent
// (hostile_peer.h). Each test gets a fresh victim QP, connected to the attacker's recorder.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "dataplane/tests/hostile_peer.h"

namespace uroce::dataplane::testing {
namespace {

using proto::AethSyndrome;
using proto::CompletionStatus;
using proto::NakCode;
using proto::Opcode;
using proto::PacketSpec;
using proto::WorkOp;
using Frames = std::vector<std::vector<uint8_t>>;

constexpr EngineId kVictimEngine = 1;
constexpr proto::Qpn kAttackerQpn = make_qpn(0, 200);  // engine 0, where no RcTransport QP of this suite lives
constexpr uint32_t kAttackerPsn = 0xFFFFF0;            // the victim's receive PSN: wraps 2^24 during the tests
constexpr uint32_t kVictimPsn = 0x7FFFF8;              // the victim's send PSN
constexpr uint32_t kMtu = 1024;
constexpr uint32_t kPd = 7;
constexpr uint32_t kLocalWrite = proto::kAccessLocalWrite;
constexpr uint32_t kRemoteWrite = proto::kAccessRemoteWrite;
constexpr uint32_t kRemoteRead = proto::kAccessRemoteRead;
constexpr uint32_t kRemoteAtomic = proto::kAccessRemoteAtomic;

uint32_t psn_plus(uint32_t psn, int64_t n) { return static_cast<uint32_t>((psn + n) & 0xFFFFFF); }

std::vector<uint8_t> frame_of(const PacketSpec& spec) {
  std::vector<uint8_t> f(proto::packet_size(spec));
  f.resize(proto::build_packet(spec, f));
  EXPECT_FALSE(f.empty());
  return f;
}

class HostilePeer : public ::testing::Test {
 public:  // the attack tables below build their frames with the fixture's helpers
  static void SetUpTestSuite() {
    world = std::make_unique<RcWorld>(loopback_config());
    if (world->ok()) {
      ASSERT_TRUE(world->dataplane().engine(0).register_qp(kAttackerQpn, recorder.endpoint()).ok());
    }
  }
  static void TearDownTestSuite() {
    if (world && world->ok()) (void)world->dataplane().engine(0).unregister_qp(kAttackerQpn);
    world.reset();
  }

  void SetUp() override {
    ASSERT_TRUE(world->ok()) << world->error();
    recorder.clear();
    RcTransport& t = world->transport();
    victim = std::make_unique<Player>(t, kVictimEngine, kPortB, kPd);
    ASSERT_TRUE(victim->error.empty()) << victim->error;
    rw = std::make_unique<GuardedRegion>(t, 64 * 1024, kLocalWrite | kRemoteWrite | kRemoteRead, kPd, 1);
    write_only = std::make_unique<GuardedRegion>(t, 4096, kLocalWrite | kRemoteWrite, kPd, 2);
    read_only = std::make_unique<GuardedRegion>(t, 4096, kRemoteRead, kPd, 3);
    atomic = std::make_unique<GuardedRegion>(t, 4096, kLocalWrite | kRemoteAtomic, kPd, 4);
    foreign = std::make_unique<GuardedRegion>(t, 4096, kLocalWrite | kRemoteWrite | kRemoteRead, kPd + 1, 5);
    invalidated = std::make_unique<GuardedRegion>(t, 4096, kLocalWrite | kRemoteWrite | kRemoteRead, kPd, 6);
    invalidated_key = invalidated->rkey();
    invalidated->release();

    RcPeer peer;
    peer.qpn = kAttackerQpn;
    peer.psn = proto::Psn{kAttackerPsn};
    peer.ip = dp().config().ports[kPortA].addresses.front();
    peer.mac = dp().port(kPortA).mac;
    peer.path_mtu = kMtu;
    proto::RcQpAttributes attrs;
    attrs.send_psn = proto::Psn{kVictimPsn};
    attrs.path_mtu = kMtu;
    attrs.ack_timeout = 18;  // ~1 s: the attacker answers the victim's requests by hand
    attrs.rnr_retry = 7;     // infinite, so an RNR NAK flood is only a wait
    const Status s = t.connect(*victim->qp(), peer, attrs);
    ASSERT_TRUE(s.ok()) << s.message();
    expected_psn = kAttackerPsn;
  }

  void TearDown() override {
    if (victim) victim->release();  // the QP goes first, on its engine, then its memory
    // What the victim sent before its release may still be on its way: in its engine's TX batch, on the ring
    // link (which delivers to the sending engine's queue) or in the redirect ring to engine 0, which owns the
    // recorder. Each call runs between two loop iterations, so three calls on the victim's engine let two full
    // iterations pass (flush, then receive and redirect) and two on engine 0 one more (deliver). Without this a
    // late reply reaches the next test's recorder, as an answer to a frame it forged.
    if (world->ok()) {
      for (const EngineId e : {kVictimEngine, kVictimEngine, kVictimEngine, EngineId{0}, EngineId{0}})
        EXPECT_TRUE(dp().engine(e).call([](EngineContext&) {}).ok());
    }
    for (GuardedRegion* r : regions()) EXPECT_TRUE(r->guards_intact()) << "a byte outside a registered range changed";
    for (GuardedRegion* r : regions()) r->release();
  }

  static Dataplane& dp() { return world->dataplane(); }
  std::vector<GuardedRegion*> regions() {
    std::vector<GuardedRegion*> v;
    for (auto* p : {&rw, &write_only, &read_only, &atomic, &foreign, &invalidated})
      if (*p) v.push_back(p->get());
    return v;
  }

  // A request from the attacker (port a) to the victim, as the connected peer would send it.
  [[nodiscard]] PacketSpec request(Opcode op, uint32_t psn) const {
    PacketSpec s = roce_spec(dp(), kPortA, kPortB, victim->qp()->qpn(), op, psn);
    s.udp_src_port = proto::roce_udp_source_port(kAttackerQpn, victim->qp()->qpn());
    s.ack_req = true;
    return s;
  }
  [[nodiscard]] PacketSpec write_only_packet(uint32_t psn, const GuardedRegion& r, std::size_t offset,
                                             std::span<const uint8_t> payload) const {
    PacketSpec s = request(Opcode::kRcRdmaWriteOnly, psn);
    s.reth.va = r.addr(offset);
    s.reth.rkey = r.rkey();
    s.reth.dma_length = static_cast<uint32_t>(payload.size());
    s.payload = payload;
    return s;
  }
  [[nodiscard]] PacketSpec read_request(uint32_t psn, uint64_t va, proto::RemoteToken key, uint32_t length) const {
    PacketSpec s = request(Opcode::kRcRdmaReadRequest, psn);
    s.reth.va = va;
    s.reth.rkey = key;
    s.reth.dma_length = length;
    return s;
  }
  [[nodiscard]] PacketSpec fetch_add(uint32_t psn, const GuardedRegion& r, std::size_t offset) const {
    PacketSpec s = request(Opcode::kRcFetchAdd, psn);
    s.atomic_eth.va = r.addr(offset);
    s.atomic_eth.rkey = r.rkey();
    s.atomic_eth.swap_or_add = 1;
    return s;
  }
  // A response from the attacker to the victim's requests.
  [[nodiscard]] PacketSpec response(Opcode op, uint32_t psn, uint8_t syndrome) const {
    PacketSpec s = request(op, psn);
    s.ack_req = false;
    s.aeth.syndrome = syndrome;
    return s;
  }

  // Sends the frames from port `from` (default: the attacker's port a), `per_iteration` per engine loop.
  static void inject(const Frames& frames, PortIndex from = kPortA, unsigned per_iteration = 16) {
    FrameGenerator g(
        from, frames.size(),
        [&](uint64_t i, std::span<uint8_t> out) -> std::size_t {
          if (frames[i].size() > out.size()) return 0;
          std::copy(frames[i].begin(), frames[i].end(), out.begin());
          return frames[i].size();
        },
        per_iteration);
    run_generator(dp().engine(0), g);
  }

  // Every frame the victim has sent the attacker so far, decoded.
  static std::vector<Reply> replies() {
    std::vector<Reply> out;
    for (const auto& f : recorder.frames()) {
      const proto::ParseResult r = proto::parse_packet(std::span<const uint8_t>(f));
      EXPECT_TRUE(r.ok()) << "the victim sent a malformed frame";
      if (!r.ok()) continue;
      Reply reply;
      reply.opcode = r.packet.opcode();
      reply.psn = r.packet.bth().get(proto::Bth::psn).value();
      if (r.packet.has(proto::ExtHeader::kAeth))
        reply.syndrome = AethSyndrome(r.packet.ext<proto::Aeth>(proto::ExtHeader::kAeth).get(proto::Aeth::syndrome));
      reply.payload.assign(r.packet.payload().begin(), r.packet.payload().end());
      out.push_back(std::move(reply));
    }
    return out;
  }
  static bool wait_for_replies(std::size_t n) {
    return eventually([&] { return recorder.count() >= n; }, std::chrono::seconds(30));
  }
  [[nodiscard]] bool wait_moved(const CounterWatch& w, const std::string& name, uint64_t n) const {
    return eventually([&] { return w.moved(name) >= n; }, std::chrono::seconds(30));
  }

  // The victim still serves its peer: a WRITE at the expected PSN lands and is acknowledged.
  void expect_victim_healthy() {
    const std::size_t before = recorder.count();
    std::vector<uint8_t> data(100);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(0xC0 + i);
    inject({frame_of(write_only_packet(expected_psn, *rw, 1000, data))});
    // Responses to earlier requests may still be on their way: look for this WRITE's ACK among what follows.
    const auto acked = [&] {
      const auto r = replies();
      return std::any_of(r.begin() + static_cast<std::ptrdiff_t>(std::min(before, r.size())), r.end(),
                         [&](const Reply& x) {
                           return x.opcode == Opcode::kRcAcknowledge && x.psn == expected_psn &&
                                  x.syndrome->kind() == proto::AethKind::kAck;
                         });
    };
    ASSERT_TRUE(eventually(acked, std::chrono::seconds(30))) << "no ACK for a legitimate WRITE";
    EXPECT_EQ(std::memcmp(rw->body() + 1000, data.data(), data.size()), 0) << "the legitimate WRITE did not land";
    std::memcpy(rw->body() + 1000, rw->original().data() + 1000, data.size());  // the region is pristine again
    expected_psn = psn_plus(expected_psn, 1);
  }

  // The victim answered an attack with exactly one NAK of `code` at the expected PSN, and is then dead.
  void expect_nak(NakCode code) {
    ASSERT_TRUE(wait_for_replies(1)) << "no NAK";
    const auto r = replies();
    ASSERT_EQ(r.size(), 1u);
    EXPECT_TRUE(r[0].is_nak(code)) << "opcode " << int(r[0].opcode) << " syndrome "
                                   << (r[0].syndrome ? int(r[0].syndrome->raw()) : -1);
    EXPECT_EQ(r[0].psn, expected_psn);
  }

  static std::unique_ptr<RcWorld> world;
  static FrameRecorder recorder;
  std::unique_ptr<Player> victim;
  std::unique_ptr<GuardedRegion> rw, write_only, read_only, atomic, foreign, invalidated;
  proto::RemoteToken invalidated_key{};
  uint32_t expected_psn = 0;  // the victim's next expected request PSN
};
std::unique_ptr<RcWorld> HostilePeer::world;
FrameRecorder HostilePeer::recorder;

// --- the responder's resources -------------------------------------------------------------------------------

// 200 READs in one burst, more than the 16 responder resources: zero-length ones, short ones at the MR's end
// and multi-packet ones. Before the fix, queued responses continued from slots that newer READs had reused: a
// SIGSEGV on a null base, bytes from past the MR on the wire, and other READs' data in the responses.
TEST_F(HostilePeer, ReadsBeyondTheResponderResourcesAreRefusedAndNothingLeaks) {
  CounterWatch w(dp(), kVictimEngine);
  w.mark("resp_resources_exceeded");
  w.mark("resp_invalid_request");
  struct Expected {
    std::size_t offset;
    uint32_t length;
    uint32_t first_psn;
  };
  // The READs by their first PSN, counted from the first READ's (the PSNs wrap 2^24 on the way).
  const auto relative = [base = expected_psn](uint32_t psn) { return psn_plus(psn, -static_cast<int64_t>(base)); };
  std::map<uint32_t, Expected> reads;
  Frames frames;
  uint32_t psn = expected_psn;
  for (uint32_t i = 0; i < 200; ++i) {
    uint32_t length = 0;
    std::size_t offset = 0;
    switch (i % 4) {
      case 0:
        break;  // zero-length
      case 1:
        length = 16, offset = rw->length() - 16;  // ends exactly at the MR's end
        break;
      case 2:
        length = 3000, offset = (i * 397) % (rw->length() - 3000);
        break;
      default:
        length = 1, offset = i;
    }
    reads[relative(psn)] = {offset, length, relative(psn)};
    frames.push_back(frame_of(read_request(psn, rw->addr(offset), rw->rkey(), length)));
    psn = psn_plus(psn, length == 0 ? 1 : (length + kMtu - 1) / kMtu);
  }
  inject(frames, kPortA, 200);  // one engine iteration: the victim receives them in bursts of 32
  ASSERT_TRUE(eventually([&] {
    const auto r = replies();
    return std::any_of(r.begin(), r.end(), [](const Reply& x) { return x.is_nak(NakCode::kInvalidRequest); });
  })) << "no NAK after "
      << recorder.count() << " responses";

  // Every response carries exactly the bytes its own READ named, from inside the MR.
  std::optional<uint32_t> nak_psn;
  for (const Reply& r : replies()) {
    if (r.syndrome && r.syndrome->kind() == proto::AethKind::kNak) {
      EXPECT_TRUE(r.is_nak(NakCode::kInvalidRequest));
      EXPECT_FALSE(nak_psn) << "a second NAK";
      nak_psn = relative(r.psn);
      continue;
    }
    ASSERT_FALSE(nak_psn) << "a response after the NAK";
    auto it = reads.upper_bound(relative(r.psn));
    ASSERT_NE(it, reads.begin());
    const Expected& e = (--it)->second;
    const uint32_t offset = (relative(r.psn) - e.first_psn) * kMtu;
    ASSERT_LE(offset + r.payload.size(), e.length) << "PSN " << r.psn;
    EXPECT_EQ(std::memcmp(r.payload.data(), rw->original().data() + e.offset + offset, r.payload.size()), 0)
        << "the response at PSN " << r.psn << " carries another READ's data";
  }
  ASSERT_TRUE(nak_psn);
  // At least the advertised 16 READs were served before the refusal.
  const auto first_refused = reads.find(*nak_psn);
  ASSERT_NE(first_refused, reads.end()) << "the NAK names no READ's first PSN";
  EXPECT_GE(std::distance(reads.begin(), first_refused), 16);
  ASSERT_TRUE(wait_moved(w, "resp_resources_exceeded", 1));
  EXPECT_EQ(w.moved("resp_resources_exceeded"), 1u);
  EXPECT_EQ(w.moved("resp_invalid_request"), 1u);
  EXPECT_TRUE(rw->unchanged());
}

// A flood of duplicates of an answered READ: each is replayed from the saved request, with the READ's own bytes,
// and at most one replay per saved request is ever queued.
TEST_F(HostilePeer, DuplicateReadFloodsReplayOnlyTheSavedBytes) {
  inject({frame_of(read_request(expected_psn, rw->addr(5000), rw->rkey(), 3000))});
  ASSERT_TRUE(wait_for_replies(3));
  CounterWatch w(dp(), kVictimEngine);
  w.mark("duplicate_request");
  Frames flood(1000, frame_of(read_request(expected_psn, rw->addr(5000), rw->rkey(), 3000)));
  inject(flood, kPortA, 64);
  ASSERT_TRUE(wait_moved(w, "duplicate_request", 1000));
  expected_psn = psn_plus(expected_psn, 3);
  expect_victim_healthy();
  for (const Reply& r : replies()) {
    if (r.opcode == Opcode::kRcAcknowledge) continue;
    const uint32_t offset = psn_plus(r.psn, -static_cast<int64_t>(kAttackerPsn)) * kMtu;
    ASSERT_LE(offset + r.payload.size(), 3000u);
    EXPECT_EQ(std::memcmp(r.payload.data(), rw->original().data() + 5000 + offset, r.payload.size()), 0);
  }
}

// --- requests that kill the QP: one NAK as IBTA names it, counted, and memory untouched ------------------------

struct FatalAttack {
  const char* name;
  std::function<Frames(HostilePeer&)> frames;
  NakCode nak;
  const char* counter;
  bool writes_rw = false;  // a legitimate first packet lands in rw before the attack
};

PacketSpec write_with(HostilePeer& f, uint64_t va, proto::RemoteToken key, uint32_t length) {
  static const std::vector<uint8_t> payload(2 * kMtu, 0xEE);
  PacketSpec s = f.write_only_packet(f.expected_psn, *f.rw, 0, std::span<const uint8_t>(payload).first(length));
  s.reth.va = va;
  s.reth.rkey = key;
  return s;
}

Frames one(const PacketSpec& s) { return {frame_of(s)}; }

std::vector<FatalAttack> fatal_attacks() {
  using F = HostilePeer;
  constexpr NakCode kAccess = NakCode::kRemoteAccessError;
  constexpr NakCode kInvalid = NakCode::kInvalidRequest;
  constexpr const char* kAccessCounter = "resp_remote_access_errors";
  constexpr const char* kInvalidCounter = "resp_invalid_request";
  return {
      {"WrongKey",
       [](F& f) { return one(write_with(f, f.rw->addr(), proto::RemoteToken{f.rw->rkey().value() ^ 0x5A}, 64)); },
       kAccess, kAccessCounter},
      {"InvalidatedKey", [](F& f) { return one(write_with(f, f.invalidated->addr(), f.invalidated_key, 64)); }, kAccess,
       kAccessCounter},
      {"KeyOfAnotherPd", [](F& f) { return one(write_with(f, f.foreign->addr(), f.foreign->rkey(), 64)); }, kAccess,
       kAccessCounter},
      {"WritePastTheEnd", [](F& f) { return one(write_with(f, f.rw->addr(f.rw->length() - 8), f.rw->rkey(), 16)); },
       kAccess, kAccessCounter},
      {"ReadPastTheEnd",
       [](F& f) { return one(f.read_request(f.expected_psn, f.rw->addr(f.rw->length() - 4000), f.rw->rkey(), 8192)); },
       kAccess, kAccessCounter},
      {"ReadWrappingTwoToThe64",
       [](F& f) { return one(f.read_request(f.expected_psn, ~uint64_t{0} - 7, f.rw->rkey(), 16)); }, kAccess,
       kAccessCounter},
      {"WriteWrappingTwoToThe64", [](F& f) { return one(write_with(f, ~uint64_t{0} - 7, f.rw->rkey(), 16)); }, kAccess,
       kAccessCounter},
      {"ReadOfAWriteOnlyRegion",
       [](F& f) { return one(f.read_request(f.expected_psn, f.write_only->addr(), f.write_only->rkey(), 64)); },
       kAccess, kAccessCounter},
      {"WriteToAReadOnlyRegion", [](F& f) { return one(write_with(f, f.read_only->addr(), f.read_only->rkey(), 64)); },
       kAccess, kAccessCounter},
      {"AtomicOnANonAtomicRegion", [](F& f) { return one(f.fetch_add(f.expected_psn, *f.rw, 64)); }, kAccess,
       kAccessCounter},
      {"MisalignedAtomic", [](F& f) { return one(f.fetch_add(f.expected_psn, *f.atomic, 12)); }, kInvalid,
       kInvalidCounter},
      {"WriteMiddleWithoutFirst",
       [](F& f) {
         static const std::vector<uint8_t> payload(kMtu, 0xEE);
         PacketSpec s = f.request(Opcode::kRcRdmaWriteMiddle, f.expected_psn);
         s.payload = payload;
         return one(s);
       },
       kInvalid, kInvalidCounter},
      {"SendLastWithoutFirst",
       [](F& f) {
         static const std::vector<uint8_t> payload(8, 0xEE);
         PacketSpec s = f.request(Opcode::kRcSendLast, f.expected_psn);
         s.payload = payload;
         return one(s);
       },
       kInvalid, kInvalidCounter},
      {"PacketLongerThanThePathMtu", [](F& f) { return one(write_with(f, f.rw->addr(), f.rw->rkey(), 2 * kMtu)); },
       kInvalid, kInvalidCounter},
      {"WritePayloadShorterThanItsLength",
       [](F& f) {
         PacketSpec s = write_with(f, f.rw->addr(), f.rw->rkey(), 64);
         s.reth.dma_length = 128;
         return one(s);
       },
       kInvalid, kInvalidCounter},
      {"WriteFirstThenANewWrite",
       [](F& f) {
         static const std::vector<uint8_t> payload(kMtu, 0xEE);
         PacketSpec first = f.request(Opcode::kRcRdmaWriteFirst, f.expected_psn);
         first.reth = {f.rw->addr(), f.rw->rkey(), 4 * kMtu};
         first.payload = payload;
         PacketSpec again = first;
         again.psn = proto::Psn{psn_plus(f.expected_psn, 1)};
         f.expected_psn = psn_plus(f.expected_psn, 1);  // the NAK names the second packet
         return Frames{frame_of(first), frame_of(again)};
       },
       kInvalid, kInvalidCounter, true},
  };
}

class HostileFatal : public HostilePeer, public ::testing::WithParamInterface<FatalAttack> {};

TEST_P(HostileFatal, GetsItsNakAndTouchesNothingOutsideTheRequest) {
  CounterWatch w(dp(), kVictimEngine);
  w.mark(GetParam().counter);
  w.mark("rx_qp_not_ready");
  const uint32_t attack_psn = expected_psn;
  Frames frames = GetParam().frames(*this);
  inject(frames);
  expect_nak(GetParam().nak);
  EXPECT_TRUE(wait_moved(w, GetParam().counter, 1));
  for (GuardedRegion* r : regions()) {
    if (r == rw.get() && GetParam().writes_rw) continue;  // its first packet was legitimate, and landed
    EXPECT_TRUE(r->unchanged());
  }
  // The QP is in the error state: a legitimate request now is dropped and counted, never executed.
  std::vector<uint8_t> data(64, 0x77);
  inject({frame_of(write_only_packet(attack_psn, *write_only, 0, data))});
  EXPECT_TRUE(wait_moved(w, "rx_qp_not_ready", 1));
  EXPECT_TRUE(write_only->unchanged());
}

INSTANTIATE_TEST_SUITE_P(Attacks, HostileFatal, ::testing::ValuesIn(fatal_attacks()),
                         [](const auto& info) { return std::string(info.param.name); });

// A WRITE with immediate takes a receive WQE before its key is checked: when the key then fails, that WQE
// completes with the error ahead of the flushed ones, rather than vanishing (found by rc_conversation_fuzz).
TEST_F(HostilePeer, AFailedWriteWithImmediateCompletesTheReceiveItTook) {
  victim->post_receive(victim->buffer.data(), 64, 1);
  victim->post_receive(victim->buffer.data() + 64, 64, 2);
  std::vector<uint8_t> evil(64, 0xEE);
  PacketSpec s = write_only_packet(expected_psn, *rw, 0, evil);
  s.opcode = Opcode::kRcRdmaWriteOnlyWithImmediate;
  s.reth.rkey = proto::RemoteToken{rw->rkey().value() ^ 0x5A};
  inject({frame_of(s)});
  expect_nak(NakCode::kRemoteAccessError);
  const auto taken = victim->wait_receive_completion();
  const auto flushed = victim->wait_receive_completion();
  ASSERT_TRUE(taken && flushed);
  EXPECT_EQ(taken->context, 1u);
  EXPECT_EQ(taken->status, CompletionStatus::kRemoteAccessError);
  EXPECT_EQ(flushed->context, 2u);
  EXPECT_EQ(flushed->status, CompletionStatus::kWorkRequestFlushed);
  EXPECT_TRUE(rw->unchanged());
}

// --- the path: a packet must come from the connected peer's address to ours ----------------------------------

// Before the fix, all four were executed; the injected SEND reached the application, and the legitimate WRITE
// at the same PSN was then taken as a duplicate and silently never executed.
TEST_F(HostilePeer, PacketsFromOtherAddressesOrToOthersAreDroppedAndTheRealPeerIsServed) {
  CounterWatch w(dp(), kVictimEngine);
  w.mark("rx_path_mismatch");
  std::vector<uint8_t> evil(64, 0xEE);
  uint8_t* const receive_buffer = victim->buffer.data();
  victim->post_receive(receive_buffer, 256, 42);

  Frames frames;
  PacketSpec spoofed = write_only_packet(expected_psn, *rw, 0, evil);
  spoofed.src_gid = proto::gid_from_ipv4(proto::Ipv4Addr{0xC6120063});  // 198.18.0.99
  frames.push_back(frame_of(spoofed));
  PacketSpec not_ours = write_only_packet(expected_psn, *rw, 0, evil);
  not_ours.dst_gid = proto::gid_from_ipv4(proto::Ipv4Addr{0xC612004D});  // 198.18.0.77
  not_ours.dst_mac = proto::MacAddr{0xFFFFFFFFFFFF};
  frames.push_back(frame_of(not_ours));
  PacketSpec v6 = write_only_packet(expected_psn, *rw, 0, evil);  // RoCEv2/IPv6 to an IPv4 connection
  v6.src_gid = proto::Gid{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  v6.dst_gid = proto::Gid{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  frames.push_back(frame_of(v6));
  PacketSpec send = request(Opcode::kRcSendOnly, expected_psn);
  send.payload = evil;
  send.src_gid = spoofed.src_gid;
  frames.push_back(frame_of(send));
  inject(frames);
  ASSERT_TRUE(wait_moved(w, "rx_path_mismatch", 4));
  EXPECT_EQ(w.moved("rx_path_mismatch"), 4u);
  EXPECT_TRUE(rw->unchanged());
  EXPECT_FALSE(victim->poll_receive()) << "a forged SEND reached the application";
  EXPECT_EQ(recorder.count(), 0u) << "the victim answered a forged packet";

  expect_victim_healthy();  // the legitimate WRITE at the PSN the forgeries used is executed
  const std::vector<uint8_t> hello = {'h', 'e', 'l', 'l', 'o'};
  PacketSpec real_send = request(Opcode::kRcSendOnly, expected_psn);
  real_send.payload = hello;
  const std::size_t replies_before = recorder.count();
  inject({frame_of(real_send)});
  const auto received = victim->wait_receive_completion();
  ASSERT_TRUE(received);
  EXPECT_EQ(received->context, 42u);
  EXPECT_EQ(received->byte_length, hello.size());
  EXPECT_EQ(std::memcmp(receive_buffer, hello.data(), hello.size()), 0);
  // The SEND's ACK may leave after its completion. Awaited here, it cannot reach the next test's recorder.
  ASSERT_TRUE(wait_for_replies(replies_before + 1));
  const Reply ack = replies().back();
  EXPECT_EQ(ack.opcode, Opcode::kRcAcknowledge);
  EXPECT_EQ(ack.psn, expected_psn);
  ASSERT_TRUE(ack.syndrome);
  EXPECT_EQ(ack.syndrome->kind(), proto::AethKind::kAck);
}

// P_Key, transport and destination QPN: dropped and counted before the QP acts; malformed frames are counted by
// the parser.
TEST_F(HostilePeer, ForeignPartitionsTransportsQueuePairsAndBrokenFramesAreDropped) {
  CounterWatch victim_engine(dp(), kVictimEngine);
  CounterWatch receiving_engine(dp(), 0);
  for (const char* c : {"rx_pkey_mismatch", "rx_wrong_transport", "rx_unknown_qp"}) victim_engine.mark(c);
  for (const char* c : {"rx_unknown_qp", "rx_icrc_encapsulated", "rx_drop_truncated_headers"}) receiving_engine.mark(c);
  std::vector<uint8_t> evil(64, 0xEE);
  Frames frames;
  PacketSpec pkey = write_only_packet(expected_psn, *rw, 0, evil);
  pkey.pkey = proto::PKey{0x8123};
  frames.push_back(frame_of(pkey));
  PacketSpec uc = request(Opcode::kUcSendOnly, expected_psn);
  uc.payload = evil;
  frames.push_back(frame_of(uc));
  PacketSpec other_qp = write_only_packet(expected_psn, *rw, 0, evil);
  other_qp.dest_qp = make_qpn(kVictimEngine, 1000);  // a number no QP of the engine has
  frames.push_back(frame_of(other_qp));
  other_qp.dest_qp = make_qpn(9, 5);  // no engine 9
  frames.push_back(frame_of(other_qp));
  auto bad_icrc = frame_of(write_only_packet(expected_psn, *rw, 0, evil));
  bad_icrc[bad_icrc.size() - 10] ^= 1;
  frames.push_back(bad_icrc);
  auto truncated = frame_of(write_only_packet(expected_psn, *rw, 0, {}));
  truncated.resize(truncated.size() - 12);  // ends inside the RETH; IP and UDP lengths agree with the cut
  proto::MutView<proto::Ipv4>{truncated.data() + 14}.set(proto::Ipv4::total_length,
                                                         static_cast<uint16_t>(truncated.size() - 14));
  proto::MutView<proto::Ipv4>{truncated.data() + 14}.set(proto::Ipv4::checksum, 0);
  proto::MutView<proto::Ipv4>{truncated.data() + 14}.set(proto::Ipv4::checksum,
                                                         proto::ipv4_header_checksum(truncated.data() + 14));
  proto::MutView<proto::Udp>{truncated.data() + 34}.set(proto::Udp::length,
                                                        static_cast<uint16_t>(truncated.size() - 34));
  frames.push_back(truncated);
  inject(frames);
  ASSERT_TRUE(eventually([&] {
    return victim_engine.moved("rx_pkey_mismatch") == 1 && victim_engine.moved("rx_wrong_transport") == 1 &&
           victim_engine.moved("rx_unknown_qp") == 1 && receiving_engine.moved("rx_unknown_qp") == 1 &&
           receiving_engine.moved("rx_icrc_encapsulated") == 1 &&
           receiving_engine.moved("rx_drop_truncated_headers") == 1;
  })) << "pkey "
      << victim_engine.moved("rx_pkey_mismatch") << " transport " << victim_engine.moved("rx_wrong_transport")
      << " qpn " << victim_engine.moved("rx_unknown_qp") << "/" << receiving_engine.moved("rx_unknown_qp") << " icrc "
      << receiving_engine.moved("rx_icrc_encapsulated") << " truncated "
      << receiving_engine.moved("rx_drop_truncated_headers");
  EXPECT_TRUE(rw->unchanged());
  EXPECT_EQ(recorder.count(), 0u);
  expect_victim_healthy();
}

// --- the PSN window ----------------------------------------------------------------------------------------------

// Ahead of the window: one PSN sequence error NAK per gap, nothing executed. Behind it: re-acknowledged, never
// executed again.
TEST_F(HostilePeer, RequestsOutsideThePsnWindowAreNeverExecuted) {
  CounterWatch w(dp(), kVictimEngine);
  w.mark("out_of_sequence");
  w.mark("duplicate_request");
  std::vector<uint8_t> evil(64, 0xEE);
  inject({frame_of(write_only_packet(psn_plus(expected_psn, 5), *rw, 0, evil)),
          frame_of(write_only_packet(psn_plus(expected_psn, 1u << 22), *rw, 0, evil))});
  ASSERT_TRUE(wait_moved(w, "out_of_sequence", 2));
  ASSERT_TRUE(wait_for_replies(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto r = replies();
  ASSERT_EQ(r.size(), 1u) << "one NAK per gap";
  EXPECT_TRUE(r[0].is_nak(NakCode::kPsnSequenceError));
  EXPECT_EQ(r[0].psn, expected_psn);
  EXPECT_TRUE(rw->unchanged());

  expect_victim_healthy();
  inject({frame_of(write_only_packet(psn_plus(expected_psn, -1), *rw, 0, evil)),       // the last one, again
          frame_of(write_only_packet(psn_plus(expected_psn, -1000), *rw, 0, evil))});  // long ago
  ASSERT_TRUE(wait_moved(w, "duplicate_request", 2));
  EXPECT_TRUE(rw->unchanged()) << "a duplicate WRITE was executed";
  expect_victim_healthy();
}

// --- responses: forged ACKs, NAKs and READ responses ---------------------------------------------------------

// The victim has one WRITE outstanding at kVictimPsn. Responses outside [oldest unacked, next) are dropped;
// before the fix, a NAK at any PSN in the half of PSN space before the next send PSN put the QP in error.
TEST_F(HostilePeer, ForgedResponsesOutsideTheWindowAreDroppedAndTheRealAckCompletes) {
  CounterWatch w(dp(), kVictimEngine);
  for (const char* c : {"req_response_out_of_window", "req_unexpected_response", "rcvd_rnr_err"}) w.mark(c);
  proto::SendWqe write = victim->send(WorkOp::kRdmaWrite, 0, 100, 7);
  write.remote_addr = 0x1000;
  write.rkey = proto::RemoteToken{0x1234};
  victim->post(write);
  ASSERT_TRUE(wait_for_replies(1));
  ASSERT_EQ(replies()[0].psn, kVictimPsn);

  const uint8_t nak_access = AethSyndrome::nak(NakCode::kRemoteAccessError).raw();
  const uint8_t rnr = AethSyndrome::rnr_nak(1).raw();
  Frames frames;
  frames.push_back(frame_of(response(Opcode::kRcAcknowledge, psn_plus(kVictimPsn, -1), nak_access)));
  frames.push_back(frame_of(response(Opcode::kRcAcknowledge, psn_plus(kVictimPsn, 1), 0)));  // an ACK for unsent
  for (uint32_t x : {psn_plus(kVictimPsn, 1 << 22), psn_plus(kVictimPsn, 12345), psn_plus(kVictimPsn, -3)}) {
    frames.push_back(frame_of(response(Opcode::kRcAcknowledge, x, nak_access)));
    frames.push_back(frame_of(response(Opcode::kRcAcknowledge, x ^ 0x800000, nak_access)));
  }
  const std::vector<uint8_t> bytes(64, 0xEE);
  PacketSpec read_response = response(Opcode::kRcRdmaReadResponseOnly, psn_plus(kVictimPsn, 100), 0);
  read_response.payload = bytes;
  frames.push_back(frame_of(read_response));
  PacketSpec atomic_ack = response(Opcode::kRcAtomicAcknowledge, psn_plus(kVictimPsn, -100), 0);
  frames.push_back(frame_of(atomic_ack));
  const std::size_t out_of_window = frames.size();
  for (int i = 0; i < 1000; ++i)  // an RNR NAK flood, outside the window
    frames.push_back(frame_of(response(Opcode::kRcAcknowledge, psn_plus(kVictimPsn, -1 - i), rnr)));
  // A READ response for no READ, at the PSN of the outstanding WRITE.
  PacketSpec no_read = response(Opcode::kRcRdmaReadResponseOnly, kVictimPsn, 0);
  no_read.payload = bytes;
  frames.push_back(frame_of(no_read));
  inject(frames, kPortA, 64);
  ASSERT_TRUE(wait_moved(w, "req_response_out_of_window", out_of_window + 1000));
  ASSERT_TRUE(wait_moved(w, "req_unexpected_response", 1));
  EXPECT_EQ(w.moved("rcvd_rnr_err"), 0u);
  if (const auto c = victim->poll_send()) ADD_FAILURE() << "a forged response completed the WRITE: " << int(c->status);

  // An RNR NAK flood inside the window is a wait, not a failure (rnr_retry 7).
  inject(Frames(200, frame_of(response(Opcode::kRcAcknowledge, kVictimPsn, rnr))), kPortA, 64);
  ASSERT_TRUE(wait_moved(w, "rcvd_rnr_err", 200));
  inject({frame_of(response(Opcode::kRcAcknowledge, kVictimPsn, AethSyndrome::ack_unlimited().raw()))});
  const auto done = victim->wait_send_completion();
  ASSERT_TRUE(done);
  EXPECT_EQ(done->status, CompletionStatus::kSuccess);
  EXPECT_EQ(done->context, 7u);
}

// A forged NAK aimed at a live connection between two uroce QPs, while it carries traffic: one at the PSN just
// before the next send PSN (before the fix, the QP went to the error state) and pairs at x and x ^ 2^23, which
// need no knowledge of the connection (before the fix, one of each pair always hit).
TEST_F(HostilePeer, ForgedNaksDoNotStopARunningConnection) {
  auto [a, b] = world->connected_pair(kMtu, {}, kVictimEngine);
  ASSERT_TRUE(a && b) << world->error();
  CounterWatch w(dp(), kVictimEngine);
  w.mark("req_response_out_of_window");
  constexpr int kWrites = 400;
  const uint32_t first_psn = a->qp()->protocol().attributes().send_psn.value();
  const auto post_writes = [&, a = a, b = b](int n, int context) {
    for (int i = 0; i < n; ++i) {
      proto::SendWqe wr = a->send(WorkOp::kRdmaWrite, 0, 512, static_cast<uint64_t>(context + i));
      wr.remote_addr = b->remote_addr(b->half());
      wr.rkey = b->rkey();
      a->post(wr);
    }
  };
  post_writes(10, 0);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(a->wait_send_completion());
  // A forges B: from port b's address to A on port a.
  const uint8_t nak = AethSyndrome::nak(NakCode::kRemoteAccessError).raw();
  const auto forged = [&, a = a](uint32_t psn) {
    PacketSpec s = roce_spec(dp(), kPortB, kPortA, a->qp()->qpn(), Opcode::kRcAcknowledge, psn);
    s.aeth.syndrome = nak;
    return frame_of(s);
  };
  inject({forged(psn_plus(first_psn, 9))}, kPortB);  // next send PSN - 1, on the idle QP
  post_writes(kWrites, 10);
  Frames pairs;
  for (uint32_t x : {psn_plus(first_psn, 1 << 22), psn_plus(first_psn, 0x123456), psn_plus(first_psn, -5000)}) {
    pairs.push_back(forged(x));
    pairs.push_back(forged(x ^ 0x800000));
  }
  inject(pairs, kPortB);
  for (int i = 0; i < kWrites; ++i) {
    const auto c = a->wait_send_completion();
    ASSERT_TRUE(c) << i;
    ASSERT_EQ(c->status, CompletionStatus::kSuccess) << "write " << i;
  }
  EXPECT_TRUE(wait_moved(w, "req_response_out_of_window", 7));
  world->destroy(a, b);
}

// --- identifiers ---------------------------------------------------------------------------------------------

// QPNs and key bytes vary, so an attacker cannot take them from an earlier run: new transports start at other
// key bytes, and QPs take random slots.
TEST(HostileIdentifiers, QueuePairNumbersAndKeysAreNotPredictable) {
  std::set<uint32_t> first_keys;
  std::set<uint32_t> qpns;
  for (int run = 0; run < 3; ++run) {
    RcWorld w(loopback_config());
    ASSERT_TRUE(w.ok()) << w.error();
    std::vector<uint8_t> buffer(4096);
    auto token = w.transport().register_memory(reinterpret_cast<uint64_t>(buffer.data()), buffer.size(),
                                               proto::kAccessLocalWrite, 1);
    ASSERT_TRUE(token.ok());
    first_keys.insert(token.value() & 0xFF);
    std::vector<std::unique_ptr<Player>> players;
    for (int i = 0; i < 4; ++i) {
      players.push_back(std::make_unique<Player>(w.transport(), 1, kPortB, 1));
      ASSERT_TRUE(players.back()->error.empty());
      qpns.insert(players.back()->qp()->qpn().value());
    }
    for (auto& p : players) p->release();
    (void)w.transport().deregister_memory(token.value());
  }
  EXPECT_GT(first_keys.size(), 1u) << "every run starts at the same key byte";
  EXPECT_GT(qpns.size(), 4u) << "every run hands out the same QPNs";
}

}  // namespace
}  // namespace uroce::dataplane::testing
