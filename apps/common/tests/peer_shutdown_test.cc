// meet_peer: the end-of-run meeting of two uroce processes over their out-of-band TCP stream.
#include "apps/common/peer_shutdown.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include <unistd.h>

namespace uroce::apps {
namespace {

using namespace std::chrono_literals;

// A connected pair on 127.0.0.1. The client connects only once the acceptor listens, and a port another process
// holds is skipped (the suite runs in parallel with other tests that listen).
struct StreamPair {
  std::optional<TcpStream> server;
  std::optional<TcpStream> client;
};

StreamPair connect_pair() {
  StreamPair pair;
  for (unsigned attempt = 0; attempt < 50 && !pair.server; ++attempt) {
    const unsigned port = 40000 + (static_cast<unsigned>(::getpid()) * 7 + attempt * 131) % 20000;
    std::atomic<int> state{0};  // 0: binding, 1: listening, 2: could not listen
    std::string error;
    std::thread acceptor([&] {
      pair.server = TcpStream::accept_one(
          "127.0.0.1", port, TcpStream::Clock::now() + 30s, [&] { state = 1; }, error);
      if (state.load() == 0) state = 2;
    });
    while (state.load() == 0) std::this_thread::yield();
    if (state.load() == 1) {
      std::string connect_error;
      pair.client = TcpStream::connect("127.0.0.1", port, TcpStream::Clock::now() + 30s, connect_error);
      EXPECT_TRUE(pair.client.has_value()) << connect_error;
    }
    acceptor.join();
  }
  EXPECT_TRUE(pair.server.has_value()) << "no free port";
  return pair;
}

// perftest's exchange ends with "done" that nobody reads. The meeting must wait for the peer's marker behind it:
// returning on the first byte let the faster process close its net_memif port while the other still polled, and the
// memif PMD crashed the slower one (seen in CI under ASan, send_bw -a).
TEST(PeerShutdown, TheMeetingWaitsForThePeersMarkerBehindWhatItSentBefore) {
  StreamPair pair = connect_pair();
  ASSERT_TRUE(pair.server && pair.client);
  static constexpr char kDone[] = "done";
  ASSERT_TRUE(pair.server->write_all(kDone, sizeof kDone));
  std::atomic<bool> peer_stopped{false};
  std::thread peer([&] {
    std::this_thread::sleep_for(200ms);  // the peer is still busy when we arrive
    peer_stopped.store(true);
    EXPECT_TRUE(meet_peer(*pair.server, 30s));
  });
  EXPECT_TRUE(meet_peer(*pair.client, 30s));
  EXPECT_TRUE(peer_stopped.load()) << "returned before the peer had stopped";
  peer.join();
}

TEST(PeerShutdown, APeerThatClosesWithoutAMarkerEndsTheMeeting) {
  StreamPair pair = connect_pair();
  ASSERT_TRUE(pair.server && pair.client);
  static constexpr char kDone[] = "done";
  ASSERT_TRUE(pair.server->write_all(kDone, sizeof kDone));
  pair.server->close();  // perftest or ibv_rc_pingpong: gone without taking part
  EXPECT_FALSE(meet_peer(*pair.client, 30s));
}

}  // namespace
}  // namespace uroce::apps
