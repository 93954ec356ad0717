// Work requests end to end through the engines: every operation, every op flag, validation, flush and
// CQ overrun (ndkpi.md §6.1, §9.6, §10.1, §10.6).
#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <thread>

#include "api/provider.h"
#include "api/tests/api_players.h"

namespace uroce::ndk::testing {
namespace {

class Datapath : public ApiTest {};

uintptr_t context_of(const NdkResultEx& r) { return reinterpret_cast<uintptr_t>(r.RequestContext); }

TEST_F(Datapath, SendWriteAndReadMoveEveryByte) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  traffic(*a, *b, 3, 3000);  // 3 packets each at PMTU 1024, into engine 1 through the redirect ring

  a->fill(0, 5000, 9);
  ASSERT_EQ(a->write(*b, 0, 4096, 5000, 1), STATUS_SUCCESS);
  NdkResultEx w = a->result();
  EXPECT_EQ(w.Status, STATUS_SUCCESS);
  EXPECT_EQ(w.Type, NdkOperationTypeWrite);
  EXPECT_EQ(w.QPContext, a);
  EXPECT_EQ(std::memcmp(a->buffer, b->buffer + 4096, 5000), 0);

  ASSERT_EQ(a->read(*b, 65536, 4096, 5000, 2), STATUS_SUCCESS);
  NdkResultEx r = a->result();
  EXPECT_EQ(r.Status, STATUS_SUCCESS);
  EXPECT_EQ(r.Type, NdkOperationTypeRead);
  EXPECT_EQ(context_of(r), 2u);
  EXPECT_EQ(std::memcmp(a->buffer + 65536, b->buffer + 4096, 5000), 0);
  EXPECT_TRUE(b->drain().empty()) << "WRITE and READ consume no receive and complete nothing at the target";
}

TEST_F(Datapath, InitiatorPostsOnAnUnconnectedQpFailWithConnectionInvalid) {
  Player& p = player();
  const NdkSge s = p.sge(0, 16);
  EXPECT_EQ(p.qp->NdkSend(nullptr, &s, 1, 0), STATUS_CONNECTION_INVALID);
  EXPECT_EQ(p.qp->NdkSendAndInvalidate(nullptr, &s, 1, 0, 0x100), STATUS_CONNECTION_INVALID);
  EXPECT_EQ(p.qp->NdkWrite(nullptr, &s, 1, p.address(), p.token(), 0), STATUS_CONNECTION_INVALID);
  EXPECT_EQ(p.qp->NdkRead(nullptr, &s, 1, p.address(), p.token(), 0), STATUS_CONNECTION_INVALID);
  EXPECT_EQ(p.qp->NdkInvalidate(nullptr, p.mr, 0), STATUS_CONNECTION_INVALID);
  // Receives may be posted before connecting (ndkpi.md §11), and a flush cancels them.
  EXPECT_EQ(p.receive(0, 64, 7), STATUS_SUCCESS);
  p.qp->NdkFlush();
  const NdkResultEx r = p.result();
  EXPECT_EQ(r.Status, STATUS_CANCELLED);
  EXPECT_EQ(r.Type, NdkOperationTypeReceive);
  EXPECT_EQ(context_of(r), 7u);
  // A receive posted after the flush is cancelled too.
  EXPECT_EQ(p.receive(0, 64, 8), STATUS_SUCCESS);
  EXPECT_EQ(p.result().Status, STATUS_CANCELLED);
}

TEST_F(Datapath, InlineDataIsCopiedAtPostTimeWithoutTokensOrTheSgeLimit) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  ASSERT_EQ(b->receive(0, 4096, 1), STATUS_SUCCESS);
  // Twelve SGEs (the QP allows 4) from a stack buffer, with a token that names nothing.
  std::array<uint8_t, 240> scratch{};
  for (std::size_t i = 0; i < scratch.size(); ++i) scratch[i] = static_cast<uint8_t>(i + 1);
  const std::array<uint8_t, 240> sent = scratch;
  std::array<NdkSge, 12> sgl{};
  for (std::size_t i = 0; i < sgl.size(); ++i) sgl[i] = NdkSge{scratch.data() + 20 * i, 20, 0xDEADBEEF};
  ASSERT_EQ(a->qp->NdkSend(reinterpret_cast<void*>(5), sgl.data(), 12, NDK_OP_FLAG_INLINE), STATUS_SUCCESS);
  scratch.fill(0xEE);  // reusable as soon as the post returns
  EXPECT_EQ(a->result().Status, STATUS_SUCCESS);
  const NdkResultEx r = b->result();
  EXPECT_EQ(r.Status, STATUS_SUCCESS);
  EXPECT_EQ(r.BytesTransferred, 240u);
  EXPECT_EQ(std::memcmp(b->buffer, sent.data(), 240), 0);

  // INLINE on Write too (ndkpi.md §6.1), and the inline size limit holds: 257 > 256 fails, nothing completes.
  uint64_t word = 0x0123456789ABCDEF;
  const NdkSge one{&word, 8, 0};
  ASSERT_EQ(a->qp->NdkWrite(reinterpret_cast<void*>(6), &one, 1, b->address(8192), b->token(), NDK_OP_FLAG_INLINE),
            STATUS_SUCCESS);
  word = 0;
  EXPECT_EQ(a->result().Status, STATUS_SUCCESS);
  uint64_t landed;
  std::memcpy(&landed, b->buffer + 8192, 8);
  EXPECT_EQ(landed, 0x0123456789ABCDEFu);
  std::vector<uint8_t> big(257, 1);
  const NdkSge too_big{big.data(), 257, 0};
  EXPECT_EQ(a->qp->NdkSend(nullptr, &too_big, 1, NDK_OP_FLAG_INLINE), STATUS_INVALID_PARAMETER);
  EXPECT_TRUE(a->drain().empty());
}

TEST_F(Datapath, DeferredPostsStayInvisibleToTheEngineUntilAPostWithoutDefer) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  auto& qp = static_cast<detail::QpImpl&>(*a->qp);
  const uint32_t tail = qp.published_send_tail();
  for (std::size_t i = 0; i < 3; ++i) ASSERT_EQ(b->receive(4096 * i, 100, 10 + i), STATUS_SUCCESS);
  ASSERT_EQ(a->send(0, 100, 1, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
  ASSERT_EQ(a->send(0, 100, 2, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
  EXPECT_EQ(qp.published_send_tail(), tail) << "the engine reads only the published tail";
  ASSERT_EQ(a->send(0, 100, 3), STATUS_SUCCESS);
  EXPECT_EQ(qp.published_send_tail(), tail + 3);
  const auto done = a->results(3);
  for (uintptr_t i = 0; i < 3; ++i) EXPECT_EQ(context_of(done[i]), i + 1) << "in posting order";
  EXPECT_EQ(b->results(3).size(), 3u);
}

// ndkpi.md §10.6's example: FR#1 (DEFER) succeeds, FR#2 (DEFER) fails inline so the Send is never posted; the
// provider submits FR#1 while failing FR#2: FR#1 gets a completion, FR#2 none.
TEST_F(Datapath, AFailedPostSubmitsTheDeferredChainBeforeIt) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  Mr* frmr = nullptr;
  ASSERT_EQ(a->pd->NdkCreateMr(true, nullptr, nullptr, &frmr), STATUS_SUCCESS);
  ASSERT_EQ(frmr->NdkInitializeFastRegisterMr(2, true, nullptr, nullptr), STATUS_SUCCESS);
  const NdkLogicalAddress pages[3] = {a->address(0), a->address(4096), a->address(8192)};
  ASSERT_EQ(a->qp->NdkFastRegister(reinterpret_cast<void*>(1), frmr, 2, pages, 0, 8192, a->buffer,
                                   NDK_OP_FLAG_ALLOW_REMOTE_WRITE | NDK_OP_FLAG_DEFER),
            STATUS_SUCCESS);
  EXPECT_EQ(a->qp->NdkFastRegister(reinterpret_cast<void*>(2), frmr, 3, pages, 0, 8192, a->buffer,
                                   NDK_OP_FLAG_ALLOW_REMOTE_WRITE | NDK_OP_FLAG_DEFER),
            STATUS_INVALID_PARAMETER)
      << "3 pages on an MR initialised for 2";
  const NdkResultEx fr1 = a->result();
  EXPECT_EQ(fr1.Status, STATUS_SUCCESS);
  EXPECT_EQ(fr1.Type, NdkOperationTypeFastRegister);
  EXPECT_EQ(context_of(fr1), 1u);
  // Nothing from FR#2: the next completion is the next request's.
  ASSERT_EQ(b->receive(0, 64, 9), STATUS_SUCCESS);
  ASSERT_EQ(a->send(0, 64, 3), STATUS_SUCCESS);
  EXPECT_EQ(context_of(a->result()), 3u);
  EXPECT_TRUE(a->drain().empty());
  EXPECT_EQ(b->result().Status, STATUS_SUCCESS);
  ASSERT_EQ(frmr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);

  // The same with sends: the deferred one reaches the peer, the failing one never exists.
  ASSERT_EQ(b->receive(0, 64, 10), STATUS_SUCCESS);
  ASSERT_EQ(a->send(0, 64, 4, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
  const std::array<NdkSge, 5> five{a->sge(0, 1), a->sge(1, 1), a->sge(2, 1), a->sge(3, 1), a->sge(4, 1)};
  EXPECT_EQ(a->qp->NdkSend(reinterpret_cast<void*>(5), five.data(), 5, NDK_OP_FLAG_DEFER), STATUS_INVALID_PARAMETER);
  EXPECT_EQ(context_of(a->result()), 4u);
  EXPECT_EQ(context_of(b->result()), 10u);
}

TEST_F(Datapath, SilentSuccessesLeaveNoCompletionAndFreeTheirSlots) {
  PlayerOptions small;
  small.send_depth = 8;
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair(small);
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 7; ++i) ASSERT_EQ(a->write(*b, 0, 0, 64, 100 + i, NDK_OP_FLAG_SILENT_SUCCESS), STATUS_SUCCESS);
    ASSERT_EQ(a->write(*b, 0, 0, 64, 7 + round), STATUS_SUCCESS) << "the silent ones retired and freed their slots";
    const NdkResultEx r = a->result();
    EXPECT_EQ(context_of(r), 7u + round) << "only the signalled request completes";
    EXPECT_EQ(r.Status, STATUS_SUCCESS);
  }
  EXPECT_TRUE(a->drain().empty());
  // A silent request that fails still completes (ndkpi.md §6.1).
  const NdkSge s = a->sge(0, 64);
  ASSERT_EQ(
      a->qp->NdkWrite(reinterpret_cast<void*>(42), &s, 1, b->address(), b->token() ^ 0x100, NDK_OP_FLAG_SILENT_SUCCESS),
      STATUS_SUCCESS);
  const NdkResultEx failed = a->result();
  EXPECT_EQ(context_of(failed), 42u);
  EXPECT_EQ(failed.Status, STATUS_REMOTE_RESOURCES);
}

// ndkpi.md: a request's slot is the consumer's again once its completion has been reaped, so a full initiator
// queue takes a new post right after a GetCqResults that returned a completion, with no retry. The engine hands
// the slot back before the completion becomes visible; polling in a tight loop makes a late hand-back show.
TEST_F(Datapath, AReapedCompletionFreesItsSlotAtOnce) {
  PlayerOptions one;
  one.send_depth = 1;
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair(one);
  // Bulk traffic on a second pair, through the same engines, keeps their bursts long.
  Player* c = nullptr;
  Player* d = nullptr;
  std::tie(c, d) = pair();
  std::atomic<bool> stop{false};
  // Stops and joins the bulk thread however the test body ends (an ASSERT returns early).
  struct Joiner {
    std::atomic<bool>& stop;
    std::thread thread;
    ~Joiner() {
      stop.store(true);
      thread.join();
    }
  } bulk{stop, std::thread([&] {
           uintptr_t posted = 0, reaped = 0;
           NdkResult r[16];
           while (!stop.load()) {
             while (posted - reaped < 32 && c->write(*d, 0, 0, 65536, posted) == STATUS_SUCCESS) ++posted;
             reaped += c->cq->NdkGetCqResults(r, 16);
           }
           while (reaped < posted) reaped += c->cq->NdkGetCqResults(r, 16);
         })};
  for (uintptr_t i = 0; i < 3000; ++i) {
    ASSERT_EQ(a->write(*b, 0, 0, 64, i), STATUS_SUCCESS) << "post " << i << " right after the previous completion";
    NdkResult r;
    const auto deadline = std::chrono::steady_clock::now() + kGenerous;
    while (a->cq->NdkGetCqResults(&r, 1) == 0) ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    ASSERT_EQ(r.Status, STATUS_SUCCESS);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(r.RequestContext), i);
  }
}

TEST_F(Datapath, ReadFenceMakesAWriteWaitForTheReadItForwards) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  b->fill(0, 8192, 3);
  // READ B[0, 8192) into A, then WRITE that A buffer to B[65536...): fenced, it must carry the READ's data.
  ASSERT_EQ(a->read(*b, 0, 0, 8192, 1, NDK_OP_FLAG_SILENT_SUCCESS), STATUS_SUCCESS);
  ASSERT_EQ(a->write(*b, 0, 65536, 8192, 2, NDK_OP_FLAG_READ_FENCE), STATUS_SUCCESS);
  EXPECT_EQ(context_of(a->result()), 2u);
  EXPECT_EQ(std::memcmp(b->buffer, b->buffer + 65536, 8192), 0);
}

TEST_F(Datapath, FlushCancelsEverythingPendingInOrder) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  // B posts no receive: A's sends wait on RNR NAKs (rnr_retry 7 retries forever).
  for (uintptr_t i = 1; i <= 3; ++i) ASSERT_EQ(a->send(0, 64, i), STATUS_SUCCESS);
  ASSERT_EQ(a->receive(0, 64, 9), STATUS_SUCCESS);
  a->qp->NdkFlush();
  const auto r = a->results(4);
  std::vector<uintptr_t> sends;
  for (const NdkResultEx& x : r) {
    EXPECT_EQ(x.Status, STATUS_CANCELLED);
    if (x.Type == NdkOperationTypeSend) sends.push_back(context_of(x));
  }
  EXPECT_EQ(sends, (std::vector<uintptr_t>{1, 2, 3}));
  // Posts after a flush are accepted and cancelled.
  ASSERT_EQ(a->send(0, 64, 4), STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_CANCELLED);
}

// ndkpi.md §10.6: a post that returned STATUS_SUCCESS completes, DEFER or not; §9.6: a flush cancels everything
// pending. So a flush, or a close (which flushes), in the middle of a DEFER chain completes the chain, cancelled,
// in posting order: it must not wait for a post without DEFER that will never come.
TEST_F(Datapath, FlushOrCloseInTheMiddleOfADeferChainCompletesItCancelled) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  for (uintptr_t i = 1; i <= 3; ++i) ASSERT_EQ(a->send(0, 64, i, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
  ASSERT_EQ(a->write(*b, 0, 0, 64, 4, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
  a->qp->NdkFlush();
  const auto flushed = a->results(4);
  for (uintptr_t i = 0; i < flushed.size(); ++i) {
    EXPECT_EQ(flushed[i].Status, STATUS_CANCELLED);
    EXPECT_EQ(context_of(flushed[i]), i + 1) << "in posting order";
  }
  EXPECT_TRUE(b->drain().empty()) << "nothing of the chain ran";

  // The same through a close, which starts by flushing (ndkpi.md §10.3); the CQ outlives the QP.
  Player* c = nullptr;
  Player* d = nullptr;
  std::tie(c, d) = pair();
  ASSERT_EQ(c->write(*d, 0, 0, 64, 5, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
  ASSERT_EQ(c->read(*d, 4096, 0, 64, 6, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
  ASSERT_EQ(c->qp->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS);
  c->qp = nullptr;
  const auto closed = c->results(2);
  ASSERT_EQ(closed.size(), 2u);
  EXPECT_EQ(context_of(closed[0]), 5u);
  EXPECT_EQ(context_of(closed[1]), 6u);
  for (const NdkResultEx& r : closed) EXPECT_EQ(r.Status, STATUS_CANCELLED);
}

TEST_F(Datapath, FullQueuesAreInsufficientResources) {
  PlayerOptions small;
  small.send_depth = 4;
  small.receive_depth = 2;
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair(small);
  for (uintptr_t i = 0; i < 4; ++i) ASSERT_EQ(a->send(0, 64, i), STATUS_SUCCESS);  // stuck on RNR
  EXPECT_EQ(a->send(0, 64, 4), STATUS_INSUFFICIENT_RESOURCES);
  EXPECT_EQ(a->receive(0, 64, 0), STATUS_SUCCESS);
  EXPECT_EQ(a->receive(0, 64, 1), STATUS_SUCCESS);
  EXPECT_EQ(a->receive(0, 64, 2), STATUS_INSUFFICIENT_RESOURCES);
  a->qp->NdkFlush();
  EXPECT_EQ(a->results(6).size(), 6u);
  EXPECT_TRUE(a->drain().empty()) << "the refused posts never complete";
}

TEST_F(Datapath, TransportErrorsMapToNtstatus) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  // A receive buffer too small: the receiver's LOC_LEN_ERR is BUFFER_OVERFLOW, the sender's NAK (invalid
  // request) is REMOTE_RESOURCES, and everything after it is CANCELLED (ndkpi.md §11).
  ASSERT_EQ(b->receive(0, 16, 1), STATUS_SUCCESS);
  ASSERT_EQ(b->receive(0, 16, 2), STATUS_SUCCESS);
  ASSERT_EQ(a->send(0, 64, 1), STATUS_SUCCESS);
  ASSERT_EQ(a->send(0, 8, 2), STATUS_SUCCESS);
  const auto sent = a->results(2);
  EXPECT_EQ(sent[0].Status, STATUS_REMOTE_RESOURCES);
  EXPECT_EQ(sent[0].ProviderErrorCode, static_cast<uint32_t>(proto::CompletionStatus::kRemoteInvalidRequest));
  EXPECT_EQ(sent[1].Status, STATUS_CANCELLED);
  const auto received = b->results(2);
  EXPECT_EQ(received[0].Status, STATUS_BUFFER_OVERFLOW);
  EXPECT_EQ(received[1].Status, STATUS_CANCELLED);
}

// The QP's transport report (telemetry's view of it): its state and counters, read on its engine.
std::optional<dataplane::QpReport> report(Adapter& adapter, Qp& qp) {
  return static_cast<detail::AdapterImpl&>(adapter).transport().report_qp(qp.UroceGetQpNumber());
}

uint64_t number(const dataplane::QpReport& r, const std::string& name) {
  for (const auto& [key, value] : r.numbers)
    if (key == name) return value;
  ADD_FAILURE() << "no number " << name;
  return 0;
}

// ndkpi.md §9.9: an overrun CQ notifies STATUS_BUFFER_OVERFLOW (under any arm, ERRORS included), and then the CQ
// and every QP attached to it are unusable and report nothing further. The entries queued before the overrun are
// intact and no result is made up for it; posts on every attached QP fail inline (so none returns success without
// a completion); and the QPs execute nothing more, not even a peer's request.
TEST_F(Datapath, CqOverrunMakesTheCqAndEveryQpOnItUnusable) {
  PlayerOptions tiny;
  tiny.cq_depth = 4;
  tiny.send_depth = 16;
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair(tiny);
  // C: an idle QP on A's CQ, connected to D.
  Player& c = player();
  ASSERT_EQ(c.qp->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS);
  c.qp = nullptr;
  ASSERT_EQ(c.pd->NdkCreateQp(a->cq, a->cq, &c, 16, 16, 4, 4, 0, nullptr, nullptr, &c.qp), STATUS_SUCCESS);
  PlayerOptions on_engine_1;
  on_engine_1.engine = 1;
  Player& d = player(on_engine_1);
  connect(c, d);
  ASSERT_EQ(c.receive(0, 64, 77), STATUS_SUCCESS);

  a->cq->NdkArmCq(NDK_CQ_NOTIFY_ERRORS);
  // One doorbell for all eight (DEFER on the first seven): posted one by one, the engine could complete five and
  // overrun the CQ before the last posts, which would then fail as they should on an unusable QP.
  for (uintptr_t i = 0; i < 8; ++i) {
    a->fill(1024 * i, 1024, static_cast<uint8_t>(i));
    ASSERT_EQ(a->write(*b, 1024 * i, 1024 * i, 1024, i, i + 1 < 8 ? NDK_OP_FLAG_DEFER : 0), STATUS_SUCCESS);
  }
  ASSERT_TRUE(eventually([&] { return a->notifications.count.load() == 1; }));
  EXPECT_EQ(a->notifications.last_status.load(), STATUS_BUFFER_OVERFLOW);
  std::array<NdkResult, 16> r{};
  const uint32_t n = a->cq->NdkGetCqResults(r.data(), 16);
  ASSERT_EQ(n, 4u) << "the four entries the CQ held, and no made-up result for the overrun";
  for (uintptr_t i = 0; i < 4; ++i) {
    EXPECT_EQ(r[i].Status, STATUS_SUCCESS);
    EXPECT_EQ(r[i].QPContext, a);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r[i].RequestContext), i);
  }

  // Every QP on the CQ refuses work: A (the one that overran it) and C (idle), on both queues.
  EXPECT_EQ(a->write(*b, 0, 0, 64, 100), STATUS_INTERNAL_ERROR);
  EXPECT_EQ(a->send(0, 64, 101), STATUS_INTERNAL_ERROR);
  EXPECT_EQ(a->receive(0, 64, 102), STATUS_INTERNAL_ERROR);
  EXPECT_EQ(c.write(d, 0, 0, 64, 103), STATUS_INTERNAL_ERROR);
  EXPECT_EQ(c.receive(0, 64, 104), STATUS_INTERNAL_ERROR);
  EXPECT_EQ(c.qp->NdkInvalidate(nullptr, c.mr, 0), STATUS_INTERNAL_ERROR);

  // C executes nothing: D's WRITE into C's memory arrives (C counts it as not ready) and is dropped.
  ASSERT_EQ(d.write(c, 0, 4096, 512, 105), STATUS_SUCCESS);
  std::optional<dataplane::QpReport> seen;
  ASSERT_TRUE(eventually([&] {
    seen = report(adapter(), *c.qp);
    return seen && number(*seen, "rx_qp_not_ready") >= 1;
  }));
  for (const auto& [key, value] : seen->text) {
    if (key == "state") {
      EXPECT_EQ(value, "ERR");
    }
  }
  EXPECT_TRUE(std::all_of(c.buffer + 4096, c.buffer + 4096 + 512, [](uint8_t x) { return x == 0; }))
      << "a dead QP placed a peer's WRITE";

  EXPECT_EQ(a->cq->NdkGetCqResults(r.data(), 16), 0u) << "nothing further: not the flushes of A's or C's work";
  a->cq->NdkArmCq(NDK_CQ_NOTIFY_ANY);
  adapter().UroceWaitForNotifier();
  EXPECT_EQ(a->notifications.count.load(), 1) << "the overrun is reported once";
}

}  // namespace
}  // namespace uroce::ndk::testing
