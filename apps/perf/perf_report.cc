#include "apps/perf/perf_report.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>

namespace uroce::apps::perf {

namespace {

const char* verb_name(Verb v) {
  switch (v) {
    case Verb::kSend:
      return "Send";
    case Verb::kWrite:
      return "RDMA_Write";
    case Verb::kRead:
      return "RDMA_Read";
  }
  return "?";
}

}  // namespace

void print_description(FILE* out, const TestDescription& d) {
  std::fprintf(out, "%s", kRule);
  std::fprintf(out, "                    %s %s Test\n", verb_name(d.verb),
               d.kind == TestKind::kBandwidth ? "BW" : "Latency");
  std::fprintf(out, " Dual-port       : OFF\t\tDevice         : %s\n", d.device.c_str());
  std::fprintf(out, " Number of qps   : %u\t\tTransport type : IB\n", d.qps);
  std::fprintf(out, " Connection type : RC\t\tUsing SRQ      : OFF\n");
  if (d.client) std::fprintf(out, " TX depth        : %u\n", d.tx_depth);
  if (d.verb == Verb::kSend && !d.client) std::fprintf(out, " RX depth        : %u\n", d.rx_depth);
  if (d.kind == TestKind::kBandwidth) std::fprintf(out, " CQ Moderation   : %u\n", d.cq_moderation);
  std::fprintf(out, " Mtu             : %u[B]\n", d.mtu);
  std::fprintf(out, " Link type       : Ethernet\n");
  if (d.gid_index) std::fprintf(out, " GID index       : %u\n", *d.gid_index);
  if (d.verb == Verb::kRead) {
    std::fprintf(out, " Outstand reads  : %u\n", d.out_reads);
  } else {
    std::fprintf(out, " Max inline data : 0[B]\n");
  }
  std::fprintf(out, " rdma_cm QPs\t : OFF\n");
  std::fprintf(out, " Data ex. method : %s\n", d.exchange.c_str());
  std::fprintf(out, "%s", kRule);
}

void print_dest(FILE* out, bool local, Verb verb, const PerftestDest& dest) {
  std::fprintf(out, " %s address: LID %#04x QPN %#06x PSN %#06x", local ? "local" : "remote", dest.lid, dest.qpn,
               dest.psn);
  if (verb == Verb::kRead) std::fprintf(out, " OUT %#04x", dest.out_reads);
  if (verb != Verb::kSend) std::fprintf(out, " RKey %#08x VAddr %#016" PRIx64, dest.rkey, dest.vaddr);
  std::fprintf(out, "\n GID:");
  // perftest prints the GID bytes in decimal.
  for (std::size_t i = 0; i < dest.gid.size(); ++i) std::fprintf(out, "%s%02d", i ? ":" : " ", dest.gid[i]);
  std::fprintf(out, "\n");
}

void print_bw_header(FILE* out, bool gbits) {
  const char* unit = gbits ? "Gb/sec" : "MB/sec";
  std::fprintf(out, "%s", kRule);
  std::fprintf(out, " #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]\n", unit, unit);
}

void print_bw_line(FILE* out, const BwReport& r, bool gbits) {
  // perftest switches to six decimals when a Gb/s average would otherwise print as 0.0x.
  if (gbits && r.bw_avg < 0.1) {
    std::fprintf(out, " %-7" PRIu64 "    %" PRIu64 "           %-7.6f            %-7.6f            %-7.6f\n", r.size,
                 r.iters, r.bw_peak, r.bw_avg, r.msg_rate);
  } else {
    std::fprintf(out, " %-7" PRIu64 "    %-10" PRIu64 "       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.size, r.iters,
                 r.bw_peak, r.bw_avg, r.msg_rate);
  }
  std::fflush(out);
}

BwReport bw_report(uint64_t size, uint64_t messages, const BwTimes& t, bool gbits, bool peak) {
  const double unit = gbits ? 125e6 : 1048576.0;  // bytes per second in one Gb/s, or one MB/s
  BwReport r;
  r.size = size;
  r.iters = messages;
  const double seconds = static_cast<double>(t.last_ns - t.first_ns) / 1e9;
  if (seconds > 0) {
    r.bw_avg = static_cast<double>(size * messages) / seconds / unit;
    r.msg_rate = static_cast<double>(messages) / seconds / 1e6;
  }
  if (peak && !t.posted_ns.empty()) {
    double best_ns_per_message = 0;
    for (std::size_t i = 0; i < t.posted_ns.size(); ++i) {
      for (const auto& [done, when] : t.completed_ns) {
        if (done <= i) continue;
        const double per = static_cast<double>(when - t.posted_ns[i]) / static_cast<double>(done - i);
        if (per > 0 && (best_ns_per_message == 0 || per < best_ns_per_message)) best_ns_per_message = per;
      }
    }
    if (best_ns_per_message > 0) r.bw_peak = static_cast<double>(size) * 1e9 / best_ns_per_message / unit;
  }
  return r;
}

void print_lat_header(FILE* out, bool duration) {
  std::fprintf(out, "%s", kRule);
  if (duration) {
    std::fprintf(out, " #bytes        #iterations       t_avg[usec]    tps average\n");
  } else {
    std::fprintf(out,
                 " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   "
                 "99%% percentile[usec]   99.9%% percentile[usec] \n");
  }
}

void print_lat_line(FILE* out, uint64_t size, const std::vector<int64_t>& posted_ns, int rtt_factor) {
  const uint64_t iterations = posted_ns.size();
  std::vector<double> us;
  for (std::size_t i = 1; i < posted_ns.size(); ++i)
    us.push_back(static_cast<double>(posted_ns[i] - posted_ns[i - 1]) / 1e3 / rtt_factor);
  std::sort(us.begin(), us.end());
  // perftest drops the two largest samples and takes max as the next one up (so it needs 5+ iterations).
  const std::size_t n = us.size() >= 3 ? us.size() - 2 : us.size();
  if (n == 0) {
    std::fprintf(out, " %-7" PRIu64 " %" PRIu64 " (too few iterations for latency figures)\n", size, iterations);
    return;
  }
  const double median = n % 2 == 0 ? (us[n / 2] + us[n / 2 - 1]) / 2 : us[n / 2];
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += us[i];
  const double avg = sum / static_cast<double>(n);
  double var = 0;
  for (std::size_t i = 0; i < n; ++i) var += (us[i] - avg) * (us[i] - avg);
  const auto at = [&](double q) { return us[std::min(us.size() - 1, static_cast<std::size_t>(std::ceil(n * q)))]; };
  std::fprintf(out,
               " %-7" PRIu64 " %" PRIu64
               "          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f "
               "\t\t%-7.2f\n",
               size, iterations, us[0], us[std::min(n, us.size() - 1)], median, avg,
               std::sqrt(var / static_cast<double>(n)), at(0.99), at(0.999));
  std::fflush(out);
}

void print_lat_duration_line(FILE* out, uint64_t size, uint64_t iterations, double seconds, int rtt_factor) {
  const double avg_us = iterations ? seconds * 1e6 / rtt_factor / static_cast<double>(iterations) : 0;
  const double tps = seconds > 0 ? static_cast<double>(iterations) / seconds : 0;
  std::fprintf(out, " %-7" PRIu64 "       %" PRIu64 "            %-7.2f        %-7.2f\n", size, iterations, avg_us,
               tps);
  std::fflush(out);
}

}  // namespace uroce::apps::perf
