// A deterministic simulated network for the RC state machines: two endpoints,
// each an RcQp with an in-memory RcEnv (memory registrations, SQ, RQ, completion
// lists, a virtual clock), joined by a wire that can lose, reorder, duplicate and
// corrupt packets. Every frame crosses the wire as bytes and is parsed (ICRC
// included) on arrival, exactly as on a real port.
#pragma once

#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "proto/packet_parser.h"
#include "proto/rc_qp.h"

namespace uroce::proto::testing {

struct Region {
  std::vector<uint8_t> bytes;
  uint32_t key = 0;  // used as both L_Key and R_Key
  uint32_t access = 0;
  bool remotely_invalidatable = false;
  bool valid = true;
  [[nodiscard]] uint64_t addr(std::size_t offset = 0) const {
    return reinterpret_cast<uint64_t>(bytes.data() + offset);
  }
};

struct WireFaults {
  double loss = 0, reorder = 0, duplicate = 0, corrupt = 0;
  // A slow receiver: frames toward B wait in a buffer of this many frames (0: none, every frame arrives in the
  // round it was sent) that B drains at b_frames_per_round; a frame that finds the buffer full is dropped.
  uint32_t b_buffer_frames = 0;
  uint32_t b_frames_per_round = 1;
};

class SimEndpoint final : public RcEnv {
 public:
  explicit SimEndpoint(uint32_t sq_size = 256) : sq_(sq_size) {}

  Region& add_region(std::size_t size, uint32_t access, uint8_t fill = 0) {
    auto r = std::make_unique<Region>();
    r->bytes.assign(size + 8, fill);  // 8 spare bytes so an 8-aligned atomic target always fits
    r->key = next_key_;
    next_key_ += 0x100;  // index << 8 | key byte, as the dataplane forms tokens
    r->access = access;
    regions_.push_back(std::move(r));
    return *regions_.back();
  }

  // Posts a send WQE; returns false if the SQ is full.
  bool post_send(SendWqe w) {
    if (sq_tail_ - qp.send_queue_head() == sq_.size()) return false;
    sq_[sq_tail_ % sq_.size()] = w;
    ++sq_tail_;
    return true;
  }
  void post_receive(const RecvWqe& r) { rq_.push_back(r); }
  void set_srq(bool on) { srq_ = on; }

  // RcEnv
  uint8_t* tx_begin(std::size_t length) override {
    if (tx_fail_next_ > 0) {
      --tx_fail_next_;
      return nullptr;
    }
    tx_buffer_.assign(length, 0xCD);
    return tx_buffer_.data();
  }
  void tx_commit(std::size_t length) override {
    tx_buffer_.resize(length);
    outbox.push_back(tx_buffer_);
  }
  uint64_t now_ns() override { return *clock_; }
  uint8_t* resolve_local(LocalToken t, uint64_t addr, uint32_t len, uint32_t access) override {
    return resolve(t.value(), addr, len, access);
  }
  uint8_t* resolve_remote(RemoteToken t, uint64_t addr, uint32_t len, uint32_t access) override {
    return resolve(t.value(), addr, len, access);
  }
  bool invalidate_remote(RemoteToken t) override {
    for (auto& r : regions_) {
      if (r->key == t.value() && r->valid && r->remotely_invalidatable) {
        r->valid = false;
        return true;
      }
    }
    return false;
  }
  const RecvWqe* pop_receive() override {
    if (rq_.empty()) return nullptr;
    popped_ = rq_.front();
    rq_.pop_front();
    return &popped_;
  }
  uint32_t receive_credits() override { return srq_ ? UINT32_MAX : static_cast<uint32_t>(rq_.size()); }
  uint32_t send_queue_tail() override { return sq_tail_; }
  void complete_send(const Completion& c) override { send_completions.push_back(c); }
  void complete_receive(const Completion& c) override { recv_completions.push_back(c); }
  void flush_receives() override {
    for (const RecvWqe& r : rq_) {
      Completion c;
      c.context = r.context;
      c.status = CompletionStatus::kWorkRequestFlushed;
      recv_completions.push_back(c);
    }
    rq_.clear();
  }

  // Local operations on the regions: a region's key names its slot (key >> 8); fast
  // register and bind need an invalid remotely-invalidatable slot, invalidate a valid one.
  CompletionStatus execute_local(const SendWqe& w) override {
    ++local_operations_executed;
    const MemoryOperation& m = w.memory;
    Region* target = nullptr;
    for (auto& r : regions_)
      if ((r->key >> 8) == (m.token >> 8)) target = r.get();
    switch (w.op) {
      case WorkOp::kFastRegister:
        if (target == nullptr || target->valid || !target->remotely_invalidatable)
          return CompletionStatus::kLocalQpOperationError;
        target->key = m.token;
        target->access = m.access;
        target->valid = true;
        return CompletionStatus::kSuccess;
      case WorkOp::kLocalInvalidate:
        if (target == nullptr || !target->valid || target->key != m.token || !target->remotely_invalidatable)
          return CompletionStatus::kLocalQpOperationError;
        target->valid = false;
        return CompletionStatus::kSuccess;
      default:
        return CompletionStatus::kMemoryWindowBindError;  // the simulation has no memory windows
    }
  }

  const SendWqe* sq() const { return sq_.data(); }
  uint32_t sq_size() const { return static_cast<uint32_t>(sq_.size()); }
  void set_clock(const uint64_t* clock) { clock_ = clock; }
  void fail_tx(unsigned n) { tx_fail_next_ = n; }

  RcQp qp;
  std::vector<std::vector<uint8_t>> outbox;
  std::vector<Completion> send_completions;
  std::vector<Completion> recv_completions;
  uint64_t frames_rejected = 0;
  uint64_t local_operations_executed = 0;

 private:
  uint8_t* resolve(uint32_t key, uint64_t addr, uint32_t len, uint32_t access) {
    for (auto& r : regions_) {
      if (r->key != key || !r->valid || (r->access & access) != access) continue;
      // As dataplane/memory_table.h checks it: addr + len can wrap (a hostile VA of 2^64 - 1 did in the fuzzer).
      if (addr < r->addr() || len > r->bytes.size() || addr - r->addr() > r->bytes.size() - len) return nullptr;
      return reinterpret_cast<uint8_t*>(addr);
    }
    return nullptr;
  }

  std::vector<SendWqe> sq_;
  uint32_t sq_tail_ = 0;
  std::deque<RecvWqe> rq_;
  RecvWqe popped_{};
  bool srq_ = false;
  std::vector<std::unique_ptr<Region>> regions_;
  uint32_t next_key_ = 0x100;
  std::vector<uint8_t> tx_buffer_;
  const uint64_t* clock_ = nullptr;
  unsigned tx_fail_next_ = 0;
};

// Two endpoints A and B connected by an RC connection over a simulated wire.
class SimNetwork {
 public:
  explicit SimNetwork(RcQpAttributes base = {}, uint32_t sq_size = 256, uint64_t seed = 1)
      : a_(sq_size), b_(sq_size), rng_(seed) {
    a_.set_clock(&now_);
    b_.set_clock(&now_);
    RcQpAttributes aa = base, bb = base;
    aa.local_qpn = Qpn{0x11};
    aa.remote_qpn = Qpn{0x12};
    bb.local_qpn = Qpn{0x12};
    bb.remote_qpn = Qpn{0x11};
    aa.send_psn = bb.receive_psn = base.send_psn;
    bb.send_psn = aa.receive_psn = base.receive_psn;
    a_.qp.connect(aa, headers(0x12, 1, 2), a_.sq(), a_.sq_size(), &a_);
    b_.qp.connect(bb, headers(0x11, 2, 1), b_.sq(), b_.sq_size(), &b_);
  }

  SimEndpoint& a() { return a_; }
  SimEndpoint& b() { return b_; }
  uint64_t now() const { return now_; }
  WireFaults faults;
  ParseOptions parse_options;  // how each arriving frame is parsed (e.g. with its ICRC check deferred)
  // Called on every frame that crosses the wire (after the random faults), before it is parsed; a test changes
  // the bytes of the frames it picks. `a_to_b`: the frame's direction.
  std::function<void(std::vector<uint8_t>& frame, bool a_to_b)> tamper;
  bool trace = false;  // print every frame crossing the wire (debugging aid)
  uint64_t frames_sent = 0, frames_lost = 0, frames_corrupted = 0, frames_duplicated = 0, frames_reordered = 0;
  uint64_t frames_overflowed = 0;  // dropped at B's full buffer (faults.b_buffer_frames)

  // Runs until `done()` or until nothing can make progress any more (no packets,
  // no timers). Returns whether done() became true.
  bool run(const std::function<bool()>& done, uint64_t max_rounds = 2'000'000) {
    for (uint64_t round = 0; round < max_rounds; ++round) {
      if (done()) return true;
      bool active = false;
      for (SimEndpoint* e : {&a_, &b_}) {
        active |= e->qp.send(32) != 0;
        active |= e->qp.respond(32) != 0;
      }
      active |= carry(a_, b_);
      active |= carry(b_, a_);
      for (SimEndpoint* e : {&a_, &b_}) active |= e->qp.respond(32) != 0;
      if (active) {
        now_ += 1000;  // 1 us per busy round
        continue;
      }
      // Idle: jump the clock to the next timer.
      uint64_t next = 0;
      for (SimEndpoint* e : {&a_, &b_}) {
        const uint64_t d = e->qp.next_deadline_ns();
        if (d != 0 && (next == 0 || d < next)) next = d;
      }
      if (next == 0) {
        if (!a_.qp.has_unsent_work() && !b_.qp.has_unsent_work()) return done();
        now_ += 1000;  // work held only by TX backpressure: try again
        continue;
      }
      now_ = std::max(now_, next);
      a_.qp.on_timer();
      b_.qp.on_timer();
    }
    return done();
  }

  // Every frame each side sent so far, in order (for wire-level assertions), unless
  // keep_wire_log is off (long runs).
  std::vector<std::vector<uint8_t>> wire_log;
  bool keep_wire_log = true;

 private:
  static PacketTemplate headers(uint32_t dest_qp, uint8_t src, uint8_t dst) {
    PacketSpec s;
    s.src_mac = MacAddr{0x020000000000ull | src};
    s.dst_mac = MacAddr{0x020000000000ull | dst};
    s.src_gid = gid_from_ipv4(Ipv4Addr{0xC6120000u | src});
    s.dst_gid = gid_from_ipv4(Ipv4Addr{0xC6120000u | dst});
    s.dest_qp = Qpn{dest_qp};
    PacketTemplate t;
    t.init(s);
    return t;
  }

  void print_frame(const char* dir, const std::vector<uint8_t>& f, bool lost) const {
    const ParseResult r = parse_packet(f);
    if (!r.ok()) return;
    const ParsedPacket& p = r.packet;
    std::fprintf(stderr, "%10llu %s %-32s psn %06x len %4u%s%s\n", static_cast<unsigned long long>(now_), dir,
                 p.info->name.data(), p.bth().get(Bth::psn).value(), p.payload_length,
                 p.has(ExtHeader::kAeth)
                     ? (" aeth " + std::to_string(p.ext<Aeth>(ExtHeader::kAeth).get(Aeth::syndrome))).c_str()
                     : "",
                 lost ? "  LOST" : "");
  }

  // Moves `from`'s outbox across the wire to `to`, applying faults.
  bool carry(SimEndpoint& from, SimEndpoint& to) {
    const bool buffered = &to == &b_ && faults.b_buffer_frames != 0;
    if (from.outbox.empty() && held_[&from == &a_].empty() && !(buffered && !b_buffer_.empty())) return false;
    std::vector<std::vector<uint8_t>> frames;
    frames.swap(from.outbox);
    auto& held = held_[&from == &a_];
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<std::vector<uint8_t>> arriving;
    for (auto& f : frames) {
      ++frames_sent;
      if (keep_wire_log) wire_log.push_back(f);
      const bool lost = u(rng_) < faults.loss;
      if (trace) print_frame(&from == &a_ ? "A->B" : "B->A", f, lost);
      if (lost) {
        ++frames_lost;
        continue;
      }
      if (u(rng_) < faults.corrupt) {
        ++frames_corrupted;
        f[14 + rng_() % (f.size() - 14)] ^= static_cast<uint8_t>(1u << (rng_() % 8));
      }
      if (u(rng_) < faults.duplicate) {
        ++frames_duplicated;
        arriving.push_back(f);
      }
      if (u(rng_) < faults.reorder) {
        ++frames_reordered;
        held.push_back(std::move(f));  // delivered after the next batch's frames
        continue;
      }
      arriving.push_back(std::move(f));
    }
    if (frames.empty() || arriving.size() > 0) {
      for (auto& h : held) arriving.push_back(std::move(h));
      held.clear();
    }
    if (buffered) {
      for (auto& f : arriving) {
        if (b_buffer_.size() < faults.b_buffer_frames) {
          b_buffer_.push_back(std::move(f));
        } else {
          ++frames_overflowed;
        }
      }
      arriving.clear();
      for (uint32_t i = 0; i < faults.b_frames_per_round && !b_buffer_.empty(); ++i) {
        arriving.push_back(std::move(b_buffer_.front()));
        b_buffer_.pop_front();
      }
    }
    for (auto& f : arriving) {
      if (tamper) tamper(f, &from == &a_);
      const ParseResult r = parse_packet(f, parse_options);
      if (!r.ok()) {
        ++to.frames_rejected;
        continue;
      }
      to.qp.on_packet(r.packet);
    }
    return true;
  }

  SimEndpoint a_, b_;
  uint64_t now_ = 1'000'000;
  std::mt19937_64 rng_;
  std::vector<std::vector<uint8_t>> held_[2];
  std::deque<std::vector<uint8_t>> b_buffer_;  // faults.b_buffer_frames
};

}  // namespace uroce::proto::testing
