#include "apps/common/peer_shutdown.h"

namespace uroce::apps {

bool meet_peer(const TcpStream& stream, std::chrono::milliseconds timeout) {
  // Both sides write first, then read: TCP buffers the marker, so neither waits on the other's read. A failed write
  // or an early end of stream means the peer is gone, which is as good as its marker.
  static constexpr char kStopped = 'S';
  (void)stream.write_all(&kStopped, 1);
  const auto deadline = TcpStream::Clock::now() + timeout;
  char theirs = 0;
  while (stream.read_exact(&theirs, 1, deadline)) {
    if (theirs == kStopped) return true;
  }
  return false;
}

void stop_polling_with_peer(ndk::Adapter& adapter, const TcpStream* stream, std::chrono::milliseconds timeout) {
  adapter.UroceStopPolling();
  if (stream != nullptr) (void)meet_peer(*stream, timeout);
}

}  // namespace uroce::apps
