// rdma-core-style players for the API tests (STYLE.md §12), end to end through the engines: a Player is
// {pd, cq, mr, qp} plus a buffer and a notification recorder; connect(a, b) joins two players out of band;
// traffic(a, b, n) sends n messages a -> b and checks them. The adapter runs the dataplane's loopback config
// (two engines, ports a and b on ring link "ab"); player A sits on engine 0 and port a, player B on engine 1
// and port b, so every packet to B crosses the redirect ring.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include <arpa/inet.h>

#include "api/ndk.h"
#include "dataplane/tests/loopback_fixture.h"

namespace uroce::ndk::testing {

inline constexpr auto kGenerous = std::chrono::seconds(60);  // never a timing assertion: just "it happens"

// Counts CQ/SRQ notifications and checks they never overlap (ndkpi.md §10.2: serialised per CQ).
struct Notifications {
  std::atomic<int> count{0};
  std::atomic<int> running{0};
  std::atomic<int> overlaps{0};
  std::atomic<NTSTATUS> last_status{STATUS_PENDING};
  std::function<void(NTSTATUS)> on_notify;  // runs inside the callback (set before arming)

  static void callback(void* context, NTSTATUS status) {
    auto& n = *static_cast<Notifications*>(context);
    if (n.running.fetch_add(1) != 0) n.overlaps.fetch_add(1);
    n.last_status.store(status);
    if (n.on_notify) n.on_notify(status);
    n.count.fetch_add(1);
    n.running.fetch_sub(1);
  }
};

// The completion of an asynchronous request or create, waited for by the test.
struct Completion {
  std::atomic<bool> done{false};
  std::atomic<NTSTATUS> status{STATUS_PENDING};
  std::atomic<ObjectHeader*> object{nullptr};
  static void on_request(void* context, NTSTATUS s) {
    auto& c = *static_cast<Completion*>(context);
    c.status.store(s);
    c.done.store(true);
  }
  static void on_create(void* context, NTSTATUS s, ObjectHeader* o) {
    auto& c = *static_cast<Completion*>(context);
    c.object.store(o);
    c.status.store(s);
    c.done.store(true);
  }
  static void on_close(void* context) { static_cast<Completion*>(context)->done.store(true); }
  bool wait() const;
};

bool eventually(const std::function<bool()>& done);

struct PlayerOptions {
  uint16_t engine = 0;
  uint32_t cq_depth = 1024;
  uint32_t send_depth = 256;
  uint32_t receive_depth = 256;
  uint32_t max_sge = 4;
  uint32_t inline_size = 256;
  std::size_t buffer_size = 1u << 20;
  uint32_t mr_flags = NDK_MR_FLAG_ALLOW_REMOTE_WRITE | NDK_MR_FLAG_ALLOW_REMOTE_READ;
  Srq* srq = nullptr;       // NdkCreateQpWithSrq with this SRQ (on the player's engine)
  bool cq_affinity = true;  // the CQ's affinity names the engine's CPU (UroceEngineAffinity); false: none
};

class Player {
 public:
  Player(Adapter& adapter, const PlayerOptions& options);
  ~Player();  // closes qp, mr, cq, pd (each close waits: no completion callback)
  Player(const Player&) = delete;
  Player& operator=(const Player&) = delete;

  Adapter& adapter;
  PlayerOptions options;
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  Mr* mr = nullptr;
  Qp* qp = nullptr;
  uint8_t* buffer = nullptr;  // page aligned, options.buffer_size bytes
  Notifications notifications;

  [[nodiscard]] uint32_t token() { return mr->NdkGetLocalTokenFromMr(); }
  [[nodiscard]] uint64_t address(std::size_t offset = 0) const { return reinterpret_cast<uint64_t>(buffer + offset); }
  [[nodiscard]] NdkSge sge(std::size_t offset, uint32_t length) { return NdkSge{buffer + offset, length, token()}; }
  [[nodiscard]] sockaddr_in ip() const;    // port a for engine 0, port b for engine 1
  [[nodiscard]] sockaddr_in6 ip6() const;  // the same port's IPv6 address (fd00::1, fd00::2)

  NTSTATUS receive(std::size_t offset, uint32_t length, uintptr_t context);
  NTSTATUS send(std::size_t offset, uint32_t length, uintptr_t context, uint32_t flags = 0);
  NTSTATUS write(Player& to, std::size_t offset, std::size_t remote_offset, uint32_t length, uintptr_t context,
                 uint32_t flags = 0);
  NTSTATUS read(Player& from, std::size_t offset, std::size_t remote_offset, uint32_t length, uintptr_t context,
                uint32_t flags = 0);

  // Exactly `n` results from the CQ (waiting for them), then checks nothing more is there right now.
  std::vector<NdkResultEx> results(std::size_t n);
  std::vector<NdkResult> plain_results(std::size_t n);
  // One result (waiting for it).
  NdkResultEx result() { return results(1).front(); }
  // Whatever is there now.
  std::vector<NdkResultEx> drain();
  void fill(std::size_t offset, std::size_t length, uint8_t seed);

 private:
  std::unique_ptr<uint8_t, void (*)(void*)> storage_{nullptr, nullptr};
};

// Connects a <-> b out of band (QPN, PSN, addresses), as ibv_rc_pingpong does. Asserts success.
void connect(Player& a, Player& b, uint32_t path_mtu = 1024);
// n SENDs of `length` bytes a -> b, each checked byte for byte; both sides' completions consumed.
void traffic(Player& a, Player& b, int n, uint32_t length = 512);

// CPU time (user + system, in clock ticks) of this process's threads named `name` (/proc/self/task/*/comm).
std::optional<uint64_t> thread_cpu_ticks(std::string_view name);

// The dataplane's loopback config with port MTU 4200 (every PMTU up to 4096 fits).
config::Config api_test_config();

// One adapter per test suite (one Dataplane per process at a time).
class ApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  [[nodiscard]] static Adapter& adapter() { return *shared_adapter; }
  // Players made by the test; closed (in reverse) at TearDown, before the suite closes the adapter.
  Player& player(PlayerOptions options = {});
  // A connected pair: A on engine 0, B on engine 1. Tests take it with std::tie, not a structured binding:
  // clang 14 lambdas cannot capture structured bindings.
  std::pair<Player*, Player*> pair(PlayerOptions a = {}, PlayerOptions b = {});
  void SetUp() override { ASSERT_NE(shared_adapter, nullptr) << "the adapter did not open"; }
  void TearDown() override;

  static Adapter* shared_adapter;
  std::vector<std::unique_ptr<Player>> players_;
};

}  // namespace uroce::ndk::testing
