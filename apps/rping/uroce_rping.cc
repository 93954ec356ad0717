// uroce-rping: rdma-core's rping (librdmacm/examples/rping.c) on uroce, built on the public API (api/ndk.h) only.
// It connects through the connection manager (NdkConnect / NdkListen), so a Linux rping in either role is its
// peer, and exercises SEND, RDMA READ and RDMA WRITE in rping's cycle:
//
//   client: SEND {start buffer address, R_Key, size}      server: RDMA READ the client's start buffer
//           (waits for the server's "go ahead" SEND)             SEND "go ahead"
//   client: SEND {its sink buffer address, R_Key, size}   server: RDMA WRITE the data back into the sink
//           (waits for the second "go ahead")                     SEND "go ahead"
//   client: with -V, the sink must equal the start buffer; with -v, prints "ping data: ..."
//
// Options as rping's: -s | -c, -a ADDR (the server's address; a server binds it, default any), -I ADDR (client
// source), -p PORT (7174), -S SIZE (64; rping's range), -C COUNT (0: forever), -v, -V, -d; plus every tool's
// configuration options (apps/common/tool_setup.h) and --timeout SECONDS for each wait (default 30). The info
// message is rping's struct rping_rdma_info: big-endian u64 address, u32 R_Key, u32 size (16 bytes).
//
// --repeat N makes N connections in turn, each with resources of its own as rping's are (QP, CQ, PD, MR, and the
// connector): a client connects, pings -C times and disconnects N times; a server serves N clients one after
// another (a Linux `rping -s -P` server is the client's peer for this). Then the adapter must hold exactly what it
// held before the first connection (Adapter::UroceQueryResources: live objects, transport QPs, memory slots, CM IDs,
// bound endpoints), once the CM's time-wait of the last connection has passed; -d prints the counts.
//
// Exit status 0 only if every ping completed and, with -V, every echo matched (and, with --repeat, nothing was
// left behind).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <endian.h>
#include <getopt.h>

#include "api/ndk.h"
#include "apps/common/cm_connection.h"
#include "apps/common/progress.h"
#include "apps/common/tool_setup.h"

using namespace uroce;
using namespace uroce::ndk;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kTool = "uroce-rping";
constexpr int kMinSize = 27;         // rping's RPING_MIN_BUFSIZE: sizeof "2147483647" + sizeof "rdma-ping-%d: "
constexpr int kMaxSize = 65535;      // RPING_BUFSIZE - 1
constexpr uint32_t kInfoSize = 16;   // struct rping_rdma_info
constexpr uint32_t kSendDepth = 16;  // RPING_SQ_DEPTH

struct Options {
  bool server = false;
  bool client = false;
  std::optional<std::string> address;  // -a
  std::optional<std::string> source;   // -I
  uint16_t port = 7174;
  int size = 64;
  int count = 0;
  bool verbose = false;
  bool validate = false;
  bool debug = false;
  int timeout_s = 30;
  int connect_retries = 0;  // uroce's: retry a refused connect (a server still starting), 100 ms apart
  int repeat = 0;           // uroce's: connections made in turn, then the resource check (0: one, no check)
  std::chrono::seconds progress = apps::default_progress_interval();  // --progress: a line on stderr (0: none)
};

void usage(FILE* out) {
  std::fprintf(out,
               "usage: uroce-rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port] [config options]\n"
               "       uroce-rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port] [config options]\n"
               "  -c / -s        client / server\n"
               "  -a ADDR        server: the address to listen on (default: any); client: the server's\n"
               "  -I ADDR        client: the source address (default: the port's)\n"
               "  -p PORT        the RDMA CM port (default 7174)\n"
               "  -S SIZE        ping data size, %d..%d (default 64)\n"
               "  -C COUNT       pings (default 0: until interrupted)\n"
               "  -v             print the ping data;  -V: validate it;  -d: debug output\n"
               "  --timeout S    give up a wait after S seconds (default 30)\n"
               "  --connect-retries N  client: try a refused connect N more times, 100 ms apart (default 0)\n"
               "  --repeat N     make N connections in turn (a client connects, pings and disconnects N times; a\n"
               "                 server serves N clients), then check that the adapter holds what it held before\n"
               "                 (-d prints its resource counts)\n"
               "%s"
               "  -h, --help\n"
               "%s",
               kMinSize, kMaxSize, apps::kProgressOptionHelp, apps::kConfigOptionsHelp);
}

std::optional<Options> parse(int argc, char** argv) {
  Options o;
  static const option long_options[] = {
      {"timeout", required_argument, nullptr, 't'},  {"connect-retries", required_argument, nullptr, 'r'},
      {"repeat", required_argument, nullptr, 'R'},   {"help", no_argument, nullptr, 'h'},
      {"progress", required_argument, nullptr, 'P'}, {nullptr, 0, nullptr, 0}};
  int c;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): the command line is parsed once, at start-up, before any thread
  while ((c = getopt_long(argc, argv, "a:I:p:S:C:scvVdh", long_options, nullptr)) != -1) {
    std::optional<uint64_t> n;
    switch (c) {
      case 'a':
        o.address = optarg;
        break;
      case 'I':
        o.source = optarg;
        break;
      case 'p':
        if (!(n = apps::parse_number(kTool, "-p", optarg, 1, 65535))) return std::nullopt;
        o.port = static_cast<uint16_t>(*n);
        break;
      case 'S':
        if (!(n = apps::parse_number(kTool, "-S", optarg, kMinSize, kMaxSize))) return std::nullopt;
        o.size = static_cast<int>(*n);
        break;
      case 'C':
        if (!(n = apps::parse_number(kTool, "-C", optarg, 0, INT32_MAX))) return std::nullopt;
        o.count = static_cast<int>(*n);
        break;
      case 's':
        o.server = true;
        break;
      case 'c':
        o.client = true;
        break;
      case 'v':
        o.verbose = true;
        break;
      case 'V':
        o.validate = true;
        break;
      case 'd':
        o.debug = true;
        break;
      case 't':
        if (!(n = apps::parse_number(kTool, "--timeout", optarg, 1, 3600))) return std::nullopt;
        o.timeout_s = static_cast<int>(*n);
        break;
      case 'r':
        if (!(n = apps::parse_number(kTool, "--connect-retries", optarg, 0, 100000))) return std::nullopt;
        o.connect_retries = static_cast<int>(*n);
        break;
      case 'R':
        if (!(n = apps::parse_number(kTool, "--repeat", optarg, 1, 1000000))) return std::nullopt;
        o.repeat = static_cast<int>(*n);
        break;
      case 'P':
        if (!(n = apps::parse_number(kTool, "--progress", optarg, 0, 86400))) return std::nullopt;
        o.progress = std::chrono::seconds(*n);
        break;
      case 'h':
        usage(stdout);
        std::exit(0);  // NOLINT(concurrency-mt-unsafe): before any thread
      default:
        return std::nullopt;
    }
  }
  if (optind != argc || o.server == o.client) {
    std::fprintf(stderr, "%s: give exactly one of -s and -c, and no operands\n", kTool);
    return std::nullopt;
  }
  if (o.client && !o.address) {
    std::fprintf(stderr, "%s: a client needs the server's address (-a)\n", kTool);
    return std::nullopt;
  }
  return o;
}

std::string text(NTSTATUS s) { return NdkStatusName(s); }

// The server's incoming connections, one at a time: a request that comes while another is being served, or after
// the server stopped taking them, is rejected by closing its connector (which also frees it).
class Incoming {
 public:
  static void on_connect(void* context, Connector* c) {
    auto& in = *static_cast<Incoming*>(context);
    {
      const std::lock_guard lock(in.mutex_);
      if (!in.closed_ && in.connector_ == nullptr) {
        in.connector_ = c;
        return;
      }
    }
    (void)c->NdkCloseConnector([](void*) {}, nullptr);  // a callback must not wait for its own close
  }
  // The connection to serve next (waiting for it).
  Connector* next() {
    for (;;) {
      {
        const std::lock_guard lock(mutex_);
        if (connector_ != nullptr) return connector_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  // Its client has gone: the next one may come.
  void served() {
    const std::lock_guard lock(mutex_);
    connector_ = nullptr;
  }
  // No more: rejects a request that came after the last one served, and every later one (before the listener
  // closes, which waits for its connectors).
  void close() {
    Connector* left = nullptr;
    {
      const std::lock_guard lock(mutex_);
      closed_ = true;
      std::swap(left, connector_);
    }
    if (left != nullptr) left->NdkCloseConnector(nullptr, nullptr);
  }

 private:
  std::mutex mutex_;
  Connector* connector_ = nullptr;
  bool closed_ = false;
};

// rping's control block: one QP, one CQ, and the four buffers in one registered region.
class Ping {
 public:
  Ping(Adapter& adapter, const Options& o) : adapter_(adapter), o_(o) {}
  ~Ping() { close(); }

  std::string open() {
    const auto size = static_cast<std::size_t>(o_.size);
    memory_.assign(std::size_t{2} * kInfoSize + 2 * size, 0);
    NTSTATUS s = adapter_.NdkCreateCq(4 * kSendDepth, nullptr, nullptr, nullptr, nullptr, nullptr, &cq_);
    if (s == STATUS_SUCCESS) s = adapter_.NdkCreatePd(nullptr, nullptr, &pd_);
    if (s == STATUS_SUCCESS) s = pd_->NdkCreateMr(false, nullptr, nullptr, &mr_);
    if (s == STATUS_SUCCESS) {
      s = mr_->NdkRegisterMr(memory_.data(), memory_.size(),
                             NDK_MR_FLAG_ALLOW_REMOTE_READ | NDK_MR_FLAG_ALLOW_REMOTE_WRITE, nullptr, nullptr);
    }
    if (s == STATUS_SUCCESS) s = pd_->NdkCreateQp(cq_, cq_, this, 2, kSendDepth, 1, 1, 0, nullptr, nullptr, &qp_);
    if (s != STATUS_SUCCESS) return "creating the QP and its resources failed: " + text(s);
    return {};
  }

  void close() {
    if (qp_ != nullptr) qp_->NdkCloseQp(nullptr, nullptr);
    if (mr_ != nullptr) {
      mr_->NdkDeregisterMr(nullptr, nullptr);
      mr_->NdkCloseMr(nullptr, nullptr);
    }
    if (pd_ != nullptr) pd_->NdkClosePd(nullptr, nullptr);
    if (cq_ != nullptr) cq_->NdkCloseCq(nullptr, nullptr);
    qp_ = nullptr;
    mr_ = nullptr;
    pd_ = nullptr;
    cq_ = nullptr;
  }

  Qp* qp() { return qp_; }
  uint8_t* recv_buf() { return memory_.data(); }
  uint8_t* send_buf() { return memory_.data() + kInfoSize; }
  char* rdma_buf() { return reinterpret_cast<char*>(memory_.data() + std::size_t{2} * kInfoSize); }
  char* start_buf() { return rdma_buf() + o_.size; }
  uint32_t token() { return mr_->NdkGetLocalTokenFromMr(); }
  std::atomic<bool> peer_disconnected{false};
  static void on_disconnect(void* context) { static_cast<Ping*>(context)->peer_disconnected.store(true); }

  bool post_receive() {
    const NdkSge sge{recv_buf(), kInfoSize, token()};
    return qp_->NdkReceive(nullptr, &sge, 1) == STATUS_SUCCESS;
  }
  // rping_format_send + post: the info for `buffer` (or, for the server's "go ahead", whatever is in send_buf).
  bool send_info(const char* buffer) {
    if (buffer != nullptr) {
      const uint64_t address = htobe64(reinterpret_cast<uint64_t>(buffer));
      const uint32_t rkey = htobe32(mr_->NdkGetRemoteTokenFromMr());
      const uint32_t size = htobe32(static_cast<uint32_t>(o_.size));
      std::memcpy(send_buf(), &address, 8);
      std::memcpy(send_buf() + 8, &rkey, 4);
      std::memcpy(send_buf() + 12, &size, 4);
      if (o_.debug) std::printf("RDMA addr %" PRIx64 " rkey %x len %d\n", be64toh(address), be32toh(rkey), o_.size);
    }
    const NdkSge sge{send_buf(), kInfoSize, token()};
    return qp_->NdkSend(nullptr, &sge, 1, 0) == STATUS_SUCCESS;
  }
  bool read(uint32_t length) {
    const NdkSge sge{rdma_buf(), length, token()};
    return qp_->NdkRead(nullptr, &sge, 1, remote_address_, remote_rkey_, 0) == STATUS_SUCCESS;
  }
  bool write(uint32_t length) {
    const NdkSge sge{rdma_buf(), length, token()};
    return qp_->NdkWrite(nullptr, &sge, 1, remote_address_, remote_rkey_, 0) == STATUS_SUCCESS;
  }

  // Waits for the next completion of `type`, consuming send completions on the way; a receive is parsed (as
  // rping's server_recv / client_recv) and its buffer posted again. False on an error completion, on the peer's
  // disconnect, or on timeout (`error` says which; empty for a disconnect).
  bool wait_for(NdkOperationType type, std::string& error) {
    const auto deadline = Clock::now() + std::chrono::seconds(o_.timeout_s);
    for (;;) {
      NdkResultEx r;
      if (cq_->NdkGetCqResultsEx(&r, 1) == 1) {
        if (r.Status != STATUS_SUCCESS) {
          error = "cq completion failed status " + text(r.Status);
          return false;
        }
        if (r.Type == NdkOperationTypeReceive) {
          if (r.BytesTransferred != kInfoSize) {
            error = "Received bogus data, size " + std::to_string(r.BytesTransferred);
            return false;
          }
          uint64_t address;
          uint32_t rkey, length;
          std::memcpy(&address, recv_buf(), 8);
          std::memcpy(&rkey, recv_buf() + 8, 4);
          std::memcpy(&length, recv_buf() + 12, 4);
          remote_address_ = be64toh(address);
          remote_rkey_ = be32toh(rkey);
          remote_length_ = be32toh(length);
          if (o_.debug) {
            std::printf("Received rkey %x addr %" PRIx64 " len %u from peer\n", remote_rkey_, remote_address_,
                        remote_length_);
          }
          if (!post_receive()) {
            error = "post recv error";
            return false;
          }
        }
        if (r.Type == type) return true;
        continue;
      }
      if (peer_disconnected.load()) return false;
      if (Clock::now() > deadline) {
        error = "timed out after " + std::to_string(o_.timeout_s) + " s";
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  [[nodiscard]] uint32_t remote_length() const { return remote_length_; }

 private:
  Adapter& adapter_;
  const Options& o_;
  std::vector<uint8_t> memory_;
  Cq* cq_ = nullptr;
  Pd* pd_ = nullptr;
  Mr* mr_ = nullptr;
  Qp* qp_ = nullptr;
  uint64_t remote_address_ = 0;
  uint32_t remote_rkey_ = 0;
  uint32_t remote_length_ = 0;
};

int fail(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", kTool, what.c_str());
  return 1;
}

// rping_test_server: until the client disconnects.
int serve(Ping& ping, const Options& o) {
  std::string error;
  apps::ProgressReporter progress(kTool, o.progress, "pings served", 0);
  for (uint64_t served = 0;; ++served) {
    progress.update(served, 0);
    if (!ping.wait_for(NdkOperationTypeReceive, error))  // the client's start buffer
      return error.empty() ? 0 : fail("wait for RDMA_READ_ADV: " + error);
    const uint32_t length = std::min<uint32_t>(ping.remote_length(), static_cast<uint32_t>(o.size));
    if (!ping.read(length)) return fail("post send error (RDMA READ)");
    if (!ping.wait_for(NdkOperationTypeRead, error)) return fail("wait for RDMA_READ_COMPLETE: " + error);
    if (o.verbose) std::printf("server ping data: %.*s\n", static_cast<int>(length), ping.rdma_buf());
    if (!ping.send_info(nullptr)) return fail("post send error (go ahead)");
    if (!ping.wait_for(NdkOperationTypeReceive, error))  // the client's sink buffer
      return fail("wait for RDMA_WRITE_ADV: " + (error.empty() ? std::string("disconnected") : error));
    const auto echo = static_cast<uint32_t>(strnlen(ping.rdma_buf(), length) + 1);
    if (!ping.write(std::min(echo, length))) return fail("post send error (RDMA WRITE)");
    if (!ping.wait_for(NdkOperationTypeWrite, error)) return fail("wait for RDMA_WRITE_COMPLETE: " + error);
    if (!ping.send_info(nullptr)) return fail("post send error (go ahead)");
  }
}

// rping_test_client.
int ping_server(Ping& ping, const Options& o) {
  std::string error;
  int start = 65;
  apps::ProgressReporter progress(kTool, o.progress, "pings", 0);
  for (int n = 0; o.count == 0 || n < o.count; ++n) {
    progress.update(static_cast<uint64_t>(n), static_cast<uint64_t>(o.count));
    char* buf = ping.start_buf();
    int i = std::snprintf(buf, static_cast<std::size_t>(o.size), "rdma-ping-%d: ", n);
    for (auto c = static_cast<unsigned char>(start); i < o.size; ++i) {
      buf[i] = static_cast<char>(c);
      if (++c > 122) c = 65;
    }
    if (++start > 122) start = 65;
    buf[o.size - 1] = 0;
    if (!ping.send_info(ping.start_buf())) return fail("post send error");
    if (!ping.wait_for(NdkOperationTypeReceive, error)) return fail("wait for RDMA_WRITE_ADV: " + error);
    if (!ping.send_info(ping.rdma_buf())) return fail("post send error");
    if (!ping.wait_for(NdkOperationTypeReceive, error)) return fail("wait for RDMA_WRITE_COMPLETE: " + error);
    if (o.validate && std::memcmp(ping.start_buf(), ping.rdma_buf(), static_cast<std::size_t>(o.size)) != 0)
      return fail("data mismatch!");
    // Bounded: the server wrote rdma_buf, and may have left no terminating NUL in it (or anywhere after it).
    if (o.verbose)
      std::printf("ping data: %.*s\n", static_cast<int>(strnlen(ping.rdma_buf(), o.size)), ping.rdma_buf());
    std::fflush(stdout);
  }
  return 0;
}

// rping's conn_param: the client asks for responder_resources 1 and initiator_depth 1; the server accepts with
// the device's maximum limits (ours are clamped to what the client offers).
apps::CmConnectParams connect_params(const Options& o, Ping& ping) {
  apps::CmConnectParams p;
  p.inbound_read_limit = o.client ? 1 : 16;
  p.outbound_read_limit = o.client ? 1 : 16;
  p.refused_retries = o.connect_retries;
  p.timeout = std::chrono::seconds(o.timeout_s);
  p.on_disconnect = &Ping::on_disconnect;
  p.disconnect_context = &ping;
  return p;
}

// One connection of the client, with resources of its own: connect (retrying a refusal), ping, disconnect.
int client_once(Adapter& adapter, const Options& o, const sockaddr_storage& source, const sockaddr_storage& server) {
  Ping ping(adapter, o);
  if (const std::string error = ping.open(); !error.empty()) return fail(error);
  if (!ping.post_receive()) return fail("ibv_post_recv failed");
  std::string error;
  Connector* connector = apps::connect_qp(adapter, *ping.qp(), source, server, connect_params(o, ping), error);
  if (connector == nullptr) return fail("connect error: " + error);
  if (o.debug) std::printf("rdma_connect successful\n");
  int status = ping_server(ping, o);
  const NTSTATUS d = apps::disconnect_and_close(connector, std::chrono::seconds(o.timeout_s));
  if (d == STATUS_IO_TIMEOUT && status == 0) {
    // Every ping went through; only the server's answer to the DREQ never came (it may have exited right after
    // sending it, before its last frame left). The connection is gone either way (ndkpi.md §10.5), and rping
    // does not fail on it either.
    std::fprintf(stderr, "uroce-rping: disconnect: %s (the server did not answer; ignored)\n", text(d).c_str());
  } else if (d != STATUS_SUCCESS && status == 0) {
    status = fail("disconnect: " + text(d));
  }
  return status;
}

// One connection of the server, with resources of its own: the next client `incoming` hands over, until it
// disconnects.
int serve_once(Adapter& adapter, const Options& o, Incoming& incoming) {
  Ping ping(adapter, o);
  if (const std::string error = ping.open(); !error.empty()) return fail(error);
  if (!ping.post_receive()) return fail("ibv_post_recv failed");
  Connector* connector = incoming.next();
  const NTSTATUS s = apps::accept_qp(*connector, *ping.qp(), connect_params(o, ping));
  int status = s == STATUS_SUCCESS ? serve(ping, o) : fail("connect error " + text(s));
  incoming.served();
  if (s == STATUS_SUCCESS) {  // a failed accept_qp closed the connector
    const NTSTATUS d = apps::disconnect_and_close(connector, std::chrono::seconds(o.timeout_s));
    if (d != STATUS_SUCCESS && status == 0) status = fail("disconnect: " + text(d));
  }
  return status;
}

std::string describe(const UroceResourceCounts& r) {
  char line[320];
  std::snprintf(line, sizeof line,
                "cq %u pd %u mr %u mw %u srq %u qp %u connector %u listener %u shared-endpoint %u transport-qp %u "
                "memory-slot %u cm-id %u bound-endpoint %u",
                r.Cqs, r.Pds, r.Mrs, r.Mws, r.Srqs, r.Qps, r.Connectors, r.Listeners, r.SharedEndpoints, r.TransportQps,
                r.MemorySlots, r.CmIds, r.BoundEndpoints);
  return line;
}

// --repeat: the adapter must be back where it started. The last connection's CM ID waits out the CM's time-wait
// (1 s) before it goes, so the counts have up to 10 s to come back.
int check_resources(Adapter& adapter, const UroceResourceCounts& start, const Options& o) {
  const auto ended = Clock::now();
  UroceResourceCounts now = adapter.UroceQueryResources();
  if (o.debug) std::printf("resources after the last connection: %s\n", describe(now).c_str());
  while (now != start && Clock::now() < ended + std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    now = adapter.UroceQueryResources();
  }
  const double waited = std::chrono::duration<double>(Clock::now() - ended).count();
  if (o.debug) {
    std::printf("resources at the start: %s\n", describe(start).c_str());
    std::printf("resources at the end:   %s (%.1f s after the last connection)\n", describe(now).c_str(), waited);
  }
  if (now != start) return fail("resources left behind: " + describe(now) + "; at the start: " + describe(start));
  std::printf("%s: %d connections; resources back to the start %.1f s after the last\n", kTool, o.repeat, waited);
  return 0;
}

int run(const Options& o, const apps::ToolConfig& tc, Adapter& adapter) {
  const UroceResourceCounts start = adapter.UroceQueryResources();
  const int connections = std::max(o.repeat, 1);
  int status = 0;
  if (o.client) {
    const auto server = apps::parse_socket_address(*o.address, o.port);
    if (!server) return fail("getaddrinfo failed - invalid IP address '" + *o.address + "'");
    sockaddr_storage source = apps::to_sockaddr(tc.config.ports[tc.port].addresses.front());
    if (o.source) {
      const auto s = apps::parse_socket_address(*o.source, 0);
      if (!s) return fail("invalid source address '" + *o.source + "'");
      source = *s;
    }
    for (int n = 0; n < connections && status == 0; ++n) {
      if (o.debug && o.repeat > 0) std::printf("connection %d of %d\n", n + 1, connections);
      status = client_once(adapter, o, source, *server);
    }
  } else {
    const auto bind_address = apps::parse_socket_address(o.address.value_or("0.0.0.0"), o.port);
    if (!bind_address) return fail("getaddrinfo failed - invalid IP address '" + *o.address + "'");
    Incoming incoming;
    Listener* listener = nullptr;
    if (adapter.NdkCreateListener(&Incoming::on_connect, &incoming, nullptr, nullptr, &listener) != STATUS_SUCCESS)
      return fail("no listener");
    const NTSTATUS l = listener->NdkListen(apps::as_sockaddr(*bind_address), apps::socket_address_length(*bind_address),
                                           nullptr, nullptr);
    if (l != STATUS_SUCCESS) {
      listener->NdkCloseListener(nullptr, nullptr);
      return fail("rdma_listen: " + text(l));
    }
    std::printf("%s: listening on port %u\n", kTool, o.port);
    std::fflush(stdout);
    for (int n = 0; n < connections && status == 0; ++n) {
      if (o.debug && o.repeat > 0) std::printf("connection %d of %d\n", n + 1, connections);
      status = serve_once(adapter, o, incoming);
    }
    incoming.close();
    listener->NdkCloseListener(nullptr, nullptr);
  }
  if (status == 0 && o.repeat > 0) status = check_resources(adapter, start, o);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<apps::ConfigOptions> config_options = apps::take_config_options(argc, argv, kTool);
  if (!config_options) return 2;
  const std::optional<Options> options = parse(argc, argv);
  if (!options) {
    usage(stderr);
    return 2;
  }
  const std::optional<apps::ToolConfig> tool = apps::load_tool_config(*config_options, true, kTool);
  if (!tool) return 2;
  Adapter* adapter = nullptr;
  if (const NTSTATUS s = NdkOpenAdapter(tool->config, kNdkVersion, &adapter); s != STATUS_SUCCESS)
    return fail("NdkOpenAdapter: " + text(s));
  const int status = run(*options, *tool, *adapter);
  NdkCloseAdapter(adapter);
  return status;
}
