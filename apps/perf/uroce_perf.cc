// uroce-perf: perftest's bandwidth and latency tests (write_bw, read_bw, send_bw, write_lat, read_lat, send_lat)
// on uroce, built on the public API (api/ndk.h) only.
//
// It speaks perftest's TCP exchange (perftest_exchange.h), so real ib_write_bw, ib_read_bw, ib_send_bw and the
// ib_*_lat tools can sit on the other end in either role: like perftest, it is the server when no host is
// given and the client otherwise. Both roles run the test the way perftest's do (what each side posts, where in
// the peer's buffer, which messages are signalled, the hand shakes between phases) and print perftest's table.
//
// --in-process runs both roles here, each on its own engine and port of the configuration (the client on the
// first, the server on the last; the embedded default joins its two ports with an in-process ring link), with
// the same exchange over TCP on the loopback interface. That is the README's main job, and every received byte is
// checked.
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "api/ndk.h"
#include "apps/common/peer_shutdown.h"
#include "apps/common/tool_setup.h"
#include "apps/perf/perf_report.h"
#include "apps/perf/perftest_exchange.h"
#include "config/config.h"

using namespace uroce;
using namespace uroce::ndk;
using namespace uroce::apps;
using namespace uroce::apps::perf;

namespace {

constexpr const char* kTool = "uroce-perf";
constexpr uint64_t kMaxSize = 8u << 20;  // perftest's largest message, and the top of -a
constexpr uint32_t kMaxQps = 64;

struct Mode {
  std::string_view name;
  Verb verb;
  TestKind kind;
};
constexpr Mode kModes[] = {
    {"write_bw", Verb::kWrite, TestKind::kBandwidth}, {"read_bw", Verb::kRead, TestKind::kBandwidth},
    {"send_bw", Verb::kSend, TestKind::kBandwidth},   {"write_lat", Verb::kWrite, TestKind::kLatency},
    {"read_lat", Verb::kRead, TestKind::kLatency},    {"send_lat", Verb::kSend, TestKind::kLatency},
};

struct Options {
  bool help = false;  // -h: print the usage, run nothing
  Mode mode = kModes[0];
  std::optional<std::string> host;
  bool in_process = false;
  uint64_t size = 0;  // 0: perftest's default for the mode
  uint64_t iters = 0;
  uint32_t duration = 0;  // -D seconds; 0: a count of iterations
  uint32_t qps = 1;
  uint32_t mtu = 0;  // 0: the configuration's rdma.path_mtu
  bool all_sizes = false;
  bool gbits = false;
  std::optional<uint32_t> gid_index;
  uint16_t tcp_port = 18515;
  uint32_t tx_depth = 0, rx_depth = 0, cq_mod = 0;
  bool cq_mod_given = false;
  uint32_t out_reads = 0;  // 0: the adapter's inbound READ limit
  uint8_t qp_timeout = 14;
  bool no_peak = false;
  bool verify = false;
  uint32_t timeout = 0;  // seconds; 0: wait forever, as perftest does

  [[nodiscard]] bool bw() const { return mode.kind == TestKind::kBandwidth; }
  [[nodiscard]] bool client() const { return host.has_value(); }
};

void usage(FILE* out) {
  std::fprintf(out,
               "usage: uroce-perf MODE [options] [HOST]\n"
               "  MODE: write_bw, read_bw, send_bw, write_lat, read_lat or send_lat.\n"
               "  perftest's tests on uroce, with perftest's TCP exchange: without HOST it is the server and waits\n"
               "  for a client (uroce-perf, or perftest's ib_write_bw, ib_read_bw, ib_send_bw, ib_write_lat,\n"
               "  ib_read_lat, ib_send_lat); with HOST it is the client of the server there. Give both sides the\n"
               "  same test options, as with perftest. The tables are perftest's.\n"
               "  --in-process runs the server and the client in this process instead, on the first and the last\n"
               "  port of the configuration (the embedded default joins them with an in-process ring link).\n"
               "test options (perftest's names):\n"
               "  -s, --size BYTES        message size (default 65536 for *_bw, 2 for *_lat; at most 8 MiB)\n"
               "  -n, --iters N           messages per size (default 5000 for write_bw, else 1000; at least 5)\n"
               "  -D, --duration SECONDS  run for a time instead of a count, printing a line per second (*_bw)\n"
               "  -a, --all               every size from 2 to 8 MiB in powers of two\n"
               "  -q, --qp N              QPs (default 1; the *_lat tests use one)\n"
               "  -m, --mtu BYTES         path MTU: 256, 512, 1024, 2048 or 4096 (default: the configuration's);\n"
               "                          the two sides use the smaller of theirs\n"
               "  -x, --gid-index N       which address of the port to use, as uroce's GID table is the port's\n"
               "                          addresses in configuration order (default 0)\n"
               "  -p N                    TCP port of the exchange (default 18515; perftest's --port is -p only\n"
               "                          here, since --port names the configured port)\n"
               "  -t, --tx-depth N        requests kept outstanding (default 128 for *_bw, 1 for *_lat)\n"
               "  -r, --rx-depth N        receives kept posted (default 512 for send tests)\n"
               "  -Q, --cq-mod N          a completion every N requests (default 100; 1 above 8 KiB unless given)\n"
               "  -o, --outs N            READs the peer may keep outstanding towards us (default: the adapter's\n"
               "                          rdma.max_dest_rd_atomic)\n"
               "  -u, --qp-timeout N      ACK timeout, 4.096 us * 2^N (default 14)\n"
               "  -N, --noPeak            do not compute the peak bandwidth (always off above 20000 iterations)\n"
               "  -F, --CPU-freq          accepted for perftest's sake; uroce-perf times with the steady clock\n"
               "      --report_gbits      report Gb/s instead of MB/s\n"
               "uroce options:\n"
               "      --in-process        both roles in this process (see above); checks every received byte\n"
               "      --verify            the peer is uroce-perf too: check the data received (or read) against\n"
               "                          the pattern uroce-perf sends (perftest's own buffers are random)\n"
               "      --timeout SECONDS   give up when the peer does not answer, or the test makes no progress,\n"
               "                          for this long (default 0: wait forever, as perftest does)\n"
               "  -h, --help\n"
               "%s",
               kConfigOptionsHelp);
}

[[gnu::format(printf, 1, 2)]] bool complain(const char* format, ...) {
  std::fprintf(stderr, "%s: ", kTool);
  va_list args;
  va_start(args, format);
  // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): a clang-tidy 14 false positive in multi-file runs
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fprintf(stderr, "\n");
  return false;
}

std::optional<Options> parse(int argc, char** argv) {
  Options o;
  int i = 1;
  if (i >= argc || argv[i][0] == '-') {
    if (i < argc && (std::string_view(argv[i]) == "-h" || std::string_view(argv[i]) == "--help")) {
      o.help = true;
      return o;
    }
    complain("the first argument names the test: write_bw, read_bw, send_bw, write_lat, read_lat or send_lat");
    return std::nullopt;
  }
  const std::string_view mode = argv[i++];
  const Mode* found = nullptr;
  for (const Mode& m : kModes) {
    if (m.name == mode) found = &m;
  }
  if (!found) {
    complain("unknown test '%.*s' (write_bw, read_bw, send_bw, write_lat, read_lat or send_lat)",
             static_cast<int>(mode.size()), mode.data());
    return std::nullopt;
  }
  o.mode = *found;
  bool size_given = false, iters_given = false;
  for (; i < argc; ++i) {
    std::string_view arg = argv[i], inline_value;
    bool has_inline = false;
    if (const std::size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_inline = true;
    }
    const auto is = [&](std::string_view s, std::string_view l) { return arg == s || (!l.empty() && arg == l); };
    // A numeric value in [lo, hi], from "--opt=V" or the next argument.
    const auto number = [&](uint64_t lo, uint64_t hi) -> std::optional<uint64_t> {
      std::string text;
      if (has_inline) {
        text = inline_value;
      } else if (i + 1 < argc) {
        text = argv[++i];
      } else {
        complain("%.*s needs a value", static_cast<int>(arg.size()), arg.data());
        return std::nullopt;
      }
      return parse_number(kTool, arg, text.c_str(), lo, hi);
    };
    std::optional<uint64_t> v;
    if (is("-h", "--help")) {
      o.help = true;
      return o;
    } else if (arg.empty() || arg[0] != '-') {
      if (o.host) {
        complain("two hosts given ('%s' and '%s')", o.host->c_str(), argv[i]);
        return std::nullopt;
      }
      o.host = std::string(arg);
    } else if (is("-a", "--all")) {
      o.all_sizes = true;
    } else if (is("--report_gbits", "")) {
      o.gbits = true;
    } else if (is("-N", "--noPeak")) {
      o.no_peak = true;
    } else if (is("-F", "--CPU-freq")) {
      // perftest's "do not fail on CPU frequency warnings": nothing to do here.
    } else if (is("--in-process", "")) {
      o.in_process = true;
    } else if (is("--verify", "")) {
      o.verify = true;
    } else if (is("-s", "--size")) {
      if (!(v = number(1, kMaxSize))) return std::nullopt;
      o.size = *v;
      size_given = true;
    } else if (is("-n", "--iters")) {
      if (!(v = number(5, 100000000))) return std::nullopt;
      o.iters = *v;
      iters_given = true;
    } else if (is("-D", "--duration")) {
      if (!(v = number(1, 86400))) return std::nullopt;
      o.duration = static_cast<uint32_t>(*v);
    } else if (is("-q", "--qp")) {
      if (!(v = number(1, kMaxQps))) return std::nullopt;
      o.qps = static_cast<uint32_t>(*v);
    } else if (is("-m", "--mtu")) {
      if (!(v = number(256, 4096))) return std::nullopt;
      if (mtu_enum_of_bytes(static_cast<uint32_t>(*v)) == 0) {
        complain("-m: the MTU is 256, 512, 1024, 2048 or 4096, not %" PRIu64, *v);
        return std::nullopt;
      }
      o.mtu = static_cast<uint32_t>(*v);
    } else if (is("-x", "--gid-index")) {
      if (!(v = number(0, 255))) return std::nullopt;
      o.gid_index = static_cast<uint32_t>(*v);
    } else if (is("-p", "")) {
      if (!(v = number(1, 65535))) return std::nullopt;
      o.tcp_port = static_cast<uint16_t>(*v);
    } else if (is("-t", "--tx-depth")) {
      if (!(v = number(1, 15000))) return std::nullopt;
      o.tx_depth = static_cast<uint32_t>(*v);
    } else if (is("-r", "--rx-depth")) {
      if (!(v = number(1, 16384))) return std::nullopt;
      o.rx_depth = static_cast<uint32_t>(*v);
    } else if (is("-Q", "--cq-mod")) {
      if (!(v = number(1, 1024))) return std::nullopt;
      o.cq_mod = static_cast<uint32_t>(*v);
      o.cq_mod_given = true;
    } else if (is("-o", "--outs")) {
      if (!(v = number(1, 255))) return std::nullopt;
      o.out_reads = static_cast<uint32_t>(*v);
    } else if (is("-u", "--qp-timeout")) {
      if (!(v = number(0, 31))) return std::nullopt;
      o.qp_timeout = static_cast<uint8_t>(*v);
    } else if (is("--timeout", "")) {
      if (!(v = number(0, 86400))) return std::nullopt;
      o.timeout = static_cast<uint32_t>(*v);
    } else {
      complain("unknown option '%s' (see --help)", argv[i]);
      return std::nullopt;
    }
  }
  if (o.in_process && o.host) {
    complain("--in-process runs both roles here: give no host");
    return std::nullopt;
  }
  if (o.all_sizes && size_given) return complain("-a runs every size: give no -s"), std::nullopt;
  if (o.all_sizes && o.duration) return complain("-a and -D do not go together (as in perftest)"), std::nullopt;
  if (o.duration && iters_given) return complain("-D and -n do not go together: one or the other"), std::nullopt;
  if (!o.bw() && o.qps != 1) return complain("the latency tests use one QP"), std::nullopt;
  // perftest's defaults and the dependencies it forces between them.
  if (!size_given) o.size = o.all_sizes ? kMaxSize : o.bw() ? 65536 : 2;
  if (!iters_given) o.iters = o.bw() && o.mode.verb == Verb::kWrite ? 5000 : 1000;
  if (!o.tx_depth) o.tx_depth = o.bw() ? 128 : 1;
  if (!o.rx_depth) o.rx_depth = o.mode.verb == Verb::kSend ? 512 : 1;
  if (!o.duration) {
    o.tx_depth = static_cast<uint32_t>(std::min<uint64_t>(o.tx_depth, o.iters));
    if (o.mode.verb == Verb::kSend) o.rx_depth = static_cast<uint32_t>(std::min<uint64_t>(o.rx_depth, o.iters));
  }
  if (!o.cq_mod) o.cq_mod = 100;
  // Large messages need no moderation, and it would skew the average; perftest drops it unless asked for.
  if (o.size > 8192 && !o.all_sizes && !o.cq_mod_given) o.cq_mod = 1;
  o.cq_mod = std::min(o.cq_mod, o.tx_depth);
  if (o.duration || (o.bw() && o.iters > 20000)) o.no_peak = true;
  if (o.in_process) o.verify = true;
  return o;
}

// Fails loudly: an NTSTATUS from a call the tool cannot do without.
bool ok(NTSTATUS s, const char* what) {
  if (s == STATUS_SUCCESS) return true;
  return complain("%s failed: %s (0x%08x)", what, NdkStatusName(s), static_cast<unsigned>(s));
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// What uroce-perf puts in the buffers it sends from, and READs are served from: a function of the offset in the
// QP's region, so a byte that lands in the wrong place, or a stale one, is caught wherever it is checked.
uint8_t pattern_at(uint64_t offset) { return static_cast<uint8_t>(offset * 7 + (offset >> 8) * 13 + 0x5A); }

void fill_pattern(uint8_t* region, uint64_t bytes) {
  for (uint64_t o = 0; o < bytes; ++o) region[o] = pattern_at(o);
}

// The first offset in [from, from + n) that does not hold the pattern, if any.
std::optional<uint64_t> pattern_mismatch(const uint8_t* region, uint64_t from, uint64_t n) {
  for (uint64_t o = from; o < from + n; ++o) {
    if (region[o] != pattern_at(o)) return o;
  }
  return std::nullopt;
}

// Where a side's roles live: the adapter, its address, and the engines its CQs go to.
struct Side {
  Adapter* adapter = nullptr;
  config::IpAddress ip;
  std::string device;
  bool client = true;
  std::optional<uint16_t> engine;  // all CQs on this engine; none: QP i on engine i % count
  FILE* out = stdout;              // the table
};

// One role of a perftest run, from the exchange's first step to its last.
class Role {
 public:
  Role(const Options& o, const Side& side, PerftestSession& session)
      : o_(o), side_(side), session_(session), mtu_(o.mtu) {}
  Role(const Role&) = delete;
  Role& operator=(const Role&) = delete;
  ~Role() { release(); }

  bool run();

 private:
  struct QpState {
    Cq* send_cq = nullptr;
    Cq* recv_cq = nullptr;
    Qp* qp = nullptr;
    PerftestDest mine, theirs;
  };

  bool fail(const char* what) {
    complain("%s%s", side_.client ? "" : "(server) ", what);
    return false;
  }
  bool exchange_failed() { return fail(session_.error().c_str()); }

  bool agree();
  bool create();
  bool keys_and_connect();
  bool run_bw();
  bool run_lat();
  bool bw_client(uint64_t size, BwReport& report);
  bool post_receives(uint64_t size, uint64_t count_per_qp);
  bool send_server(uint64_t size, BwReport& report);
  bool write_lat(uint64_t size);
  bool read_lat(uint64_t size);
  bool send_lat(uint64_t size);
  bool verify_bw(uint64_t size);
  bool verify_region(const uint8_t* region, uint64_t from, uint64_t n, const char* what);
  void release();

  // perftest's address arithmetic: messages step through a cycle buffer in cache-line-rounded slots.
  [[nodiscard]] uint64_t slot_step(uint64_t size) const {
    return size > cache_line_ ? (size + cache_line_ - 1) / cache_line_ * cache_line_ : cache_line_;
  }
  [[nodiscard]] uint64_t slots(uint64_t size) const {
    return o_.bw() && size <= cycle_buffer_ / 2 ? cycle_buffer_ / slot_step(size) : 1;
  }
  [[nodiscard]] uint64_t offset_of(uint64_t message, uint64_t size) const {
    return message % slots(size) * slot_step(size);
  }
  uint8_t* local(uint32_t qp) { return buffer_.get() + qp * region_; }
  uint8_t* target(uint32_t qp) { return buffer_.get() + (o_.qps + qp) * region_; }
  [[nodiscard]] std::vector<uint64_t> sizes() const {
    std::vector<uint64_t> s;
    if (!o_.all_sizes) return {o_.size};
    for (uint64_t v = 2; v <= kMaxSize; v *= 2) s.push_back(v);
    return s;
  }
  // A no-progress watchdog for --timeout.
  [[nodiscard]] bool stalled(Clock::time_point last_progress) const {
    return o_.timeout && Clock::now() - last_progress > std::chrono::seconds(o_.timeout);
  }
  NTSTATUS post(uint32_t qp, uint64_t context, uint64_t size, uint64_t offset, bool signalled);
  bool post_one(uint64_t context, uint64_t size);
  bool await_completion(Clock::time_point last_progress, const char* op);

  const Options& o_;
  Side side_;
  PerftestSession& session_;
  uint32_t mtu_;                                    // ours, then the one agreed with the peer
  uint32_t cycle_buffer_ = 4096, cache_line_ = 64;  // perftest's defaults (the page and cache line sizes)
  uint32_t out_reads_ = 0, max_ord_ = 0;
  std::unique_ptr<uint8_t, decltype(&std::free)> buffer_{nullptr, &std::free};
  uint64_t region_ = 0;
  Pd* pd_ = nullptr;
  Mr* mr_ = nullptr;
  std::vector<QpState> qps_;
};

bool Role::agree() {
  std::string peer_version;
  if (!session_.exchange_versions(peer_version) || !session_.exchange_sys_data(cycle_buffer_, cache_line_) ||
      !session_.exchange_mtu(mtu_))
    return exchange_failed();
  if (cycle_buffer_ == 0 || cycle_buffer_ > (64u << 20) || cache_line_ == 0 || cache_line_ > 4096 ||
      (cache_line_ & (cache_line_ - 1)) != 0)
    return fail("the peer announced an unusable cycle buffer or cache line size");
  return true;
}

bool Role::create() {
  NdkAdapterInfo info{};
  uint32_t info_size = sizeof info;
  if (!ok(side_.adapter->NdkQueryAdapterInfo(&info, &info_size), "NdkQueryAdapterInfo")) return false;
  out_reads_ = o_.out_reads ? o_.out_reads : info.MaxInboundReadLimit;
  max_ord_ = info.MaxOutboundReadLimit;
  if (out_reads_ > info.MaxInboundReadLimit) {
    complain("-o %u: the adapter takes at most %u inbound READs (rdma.max_dest_rd_atomic)", out_reads_,
             info.MaxInboundReadLimit);
    return false;
  }
  // perftest's layout: per QP a region to send from, then per QP a region the peer writes to or reads from,
  // each as large as the largest message or the cycle buffer, rounded to cache lines.
  const uint64_t largest = o_.all_sizes ? kMaxSize : o_.size;
  region_ = slot_step(std::max<uint64_t>(largest, cycle_buffer_));
  const uint64_t bytes = (2 * region_ * o_.qps + 4095) / 4096 * 4096;
  buffer_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  if (!buffer_) return fail("cannot allocate the test buffers");
  std::memset(buffer_.get(), 0, bytes);
  for (uint32_t i = 0; i < o_.qps; ++i) {
    fill_pattern(local(i), region_);
    if (o_.mode.verb == Verb::kRead) fill_pattern(target(i), region_);  // what the peer READs
  }
  if (!ok(side_.adapter->NdkCreatePd(nullptr, nullptr, &pd_), "NdkCreatePd") ||
      !ok(pd_->NdkCreateMr(false, nullptr, nullptr, &mr_), "NdkCreateMr") ||
      !ok(mr_->NdkRegisterMr(buffer_.get(), bytes, NDK_MR_FLAG_ALLOW_REMOTE_WRITE | NDK_MR_FLAG_ALLOW_REMOTE_READ,
                             nullptr, nullptr),
          "NdkRegisterMr"))
    return false;
  std::mt19937 random(static_cast<uint32_t>(now_ns()) ^ (side_.client ? 0 : 0x9E3779B9u));
  qps_.resize(o_.qps);
  const uint16_t engines = side_.adapter->UroceEngineCount();
  for (uint32_t i = 0; i < o_.qps; ++i) {
    QpState& q = qps_[i];
    const GroupAffinity affinity =
        side_.adapter->UroceEngineAffinity(side_.engine ? *side_.engine : static_cast<uint16_t>(i % engines));
    if (!ok(side_.adapter->NdkCreateCq(o_.tx_depth + 1, nullptr, nullptr, &affinity, nullptr, nullptr, &q.send_cq),
            "NdkCreateCq") ||
        !ok(side_.adapter->NdkCreateCq(o_.rx_depth + 1, nullptr, nullptr, &affinity, nullptr, nullptr, &q.recv_cq),
            "NdkCreateCq") ||
        !ok(pd_->NdkCreateQp(q.recv_cq, q.send_cq, this, o_.rx_depth, o_.tx_depth, 1, 1, 0, nullptr, nullptr, &q.qp),
            "NdkCreateQp"))
      return false;
    q.mine.out_reads = static_cast<uint16_t>(out_reads_);
    q.mine.qpn = q.qp->UroceGetQpNumber();
    q.mine.psn = random() & 0xFFFFFF;  // random starting PSNs, as perftest's
    q.mine.rkey = mr_->NdkGetRemoteTokenFromMr();
    q.mine.vaddr = reinterpret_cast<uint64_t>(target(i));
    q.mine.gid = gid_of(side_.ip);
  }
  return true;
}

bool Role::keys_and_connect() {
  // The order of perftest's hand shakes differs between its tests; what counts on the wire is their number,
  // and that the first round carries the keys the QPs are connected with.
  enum Step { kAllKeys, kFirstKey, kConnect };
  std::vector<Step> steps;
  if (o_.mode.verb == Verb::kSend) {
    steps = {kAllKeys, kConnect, kFirstKey, kAllKeys};
  } else if (o_.bw()) {
    steps = {kAllKeys, kConnect, kAllKeys, kFirstKey};
  } else {
    steps = {kFirstKey, kAllKeys, kConnect, kAllKeys, kFirstKey};
  }
  bool connected = false;
  for (Step step : steps) {
    if (step == kConnect) {
      for (QpState& q : qps_) {
        if (q.theirs.out_reads == 0 && o_.mode.verb == Verb::kRead && side_.client)
          return fail("the peer allows no outstanding READs (its OUT is 0)");
        const sockaddr_storage local = to_sockaddr(side_.ip), remote = sockaddr_of_gid(q.theirs.gid);
        UroceConnectAttributes a;
        a.LocalAddress = reinterpret_cast<const sockaddr*>(&local);
        a.RemoteAddress = reinterpret_cast<const sockaddr*>(&remote);
        a.RemoteQpNumber = q.theirs.qpn;
        a.RemotePsn = q.theirs.psn;
        a.LocalPsn = q.mine.psn;
        a.PathMtu = mtu_;
        a.InboundReadLimit = out_reads_;
        // Our ORD: what the peer's IRD allows, within what the adapter can track.
        a.OutboundReadLimit = std::min<uint32_t>(std::max<uint32_t>(q.theirs.out_reads, 1), max_ord_);
        a.AckTimeout = o_.qp_timeout;  // perftest's -u, retry_cnt 7, rnr_retry 7, min_rnr_timer 12
        a.RetryCount = 7;
        a.RnrRetry = 7;
        a.MinRnrTimer = 12;
        a.HopLimit = 255;  // perftest's GRH hop limit

        const NTSTATUS s = q.qp->UroceConnect(a, nullptr, nullptr);
        if (s == STATUS_HOST_UNREACHABLE) return fail("the peer's address does not answer ARP / neighbour discovery");
        if (!ok(s, "UroceConnect")) return false;
      }
      connected = true;
      continue;
    }
    const std::size_t n = step == kAllKeys ? qps_.size() : 1;
    for (std::size_t i = 0; i < n; ++i) {
      PerftestDest theirs;
      if (!session_.hand_shake(qps_[i].mine, theirs)) return exchange_failed();
      if (!connected) {
        qps_[i].theirs = theirs;
      } else if (!(theirs == qps_[i].theirs)) {
        return fail("the peer's keys changed between hand shakes: are both sides running the same test?");
      }
    }
  }
  for (const QpState& q : qps_) print_dest(side_.out, true, o_.mode.verb, q.mine);
  for (const QpState& q : qps_) print_dest(side_.out, false, o_.mode.verb, q.theirs);
  return true;
}

NTSTATUS Role::post(uint32_t i, uint64_t context, uint64_t size, uint64_t offset, bool signalled) {
  const QpState& q = qps_[i];
  const NdkSge sge{local(i) + offset, static_cast<uint32_t>(size), mr_->NdkGetLocalTokenFromMr()};
  void* ctx = reinterpret_cast<void*>(context);
  const uint32_t flags = signalled ? 0 : NDK_OP_FLAG_SILENT_SUCCESS;
  switch (o_.mode.verb) {
    case Verb::kWrite:
      return q.qp->NdkWrite(ctx, &sge, 1, q.theirs.vaddr + offset, q.theirs.rkey, flags);
    case Verb::kRead:
      return q.qp->NdkRead(ctx, &sge, 1, q.theirs.vaddr + offset, q.theirs.rkey, flags);
    case Verb::kSend:
      return q.qp->NdkSend(ctx, &sge, 1, flags);
  }
  return STATUS_INVALID_PARAMETER;
}

// The latency tests' single request: its slot is free, since the previous request's completion was reaped (the
// engine hands a slot back before its completion is visible).
bool Role::post_one(uint64_t context, uint64_t size) {
  return ok(post(0, context, size, 0, true), "posting the request");
}

// The latency tests' wait for the completion of their one outstanding request (QP 0's send CQ).
bool Role::await_completion(Clock::time_point last_progress, const char* op) {
  NdkResult result;
  while (qps_[0].send_cq->NdkGetCqResults(&result, 1) == 0) {
    if (stalled(last_progress))
      return fail((std::string("the ") + op + " did not complete for --timeout seconds").c_str());
  }
  return ok(result.Status, (std::string(op) + " completion").c_str());
}

// perftest's run_iter_bw: per QP up to tx_depth requests outstanding, every cq_mod-th (and the last) signalled,
// each a signalled completion retiring everything before it on that QP.
bool Role::bw_client(uint64_t size, BwReport& report) {
  const uint64_t iters = o_.duration ? UINT64_MAX : o_.iters;
  struct Counts {
    uint64_t posted = 0, completed = 0, signalled = 0;  // signalled: 1 + index of the last signalled request
  };
  std::vector<Counts> c(qps_.size());
  BwTimes times;
  const bool peak = !o_.no_peak;
  if (peak) times.posted_ns.reserve(o_.iters * qps_.size());
  uint64_t total_completed = 0, second_mark = 0;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::seconds(o_.duration);
  auto next_second = start + std::chrono::seconds(1), last_progress = start;
  times.first_ns = now_ns();
  NdkResult results[16];
  for (;;) {
    const bool time_up = o_.duration && Clock::now() >= deadline;
    bool done = true;
    for (uint32_t i = 0; i < qps_.size(); ++i) {
      Counts& k = c[i];
      while (!time_up && k.posted < iters && k.posted - k.completed < o_.tx_depth) {
        const bool signalled = k.posted % o_.cq_mod == o_.cq_mod - 1 || k.posted + 1 == iters;
        const NTSTATUS s = post(i, k.posted, size, offset_of(k.posted, size), signalled);
        if (s == STATUS_INSUFFICIENT_RESOURCES) break;  // the send queue is full: poll first
        if (!ok(s, o_.mode.verb == Verb::kWrite ? "NdkWrite" : o_.mode.verb == Verb::kRead ? "NdkRead" : "NdkSend"))
          return false;
        if (peak) times.posted_ns.push_back(now_ns());
        if (signalled) k.signalled = k.posted + 1;
        ++k.posted;
      }
      const uint32_t n = qps_[i].send_cq->NdkGetCqResults(results, 16);
      for (uint32_t r = 0; r < n; ++r) {
        if (results[r].Status != STATUS_SUCCESS) {
          complain("%scompletion of request %" PRIu64 " on QP %u failed: NTSTATUS 0x%08x",
                   side_.client ? "" : "(server) ", reinterpret_cast<uint64_t>(results[r].RequestContext), i,
                   static_cast<unsigned>(results[r].Status));
          return false;
        }
        const uint64_t now_done = reinterpret_cast<uint64_t>(results[r].RequestContext) + 1;
        total_completed += now_done - k.completed;
        k.completed = now_done;
        times.last_ns = now_ns();
        if (peak) times.completed_ns.emplace_back(total_completed, times.last_ns);
        last_progress = Clock::now();
      }
      // A run ends when every request is complete; after -D, when the last signalled one is (the unsignalled
      // tail behind it has no completion to wait for).
      if (o_.duration ? !time_up || k.completed < k.signalled : k.completed < iters) done = false;
    }
    if (o_.duration && Clock::now() >= next_second) {
      // The line per second of a long run, in the table's own columns.
      BwTimes second;
      second.first_ns = now_ns() - 1000000000;
      second.last_ns = now_ns();
      print_bw_line(side_.out, bw_report(size, total_completed - second_mark, second, o_.gbits, false), o_.gbits);
      second_mark = total_completed;
      next_second += std::chrono::seconds(1);
    }
    if (done) break;
    if (stalled(last_progress)) return fail("no completion for --timeout seconds: is the peer still there?");
  }
  report = bw_report(size, total_completed, times, o_.gbits, peak);
  return true;
}

bool Role::post_receives(uint64_t size, uint64_t count_per_qp) {
  for (uint32_t i = 0; i < qps_.size(); ++i) {
    for (uint64_t r = 0; r < count_per_qp; ++r) {
      const NdkSge sge{target(i) + offset_of(r, size), static_cast<uint32_t>(size), mr_->NdkGetLocalTokenFromMr()};
      if (!ok(qps_[i].qp->NdkReceive(reinterpret_cast<void*>(r), &sge, 1), "NdkReceive")) return false;
    }
  }
  return true;
}

// perftest's run_iter_bw_server: count the client's SENDs, keeping receives posted until all are.
bool Role::send_server(uint64_t size, BwReport& report) {
  const uint64_t iters = o_.duration ? UINT64_MAX : o_.iters;
  std::vector<uint64_t> received(qps_.size(), 0), posted(qps_.size(), o_.rx_depth);
  uint64_t total = 0;
  BwTimes times;
  auto last_progress = Clock::now();
  std::optional<Clock::time_point> end;  // -D: counted from the first message, as perftest's server does
  NdkResult results[16];
  while (o_.duration ? !end || Clock::now() < *end : total < iters * qps_.size()) {
    for (uint32_t i = 0; i < qps_.size(); ++i) {
      const uint32_t n = qps_[i].recv_cq->NdkGetCqResults(results, 16);
      for (uint32_t r = 0; r < n; ++r) {
        const uint64_t index = reinterpret_cast<uint64_t>(results[r].RequestContext);
        if (results[r].Status != STATUS_SUCCESS) {
          complain("(server) receive %" PRIu64 " on QP %u failed: %s", index, i, NdkStatusName(results[r].Status));
          return false;
        }
        if (results[r].BytesTransferred != size) {
          complain("(server) received a %u-byte message, expected %" PRIu64 ": do both sides use the same -s?",
                   results[r].BytesTransferred, size);
          return false;
        }
        if (total == 0) {
          times.first_ns = now_ns();
          if (o_.duration) end = Clock::now() + std::chrono::seconds(o_.duration);
        }
        if (o_.verify && !verify_region(target(i), offset_of(index, size), size, "a received SEND")) return false;
        ++received[i];
        ++total;
        times.last_ns = now_ns();
        last_progress = Clock::now();
        if (posted[i] < iters) {
          const NdkSge sge{target(i) + offset_of(posted[i], size), static_cast<uint32_t>(size),
                           mr_->NdkGetLocalTokenFromMr()};
          if (!ok(qps_[i].qp->NdkReceive(reinterpret_cast<void*>(posted[i]), &sge, 1), "NdkReceive")) return false;
          ++posted[i];
        }
      }
    }
    if (stalled(last_progress)) return fail("no SEND arrived for --timeout seconds: is the client still there?");
  }
  report = bw_report(size, total, times, o_.gbits, false);
  return true;
}

bool Role::verify_region(const uint8_t* region, uint64_t from, uint64_t n, const char* what) {
  if (const std::optional<uint64_t> bad = pattern_mismatch(region, from, n)) {
    complain("%sdata check: %s holds 0x%02x at offset %" PRIu64 ", expected 0x%02x", side_.client ? "" : "(server) ",
             what, region[*bad], *bad, pattern_at(*bad));
    return false;
  }
  return true;
}

// After a write_bw (server) or read_bw (client) run: every slot the last size used holds the pattern.
bool Role::verify_bw(uint64_t size) {
  const uint64_t used = o_.duration ? slots(size) : std::min<uint64_t>(slots(size), o_.iters);
  for (uint32_t i = 0; i < qps_.size(); ++i) {
    uint8_t* region = o_.mode.verb == Verb::kWrite ? target(i) : local(i);
    for (uint64_t s = 0; s < used; ++s) {
      if (!verify_region(region, offset_of(s, size), size,
                         o_.mode.verb == Verb::kWrite ? "the memory the client wrote" : "the memory read"))
        return false;
    }
  }
  return true;
}

bool Role::run_bw() {
  print_bw_header(side_.out, o_.gbits);
  const uint64_t last_size = sizes().back();
  if (o_.mode.verb != Verb::kSend) {
    // write_bw and read_bw: the server's part is its memory; it waits for the client's report.
    BwReport mine, theirs;
    if (side_.client) {
      for (uint64_t size : sizes()) {
        if (!bw_client(size, mine)) return false;
        print_bw_line(side_.out, mine, o_.gbits);
      }
      std::fprintf(side_.out, "%s", kRule);
    }
    if (!session_.hand_shake(qps_[0].mine, qps_[0].theirs) || !session_.exchange_bw_reports(mine, theirs))
      return exchange_failed();
    if (!side_.client) print_bw_line(side_.out, theirs, o_.gbits);
    if (!session_.close_connection(qps_[0].mine)) return exchange_failed();
    if (!side_.client) std::fprintf(side_.out, "%s", kRule);
    const bool ours_to_check = (o_.mode.verb == Verb::kWrite) != side_.client;
    return !o_.verify || !ours_to_check || verify_bw(last_size);
  }
  // send_bw: both sides work, after a hand shake that says the server's receives are posted (with -a, one
  // more after each size, so the next size's receives are posted before its first SEND).
  for (uint64_t size : sizes()) {
    if (!side_.client && !post_receives(size, o_.rx_depth)) return false;
    if (!session_.hand_shake(qps_[0].mine, qps_[0].theirs)) return exchange_failed();
    BwReport mine;
    if (!(side_.client ? bw_client(size, mine) : send_server(size, mine))) return false;
    print_bw_line(side_.out, mine, o_.gbits);
    if (o_.all_sizes && !session_.hand_shake(qps_[0].mine, qps_[0].theirs)) return exchange_failed();
  }
  std::fprintf(side_.out, "%s", kRule);
  if (!session_.close_connection(qps_[0].mine)) return exchange_failed();
  return true;
}

bool Role::write_lat(uint64_t size) {
  // perftest's run_iter_lat_write: each side WRITEs `size` bytes whose last byte counts the messages, and waits
  // for the peer's count to appear in its own memory before the next; the server starts.
  uint8_t* const post_byte = local(0) + size - 1;
  const uint8_t* const poll_byte = target(0) + size - 1;
  std::vector<int64_t> posted;
  posted.reserve(o_.duration ? 0 : o_.iters);
  const auto deadline = Clock::now() + std::chrono::seconds(o_.duration);
  const uint64_t iters = o_.duration ? UINT64_MAX : o_.iters;
  uint64_t sent = 0, completed = 0, received = 0;
  const auto start = Clock::now();
  auto last_progress = start;
  const auto time_up = [&] { return o_.duration && Clock::now() >= deadline; };
  while ((sent < iters || completed < iters || received < iters) && !time_up()) {
    if (received < iters && !(sent == 0 && !side_.client)) {
      ++received;
      // The engine places the peer's WRITE in our memory; the last byte lands last (packets are in order).
      while (__atomic_load_n(poll_byte, __ATOMIC_ACQUIRE) != static_cast<uint8_t>(received)) {
        if (time_up()) break;
        if (stalled(last_progress)) return fail("the peer's WRITE did not arrive for --timeout seconds");
      }
      last_progress = Clock::now();
    }
    if (time_up()) break;
    if (sent < iters) {
      if (!o_.duration) posted.push_back(now_ns());
      *post_byte = static_cast<uint8_t>(++sent);
      if (!post_one(sent, size)) return false;
    }
    if (completed < iters) {
      if (!await_completion(last_progress, "RDMA WRITE")) return false;
      ++completed;
      last_progress = Clock::now();
    }
  }
  if (o_.duration) {
    print_lat_duration_line(side_.out, size, completed, std::chrono::duration<double>(Clock::now() - start).count(), 2);
  } else {
    print_lat_line(side_.out, size, posted, 2);
  }
  return true;
}

bool Role::read_lat(uint64_t size) {
  // perftest's run_iter_lat: one READ at a time; its round trip is the latency (no halving).
  std::vector<int64_t> posted;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::seconds(o_.duration);
  auto last_progress = start;
  uint64_t done = 0;
  while (o_.duration ? Clock::now() < deadline : done < o_.iters) {
    if (!o_.duration) posted.push_back(now_ns());
    if (!post_one(done, size)) return false;
    if (!await_completion(last_progress, "RDMA READ")) return false;
    ++done;
    last_progress = Clock::now();
  }
  if (o_.duration) {
    print_lat_duration_line(side_.out, size, done, std::chrono::duration<double>(Clock::now() - start).count(), 1);
  } else {
    print_lat_line(side_.out, size, posted, 1);
  }
  return true;
}

bool Role::send_lat(uint64_t size) {
  // perftest's run_iter_lat_send: a SEND ping-pong that the client starts; receives are reposted while more
  // messages are to come.
  QpState& q = qps_[0];
  std::vector<int64_t> posted;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::seconds(o_.duration);
  const uint64_t iters = o_.duration ? UINT64_MAX : o_.iters;
  const auto time_up = [&] { return o_.duration && Clock::now() >= deadline; };
  auto last_progress = start;
  uint64_t sent = 0, received = 0;
  NdkResult result;
  while ((sent < iters || received < iters) && !time_up()) {
    if (received < iters && !(sent == 0 && side_.client)) {
      uint32_t n = 0;
      while ((n = q.recv_cq->NdkGetCqResults(&result, 1)) == 0 && !time_up()) {
        if (stalled(last_progress)) return fail("the peer's SEND did not arrive for --timeout seconds");
      }
      if (n == 0) break;
      if (!ok(result.Status, "receive completion")) return false;
      if (result.BytesTransferred != size) {
        complain("%sreceived a %u-byte message, expected %" PRIu64 ": do both sides use the same -s?",
                 side_.client ? "" : "(server) ", result.BytesTransferred, size);
        return false;
      }
      if (o_.verify && !verify_region(target(0), 0, size, "a received SEND")) return false;
      ++received;
      last_progress = Clock::now();
      if (o_.duration || received + o_.rx_depth <= o_.iters) {
        const NdkSge sge{target(0), static_cast<uint32_t>(size), mr_->NdkGetLocalTokenFromMr()};
        if (!ok(q.qp->NdkReceive(nullptr, &sge, 1), "NdkReceive")) return false;
      }
    }
    if (sent < iters && !time_up()) {
      if (!o_.duration) posted.push_back(now_ns());
      if (!post_one(++sent, size)) return false;
      if (!await_completion(last_progress, "SEND")) return false;
    }
  }
  if (o_.duration) {
    print_lat_duration_line(side_.out, size, sent, std::chrono::duration<double>(Clock::now() - start).count(), 2);
  } else {
    print_lat_line(side_.out, size, posted, 2);
  }
  return true;
}

bool Role::run_lat() {
  if (o_.mode.verb == Verb::kRead && !side_.client) {
    // read_lat's server only serves READs: it waits in its closing hand shake until the client is done.
    if (!session_.close_connection(qps_[0].mine)) return exchange_failed();
    std::fprintf(side_.out, "%s", kRule);
    return true;
  }
  print_lat_header(side_.out, o_.duration != 0);
  uint64_t last = 0;
  for (uint64_t size : sizes()) {
    last = size;
    if (o_.mode.verb == Verb::kSend) {
      if (!post_receives(size, o_.duration ? o_.rx_depth : std::min<uint64_t>(o_.rx_depth, o_.iters)) ||
          !session_.hand_shake(qps_[0].mine, qps_[0].theirs))
        return exchange_failed();
      if (!send_lat(size)) return false;
    } else if (!(o_.mode.verb == Verb::kWrite ? write_lat(size) : read_lat(size))) {
      return false;
    }
  }
  std::fprintf(side_.out, "%s", kRule);
  // write_lat ends without a closing exchange (as perftest's); the others close it.
  if (o_.mode.verb != Verb::kWrite && !session_.close_connection(qps_[0].mine)) return exchange_failed();
  if (!o_.verify) return true;
  switch (o_.mode.verb) {
    case Verb::kWrite:
      return verify_region(target(0), 0, last - 1, "the memory the peer wrote");  // last byte: a count
    case Verb::kRead:
      return verify_region(local(0), 0, last, "the memory read");
    case Verb::kSend:
      return verify_region(target(0), 0, last, "the last SEND received");
  }
  return true;
}

bool Role::run() {
  if (!agree() || !create()) return false;
  TestDescription d;
  d.verb = o_.mode.verb;
  d.kind = o_.mode.kind;
  d.client = side_.client || !o_.bw();
  d.device = "uroce (" + side_.device + ")";
  d.qps = o_.qps;
  d.tx_depth = o_.tx_depth;
  d.rx_depth = o_.rx_depth;
  d.cq_moderation = o_.cq_mod;
  d.mtu = mtu_;
  d.gid_index = o_.gid_index;
  d.out_reads = out_reads_;
  d.exchange = o_.in_process ? "Ethernet (TCP on 127.0.0.1, both roles in this process)" : "Ethernet";
  print_description(side_.out, d);
  if (!keys_and_connect()) return false;
  return o_.bw() ? run_bw() : run_lat();
}

void Role::release() {
  for (QpState& q : qps_) {
    if (q.qp) q.qp->NdkCloseQp(nullptr, nullptr);
    if (q.send_cq) q.send_cq->NdkCloseCq(nullptr, nullptr);
    if (q.recv_cq) q.recv_cq->NdkCloseCq(nullptr, nullptr);
  }
  qps_.clear();
  if (mr_) {
    mr_->NdkDeregisterMr(nullptr, nullptr);
    mr_->NdkCloseMr(nullptr, nullptr);
    mr_ = nullptr;
  }
  if (pd_) pd_->NdkClosePd(nullptr, nullptr);
  pd_ = nullptr;
}

// The address a side announces: -x picks among the port's addresses.
std::optional<config::IpAddress> address_of(const config::PortConfig& port, const Options& o) {
  const uint32_t index = o.gid_index.value_or(0);
  if (index >= port.addresses.size()) {
    complain("-x %u: port '%s' has %zu address(es), so GID indexes 0..%zu", index, port.name.c_str(),
             port.addresses.size(), port.addresses.size() - 1);
    return std::nullopt;
  }
  return port.addresses[index];
}

// The exchange's connection: perftest's client retries nothing, so without --timeout give the server a moment.
std::optional<TcpStream> connect_exchange(const std::string& host, const Options& o, std::string& error) {
  return TcpStream::connect(host, o.tcp_port, Clock::now() + std::chrono::seconds(o.timeout ? o.timeout : 2), error);
}

std::optional<TcpStream> accept_exchange(const Options& o, const std::string& bind_address,
                                         const std::function<void()>& listening, std::string& error) {
  const Clock::time_point deadline =
      o.timeout ? Clock::now() + std::chrono::seconds(o.timeout) : Clock::time_point::max();
  return TcpStream::accept_one(bind_address, o.tcp_port, deadline, listening, error);
}

// Both roles here, on the first and the last port, with perftest's exchange over TCP on the loopback interface.
int run_in_process(const Options& o, const config::Config& cfg, Adapter* adapter) {
  const std::optional<config::IpAddress> client_ip = address_of(cfg.ports.front(), o);
  const std::optional<config::IpAddress> server_ip = address_of(cfg.ports.back(), o);
  if (!client_ip || !server_ip) return 2;
  const Clock::duration timeout = std::chrono::seconds(o.timeout);
  // The server's table would repeat the client's: it goes nowhere; its errors still reach stderr.
  FILE* quiet = std::fopen("/dev/null", "w");
  if (!quiet) return complain("cannot open /dev/null"), 1;
  const uint16_t last_engine = static_cast<uint16_t>(adapter->UroceEngineCount() - 1);
  std::atomic<bool> listening = false, server_ok = false;
  std::thread server([&] {
    std::string error;
    std::optional<TcpStream> stream = accept_exchange(
        o, "127.0.0.1", [&] { listening = true; }, error);
    listening = true;  // also on failure, so that the client stops waiting
    if (!stream) return (void)complain("(server) %s", error.c_str());
    PerftestSession session(std::move(*stream), false, timeout);
    Role role(o, Side{adapter, *server_ip, cfg.ports.back().device, false, last_engine, quiet}, session);
    server_ok = role.run();
  });
  while (!listening) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  bool client_ok = false;
  std::string error;
  if (std::optional<TcpStream> stream = connect_exchange("127.0.0.1", o, error)) {
    PerftestSession session(std::move(*stream), true, timeout);
    Role role(o, Side{adapter, *client_ip, cfg.ports.front().device, true, uint16_t{0}, stdout}, session);
    client_ok = role.run();
  } else {
    complain("%s", error.c_str());
  }
  server.join();
  std::fclose(quiet);
  return client_ok && server_ok ? 0 : 1;
}

int run_remote(const Options& o, const config::Config& cfg, std::size_t port, Adapter* adapter) {
  const std::optional<config::IpAddress> ip = address_of(cfg.ports[port], o);
  if (!ip) return 2;
  std::string error;
  std::optional<TcpStream> stream =
      o.client() ? connect_exchange(*o.host, o, error)
                 : accept_exchange(
                       o, "",
                       [] {
                         std::printf(
                             "\n************************************\n* Waiting for client to connect... *\n"
                             "************************************\n");
                         std::fflush(stdout);
                       },
                       error);
  if (!stream) return complain("%s", error.c_str()), 1;
  PerftestSession session(std::move(*stream), o.client(), std::chrono::seconds(o.timeout));
  bool ran = false;
  {
    Role role(o, Side{adapter, *ip, cfg.ports[port].device, o.client(), std::nullopt, stdout}, session);
    ran = role.run();
  }  // the QPs and their resources are closed here
  stop_polling_with_peer(*adapter, &session.stream());
  return ran ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<ConfigOptions> config_options = take_config_options(argc, argv, kTool);
  if (!config_options) return 2;
  const std::optional<Options> options = parse(argc, argv);
  if (!options) {
    std::fprintf(stderr, "usage: uroce-perf MODE [options] [HOST]; see --help\n");
    return 2;
  }
  const Options& o = *options;
  if (o.help) {
    usage(stdout);
    return 0;
  }
  // A remote peer is reached through one port; the in-process mode joins the first and the last.
  const std::optional<ToolConfig> tool = load_tool_config(*config_options, !o.in_process, kTool);
  if (!tool) return 2;
  const config::Config& cfg = tool->config;
  if (o.in_process && (cfg.ports.size() < 2 || cfg.ports.back().addresses.empty()))
    return complain("--in-process needs two ports with addresses (the client uses the first, the server the last)"), 2;
  Options run_options = o;  // the MTU offered to the peer: -m, else the configuration's
  if (!run_options.mtu) run_options.mtu = cfg.rdma.path_mtu;
  Adapter* adapter = nullptr;
  if (!ok(NdkOpenAdapter(cfg, kNdkVersion, &adapter), "NdkOpenAdapter")) return 1;
  const int status =
      o.in_process ? run_in_process(run_options, cfg, adapter) : run_remote(run_options, cfg, tool->port, adapter);
  NdkCloseAdapter(adapter);
  return status;
}
