// Rows of the NDKPI contract review (../shared/review/ndkpi-conformance.md) that were implemented but untested:
// READ past the remote region (H12), a SendAndInvalidate naming a token the receiver does not have (H15), INLINE
// on SendAndInvalidate (I11), the FastRegister and Read flags that must be accepted and change nothing (I12,
// I13), DEFER on Write, Read, Bind and Invalidate (K1), the SQ and RQ posted from two threads at once (H21), and
// NdkFlush concurrent with posting (H3); a QP close that never waits for its engine (L8); an antecedent's close
// that waits for its successor's close completion (L4); a close that waits for a pending asynchronous create (L5);
// objects closed inside their create completions (L7); creates that run out of resources (B6, E8); and LAMs with
// the privileged token (B13, B14, E9, N8).
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <sys/mman.h>

#include "api/provider.h"
#include "api/tests/api_players.h"

namespace uroce::ndk::testing {
namespace {

class ContractRows : public ApiTest {};

uintptr_t context_of(const NdkResultEx& r) { return reinterpret_cast<uintptr_t>(r.RequestContext); }

// H12 (ndkpi.md §9.6): an RDMA READ outside the remote region completes with STATUS_REMOTE_RESOURCES; the bytes
// before it are untouched.
TEST_F(ContractRows, AReadPastTheRemoteRegionIsRemoteResources) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  std::memset(a->buffer, 0x77, 4096);
  const NdkSge sge = a->sge(0, 4096);
  const uint64_t past_end = b->address(b->options.buffer_size - 1024);  // 3 KiB of the 4 past the end
  ASSERT_EQ(a->qp->NdkRead(reinterpret_cast<void*>(1), &sge, 1, past_end, b->mr->NdkGetRemoteTokenFromMr(), 0),
            STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_REMOTE_RESOURCES);
  for (std::size_t i = 0; i < 4096; ++i) ASSERT_EQ(a->buffer[i], 0x77) << "byte " << i;
}

// H15 (seed 002): a SEND with Invalidate naming a token the receiver never registered is an invalid request: the
// receiving provider aborts the connection. The sender's request fails, and so does the receiver's QP.
TEST_F(ContractRows, SendAndInvalidateWithAnInvalidTokenAbortsTheConnection) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  ASSERT_EQ(b->receive(0, 64, 1), STATUS_SUCCESS);
  ASSERT_EQ(b->receive(0, 64, 2), STATUS_SUCCESS);
  const NdkSge sge = a->sge(0, 64);
  const uint32_t nobodys = b->mr->NdkGetRemoteTokenFromMr() ^ 0x00ffff00u;
  ASSERT_EQ(a->qp->NdkSendAndInvalidate(reinterpret_cast<void*>(7), &sge, 1, 0, nobodys), STATUS_SUCCESS);
  const NdkResultEx sent = a->result();
  EXPECT_NE(sent.Status, STATUS_SUCCESS);
  EXPECT_EQ(context_of(sent), 7u);
  // The receiver's QP is in error: both receives complete, and neither successfully.
  const auto received = b->results(2);
  for (const NdkResultEx& r : received) EXPECT_NE(r.Status, STATUS_SUCCESS) << "receive " << context_of(r);
  // The sender's QP went to error too: what it posts next is cancelled.
  ASSERT_EQ(a->send(0, 64, 8), STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_CANCELLED);
}

// I11: INLINE on SendAndInvalidate copies the data at post time and still invalidates the receiver's token.
TEST_F(ContractRows, InlineSendAndInvalidateDeliversAndInvalidates) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  Mr* mr = nullptr;
  ASSERT_EQ(b->pd->NdkCreateMr(true, nullptr, nullptr, &mr), STATUS_SUCCESS);
  ASSERT_EQ(mr->NdkInitializeFastRegisterMr(1, true, nullptr, nullptr), STATUS_SUCCESS);
  const NdkLogicalAddress page = b->address(65536);
  ASSERT_EQ(b->qp->NdkFastRegister(reinterpret_cast<void*>(1), mr, 1, &page, 0, 4096, b->buffer + 65536,
                                   NDK_OP_FLAG_ALLOW_REMOTE_WRITE),
            STATUS_SUCCESS);
  ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
  const uint32_t token = mr->NdkGetRemoteTokenFromMr();
  ASSERT_EQ(b->receive(0, 64, 2), STATUS_SUCCESS);
  a->fill(0, 48, 5);
  std::vector<uint8_t> sent(a->buffer, a->buffer + 48);
  const NdkSge inline_sge{a->buffer, 48, 0};  // no token: inline data needs none
  ASSERT_EQ(a->qp->NdkSendAndInvalidate(reinterpret_cast<void*>(3), &inline_sge, 1, NDK_OP_FLAG_INLINE, token),
            STATUS_SUCCESS);
  std::memset(a->buffer, 0, 48);  // copied at post time: changing the source now changes nothing
  EXPECT_EQ(a->result().Status, STATUS_SUCCESS);
  const NdkResultEx got = b->result();
  EXPECT_EQ(got.Status, STATUS_SUCCESS);
  EXPECT_EQ(got.Type, NdkOperationTypeReceiveAndInvalidate);
  EXPECT_EQ(got.BytesTransferred, 48u);
  EXPECT_EQ(std::memcmp(b->buffer, sent.data(), 48), 0);
  const NdkSge w = a->sge(0, 64);
  ASSERT_EQ(a->qp->NdkWrite(reinterpret_cast<void*>(4), &w, 1, b->address(65536), token, 0), STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_REMOTE_RESOURCES) << "the token was invalidated";
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
}

// I12, I13: RDMA_READ_SINK on a FastRegister (the adapter says sinks need no rights) and READ_LOCAL_INVALIDATE
// on a Read (its adapter flag is not advertised) are accepted and change nothing.
TEST_F(ContractRows, FlagsThatMustBeAcceptedChangeNothing) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  NdkAdapterInfo info{};
  uint32_t size = sizeof(info);
  ASSERT_EQ(adapter().NdkQueryAdapterInfo(&info, &size), STATUS_SUCCESS);
  ASSERT_TRUE(info.AdapterFlags & NDK_ADAPTER_FLAG_RDMA_READ_SINK_NOT_REQUIRED);
  ASSERT_FALSE(info.AdapterFlags & NDK_ADAPTER_FLAG_RDMA_READ_LOCAL_INVALIDATE_SUPPORTED);
  Mr* sink = nullptr;
  ASSERT_EQ(a->pd->NdkCreateMr(true, nullptr, nullptr, &sink), STATUS_SUCCESS);
  ASSERT_EQ(sink->NdkInitializeFastRegisterMr(1, false, nullptr, nullptr), STATUS_SUCCESS);
  const NdkLogicalAddress page = a->address(65536);
  ASSERT_EQ(a->qp->NdkFastRegister(reinterpret_cast<void*>(1), sink, 1, &page, 0, 4096, a->buffer + 65536,
                                   NDK_OP_FLAG_ALLOW_LOCAL_WRITE | NDK_OP_FLAG_RDMA_READ_SINK),
            STATUS_SUCCESS);
  ASSERT_EQ(a->result().Status, STATUS_SUCCESS);
  b->fill(0, 4096, 6);
  const NdkSge sge{a->buffer + 65536, 4096, sink->NdkGetLocalTokenFromMr()};
  ASSERT_EQ(a->qp->NdkRead(reinterpret_cast<void*>(2), &sge, 1, b->address(0), b->mr->NdkGetRemoteTokenFromMr(),
                           NDK_OP_FLAG_RDMA_READ_LOCAL_INVALIDATE),
            STATUS_SUCCESS);
  const NdkResultEx read = a->result();
  EXPECT_EQ(read.Status, STATUS_SUCCESS);
  EXPECT_EQ(read.Type, NdkOperationTypeRead);
  EXPECT_EQ(std::memcmp(a->buffer + 65536, b->buffer, 4096), 0) << "READ into a fast-registered sink";
  // Without the adapter flag the local invalidate is not done: the sink still works for a second READ.
  ASSERT_EQ(a->qp->NdkRead(reinterpret_cast<void*>(3), &sge, 1, b->address(0), b->mr->NdkGetRemoteTokenFromMr(), 0),
            STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(sink->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
}

// K1 (ndkpi.md §10.6): DEFER holds Write, Read, Bind and Invalidate like Send: the engine sees none of them
// until a post without DEFER, then all of them, in order.
TEST_F(ContractRows, DeferHoldsWriteReadBindAndInvalidate) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  auto& qp = static_cast<detail::QpImpl&>(*a->qp);
  const uint32_t tail = qp.published_send_tail();
  Mw* mw = nullptr;
  ASSERT_EQ(a->pd->NdkCreateMw(nullptr, nullptr, &mw), STATUS_SUCCESS);
  a->fill(0, 1024, 3);
  const NdkSge w = a->sge(0, 1024);
  const NdkSge r = a->sge(8192, 1024);
  const uint32_t remote = b->mr->NdkGetRemoteTokenFromMr();
  ASSERT_EQ(a->qp->NdkWrite(reinterpret_cast<void*>(1), &w, 1, b->address(0), remote, NDK_OP_FLAG_DEFER),
            STATUS_SUCCESS);
  ASSERT_EQ(a->qp->NdkRead(reinterpret_cast<void*>(2), &r, 1, b->address(0), remote,
                           NDK_OP_FLAG_DEFER | NDK_OP_FLAG_READ_FENCE),
            STATUS_SUCCESS);
  ASSERT_EQ(a->qp->NdkBind(reinterpret_cast<void*>(3), a->mr, mw, a->buffer + 16384, 4096,
                           NDK_OP_FLAG_ALLOW_REMOTE_READ | NDK_OP_FLAG_DEFER),
            STATUS_SUCCESS);
  ASSERT_EQ(a->qp->NdkInvalidate(reinterpret_cast<void*>(4), mw, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
  EXPECT_EQ(qp.published_send_tail(), tail) << "four deferred posts, none visible to the engine";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(a->drain().empty()) << "nothing ran";
  ASSERT_EQ(a->qp->NdkWrite(reinterpret_cast<void*>(5), &w, 1, b->address(4096), remote, 0), STATUS_SUCCESS);
  EXPECT_EQ(qp.published_send_tail(), tail + 5);
  const auto done = a->results(5);
  for (uintptr_t i = 0; i < 5; ++i) {
    EXPECT_EQ(done[i].Status, STATUS_SUCCESS) << i;
    EXPECT_EQ(context_of(done[i]), i + 1) << "in posting order";
  }
  EXPECT_EQ(std::memcmp(a->buffer + 8192, a->buffer, 1024), 0) << "the READ saw the WRITE before it";
  EXPECT_EQ(std::memcmp(b->buffer + 4096, a->buffer, 1024), 0);
  EXPECT_EQ(mw->NdkCloseMw(nullptr, nullptr), STATUS_SUCCESS);
}

// H21 (ndkpi.md §10.1): the SQ and the RQ of one QP posted from two threads at once, with no lock: every send
// completes, and every receive takes the peer's message that its position says.
TEST_F(ContractRows, SendAndReceivePostedFromTwoThreadsAtOnce) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  constexpr int kMessages = 200;  // each side's queues hold 256
  for (int i = 0; i < kMessages; ++i) ASSERT_EQ(b->receive(4096 + 64 * i, 64, 1000 + i), STATUS_SUCCESS);
  for (int i = 0; i < kMessages; ++i) b->buffer[i] = static_cast<uint8_t>(i);
  std::atomic<int> ready{0};
  std::atomic<int> failed_posts{0};
  auto start_together = [&] {
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
  };
  std::thread receiver([&] {
    start_together();
    for (int i = 0; i < kMessages; ++i)
      if (a->receive(65536 + 64 * i, 64, 2000 + i) != STATUS_SUCCESS) failed_posts.fetch_add(1);
  });
  std::thread sender([&] {
    start_together();
    for (int i = 0; i < kMessages; ++i) {
      const NdkSge s = a->sge(131072, 16);
      if (a->qp->NdkSend(reinterpret_cast<void*>(static_cast<uintptr_t>(i)), &s, 1, 0) != STATUS_SUCCESS)
        failed_posts.fetch_add(1);
    }
  });
  receiver.join();
  sender.join();
  ASSERT_EQ(failed_posts.load(), 0);
  // B answers every receive A posted: message i carries byte i.
  for (int i = 0; i < kMessages; ++i) {
    const NdkSge s = b->sge(static_cast<std::size_t>(i), 1);
    ASSERT_EQ(b->qp->NdkSend(reinterpret_cast<void*>(static_cast<uintptr_t>(3000 + i)), &s, 1, 0), STATUS_SUCCESS);
  }
  // A's CQ holds both kinds: 200 sends (contexts 0..199, in order) and 200 receives (2000.., in order).
  const auto mine = a->results(std::size_t{2} * kMessages);
  uintptr_t next_send = 0, next_receive = 2000;
  for (const NdkResultEx& r : mine) {
    ASSERT_EQ(r.Status, STATUS_SUCCESS);
    if (r.Type == NdkOperationTypeReceive) {
      ASSERT_EQ(context_of(r), next_receive);
      const std::size_t i = next_receive++ - 2000;
      EXPECT_EQ(a->buffer[65536 + 64 * i], static_cast<uint8_t>(i)) << "receive " << i;
    } else {
      ASSERT_EQ(context_of(r), next_send++);
    }
  }
  EXPECT_EQ(b->results(std::size_t{2} * kMessages).size(), std::size_t{2} * kMessages);
}

// H3 (ndkpi.md §10.1, §9.6): NdkFlush while another thread posts. Every post that returned success completes
// exactly once, in posting order, successfully before the flush took effect and cancelled after it.
TEST_F(ContractRows, FlushConcurrentWithPostingCompletesEveryAcceptedPost) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  std::atomic<bool> go{false};
  std::vector<uintptr_t> accepted;
  std::thread poster([&] {
    while (!go.load()) {
    }
    const NdkSge s = a->sge(0, 256);
    for (uintptr_t i = 1; i <= 200; ++i) {
      // A WRITE needs nothing from the peer but its region: each one may succeed, until the flush cancels.
      if (a->qp->NdkWrite(reinterpret_cast<void*>(i), &s, 1, b->address(0), b->mr->NdkGetRemoteTokenFromMr(), 0) ==
          STATUS_SUCCESS)
        accepted.push_back(i);
    }
  });
  go = true;
  std::this_thread::sleep_for(std::chrono::microseconds(200));
  a->qp->NdkFlush();
  poster.join();
  ASSERT_FALSE(accepted.empty());
  const auto done = a->results(accepted.size());
  bool cancelled_seen = false;
  for (std::size_t i = 0; i < done.size(); ++i) {
    EXPECT_EQ(context_of(done[i]), accepted[i]) << "exactly once, in posting order";
    if (done[i].Status == STATUS_CANCELLED) {
      cancelled_seen = true;
    } else {
      EXPECT_EQ(done[i].Status, STATUS_SUCCESS);
      EXPECT_FALSE(cancelled_seen) << "a success after a cancelled request";
    }
  }
}

// L8 (ndkpi.md §3, §11): calls do not block. A QP's destruction waits on its engine (it leaves the engine's
// tables there), so NdkCloseQp with a completion returns STATUS_PENDING at once, even with the engine stuck, and
// the completion runs once the engine has let the QP go.
TEST_F(ContractRows, CloseQpWithACompletionNeverWaitsForTheEngine) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  Qp* qp = nullptr;
  ASSERT_EQ(a->pd->NdkCreateQp(a->cq, a->cq, nullptr, 16, 16, 1, 1, 0, nullptr, nullptr, &qp), STATUS_SUCCESS);
  // A poller that holds engine 0 (player A's, and the new QP's) inside one loop iteration until released.
  struct Stuck {
    std::atomic<bool> hold{true};
    std::atomic<bool> holding{false};
    static bool poll(void* self, dataplane::EngineContext&) {
      auto& s = *static_cast<Stuck*>(self);
      while (s.hold.load()) s.holding.store(true);
      return false;
    }
  } stuck;
  dataplane::Engine& engine = static_cast<detail::AdapterImpl&>(adapter()).dataplane().engine(a->options.engine);
  ASSERT_TRUE(engine.add_poller({&Stuck::poll, &stuck}).ok());
  while (!stuck.holding.load()) std::this_thread::yield();
  std::atomic<bool> closed{false};
  std::atomic<bool> returned{false};
  NTSTATUS status = STATUS_SUCCESS;
  std::thread closer([&] {
    status = qp->NdkCloseQp([](void* context) { static_cast<std::atomic<bool>*>(context)->store(true); }, &closed);
    returned.store(true);
  });
  // The engine stays stuck until the close returned (or, if it never does, for kGenerous, so the test ends).
  const auto deadline = std::chrono::steady_clock::now() + kGenerous;
  while (!returned.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  const bool returned_while_stuck = returned.load();
  const bool closed_while_stuck = closed.load();
  stuck.hold.store(false);
  closer.join();
  EXPECT_TRUE(returned_while_stuck) << "NdkCloseQp waited for the engine";
  EXPECT_EQ(status, STATUS_PENDING);
  EXPECT_FALSE(closed_while_stuck) << "the QP cannot have left a stuck engine";
  const auto later = std::chrono::steady_clock::now() + kGenerous;
  while (!closed.load()) {  // the completion, once the engine moves again
    ASSERT_LT(std::chrono::steady_clock::now(), later) << "the close never completed";
    std::this_thread::yield();
  }
  ASSERT_TRUE(engine.remove_poller(&stuck).ok());
}

// Exhaustion (issue #14): registering into a full memory table is STATUS_INSUFFICIENT_RESOURCES, touches no
// existing registration, and a deregistration makes room again.
TEST_F(ContractRows, AFullMemoryTableIsInsufficientResourcesAndLosesNothing) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  std::vector<Mr*> mrs;
  NTSTATUS last = STATUS_SUCCESS;
  constexpr std::size_t kMoreThanTheTable = (std::size_t{1} << 16) + 16;
  while (mrs.size() < kMoreThanTheTable) {
    Mr* mr = nullptr;
    ASSERT_EQ(a->pd->NdkCreateMr(false, nullptr, nullptr, &mr), STATUS_SUCCESS);
    last = mr->NdkRegisterMr(a->buffer, 4096, NDK_MR_FLAG_ALLOW_LOCAL_WRITE, nullptr, nullptr);
    if (last != STATUS_SUCCESS) {
      EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
      break;
    }
    mrs.push_back(mr);
  }
  EXPECT_EQ(last, STATUS_INSUFFICIENT_RESOURCES) << "after " << mrs.size() << " registrations";
  // The registrations that exist still work: a WRITE through the pair's own regions lands.
  std::memset(a->buffer, 0x3c, 256);
  ASSERT_EQ(a->write(*b, 0, 0, 256, 1), STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(std::memcmp(b->buffer, a->buffer, 256), 0);
  // One deregistration makes room for one registration.
  ASSERT_FALSE(mrs.empty());
  ASSERT_EQ(mrs.back()->NdkDeregisterMr(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(mrs.back()->NdkRegisterMr(a->buffer, 4096, NDK_MR_FLAG_ALLOW_LOCAL_WRITE, nullptr, nullptr),
            STATUS_SUCCESS);
  for (Mr* mr : mrs) {
    EXPECT_EQ(mr->NdkDeregisterMr(nullptr, nullptr), STATUS_SUCCESS);
    EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
  }
}

// L4 (ndkpi.md §10.3): an antecedent's close does not complete while a successor's close completion still runs.
// A QP's close with a completion finishes on the notifier (its engine lets go of it there); that completion is held
// open, and the PD, closed meanwhile, completes only once it has returned.
TEST_F(ContractRows, AnAntecedentsCloseWaitsForItsSuccessorsCloseCompletion) {
  struct Order {
    std::atomic<bool> in_qp_completion{false}, let_go{false}, qp_completion_returned{false};
    std::atomic<bool> pd_closed{false}, pd_closed_too_early{false};
  } order;
  Pd* pd = nullptr;
  ASSERT_EQ(adapter().NdkCreatePd(nullptr, nullptr, &pd), STATUS_SUCCESS);
  Cq* cq = nullptr;
  ASSERT_EQ(adapter().NdkCreateCq(16, nullptr, nullptr, nullptr, nullptr, nullptr, &cq), STATUS_SUCCESS);
  Qp* qp = nullptr;
  ASSERT_EQ(pd->NdkCreateQp(cq, cq, nullptr, 1, 1, 1, 1, 0, nullptr, nullptr, &qp), STATUS_SUCCESS);
  const auto qp_closed = [](void* context) {
    auto& o = *static_cast<Order*>(context);
    o.in_qp_completion.store(true);
    while (!o.let_go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    o.qp_completion_returned.store(true);
  };
  const auto pd_closed = [](void* context) {
    auto& o = *static_cast<Order*>(context);
    o.pd_closed_too_early.store(!o.qp_completion_returned.load());
    o.pd_closed.store(true);
  };
  EXPECT_EQ(qp->NdkCloseQp(qp_closed, &order), STATUS_PENDING);
  ASSERT_TRUE(eventually([&] { return order.in_qp_completion.load(); }));
  EXPECT_EQ(pd->NdkClosePd(pd_closed, &order), STATUS_PENDING);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(order.pd_closed.load()) << "the PD's close completed while the QP's close completion ran";
  order.let_go.store(true);
  ASSERT_TRUE(eventually([&] { return order.pd_closed.load(); }));
  EXPECT_FALSE(order.pd_closed_too_early.load());
  EXPECT_EQ(cq->NdkCloseCq(nullptr, nullptr), STATUS_SUCCESS);
}

// L5 (ndkpi.md §10.3): a close completes only after the object's pending asynchronous requests. An MR create on a
// PD runs asynchronously; its completion is held open (and closes the MR it got before it returns), and the PD,
// closed meanwhile, completes only once that completion has returned. (A connector's close and its pending
// connect: ConnectionTest.ClosingAConnectorCancelsItsPendingConnectFirst.)
TEST_F(ContractRows, ACloseWaitsForAPendingAsynchronousCreate) {
  struct Order {
    std::atomic<bool> in_create_completion{false}, let_go{false}, create_completion_returned{false};
    std::atomic<bool> pd_closed{false}, pd_closed_too_early{false};
    std::atomic<NTSTATUS> create_status{STATUS_PENDING};
  } order;
  Pd* pd = nullptr;
  ASSERT_EQ(adapter().NdkCreatePd(nullptr, nullptr, &pd), STATUS_SUCCESS);
  const auto mr_created = [](void* context, NTSTATUS status, ObjectHeader* object) {
    auto& o = *static_cast<Order*>(context);
    o.create_status.store(status);
    o.in_create_completion.store(true);
    while (!o.let_go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (object != nullptr) {
      EXPECT_EQ(static_cast<Mr*>(object)->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
    }
    o.create_completion_returned.store(true);
  };
  const auto pd_closed = [](void* context) {
    auto& o = *static_cast<Order*>(context);
    o.pd_closed_too_early.store(!o.create_completion_returned.load());
    o.pd_closed.store(true);
  };
  ASSERT_EQ(pd->NdkCreateMr(false, mr_created, &order, nullptr), STATUS_PENDING);
  ASSERT_TRUE(eventually([&] { return order.in_create_completion.load(); }));
  EXPECT_EQ(order.create_status.load(), STATUS_SUCCESS);
  EXPECT_EQ(pd->NdkClosePd(pd_closed, &order), STATUS_PENDING);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(order.pd_closed.load()) << "the PD's close completed while its MR create was still completing";
  order.let_go.store(true);
  ASSERT_TRUE(eventually([&] { return order.pd_closed.load(); }));
  EXPECT_FALSE(order.pd_closed_too_early.load());
}

// B13, B14, E9 and N8 (ndkpi.md §5, §9.1, §9.3): NdkBuildLam maps a buffer that no MR covers to logical
// addresses (its size asked first with BUFFER_TOO_SMALL), and SGEs with the PD's privileged token and a
// LogicalAddress send from it and receive into it; the LAM's pages fast-register, so a peer writes into it through
// that MR. The privileged token itself never grants remote access: a peer's WRITE naming it is a remote access
// error and changes nothing.
TEST_F(ContractRows, ALamAndThePrivilegedTokenReachUnregisteredMemoryLocallyOnly) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  std::vector<uint8_t> raw(std::size_t{4} * 4096);  // in no MR
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>(i * 13 + 5);
  uint8_t* const buffer = raw.data() + 50;
  constexpr uint32_t kLength = 9000;
  const auto first = reinterpret_cast<uint64_t>(buffer);
  const uint32_t pages = static_cast<uint32_t>((first % 4096 + kLength + 4095) / 4096);

  uint32_t lam_size = 0;
  uint32_t fbo = 0;
  EXPECT_EQ(adapter().NdkBuildLam(nullptr, kLength, nullptr, nullptr, nullptr, &lam_size, &fbo),
            STATUS_INVALID_PARAMETER);
  ASSERT_EQ(adapter().NdkBuildLam(buffer, kLength, nullptr, nullptr, nullptr, &lam_size, &fbo),
            STATUS_BUFFER_TOO_SMALL);
  ASSERT_EQ(lam_size, ndk_lam_size(pages));
  std::vector<uint64_t> lam_storage(lam_size / sizeof(uint64_t) + 1);
  auto* lam = reinterpret_cast<NdkLogicalAddressMapping*>(lam_storage.data());
  ASSERT_EQ(adapter().NdkBuildLam(buffer, kLength, nullptr, nullptr, lam, &lam_size, &fbo), STATUS_SUCCESS);
  ASSERT_EQ(lam->AdapterPageCount, pages);
  EXPECT_EQ(fbo, first % 4096);
  const NdkLogicalAddress* page = lam->AdapterPageArray;
  for (uint32_t i = 0; i < pages; ++i) EXPECT_EQ(page[i], first - first % 4096 + uint64_t{i} * 4096) << i;

  uint32_t privileged = 0;
  b->pd->NdkGetPrivilegedMemoryRegionToken(&privileged);
  ASSERT_NE(privileged, 0U);
  uint32_t again = 0;
  b->pd->NdkGetPrivilegedMemoryRegionToken(&again);
  EXPECT_EQ(again, privileged);
  const auto logical = [&](uint32_t offset, uint32_t length) {
    NdkSge s;
    s.LogicalAddress = page[0] + fbo + offset;
    s.Length = length;
    s.MemoryRegionToken = privileged;
    return s;
  };

  // SEND from it, receive into it.
  ASSERT_EQ(a->receive(0, kLength, 1), STATUS_SUCCESS);
  NdkSge s = logical(0, kLength);
  ASSERT_EQ(b->qp->NdkSend(reinterpret_cast<void*>(2), &s, 1, 0), STATUS_SUCCESS);
  ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
  ASSERT_EQ(a->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(std::memcmp(a->buffer, buffer, kLength), 0);
  s = logical(100, 5000);
  ASSERT_EQ(b->qp->NdkReceive(reinterpret_cast<void*>(3), &s, 1), STATUS_SUCCESS);
  a->fill(65536, 5000, 44);
  ASSERT_EQ(a->send(65536, 5000, 4), STATUS_SUCCESS);
  ASSERT_EQ(a->result().Status, STATUS_SUCCESS);
  ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(std::memcmp(buffer + 100, a->buffer + 65536, 5000), 0);

  // The LAM's pages, fast-registered: a peer's WRITE lands in the buffer.
  Mr* mr = nullptr;
  ASSERT_EQ(b->pd->NdkCreateMr(true, nullptr, nullptr, &mr), STATUS_SUCCESS);
  ASSERT_EQ(mr->NdkInitializeFastRegisterMr(pages, true, nullptr, nullptr), STATUS_SUCCESS);
  ASSERT_EQ(b->qp->NdkFastRegister(reinterpret_cast<void*>(5), mr, pages, page, fbo, kLength, buffer,
                                   NDK_OP_FLAG_ALLOW_REMOTE_WRITE),
            STATUS_SUCCESS);
  ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
  a->fill(131072, kLength, 66);
  s = a->sge(131072, kLength);
  ASSERT_EQ(a->qp->NdkWrite(reinterpret_cast<void*>(7), &s, 1, first, mr->NdkGetRemoteTokenFromMr(), 0),
            STATUS_SUCCESS);
  ASSERT_EQ(a->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(std::memcmp(buffer, a->buffer + 131072, kLength), 0);

  // The privileged token from the wire: refused, nothing written.
  const std::vector<uint8_t> before(raw);
  s = a->sge(0, 64);
  ASSERT_EQ(a->qp->NdkWrite(reinterpret_cast<void*>(8), &s, 1, first, privileged, 0), STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_REMOTE_RESOURCES);
  EXPECT_EQ(raw, before);
  adapter().NdkReleaseLam(lam);
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
}

// ndkpi.md §9.3 with §9.1: the privileged token's LogicalAddresses come from NdkBuildLam. An SGE carrying it must lie
// inside a buffer a live LAM mapped, and inside a writable one where the engine writes (a receive, a READ's sink):
// anything else would have an engine touch memory that is not there, or not writable, and crash the process. Such a
// post fails with STATUS_ACCESS_VIOLATION and queues nothing.
TEST_F(ContractRows, APrivilegedSgeMustLieInsideALiveLam) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  const std::size_t page = 4096;
  void* const writable = mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(writable, MAP_FAILED);
  auto* const bytes = static_cast<uint8_t*>(writable);
  std::memset(bytes, 0x33, 3 * page);
  void* const read_only = mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(read_only, MAP_FAILED);

  // LAMs over the first two of the three writable pages and over the read-only page.
  std::vector<uint64_t> storage(64);
  auto* lam = reinterpret_cast<NdkLogicalAddressMapping*>(storage.data());
  std::vector<uint64_t> storage_ro(64);
  auto* lam_ro = reinterpret_cast<NdkLogicalAddressMapping*>(storage_ro.data());
  uint32_t lam_size = static_cast<uint32_t>(storage.size() * sizeof(uint64_t));
  uint32_t fbo = 0;
  ASSERT_EQ(adapter().NdkBuildLam(bytes, 2 * page, nullptr, nullptr, lam, &lam_size, &fbo), STATUS_SUCCESS);
  lam_size = static_cast<uint32_t>(storage_ro.size() * sizeof(uint64_t));
  ASSERT_EQ(adapter().NdkBuildLam(read_only, page, nullptr, nullptr, lam_ro, &lam_size, &fbo), STATUS_SUCCESS);
  uint32_t privileged = 0;
  b->pd->NdkGetPrivilegedMemoryRegionToken(&privileged);
  const auto sge = [&](const void* address, std::size_t length) {
    NdkSge s;
    s.LogicalAddress = reinterpret_cast<uint64_t>(address);
    s.Length = static_cast<uint32_t>(length);
    s.MemoryRegionToken = privileged;
    return s;
  };

  NdkSge s = sge(bytes + page + 100, 2 * page - 200);  // into the third page, which no LAM maps
  EXPECT_EQ(b->qp->NdkSend(nullptr, &s, 1, 0), STATUS_ACCESS_VIOLATION);
  s = sge(reinterpret_cast<void*>(0x10000), 64);  // never mapped
  EXPECT_EQ(b->qp->NdkWrite(nullptr, &s, 1, a->address(), a->token(), 0), STATUS_ACCESS_VIOLATION);
  s = sge(read_only, 64);
  EXPECT_EQ(b->qp->NdkReceive(nullptr, &s, 1), STATUS_ACCESS_VIOLATION) << "the engine would write a read-only page";
  const NdkSge sink = s;
  EXPECT_EQ(b->qp->NdkRead(nullptr, &sink, 1, a->address(), a->token(), 0), STATUS_ACCESS_VIOLATION);
  EXPECT_EQ(b->qp->NdkWrite(reinterpret_cast<void*>(1), &s, 1, a->address(), a->token(), 0), STATUS_SUCCESS)
      << "a read-only page is a fine source";
  EXPECT_EQ(b->result().Status, STATUS_SUCCESS);

  // Inside the writable LAM: SEND from it and receive into it, across its two pages.
  ASSERT_EQ(a->receive(0, 3000, 2), STATUS_SUCCESS);
  s = sge(bytes + page - 1000, 3000);
  ASSERT_EQ(b->qp->NdkSend(reinterpret_cast<void*>(3), &s, 1, 0), STATUS_SUCCESS);
  EXPECT_EQ(b->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(std::memcmp(a->buffer, bytes + page - 1000, 3000), 0);
  ASSERT_EQ(b->qp->NdkReceive(reinterpret_cast<void*>(4), &s, 1), STATUS_SUCCESS);
  a->fill(8192, 3000, 9);
  ASSERT_EQ(a->send(8192, 3000, 5), STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(b->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(std::memcmp(bytes + page - 1000, a->buffer + 8192, 3000), 0);

  // Released: the buffer is no longer the privileged token's.
  adapter().NdkReleaseLam(lam);
  adapter().NdkReleaseLam(lam_ro);
  EXPECT_EQ(b->qp->NdkSend(nullptr, &s, 1, 0), STATUS_ACCESS_VIOLATION);
  s = sge(read_only, 64);
  EXPECT_EQ(b->qp->NdkSend(nullptr, &s, 1, 0), STATUS_ACCESS_VIOLATION);
  munmap(writable, 3 * page);
  munmap(read_only, page);
}

// L7 (ndkpi.md §8): the provider does not touch an object after initiating its completion. Each create here runs
// asynchronously and its completion closes the object it delivers, at once, from inside the callback. Under ASan
// (the CI stage), any later touch of the freed object by the provider is a use-after-free report.
TEST_F(ContractRows, AnObjectClosedInsideItsCreateCompletionIsNotTouchedAgain) {
  struct Closer {
    std::atomic<int> closed{0};
    std::atomic<NTSTATUS> status{STATUS_PENDING};
    static void close_it(void* context, NTSTATUS s, ObjectHeader* object) {
      auto& c = *static_cast<Closer*>(context);
      c.status.store(s);
      NTSTATUS closed = STATUS_INVALID_PARAMETER;
      if (s == STATUS_SUCCESS) {
        switch (object->ObjectType) {
          case NdkObjectTypePd:
            closed = static_cast<Pd*>(object)->NdkClosePd(nullptr, nullptr);
            break;
          case NdkObjectTypeCq:
            closed = static_cast<Cq*>(object)->NdkCloseCq(nullptr, nullptr);
            break;
          case NdkObjectTypeMr:
            closed = static_cast<Mr*>(object)->NdkCloseMr(nullptr, nullptr);
            break;
          case NdkObjectTypeQp:
            closed = static_cast<Qp*>(object)->NdkCloseQp(nullptr, nullptr);
            break;
          default:
            break;
        }
      }
      if (closed == STATUS_SUCCESS) c.closed.fetch_add(1);
    }
  };
  Closer pd_closer, cq_closer, mr_closer, qp_closer;
  Pd* pd_unused = nullptr;
  ASSERT_EQ(adapter().NdkCreatePd(&Closer::close_it, &pd_closer, &pd_unused), STATUS_PENDING);
  Cq* cq_unused = nullptr;
  ASSERT_EQ(adapter().NdkCreateCq(16, nullptr, nullptr, nullptr, &Closer::close_it, &cq_closer, &cq_unused),
            STATUS_PENDING);
  // An MR and a QP need a PD and a CQ that outlive them.
  Pd* pd = nullptr;
  ASSERT_EQ(adapter().NdkCreatePd(nullptr, nullptr, &pd), STATUS_SUCCESS);
  Cq* cq = nullptr;
  ASSERT_EQ(adapter().NdkCreateCq(16, nullptr, nullptr, nullptr, nullptr, nullptr, &cq), STATUS_SUCCESS);
  Mr* mr_unused = nullptr;
  ASSERT_EQ(pd->NdkCreateMr(false, &Closer::close_it, &mr_closer, &mr_unused), STATUS_PENDING);
  Qp* qp_unused = nullptr;
  ASSERT_EQ(pd->NdkCreateQp(cq, cq, nullptr, 1, 1, 1, 1, 0, &Closer::close_it, &qp_closer, &qp_unused), STATUS_PENDING);
  for (Closer* c : {&pd_closer, &cq_closer, &mr_closer, &qp_closer}) {
    ASSERT_TRUE(eventually([&] { return c->closed.load() == 1; })) << "status " << c->status.load();
  }
  adapter().UroceWaitForNotifier();
  EXPECT_EQ(cq->NdkCloseCq(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(pd->NdkClosePd(nullptr, nullptr), STATUS_SUCCESS);
}

// B6 and E8 (seed 003: a create "may fail inline and asynchronously"; ndkpi.md §9): a create that finds no
// resources returns STATUS_INSUFFICIENT_RESOURCES, inline without a completion, and through its completion (with no
// object) when it has one; it loses nothing, and closing one object makes room for exactly one more. CQs and SRQs
// count against the notifier's targets; QPs against their engine's QP table (engine.max_qps_per_engine).
TEST_F(ContractRows, CreatesOutOfResourcesFailInlineAndThroughTheirCompletion) {
  std::vector<Cq*> cqs;
  NTSTATUS last = STATUS_SUCCESS;
  while (last == STATUS_SUCCESS) {
    Cq* cq = nullptr;
    last = adapter().NdkCreateCq(1, nullptr, nullptr, nullptr, nullptr, nullptr, &cq);
    if (last == STATUS_SUCCESS) cqs.push_back(cq);
    ASSERT_LE(cqs.size(), detail::kMaxNotifiables) << "the notifier's limit was not enforced";
  }
  EXPECT_EQ(last, STATUS_INSUFFICIENT_RESOURCES) << "after " << cqs.size() << " CQs";
  EXPECT_GT(cqs.size(), detail::kMaxNotifiables - 64) << "the limit is the notifier's, less what the suite holds";
  Completion async_cq;
  Cq* never = nullptr;
  ASSERT_EQ(adapter().NdkCreateCq(1, nullptr, nullptr, nullptr, &Completion::on_create, &async_cq, &never),
            STATUS_PENDING);
  ASSERT_TRUE(async_cq.wait());
  EXPECT_EQ(async_cq.status.load(), STATUS_INSUFFICIENT_RESOURCES);
  EXPECT_EQ(async_cq.object.load(), nullptr);
  ASSERT_EQ(cqs.back()->NdkCloseCq(nullptr, nullptr), STATUS_SUCCESS);
  cqs.pop_back();
  Cq* one_more = nullptr;
  ASSERT_EQ(adapter().NdkCreateCq(1, nullptr, nullptr, nullptr, nullptr, nullptr, &one_more), STATUS_SUCCESS);
  cqs.push_back(one_more);
  // Keep one CQ for the QPs below; the rest go back.
  Cq* cq = cqs.front();
  for (std::size_t i = 1; i < cqs.size(); ++i) ASSERT_EQ(cqs[i]->NdkCloseCq(nullptr, nullptr), STATUS_SUCCESS);

  Pd* pd = nullptr;
  ASSERT_EQ(adapter().NdkCreatePd(nullptr, nullptr, &pd), STATUS_SUCCESS);
  std::vector<Qp*> qps;
  last = STATUS_SUCCESS;
  while (last == STATUS_SUCCESS) {
    Qp* qp = nullptr;
    last = pd->NdkCreateQp(cq, cq, nullptr, 1, 1, 1, 1, 0, nullptr, nullptr, &qp);
    if (last == STATUS_SUCCESS) qps.push_back(qp);
    ASSERT_LE(qps.size(), std::size_t{1} << 20) << "the engine's QP table was not enforced";
  }
  EXPECT_EQ(last, STATUS_INSUFFICIENT_RESOURCES) << "after " << qps.size() << " QPs";
  EXPECT_LE(qps.size(), api_test_config().engine.max_qps_per_engine);
  EXPECT_GT(qps.size(), api_test_config().engine.max_qps_per_engine / 2) << "the limit is the engine's QP table";
  Completion async_qp;
  Qp* no_qp = nullptr;
  ASSERT_EQ(pd->NdkCreateQp(cq, cq, nullptr, 1, 1, 1, 1, 0, &Completion::on_create, &async_qp, &no_qp), STATUS_PENDING);
  ASSERT_TRUE(async_qp.wait());
  EXPECT_EQ(async_qp.status.load(), STATUS_INSUFFICIENT_RESOURCES);
  EXPECT_EQ(async_qp.object.load(), nullptr);
  ASSERT_EQ(qps.back()->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS);
  qps.pop_back();
  Qp* qp = nullptr;
  ASSERT_EQ(pd->NdkCreateQp(cq, cq, nullptr, 1, 1, 1, 1, 0, nullptr, nullptr, &qp), STATUS_SUCCESS);
  qps.push_back(qp);
  for (Qp* q : qps) ASSERT_EQ(q->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS);
  ASSERT_EQ(cq->NdkCloseCq(nullptr, nullptr), STATUS_SUCCESS);
  ASSERT_EQ(pd->NdkClosePd(nullptr, nullptr), STATUS_SUCCESS);
}

}  // namespace
}  // namespace uroce::ndk::testing
