// libFuzzer target for the RC wire as a conversation. QPs A (198.18.0.1) and B (198.18.0.2) are connected
// and have WRITEs, READs, SENDs and an atomic posted to each other; C <-> D, on the same two hosts (another PD
// of the same memory), is a bystander pair. The input is a script of steps. The harness makes every frame it
// injects well formed (ICRC, the live QPN, the path's addresses, PSNs near the target's window), so the fuzzer
// spends its time in the state machines, not the parser (packet_parser_fuzz covers that).
//
// Script: repeated [step byte][operands]; step % 4 is
//   0 / 1  a packet to B (posing as A) / to A (posing as B): [opcode index][flags][int8 PSN delta][key select]
//          [u16 VA offset][u16 DMA length][u32 misc][u64 operand][u16 payload length][payload]. Flags: 1 AckReq,
//          2 SE, 0xC PSN base (the target's expected PSN / its first request PSN / the peer's expected PSN,
//          near the target's next / raw = operand >> 40), 0x10 VA = operand (else the offset into the region
//          the key selects: remote, local-only, read-only, raw key = misc), 0x20 DMA length's high half =
//          operand >> 48, 0x40 payload of 1-4 PMTUs, 0x80 compare = the target's current value. misc is also
//          the immediate, IETH, compare and AETH (syndrome = low byte, MSN = the rest).
//   2      1-4 rounds of legitimate traffic (step >> 2 & 3); bits 0x10 / 0x20 lose the first A->B / B->A frame
//          of the first round, 0x40 duplicates it, 0x80 reverses the round's order.
//   3      the clock moves 1 us << (step >> 2 & 31), then every QP's timers run.
//
// Oracles, after every step (abort(), so libFuzzer reports): no byte of either host changes outside what may
// be written (so guards, send buffers, a remote-read-only region and the bystander's memory outside its own
// traffic stay as they were); every frame any QP sends parses and is addressed to its peer, and carries exactly
// what it must (a request: its WQE's fields and bytes at that PSN; a READ response: the live bytes of the
// accepted READ at that PSN; an atomic ACK: the value the atomic found); a QP in the error state sends nothing;
// completions retire each WQE once, in order. After the script the network drains (legitimate traffic and
// timers): every posted WQE completes, an errored QP flushes its receives, C <-> D complete everything
// correctly, and, if nothing was injected, every successful A <-> B completion carries the right data.
// RC_CONVERSATION_TRACE=1 prints every frame delivered.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "proto/packet_builder.h"
#include "proto/packet_parser.h"
#include "proto/rc_qp.h"

namespace {

using namespace uroce::proto;

constexpr uint32_t kMtu = 256;
constexpr std::size_t kGuard = 64;
enum RegionId : unsigned { kRemote, kLocal, kReadOnly };  // the peer's target; local buffers; remote read only
constexpr std::array<std::size_t, 3> kRegionSize = {4096, 4096, 1024};
constexpr std::array<uint32_t, 3> kRegionAccess = {
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic, kAccessLocalWrite,
    kAccessRemoteRead};
constexpr std::size_t kPdSpan = 3 * kGuard + 4096 + 4096 + 1024;  // [guard R guard L guard S]
constexpr std::size_t region_offset(unsigned pd, RegionId r) {
  std::size_t o = pd * kPdSpan + kGuard;
  for (unsigned i = 0; i < r; ++i) o += kRegionSize[i] + kGuard;
  return o;
}

// The legitimate traffic each QP posts to its peer: offsets in its kLocal and the peer's kRemote.
struct Traffic {
  WorkOp op;
  uint32_t local, remote, length;
};
constexpr std::array<Traffic, 6> kTraffic = {{{WorkOp::kRdmaWrite, 0, 0, 600},
                                              {WorkOp::kRdmaRead, 1024, 1024, 700},
                                              {WorkOp::kSend, 256, 0, 300},
                                              {WorkOp::kFetchAdd, 2048, 2048, 8},
                                              {WorkOp::kRdmaRead, 1800, 1800, 100},
                                              {WorkOp::kSendWithImmediate, 600, 0, 40}}};
constexpr uint32_t kRecvOffset = 2304, kRecvSize = 512, kRecvContext = 100, kImmediateData = 0x1234;
constexpr uint64_t kAdd = 5;
// What may change: kLocal's READ sinks, atomic result and receive buffers; all of kRemote in PD 0 (A and B,
// whose peer may be hostile), only what the legitimate traffic writes in PD 1 (C and D).
struct Range {
  std::size_t begin, end;
};
constexpr std::array<Range, 4> kLocalWritable = {{{1024, 1724}, {1800, 1900}, {2048, 2056}, {2304, 3328}}};
constexpr std::array<Range, 2> kBystanderRemoteWritable = {{{0, 600}, {2048, 2056}}};

constexpr std::array<uint8_t, 25> kRcOpcodes = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
                                                0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11,
                                                0x12, 0x13, 0x14, 0x16, 0x17, 0x1C, 0x1D};
const bool kTrace = std::getenv("RC_CONVERSATION_TRACE") != nullptr;  // NOLINT(concurrency-mt-unsafe): once, at load

struct World;
const World* g_world = nullptr;  // for fail()'s report
void report(const World& w);
[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "rc_conversation_fuzz oracle: %s\n", what);
  if (g_world != nullptr) report(*g_world);
  std::abort();
}
void require(bool ok, const char* what) {
  if (!ok) fail(what);
}
uint32_t packets(uint64_t length) { return length == 0 ? 1 : static_cast<uint32_t>((length + kMtu - 1) / kMtu); }
uint32_t psns(const SendWqe& w) { return is_atomic(w.op) ? 1 : packets(w.length); }
uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// The ranges of a host's memory that nothing may write, from the writable ones.
std::vector<Range> fixed_ranges(std::size_t size) {
  std::vector<Range> writable = {{region_offset(0, kRemote), region_offset(0, kRemote) + kRegionSize[kRemote]}};
  for (unsigned pd = 0; pd < 2; ++pd) {
    for (Range r : kLocalWritable)
      writable.push_back({region_offset(pd, kLocal) + r.begin, region_offset(pd, kLocal) + r.end});
  }
  for (Range r : kBystanderRemoteWritable)
    writable.push_back({region_offset(1, kRemote) + r.begin, region_offset(1, kRemote) + r.end});
  std::sort(writable.begin(), writable.end(), [](Range x, Range y) { return x.begin < y.begin; });
  std::vector<Range> fixed;
  std::size_t at = 0;
  for (Range r : writable) {
    if (r.begin > at) fixed.push_back({at, r.begin});
    at = std::max(at, r.end);
  }
  fixed.push_back({at, size});
  return fixed;
}

// One host's registered memory: two PDs of regions between guards. Its initial bytes (host 0 and 1 take
// different halves of one pattern) and fixed ranges are computed once: loops are slow under coverage.
struct Memory {
  static constexpr std::size_t kSize = 2 * kPdSpan + kGuard;
  explicit Memory(unsigned host) {
    static const std::vector<uint8_t> pattern = [] {
      std::vector<uint8_t> p(2 * kSize);
      for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(i * 7 + (i >> 8) * 13);
      return p;
    }();
    initial.assign(pattern.begin() + static_cast<std::ptrdiff_t>(host * kSize),
                   pattern.begin() + static_cast<std::ptrdiff_t>((host + 1) * kSize));
    bytes = initial;
  }
  void check() const {
    static const std::vector<Range> fixed = fixed_ranges(kSize);
    for (Range r : fixed) {
      require(std::memcmp(bytes.data() + r.begin, initial.data() + r.begin, r.end - r.begin) == 0,
              "a byte changed that nothing may write (guard, send buffer, read-only region, other PD)");
    }
  }
  std::vector<uint8_t> bytes, initial;
};

struct ReadRecord {  // a READ the responder accepted
  Psn first;
  uint32_t length;
  uint64_t va;
};
struct AtomicRecord {  // an atomic the responder executed, and the value it found
  Psn psn;
  uint64_t original;
};

class Endpoint final : public RcEnv {
 public:
  Endpoint(Memory& memory, unsigned domain, uint32_t address, uint32_t number, Psn first)
      : mem(&memory), pd(domain), ip(address), qpn(number), first_psn(first) {}

  uint8_t* region(RegionId r, std::size_t offset = 0) { return mem->bytes.data() + region_offset(pd, r) + offset; }
  [[nodiscard]] uint32_t key(RegionId r) const { return (pd * 3 + r + 1) << 8; }
  uint8_t* find(uint32_t k, uint64_t addr, uint32_t len, uint32_t access) {  // as dataplane/memory_table.h checks
    for (RegionId r : {kRemote, kLocal, kReadOnly}) {
      const auto base = reinterpret_cast<uint64_t>(region(r));
      if (k != key(r) || (kRegionAccess[r] & access) != access) continue;
      if (addr < base || len > kRegionSize[r] || addr - base > kRegionSize[r] - len) return nullptr;
      return reinterpret_cast<uint8_t*>(addr);
    }
    return nullptr;
  }

  uint8_t* tx_begin(std::size_t length) override {
    tx.assign(length, 0xCD);
    return tx.data();
  }
  void tx_commit(std::size_t length) override { outbox.emplace_back(tx.begin(), tx.begin() + length); }
  uint64_t now_ns() override { return *clock; }
  uint8_t* resolve_local(LocalToken t, uint64_t a, uint32_t n, uint32_t x) override { return find(t.value(), a, n, x); }
  uint8_t* resolve_remote(RemoteToken t, uint64_t a, uint32_t n, uint32_t x) override {
    return find(t.value(), a, n, x);
  }
  bool invalidate_remote(RemoteToken) override { return false; }
  const RecvWqe* pop_receive() override { return rq_head == rq.size() ? nullptr : &rq[rq_head++]; }
  uint32_t receive_credits() override { return static_cast<uint32_t>(rq.size() - rq_head); }
  uint32_t send_queue_tail() override { return sq_tail; }
  void complete_send(const Completion& c) override { sends.push_back(c); }
  void complete_receive(const Completion& c) override { recvs.push_back(c); }
  void flush_receives() override {
    for (; rq_head < rq.size(); ++rq_head)
      recvs.push_back({.context = rq[rq_head].context, .status = CompletionStatus::kWorkRequestFlushed});
  }
  CompletionStatus execute_local(const SendWqe&) override { return CompletionStatus::kLocalQpOperationError; }

  // Connects to `p` and posts the legitimate traffic (after connect(), which takes the SQ tail as its start).
  void connect(Endpoint& p, uint8_t ack_timeout, const uint64_t* now) {
    peer = &p;
    clock = now;
    expect = p.first_psn;
    const RcQpAttributes attrs{.local_qpn = Qpn{qpn},
                               .remote_qpn = Qpn{p.qpn},
                               .send_psn = first_psn,
                               .receive_psn = p.first_psn,
                               .path_mtu = kMtu,
                               .ack_timeout = ack_timeout,
                               .retry_count = 3,
                               .rnr_retry = 2,  // finite, so every input drains
                               .min_rnr_timer = 1,
                               .max_rd_atomic = 2,
                               .max_dest_rd_atomic = 2};
    PacketSpec s;
    s.src_gid = gid_from_ipv4(Ipv4Addr{ip});
    s.dst_gid = gid_from_ipv4(Ipv4Addr{p.ip});
    s.dest_qp = Qpn{p.qpn};
    s.udp_src_port = roce_udp_source_port(Qpn{qpn}, Qpn{p.qpn});
    PacketTemplate headers;
    headers.init(s);
    qp.connect(attrs, headers, sq.data(), sq.size(), this);
    for (Psn psn = first_psn; sq_tail < kTraffic.size(); ++sq_tail) {
      const Traffic& t = kTraffic[sq_tail];
      SendWqe& w =
          sq[sq_tail] = {.context = sq_tail, .op = t.op, .flags = kWqeSignaled, .num_sge = 1, .length = t.length};
      w.sge[0] = {reinterpret_cast<uint64_t>(region(kLocal, t.local)), t.length, LocalToken{key(kLocal)}};
      w.remote_addr = reinterpret_cast<uint64_t>(p.region(kRemote, t.remote));
      w.rkey = RemoteToken{p.key(kRemote)};
      w.compare_add = kAdd;
      w.immediate = kImmediateData;
      wqe_first[sq_tail] = psn;
      psn += psns(w);
    }
    for (uint32_t i = 0; i < rq.size(); ++i) {
      rq[i] = {.context = kRecvContext + i, .num_sge = 1};
      rq[i].sge[0] = {reinterpret_cast<uint64_t>(region(kLocal, kRecvOffset + i * kRecvSize)), kRecvSize,
                      LocalToken{key(kLocal)}};
    }
  }
  // The posted WQE whose PSN range holds `psn`, or nullptr; `offset` is where in its message `psn` starts.
  const SendWqe* wqe_at(Psn psn, uint64_t& offset) const {
    for (uint32_t i = 0; i < sq_tail; ++i) {
      const int32_t d = distance(psn, wqe_first[i]);
      offset = uint64_t{static_cast<uint32_t>(d)} * kMtu;
      if (d >= 0 && d < static_cast<int32_t>(psns(sq[i]))) return &sq[i];
    }
    return nullptr;
  }

  Memory* mem;
  unsigned pd;
  uint32_t ip, qpn;
  Psn first_psn;  // our first request PSN
  Psn expect{};   // an estimate of our responder's expected PSN (exact unless an input plays with it)
  Endpoint* peer = nullptr;
  const uint64_t* clock = nullptr;
  std::array<SendWqe, 8> sq{};
  std::array<Psn, 8> wqe_first{};
  uint32_t sq_tail = 0;
  std::array<RecvWqe, 2> rq{};
  std::size_t rq_head = 0;
  std::vector<uint8_t> tx;
  std::vector<std::vector<uint8_t>> outbox;
  std::vector<Completion> sends, recvs;
  std::size_t sends_checked = 0, recvs_checked = 0;
  std::vector<ReadRecord> reads;
  std::vector<AtomicRecord> atomics;
  RcQp qp;
};

struct World {
  World() {
    a.connect(b, 10, &now);
    b.connect(a, 10, &now);
    c.connect(d, 0, &now);  // no timer: nothing is lost between C and D, and clock steps must not fail them
    d.connect(c, 0, &now);
  }
  Memory host1{0}, host2{1};
  // A's PSNs start near the 2^24 wrap, B's near 2^23, where the signed PSN distance turns over.
  Endpoint a{host1, 0, 0xC6120001, 0x11, Psn{0xFFFFF8}}, b{host2, 0, 0xC6120002, 0x12, Psn{0x7FFFF0}};
  Endpoint c{host1, 1, 0xC6120001, 0x21, Psn{0}}, d{host2, 1, 0xC6120002, 0x22, Psn{0}};
  std::array<Endpoint*, 4> all{&a, &b, &c, &d};
  uint64_t now = 1'000'000;
  bool attacked = false;
};

void report(const World& w) {
  for (const Endpoint* e : w.all) {
    std::fprintf(stderr, "QP %02x state %d; context:status of sends", e->qpn, static_cast<int>(e->qp.state()));
    for (const Completion& c : e->sends)
      std::fprintf(stderr, " %d:%d", static_cast<int>(c.context), static_cast<int>(c.status));
    std::fprintf(stderr, ", receives");
    for (const Completion& c : e->recvs)
      std::fprintf(stderr, " %d:%d", static_cast<int>(c.context), static_cast<int>(c.status));
    std::fprintf(stderr, "\n");
  }
}

// Every frame a QP sends: it parses (ICRC too), goes to the peer, and carries only what it must.
void check_sent(Endpoint& x, std::span<const uint8_t> frame) {
  const ParseResult r = parse_packet(frame);
  require(r.ok(), "a QP sent a frame that does not parse");
  const ParsedPacket& p = r.packet;
  const OpcodeInfo& info = *p.info;
  require(p.ip_version == IpVersion::kV4 && p.ipv4().get(Ipv4::src) == Ipv4Addr{x.ip} &&
              p.ipv4().get(Ipv4::dst) == Ipv4Addr{x.peer->ip} && p.bth().get(Bth::dest_qp) == Qpn{x.peer->qpn},
          "a frame not addressed to the connected peer");
  const Psn psn = p.bth().get(Bth::psn);
  const bool first = info.is(kFirst) || info.is(kOnly), last = info.is(kLast) || info.is(kOnly);
  uint64_t offset = 0;
  if (info.is(kRequest)) {
    const SendWqe* w = x.wqe_at(psn, offset);
    require(w != nullptr, "a request at a PSN of no posted WQE");
    if (w->op == WorkOp::kRdmaRead) {  // a retry asks for the tail from `offset`
      const auto reth = p.ext<Reth>(ExtHeader::kReth);
      require(info.operation == Operation::kRdmaReadRequest && reth.get(Reth::va) == w->remote_addr + offset &&
                  reth.get(Reth::rkey) == w->rkey && reth.get(Reth::dma_length) == w->length - offset,
              "a READ request that is not its WQE's");
    } else if (is_atomic(w->op)) {
      const auto a = p.ext<AtomicEth>(ExtHeader::kAtomicEth);
      require(info.operation == Operation::kFetchAdd && a.get(AtomicEth::va) == w->remote_addr &&
                  a.get(AtomicEth::rkey) == w->rkey && a.get(AtomicEth::swap_or_add) == w->compare_add,
              "an atomic request that is not its WQE's");
    } else {
      const auto length = static_cast<uint32_t>(std::min<uint64_t>(kMtu, w->length - offset));
      require(info.operation == (w->op == WorkOp::kRdmaWrite ? Operation::kRdmaWrite : Operation::kSend) &&
                  first == (offset == 0) && last == (offset + length == w->length) &&
                  info.is(kImmediate) == (last && w->op == WorkOp::kSendWithImmediate),
              "a SEND/WRITE opcode that does not fit its WQE and its place in the message");
      require(
          p.payload_length == length &&
              std::memcmp(p.payload().data(), reinterpret_cast<const uint8_t*>(w->sge[0].addr) + offset, length) == 0,
          "a request payload that is not its WQE's bytes at that PSN");
      const auto reth = p.ext<Reth>(ExtHeader::kReth);
      require(
          !info.carries(ExtHeader::kReth) || (reth.get(Reth::va) == w->remote_addr && reth.get(Reth::rkey) == w->rkey &&
                                              reth.get(Reth::dma_length) == w->length),
          "a WRITE RETH that is not its WQE's");
      require(!info.is(kImmediate) || p.ext<ImmDt>(ExtHeader::kImmDt).get(ImmDt::immediate) == w->immediate,
              "a wrong immediate");
    }
    return;
  }
  if (info.operation == Operation::kRdmaReadResponse) {
    const auto rec = std::find_if(x.reads.rbegin(), x.reads.rend(), [&](const ReadRecord& rr) {
      const int32_t d = distance(psn, rr.first);
      return d >= 0 && d < static_cast<int32_t>(packets(rr.length));
    });
    require(rec != x.reads.rend(), "a READ response at a PSN of no accepted READ");
    offset = uint64_t{static_cast<uint32_t>(distance(psn, rec->first))} * kMtu;
    const auto length = static_cast<uint32_t>(std::min<uint64_t>(kMtu, rec->length - offset));
    require(p.payload_length == length && first == (offset == 0) && last == (offset + length == rec->length),
            "a READ response whose length or opcode does not fit its place in the READ");
    // The READ was resolved to [va, va + length) of a region, so these bytes are ours to read.
    require(
        length == 0 || std::memcmp(p.payload().data(), reinterpret_cast<const uint8_t*>(rec->va + offset), length) == 0,
        "a READ response carries bytes other than those the READ named");
    return;
  }
  const AethSyndrome syndrome(p.ext<Aeth>(ExtHeader::kAeth).get(Aeth::syndrome));
  if (syndrome.kind() == AethKind::kAck) x.expect = psn + 1;
  if (syndrome.kind() == AethKind::kRnrNak || syndrome == AethSyndrome::nak(NakCode::kPsnSequenceError)) x.expect = psn;
  if (info.operation == Operation::kAtomicAcknowledge) {
    const auto rec =
        std::find_if(x.atomics.rbegin(), x.atomics.rend(), [&](const AtomicRecord& ar) { return ar.psn == psn; });
    require(rec != x.atomics.rend() &&
                rec->original == p.ext<AtomicAckEth>(ExtHeader::kAtomicAckEth).get(AtomicAckEth::original_data),
            "an atomic ACK that is not the result of the atomic at its PSN");
  }
}

// Hands one frame to a QP, recording what its responder accepted (for the READ response and atomic oracles).
void deliver(Endpoint& to, std::span<const uint8_t> frame) {
  const ParseResult r = parse_packet(frame);
  if (!r.ok()) return;
  const ParsedPacket& p = r.packet;
  const Operation op = p.info->operation;
  const Psn psn = p.bth().get(Bth::psn);
  if (kTrace) {
    std::fprintf(stderr, "%14llu to %02x %-34s psn %06x len %4u aeth %02x\n",
                 static_cast<unsigned long long>(*to.clock), to.qpn, p.info->name.data(), psn.value(), p.payload_length,
                 p.has(ExtHeader::kAeth) ? p.ext<Aeth>(ExtHeader::kAeth).get(Aeth::syndrome) : 0);
  }
  const RcCounters before = to.qp.counters();
  const bool atomic = op == Operation::kCompareSwap || op == Operation::kFetchAdd;
  const uint8_t* target = nullptr;
  if (atomic) {
    const auto a = p.ext<AtomicEth>(ExtHeader::kAtomicEth);
    target = to.find(a.get(AtomicEth::rkey).value(), a.get(AtomicEth::va), 8, kAccessRemoteAtomic);
  }
  const uint64_t original = target != nullptr ? load64(target) : 0;
  to.qp.on_packet(p);
  const RcCounters& after = to.qp.counters();
  uint32_t consumed = 1;
  if (op == Operation::kRdmaReadRequest) {
    const auto reth = p.ext<Reth>(ExtHeader::kReth);
    consumed = packets(reth.get(Reth::dma_length));
    if (after.rx_read_requests != before.rx_read_requests)
      to.reads.push_back({psn, reth.get(Reth::dma_length), reth.get(Reth::va)});
  }
  if (atomic && after.rx_atomic_requests != before.rx_atomic_requests) to.atomics.push_back({psn, original});
  if (p.info->is(kRequest) && psn == to.expect && to.qp.state() != QpState::kError &&
      after.rnr_nak_sent == before.rnr_nak_sent)
    to.expect = psn + consumed;
}

struct Script {
  const uint8_t* data;
  std::size_t size;
  uint64_t take(unsigned bytes) {  // little-endian; zeros past the end
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes && size > 0; ++i, --size) v |= uint64_t{*data++} << (8 * i);
    return v;
  }
};

// A hostile packet to `to`, from its peer's address, for its QPN, with a correct ICRC.
void inject(World& w, Endpoint& to, Script& in) {
  const Opcode op = Opcode{kRcOpcodes[in.take(1) % kRcOpcodes.size()]};
  const auto flags = static_cast<uint8_t>(in.take(1));
  const auto delta = static_cast<int8_t>(in.take(1));
  const auto key_select = static_cast<unsigned>(in.take(1) & 3);
  const uint64_t va_offset = in.take(2), length = in.take(2);
  const auto misc = static_cast<uint32_t>(in.take(4));
  const uint64_t operand = in.take(8), length_field = in.take(2);
  // Up to four PMTUs: packets longer than the QP's PMTU, though not than the parser allows, get through.
  std::array<uint8_t, std::size_t{4} * kMtu> payload{};
  const std::size_t payload_length = (flags & 0x40) ? (1 + (length_field & 3)) * kMtu : length_field % (4 * kMtu + 1);
  for (std::size_t i = 0; i < payload_length; ++i) payload[i] = static_cast<uint8_t>(in.take(1));

  const std::array<Psn, 4> bases = {to.expect, to.first_psn, to.peer->expect,
                                    Psn{static_cast<uint32_t>(operand >> 40)}};
  const RegionId region = key_select == 3 ? kRemote : static_cast<RegionId>(key_select);
  const RemoteToken rkey{key_select == 3 ? misc : to.key(region)};
  const uint64_t va = (flags & 0x10) ? operand : reinterpret_cast<uint64_t>(to.region(region, va_offset));
  PacketSpec s;
  s.src_gid = gid_from_ipv4(Ipv4Addr{to.peer->ip});
  s.dst_gid = gid_from_ipv4(Ipv4Addr{to.ip});
  s.dest_qp = Qpn{to.qpn};
  s.opcode = op;
  s.ack_req = flags & 1;
  s.solicited = flags & 2;
  s.psn = bases[(flags >> 2) & 3] + static_cast<uint32_t>(int32_t{delta});
  s.reth = {va, rkey, static_cast<uint32_t>((flags & 0x20) ? (operand >> 48) << 16 | length : length)};
  const uint8_t* current = (flags & 0x80) ? to.find(rkey.value(), va, 8, 0) : nullptr;
  s.atomic_eth = {va, rkey, operand, current != nullptr ? load64(current) : misc};
  s.aeth = {static_cast<uint8_t>(misc), Msn{misc >> 8}};
  s.atomic_ack_original = operand;
  s.immediate = misc;
  s.invalidate_rkey = RemoteToken{misc};
  if (opcode_info(op).is(kPayload)) s.payload = std::span<const uint8_t>(payload.data(), payload_length);
  std::vector<uint8_t> frame(packet_size(s));
  if (build_packet(s, frame) == 0) return;
  w.attacked = true;
  deliver(to, frame);
}

// Moves `from`'s frames to its peer; faults lose, duplicate or reorder them as a lossy network would.
std::size_t carry(Endpoint& from, bool lose, bool duplicate, bool reverse) {
  std::vector<std::vector<uint8_t>> frames;
  frames.swap(from.outbox);
  if (reverse) std::reverse(frames.begin(), frames.end());
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (i == 0 && lose) continue;
    deliver(*from.peer, frames[i]);
    if (i == 0 && duplicate) deliver(*from.peer, frames[i]);
  }
  return frames.size();
}

// One round of legitimate traffic (faults between A and B only); returns how many frames moved.
std::size_t round(World& w, uint8_t faults) {
  std::size_t moved = 0;
  for (Endpoint* e : w.all) {
    const bool dead = e->qp.state() == QpState::kError;
    const std::size_t queued = e->outbox.size();  // a NAK sent on the way into the error state waits here
    moved += e->qp.send(16) + e->qp.respond(16);
    require(!dead || e->outbox.size() == queued, "a QP in the error state sent a frame");
    for (const auto& f : e->outbox) check_sent(*e, f);
  }
  moved += carry(w.a, faults & 0x10, faults & 0x40, faults & 0x80);
  moved += carry(w.b, faults & 0x20, faults & 0x40, faults & 0x80);
  moved += carry(w.c, false, false, false);
  return moved + carry(w.d, false, false, false);
}

// Completions retire WQEs once each, in posting order, and describe them.
void check_completions(Endpoint& e) {
  for (; e.sends_checked < e.sends.size(); ++e.sends_checked) {
    const Completion& c = e.sends[e.sends_checked];
    const SendWqe& wqe = e.sq[e.sends_checked];
    require(c.context == e.sends_checked && c.context < e.sq_tail && c.op == wqe.op &&
                c.byte_length == (c.status == CompletionStatus::kSuccess ? wqe.length : 0),
            "send completions out of order, twice, or not describing their WQE");
  }
  for (; e.recvs_checked < e.recvs.size(); ++e.recvs_checked) {
    const Completion& c = e.recvs[e.recvs_checked];
    require(c.context >= kRecvContext && c.context < kRecvContext + e.rq.size(),
            "a receive completion for a WQE that was never posted");
    require(c.context >= kRecvContext + e.recvs_checked, "a receive WQE completed twice");
    require(c.context == kRecvContext + e.recvs_checked, "a receive WQE skipped: it never completes, even flushed");
    require(c.status != CompletionStatus::kSuccess || c.byte_length <= kRecvSize, "a receive longer than its buffer");
  }
}

// x's traffic to y: with `strict`, all of it succeeded; otherwise each success implies its data.
void check_traffic(Endpoint& x, Endpoint& y, bool strict) {
  const uint64_t original = load64(y.mem->initial.data() + region_offset(y.pd, kRemote) + kTraffic[3].remote);
  const uint64_t now = load64(y.region(kRemote, kTraffic[3].remote));
  require(now == original || now == original + kAdd, "the atomic was applied more than once");
  for (std::size_t i = 0; i < kTraffic.size(); ++i) {
    const Traffic& t = kTraffic[i];
    const CompletionStatus st = x.sends[i].status;
    require(st == CompletionStatus::kSuccess ||
                (!strict && (st == CompletionStatus::kRetryExceeded || st == CompletionStatus::kWorkRequestFlushed)),
            "legitimate traffic failed with a status no network fault explains");
    if (st == CompletionStatus::kSuccess && (t.op == WorkOp::kRdmaWrite || t.op == WorkOp::kRdmaRead)) {
      require(std::memcmp(x.region(kLocal, t.local), y.region(kRemote, t.remote), t.length) == 0,
              "a successful WRITE/READ did not move its bytes");
    }
    if (st == CompletionStatus::kSuccess && t.op == WorkOp::kFetchAdd)
      require(load64(x.region(kLocal, t.local)) == original && now == original + kAdd, "a wrong atomic result");
  }
  require(!strict || y.recvs.size() == y.rq.size(), "a legitimate SEND was not received");
  for (const Completion& c : y.recvs) {
    const Traffic& t = kTraffic[c.context == kRecvContext ? 2 : 5];
    require(c.status == CompletionStatus::kSuccess
                ? c.byte_length == t.length && c.op == t.op &&
                      (c.op == WorkOp::kSend || c.immediate == kImmediateData) &&
                      std::memcmp(y.region(kLocal, kRecvOffset + (c.context - kRecvContext) * kRecvSize),
                                  x.region(kLocal, t.local), t.length) == 0
                : !strict,
            "a received SEND differs from the one posted, or failed");
  }
}

void check_step(World& w) {
  w.host1.check();
  w.host2.check();
  for (Endpoint* e : w.all) check_completions(*e);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  World w;
  g_world = &w;
  Script in{data, size};
  for (unsigned steps = 0; in.size > 0 && steps < 256; ++steps) {
    const auto step = static_cast<uint8_t>(in.take(1));
    if (step % 4 < 2) {
      inject(w, step % 4 == 0 ? w.b : w.a, in);
    } else if (step % 4 == 2) {
      for (unsigned i = 0; i <= ((step >> 2) & 3u); ++i) round(w, i == 0 ? step : 0);
    } else {
      w.now += uint64_t{1000} << ((step >> 2) & 31u);
      for (Endpoint* e : w.all) e->qp.on_timer();
    }
    check_step(w);
  }
  // Drain: legitimate traffic and timers only, until nothing is left to send or to time out.
  bool quiet = false;
  for (unsigned i = 0; i < 4000 && !quiet; ++i) {
    if (round(w, 0) != 0) {
      w.now += 1000;
    } else {
      uint64_t next = 0;
      for (Endpoint* e : w.all)
        if (const uint64_t d = e->qp.next_deadline_ns(); d != 0 && (next == 0 || d < next)) next = d;
      quiet = next == 0;
      w.now = std::max(w.now + 1, next);
      for (Endpoint* e : w.all) e->qp.on_timer();
    }
    check_step(w);
  }
  require(quiet, "the QPs never went quiet (livelock)");
  for (Endpoint* e : w.all) {
    require(e->sends.size() == e->sq_tail, "a posted send WQE never completed");
    require(e->qp.state() != QpState::kError || e->recvs.size() == e->rq.size(),
            "a receive WQE was not flushed in the error state");
  }
  check_traffic(w.c, w.d, true);
  check_traffic(w.d, w.c, true);
  if (!w.attacked) {
    check_traffic(w.a, w.b, false);
    check_traffic(w.b, w.a, false);
  }
  g_world = nullptr;
  return 0;
}
