// One role (client or server) of a uroce-perf run: perftest's tests from the first exchange step to the last,
// posting what perftest's run_iter_* functions post, where in the peer's buffer, with the hand shakes between
// phases, and printing perftest's table.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sys/socket.h>

#include "api/ndk.h"
#include "apps/common/cm_connection.h"
#include "apps/common/progress.h"
#include "apps/perf/perf_options.h"
#include "apps/perf/perf_report.h"
#include "apps/perf/perftest_exchange.h"
#include "config/config.h"

namespace uroce::apps::perf {

// Where a side's roles live: the adapter, its address, and the engines its CQs go to.
struct Side {
  ndk::Adapter* adapter = nullptr;
  config::IpAddress ip;
  std::string device;
  bool client = true;
  std::optional<uint16_t> engine;  // all CQs on this engine; none: QP i on engine i % count
  FILE* out = stdout;              // the table
  // With -R, how the test's QPs are connected: the client connects to the server's CM address (its exchange
  // port), the server takes the requests that reach its listener.
  std::optional<sockaddr_storage> cm_server;
  CmListener* cm_listener = nullptr;
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
    ndk::Cq* send_cq = nullptr;
    ndk::Cq* recv_cq = nullptr;
    ndk::Qp* qp = nullptr;
    ndk::Connector* connector = nullptr;  // -R
    PerftestDest mine, theirs;
  };

  bool fail(const char* what) {
    complain("%s%s", side_.client ? "" : "(server) ", what);
    return false;
  }
  bool exchange_failed() { return fail(session_.error().c_str()); }

  bool agree();
  bool create();
  bool connect_through_cm();
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
  static void on_peer_disconnect(void* context) {
    static_cast<Role*>(context)->peer_disconnects_.fetch_add(1, std::memory_order_relaxed);
  }
  // How long a connection step may take: --timeout, else a minute (perftest waits forever, but a CM exchange
  // that has not finished in a minute never will).
  [[nodiscard]] std::chrono::milliseconds step_timeout() const {
    return std::chrono::seconds(o_.timeout ? o_.timeout : 60);
  }

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
  // The client's progress line for one size (--progress; the server's table is the client's too, so it stays
  // quiet). bytes_per_message 0: no bandwidth in the line (the latency tests).
  [[nodiscard]] ProgressReporter progress_for(uint64_t size, uint64_t bytes_per_message) const {
    return {kTool, side_.client ? o_.progress : std::chrono::seconds(0),
            std::to_string(size) + "-byte " + std::string(o_.mode.name) + " messages", bytes_per_message};
  }
  // A no-progress watchdog for --timeout.
  [[nodiscard]] bool stalled(Clock::time_point last_progress) const {
    return o_.timeout && Clock::now() - last_progress > std::chrono::seconds(o_.timeout);
  }
  ndk::NTSTATUS post(uint32_t qp, uint64_t context, uint64_t size, uint64_t offset, bool signalled);
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
  ndk::Pd* pd_ = nullptr;
  ndk::Mr* mr_ = nullptr;
  std::vector<QpState> qps_;
  std::atomic<uint32_t> peer_disconnects_{0};  // -R: the peer ended a test QP's connection (notifier thread)
};

}  // namespace uroce::apps::perf
