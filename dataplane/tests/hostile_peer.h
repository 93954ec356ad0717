// A hostile peer on the wire, for the `hostile` suite: a uroce RC QP (the victim, on engine 1, port b) is
// connected to a peer that the test plays by hand from port a. The peer is an attacker on the segment: it knows
// the addresses, QPNs, PSNs and keys a passive listener learns, forges any frame it likes (FrameGenerator on
// port a or b) and records every frame the victim sends it (a raw QP endpoint on engine 0). Every memory region
// the victim registers sits between canary pages, so a test can prove that no byte outside a registered range
// ever changed.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <rte_mbuf.h>

#include "dataplane/rc_transport.h"
#include "dataplane/tests/loopback_fixture.h"
#include "dataplane/tests/rc_players.h"
#include "proto/aeth.h"

namespace uroce::dataplane::testing {

// Records every frame addressed to its QPN, whole.
class FrameRecorder {
 public:
  [[nodiscard]] QpEndpoint endpoint() { return QpEndpoint{&FrameRecorder::on_packet, this}; }
  [[nodiscard]] std::vector<std::vector<uint8_t>> frames() const {
    const std::lock_guard lock(mutex_);
    return frames_;
  }
  [[nodiscard]] std::size_t count() const {
    const std::lock_guard lock(mutex_);
    return frames_.size();
  }
  void clear() {
    const std::lock_guard lock(mutex_);
    frames_.clear();
  }

 private:
  static void on_packet(void* self, EngineContext&, const proto::ParsedPacket& packet, PortIndex, rte_mbuf* mbuf) {
    auto& r = *static_cast<FrameRecorder*>(self);
    {
      const std::lock_guard lock(r.mutex_);
      r.frames_.emplace_back(packet.frame.begin(), packet.frame.begin() + static_cast<std::ptrdiff_t>(packet.length()));
    }
    rte_pktmbuf_free(mbuf);
  }
  mutable std::mutex mutex_;  // test code: the engine appends, the test thread reads
  std::vector<std::vector<uint8_t>> frames_;
};

// One frame the victim sent, decoded.
struct Reply {
  proto::Opcode opcode{};
  uint32_t psn = 0;
  std::optional<proto::AethSyndrome> syndrome;  // ACKs, NAKs, READ responses that carry an AETH
  std::vector<uint8_t> payload;
  [[nodiscard]] bool is_nak(proto::NakCode code) const {
    return syndrome && syndrome->kind() == proto::AethKind::kNak && syndrome->nak_code() == code;
  }
};

// A registered region between two canary pages; the body starts with a known pattern.
class GuardedRegion {
 public:
  static constexpr std::size_t kGuard = 4096;
  static constexpr uint8_t kCanary = 0xA5;

  GuardedRegion(RcTransport& transport, std::size_t length, uint32_t access, uint32_t pd, uint32_t seed)
      : transport_(transport), bytes_(length + 2 * kGuard, kCanary), length_(length) {
    for (std::size_t i = 0; i < length; ++i) bytes_[kGuard + i] = static_cast<uint8_t>(i * 251 + seed * 31 + (i >> 8));
    auto token = transport.register_memory(addr(), length, access, pd);
    EXPECT_TRUE(token.ok()) << token.error();
    if (token.ok()) token_ = token.value();
    original_.assign(bytes_.begin() + kGuard, bytes_.begin() + static_cast<std::ptrdiff_t>(kGuard + length));
  }
  ~GuardedRegion() { release(); }
  GuardedRegion(const GuardedRegion&) = delete;
  GuardedRegion& operator=(const GuardedRegion&) = delete;

  void release() {
    if (token_ != 0) (void)transport_.deregister_memory(token_);
    token_ = 0;
  }
  [[nodiscard]] uint64_t addr(std::size_t offset = 0) const {
    return reinterpret_cast<uint64_t>(bytes_.data() + kGuard + offset);
  }
  [[nodiscard]] proto::RemoteToken rkey() const { return proto::RemoteToken{token_}; }
  [[nodiscard]] std::size_t length() const { return length_; }
  [[nodiscard]] uint8_t* body() { return bytes_.data() + kGuard; }
  [[nodiscard]] const std::vector<uint8_t>& original() const { return original_; }
  [[nodiscard]] bool guards_intact() const {
    for (std::size_t i = 0; i < kGuard; ++i)
      if (bytes_[i] != kCanary || bytes_[kGuard + length_ + i] != kCanary) return false;
    return true;
  }
  [[nodiscard]] bool unchanged() const { return std::memcmp(bytes_.data() + kGuard, original_.data(), length_) == 0; }

 private:
  RcTransport& transport_;
  std::vector<uint8_t> bytes_;
  std::size_t length_;
  std::vector<uint8_t> original_;
  uint32_t token_ = 0;
};

// Telemetry counters of one engine, read before an attack so the test can check what it moved.
class CounterWatch {
 public:
  CounterWatch(const Dataplane& dp, EngineId engine) : dp_(dp), engine_(engine) {}
  [[nodiscard]] uint64_t now(const std::string& name) const {
    const auto v = counter_value(dp_.engine(engine_).counters(), name);
    EXPECT_TRUE(v.has_value()) << "no counter named " << name;
    return v.value_or(0);
  }
  void mark(const std::string& name) { marks_.emplace_back(name, now(name)); }
  [[nodiscard]] uint64_t moved(const std::string& name) const {
    for (const auto& [n, v] : marks_)
      if (n == name) return now(name) - v;
    ADD_FAILURE() << name << " was not marked";
    return 0;
  }

 private:
  const Dataplane& dp_;
  EngineId engine_;
  std::vector<std::pair<std::string, uint64_t>> marks_;
};

}  // namespace uroce::dataplane::testing
