// uroce-pingpong: rdma-core's ibv_rc_pingpong on uroce, built on the public API (api/ndk.h) only. It talks to a
// real ibv_rc_pingpong in either role (rocev2.md §8.1).
//
//   uroce-pingpong [options]          server: waits for an ibv_rc_pingpong client on TCP
//   uroce-pingpong [options] HOST     client: connects to an ibv_rc_pingpong server at HOST
//
// Compatible with ibv_rc_pingpong (rdma-core v44, Debian 12's ibverbs-utils):
//   * Out-of-band exchange on TCP (default port 18515): the client sends its 52-byte "%04x:%06x:%06x:%s"
//     (LID:QPN:PSN:GID, NUL included), the server reads it, connects its QP, answers with its own 52 bytes, the
//     client answers "done\0" and then connects. The GID is the RoCEv2 form of uroce's address (rocev2.md
//     §1.5), LID 0, PSN random 24-bit.
//   * QP attributes as ibv_rc_pingpong sets them: PMTU from -m (default 1024), timeout 14, retry_cnt 7,
//     rnr_retry 7, min_rnr_timer 12, max_rd_atomic 1, max_dest_rd_atomic 1, traffic class 0. IP TTL 64:
//     ibv_rc_pingpong asks for hop limit 1, but the kernel replaces the AV's hop limit with the route's while it
//     resolves the destination MAC (ib_resolve_unicast_gid_dmac), so rxe sends TTL 64; so do we.
//   * The ping-pong: rx_depth (-r, default 500) receives of -s bytes are posted up front and re-posted when one
//     or fewer remain; the client SENDs first; a side posts its next SEND only once both its previous SEND and
//     a receive have completed; both sides stop after -n SENDs and -n receives. The server sends from the
//     buffer it receives into, so it echoes the client's message, like ibv_rc_pingpong.
//   * Data check (-c / --chk): the client zeroes the first byte of every page of its (otherwise 0x7b) buffer
//     before sending; the server checks those bytes. ibv_rc_pingpong only prints "invalid data in page N" once
//     at the end and exits 0 anyway; this tool checks every received message and fails instead:
//       - every receive completion must carry exactly -s bytes;
//       - client: every reply must equal, byte for byte, the message it answers (the peer echoes); with
//         --pattern each message carries a different pattern (page-start bytes still zero under -c, so an
//         ibv_rc_pingpong -c server stays happy), which makes that check catch stale or misplaced data;
//       - server with --strict: every byte except the page starts must be 0x7b (what ibv_rc_pingpong sends).
//
// uroce side: the configuration's port (apps/common/tool_setup.h: --config, --device, --ip, ...), one QP on the
// first engine. The TCP socket is an ordinary kernel socket in the caller's network namespace, so the TCP
// address (HOST, or --bind for the server) and the RoCE address (--ip) can differ.
//
// Exit status 0 only if every iteration completed successfully and every check passed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <getopt.h>

#include "api/ndk.h"
#include "apps/common/peer_shutdown.h"
#include "apps/common/progress.h"
#include "apps/common/tcp_stream.h"
#include "apps/common/tool_setup.h"

using namespace uroce;
using namespace uroce::ndk;
using uroce::apps::TcpStream;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kTool = "uroce-pingpong";
constexpr uintptr_t kRecvWrid = 1;       // ibv_rc_pingpong's PINGPONG_RECV_WRID
constexpr uintptr_t kSendWrid = 2;       // PINGPONG_SEND_WRID
constexpr std::size_t kPageSize = 4096;  // what ibv_rc_pingpong's sysconf(_SC_PAGESIZE) gives on x86-64
constexpr uint8_t kFill = 0x7b;          // ibv_rc_pingpong's memset(ctx->buf, 0x7b, size)
constexpr std::size_t kMessageSize = sizeof "0000:000000:000000:00000000000000000000000000000000";  // 52

struct Options {
  bool help = false;                // -h: print the usage, run nothing
  std::optional<std::string> host;  // client when set
  unsigned tcp_port = 18515;
  uint32_t size = 4096;
  uint32_t mtu = 1024;
  uint32_t rx_depth = 500;
  uint32_t iters = 1000;
  bool check = false;
  std::string bind;  // server: TCP address to listen on (default: any)
  bool pattern = false;
  bool strict = false;
  unsigned hop_limit = 64;
  unsigned timeout_s = 120;
  unsigned linger_ms = 1000;
  int rnr_delay_ms = -1;      // >= 0: post the receives this long after connecting (forces RNR NAKs)
  unsigned ack_timeout = 14;  // ibv_rc_pingpong's timeout and retry_cnt, overridable for slow peers
  unsigned retry_count = 7;
  std::chrono::seconds progress = apps::default_progress_interval();  // --progress: a line on stderr (0: none)
};

void usage(FILE* out) {
  std::fprintf(out,
               "Usage:\n"
               "  %s [options]          start a server and wait for connection\n"
               "  %s [options] <host>   connect to server at <host>\n\n"
               "ibv_rc_pingpong options:\n"
               "  -p, --port=<port>      listen on/connect to port <port> (default 18515)\n"
               "  -s, --size=<size>      size of message to exchange (default 4096)\n"
               "  -m, --mtu=<size>       path MTU (default 1024)\n"
               "  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)\n"
               "  -n, --iters=<iters>    number of exchanges (default 1000)\n"
               "  -c, --chk              validate received buffer\n"
               "  -d, -i, -l, -g, -e     accepted and ignored (device, IB port, SL, GID index, events)\n\n"
               "uroce options:\n"
               "  --bind=<addr>          server: TCP address to listen on (default any)\n"
               "  --pattern              client: a different pattern in every message (checked in the echo)\n"
               "  --strict               server: every byte but the page starts must be 0x%02x\n"
               "  --hop-limit=<n>        IP TTL (default 64, what a kernel verbs peer puts on the wire)\n"
               "  --timeout=<s>          give up after this long without progress (default 120)\n"
               "  --linger=<ms>          keep the QP up this long after the last completion (default 1000)\n"
               "  --rnr-delay=<ms>       post the receives only this long after connecting, so the peer's first\n"
               "                         SEND meets an empty receive queue (RNR NAK)\n"
               "  --ack-timeout=<n>      local ACK timeout 4.096 us * 2^n (default 14, as ibv_rc_pingpong)\n"
               "  --retry-count=<n>      transport retries (default 7, as ibv_rc_pingpong)\n"
               "%s"
               "  -h, --help\n\n"
               "%s",
               kTool, kTool, kFill, apps::kProgressOptionHelp, apps::kConfigOptionsHelp);
}

std::optional<uint64_t> number(const char* option, const char* text, uint64_t min, uint64_t max) {
  return apps::parse_number(kTool, option, text, min, max);
}

std::optional<Options> parse_options(int argc, char** argv) {
  enum { kBind = 1000, kPattern, kStrict, kHop, kTimeout, kLinger, kRnrDelay, kAckTimeout, kRetryCount, kProgress };
  static const option kLongOptions[] = {{"port", 1, nullptr, 'p'},
                                        {"ib-dev", 1, nullptr, 'd'},
                                        {"ib-port", 1, nullptr, 'i'},
                                        {"size", 1, nullptr, 's'},
                                        {"mtu", 1, nullptr, 'm'},
                                        {"rx-depth", 1, nullptr, 'r'},
                                        {"iters", 1, nullptr, 'n'},
                                        {"sl", 1, nullptr, 'l'},
                                        {"events", 0, nullptr, 'e'},
                                        {"gid-idx", 1, nullptr, 'g'},
                                        {"chk", 0, nullptr, 'c'},
                                        {"bind", 1, nullptr, kBind},
                                        {"pattern", 0, nullptr, kPattern},
                                        {"strict", 0, nullptr, kStrict},
                                        {"hop-limit", 1, nullptr, kHop},
                                        {"timeout", 1, nullptr, kTimeout},
                                        {"linger", 1, nullptr, kLinger},
                                        {"help", 0, nullptr, 'h'},
                                        {"rnr-delay", 1, nullptr, kRnrDelay},
                                        {"ack-timeout", 1, nullptr, kAckTimeout},
                                        {"retry-count", 1, nullptr, kRetryCount},
                                        {"progress", 1, nullptr, kProgress},
                                        {nullptr, 0, nullptr, 0}};
  Options o;
  for (;;) {
    // NOLINTNEXTLINE(concurrency-mt-unsafe): the command line is parsed once, at start-up, before any thread
    const int c = getopt_long(argc, argv, "p:d:i:s:m:r:n:l:eg:ch", kLongOptions, nullptr);
    if (c == -1) break;
    std::optional<uint64_t> v;
    // Each case either sets its option or, with v empty after a number() failure, ends the parse.
    switch (c) {
      case 'p':
        if ((v = number("-p", optarg, 1, 65535))) o.tcp_port = static_cast<unsigned>(*v);
        break;
      case 'd':
      case 'i':
      case 'l':
      case 'g':
      case 'e':
        continue;
      case 's':
        if ((v = number("-s", optarg, 1, 1u << 30))) o.size = static_cast<uint32_t>(*v);
        break;
      case 'm':
        if ((v = number("-m", optarg, 256, 4096))) o.mtu = static_cast<uint32_t>(*v);
        if (v && (o.mtu & (o.mtu - 1)) != 0) {
          std::fprintf(stderr, "%s: -m: the path MTU must be 256, 512, 1024, 2048 or 4096\n", kTool);
          return std::nullopt;
        }
        break;
      case 'r':
        if ((v = number("-r", optarg, 1, 4096))) o.rx_depth = static_cast<uint32_t>(*v);
        break;
      case 'n':
        if ((v = number("-n", optarg, 1, UINT32_MAX))) o.iters = static_cast<uint32_t>(*v);
        break;
      case 'c':
        o.check = true;
        continue;
      case kBind:
        o.bind = optarg;
        continue;
      case kPattern:
        o.pattern = true;
        continue;
      case kStrict:
        o.strict = true;
        continue;
      case kHop:
        if ((v = number("--hop-limit", optarg, 1, 255))) o.hop_limit = static_cast<unsigned>(*v);
        break;
      case kTimeout:
        if ((v = number("--timeout", optarg, 1, 86400))) o.timeout_s = static_cast<unsigned>(*v);
        break;
      case kLinger:
        if ((v = number("--linger", optarg, 0, 600000))) o.linger_ms = static_cast<unsigned>(*v);
        break;
      case kRnrDelay:
        if ((v = number("--rnr-delay", optarg, 0, 600000))) o.rnr_delay_ms = static_cast<int>(*v);
        break;
      case kAckTimeout:
        if ((v = number("--ack-timeout", optarg, 0, 31))) o.ack_timeout = static_cast<unsigned>(*v);
        break;
      case kRetryCount:
        if ((v = number("--retry-count", optarg, 0, 7))) o.retry_count = static_cast<unsigned>(*v);
        break;
      case kProgress:
        if ((v = number("--progress", optarg, 0, 86400))) o.progress = std::chrono::seconds(*v);
        break;
      case 'h':
        o.help = true;
        return o;
      default:
        return std::nullopt;
    }
    if (!v) return std::nullopt;
  }
  if (optind == argc - 1) {
    o.host = argv[optind];
  } else if (optind < argc) {
    std::fprintf(stderr, "%s: one host at most, got '%s' and more\n", kTool, argv[optind]);
    return std::nullopt;
  }
  return o;
}

// --- the ibv_rc_pingpong exchange ----------------------------------------------------------------------------

struct Dest {
  uint32_t lid = 0;
  uint32_t qpn = 0;
  uint32_t psn = 0;
  std::array<uint8_t, 16> gid{};
};

// 32 lowercase hex digits, the GID bytes in wire order (pingpong.c gid_to_wire_gid).
std::string format_dest(const Dest& d) {
  char msg[kMessageSize];
  char gid[33];
  for (std::size_t i = 0; i < 16; ++i) std::snprintf(gid + 2 * i, 3, "%02x", d.gid[i]);
  std::snprintf(msg, sizeof msg, "%04x:%06x:%06x:%s", d.lid, d.qpn, d.psn, gid);
  return std::string(msg, sizeof msg);  // the whole buffer, NUL included
}

std::optional<Dest> parse_dest(char (&msg)[kMessageSize]) {
  msg[kMessageSize - 1] = '\0';
  char gid[33] = {};
  unsigned lid = 0, qpn = 0, psn = 0;
  if (std::sscanf(msg, "%x:%x:%x:%32s", &lid, &qpn, &psn, gid) != 4 || std::strlen(gid) != 32) return std::nullopt;
  Dest d;
  d.lid = lid;
  d.qpn = qpn & 0xFFFFFF;
  d.psn = psn & 0xFFFFFF;
  for (std::size_t i = 0; i < 16; ++i) {
    const char pair[3] = {gid[2 * i], gid[2 * i + 1], 0};
    char* end = nullptr;
    d.gid[i] = static_cast<uint8_t>(std::strtoul(pair, &end, 16));
    if (end != pair + 2) return std::nullopt;
  }
  return d;
}

std::string gid_text(const std::array<uint8_t, 16>& g) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, g.data(), buf, sizeof buf);
  return buf;
}

// --- the uroce QP --------------------------------------------------------------------------------------------

// One RC QP with one CQ and one registered buffer of two halves: the client sends from `tx` and receives into
// `rx`; the server receives into `rx` and sends from it (the echo). Every receive is posted at the same
// address, as ibv_rc_pingpong does.
class Endpoint {
 public:
  ~Endpoint() { close(); }

  std::string open(Adapter& adapter, uint32_t size, uint32_t rx_depth) {
    size_ = size;
    try {
      memory_.assign(2 * static_cast<std::size_t>(size) + 64, kFill);
    } catch (const std::bad_alloc&) {
      return "cannot allocate " + std::to_string(2 * std::size_t{size} + 64) + " bytes for -s " + std::to_string(size);
    }
    const GroupAffinity affinity = adapter.UroceEngineAffinity(0);
    NTSTATUS s = adapter.NdkCreateCq(rx_depth + 16, nullptr, nullptr, &affinity, nullptr, nullptr, &cq_);
    if (s == STATUS_SUCCESS) s = adapter.NdkCreatePd(nullptr, nullptr, &pd_);
    if (s == STATUS_SUCCESS) s = pd_->NdkCreateMr(false, nullptr, nullptr, &mr_);
    if (s == STATUS_SUCCESS)
      s = mr_->NdkRegisterMr(memory_.data(), memory_.size(), NDK_MR_FLAG_ALLOW_LOCAL_WRITE, nullptr, nullptr);
    if (s == STATUS_SUCCESS) s = pd_->NdkCreateQp(cq_, cq_, this, rx_depth, 16, 1, 1, 0, nullptr, nullptr, &qp_);
    if (s != STATUS_SUCCESS) return std::string("creating the QP and its resources failed: ") + status_text(s);
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

  Qp& qp() { return *qp_; }
  uint8_t* rx() { return memory_.data(); }
  uint8_t* tx() { return memory_.data() + size_ + 32; }

  // Posts up to n receives; returns how many were posted.
  uint32_t post_receives(uint32_t n) {
    const NdkSge sge{rx(), size_, mr_->NdkGetLocalTokenFromMr()};
    uint32_t i = 0;
    while (i < n && qp_->NdkReceive(reinterpret_cast<void*>(kRecvWrid), &sge, 1) == STATUS_SUCCESS) ++i;
    return i;
  }
  bool post_send(const uint8_t* from) {
    const NdkSge sge{const_cast<uint8_t*>(from), size_, mr_->NdkGetLocalTokenFromMr()};
    return qp_->NdkSend(reinterpret_cast<void*>(kSendWrid), &sge, 1, 0) == STATUS_SUCCESS;
  }
  std::optional<NdkResult> poll() {
    NdkResult r;
    if (cq_->NdkGetCqResults(&r, 1) == 0) return std::nullopt;
    return r;
  }

  static std::string status_text(NTSTATUS s) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08x", static_cast<unsigned>(s));
    return std::string(NdkStatusName(s)) + " (" + hex + ")";
  }

 private:
  uint32_t size_ = 0;
  std::vector<uint8_t> memory_;
  Cq* cq_ = nullptr;
  Pd* pd_ = nullptr;
  Mr* mr_ = nullptr;
  Qp* qp_ = nullptr;
};

// The message a client sends in iteration `iter` (0-based).
void fill_message(uint8_t* p, uint32_t size, uint32_t iter, const Options& o) {
  if (o.pattern) {
    for (uint32_t i = 0; i < size; ++i) p[i] = static_cast<uint8_t>((i * 131u + iter * 7u + 1u + (i >> 9)) | 1u);
  } else {
    std::memset(p, kFill, size);
  }
  // ibv_rc_pingpong -c: buf[i] = i / page_size % sizeof(char), i.e. 0, at every page start.
  if (o.check)
    for (uint32_t i = 0; i < size; i += kPageSize) p[i] = 0;
}

int fail(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", kTool, what.c_str());
  return 1;
}

// Checks a received message; returns the number of errors found (each printed).
int check_received(const Options& o, bool client, Endpoint& ep, const NdkResult& c, uint32_t rcnt) {
  int errors = 0;
  if (c.BytesTransferred != o.size) {
    std::fprintf(stderr, "receive %u: %u bytes, expected %u\n", rcnt, c.BytesTransferred, o.size);
    ++errors;
  }
  const uint8_t* got = ep.rx();
  if (client) {
    // The server echoes the message this reply answers: the last one we sent.
    if (std::memcmp(got, ep.tx(), o.size) != 0) {
      uint32_t at = 0;
      while (at < o.size && got[at] == ep.tx()[at]) ++at;
      std::fprintf(stderr, "receive %u: reply differs from the message sent at byte %u (0x%02x, expected 0x%02x)\n",
                   rcnt, at, got[at], ep.tx()[at]);
      ++errors;
    }
    return errors;
  }
  if (o.check) {
    for (uint32_t i = 0; i < o.size; i += kPageSize) {
      if (got[i] != 0) {
        std::fprintf(stderr, "receive %u: invalid data in page %u\n", rcnt, static_cast<unsigned>(i / kPageSize));
        ++errors;
      }
    }
  }
  if (o.strict) {
    for (uint32_t i = 0; i < o.size; ++i) {
      if ((!o.check || i % kPageSize != 0) && got[i] != kFill) {
        std::fprintf(stderr, "receive %u: byte %u is 0x%02x, expected 0x%02x\n", rcnt, i, got[i], kFill);
        ++errors;
        break;
      }
    }
  }
  return errors;
}

int run(const Options& o, const apps::ToolConfig& tc, Adapter& adapter) {
  const bool client = o.host.has_value();
  const config::IpAddress& my_ip = tc.config.ports[tc.port].addresses.front();
  Endpoint ep;
  if (const std::string error = ep.open(adapter, o.size, o.rx_depth); !error.empty()) return fail(error);

  // Receives first, as ibv_rc_pingpong does before the exchange (unless --rnr-delay).
  uint32_t routs = 0;
  auto post_initial_receives = [&]() -> bool {
    routs = ep.post_receives(o.rx_depth);
    return routs == o.rx_depth;
  };
  if (o.rnr_delay_ms < 0 && !post_initial_receives())
    return fail("couldn't post receive (" + std::to_string(routs) + ")");

  Dest me;
  me.qpn = ep.qp().UroceGetQpNumber();
  me.psn = std::random_device{}() & 0xFFFFFF;
  me.gid = apps::gid_of(my_ip);
  std::printf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", me.lid, me.qpn, me.psn,
              gid_text(me.gid).c_str());

  // ibv_rc_pingpong's pp_connect_ctx.
  const sockaddr_storage local = apps::to_sockaddr(my_ip);
  auto connect_qp = [&](const Dest& rem) -> NTSTATUS {
    const sockaddr_storage remote = apps::sockaddr_of_gid(rem.gid);
    UroceConnectAttributes a;
    a.LocalAddress = reinterpret_cast<const sockaddr*>(&local);
    a.RemoteAddress = reinterpret_cast<const sockaddr*>(&remote);
    a.RemoteQpNumber = rem.qpn;
    a.RemotePsn = rem.psn;
    a.LocalPsn = me.psn;
    a.PathMtu = o.mtu;
    a.InboundReadLimit = 1;
    a.OutboundReadLimit = 1;
    a.AckTimeout = static_cast<uint8_t>(o.ack_timeout);
    a.RetryCount = static_cast<uint8_t>(o.retry_count);
    a.RnrRetry = 7;
    a.MinRnrTimer = 12;
    a.HopLimit = static_cast<uint8_t>(o.hop_limit);
    return ep.qp().UroceConnect(a, nullptr, nullptr);
  };

  const auto exchange_deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  const std::string my_msg = format_dest(me);
  char msg[kMessageSize];
  std::optional<Dest> rem;
  std::string error;
  // Kept open to the end, where two uroce-pingpongs meet before closing (stop_polling_with_peer); ibv_rc_pingpong
  // closes its end right after the exchange.
  std::optional<TcpStream> tcp;
  if (client) {
    tcp = TcpStream::connect(*o.host, o.tcp_port, exchange_deadline, error);
    if (!tcp) return fail(error);
    const bool ok = tcp->write_all(my_msg.data(), my_msg.size()) && tcp->read_exact(msg, sizeof msg, exchange_deadline);
    if (!ok) return fail("couldn't read/write remote address");
    if (!(rem = parse_dest(msg))) return fail(std::string("malformed remote address '") + msg + "'");
    if (!tcp->write_all("done", sizeof "done")) return fail("couldn't send \"done\"");
  } else {
    tcp = TcpStream::accept_one(
        o.bind, o.tcp_port, exchange_deadline,
        [&] { std::printf("  listening on TCP %s:%u\n", o.bind.empty() ? "*" : o.bind.c_str(), o.tcp_port); }, error);
    if (!tcp) return fail(error);
    if (!tcp->read_exact(msg, sizeof msg, exchange_deadline)) return fail("couldn't read remote address");
    if (!(rem = parse_dest(msg))) return fail(std::string("malformed remote address '") + msg + "'");
    // The server connects before it answers (pp_server_exch_dest).
    if (const NTSTATUS s = connect_qp(*rem); s != STATUS_SUCCESS)
      return fail("couldn't connect to remote QP: " + Endpoint::status_text(s));
    char done[sizeof "done"];
    if (!tcp->write_all(my_msg.data(), my_msg.size()) || !tcp->read_exact(done, sizeof done, exchange_deadline) ||
        std::memcmp(done, "done", sizeof done) != 0)
      return fail("couldn't send/recv local address");
  }
  std::printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", rem->lid, rem->qpn, rem->psn,
              gid_text(rem->gid).c_str());
  if (client) {
    if (const NTSTATUS s = connect_qp(*rem); s != STATUS_SUCCESS)
      return fail("couldn't connect to remote QP: " + Endpoint::status_text(s));
  }
  // The client sends before its delayed receives exist: the reply meets an empty queue too.
  std::optional<Clock::time_point> receives_due;
  if (o.rnr_delay_ms >= 0) receives_due = Clock::now() + std::chrono::milliseconds(o.rnr_delay_ms);

  // The ping-pong (rc_pingpong.c's main loop and parse_single_wc).
  uintptr_t pending = kRecvWrid;
  uint32_t scnt = 0, rcnt = 0, sent_iter = 0;
  int data_errors = 0, other_errors = 0;
  if (client) {
    fill_message(ep.tx(), o.size, sent_iter, o);
    if (!ep.post_send(ep.tx())) return fail("couldn't post send");
    ++sent_iter;
    pending |= kSendWrid;
  }
  const auto start = Clock::now();
  auto last_progress = start;
  apps::ProgressReporter progress(kTool, o.progress, "iterations", 2 * uint64_t{o.size}, stderr, start);
  while ((rcnt < o.iters || scnt < o.iters) && other_errors == 0) {
    progress.update(std::min(scnt, rcnt), o.iters);  // an iteration: one message each way
    if (receives_due && Clock::now() >= *receives_due) {
      receives_due.reset();
      if (!post_initial_receives()) {
        std::fprintf(stderr, "Couldn't post receive (%u)\n", routs);
        ++other_errors;
        break;
      }
      last_progress = Clock::now();
    }
    const std::optional<NdkResult> c = ep.poll();
    if (!c) {
      if (Clock::now() - last_progress > std::chrono::seconds(o.timeout_s)) {
        std::fprintf(stderr, "%s: no completion for %u s (sent %u, received %u of %u)\n", kTool, o.timeout_s, scnt,
                     rcnt, o.iters);
        ++other_errors;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      continue;
    }
    last_progress = Clock::now();
    const auto wrid = reinterpret_cast<uintptr_t>(c->RequestContext);
    if (c->Status != STATUS_SUCCESS) {
      std::fprintf(stderr, "Failed status %s for wr_id %d\n", Endpoint::status_text(c->Status).c_str(),
                   static_cast<int>(wrid));
      ++other_errors;
      break;
    }
    if (wrid == kSendWrid) {
      ++scnt;
    } else {
      if (--routs <= 1) {
        routs += ep.post_receives(o.rx_depth - routs);
        if (routs < o.rx_depth) {
          std::fprintf(stderr, "Couldn't post receive (%u)\n", routs);
          ++other_errors;
          break;
        }
      }
      ++rcnt;
      // Checks on the message just received, before it is echoed or overwritten.
      data_errors += check_received(o, client, ep, *c, rcnt);
    }
    pending &= ~wrid;
    if (scnt < o.iters && pending == 0) {
      const uint8_t* from = ep.rx();  // server: the echo
      if (client) {
        fill_message(ep.tx(), o.size, sent_iter, o);
        from = ep.tx();
      }
      if (!ep.post_send(from)) {
        std::fprintf(stderr, "Couldn't post send\n");
        ++other_errors;
        break;
      }
      ++sent_iter;
      pending = kRecvWrid | kSendWrid;
    }
  }
  const double usec = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  if (other_errors == 0) {
    const long long bytes = static_cast<long long>(o.size) * o.iters * 2;
    std::printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1e6,
                static_cast<double>(bytes) * 8. / usec);
    std::printf("%u iters in %.2f seconds = %.2f usec/iter\n", o.iters, usec / 1e6, usec / o.iters);
  }
  // ibv_rc_pingpong's end-of-run check (server side, page starts).
  if (!client && o.check && other_errors == 0) {
    for (uint32_t i = 0; i < o.size; i += kPageSize) {
      if (ep.rx()[i] != 0) std::printf("invalid data in page %u\n", static_cast<unsigned>(i / kPageSize));
    }
  }

  // Keep answering for a moment: the peer may still wait for our ACK of its last SEND.
  std::this_thread::sleep_for(std::chrono::milliseconds(o.linger_ms));
  ep.close();
  apps::stop_polling_with_peer(adapter, &*tcp);
  const bool passed = other_errors == 0 && data_errors == 0;
  std::printf("%s %s: size %u mtu %u iters %u: sent %u received %u, %d data errors: %s\n", kTool,
              client ? "client" : "server", o.size, o.mtu, o.iters, scnt, rcnt, data_errors, passed ? "ok" : "FAILED");
  return passed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<apps::ConfigOptions> config_options = apps::take_config_options(argc, argv, kTool);
  if (!config_options) return 2;
  const std::optional<Options> options = parse_options(argc, argv);
  if (!options) {
    usage(stderr);
    return 2;
  }
  const Options& o = *options;
  if (o.help) {
    usage(stdout);
    return 0;
  }
  const std::optional<apps::ToolConfig> tc = apps::load_tool_config(*config_options, true, kTool);
  if (!tc) return 2;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::printf("%s %s: size %u, mtu %u, iters %u, rx-depth %u%s%s%s, timeout %u, retry %u%s\n", kTool,
              o.host ? "client" : "server", o.size, o.mtu, o.iters, o.rx_depth, o.check ? ", chk" : "",
              o.pattern ? ", pattern" : "", o.strict ? ", strict" : "", o.ack_timeout, o.retry_count,
              tc->config.faults.enabled() ? ", with fault injection" : "");
  if (o.rnr_delay_ms >= 0) std::printf("  receives posted %d ms late\n", o.rnr_delay_ms);

  Adapter* adapter = nullptr;
  if (const NTSTATUS s = NdkOpenAdapter(tc->config, kNdkVersion, &adapter); s != STATUS_SUCCESS)
    return fail("opening the adapter failed: " + Endpoint::status_text(s));
  const int status = run(o, *tc, *adapter);
  NdkCloseAdapter(adapter);
  return status;
}
