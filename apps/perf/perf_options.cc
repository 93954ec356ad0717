#include "apps/perf/perf_options.h"

#include <algorithm>
#include <cinttypes>
#include <cstdarg>

#include "apps/common/progress.h"
#include "apps/common/tool_setup.h"

namespace uroce::apps::perf {

using namespace uroce::ndk;

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
               "  -p N                    port of the exchange (TCP, or the CM's with -R; default 18515;\n"
               "                          perftest's --port is -p only here, since --port names the configured port)\n"
               "  -t, --tx-depth N        requests kept outstanding (default 128 for *_bw, 1 for *_lat)\n"
               "  -r, --rx-depth N        receives kept posted (default 512 for send tests)\n"
               "  -Q, --cq-mod N          a completion every N requests (default 100; 1 above 8 KiB unless given)\n"
               "  -o, --outs N            READs the peer may keep outstanding towards us (default: the adapter's\n"
               "                          rdma.max_dest_rd_atomic)\n"
               "  -u, --qp-timeout N      ACK timeout, 4.096 us * 2^N (default 14)\n"
               "  -R, --rdma_cm           connect the QPs through the connection manager, as perftest's -R: the\n"
               "                          exchange then runs over a connection of its own (RDMA SENDs), also\n"
               "                          made through the CM, on port -p, and no TCP is used\n"
               "  -N, --noPeak            do not compute the peak bandwidth (always off above 20000 messages in all)\n"
               "  -F, --CPU-freq          accepted for perftest's sake; uroce-perf times with the steady clock\n"
               "      --report_gbits      report Gb/s instead of MB/s\n"
               "uroce options:\n"
               "      --in-process        both roles in this process (see above); checks every received byte\n"
               "      --verify            the peer is uroce-perf too: check the data received (or read) against\n"
               "                          the pattern uroce-perf sends (perftest's own buffers are random)\n"
               "      --timeout SECONDS   give up when the peer does not answer, or the test makes no progress,\n"
               "                          for this long (default 0: wait forever, as perftest does)\n"
               "%s"
               "  -h, --help\n"
               "%s",
               kProgressOptionHelp, kConfigOptionsHelp);
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
  std::optional<std::chrono::seconds> progress;
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
    } else if (is("-R", "--rdma_cm")) {
      o.rdma_cm = true;
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
    } else if (is("--progress", "")) {
      if (!(v = number(0, 86400))) return std::nullopt;
      progress = std::chrono::seconds(*v);
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
  // The peak pairs every post with every later completion (as perftest does): quadratic in the messages of all QPs.
  if (o.duration || (o.bw() && uint64_t{o.iters} * o.qps > 20000)) o.no_peak = true;
  if (o.in_process) o.verify = true;
  o.progress = progress.value_or(default_progress_interval());
  return o;
}

bool ok(NTSTATUS s, const char* what) {
  if (s == STATUS_SUCCESS) return true;
  return complain("%s failed: %s (0x%08x)", what, NdkStatusName(s), static_cast<unsigned>(s));
}

}  // namespace uroce::apps::perf
