#include "apps/perf/perf_role.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <random>
#include <thread>

#include "apps/common/tool_setup.h"

namespace uroce::apps::perf {

using namespace uroce::ndk;

namespace {

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

}  // namespace

bool Role::agree() {
  std::string peer_version;
  if (!session_.exchange_versions(peer_version) || !session_.exchange_sys_data(cycle_buffer_, cache_line_) ||
      !session_.exchange_mtu(mtu_))
    return exchange_failed();
  // perftest announces its page size as the cycle buffer; each QP gets two regions at least that large, so a peer's
  // large value alone would make us allocate and register 2 x value x QPs.
  if (cycle_buffer_ == 0 || cycle_buffer_ > (1u << 20) || cache_line_ == 0 || cache_line_ > 4096 ||
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

// perftest's create_rdma_cm_connection (-R): a hand shake that says the server is about to listen, each test QP
// connected through the CM in turn (the client retries a refused request: perftest's server starts listening
// only after that hand shake), and a hand shake once all are. READ tests offer the READ depth both ways; the
// others none (perftest's conn_param).
bool Role::connect_through_cm() {
  const PerftestDest none;
  PerftestDest ignored;
  if (!session_.hand_shake(none, ignored)) return exchange_failed();
  CmConnectParams params;
  params.inbound_read_limit = params.outbound_read_limit = o_.mode.verb == Verb::kRead ? out_reads_ : 0;
  params.timeout = step_timeout();
  params.refused_retries = static_cast<int>(step_timeout() / std::chrono::milliseconds(100));
  params.on_disconnect = &Role::on_peer_disconnect;
  params.disconnect_context = this;
  std::string error;
  for (QpState& q : qps_) {
    if (side_.client) {
      q.connector = connect_qp(*side_.adapter, *q.qp, to_sockaddr(side_.ip), *side_.cm_server, params, error);
      if (q.connector == nullptr) return fail(("connecting a test QP through the CM: " + error).c_str());
      continue;
    }
    Connector* incoming = side_.cm_listener->next(CmClock::now() + step_timeout());
    if (incoming == nullptr) return fail("the client did not ask to connect its test QPs in time");
    if (const NTSTATUS s = accept_qp(*incoming, *q.qp, params); s != STATUS_SUCCESS)
      return ok(s, "accepting a test QP's connection");  // accept_qp closed the connector
    q.connector = incoming;
  }
  if (!session_.hand_shake(none, ignored)) return exchange_failed();
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
      // With -R the CM has connected the QPs already; the keys only say where the peer's buffers are.
      for (QpState& q : qps_) {
        if (o_.rdma_cm) break;
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
  ProgressReporter progress = progress_for(size, o_.bw() ? size : 0);
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
    progress.update(total_completed, o_.duration ? 0 : iters * qps_.size());
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
  ProgressReporter progress = progress_for(size, 0);
  const auto time_up = [&] { return o_.duration && Clock::now() >= deadline; };
  while ((sent < iters || completed < iters || received < iters) && !time_up()) {
    progress.update(completed, o_.duration ? 0 : iters);
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
  ProgressReporter progress = progress_for(size, 0);
  while (o_.duration ? Clock::now() < deadline : done < o_.iters) {
    progress.update(done, o_.duration ? 0 : o_.iters);
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
  ProgressReporter progress = progress_for(size, 0);
  NdkResult result;
  while ((sent < iters || received < iters) && !time_up()) {
    progress.update(sent, o_.duration ? 0 : iters);
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
  d.exchange = o_.rdma_cm      ? "rdma_cm"
               : o_.in_process ? "Ethernet (TCP on 127.0.0.1, both roles in this process)"
                               : "Ethernet";
  print_description(side_.out, d);
  if (o_.rdma_cm && !connect_through_cm()) return false;
  if (!keys_and_connect()) return false;
  return o_.bw() ? run_bw() : run_lat();
}

void Role::release() {
  // -R: the client ends its connections (perftest's client disconnects each and waits for the answer); the
  // server gives it a moment to, then ends whatever is left. A connector holds its QP, so it closes first.
  if (!side_.client) {
    const uint32_t connected = static_cast<uint32_t>(
        std::count_if(qps_.begin(), qps_.end(), [](const QpState& q) { return q.connector != nullptr; }));
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    while (connected != 0 && peer_disconnects_.load(std::memory_order_relaxed) < connected && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (QpState& q : qps_) {
    (void)disconnect_and_close(q.connector, step_timeout());
    q.connector = nullptr;
  }
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

}  // namespace uroce::apps::perf
