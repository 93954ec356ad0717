// An orderly end between two uroce processes: both stop polling before either closes its ports.
#pragma once

#include <chrono>

#include "api/ndk.h"
#include "apps/common/tcp_stream.h"

namespace uroce::apps {

// Stops this adapter's engines (Adapter::UroceStopPolling), then meets the peer on the out-of-band stream: one
// byte each way, or the peer's end of the stream closing, or `timeout`. Two uroce processes joined by net_memif
// thus both stop polling before either closes its end (DPDK 22.11's memif PMD crashes a process that polls while
// its peer disconnects). A peer that takes no part, such as perftest or ibv_rc_pingpong, has closed its socket by
// then, so this returns at once. Close every object on the adapter first; NdkCloseAdapter comes after.
void stop_polling_with_peer(ndk::Adapter& adapter, const TcpStream* stream,
                            std::chrono::milliseconds timeout = std::chrono::seconds(3));

}  // namespace uroce::apps
