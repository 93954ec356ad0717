// One end of a two-process RC test over net_memif: each process runs its own EAL
// and one engine, the two meet on a memif socket, resolve each other with ARP, and
// swap QP attributes out of band through files (as perftest does over TCP).
//
//   rc_memif_peer server|client --socket PATH --exchange DIR --mtu 1024|4096
//
// The client WRITEs a pattern into the server's buffer, READs it back and compares,
// at sizes 0, 1, PMTU-1, PMTU, PMTU+1 and 1 MiB, SENDs the same sizes, which the
// server receives and checks byte for byte, and runs FETCH_ADD and COMPARE_SWAP on a
// word of the server's, which the server checks. Each side exits 0 only if everything
// matched; the server prints its counters.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <unistd.h>

#include "dataplane/rc_transport.h"
#include "dataplane/tests/file_exchange.h"
#include "dataplane/tests/rc_players.h"

using namespace uroce;
using namespace uroce::dataplane;
using namespace uroce::dataplane::testing;

namespace {

struct Args {
  bool server = false;
  std::string socket, exchange;
  uint32_t mtu = 1024;
};

bool parse_args(int argc, char** argv, Args& a) {
  if (argc < 2) return false;
  a.server = std::string(argv[1]) == "server";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--socket") {
      a.socket = v;
    } else if (k == "--exchange") {
      a.exchange = v;
    } else if (k == "--mtu") {
      a.mtu = static_cast<uint32_t>(std::stoul(v));
    } else {
      return false;
    }
  }
  return !a.socket.empty() && !a.exchange.empty();
}

config::Config memif_config(const Args& a) {
  config::Config c;
  c.eal.lcores = {test_engine_cpus()[a.server ? 0 : 1]};  // two CPUs if the process may use two
  c.eal.hugepages = config::HugePages::kOff;
  c.eal.memory_mb = 256;
  c.eal.file_prefix = std::string("uroce-memif-") + (a.server ? "s" : "c") + std::to_string(getpid());
  c.engine.idle = config::IdlePolicy::kBackoff;
  c.engine.mbufs_per_engine = 4095;
  c.engine.mbuf_cache = 64;
  c.engine.max_qps_per_engine = 16;
  config::PortConfig p;
  p.name = "m";
  // bsize 8192: a 4 KiB-PMTU frame fits one memif buffer (dpdk-env.md §4).
  p.device = std::string("net_memif0,role=") + (a.server ? "server" : "client") + ",socket=" + a.socket +
             ",socket-abstract=no,bsize=8192";
  p.mac = config::MacAddress{0x02, 0, 0, 0, 1, static_cast<uint8_t>(a.server ? 1 : 2)};
  p.addresses = {ipv4(198, 18, 1, a.server ? 1 : 2)};
  c.ports = {p};
  return c;
}

int fail(const std::string& what) {
  std::fprintf(stderr, "rc_memif_peer: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse_args(argc, argv, args)) return fail("usage: rc_memif_peer server|client --socket P --exchange D --mtu M");
  RcWorld world(memif_config(args));
  if (!world.ok()) return fail(world.error());
  Player me(world.transport(), 0, 0, 1);
  if (!me.error.empty()) return fail(me.error);

  // Out-of-band exchange: QPN, PSN, buffer address, R_Key.
  const std::string self = args.server ? "server" : "client", peer = args.server ? "client" : "server";
  const uint32_t psn = static_cast<uint32_t>(getpid() * 2654435761u) & 0xFFFFFF;
  *me.word() = 1000;
  write_file(args.exchange + "/" + self, std::to_string(me.qp()->qpn().value()) + " " + std::to_string(psn) + " " +
                                             std::to_string(me.remote_addr(0)) + " " +
                                             std::to_string(me.rkey().value()) + " " +
                                             std::to_string(reinterpret_cast<uint64_t>(me.word())));
  std::istringstream info(wait_file(args.exchange + "/" + peer).value_or(""));
  uint32_t peer_qpn = 0, peer_psn = 0, peer_rkey = 0;
  uint64_t peer_addr = 0, peer_word = 0;
  if (!(info >> peer_qpn >> peer_psn >> peer_addr >> peer_rkey >> peer_word)) return fail("no peer information");

  const std::vector<uint32_t> sizes = {0, 1, args.mtu - 1, args.mtu, args.mtu + 1, 1u << 20};
  if (args.server) {  // receives first, so no SEND meets an empty queue
    for (std::size_t i = 0; i < sizes.size(); ++i)
      me.post_receive(me.buffer.data() + Player::kBufferSize / 2, Player::kBufferSize / 2, i);
  }
  RcPeer remote;
  remote.qpn = proto::Qpn{peer_qpn};
  remote.psn = proto::Psn{peer_psn};
  remote.ip = ipv4(198, 18, 1, args.server ? 2 : 1);  // resolved with ARP over the memif link
  remote.path_mtu = args.mtu;
  proto::RcQpAttributes attrs;
  attrs.send_psn = proto::Psn{psn};
  attrs.path_mtu = args.mtu;
  if (const Status s = world.transport().connect(*me.qp(), remote, attrs, std::chrono::seconds(20)); !s.ok())
    return fail(s.message());
  write_file(args.exchange + "/" + self + ".ready", "1");
  if (wait_file(args.exchange + "/" + peer + ".ready") != "1") return fail("peer never became ready");

  int errors = 0;
  if (args.server) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const auto c = me.wait_receive_completion();
      if (!c || c->status != proto::CompletionStatus::kSuccess || c->byte_length != sizes[i]) {
        ++errors;
        std::fprintf(stderr, "receive %zu: %s\n", i, c ? "wrong status or length" : "timed out");
        continue;
      }
      std::vector<uint8_t> want(sizes[i]);
      fill_pattern(want, sizes[i], static_cast<uint32_t>(100 + i));
      if (!std::equal(want.begin(), want.end(), me.buffer.begin() + Player::kBufferSize / 2)) {
        ++errors;
        std::fprintf(stderr, "receive %zu: payload differs\n", i);
      }
      // Every receive lands in the same buffer: let the client send the next one only now.
      write_file(args.exchange + "/checked." + std::to_string(i), "1");
    }
    (void)wait_file(args.exchange + "/client.done");
    // The client's three FETCH_ADDs of 5 and its COMPARE_SWAP 1015 -> 7 (see below).
    if (*me.word() != 7) {
      ++errors;
      std::fprintf(stderr, "atomic target is %llu, want 7\n", static_cast<unsigned long long>(*me.word()));
    }
    write_file(args.exchange + "/server.done", std::to_string(errors));
    for (const auto& [name, value] : counter_values(world.dataplane().engine(0).counters()))
      if (value != 0) std::printf("%s=%llu ", name.c_str(), static_cast<unsigned long long>(value));
    std::printf("\n");
  } else {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const uint32_t n = sizes[i];
      fill_pattern(me.buffer, n, static_cast<uint32_t>(i + 1));
      auto w = me.send(proto::WorkOp::kRdmaWrite, 0, n, 1);
      w.remote_addr = peer_addr;
      w.rkey = proto::RemoteToken{peer_rkey};
      me.post(w);
      auto r = me.send(proto::WorkOp::kRdmaRead, Player::kBufferSize / 2, n, 2);
      r.remote_addr = peer_addr;
      r.rkey = proto::RemoteToken{peer_rkey};
      me.post(r);
      for (int k = 0; k < 2; ++k) {
        const auto c = me.wait_send_completion();
        if (!c || c->status != proto::CompletionStatus::kSuccess) ++errors;
      }
      if (std::memcmp(me.buffer.data(), me.buffer.data() + Player::kBufferSize / 2, n) != 0) {
        ++errors;
        std::fprintf(stderr, "size %u: READ back differs from WRITE\n", n);
      }
      fill_pattern(me.buffer, n, static_cast<uint32_t>(100 + i));
      me.post(me.send(proto::WorkOp::kSend, 0, n, 3));
      const auto c = me.wait_send_completion();
      if (!c || c->status != proto::CompletionStatus::kSuccess) ++errors;
      if (wait_file(args.exchange + "/checked." + std::to_string(i)) != "1") ++errors;
    }
    for (std::size_t k = 0; k < 4; ++k) {
      auto atomic = me.send(k < 3 ? proto::WorkOp::kFetchAdd : proto::WorkOp::kCompareSwap, 64 + 8 * k, 8, 4);
      atomic.remote_addr = peer_word;
      atomic.rkey = proto::RemoteToken{peer_rkey};
      atomic.compare_add = k < 3 ? 5 : 1015;
      atomic.swap = 7;
      me.post(atomic);
      const auto c = me.wait_send_completion();
      uint64_t original = 0;
      std::memcpy(&original, me.buffer.data() + 64 + 8 * k, 8);
      if (!c || c->status != proto::CompletionStatus::kSuccess || original != 1000u + 5u * k) {
        ++errors;
        std::fprintf(stderr, "atomic %zu returned %llu\n", k, static_cast<unsigned long long>(original));
      }
    }
    write_file(args.exchange + "/client.done", std::to_string(errors));
    const std::string server_errors = wait_file(args.exchange + "/server.done").value_or("timed out");
    if (server_errors != "0") ++errors;
  }
  // Both sides are idle now: stop in order (memif misbehaves if a peer vanishes mid-burst).
  me.release();
  std::printf("%s mtu %u: %s\n", self.c_str(), args.mtu, errors == 0 ? "ok" : "FAILED");
  return errors == 0 ? 0 : 1;
}
