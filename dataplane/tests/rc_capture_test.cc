// Wire truth: the engines capture what they send and receive (config.capture), and
// an independent decoder agrees with every RoCEv2 frame of an RC session: scapy
// recomputes each ICRC and tshark decodes each opcode with no malformed-packet or
// warning-level expert info (proto/tests/crosscheck/scapy_crosscheck.py --capture).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "dataplane/rc_transport.h"
#include "dataplane/tests/loopback_fixture.h"
#include "dataplane/tests/rc_players.h"

namespace uroce::dataplane::testing {
namespace {

using proto::CompletionStatus;
using proto::WorkOp;

TEST(RcCapture, EveryCapturedFrameDecodesWithTheRightIcrc) {
  // NOLINTBEGIN(concurrency-mt-unsafe): nothing sets the environment
  const char* script = std::getenv("UROCE_CROSSCHECK_SCRIPT");
  const char* tshark = std::getenv("UROCE_TSHARK");
  // NOLINTEND(concurrency-mt-unsafe)
  if (script == nullptr || tshark == nullptr) GTEST_SKIP() << "needs tshark and python3-scapy (see meson.build)";
  const std::string path = ::testing::TempDir() + "rc_session.pcapng";
  std::remove(path.c_str());
  {
    config::Config config = loopback_config();
    config.capture.pcapng_path = path;
    RcWorld world(config);
    ASSERT_TRUE(world.ok()) << world.error();
    auto [a, b] = world.connected_pair(1024);
    ASSERT_TRUE(a && b) << world.error();
    fill_pattern(a->buffer, 8192);
    // SEND ONLY with pad, SEND FIRST/MIDDLE/LAST, WRITE with immediate, READ responses
    // FIRST/MIDDLE/LAST and ONLY, both atomics, and the ACKs they draw.
    for (uint32_t length : {5u, 3000u}) {
      b->post_receive(b->buffer.data(), 4096, length);
      a->post(a->send(WorkOp::kSend, 0, length, length));
    }
    b->post_receive(nullptr, 0, 9);
    auto w = a->send(WorkOp::kRdmaWriteWithImmediate, 0, 2049, 1);
    w.remote_addr = b->remote_addr(8192);
    w.rkey = b->rkey();
    w.immediate = 0xABCD;
    a->post(w);
    for (uint32_t length : {5000u, 100u}) {
      auto r = a->send(WorkOp::kRdmaRead, 16384, length, 2);
      r.remote_addr = b->remote_addr(0);
      r.rkey = b->rkey();
      a->post(r);
    }
    for (WorkOp op : {WorkOp::kFetchAdd, WorkOp::kCompareSwap}) {
      auto atomic = a->send(op, 32768, 8, 3);
      atomic.remote_addr = reinterpret_cast<uint64_t>(b->word());
      atomic.rkey = b->rkey();
      a->post(atomic);
    }
    for (int i = 0; i < 7; ++i) {
      const auto c = a->wait_send_completion();
      ASSERT_TRUE(c);
      EXPECT_EQ(c->status, CompletionStatus::kSuccess);
    }
    world.destroy(a, b);
  }  // the dataplane stops: the capture file is complete
  const std::string command = std::string("/usr/bin/python3 ") + script + " --tshark " + tshark + " --capture " + path +
                              " --expect RC_SEND_ONLY RC_SEND_FIRST RC_SEND_MIDDLE RC_SEND_LAST"
                              " RC_RDMA_WRITE_FIRST RC_RDMA_WRITE_LAST_WITH_IMMEDIATE RC_RDMA_READ_REQUEST"
                              " RC_RDMA_READ_RESPONSE_FIRST RC_RDMA_READ_RESPONSE_MIDDLE RC_RDMA_READ_RESPONSE_LAST"
                              " RC_RDMA_READ_RESPONSE_ONLY RC_FETCH_ADD RC_COMPARE_SWAP RC_ATOMIC_ACKNOWLEDGE"
                              " RC_ACKNOWLEDGE";
  // NOLINTNEXTLINE(concurrency-mt-unsafe): glibc's system() is MT-Safe; POSIX alone does not promise it
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

}  // namespace
}  // namespace uroce::dataplane::testing
