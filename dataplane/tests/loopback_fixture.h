// Shared scaffolding for the loopback suite: one EAL per process (loopback_environment.cc), a Dataplane with
// two engines and two ports joined by a ring link, a traffic generator that runs on an engine as a poller,
// and a QP endpoint that records what it receives.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "dataplane/dataplane.h"
#include "proto/packet_builder.h"

namespace uroce::dataplane::testing {

inline constexpr PortIndex kPortA = 0;
inline constexpr PortIndex kPortB = 1;

config::PortConfig port_config(const std::string& name, const std::string& device);
config::IpAddress ipv4(uint8_t a, uint8_t b, uint8_t c, uint8_t d);
config::IpAddress ipv6(const char* text);

// Two engines (backoff idle policy) on the test CPUs, ports "a" and "b" on ring link "ab", each with an IPv4
// and an IPv6 address and a configured MAC (ring ports have none of their own).
config::Config loopback_config();

// Polls `done` every millisecond; true as soon as it holds, false after `timeout`. Generous by default: the
// machine is small and noisy, and nothing here asserts on time.
bool eventually(const std::function<bool()>& done, std::chrono::seconds timeout = std::chrono::seconds(60));

// A RoCE packet from port `from` to port `to` of the loopback config (IPv4, ICRC correct).
proto::PacketSpec roce_spec(const Dataplane& dp, PortIndex from, PortIndex to, proto::Qpn qpn, proto::Opcode opcode,
                            uint32_t psn, std::span<const uint8_t> payload = {});

// Sends `count` frames from one engine's TX queue on `port`, at most `per_iteration` per loop iteration (so
// the receiving queue keeps up). Runs as a Poller; make_frame writes frame `index` into `out` and returns its
// length (0: skip it). An empty mempool simply delays the next frame.
class FrameGenerator {
 public:
  using MakeFrame = std::function<std::size_t(uint64_t index, std::span<uint8_t> out)>;
  FrameGenerator(PortIndex port, uint64_t count, MakeFrame make_frame, unsigned per_iteration = 16);
  [[nodiscard]] Poller poller() { return Poller{&FrameGenerator::poll, this}; }
  [[nodiscard]] uint64_t sent() const { return sent_.load(std::memory_order_acquire); }
  [[nodiscard]] bool done() const { return sent() == count_; }
  // mbuf offload flags for frame `index`, as a receiving NIC would set them (RTE_MBUF_F_RX_*): the ring link hands
  // the sender's mbuf to the receiver as it is. Set before the generator runs.
  std::function<uint64_t(uint64_t index)> rx_flags;

 private:
  static bool poll(void* self, EngineContext& ctx);
  PortIndex port_;
  uint64_t count_;
  MakeFrame make_frame_;
  unsigned per_iteration_;
  uint64_t next_ = 0;  // engine-only
  std::atomic<uint64_t> sent_{0};
};

// Adds the generator to `engine`, waits until it has sent everything, removes it.
void run_generator(Engine& engine, FrameGenerator& generator);

// A QP endpoint that records every packet it gets (on which engine, opcode, PSN) and frees the mbuf.
class RecordingEndpoint {
 public:
  struct Packet {
    EngineId engine;
    unsigned lcore;
    proto::Opcode opcode;
    uint32_t psn;
    PortIndex port;
  };
  [[nodiscard]] QpEndpoint endpoint() { return QpEndpoint{&RecordingEndpoint::on_packet, this}; }
  [[nodiscard]] uint64_t count() const { return count_.load(std::memory_order_acquire); }
  [[nodiscard]] std::vector<Packet> packets() const;

 private:
  static void on_packet(void* self, EngineContext& ctx, const proto::ParsedPacket& packet, PortIndex port,
                        rte_mbuf* mbuf);
  mutable std::mutex mutex_;  // test code: the engine appends, the test thread reads
  std::vector<Packet> packets_;
  std::atomic<uint64_t> count_{0};
};

class LoopbackTest : public ::testing::Test {
 protected:
  // Starts the dataplane (asserting success) and returns it.
  Dataplane& start(const config::Config& config);
  void TearDown() override;
  [[nodiscard]] uint64_t counter(EngineId engine, const std::string& name) const;

  std::unique_ptr<Dataplane> dp_;
};

}  // namespace uroce::dataplane::testing
