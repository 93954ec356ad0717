#include "api/tests/api_players.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>

namespace uroce::ndk::testing {

bool eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + kGenerous;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

bool Completion::wait() const {
  return eventually([this] { return done.load(); });
}

Player::Player(Adapter& a, const PlayerOptions& o) : adapter(a), options(o) {
  storage_ = {static_cast<uint8_t*>(std::aligned_alloc(4096, o.buffer_size)), &std::free};
  buffer = storage_.get();
  std::memset(buffer, 0, o.buffer_size);
  const GroupAffinity affinity = adapter.UroceEngineAffinity(o.engine);
  EXPECT_EQ(adapter.NdkCreatePd(nullptr, nullptr, &pd), STATUS_SUCCESS);
  EXPECT_EQ(adapter.NdkCreateCq(o.cq_depth, &Notifications::callback, &notifications,
                                o.cq_affinity ? &affinity : nullptr, nullptr, nullptr, &cq),
            STATUS_SUCCESS);
  EXPECT_EQ(pd->NdkCreateMr(false, nullptr, nullptr, &mr), STATUS_SUCCESS);
  EXPECT_EQ(mr->NdkRegisterMr(buffer, o.buffer_size, o.mr_flags, nullptr, nullptr), STATUS_SUCCESS);
  const NTSTATUS s = o.srq != nullptr ? pd->NdkCreateQpWithSrq(cq, cq, o.srq, this, o.send_depth, o.max_sge,
                                                               o.inline_size, nullptr, nullptr, &qp)
                                      : pd->NdkCreateQp(cq, cq, this, o.receive_depth, o.send_depth, o.max_sge,
                                                        o.max_sge, o.inline_size, nullptr, nullptr, &qp);
  EXPECT_EQ(s, STATUS_SUCCESS);
}

Player::~Player() {
  if (qp != nullptr) {
    EXPECT_EQ(qp->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS);
  }
  if (mr != nullptr) {
    EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
  }
  if (cq != nullptr) {
    EXPECT_EQ(cq->NdkCloseCq(nullptr, nullptr), STATUS_SUCCESS);
  }
  if (pd != nullptr) {
    EXPECT_EQ(pd->NdkClosePd(nullptr, nullptr), STATUS_SUCCESS);
  }
}

sockaddr_in Player::ip() const {
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(options.engine == 0 ? 0xC6120001u : 0xC6120002u);  // 198.18.0.1 / .2
  return in;
}

sockaddr_in6 Player::ip6() const {
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  EXPECT_EQ(inet_pton(AF_INET6, options.engine == 0 ? "fd00::1" : "fd00::2", &in6.sin6_addr), 1);
  return in6;
}

NTSTATUS Player::receive(std::size_t offset, uint32_t length, uintptr_t context) {
  const NdkSge s = sge(offset, length);
  return qp->NdkReceive(reinterpret_cast<void*>(context), &s, length != 0 ? 1 : 0);
}

NTSTATUS Player::send(std::size_t offset, uint32_t length, uintptr_t context, uint32_t flags) {
  const NdkSge s = sge(offset, length);
  return qp->NdkSend(reinterpret_cast<void*>(context), &s, length != 0 ? 1 : 0, flags);
}

NTSTATUS Player::write(Player& to, std::size_t offset, std::size_t remote_offset, uint32_t length, uintptr_t context,
                       uint32_t flags) {
  const NdkSge s = sge(offset, length);
  return qp->NdkWrite(reinterpret_cast<void*>(context), &s, 1, to.address(remote_offset), to.token(), flags);
}

NTSTATUS Player::read(Player& from, std::size_t offset, std::size_t remote_offset, uint32_t length, uintptr_t context,
                      uint32_t flags) {
  const NdkSge s = sge(offset, length);
  return qp->NdkRead(reinterpret_cast<void*>(context), &s, 1, from.address(remote_offset), from.token(), flags);
}

std::vector<NdkResultEx> Player::results(std::size_t n) {
  std::vector<NdkResultEx> out(n);
  std::size_t got = 0;
  EXPECT_TRUE(eventually([&] {
    got += cq->NdkGetCqResultsEx(out.data() + got, static_cast<uint32_t>(n - got));
    return got == n;
  })) << "got "
      << got << " of " << n << " completions";
  out.resize(got);
  return out;
}

std::vector<NdkResult> Player::plain_results(std::size_t n) {
  std::vector<NdkResult> out(n);
  std::size_t got = 0;
  EXPECT_TRUE(eventually([&] {
    got += cq->NdkGetCqResults(out.data() + got, static_cast<uint32_t>(n - got));
    return got == n;
  })) << "got "
      << got << " of " << n << " completions";
  out.resize(got);
  return out;
}

std::vector<NdkResultEx> Player::drain() {
  std::vector<NdkResultEx> out(256);
  out.resize(cq->NdkGetCqResultsEx(out.data(), static_cast<uint32_t>(out.size())));
  return out;
}

void Player::fill(std::size_t offset, std::size_t length, uint8_t seed) {
  for (std::size_t i = 0; i < length; ++i)
    buffer[offset + i] = static_cast<uint8_t>(i * 131 + std::size_t{seed} * 7 + (i >> 9));
}

void connect(Player& a, Player& b, uint32_t path_mtu) {
  std::mt19937 rng(a.qp->UroceGetQpNumber());
  const uint32_t psn_a = rng() & 0xFFFFFF;
  const uint32_t psn_b = rng() & 0xFFFFFF;
  for (auto [self, peer, self_psn, peer_psn] : {std::tuple{&a, &b, psn_a, psn_b}, std::tuple{&b, &a, psn_b, psn_a}}) {
    const sockaddr_in local = self->ip();
    const sockaddr_in remote = peer->ip();
    UroceConnectAttributes attrs;
    attrs.LocalAddress = reinterpret_cast<const sockaddr*>(&local);
    attrs.RemoteAddress = reinterpret_cast<const sockaddr*>(&remote);
    attrs.RemoteQpNumber = peer->qp->UroceGetQpNumber();
    attrs.RemotePsn = peer_psn;
    attrs.LocalPsn = self_psn;
    attrs.PathMtu = path_mtu;
    ASSERT_EQ(self->qp->UroceConnect(attrs, nullptr, nullptr), STATUS_SUCCESS);
  }
}

void traffic(Player& a, Player& b, int n, uint32_t length) {
  const std::size_t half = b.options.buffer_size / 2;
  for (int i = 0; i < n; ++i) {
    a.fill(0, length, static_cast<uint8_t>(i));
    ASSERT_EQ(b.receive(half, length, 1000 + static_cast<uintptr_t>(i)), STATUS_SUCCESS);
    ASSERT_EQ(a.send(0, length, 2000 + static_cast<uintptr_t>(i)), STATUS_SUCCESS);
    const NdkResultEx sent = a.result();
    const NdkResultEx received = b.result();
    ASSERT_EQ(sent.Status, STATUS_SUCCESS);
    ASSERT_EQ(sent.Type, NdkOperationTypeSend);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(sent.RequestContext), 2000u + static_cast<uintptr_t>(i));
    ASSERT_EQ(received.Status, STATUS_SUCCESS);
    ASSERT_EQ(received.Type, NdkOperationTypeReceive);
    ASSERT_EQ(received.BytesTransferred, length);
    ASSERT_EQ(received.QPContext, &b);
    ASSERT_EQ(std::memcmp(a.buffer, b.buffer + half, length), 0);
  }
}

// ------------------------------------------------------------------------------------------------ ApiTest

Adapter* ApiTest::shared_adapter = nullptr;

config::Config api_test_config() {
  config::Config c = dataplane::testing::loopback_config();
  for (auto& p : c.ports) p.mtu = 4200;  // every PMTU up to 4096 fits (MTU >= PMTU + 80)
  // ~1 s before a retry (4.096 us * 2^18), 7 retries: an engine starved for seconds on a loaded 2-CPU machine
  // (the ASan suite beside the fuzzers) must not exhaust a QP's retries and flush its work (STYLE.md 17).
  c.rdma.ack_timeout = 18;
  // A listener holds 1000 connections at once (connection_test.cc), each with a QP on both engines; a closed QP's
  // number then waits out its time-wait (dataplane/rc_transport.h) while later tests take fresh ones.
  c.engine.max_qps_per_engine = 2048;
  return c;
}

void ApiTest::SetUpTestSuite() {
  ASSERT_EQ(NdkOpenAdapter(api_test_config(), NdkVersion{1, 2}, &shared_adapter), STATUS_SUCCESS);
}

void ApiTest::TearDownTestSuite() {
  if (shared_adapter != nullptr) NdkCloseAdapter(shared_adapter);
  shared_adapter = nullptr;
}

Player& ApiTest::player(PlayerOptions options) {
  players_.push_back(std::make_unique<Player>(*shared_adapter, options));
  return *players_.back();
}

std::pair<Player*, Player*> ApiTest::pair(PlayerOptions a, PlayerOptions b) {
  a.engine = 0;
  b.engine = 1;
  Player& pa = player(a);
  Player& pb = player(b);
  connect(pa, pb);
  return {&pa, &pb};
}

void ApiTest::TearDown() {
  while (!players_.empty()) players_.pop_back();
}

// CPU time (user + system, in clock ticks) of this process's threads named `name` (/proc/self/task/*/comm).
std::optional<uint64_t> thread_cpu_ticks(std::string_view name) {
  std::optional<uint64_t> ticks;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (!std::getline(comm, line) || line != name) continue;
    std::ifstream stat_file(task.path() / "stat");
    std::string stat;
    std::getline(stat_file, stat);
    // After the ")" that ends the command: state is field 3, utime and stime are fields 14 and 15.
    std::istringstream fields(stat.substr(stat.rfind(')') + 2));
    std::vector<std::string> f{std::istream_iterator<std::string>(fields), std::istream_iterator<std::string>()};
    if (f.size() < 13) continue;
    ticks = ticks.value_or(0) + std::stoull(f[11]) + std::stoull(f[12]);
  }
  return ticks;
}

}  // namespace uroce::ndk::testing
