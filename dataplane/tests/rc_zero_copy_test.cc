// Zero-copy TX (engine.zero_copy_threshold) end to end on the ring link: request payloads of registered memory
// leave as mbufs attached to that memory, the peer's engine reads them after the post returned, a lost packet is
// sent again from the same memory, and a deregistration waits for the mbufs that still point into it (and for
// every engine to finish the packet it was on).
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <thread>

#include "dataplane/rc_transport.h"
#include "dataplane/tests/loopback_fixture.h"
#include "dataplane/tests/rc_players.h"

namespace uroce::dataplane::testing {
namespace {

using proto::CompletionStatus;
using proto::WorkOp;

constexpr uint32_t kThreshold = 1024;

config::Config zero_copy_config(double loss = 0) {
  config::Config c = loopback_config();
  c.engine.zero_copy_threshold = kThreshold;
  c.faults.loss = loss;
  return c;
}

// WRITE then SEND of `size` bytes from A to B; every byte checked.
void write_and_send(Player& a, Player& b, uint32_t size, uint64_t context) {
  fill_pattern(a.buffer, size, static_cast<uint32_t>(context));
  auto w = a.send(WorkOp::kRdmaWrite, 0, size, context);
  w.remote_addr = b.remote_addr(b.half());
  w.rkey = b.rkey();
  a.post(w);
  const auto written = a.wait_send_completion();
  ASSERT_TRUE(written);
  ASSERT_EQ(written->status, CompletionStatus::kSuccess);
  ASSERT_EQ(std::memcmp(a.buffer.data(), b.buffer.data() + b.half(), size), 0) << "WRITE of " << size;

  fill_pattern(a.buffer, size, static_cast<uint32_t>(context) + 1);
  b.post_receive(b.buffer.data(), size, context);
  a.post(a.send(WorkOp::kSend, 0, size, context + 1));
  const auto sent = a.wait_send_completion();
  const auto received = b.wait_receive_completion();
  ASSERT_TRUE(sent && received);
  ASSERT_EQ(sent->status, CompletionStatus::kSuccess);
  ASSERT_EQ(received->byte_length, size);
  ASSERT_EQ(std::memcmp(a.buffer.data(), b.buffer.data(), size), 0) << "SEND of " << size;
}

TEST(RcZeroCopy, SizesAroundTheThresholdDeliverEveryByte) {
  RcWorld world(zero_copy_config());
  ASSERT_TRUE(world.ok()) << world.error();
  for (const uint32_t mtu : {1024u, 4096u}) {
    auto [a, b] = world.connected_pair(mtu);
    ASSERT_TRUE(a && b) << world.error();
    uint64_t context = 0;
    uint64_t expected_zero_copy = 0;
    for (const uint32_t size : {kThreshold - 1, kThreshold, kThreshold + 1, mtu - 1, mtu, mtu + 1, 3 * mtu + 5}) {
      write_and_send(*a, *b, size, context += 2);
      if (HasFatalFailure()) return;
      // Packets of kThreshold payload bytes or more go zero-copy: the full ones and a last one that long.
      const uint64_t full = size / mtu;
      const uint32_t rest = size % mtu;
      expected_zero_copy += 2 * ((mtu >= kThreshold ? full : 0) + (rest >= kThreshold ? 1 : 0));
    }
    EXPECT_EQ(a->qp()->zero_copy_packets(), expected_zero_copy) << "PMTU " << mtu;
    EXPECT_EQ(b->qp()->zero_copy_packets(), 0u) << "ACKs carry no payload";
    // A long message: some packets may be copied instead when the mempool runs short of the three mbufs a
    // zero-copy frame takes, but every byte arrives.
    write_and_send(*a, *b, 1u << 20, context += 2);
    if (HasFatalFailure()) return;
    EXPECT_GT(a->qp()->zero_copy_packets(), expected_zero_copy);
    world.destroy(a, b);
  }
}

TEST(RcZeroCopy, LostPacketsAreSentAgainFromTheRegisteredMemory) {
  RcWorld world(zero_copy_config(0.05));
  ASSERT_TRUE(world.ok()) << world.error();
  proto::RcQpAttributes attrs;
  attrs.ack_timeout = 10;  // ~4 ms: lost packets come back quickly
  auto [a, b] = world.connected_pair(4096, attrs);
  ASSERT_TRUE(a && b) << world.error();
  for (uint64_t i = 0; i < 8; ++i) {
    write_and_send(*a, *b, (64u << 10) + static_cast<uint32_t>(i) * 1500, 2 * i + 2);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(a->qp()->protocol().counters().retransmitted_packets, 0u) << "the fault injector lost some packets";
  EXPECT_GT(a->qp()->zero_copy_packets(), 8u * 16);
  world.destroy(a, b);
}

// A zero-copy mbuf the NIC has not consumed yet pins its registration (MemoryTable::pin_for_tx, as
// RcQueuePair::tx_begin_zero_copy takes it): the deregistration returns, but the memory stays in flight, its
// slot is not reused, and only the last unpin (the mbuf's free callback) releases it.
TEST(RcZeroCopy, DeregistrationWaitsForInFlightMbufs) {
  RcWorld world(zero_copy_config());
  ASSERT_TRUE(world.ok()) << world.error();
  auto [a, b] = world.connected_pair(4096);
  ASSERT_TRUE(a && b) << world.error();
  write_and_send(*a, *b, 16384, 2);  // real zero-copy traffic first: its pins all came back
  if (HasFatalFailure()) return;
  RcTransport& transport = world.transport();
  std::vector<uint8_t> memory(8192, 0x5A);
  auto token =
      transport.register_memory(reinterpret_cast<uint64_t>(memory.data()), memory.size(), proto::kAccessLocalWrite, 1);
  ASSERT_TRUE(token.ok());
  MemoryTable& table = transport.memory();
  std::atomic<uint32_t>* first = table.pin_for_tx(token.value(), reinterpret_cast<uint64_t>(memory.data()), 4096);
  std::atomic<uint32_t>* second =
      table.pin_for_tx(token.value(), reinterpret_cast<uint64_t>(memory.data()) + 4096, 4096);
  ASSERT_TRUE(first != nullptr && second == first);
  EXPECT_EQ(table.pin_for_tx(token.value(), reinterpret_cast<uint64_t>(memory.data()) + 4096, 4097), nullptr)
      << "outside the region";

  ASSERT_TRUE(transport.deregister_memory(token.value()).ok());
  EXPECT_EQ(table.pin_for_tx(token.value(), reinterpret_cast<uint64_t>(memory.data()), 64), nullptr)
      << "no new zero-copy mbuf after the deregistration";
  EXPECT_TRUE(transport.memory_in_flight(token.value()));
  const auto usage = transport.usage();
  // A new registration must not take the draining slot.
  auto other = transport.register_memory(reinterpret_cast<uint64_t>(memory.data()), 64, 0, 1);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(MemoryTable::index_of(other.value()), MemoryTable::index_of(token.value()));
  ASSERT_TRUE(transport.deregister_memory(other.value()).ok());

  std::atomic<bool> drained{false};
  std::thread waiter([&] {
    transport.wait_memory_drained(token.value());
    drained.store(true);
  });
  MemoryTable::unpin_tx(first);
  EXPECT_TRUE(transport.memory_in_flight(token.value())) << "one mbuf still points into it";
  EXPECT_FALSE(drained.load());
  MemoryTable::unpin_tx(second);
  waiter.join();
  EXPECT_TRUE(drained.load());
  EXPECT_FALSE(transport.memory_in_flight(token.value()));
  EXPECT_LE(transport.usage().memory_slots, usage.memory_slots) << "the slot went back to the free list";
  world.destroy(a, b);
}

// The responder resolves a key and then copies: a packet that resolved it just before a deregistration may still
// be placing bytes. deregister_memory() returns only after every engine has finished the loop iteration it was in
// (a no-op command each), so the memory is the caller's once it returns.
TEST(RcZeroCopy, DeregistrationWaitsForEveryEngineToFinishItsIterationOnceAnEngineReadTheMemory) {
  RcWorld world(loopback_config());
  ASSERT_TRUE(world.ok()) << world.error();
  RcTransport& transport = world.transport();
  Dataplane& dp = world.dataplane();
  ASSERT_GE(dp.engine_count(), 1);
  constexpr uint32_t kPd = 1;
  std::vector<uint8_t> memory(4096);
  const auto addr = reinterpret_cast<uint64_t>(memory.data());
  const auto commands = [&] {
    std::vector<uint64_t> n;
    for (EngineId e = 0; e < dp.engine_count(); ++e) n.push_back(dp.engine(e).counters().commands_executed.read());
    return n;
  };
  // Local-only memory (a READ sink, a receive buffer) as well as remote: the engines place peers' bytes in both.
  const std::array<uint32_t, 2> kinds = {proto::kAccessLocalWrite,
                                         proto::kAccessLocalWrite | proto::kAccessRemoteWrite};
  // No engine has read them: nothing can be in progress, and the deregistrations ask no engine.
  for (const uint32_t access : kinds) {
    auto unused = transport.register_memory(addr, memory.size(), access, kPd);
    ASSERT_TRUE(unused.ok());
    const std::vector<uint64_t> before = commands();
    ASSERT_TRUE(transport.deregister_memory(unused.value()).ok());
    EXPECT_EQ(commands(), before) << "memory no engine read made the deregistration wait (access " << access << ")";
  }
  // An engine resolves them (as a packet being placed would): each deregistration waits for every engine. The flag
  // stays with the slot (a later registration in it waits too).
  for (const uint32_t access : kinds) {
    auto used = transport.register_memory(addr, memory.size(), access, kPd);
    ASSERT_TRUE(used.ok());
    uint8_t* resolved = nullptr;
    ASSERT_TRUE(dp.engine(0)
                    .call([&](EngineContext&) {
                      resolved = transport.memory().resolve(used.value(), addr, 64, proto::kAccessLocalWrite,
                                                            Requester{kPd, 0}, true);
                    })
                    .ok());
    ASSERT_EQ(resolved, memory.data());
    const std::vector<uint64_t> before = commands();
    ASSERT_TRUE(transport.deregister_memory(used.value()).ok());
    const std::vector<uint64_t> after = commands();
    for (EngineId e = 0; e < dp.engine_count(); ++e) EXPECT_GT(after[e], before[e]) << "engine " << e;
  }
}

}  // namespace
}  // namespace uroce::dataplane::testing
