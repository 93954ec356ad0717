// uroce-perf: perftest-style RDMA bandwidth runs on uroce, built on the public API
// (api/ndk.h) only.
//
// This first mode is the README's main job: write_bw between two uroce endpoints in
// one process, joined by the DPDK virtual devices of the configuration (the embedded
// default: two engines, ports a and b on an in-process ring link). The client QP lives
// on the first engine and port, the server QP on the last engine and port, so every
// packet crosses the virtual wire, the engines and the redirect rings. The table is
// perftest's (ib_write_bw), so numbers read the same way. perftest's TCP exchange for
// a remote peer, and the other modes, are the next step.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "api/ndk.h"
#include "config/config.h"

using namespace uroce;
using namespace uroce::ndk;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string mode = "write_bw";
  std::string config_path;
  uint64_t size = 65536;
  uint64_t iterations = 5000;
  double duration = 0;  // -D: seconds; 0 = iteration count
  bool all_sizes = false;
  bool report_gbits = false;
  uint32_t mtu = 0;  // 0: the config's rdma.path_mtu
  uint32_t tx_depth = 128;
  uint32_t cq_moderation = 100;
};

void usage(FILE* out) {
  std::fprintf(out,
               "usage: uroce-perf write_bw [options]\n"
               "  Runs an RDMA WRITE bandwidth test between two uroce endpoints in this process, over the\n"
               "  DPDK virtual devices of the configuration (default: the embedded one, two engines joined by\n"
               "  an in-process ring link), and prints perftest's ib_write_bw table.\n"
               "options (perftest's names):\n"
               "  -s, --size BYTES        message size (default 65536)\n"
               "  -n, --iters N           messages per size (default 5000)\n"
               "  -D, --duration SECONDS  run for a time instead of a count, with a line per second\n"
               "  -a, --all               every size from 2 to 8 MiB in powers of two\n"
               "  -m, --mtu BYTES         path MTU: 256, 512, 1024, 2048 or 4096 (default: the config's)\n"
               "  -t, --tx-depth N        WRITEs kept outstanding (default 128)\n"
               "  -Q, --cq-mod N          a completion every N WRITEs (default 100)\n"
               "      --report_gbits      report Gb/s instead of MB/s\n"
               "      --config FILE       YAML configuration (config/README.md) instead of the embedded default\n"
               "  -h, --help\n");
}

std::optional<Options> parse(int argc, char** argv) {
  Options o;
  int i = 1;
  if (i < argc && argv[i][0] != '-') o.mode = argv[i++];
  auto number = [&](const char* name) -> std::optional<uint64_t> {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "uroce-perf: %s needs a value\n", name);
      return std::nullopt;
    }
    char* end = nullptr;
    const uint64_t v = std::strtoull(argv[++i], &end, 0);
    if (end == argv[i] || *end != '\0') {
      std::fprintf(stderr, "uroce-perf: %s: '%s' is not a number\n", name, argv[i]);
      return std::nullopt;
    }
    return v;
  };
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    std::optional<uint64_t> v;
    if (a == "-h" || a == "--help") {
      usage(stdout);
      std::exit(0);
    } else if (a == "-a" || a == "--all") {
      o.all_sizes = true;
    } else if (a == "--report_gbits") {
      o.report_gbits = true;
    } else if (a == "--config") {
      if (i + 1 >= argc) return std::nullopt;
      o.config_path = argv[++i];
    } else if (a == "-s" || a == "--size") {
      if (!(v = number("-s"))) return std::nullopt;
      o.size = *v;
    } else if (a == "-n" || a == "--iters") {
      if (!(v = number("-n"))) return std::nullopt;
      o.iterations = *v;
    } else if (a == "-D" || a == "--duration") {
      if (!(v = number("-D"))) return std::nullopt;
      o.duration = static_cast<double>(*v);
    } else if (a == "-m" || a == "--mtu") {
      if (!(v = number("-m"))) return std::nullopt;
      o.mtu = static_cast<uint32_t>(*v);
    } else if (a == "-t" || a == "--tx-depth") {
      if (!(v = number("-t"))) return std::nullopt;
      o.tx_depth = static_cast<uint32_t>(*v);
    } else if (a == "-Q" || a == "--cq-mod") {
      if (!(v = number("-Q"))) return std::nullopt;
      o.cq_moderation = static_cast<uint32_t>(*v);
    } else {
      std::fprintf(stderr, "uroce-perf: unknown option '%s' (see --help)\n", a.c_str());
      return std::nullopt;
    }
  }
  if (o.mode != "write_bw") {
    std::fprintf(stderr, "uroce-perf: mode '%s' is not available yet; this build has write_bw\n", o.mode.c_str());
    return std::nullopt;
  }
  if (o.size == 0 || o.size > (8u << 20) || o.iterations == 0 || o.tx_depth == 0 || o.tx_depth > 4096 ||
      o.cq_moderation == 0 || o.cq_moderation > o.tx_depth) {
    std::fprintf(stderr,
                 "uroce-perf: need 1 <= size <= 8 MiB, iterations >= 1, 1 <= tx-depth <= 4096 and "
                 "1 <= cq-mod <= tx-depth\n");
    return std::nullopt;
  }
  return o;
}

// Fails loudly: an NTSTATUS from a control call the tool cannot do without.
bool ok(NTSTATUS s, const char* what) {
  if (s == STATUS_SUCCESS) return true;
  std::fprintf(stderr, "uroce-perf: %s failed: NTSTATUS 0x%08x\n", what, static_cast<unsigned>(s));
  return false;
}

sockaddr_storage to_sockaddr(const config::IpAddress& ip) {
  sockaddr_storage s{};
  if (ip.is_v6) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&s);
    v6->sin6_family = AF_INET6;
    std::memcpy(&v6->sin6_addr, ip.bytes.data(), 16);
  } else {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&s);
    v4->sin_family = AF_INET;
    std::memcpy(&v4->sin_addr, ip.bytes.data(), 4);
  }
  return s;
}

std::string gid_text(const config::IpAddress& ip) {
  uint8_t gid[16] = {};
  if (ip.is_v6) {
    std::memcpy(gid, ip.bytes.data(), 16);
  } else {
    gid[10] = gid[11] = 0xFF;
    std::memcpy(gid + 12, ip.bytes.data(), 4);
  }
  std::string s;
  char b[8];
  for (int i = 0; i < 16; ++i) {
    std::snprintf(b, sizeof b, i ? ":%02d" : "%02d", gid[i]);
    s += b;
  }
  return s;
}

// One side of the test: a CQ on its engine, a PD, a registered buffer, a QP.
struct Endpoint {
  Cq* cq = nullptr;
  Pd* pd = nullptr;
  Mr* mr = nullptr;
  Qp* qp = nullptr;
  std::vector<uint8_t> buffer;
  uint32_t psn = 0;
  config::IpAddress ip;

  bool open(Adapter& adapter, uint16_t engine, std::size_t bytes, uint32_t depth, uint32_t seed) {
    buffer.assign(bytes, static_cast<uint8_t>(seed));
    const GroupAffinity affinity = adapter.UroceEngineAffinity(engine);
    if (!ok(adapter.NdkCreateCq(depth * 2, nullptr, nullptr, &affinity, nullptr, nullptr, &cq), "NdkCreateCq") ||
        !ok(adapter.NdkCreatePd(nullptr, nullptr, &pd), "NdkCreatePd") ||
        !ok(pd->NdkCreateMr(false, nullptr, nullptr, &mr), "NdkCreateMr") ||
        !ok(mr->NdkRegisterMr(buffer.data(), buffer.size(),
                              NDK_MR_FLAG_ALLOW_REMOTE_WRITE | NDK_MR_FLAG_ALLOW_REMOTE_READ, nullptr, nullptr),
            "NdkRegisterMr") ||
        !ok(pd->NdkCreateQp(cq, cq, this, 16, depth, 1, 1, 0, nullptr, nullptr, &qp), "NdkCreateQp"))
      return false;
    psn = std::mt19937(seed)() & 0xFFFFFF;  // random starting PSNs, as perftest uses
    return true;
  }
  void close() {
    if (qp) qp->NdkCloseQp(nullptr, nullptr);
    if (mr) {
      mr->NdkDeregisterMr(nullptr, nullptr);
      mr->NdkCloseMr(nullptr, nullptr);
    }
    if (pd) pd->NdkClosePd(nullptr, nullptr);
    if (cq) cq->NdkCloseCq(nullptr, nullptr);
    qp = nullptr;
    mr = nullptr;
    pd = nullptr;
    cq = nullptr;
  }
};

bool connect(Endpoint& self, const Endpoint& peer, uint32_t mtu) {
  const sockaddr_storage local = to_sockaddr(self.ip), remote = to_sockaddr(peer.ip);
  UroceConnectAttributes a;
  a.LocalAddress = reinterpret_cast<const sockaddr*>(&local);
  a.RemoteAddress = reinterpret_cast<const sockaddr*>(&remote);
  a.RemoteQpNumber = peer.qp->UroceGetQpNumber();
  a.RemotePsn = peer.psn;
  a.LocalPsn = self.psn;
  a.PathMtu = mtu;
  return ok(self.qp->UroceConnect(a, nullptr, nullptr), "UroceConnect");
}

struct Result {
  uint64_t bytes = 0;
  uint64_t messages = 0;
  double seconds = 0;
  double peak_bytes_per_second = 0;
};

// RDMA WRITEs of `size` bytes from client to server, tx_depth outstanding, a signalled
// completion every cq_moderation WRITEs (perftest's method). Stops after `iterations`
// messages, or after `duration` seconds with a line per second.
std::optional<Result> write_bw(Endpoint& client, Endpoint& server, uint64_t size, const Options& o) {
  const NdkSge sge{client.buffer.data(), static_cast<uint32_t>(size), client.mr->NdkGetLocalTokenFromMr()};
  const uint64_t remote = reinterpret_cast<uint64_t>(server.buffer.data());
  const uint32_t rkey = server.mr->NdkGetRemoteTokenFromMr();
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(o.duration);
  uint64_t posted = 0, completed = 0;
  auto last_mark = start;
  uint64_t last_mark_completed = 0;
  Result r;
  NdkResult results[16];
  auto next_second = start + std::chrono::seconds(1);
  uint64_t second_completed = 0;
  for (;;) {
    const bool time_up = o.duration > 0 && Clock::now() >= deadline;
    const uint64_t limit = o.duration > 0 ? (time_up ? posted : UINT64_MAX) : o.iterations;
    while (posted < limit && posted - completed < o.tx_depth) {
      // The last WRITE of a run is always signalled so the run ends on a completion.
      const bool signalled = (posted + 1) % o.cq_moderation == 0 || posted + 1 == o.iterations;
      const NTSTATUS s = client.qp->NdkWrite(reinterpret_cast<void*>(posted), &sge, 1, remote, rkey,
                                             signalled ? 0 : NDK_OP_FLAG_SILENT_SUCCESS);
      if (s == STATUS_INSUFFICIENT_RESOURCES) break;  // SQ full: poll first
      if (!ok(s, "NdkWrite")) return std::nullopt;
      ++posted;
    }
    const uint32_t n = client.cq->NdkGetCqResults(results, 16);
    for (uint32_t i = 0; i < n; ++i) {
      if (!ok(results[i].Status, "RDMA WRITE completion")) return std::nullopt;
      // A signalled completion retires every WRITE up to and including it (SQ order).
      completed = reinterpret_cast<uint64_t>(results[i].RequestContext) + 1;
      const auto now = Clock::now();
      if (completed - last_mark_completed >= o.cq_moderation * 4u) {
        const double dt = std::chrono::duration<double>(now - last_mark).count();
        if (dt > 0)
          r.peak_bytes_per_second =
              std::max(r.peak_bytes_per_second, static_cast<double>((completed - last_mark_completed) * size) / dt);
        last_mark = now;
        last_mark_completed = completed;
      }
    }
    if (o.duration > 0 && Clock::now() >= next_second) {
      const double gbits = static_cast<double>((completed - second_completed) * size) * 8 / 1e9;
      std::printf(" %-10" PRIu64 " %-16" PRIu64 " %.2f Gb/sec (last second)\n", size, completed - second_completed,
                  gbits);
      second_completed = completed;
      next_second += std::chrono::seconds(1);
    }
    if (completed >= (o.duration > 0 ? (time_up ? posted : UINT64_MAX) : o.iterations)) break;
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.messages = completed;
  r.bytes = completed * size;
  if (r.peak_bytes_per_second == 0) r.peak_bytes_per_second = static_cast<double>(r.bytes) / r.seconds;
  // The last WRITE landed in the server's memory: spot-check it (the buffers differ at start).
  if (std::memcmp(server.buffer.data(), client.buffer.data(), std::min<uint64_t>(size, 4096)) != 0) {
    std::fprintf(stderr, "uroce-perf: the server's memory does not hold the written data\n");
    return std::nullopt;
  }
  return r;
}

const char* kRule = "---------------------------------------------------------------------------------------\n";

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Options> options = parse(argc, argv);
  if (!options) {
    usage(stderr);
    return 2;
  }
  const Options& o = *options;
  const config::LoadResult loaded = o.config_path.empty() ? config::load_config(config::embedded_default_yaml())
                                                          : config::load_config_file(o.config_path);
  if (!loaded.config) {
    std::fprintf(stderr, "%s", loaded.describe(o.config_path.empty() ? "<embedded default>" : o.config_path).c_str());
    return 2;
  }
  const config::Config& cfg = *loaded.config;
  if (cfg.ports.size() < 2 || cfg.ports.front().addresses.empty() || cfg.ports.back().addresses.empty()) {
    std::fprintf(stderr,
                 "uroce-perf: write_bw in one process needs two ports with addresses (the client uses the "
                 "first, the server the last)\n");
    return 2;
  }
  const uint32_t mtu = o.mtu ? o.mtu : cfg.rdma.path_mtu;

  Adapter* adapter = nullptr;
  if (!ok(NdkOpenAdapter(cfg, kNdkVersion, &adapter), "NdkOpenAdapter")) return 1;
  const uint64_t largest = o.all_sizes ? (8u << 20) : o.size;
  Endpoint client, server;
  client.ip = cfg.ports.front().addresses.front();
  server.ip = cfg.ports.back().addresses.front();
  const uint16_t last_engine = static_cast<uint16_t>(adapter->UroceEngineCount() - 1);
  int status = 0;
  if (!client.open(*adapter, 0, largest, o.tx_depth, 1) || !server.open(*adapter, last_engine, largest, 16, 2) ||
      !connect(client, server, mtu) || !connect(server, client, mtu)) {
    status = 1;
  } else {
    std::printf("%s", kRule);
    std::printf("                    RDMA_Write BW Test\n");
    std::printf(" Dual-port       : OFF\t\tDevice         : uroce (%s)\n", cfg.ports.front().device.c_str());
    std::printf(" Number of qps   : 1\t\tTransport type : IB\n");
    std::printf(" Connection type : RC\t\tUsing SRQ      : OFF\n");
    std::printf(" TX depth        : %u\n", o.tx_depth);
    std::printf(" CQ Moderation   : %u\n", o.cq_moderation);
    std::printf(" Mtu             : %u[B]\n", mtu);
    std::printf(" Link type       : Ethernet\n");
    std::printf(" Max inline data : 0[B]\n");
    std::printf(" rdma_cm QPs\t : OFF\n");
    std::printf(" Data ex. method : in process (both endpoints here, engines %u and %u)\n", 0u, last_engine);
    std::printf("%s", kRule);
    for (const Endpoint* e : {&client, &server}) {
      std::printf(" %s address: LID 0000 QPN %#06x PSN %#08x RKey %#010x VAddr %#018" PRIx64 "\n",
                  e == &client ? "local" : "remote", e->qp->UroceGetQpNumber(), e->psn,
                  e->mr->NdkGetRemoteTokenFromMr(), reinterpret_cast<uint64_t>(e->buffer.data()));
      std::printf(" GID: %s\n", gid_text(e->ip).c_str());
    }
    std::printf("%s", kRule);
    const char* unit = o.report_gbits ? "Gb/sec" : "MB/sec";
    std::printf(" #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]\n", unit, unit);
    for (uint64_t size = o.all_sizes ? 2 : o.size; size <= largest; size *= 2) {
      for (uint64_t i = 0; i < size; ++i) client.buffer[i] = static_cast<uint8_t>(i * 7 + size);
      const std::optional<Result> r = write_bw(client, server, size, o);
      if (!r) {
        status = 1;
        break;
      }
      const double scale = o.report_gbits ? 8.0 / 1e9 : 1.0 / (1 << 20);
      std::printf(" %-10" PRIu64 " %-16" PRIu64 " %-18.2f %-20.2f %.6f\n", size, r->messages,
                  r->peak_bytes_per_second * scale, static_cast<double>(r->bytes) / r->seconds * scale,
                  static_cast<double>(r->messages) / r->seconds / 1e6);
      if (!o.all_sizes) break;
    }
    std::printf("%s", kRule);
  }
  client.close();
  server.close();
  NdkCloseAdapter(adapter);
  return status;
}
