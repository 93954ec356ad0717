// rc_pingpong: uroce's counterpart of rdma-core's ibv_rc_pingpong, for on-the-wire interop
// tests against Linux Soft-RoCE (rdma_rxe) or any verbs peer (shared/ref/rocev2.md §8.1).
//
//   rc_pingpong [options]          server: waits for an ibv_rc_pingpong client on TCP
//   rc_pingpong [options] HOST     client: connects to an ibv_rc_pingpong server at HOST
//
// Compatible with ibv_rc_pingpong (rdma-core v44, Debian 12's ibverbs-utils) in both roles:
//   * Out-of-band exchange on TCP (default port 18515): the client sends its 52-byte
//     "%04x:%06x:%06x:%s" (LID:QPN:PSN:GID, NUL included), the server reads it, moves its QP
//     to RTS, answers with its own 52 bytes, the client answers "done\0" and then connects.
//     The GID is the IPv4-mapped form of uroce's own address (rocev2.md §1.5), LID 0, PSN
//     random 24-bit.
//   * QP attributes as ibv_rc_pingpong sets them: PMTU from -m (default 1024), timeout 14,
//     retry_cnt 7, rnr_retry 7, min_rnr_timer 12, max_rd_atomic 1, max_dest_rd_atomic 1,
//     traffic class 0, QP access flags 0, buffer registered LOCAL_WRITE. IP TTL 64: ibv_rc_pingpong
//     asks for hop limit 1, but the kernel replaces the AV's hop limit with the route's while it
//     resolves the destination MAC (ib_resolve_unicast_gid_dmac), so rxe sends TTL 64; so do we.
//   * The ping-pong: rx_depth (-r, default 500) receives of -s bytes are posted up front and
//     re-posted when one or fewer remain; the client SENDs first; a side posts its next SEND
//     only once both its previous SEND and a receive have completed; both sides stop after
//     -n SENDs and -n receives. The server sends from the buffer it receives into, so it
//     echoes the client's message, like ibv_rc_pingpong.
//   * Data check (-c / --chk, as in ibv_rc_pingpong): the client zeroes the first byte of
//     every page of its (otherwise 0x7b) buffer before sending; the server checks those bytes.
//     ibv_rc_pingpong only prints "invalid data in page N" once at the end and exits 0 anyway;
//     this tool checks every received message and fails instead. Checks beyond that:
//       - every receive completion must carry exactly -s bytes;
//       - client: every reply must equal, byte for byte, the message it answers (the peer
//         echoes); with --pattern each message carries a different pattern (page-start bytes
//         still zero under -c, so an ibv_rc_pingpong -c server stays happy), which makes that
//         check catch stale or misplaced data;
//       - server with --strict: every byte except the page starts must be 0x7b (what an
//         ibv_rc_pingpong client sends).
//
// uroce side: one engine, one port on a DPDK vdev (default net_af_packet on --iface), the
// address given by --ip (uroce answers ARP for it itself; the Linux interface has none).
// The TCP socket is an ordinary kernel socket in the caller's network namespace, so the TCP
// address (HOST, or --bind for the server) and the RoCE address (--ip) can differ.
//
// Exit status 0 only if every iteration completed successfully and every check passed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config/config.h"
#include "dataplane/counters.h"
#include "dataplane/dataplane.h"
#include "dataplane/rc_transport.h"
#include "proto/packet_builder.h"

using namespace uroce;
using namespace uroce::dataplane;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kRecvWrid = 1;        // ibv_rc_pingpong's PINGPONG_RECV_WRID
constexpr uint64_t kSendWrid = 2;        // PINGPONG_SEND_WRID
constexpr std::size_t kPageSize = 4096;  // what ibv_rc_pingpong's sysconf(_SC_PAGESIZE) gives on x86-64
constexpr uint8_t kFill = 0x7b;          // ibv_rc_pingpong's memset(ctx->buf, 0x7b, size)
constexpr std::size_t kMessageSize = sizeof "0000:000000:000000:00000000000000000000000000000000";  // 52

struct Options {
  std::optional<std::string> host;  // client when set
  unsigned tcp_port = 18515;
  uint32_t size = 4096;
  uint32_t mtu = 1024;
  uint32_t rx_depth = 500;
  uint32_t iters = 1000;
  bool check = false;
  // uroce side
  std::string iface = "uroce0";
  std::string device;  // full vdev string; default net_af_packet0 on --iface
  std::string ip = "198.18.0.100/24";
  std::string bind;  // server: TCP address to listen on (default: any)
  std::string config_file;
  std::string pcapng;
  unsigned lcore = 0;
  bool pattern = false;
  bool strict = false;
  unsigned hop_limit = 64;
  unsigned timeout_s = 120;
  unsigned linger_ms = 1000;
  // Test knobs beyond ibv_rc_pingpong (they change uroce's behaviour, not the wire format):
  config::FaultConfig faults;  // uroce's receive-path fault injection (loss, reorder, ...)
  int rnr_delay_ms = -1;       // >= 0: post the receives this long after connecting (forces RNR NAKs)
  unsigned ack_timeout = 14;   // ibv_rc_pingpong's timeout and retry_cnt, overridable for slow peers
  unsigned retry_count = 7;
};

void usage(const char* argv0) {
  std::printf(
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
      "  --iface=<if>           Linux interface for net_af_packet (default uroce0)\n"
      "  --device=<vdev>        DPDK device string instead (e.g. net_af_packet0,iface=x,...)\n"
      "  --ip=<a.b.c.d/len>     uroce's RoCE address; the GID is its IPv4-mapped form (default 198.18.0.100/24)\n"
      "  --bind=<addr>          server: TCP address to listen on (default any)\n"
      "  --config=<yaml>        take EAL/port/engine settings from a uroce config file instead\n"
      "  --lcore=<cpu>          the engine's CPU (default 0)\n"
      "  --pcapng=<file>        capture every packet the engine sends and receives\n"
      "  --pattern              client: a different pattern in every message (checked in the echo)\n"
      "  --strict               server: every byte but the page starts must be 0x%02x\n"
      "  --hop-limit=<n>        IP TTL (default 64, what a kernel verbs peer puts on the wire)\n"
      "  --timeout=<s>          give up after this long without progress (default 120)\n"
      "  --linger=<ms>          keep the QP up this long after the last completion (default 1000)\n\n"
      "test knobs (not in ibv_rc_pingpong):\n"
      "  --faults=<k=v,...>     uroce RX fault injection: loss, reorder, duplicate, corrupt (probabilities), seed\n"
      "  --rnr-delay=<ms>       post the receives only this long after connecting, so the peer's first\n"
      "                         SEND meets an empty receive queue (RNR NAK)\n"
      "  --ack-timeout=<n>      local ACK timeout 4.096 us * 2^n (default 14, as ibv_rc_pingpong)\n"
      "  --retry-count=<n>      transport retries (default 7, as ibv_rc_pingpong)\n",
      argv0, argv0, kFill);
}

// "loss=0.01,reorder=0.01,duplicate=0,corrupt=0,seed=7"
bool parse_faults(const std::string& text, config::FaultConfig& f) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = item.substr(0, eq);
    const char* value = item.c_str() + eq + 1;
    if (key == "loss")
      f.loss = std::strtod(value, nullptr);
    else if (key == "reorder")
      f.reorder = std::strtod(value, nullptr);
    else if (key == "duplicate")
      f.duplicate = std::strtod(value, nullptr);
    else if (key == "corrupt")
      f.corrupt = std::strtod(value, nullptr);
    else if (key == "seed")
      f.seed = std::strtoull(value, nullptr, 0);
    else
      return false;
    pos = comma + 1;
  }
  return true;
}

bool parse_options(int argc, char** argv, Options& o) {
  enum {
    kIface = 1000,
    kDevice,
    kIp,
    kBind,
    kConfig,
    kLcore,
    kPcapng,
    kPattern,
    kStrict,
    kHop,
    kTimeout,
    kLinger,
    kFaults,
    kRnrDelay,
    kAckTimeout,
    kRetryCount
  };
  static const option long_options[] = {{"port", 1, nullptr, 'p'},
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
                                        {"iface", 1, nullptr, kIface},
                                        {"device", 1, nullptr, kDevice},
                                        {"ip", 1, nullptr, kIp},
                                        {"bind", 1, nullptr, kBind},
                                        {"config", 1, nullptr, kConfig},
                                        {"lcore", 1, nullptr, kLcore},
                                        {"pcapng", 1, nullptr, kPcapng},
                                        {"pattern", 0, nullptr, kPattern},
                                        {"strict", 0, nullptr, kStrict},
                                        {"hop-limit", 1, nullptr, kHop},
                                        {"timeout", 1, nullptr, kTimeout},
                                        {"linger", 1, nullptr, kLinger},
                                        {"help", 0, nullptr, 'h'},
                                        {"faults", 1, nullptr, kFaults},
                                        {"rnr-delay", 1, nullptr, kRnrDelay},
                                        {"ack-timeout", 1, nullptr, kAckTimeout},
                                        {"retry-count", 1, nullptr, kRetryCount},
                                        {nullptr, 0, nullptr, 0}};
  for (;;) {
    const int c = getopt_long(argc, argv, "p:d:i:s:m:r:n:l:eg:ch", long_options, nullptr);
    if (c == -1) break;
    switch (c) {
      case 'p':
        o.tcp_port = static_cast<unsigned>(std::strtoul(optarg, nullptr, 0));
        break;
      case 'd':
      case 'i':
      case 'l':
      case 'g':
      case 'e':
        break;
      case 's':
        o.size = static_cast<uint32_t>(std::strtoul(optarg, nullptr, 0));
        break;
      case 'm':
        o.mtu = static_cast<uint32_t>(std::strtoul(optarg, nullptr, 0));
        break;
      case 'r':
        o.rx_depth = static_cast<uint32_t>(std::strtoul(optarg, nullptr, 0));
        break;
      case 'n':
        o.iters = static_cast<uint32_t>(std::strtoul(optarg, nullptr, 0));
        break;
      case 'c':
        o.check = true;
        break;
      case kIface:
        o.iface = optarg;
        break;
      case kDevice:
        o.device = optarg;
        break;
      case kIp:
        o.ip = optarg;
        break;
      case kBind:
        o.bind = optarg;
        break;
      case kConfig:
        o.config_file = optarg;
        break;
      case kLcore:
        o.lcore = static_cast<unsigned>(std::strtoul(optarg, nullptr, 0));
        break;
      case kPcapng:
        o.pcapng = optarg;
        break;
      case kPattern:
        o.pattern = true;
        break;
      case kStrict:
        o.strict = true;
        break;
      case kHop:
        o.hop_limit = static_cast<unsigned>(std::strtoul(optarg, nullptr, 0));
        break;
      case kTimeout:
        o.timeout_s = static_cast<unsigned>(std::strtoul(optarg, nullptr, 0));
        break;
      case kLinger:
        o.linger_ms = static_cast<unsigned>(std::strtoul(optarg, nullptr, 0));
        break;
      case kFaults:
        if (!parse_faults(optarg, o.faults)) return false;
        break;
      case kRnrDelay:
        o.rnr_delay_ms = static_cast<int>(std::strtol(optarg, nullptr, 0));
        break;
      case kAckTimeout:
        o.ack_timeout = static_cast<unsigned>(std::strtoul(optarg, nullptr, 0));
        break;
      case kRetryCount:
        o.retry_count = static_cast<unsigned>(std::strtoul(optarg, nullptr, 0));
        break;
      default:
        return false;
    }
  }
  if (optind == argc - 1)
    o.host = argv[optind];
  else if (optind < argc)
    return false;
  if (o.mtu != 256 && o.mtu != 512 && o.mtu != 1024 && o.mtu != 2048 && o.mtu != 4096) return false;
  if (o.tcp_port > 65535 || o.size == 0 || o.rx_depth < 1 || o.rx_depth > 4096 || o.iters == 0 || o.hop_limit > 255 ||
      o.ack_timeout > 31 || o.retry_count > 7)
    return false;
  return true;
}

bool parse_ipv4(const std::string& text, config::IpAddress& out) {
  const auto slash = text.find('/');
  in_addr a{};
  if (inet_pton(AF_INET, text.substr(0, slash).c_str(), &a) != 1) return false;
  out = {};
  std::memcpy(out.bytes.data(), &a, 4);  // network order = a.b.c.d in bytes 0..3
  out.prefix_length = slash == std::string::npos ? 24 : static_cast<uint8_t>(std::stoul(text.substr(slash + 1)));
  return out.prefix_length <= 32;
}

proto::Gid gid_of(const config::IpAddress& ip) {
  proto::Gid g{};
  if (ip.is_v6) {
    std::memcpy(g.data(), ip.bytes.data(), 16);
  } else {
    g[10] = g[11] = 0xFF;
    std::memcpy(g.data() + 12, ip.bytes.data(), 4);
  }
  return g;
}

std::string gid_text(const proto::Gid& g) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, g.data(), buf, sizeof buf);
  return buf;
}

// --- the ibv_rc_pingpong exchange -----------------------------------------------------

struct Dest {
  uint32_t lid = 0;
  uint32_t qpn = 0;
  uint32_t psn = 0;
  proto::Gid gid{};
};

// 32 lowercase hex digits, the GID bytes in wire order (pingpong.c gid_to_wire_gid).
std::string format_dest(const Dest& d) {
  char msg[kMessageSize];
  char gid[33];
  for (int i = 0; i < 16; ++i) std::snprintf(gid + 2 * i, 3, "%02x", d.gid[i]);
  std::snprintf(msg, sizeof msg, "%04x:%06x:%06x:%s", d.lid, d.qpn, d.psn, gid);
  return std::string(msg, sizeof msg);  // the whole buffer, NUL included
}

bool parse_dest(const char* msg, Dest& d) {
  char gid[33] = {};
  unsigned lid = 0, qpn = 0, psn = 0;
  if (std::sscanf(msg, "%x:%x:%x:%32s", &lid, &qpn, &psn, gid) != 4 || std::strlen(gid) != 32) return false;
  d.lid = lid;
  d.qpn = qpn & 0xFFFFFF;
  d.psn = psn & 0xFFFFFF;
  for (int i = 0; i < 16; ++i) {
    const char pair[3] = {gid[2 * i], gid[2 * i + 1], 0};
    char* end = nullptr;
    d.gid[i] = static_cast<uint8_t>(std::strtoul(pair, &end, 16));
    if (end != pair + 2) return false;
  }
  return true;
}

bool wait_readable(int fd, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

bool read_full(int fd, void* buf, std::size_t n, Clock::time_point deadline) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    if (!wait_readable(fd, deadline)) return false;
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool write_full(int fd, const void* buf, std::size_t n) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    const ssize_t r = ::write(fd, p, n);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

int tcp_connect(const std::string& host, unsigned port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string service = std::to_string(port);
  // The server may not be listening yet: retry until the deadline (ibv_rc_pingpong tries once).
  while (Clock::now() < deadline) {
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0) return -1;
    int fd = -1;
    for (addrinfo* t = res; t != nullptr; t = t->ai_next) {
      fd = ::socket(t->ai_family, t->ai_socktype, t->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, t->ai_addr, t->ai_addrlen) == 0) break;
      ::close(fd);
      fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) return fd;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return -1;
}

int tcp_listen(const std::string& bind_addr, unsigned port) {
  addrinfo hints{};
  hints.ai_flags = AI_PASSIVE;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(bind_addr.empty() ? nullptr : bind_addr.c_str(), service.c_str(), &hints, &res) != 0) return -1;
  int fd = -1;
  for (addrinfo* t = res; t != nullptr; t = t->ai_next) {
    fd = ::socket(t->ai_family, t->ai_socktype, t->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, t->ai_addr, t->ai_addrlen) == 0 && ::listen(fd, 1) == 0) break;
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  return fd;
}

// --- the uroce QP -----------------------------------------------------------------------

uint32_t pow2_at_least(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// One RC QP with its queues and one registered buffer of two halves: the client sends from
// `tx` and receives into `rx`; the server receives into `rx` and sends from it (the echo).
// Every receive is posted at the same address, as ibv_rc_pingpong does.
class Endpoint {
 public:
  Endpoint(RcTransport& transport, uint32_t size, uint32_t rx_depth)
      : transport_(transport),
        size_(size),
        memory_(2 * static_cast<std::size_t>(size) + 64, kFill),
        sq_(16),
        rq_(pow2_at_least(rx_depth)),
        scq_(64),
        rcq_(pow2_at_least(rx_depth) * 2) {
    RcQueuePairSetup setup;
    setup.port = 0;
    setup.pd = 1;
    setup.send_queue = &sq_;
    setup.receive_queue = &rq_;
    setup.send_cq = &scq_;
    setup.receive_cq = &rcq_;
    setup.access = 0;  // ibv_rc_pingpong's qp_access_flags
    auto qp = transport.create_qp(0, setup);
    if (!qp.ok()) {
      error = qp.error();
      return;
    }
    qp_ = qp.value();
    auto token = transport.register_memory(reinterpret_cast<uint64_t>(memory_.data()), memory_.size(),
                                           proto::kAccessLocalWrite, 1);
    if (!token.ok()) {
      error = token.error();
      return;
    }
    token_ = token.value();
  }
  ~Endpoint() { release(); }

  [[nodiscard]] RcQueuePair* qp() const { return qp_; }
  [[nodiscard]] uint8_t* tx() { return memory_.data(); }
  [[nodiscard]] uint8_t* rx() { return memory_.data() + size_; }

  // ibv_rc_pingpong's pp_post_recv: up to n receives; returns how many were posted.
  uint32_t post_receives(uint32_t n) {
    uint32_t posted = 0;
    for (; posted < n && !rq_.full(); ++posted) {
      proto::RecvWqe r;
      r.context = kRecvWrid;
      r.num_sge = 1;
      r.sge[0] = {reinterpret_cast<uint64_t>(rx()), size_, proto::LocalToken{token_}};
      const uint32_t tail = rq_.producer_tail();
      rq_.slot(tail) = r;
      rq_.publish_tail(tail + 1);
    }
    return posted;
  }
  bool post_send(const uint8_t* from) {
    if (sq_.full()) return false;
    proto::SendWqe w;
    w.context = kSendWrid;
    w.op = proto::WorkOp::kSend;
    w.flags = proto::kWqeSignaled;
    w.num_sge = 1;
    w.length = size_;
    w.sge[0] = {reinterpret_cast<uint64_t>(from), size_, proto::LocalToken{token_}};
    const uint32_t tail = sq_.producer_tail();
    sq_.slot(tail) = w;
    sq_.publish_tail(tail + 1);
    transport_.ring_doorbell(*qp_);
    return true;
  }
  // Send completions first, then receives (one CQ each; ibv_rc_pingpong shares one CQ).
  std::optional<proto::Completion> poll(bool& is_receive) {
    for (CompletionQueue* cq : {&scq_, &rcq_}) {
      const CompletionEntry* e = cq->peek();
      if (e == nullptr) continue;
      const proto::Completion c = e->completion;
      cq->pop();
      cq->publish_consumed();
      is_receive = cq == &rcq_;
      return c;
    }
    return std::nullopt;
  }
  void release() {
    if (qp_ != nullptr) (void)transport_.destroy_qp(qp_);
    if (token_ != 0) (void)transport_.deregister_memory(token_);
    qp_ = nullptr;
    token_ = 0;
  }

  std::string error;

 private:
  RcTransport& transport_;
  uint32_t size_;
  std::vector<uint8_t> memory_;
  SendQueue sq_;
  ReceiveQueue rq_;
  CompletionQueue scq_;
  CompletionQueue rcq_;
  RcQueuePair* qp_ = nullptr;
  uint32_t token_ = 0;
};

const char* status_name(proto::CompletionStatus s) {
  switch (s) {
    case proto::CompletionStatus::kSuccess:
      return "success";
    case proto::CompletionStatus::kLocalLengthError:
      return "local length error";
    case proto::CompletionStatus::kLocalQpOperationError:
      return "local QP operation error";
    case proto::CompletionStatus::kLocalProtectionError:
      return "local protection error";
    case proto::CompletionStatus::kWorkRequestFlushed:
      return "Work Request Flushed Error";
    case proto::CompletionStatus::kMemoryWindowBindError:
      return "memory window bind error";
    case proto::CompletionStatus::kBadResponse:
      return "bad response error";
    case proto::CompletionStatus::kLocalAccessError:
      return "local access error";
    case proto::CompletionStatus::kRemoteInvalidRequest:
      return "remote invalid request error";
    case proto::CompletionStatus::kRemoteAccessError:
      return "remote access error";
    case proto::CompletionStatus::kRemoteOperationalError:
      return "remote operational error";
    case proto::CompletionStatus::kRetryExceeded:
      return "transport retry counter exceeded";
    case proto::CompletionStatus::kRnrRetryExceeded:
      return "RNR retry counter exceeded";
  }
  return "unknown";
}

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

config::Config make_config(const Options& o, const config::IpAddress& ip) {
  config::Config c;
  c.eal.lcores = {o.lcore};
  c.eal.hugepages = config::HugePages::kOff;  // --no-huge
  c.eal.memory_mb = 512;
  c.eal.file_prefix = "uroce-pingpong-" + std::to_string(getpid());
  c.engine.idle = config::IdlePolicy::kBackoff;
  c.engine.mbufs_per_engine = 4095;
  c.engine.mbuf_cache = 64;
  c.engine.max_qps_per_engine = 16;
  // net_af_packet's rx_queue_setup needs data room - headroom >= framesz - 32 (dpdk-env.md §4).
  c.engine.mbuf_data_room = 4736;
  config::PortConfig p;
  p.name = "veth";
  p.device = !o.device.empty() ? o.device : "net_af_packet0,iface=" + o.iface + ",framesz=4608,blocksz=36864";
  p.addresses = {ip};
  p.mtu = 4200;
  c.ports = {p};
  c.rdma.path_mtu = static_cast<uint16_t>(o.mtu);
  c.capture.pcapng_path = o.pcapng;
  c.faults = o.faults;
  return c;
}

int fail(const std::string& what) {
  std::fprintf(stderr, "rc_pingpong: %s\n", what.c_str());
  return 1;
}

void print_counters(Dataplane& dp) {
  std::printf("uroce counters:");
  for (const auto& [name, value] : counter_values(dp.engine(0).counters()))
    if (value != 0) std::printf(" %s=%llu", name.c_str(), static_cast<unsigned long long>(value));
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_options(argc, argv, o)) {
    usage(argv[0]);
    return 1;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const bool client = o.host.has_value();
  std::printf("rc_pingpong %s: size %u, mtu %u, iters %u, rx-depth %u%s%s%s, timeout %u, retry %u",
              client ? "client" : "server", o.size, o.mtu, o.iters, o.rx_depth, o.check ? ", chk" : "",
              o.pattern ? ", pattern" : "", o.strict ? ", strict" : "", o.ack_timeout, o.retry_count);
  if (o.faults.enabled())
    std::printf(", faults loss %g reorder %g duplicate %g corrupt %g seed %llu", o.faults.loss, o.faults.reorder,
                o.faults.duplicate, o.faults.corrupt, static_cast<unsigned long long>(o.faults.seed));
  if (o.rnr_delay_ms >= 0) std::printf(", receives %d ms late", o.rnr_delay_ms);
  std::printf("\n");

  config::Config cfg;
  config::IpAddress my_ip;
  if (!o.config_file.empty()) {
    auto loaded = config::load_config_file(o.config_file);
    if (!loaded.config) return fail(loaded.describe(o.config_file));
    cfg = *loaded.config;
    if (cfg.ports.empty() || cfg.ports[0].addresses.empty()) return fail("the config's first port has no address");
    my_ip = cfg.ports[0].addresses.front();
    if (!o.pcapng.empty()) cfg.capture.pcapng_path = o.pcapng;
    if (o.faults.enabled()) cfg.faults = o.faults;
  } else {
    if (!parse_ipv4(o.ip, my_ip)) return fail("--ip: not an IPv4 address: " + o.ip);
    cfg = make_config(o, my_ip);
  }

  auto started = Dataplane::start(cfg);
  if (!started.ok()) return fail("dataplane: " + started.error());
  std::unique_ptr<Dataplane> dp = std::move(started.value());
  auto t = RcTransport::start(*dp);
  if (!t.ok()) return fail("RC transport: " + t.error());
  std::unique_ptr<RcTransport> transport = std::move(t.value());

  int status = 0;
  {
    Endpoint ep(*transport, o.size, o.rx_depth);
    if (!ep.error.empty()) return fail(ep.error);

    // Receives first, as ibv_rc_pingpong does before the exchange (unless --rnr-delay).
    uint32_t routs = 0;
    auto post_initial_receives = [&]() -> bool {
      routs = ep.post_receives(o.rx_depth);
      return routs == o.rx_depth;
    };
    if (o.rnr_delay_ms < 0 && !post_initial_receives())
      return fail("couldn't post receive (" + std::to_string(routs) + ")");

    std::random_device rd;
    Dest me;
    me.lid = 0;
    me.qpn = ep.qp()->qpn().value();
    me.psn = rd() & 0xFFFFFF;
    me.gid = gid_of(my_ip);
    std::printf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", me.lid, me.qpn, me.psn,
                gid_text(me.gid).c_str());

    proto::RcQpAttributes attrs;  // ibv_rc_pingpong's pp_connect_ctx
    attrs.send_psn = proto::Psn{me.psn};
    attrs.path_mtu = o.mtu;
    attrs.ack_timeout = static_cast<uint8_t>(o.ack_timeout);
    attrs.retry_count = static_cast<uint8_t>(o.retry_count);
    attrs.rnr_retry = 7;
    attrs.min_rnr_timer = 12;
    attrs.max_rd_atomic = 1;
    attrs.max_dest_rd_atomic = 1;
    auto connect_qp = [&](const Dest& rem) -> Status {
      RcPeer peer;
      peer.qpn = proto::Qpn{rem.qpn};
      peer.psn = proto::Psn{rem.psn};
      const bool v4_mapped = std::all_of(rem.gid.begin(), rem.gid.begin() + 10, [](uint8_t b) { return b == 0; }) &&
                             rem.gid[10] == 0xFF && rem.gid[11] == 0xFF;
      peer.ip = {};
      if (v4_mapped) {
        std::memcpy(peer.ip.bytes.data(), rem.gid.data() + 12, 4);
        peer.ip.prefix_length = 32;
      } else {
        peer.ip.is_v6 = true;
        std::memcpy(peer.ip.bytes.data(), rem.gid.data(), 16);
        peer.ip.prefix_length = 128;
      }
      peer.path_mtu = o.mtu;
      peer.hop_limit = static_cast<uint8_t>(o.hop_limit);
      peer.traffic_class = 0;
      peer.max_dest_rd_atomic = 1;
      return transport->connect(*ep.qp(), peer, attrs, std::chrono::seconds(10));
    };

    const auto exchange_deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
    Dest rem;
    const std::string my_msg = format_dest(me);
    if (client) {
      const int fd = tcp_connect(*o.host, o.tcp_port, exchange_deadline);
      if (fd < 0) return fail("couldn't connect to " + *o.host + ":" + std::to_string(o.tcp_port));
      char msg[kMessageSize];
      const bool ok = write_full(fd, my_msg.data(), my_msg.size()) &&
                      read_full(fd, msg, sizeof msg, exchange_deadline) && write_full(fd, "done", sizeof "done");
      ::close(fd);
      if (!ok) return fail("couldn't read/write remote address");
      msg[kMessageSize - 1] = 0;
      if (!parse_dest(msg, rem)) return fail(std::string("malformed remote address '") + msg + "'");
    } else {
      const int lfd = tcp_listen(o.bind, o.tcp_port);
      if (lfd < 0) return fail("couldn't listen to port " + std::to_string(o.tcp_port));
      std::printf("  listening on TCP %s:%u\n", o.bind.empty() ? "*" : o.bind.c_str(), o.tcp_port);
      if (!wait_readable(lfd, exchange_deadline)) return fail("no client connected");
      const int fd = ::accept(lfd, nullptr, nullptr);
      ::close(lfd);
      if (fd < 0) return fail("accept() failed");
      char msg[kMessageSize];
      if (!read_full(fd, msg, sizeof msg, exchange_deadline)) {
        ::close(fd);
        return fail("couldn't read remote address");
      }
      msg[kMessageSize - 1] = 0;
      if (!parse_dest(msg, rem)) {
        ::close(fd);
        return fail(std::string("malformed remote address '") + msg + "'");
      }
      // The server connects before it answers (pp_server_exch_dest).
      if (const Status s = connect_qp(rem); !s.ok()) {
        ::close(fd);
        return fail("couldn't connect to remote QP: " + s.message());
      }
      char done[sizeof "done"];
      const bool ok =
          write_full(fd, my_msg.data(), my_msg.size()) && read_full(fd, done, sizeof done, exchange_deadline);
      ::close(fd);
      if (!ok || std::memcmp(done, "done", sizeof done) != 0) return fail("couldn't send/recv local address");
    }
    std::printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", rem.lid, rem.qpn, rem.psn,
                gid_text(rem.gid).c_str());
    if (client) {
      if (const Status s = connect_qp(rem); !s.ok()) return fail("couldn't connect to remote QP: " + s.message());
    }
    // The client sends before its delayed receives exist: the reply meets an empty queue too.
    std::optional<Clock::time_point> receives_due;
    if (o.rnr_delay_ms >= 0) receives_due = Clock::now() + std::chrono::milliseconds(o.rnr_delay_ms);

    // The ping-pong (rc_pingpong.c main loop and parse_single_wc).
    uint64_t pending = kRecvWrid;
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
    while ((rcnt < o.iters || scnt < o.iters) && other_errors == 0) {
      if (receives_due && Clock::now() >= *receives_due) {
        receives_due.reset();
        if (!post_initial_receives()) {
          std::fprintf(stderr, "Couldn't post receive (%u)\n", routs);
          ++other_errors;
          break;
        }
        last_progress = Clock::now();
      }
      bool is_receive = false;
      const auto c = ep.poll(is_receive);
      if (!c) {
        if (Clock::now() - last_progress > std::chrono::seconds(o.timeout_s)) {
          std::fprintf(stderr, "rc_pingpong: no completion for %u s (sent %u, received %u of %u)\n", o.timeout_s, scnt,
                       rcnt, o.iters);
          ++other_errors;
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        continue;
      }
      last_progress = Clock::now();
      if (c->status != proto::CompletionStatus::kSuccess) {
        std::fprintf(stderr, "Failed status %s (%d) for wr_id %d\n", status_name(c->status),
                     static_cast<int>(c->status), static_cast<int>(c->context));
        ++other_errors;
        break;
      }
      if (!is_receive) {
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
        if (c->byte_length != o.size) {
          std::fprintf(stderr, "receive %u: %u bytes, expected %u\n", rcnt, c->byte_length, o.size);
          ++data_errors;
        }
        const uint8_t* got = ep.rx();
        if (client) {
          // The server echoes the message this reply answers: the last one we sent.
          if (std::memcmp(got, ep.tx(), o.size) != 0) {
            uint32_t at = 0;
            while (at < o.size && got[at] == ep.tx()[at]) ++at;
            std::fprintf(stderr,
                         "receive %u: reply differs from the message sent at byte %u (0x%02x, expected 0x%02x)\n", rcnt,
                         at, got[at], ep.tx()[at]);
            ++data_errors;
          }
        } else {
          if (o.check)
            for (uint32_t i = 0; i < o.size; i += kPageSize)
              if (got[i] != 0) {
                std::fprintf(stderr, "receive %u: invalid data in page %u\n", rcnt,
                             static_cast<unsigned>(i / kPageSize));
                ++data_errors;
              }
          if (o.strict)
            for (uint32_t i = 0; i < o.size; ++i)
              if ((!o.check || i % kPageSize != 0) && got[i] != kFill) {
                std::fprintf(stderr, "receive %u: byte %u is 0x%02x, expected 0x%02x\n", rcnt, i, got[i], kFill);
                ++data_errors;
                break;
              }
        }
      }
      pending &= ~c->context;
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
      std::printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1e6, bytes * 8. / usec);
      std::printf("%u iters in %.2f seconds = %.2f usec/iter\n", o.iters, usec / 1e6, usec / o.iters);
    }
    // ibv_rc_pingpong's end-of-run check (server side, page starts).
    if (!client && o.check && other_errors == 0)
      for (uint32_t i = 0; i < o.size; i += kPageSize)
        if (ep.rx()[i] != 0) std::printf("invalid data in page %u\n", static_cast<unsigned>(i / kPageSize));

    // Keep answering for a moment: the peer may still wait for our ACK of its last SEND.
    std::this_thread::sleep_for(std::chrono::milliseconds(o.linger_ms));
    const proto::RcCounters qc = ep.qp()->protocol().counters();
    std::printf(
        "uroce QP: rx_send_requests=%llu acks_sent=%llu naks_sent=%llu duplicate_request=%llu out_of_sequence=%llu "
        "packet_seq_err=%llu local_ack_timeout_err=%llu retransmitted_packets=%llu rnr_nak_received=%llu "
        "rnr_nak_sent=%llu\n",
        static_cast<unsigned long long>(qc.rx_send_requests), static_cast<unsigned long long>(qc.acks_sent),
        static_cast<unsigned long long>(qc.naks_sent), static_cast<unsigned long long>(qc.duplicate_request),
        static_cast<unsigned long long>(qc.out_of_sequence), static_cast<unsigned long long>(qc.packet_seq_err),
        static_cast<unsigned long long>(qc.local_ack_timeout_err),
        static_cast<unsigned long long>(qc.retransmitted_packets), static_cast<unsigned long long>(qc.rnr_nak_received),
        static_cast<unsigned long long>(qc.rnr_nak_sent));
    ep.release();
    print_counters(*dp);
    std::printf("rc_pingpong %s: size %u mtu %u iters %u: sent %u received %u, %d data errors: %s\n",
                client ? "client" : "server", o.size, o.mtu, o.iters, scnt, rcnt, data_errors,
                other_errors == 0 && data_errors == 0 ? "ok" : "FAILED");
    status = other_errors == 0 && data_errors == 0 ? 0 : 1;
  }
  transport.reset();
  dp->stop();
  return status;
}
