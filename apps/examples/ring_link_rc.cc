// uroce-example-ring-link-rc: the smallest complete program on uroce's installed API (README.md in this folder
// walks through it). It opens an adapter on a configuration whose two ports are the two ends of an in-process
// DPDK ring link, connects one RC QP on each port to the other, and moves data three ways: a SEND into a posted
// receive, an RDMA WRITE into the peer's memory and an RDMA READ back from it. Every byte is checked.
//
//   uroce-example-ring-link-rc [CONFIG.yaml]
//
// Without CONFIG.yaml it runs on the configuration compiled into the library (share/uroce/default.yaml is a
// copy of it). It needs no NIC, no hugepages and no root. Exit status 0 when every transfer arrived intact.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>

#include "api/ndk.h"  // with `pkg-config --cflags uroce`: <prefix>/include/uroce/api/ndk.h

using namespace uroce;
using namespace uroce::ndk;

namespace {

constexpr uint32_t kMessageLength = 10000;  // more than two 4096-byte path MTUs: the requester segments it
constexpr std::size_t kBufferSize = std::size_t{4} * kMessageLength;
constexpr std::chrono::seconds kPatience{30};  // a ring link delivers in microseconds; this only bounds a bug

// Prints what failed and why; true when the call succeeded.
bool succeeded(NTSTATUS status, const char* what) {
  if (status == STATUS_SUCCESS) return true;
  std::fprintf(stderr, "uroce-example-ring-link-rc: %s failed: %s (0x%08x)\n", what, NdkStatusName(status),
               static_cast<unsigned>(status));
  return false;
}

// One end of the connection: a completion queue, a protection domain, a registered buffer and a QP, all on one
// engine and one port of the adapter.
struct Endpoint {
  Cq* cq = nullptr;
  Pd* pd = nullptr;
  Mr* mr = nullptr;
  Qp* qp = nullptr;
  std::vector<uint8_t> buffer = std::vector<uint8_t>(kBufferSize);
  sockaddr_in address{};  // the port's first IPv4 address, from the configuration

  NdkSge sge(std::size_t offset, uint32_t length) {
    return NdkSge{buffer.data() + offset, length, mr->NdkGetLocalTokenFromMr()};
  }
  [[nodiscard]] uint64_t remote_address(std::size_t offset) const {
    return reinterpret_cast<uint64_t>(buffer.data() + offset);
  }
};

// Creates the endpoint's objects. A null completion callback makes each create finish before it returns.
bool open_endpoint(Adapter& adapter, uint16_t engine, const config::IpAddress& ip, Endpoint& e) {
  const GroupAffinity affinity = adapter.UroceEngineAffinity(engine);  // the CQ's engine runs the QP too
  if (!succeeded(adapter.NdkCreateCq(64, nullptr, nullptr, &affinity, nullptr, nullptr, &e.cq), "NdkCreateCq") ||
      !succeeded(adapter.NdkCreatePd(nullptr, nullptr, &e.pd), "NdkCreatePd") ||
      !succeeded(e.pd->NdkCreateMr(false, nullptr, nullptr, &e.mr), "NdkCreateMr") ||
      !succeeded(e.mr->NdkRegisterMr(e.buffer.data(), e.buffer.size(),
                                     NDK_MR_FLAG_ALLOW_REMOTE_WRITE | NDK_MR_FLAG_ALLOW_REMOTE_READ, nullptr, nullptr),
                 "NdkRegisterMr")) {
    return false;
  }
  // Receive and initiator queues of 16 requests with one SGE each, and no inline data.
  if (!succeeded(e.pd->NdkCreateQp(e.cq, e.cq, &e, 16, 16, 1, 1, 0, nullptr, nullptr, &e.qp), "NdkCreateQp"))
    return false;
  e.address.sin_family = AF_INET;
  std::memcpy(&e.address.sin_addr, ip.bytes.data(), 4);
  return true;
}

// Closes what open_endpoint created, children before parents: each close with a null callback waits.
void close_endpoint(Endpoint& e) {
  if (e.qp != nullptr) (void)e.qp->NdkCloseQp(nullptr, nullptr);
  if (e.mr != nullptr) (void)e.mr->NdkCloseMr(nullptr, nullptr);
  if (e.cq != nullptr) (void)e.cq->NdkCloseCq(nullptr, nullptr);
  if (e.pd != nullptr) (void)e.pd->NdkClosePd(nullptr, nullptr);
}

// Connects `self` to `peer` from the attributes two programs would exchange out of band (here both are at hand):
// the peer's QP number and first PSN, and both addresses. uroce finds the peer's MAC address with ARP.
bool connect_to(Endpoint& self, uint32_t self_psn, Endpoint& peer, uint32_t peer_psn) {
  UroceConnectAttributes attributes;
  attributes.LocalAddress = reinterpret_cast<const sockaddr*>(&self.address);
  attributes.RemoteAddress = reinterpret_cast<const sockaddr*>(&peer.address);
  attributes.RemoteQpNumber = peer.qp->UroceGetQpNumber();
  attributes.RemotePsn = peer_psn;
  attributes.LocalPsn = self_psn;
  return succeeded(self.qp->UroceConnect(attributes, nullptr, nullptr), "UroceConnect");
}

// Waits for the next completion on the endpoint's CQ and checks that it is the request we expect.
bool await_completion(Endpoint& e, NdkOperationType type, uint32_t bytes, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  NdkResultEx result;
  while (e.cq->NdkGetCqResultsEx(&result, 1) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "uroce-example-ring-link-rc: the %s never completed\n", what);
      return false;
    }
    std::this_thread::yield();  // polling is how NDK consumers wait when they do not arm the CQ
  }
  if (!succeeded(result.Status, what)) return false;
  if (result.Type != type || (type == NdkOperationTypeReceive && result.BytesTransferred != bytes)) {
    std::fprintf(stderr, "uroce-example-ring-link-rc: the %s completed as operation %u with %u bytes\n", what,
                 static_cast<unsigned>(result.Type), result.BytesTransferred);
    return false;
  }
  return true;
}

// Fills `length` bytes at `offset` with a pattern that differs per transfer, so a stale or misplaced byte shows.
void fill(Endpoint& e, std::size_t offset, uint32_t length, uint8_t seed) {
  for (uint32_t i = 0; i < length; ++i) e.buffer[offset + i] = static_cast<uint8_t>(seed + i * 7);
}

bool same_bytes(const Endpoint& a, std::size_t a_offset, const Endpoint& b, std::size_t b_offset, const char* what) {
  if (std::memcmp(a.buffer.data() + a_offset, b.buffer.data() + b_offset, kMessageLength) == 0) return true;
  std::fprintf(stderr, "uroce-example-ring-link-rc: the %s delivered different bytes\n", what);
  return false;
}

// The three transfers from `a` to `b`. Offsets in each buffer: [0, L) what a sends, [L, 2L) where b receives
// the SEND, [2L, 3L) where a's WRITE lands in b, [3L, 4L) where a's READ of that lands back in a.
bool move_data(Endpoint& a, Endpoint& b) {
  constexpr std::size_t kSource = 0, kReceived = kMessageLength, kWritten = std::size_t{2} * kMessageLength,
                        kReadBack = std::size_t{3} * kMessageLength;
  // SEND: b posts a receive first (an RC SEND that finds no receive waits for one: RNR), then a sends.
  fill(a, kSource, kMessageLength, 1);
  NdkSge receive = b.sge(kReceived, kMessageLength);
  NdkSge source = a.sge(kSource, kMessageLength);
  if (!succeeded(b.qp->NdkReceive(nullptr, &receive, 1), "NdkReceive") ||
      !succeeded(a.qp->NdkSend(nullptr, &source, 1, 0), "NdkSend") ||
      !await_completion(a, NdkOperationTypeSend, 0, "SEND") ||
      !await_completion(b, NdkOperationTypeReceive, kMessageLength, "receive") ||
      !same_bytes(a, kSource, b, kReceived, "SEND")) {
    return false;
  }
  std::printf("SEND: %u bytes received intact\n", kMessageLength);

  // RDMA WRITE: into b's memory at an address and token b would have told a; b's CPU takes no part.
  fill(a, kSource, kMessageLength, 2);
  if (!succeeded(a.qp->NdkWrite(nullptr, &source, 1, b.remote_address(kWritten), b.mr->NdkGetRemoteTokenFromMr(), 0),
                 "NdkWrite") ||
      !await_completion(a, NdkOperationTypeWrite, 0, "RDMA WRITE") || !same_bytes(a, kSource, b, kWritten, "WRITE")) {
    return false;
  }
  std::printf("RDMA WRITE: %u bytes placed intact\n", kMessageLength);

  // RDMA READ: what the WRITE left in b, back into another part of a's buffer.
  NdkSge sink = a.sge(kReadBack, kMessageLength);
  if (!succeeded(a.qp->NdkRead(nullptr, &sink, 1, b.remote_address(kWritten), b.mr->NdkGetRemoteTokenFromMr(), 0),
                 "NdkRead") ||
      !await_completion(a, NdkOperationTypeRead, 0, "RDMA READ") || !same_bytes(b, kWritten, a, kReadBack, "READ")) {
    return false;
  }
  std::printf("RDMA READ: %u bytes read back intact\n", kMessageLength);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
    std::fprintf(stderr, "usage: uroce-example-ring-link-rc [CONFIG.yaml]\n");
    return 2;
  }
  // The example runs anywhere: without hugepages (DPDK's --no-huge), whatever the file says.
  config::LoadOptions load_options;
  load_options.overrides.push_back({"eal.hugepages", "off"});
  const config::LoadResult loaded = argc == 2 ? config::load_config_file(argv[1], load_options)
                                              : config::load_config(config::embedded_default_yaml(), load_options);
  if (!loaded.config) {
    std::fprintf(stderr, "%s", loaded.describe(argc == 2 ? argv[1] : "embedded default").c_str());
    return 2;
  }
  const config::Config& cfg = *loaded.config;
  if (cfg.ports.size() != 2 || cfg.ports[0].addresses.empty() || cfg.ports[0].addresses[0].is_v6 ||
      cfg.ports[1].addresses.empty() || cfg.ports[1].addresses[0].is_v6) {
    std::fprintf(stderr,
                 "uroce-example-ring-link-rc: the configuration needs two ports joined to each other (e.g. both "
                 "ring:link0), each with an IPv4 address first\n");
    return 2;
  }

  Adapter* adapter = nullptr;
  if (!succeeded(NdkOpenAdapter(cfg, kNdkVersion, &adapter), "NdkOpenAdapter")) return 1;
  // Endpoint a on port 0 and the first engine, b on port 1 and the last (the same one on a one-engine machine).
  Endpoint a, b;
  const auto last_engine = static_cast<uint16_t>(adapter->UroceEngineCount() - 1);
  bool ok = open_endpoint(*adapter, 0, cfg.ports[0].addresses[0], a) &&
            open_endpoint(*adapter, last_engine, cfg.ports[1].addresses[0], b) && connect_to(a, 0x100, b, 0x200) &&
            connect_to(b, 0x200, a, 0x100) && move_data(a, b);
  close_endpoint(a);
  close_endpoint(b);
  NdkCloseAdapter(adapter);  // after every object of the adapter is closed
  std::printf("%s\n", ok ? "all transfers checked" : "FAILED");
  return ok ? 0 : 1;
}
