// Soak: a million mixed RC messages (SEND, WRITE, READ, FETCH_ADD) between two
// engines over a net_ring link whose receive side loses 1%, reorders 1%,
// duplicates 0.5% and corrupts 0.1% of packets (config.faults). Expected: nothing
// lost, duplicated or corrupted, every completion successful and in posting order.
// UROCE_SOAK_MESSAGES overrides the count (the default is the 10^6).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "dataplane/rc_transport.h"
#include "dataplane/tests/loopback_fixture.h"
#include "dataplane/tests/rc_players.h"

namespace uroce::dataplane::testing {
namespace {

using proto::CompletionStatus;
using proto::WorkOp;

uint64_t soak_messages() {
  const char* env = std::getenv("UROCE_SOAK_MESSAGES");  // NOLINT(concurrency-mt-unsafe): nothing sets the environment
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 1'000'000;
}

TEST(RcSoak, MixedTrafficThroughLossReorderDuplicationAndCorruption) {
  config::Config config = loopback_config();
  config.faults.loss = 0.01;
  config.faults.reorder = 0.01;
  config.faults.duplicate = 0.005;
  config.faults.corrupt = 0.001;
  config.faults.seed = 20261121;
  config.engine.mbufs_per_engine = 8191;
  RcWorld world(config);
  ASSERT_TRUE(world.ok()) << world.error();
  proto::RcQpAttributes attrs;
  // 4.096 us x 2^12 = 16.8 ms: retry_count 7 gives up only after ~134 ms in which the peer engine made no
  // progress. Shorter timeouts failed with kRetryExceeded on a loaded 2-core machine: 2^8 (8 ms of tolerance)
  // under a build, 2^10 (34 ms) in 3 of 9 runs beside an idle TCG guest of the interop harness, whose QEMU
  // threads take their share of both cores. Tail losses then take ~17 ms each to recover; NAKs repair the rest.
  attrs.ack_timeout = 12;
  attrs.max_rd_atomic = 8;
  auto [a, b] = world.connected_pair(1024, attrs);
  ASSERT_TRUE(a && b) << world.error();

  // A's buffer: [0, 256 KiB) SEND sources (64 slots of 4 KiB), [512 KiB, 1 MiB) READ
  // destinations (128 slots: a slot is reused only after its READ completed and was
  // checked), [1 MiB, 1.5 MiB) a copy of B's image as the WRITE source. B's buffer:
  // [0, 512 KiB) the WRITE/READ target, [1 MiB, 2 MiB) the receive slots (256 of 4 KiB).
  constexpr std::size_t kSlot = 4096;
  constexpr std::size_t kSendSlots = 64;
  constexpr std::size_t kRecvSlots = 256;
  constexpr std::size_t kImageSize = std::size_t{512} * 1024;  // B's WRITE/READ target
  constexpr std::size_t kReadBase = std::size_t{512} * 1024;   // A's READ destinations
  constexpr std::size_t kRecvBase = 1u << 20;
  fill_pattern(b->buffer, kImageSize, 3);
  std::vector<uint8_t> expected_remote(b->buffer.begin(), b->buffer.begin() + kImageSize);
  std::memcpy(a->buffer.data() + (1u << 20), expected_remote.data(), expected_remote.size());
  struct PendingRead {
    uint32_t offset = 0, length = 0;
    bool is_read = false;
  };
  std::vector<PendingRead> reads(128);
  uint64_t* counter = b->word();
  *counter = 0;

  const uint64_t total = soak_messages();
  constexpr uint32_t kWindow = 128;
  std::mt19937_64 rng(1);
  uint64_t posted = 0, completed = 0, sends_posted = 0, sends_received = 0, adds = 0, recv_posted = 0;
  uint64_t bad_payloads = 0;
  std::vector<uint32_t> send_length(kRecvSlots);
  for (std::size_t i = 0; i < kRecvSlots; ++i) {
    b->post_receive(b->buffer.data() + kRecvBase + i * kSlot, kSlot, recv_posted);
    ++recv_posted;
  }

  // Ten minutes, and more for a long run (bench/soak_bench.sh runs 10^7): 100 us per message on top.
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + std::chrono::minutes(10) + std::chrono::microseconds(100) * total;
  while (completed < total && std::chrono::steady_clock::now() < deadline) {
    // Post while the window and the receive ring allow.
    while (posted < total && posted - completed < kWindow) {
      const uint32_t kind = static_cast<uint32_t>(rng() % 4);
      const uint32_t length = 1 + static_cast<uint32_t>(rng() % kSlot);
      if (kind == 0) {
        if (sends_posted - sends_received >= kRecvSlots) break;
        const std::size_t slot = sends_posted % kSendSlots;
        uint8_t* src = a->buffer.data() + slot * kSlot;
        for (uint32_t i = 0; i < length; ++i) src[i] = static_cast<uint8_t>(sends_posted * 7 + i);
        send_length[sends_posted % kRecvSlots] = length;
        a->post(a->send(WorkOp::kSend, slot * kSlot, length, posted));
        ++sends_posted;
      } else if (kind == 1) {
        const uint32_t offset = static_cast<uint32_t>(rng() % (kImageSize - kSlot));
        // WRITE what B already holds there, so the remote image stays checkable.
        auto w = a->send(WorkOp::kRdmaWrite, (1u << 20) + offset, length, posted);
        w.remote_addr = b->remote_addr(offset);
        w.rkey = b->rkey();
        a->post(w);
      } else if (kind == 2) {
        const uint32_t offset = static_cast<uint32_t>(rng() % (kImageSize - kSlot));
        reads[posted % 128] = {offset, length, true};
        auto r = a->send(WorkOp::kRdmaRead, kReadBase + (posted % 128) * kSlot, length, posted);
        r.remote_addr = b->remote_addr(offset);
        r.rkey = b->rkey();
        a->post(r);
      } else {
        auto add = a->send(WorkOp::kFetchAdd, std::size_t{300} * 1024, 8, posted);
        add.remote_addr = reinterpret_cast<uint64_t>(counter);
        add.rkey = b->rkey();
        add.compare_add = 1;
        a->post(add);
        ++adds;
      }
      if (kind != 2) reads[posted % 128].is_read = false;
      ++posted;
    }
    bool progress = false;
    while (auto c = a->poll_send()) {
      progress = true;
      ASSERT_EQ(c->status, CompletionStatus::kSuccess) << "message " << completed;
      ASSERT_EQ(c->context, completed) << "completions out of posting order";
      const PendingRead& r = reads[completed % 128];
      if (r.is_read && std::memcmp(a->buffer.data() + kReadBase + (completed % 128) * kSlot,
                                   expected_remote.data() + r.offset, r.length) != 0) {
        ++bad_payloads;
      }
      ++completed;
    }
    while (auto r = b->poll_receive()) {
      progress = true;
      ASSERT_EQ(r->status, CompletionStatus::kSuccess);
      ASSERT_EQ(r->context, sends_received) << "a receive completed twice or out of order";
      const std::size_t slot = sends_received % kRecvSlots;
      const uint8_t* got = b->buffer.data() + kRecvBase + slot * kSlot;
      ASSERT_EQ(r->byte_length, send_length[slot]);
      for (uint32_t i = 0; i < r->byte_length; ++i)
        if (got[i] != static_cast<uint8_t>(sends_received * 7 + i)) ++bad_payloads;
      b->post_receive(b->buffer.data() + kRecvBase + slot * kSlot, kSlot, recv_posted++);
      ++sends_received;
    }
    if (!progress) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  // One line for bench/soak_bench.sh: lost and duplicated SEND deliveries, corrupted payloads (READs and
  // receives checked byte for byte), and FETCH_ADDs applied other than once.
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf(
      "soak: %llu of %llu messages in %.1f s (%.0f msg/s): lost %llu, duplicated %llu, corrupted %llu, "
      "fetch_add off by %lld\n",
      static_cast<unsigned long long>(completed), static_cast<unsigned long long>(total), seconds,
      static_cast<double>(completed) / seconds,
      static_cast<unsigned long long>(sends_posted > sends_received ? sends_posted - sends_received : 0),
      static_cast<unsigned long long>(sends_received > sends_posted ? sends_received - sends_posted : 0),
      static_cast<unsigned long long>(bad_payloads), static_cast<long long>(*counter) - static_cast<long long>(adds));
  ASSERT_EQ(completed, total) << "timed out";
  EXPECT_EQ(sends_received, sends_posted) << "lost or duplicated deliveries";
  EXPECT_EQ(bad_payloads, 0u);
  EXPECT_EQ(*counter, adds) << "a FETCH_ADD was applied twice or not at all";
  EXPECT_EQ(std::memcmp(b->buffer.data(), expected_remote.data(), expected_remote.size()), 0);

  // The faults really happened, and recovery really ran. Counters are final once idle.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  uint64_t faults = 0, retransmit_signals = 0;  // sequence NAKs, timeouts and implied NAKs, all engines
  for (EngineId e = 0; e < world.dataplane().engine_count(); ++e) {
    const auto values = counter_values(world.dataplane().engine(e).counters());
    std::printf("engine %u counters:", e);
    for (const auto& [name, value] : values) {
      if (value == 0) continue;
      std::printf(" %s=%llu", name.c_str(), static_cast<unsigned long long>(value));
      if (name.starts_with("fault_")) faults += value;
      if (name == "packet_seq_err" || name == "local_ack_timeout_err" || name == "implied_nak_seq_err")
        retransmit_signals += value;
    }
    std::printf("\n");
  }
  const auto& qa = a->qp()->protocol().counters();
  const auto& qb = b->qp()->protocol().counters();
  std::printf("A: retransmitted_packets=%llu packet_seq_err=%llu local_ack_timeout_err=%llu implied_nak=%llu\n",
              static_cast<unsigned long long>(qa.retransmitted_packets),
              static_cast<unsigned long long>(qa.packet_seq_err),
              static_cast<unsigned long long>(qa.local_ack_timeout_err),
              static_cast<unsigned long long>(qa.implied_nak_seq_err));
  std::printf("B: out_of_sequence=%llu duplicate_request=%llu\n", static_cast<unsigned long long>(qb.out_of_sequence),
              static_cast<unsigned long long>(qb.duplicate_request));
  EXPECT_GT(faults, 0u);
  EXPECT_GT(retransmit_signals, 0u) << "go-back-N never ran";
  EXPECT_GT(qa.retransmitted_packets, 0u);
  world.destroy(a, b);
}

}  // namespace
}  // namespace uroce::dataplane::testing
