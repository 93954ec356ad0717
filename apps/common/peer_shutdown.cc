#include "apps/common/peer_shutdown.h"

namespace uroce::apps {

void stop_polling_with_peer(ndk::Adapter& adapter, const TcpStream* stream, std::chrono::milliseconds timeout) {
  adapter.UroceStopPolling();
  if (stream == nullptr) return;
  // Both sides write first, then read: TCP buffers the byte, so neither waits on the other's read. A failed write
  // or an early end of stream means the peer is gone, which is as good as its byte.
  static constexpr char kStopped = 'S';
  (void)stream->write_all(&kStopped, 1);
  char theirs = 0;
  (void)stream->read_exact(&theirs, 1, TcpStream::Clock::now() + timeout);
}

}  // namespace uroce::apps
