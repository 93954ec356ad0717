// An orderly end between two uroce processes: both stop polling before either closes its ports.
#pragma once

#include <chrono>

#include "api/ndk.h"
#include "apps/common/tcp_stream.h"

namespace uroce::apps {

// Stops this adapter's engines (Adapter::UroceStopPolling), then meets the peer on the out-of-band stream: one
// marker each way (meet_peer), or the peer's end of the stream closing, or `timeout`. Two uroce processes joined by
// net_memif thus both stop polling before either closes its end (DPDK 22.11's memif PMD crashes a process that polls
// while its peer disconnects). A peer that takes no part, such as perftest or ibv_rc_pingpong, has closed its socket by
// then, so this returns at once. Close every object on the adapter first; NdkCloseAdapter comes after.
void stop_polling_with_peer(ndk::Adapter& adapter, const TcpStream* stream,
                            std::chrono::milliseconds timeout = std::chrono::seconds(30));

// The meeting alone: writes this side's marker, then reads until the peer's marker, its end of the stream, or
// `timeout`. Whatever the peer sent before its marker and nobody read (perftest's closing "done") is skipped: taking
// its first byte for the marker let one side close its port while the other still polled. Returns whether the
// peer's marker came.
bool meet_peer(const TcpStream& stream, std::chrono::milliseconds timeout);

}  // namespace uroce::apps
