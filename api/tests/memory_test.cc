// Fast-register MRs, local and remote invalidation, memory windows, SRQs and CQ resize, end to end.
#include <algorithm>
#include <array>
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

class Memory : public ApiTest {
 protected:
  static constexpr std::size_t kPageSize = detail::kPageSize;  // the adapter page

  // A fast-register MR over `pages` pages of `p`'s buffer from `offset`, registered through p's QP.
  Mr* fast_register(Player& p, std::size_t offset, uint32_t pages, uint32_t flags, uintptr_t context) {
    Mr* mr = nullptr;
    EXPECT_EQ(p.pd->NdkCreateMr(true, nullptr, nullptr, &mr), STATUS_SUCCESS);
    EXPECT_EQ(mr->NdkInitializeFastRegisterMr(pages, true, nullptr, nullptr), STATUS_SUCCESS);
    std::vector<NdkLogicalAddress> list;
    for (uint32_t i = 0; i < pages; ++i) list.push_back(p.address(offset + kPageSize * i));
    EXPECT_EQ(p.qp->NdkFastRegister(reinterpret_cast<void*>(context), mr, pages, list.data(), 0, kPageSize * pages,
                                    p.buffer + offset, flags),
              STATUS_SUCCESS);
    return mr;
  }
};

uintptr_t context_of(const NdkResultEx& r) { return reinterpret_cast<uintptr_t>(r.RequestContext); }

TEST_F(Memory, FastRegisterThenInvalidateOpensAndClosesRemoteAccess) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  Mr* mr = fast_register(*b, 65536, 2, NDK_OP_FLAG_ALLOW_REMOTE_WRITE | NDK_OP_FLAG_ALLOW_REMOTE_READ, 1);
  const NdkResultEx fr = b->result();
  EXPECT_EQ(fr.Status, STATUS_SUCCESS);
  EXPECT_EQ(fr.Type, NdkOperationTypeFastRegister);
  const uint32_t token = mr->NdkGetRemoteTokenFromMr();

  a->fill(0, 8192, 4);
  const NdkSge s = a->sge(0, 8192);
  ASSERT_EQ(a->qp->NdkWrite(reinterpret_cast<void*>(2), &s, 1, b->address(65536), token, 0), STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(std::memcmp(a->buffer, b->buffer + 65536, 8192), 0);

  ASSERT_EQ(b->qp->NdkInvalidate(reinterpret_cast<void*>(3), mr, 0), STATUS_SUCCESS);
  const NdkResultEx inv = b->result();
  EXPECT_EQ(inv.Status, STATUS_SUCCESS);
  EXPECT_EQ(inv.Type, NdkOperationTypeInvalidate);
  ASSERT_EQ(a->qp->NdkWrite(reinterpret_cast<void*>(4), &s, 1, b->address(65536), token, 0), STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_REMOTE_RESOURCES) << "the token is invalid now";
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
}

// Review row I5 (ndkpi.md §6.1): NdkFastRegister's ALLOW_LOCAL_WRITE lets the MR be written by local operations.
// A READ whose sink is an MR registered with it lands; into one registered without it (remote read only), the READ
// fails with a local protection error and writes nothing.
TEST_F(Memory, FastRegisterAllowLocalWriteMakesTheMrAReadSink) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  a->fill(0, 4096, 9);
  const uint64_t source = a->address(0);
  const uint32_t source_token = a->mr->NdkGetRemoteTokenFromMr();

  Mr* writable = fast_register(*b, 65536, 1, NDK_OP_FLAG_ALLOW_LOCAL_WRITE, 1);
  EXPECT_EQ(b->result().Status, STATUS_SUCCESS);
  const NdkSge into_writable{b->buffer + 65536, 4096, writable->NdkGetLocalTokenFromMr()};
  ASSERT_EQ(b->qp->NdkRead(reinterpret_cast<void*>(2), &into_writable, 1, source, source_token, 0), STATUS_SUCCESS);
  EXPECT_EQ(b->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(std::memcmp(a->buffer, b->buffer + 65536, 4096), 0);

  std::memset(b->buffer + 131072, 0x5C, 4096);
  Mr* read_only = fast_register(*b, 131072, 1, NDK_OP_FLAG_ALLOW_REMOTE_READ, 3);
  EXPECT_EQ(b->result().Status, STATUS_SUCCESS);
  const NdkSge into_read_only{b->buffer + 131072, 4096, read_only->NdkGetLocalTokenFromMr()};
  ASSERT_EQ(b->qp->NdkRead(reinterpret_cast<void*>(4), &into_read_only, 1, source, source_token, 0), STATUS_SUCCESS);
  EXPECT_EQ(b->result().Status, STATUS_ACCESS_VIOLATION);
  for (std::size_t i = 0; i < 4096; ++i) ASSERT_EQ(b->buffer[131072 + i], 0x5C) << "byte " << i;
  EXPECT_EQ(writable->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(read_only->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
}

// ndkpi.md §9.4: NdkInitializeFastRegisterMr "may be repeated, serially or in parallel". Eight threads at once
// leave one memory-table slot behind (a racing reservation is given back), and the MR registers and works.
TEST_F(Memory, InitializeFastRegisterMrInParallelTakesOneSlot) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  const uint32_t slots_before = adapter().UroceQueryResources().MemorySlots;
  for (int round = 0; round < 20; ++round) {
    Mr* mr = nullptr;
    ASSERT_EQ(b->pd->NdkCreateMr(true, nullptr, nullptr, &mr), STATUS_SUCCESS);
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    std::array<NTSTATUS, 8> status{};
    for (std::size_t t = 0; t < status.size(); ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < static_cast<int>(status.size())) {
        }
        status[t] = mr->NdkInitializeFastRegisterMr(static_cast<uint32_t>(1 + t % 2), true, nullptr, nullptr);
      });
    }
    for (std::thread& t : threads) t.join();
    for (NTSTATUS st : status) EXPECT_EQ(st, STATUS_SUCCESS);
    EXPECT_EQ(adapter().UroceQueryResources().MemorySlots, slots_before + 1) << "round " << round;
    if (round == 0) {  // and it works: one page registered, written by the peer
      std::array<NdkLogicalAddress, 1> page{b->address(65536)};
      ASSERT_EQ(mr->NdkInitializeFastRegisterMr(1, true, nullptr, nullptr), STATUS_SUCCESS);
      ASSERT_EQ(b->qp->NdkFastRegister(reinterpret_cast<void*>(1), mr, 1, page.data(), 0, kPageSize, b->buffer + 65536,
                                       NDK_OP_FLAG_ALLOW_REMOTE_WRITE),
                STATUS_SUCCESS);
      ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
      a->fill(0, 4096, 9);
      const NdkSge sge = a->sge(0, 4096);
      ASSERT_EQ(
          a->qp->NdkWrite(reinterpret_cast<void*>(2), &sge, 1, b->address(65536), mr->NdkGetRemoteTokenFromMr(), 0),
          STATUS_SUCCESS);
      EXPECT_EQ(a->result().Status, STATUS_SUCCESS);
      EXPECT_EQ(std::memcmp(a->buffer, b->buffer + 65536, 4096), 0);
    }
    ASSERT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
    EXPECT_EQ(adapter().UroceQueryResources().MemorySlots, slots_before);
  }
}

// cpu_access.h: NdkFastRegister takes any page list, so it checks that the engines can touch the pages as the
// registration allows: read-only pages may be fast-registered for peers' READs (and are read end to end), not for
// writes; a list with a page that is no longer mapped is refused. Nothing is posted for a refused registration.
TEST_F(Memory, FastRegisterRefusesPagesTheEnginesWouldFaultOn) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  void* mapping = mmap(nullptr, 3 * kPageSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapping, MAP_FAILED);
  auto* pages = static_cast<uint8_t*>(mapping);
  std::memset(pages, 0x5A, 2 * kPageSize);
  ASSERT_EQ(mprotect(pages, 2 * kPageSize, PROT_READ), 0);
  ASSERT_EQ(munmap(pages + 2 * kPageSize, kPageSize), 0);
  const std::array<NdkLogicalAddress, 2> read_only = {reinterpret_cast<uint64_t>(pages),
                                                      reinterpret_cast<uint64_t>(pages + kPageSize)};
  const std::array<NdkLogicalAddress, 2> with_a_hole = {reinterpret_cast<uint64_t>(pages),
                                                        reinterpret_cast<uint64_t>(pages + 2 * kPageSize)};
  Mr* mr = nullptr;
  ASSERT_EQ(b->pd->NdkCreateMr(true, nullptr, nullptr, &mr), STATUS_SUCCESS);
  ASSERT_EQ(mr->NdkInitializeFastRegisterMr(2, true, nullptr, nullptr), STATUS_SUCCESS);
  for (const uint32_t writes : {uint32_t{NDK_OP_FLAG_ALLOW_REMOTE_WRITE}, uint32_t{NDK_OP_FLAG_ALLOW_LOCAL_WRITE}}) {
    EXPECT_EQ(b->qp->NdkFastRegister(nullptr, mr, 2, read_only.data(), 0, 2 * kPageSize, pages, writes),
              STATUS_INVALID_PARAMETER)
        << "read-only pages, flags " << writes;
  }
  EXPECT_EQ(b->qp->NdkFastRegister(nullptr, mr, 2, with_a_hole.data(), 0, 2 * kPageSize, pages,
                                   NDK_OP_FLAG_ALLOW_REMOTE_READ),
            STATUS_INVALID_PARAMETER)
      << "an unmapped page";
  ASSERT_EQ(b->qp->NdkFastRegister(reinterpret_cast<void*>(1), mr, 2, read_only.data(), 0, 2 * kPageSize, pages,
                                   NDK_OP_FLAG_ALLOW_REMOTE_READ),
            STATUS_SUCCESS);
  EXPECT_EQ(context_of(b->result()), 1u) << "the refused registrations posted nothing";

  const NdkSge into = a->sge(0, 2 * kPageSize);
  ASSERT_EQ(a->qp->NdkRead(reinterpret_cast<void*>(2), &into, 1, reinterpret_cast<uint64_t>(pages),
                           mr->NdkGetRemoteTokenFromMr(), 0),
            STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_SUCCESS);
  EXPECT_TRUE(std::all_of(a->buffer, a->buffer + 2 * kPageSize, [](uint8_t v) { return v == 0x5A; }));
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(munmap(pages, 2 * kPageSize), 0);
}

// ndkpi.md §8, §9.4: a registration may complete later. One of more than 1 MiB with a completion routine checks its
// pages off the caller's thread (a poller that registers 32 MiB as a host connects stalled ~2.5 ms): it returns
// STATUS_PENDING and completes once, from another thread, and the MR then works; a second registration meanwhile is
// refused; a failed one completes with its failure and leaves the MR free to be registered again. A small one, like
// any without a completion routine, finishes inline and never calls it.
TEST_F(Memory, ALargeRegistrationWithACompletionCompletesOffTheCallersThread) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  struct Completed {
    std::atomic<int> calls{0};
    std::atomic<NTSTATUS> status{STATUS_PENDING};
    std::thread::id thread;
    static void complete(void* context, NTSTATUS s) {
      auto& c = *static_cast<Completed*>(context);
      c.thread = std::this_thread::get_id();
      c.status.store(s);
      c.calls.fetch_add(1);  // last: the test reads `thread` after it
    }
  };
  constexpr std::size_t kBytes = std::size_t{8} << 20;
  void* mapped = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* memory = static_cast<uint8_t*>(mapped);
  Mr* mr = nullptr;
  ASSERT_EQ(b->pd->NdkCreateMr(false, nullptr, nullptr, &mr), STATUS_SUCCESS);

  // A hole in the middle: the registration fails, through its completion.
  ASSERT_EQ(munmap(memory + kBytes / 2, 4096), 0);
  Completed failed;
  ASSERT_EQ(mr->NdkRegisterMr(memory, kBytes, NDK_MR_FLAG_ALLOW_REMOTE_WRITE, &Completed::complete, &failed),
            STATUS_PENDING);
  ASSERT_TRUE(eventually([&] { return failed.calls.load() != 0; }));
  EXPECT_NE(failed.status.load(), STATUS_SUCCESS);

  // The MR is free again; the first half registers, pending, from another thread.
  Completed done;
  ASSERT_EQ(mr->NdkRegisterMr(memory, kBytes / 2, NDK_MR_FLAG_ALLOW_REMOTE_WRITE, &Completed::complete, &done),
            STATUS_PENDING);
  EXPECT_EQ(mr->NdkRegisterMr(memory, kBytes / 2, NDK_MR_FLAG_ALLOW_REMOTE_WRITE, nullptr, nullptr),
            STATUS_INVALID_DEVICE_REQUEST);
  ASSERT_TRUE(eventually([&] { return done.calls.load() != 0; }));
  EXPECT_EQ(done.status.load(), STATUS_SUCCESS);
  EXPECT_NE(done.thread, std::this_thread::get_id());
  a->fill(0, 64, 3);
  const NdkSge s = a->sge(0, 64);
  ASSERT_EQ(
      a->qp->NdkWrite(nullptr, &s, 1, reinterpret_cast<uint64_t>(memory) + 4096, mr->NdkGetRemoteTokenFromMr(), 0),
      STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(std::memcmp(memory + 4096, a->buffer, 64), 0);
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);

  // 1 MiB with a completion routine: inline, and the routine is never called.
  Mr* small = nullptr;
  ASSERT_EQ(b->pd->NdkCreateMr(false, nullptr, nullptr, &small), STATUS_SUCCESS);
  Completed inline_done;
  EXPECT_EQ(small->NdkRegisterMr(memory, std::size_t{1} << 20, 0, &Completed::complete, &inline_done), STATUS_SUCCESS);
  EXPECT_EQ(small->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(inline_done.calls.load(), 0);
  EXPECT_EQ(munmap(memory, kBytes / 2), 0);
  EXPECT_EQ(munmap(memory + kBytes / 2 + 4096, kBytes / 2 - 4096), 0);
}

TEST_F(Memory, ReRegisteringChangesTheTokenAndTheOldOneStopsWorking) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  Mr* mr = fast_register(*b, 0, 1, NDK_OP_FLAG_ALLOW_REMOTE_WRITE, 1);
  const uint32_t first = mr->NdkGetRemoteTokenFromMr();
  EXPECT_EQ(b->result().Status, STATUS_SUCCESS);
  ASSERT_EQ(b->qp->NdkInvalidate(nullptr, mr, NDK_OP_FLAG_SILENT_SUCCESS), STATUS_SUCCESS);
  const NdkLogicalAddress page = b->address(0);
  ASSERT_EQ(b->qp->NdkFastRegister(reinterpret_cast<void*>(2), mr, 1, &page, 0, 4096, b->buffer,
                                   NDK_OP_FLAG_ALLOW_REMOTE_WRITE),
            STATUS_SUCCESS);
  const uint32_t second = mr->NdkGetRemoteTokenFromMr();
  EXPECT_NE(first, second) << "the key byte moves on (consumers re-read tokens after NdkFastRegister)";
  EXPECT_EQ(context_of(b->result()), 2u) << "the silent invalidate left no completion";
  const NdkSge s = a->sge(0, 64);
  ASSERT_EQ(a->qp->NdkWrite(nullptr, &s, 1, b->address(), second, 0), STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_SUCCESS);
  ASSERT_EQ(a->qp->NdkWrite(nullptr, &s, 1, b->address(), first, 0), STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_REMOTE_RESOURCES);
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
}

// ndkpi.md §5, §9.2, §9.6: GetCqResultsEx reports ReceiveAndInvalidate with the token; GetCqResults reports an
// ordinary receive (the invalidation still happened); invalidating the token again fails as usual.
TEST_F(Memory, RemoteInvalidationAndHowEachResultCallReportsIt) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  Mr* mr = fast_register(*b, 131072, 1, NDK_OP_FLAG_ALLOW_REMOTE_WRITE, 1);
  EXPECT_EQ(b->result().Status, STATUS_SUCCESS);
  const uint32_t token = mr->NdkGetRemoteTokenFromMr();
  ASSERT_EQ(b->receive(0, 64, 10), STATUS_SUCCESS);
  const NdkSge s = a->sge(0, 64);
  ASSERT_EQ(a->qp->NdkSendAndInvalidate(reinterpret_cast<void*>(5), &s, 1, 0, token), STATUS_SUCCESS);
  const NdkResultEx sent = a->result();
  EXPECT_EQ(sent.Status, STATUS_SUCCESS);
  EXPECT_EQ(sent.Type, NdkOperationTypeSend) << "the sender's side is a Send";
  const NdkResultEx got = b->result();
  EXPECT_EQ(got.Status, STATUS_SUCCESS);
  EXPECT_EQ(got.Type, NdkOperationTypeReceiveAndInvalidate);
  EXPECT_EQ(got.TypeSpecificCompletionOutput, token);
  EXPECT_EQ(context_of(got), 10u);

  // Again, reaped with the plain call: an ordinary receive result, but the token is gone all the same.
  const NdkLogicalAddress page = b->address(131072);
  ASSERT_EQ(b->qp->NdkFastRegister(nullptr, mr, 1, &page, 0, 4096, b->buffer + 131072, NDK_OP_FLAG_ALLOW_REMOTE_WRITE),
            STATUS_SUCCESS);
  const uint32_t token2 = mr->NdkGetRemoteTokenFromMr();
  EXPECT_EQ(b->result().Status, STATUS_SUCCESS) << "registered before the token is handed out";
  ASSERT_EQ(b->receive(0, 64, 11), STATUS_SUCCESS);
  ASSERT_EQ(a->qp->NdkSendAndInvalidate(reinterpret_cast<void*>(6), &s, 1, 0, token2), STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_SUCCESS);
  const NdkResult plain = b->plain_results(1).front();
  EXPECT_EQ(plain.Status, STATUS_SUCCESS);
  EXPECT_EQ(plain.BytesTransferred, 64u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(plain.RequestContext), 11u);
  // B invalidates what the peer already invalidated: it fails like any invalidation of an invalid key (and,
  // as any failed work request, takes B's QP to the error state).
  ASSERT_EQ(b->qp->NdkInvalidate(reinterpret_cast<void*>(7), mr, 0), STATUS_SUCCESS);
  const NdkResultEx again = b->result();
  EXPECT_EQ(again.Status, STATUS_INVALID_DEVICE_REQUEST);
  EXPECT_EQ(again.Type, NdkOperationTypeInvalidate);
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
}

TEST_F(Memory, AWindowGrantsRemoteAccessToItsRangeOnly) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  Mw* mw = nullptr;
  ASSERT_EQ(b->pd->NdkCreateMw(nullptr, nullptr, &mw), STATUS_SUCCESS);
  ASSERT_EQ(b->qp->NdkBind(reinterpret_cast<void*>(1), b->mr, mw, b->buffer + 8192, 4096,
                           NDK_OP_FLAG_ALLOW_REMOTE_WRITE | NDK_OP_FLAG_ALLOW_REMOTE_READ),
            STATUS_SUCCESS);
  const uint32_t token = mw->NdkGetRemoteTokenFromMw();  // known as soon as NdkBind returns
  const NdkResultEx bound = b->result();
  EXPECT_EQ(bound.Status, STATUS_SUCCESS);
  EXPECT_EQ(bound.Type, NdkOperationTypeBind);
  a->fill(0, 4096, 8);
  const NdkSge s = a->sge(0, 4096);
  ASSERT_EQ(a->qp->NdkWrite(nullptr, &s, 1, b->address(8192), token, 0), STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(std::memcmp(a->buffer, b->buffer + 8192, 4096), 0);
  // The MR's close waits for the window bound to it (ndkpi.md §2: MR -> MW after NdkBind).
  Completion mr_closed;
  EXPECT_EQ(b->mr->NdkCloseMr(&Completion::on_close, &mr_closed), STATUS_PENDING);
  b->mr = nullptr;
  ASSERT_EQ(b->qp->NdkInvalidate(reinterpret_cast<void*>(2), mw, 0), STATUS_SUCCESS);
  EXPECT_EQ(b->result().Status, STATUS_SUCCESS);
  ASSERT_EQ(a->qp->NdkWrite(nullptr, &s, 1, b->address(8192), token, 0), STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_REMOTE_RESOURCES);
  EXPECT_EQ(mw->NdkCloseMw(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_TRUE(mr_closed.done.load());
}

// H7 (ndkpi.md §9.6 has no restriction): a window bound onto a fast-register MR, inside the range its last
// FastRegister gave it. The engine checks the range when it binds: a window reaching outside it fails.
TEST_F(Memory, AWindowOnAFastRegisterMr) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  Mr* mr = fast_register(*b, 65536, 2, NDK_OP_FLAG_ALLOW_LOCAL_WRITE, 1);  // no remote rights of its own
  ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
  Mw* mw = nullptr;
  ASSERT_EQ(b->pd->NdkCreateMw(nullptr, nullptr, &mw), STATUS_SUCCESS);
  ASSERT_EQ(b->qp->NdkBind(reinterpret_cast<void*>(2), mr, mw, b->buffer + 65536 + kPageSize, kPageSize,
                           NDK_OP_FLAG_ALLOW_REMOTE_WRITE),
            STATUS_SUCCESS);
  const NdkResultEx bound = b->result();
  EXPECT_EQ(bound.Status, STATUS_SUCCESS);
  EXPECT_EQ(bound.Type, NdkOperationTypeBind);
  a->fill(0, kPageSize, 12);
  const NdkSge s = a->sge(0, kPageSize);
  const uint32_t token = mw->NdkGetRemoteTokenFromMw();
  ASSERT_EQ(a->qp->NdkWrite(reinterpret_cast<void*>(3), &s, 1, b->address(65536 + kPageSize), token, 0),
            STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(std::memcmp(a->buffer, b->buffer + 65536 + kPageSize, kPageSize), 0);
  ASSERT_EQ(b->qp->NdkInvalidate(reinterpret_cast<void*>(4), mw, 0), STATUS_SUCCESS);
  EXPECT_EQ(b->result().Status, STATUS_SUCCESS);
  // A window one page past the MR's two: the bind completes in error, and the window stays unusable.
  ASSERT_EQ(b->qp->NdkBind(reinterpret_cast<void*>(5), mr, mw, b->buffer + 65536 + kPageSize, 2 * kPageSize,
                           NDK_OP_FLAG_ALLOW_REMOTE_WRITE),
            STATUS_SUCCESS);
  EXPECT_NE(b->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(mw->NdkCloseMw(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
}

// Review row H9 (ndkpi.md §9.6): NdkFastRegister takes any page list, as a storage target's page pool gives it,
// with BaseVirtualAddress = FBO + n x PAGE_SIZE anywhere (here an address nothing is mapped at). The region's
// bytes are where the list says: a remote WRITE and READ, a window bound on it, and local use as a SEND's
// gather list, a receive's scatter list and a READ's sink all cross its page boundaries and land page by page,
// and nothing outside its pages changes.
TEST_F(Memory, FastRegisterTakesScatteredPagesAtAnyBaseAddress) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  constexpr uint32_t kPages = 4;
  constexpr uint32_t kFbo = 100;
  constexpr std::size_t kLength = kPages * kPageSize - kFbo - 52;
  const std::array<std::size_t, kPages> page_offsets = {9 * kPageSize, 2 * kPageSize, 13 * kPageSize, 3 * kPageSize};
  std::array<NdkLogicalAddress, kPages> list{};
  for (uint32_t i = 0; i < kPages; ++i) list[i] = b->address(page_offsets[i]);
  const uint64_t base = (uint64_t{0x5A5A} << 32) + 7 * kPageSize + kFbo;
  // Where byte `i` of the region is in b's buffer.
  const auto at = [&](std::size_t i) { return page_offsets[(kFbo + i) / kPageSize] + (kFbo + i) % kPageSize; };
  std::memset(b->buffer, 0xEE, 16 * kPageSize);
  std::vector<bool> in_region(16 * kPageSize);
  for (std::size_t i = 0; i < kLength; ++i) in_region[at(i)] = true;
  const auto outside_untouched = [&] {
    for (std::size_t i = 0; i < in_region.size(); ++i)
      if (!in_region[i] && b->buffer[i] != 0xEE) return false;
    return true;
  };

  Mr* mr = nullptr;
  ASSERT_EQ(b->pd->NdkCreateMr(true, nullptr, nullptr, &mr), STATUS_SUCCESS);
  ASSERT_EQ(mr->NdkInitializeFastRegisterMr(kPages, true, nullptr, nullptr), STATUS_SUCCESS);
  ASSERT_EQ(b->qp->NdkFastRegister(
                reinterpret_cast<void*>(1), mr, kPages, list.data(), kFbo, kLength, reinterpret_cast<void*>(base),
                NDK_OP_FLAG_ALLOW_LOCAL_WRITE | NDK_OP_FLAG_ALLOW_REMOTE_WRITE | NDK_OP_FLAG_ALLOW_REMOTE_READ),
            STATUS_SUCCESS);
  list.fill(0);  // the caller's array is its own again once the call returns
  ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
  const uint32_t rtoken = mr->NdkGetRemoteTokenFromMr();
  const uint32_t ltoken = mr->NdkGetLocalTokenFromMr();

  // A remote WRITE of the whole region (PMTU 1024: packets cross the page boundaries).
  a->fill(0, kLength, 21);
  NdkSge s = a->sge(0, kLength);
  ASSERT_EQ(a->qp->NdkWrite(reinterpret_cast<void*>(2), &s, 1, base, rtoken, 0), STATUS_SUCCESS);
  ASSERT_EQ(a->result().Status, STATUS_SUCCESS);
  for (std::size_t i = 0; i < kLength; ++i) ASSERT_EQ(b->buffer[at(i)], a->buffer[i]) << "byte " << i;
  EXPECT_TRUE(outside_untouched());

  // A remote READ of all of it.
  s = a->sge(262144, kLength);
  ASSERT_EQ(a->qp->NdkRead(reinterpret_cast<void*>(3), &s, 1, base, rtoken, 0), STATUS_SUCCESS);
  ASSERT_EQ(a->result().Status, STATUS_SUCCESS);
  EXPECT_EQ(std::memcmp(a->buffer + 262144, a->buffer, kLength), 0);

  // Local use. b SENDs 6000 bytes of the region (its gather list crosses two page boundaries).
  const auto region_sge = [&](uint64_t offset, uint32_t length) {
    return NdkSge{reinterpret_cast<void*>(base + offset), length, ltoken};
  };
  ASSERT_EQ(a->receive(524288, 8192, 4), STATUS_SUCCESS);
  NdkSge local = region_sge(10, 6000);
  ASSERT_EQ(b->qp->NdkSend(reinterpret_cast<void*>(5), &local, 1, 0), STATUS_SUCCESS);
  ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
  const NdkResultEx sent = a->result();
  ASSERT_EQ(sent.Status, STATUS_SUCCESS);
  ASSERT_EQ(sent.BytesTransferred, 6000U);
  EXPECT_EQ(std::memcmp(a->buffer + 524288, a->buffer + 10, 6000), 0);
  // A receive into the region.
  local = region_sge(200, 5000);
  ASSERT_EQ(b->qp->NdkReceive(reinterpret_cast<void*>(6), &local, 1), STATUS_SUCCESS);
  a->fill(600000, 5000, 33);
  ASSERT_EQ(a->send(600000, 5000, 7), STATUS_SUCCESS);
  ASSERT_EQ(a->result().Status, STATUS_SUCCESS);
  ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
  for (std::size_t i = 0; i < 5000; ++i) ASSERT_EQ(b->buffer[at(200 + i)], a->buffer[600000 + i]) << "byte " << i;
  // The region as a READ's sink.
  a->fill(700000, 4500, 55);
  local = region_sge(3000, 4500);
  ASSERT_EQ(
      b->qp->NdkRead(reinterpret_cast<void*>(8), &local, 1, a->address(700000), a->mr->NdkGetRemoteTokenFromMr(), 0),
      STATUS_SUCCESS);
  ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
  for (std::size_t i = 0; i < 4500; ++i) ASSERT_EQ(b->buffer[at(3000 + i)], a->buffer[700000 + i]) << "byte " << i;

  // A window over [base + 1000, base + 7000), and a remote WRITE through it.
  Mw* mw = nullptr;
  ASSERT_EQ(b->pd->NdkCreateMw(nullptr, nullptr, &mw), STATUS_SUCCESS);
  ASSERT_EQ(b->qp->NdkBind(reinterpret_cast<void*>(9), mr, mw, reinterpret_cast<void*>(base + 1000), 6000,
                           NDK_OP_FLAG_ALLOW_REMOTE_WRITE),
            STATUS_SUCCESS);
  ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
  a->fill(800000, 6000, 77);
  s = a->sge(800000, 6000);
  ASSERT_EQ(a->qp->NdkWrite(reinterpret_cast<void*>(10), &s, 1, base + 1000, mw->NdkGetRemoteTokenFromMw(), 0),
            STATUS_SUCCESS);
  ASSERT_EQ(a->result().Status, STATUS_SUCCESS);
  for (std::size_t i = 0; i < 6000; ++i) ASSERT_EQ(b->buffer[at(1000 + i)], a->buffer[800000 + i]) << "byte " << i;
  EXPECT_TRUE(outside_untouched());

  // Past the region's end: a remote access error (and the connection ends, as IBTA says).
  s = a->sge(0, 64);
  ASSERT_EQ(a->qp->NdkWrite(reinterpret_cast<void*>(11), &s, 1, base + kLength - 32, rtoken, 0), STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_REMOTE_RESOURCES);
  EXPECT_EQ(mw->NdkCloseMw(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
}

TEST_F(Memory, AWriteOutsideTheWindowIsARemoteError) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  Mw* mw = nullptr;
  ASSERT_EQ(b->pd->NdkCreateMw(nullptr, nullptr, &mw), STATUS_SUCCESS);
  ASSERT_EQ(b->qp->NdkBind(nullptr, b->mr, mw, b->buffer + 8192, 4096,
                           NDK_OP_FLAG_ALLOW_REMOTE_WRITE | NDK_OP_FLAG_SILENT_SUCCESS),
            STATUS_SUCCESS);
  // B learns the bind has executed from a later signalled request on the same queue (in-order completion).
  ASSERT_EQ(b->qp->NdkWrite(reinterpret_cast<void*>(9), nullptr, 0, a->address(), a->token(), 0), STATUS_SUCCESS);
  EXPECT_EQ(context_of(b->result()), 9u);
  const NdkSge s = a->sge(0, 64);
  ASSERT_EQ(a->qp->NdkWrite(nullptr, &s, 1, b->address(8192 + 4096 - 32), mw->NdkGetRemoteTokenFromMw(), 0),
            STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_REMOTE_RESOURCES);
  EXPECT_EQ(mw->NdkCloseMw(nullptr, nullptr), STATUS_SUCCESS);
}

TEST_F(Memory, DeregisteredMemoryIsNoLongerReachable) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  const uint32_t token = b->token();
  ASSERT_EQ(b->mr->NdkDeregisterMr(nullptr, nullptr), STATUS_SUCCESS);
  const NdkSge s = a->sge(0, 64);
  ASSERT_EQ(a->qp->NdkWrite(nullptr, &s, 1, b->address(), token, 0), STATUS_SUCCESS);
  EXPECT_EQ(a->result().Status, STATUS_REMOTE_RESOURCES);
}

// After its MR's registration ended, B's memory [offset, offset + length) is the consumer's again: A's WRITE
// through the window `token` fails and changes none of it.
void expect_window_reaches_nothing(Player& a, Player& b, uint32_t token, std::size_t offset, std::size_t length) {
  std::memset(b.buffer + offset, 0x5A, length);
  a.fill(0, length, 8);
  const NdkSge s = a.sge(0, static_cast<uint32_t>(length));
  ASSERT_EQ(a.qp->NdkWrite(nullptr, &s, 1, b.address(offset), token, 0), STATUS_SUCCESS);
  EXPECT_EQ(a.result().Status, STATUS_REMOTE_RESOURCES) << "the window died with its MR's registration";
  EXPECT_TRUE(std::all_of(b.buffer + offset, b.buffer + offset + length, [](uint8_t v) { return v == 0x5A; }))
      << "a remote WRITE through the window reached memory whose registration had ended";
}

// A window lives in its MR (ndkpi.md §9.6: "MW over [VA, VA+Length) inside the MR"): once NdkDeregisterMr has
// returned, the memory is the consumer's again, so no window bound onto the MR may still reach it.
TEST_F(Memory, DeregisteringAnMrEndsTheWindowsBoundToIt) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  Mw* mw = nullptr;
  ASSERT_EQ(b->pd->NdkCreateMw(nullptr, nullptr, &mw), STATUS_SUCCESS);
  ASSERT_EQ(b->qp->NdkBind(reinterpret_cast<void*>(1), b->mr, mw, b->buffer + 8192, 4096,
                           NDK_OP_FLAG_ALLOW_REMOTE_WRITE | NDK_OP_FLAG_ALLOW_REMOTE_READ),
            STATUS_SUCCESS);
  const uint32_t token = mw->NdkGetRemoteTokenFromMw();
  ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
  ASSERT_EQ(b->mr->NdkDeregisterMr(nullptr, nullptr), STATUS_SUCCESS);
  expect_window_reaches_nothing(*a, *b, token, 8192, 4096);
  EXPECT_EQ(mw->NdkCloseMw(nullptr, nullptr), STATUS_SUCCESS);
}

// The same for a fast-register MR: once NdkInvalidate of the MR has completed, its pages are the consumer's again,
// and a window bound onto it reaches them no more.
TEST_F(Memory, InvalidatingAFastRegisterMrEndsTheWindowsBoundToIt) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  Mr* mr = fast_register(*b, 65536, 2, NDK_OP_FLAG_ALLOW_LOCAL_WRITE, 1);
  ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
  Mw* mw = nullptr;
  ASSERT_EQ(b->pd->NdkCreateMw(nullptr, nullptr, &mw), STATUS_SUCCESS);
  ASSERT_EQ(
      b->qp->NdkBind(reinterpret_cast<void*>(2), mr, mw, b->buffer + 65536, kPageSize, NDK_OP_FLAG_ALLOW_REMOTE_WRITE),
      STATUS_SUCCESS);
  ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
  const uint32_t token = mw->NdkGetRemoteTokenFromMw();
  ASSERT_EQ(b->qp->NdkInvalidate(reinterpret_cast<void*>(3), mr, 0), STATUS_SUCCESS);
  ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
  expect_window_reaches_nothing(*a, *b, token, 65536, kPageSize);
  EXPECT_EQ(mw->NdkCloseMw(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
}

// A fast register onto an MR whose registration is still valid fails (IBTA: it needs a free MR; the consumer
// invalidates first), and the QP with it. The post has already moved the MR's token on, so neither NdkInvalidate
// nor the peer could end the old registration any more: the failure ends it, and the old token reaches nothing.
TEST_F(Memory, AFastRegisterOntoAValidRegistrationFailsAndEndsIt) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  Mr* mr = fast_register(*b, 65536, 2, NDK_OP_FLAG_ALLOW_REMOTE_WRITE | NDK_OP_FLAG_ALLOW_REMOTE_READ, 1);
  ASSERT_EQ(b->result().Status, STATUS_SUCCESS);
  const uint32_t old_token = mr->NdkGetRemoteTokenFromMr();
  const std::array<NdkLogicalAddress, 2> pages{b->address(65536), b->address(65536 + kPageSize)};
  ASSERT_EQ(b->qp->NdkFastRegister(reinterpret_cast<void*>(2), mr, 2, pages.data(), 0, 2 * kPageSize, b->buffer + 65536,
                                   NDK_OP_FLAG_ALLOW_REMOTE_WRITE),
            STATUS_SUCCESS);
  EXPECT_NE(b->result().Status, STATUS_SUCCESS);
  const std::optional<dataplane::MemoryRegion> old =
      static_cast<detail::AdapterImpl&>(adapter()).transport().memory().read_slot(old_token);
  EXPECT_TRUE(!old || !old->valid) << "the registration the failed fast register found still serves its old token";
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
}

class SharedReceiveQueue : public ApiTest {};

// Review row E5 (ndkpi.md §9.5): NdkCreateSrq's NotifyThreshold arms the limit as NdkModifySrq's does. Created
// with none posted, the SRQ is below it at once: one notification, STATUS_SUCCESS, delivered only once the
// consumer holds the SRQ (its callback reads the pointer NdkCreateSrq wrote), and no second one (it is one-shot)
// while receives come and go below it. Threshold 0 arms nothing. The same through a create completion.
TEST_F(SharedReceiveQueue, TheCreateTimeThresholdNotifiesOnceTheConsumerHoldsTheSrq) {
  Pd* pd = nullptr;
  ASSERT_EQ(adapter().NdkCreatePd(nullptr, nullptr, &pd), STATUS_SUCCESS);
  Srq* srq = nullptr;
  std::atomic<bool> callback_saw_the_srq{false};
  Notifications limit;
  limit.on_notify = [&](NTSTATUS) { callback_saw_the_srq.store(srq != nullptr); };
  ASSERT_EQ(pd->NdkCreateSrq(16, 1, 3, &Notifications::callback, &limit, nullptr, nullptr, nullptr, &srq),
            STATUS_SUCCESS);
  ASSERT_TRUE(eventually([&] { return limit.count.load() == 1; }));
  EXPECT_EQ(limit.last_status.load(), STATUS_SUCCESS);
  EXPECT_TRUE(callback_saw_the_srq.load());
  std::vector<uint8_t> buffer(4096);
  Mr* mr = nullptr;
  ASSERT_EQ(pd->NdkCreateMr(false, nullptr, nullptr, &mr), STATUS_SUCCESS);
  ASSERT_EQ(mr->NdkRegisterMr(buffer.data(), buffer.size(), NDK_MR_FLAG_ALLOW_LOCAL_WRITE, nullptr, nullptr),
            STATUS_SUCCESS);
  const NdkSge s{buffer.data(), 64, mr->NdkGetLocalTokenFromMr()};
  ASSERT_EQ(srq->NdkSrqReceive(nullptr, &s, 1), STATUS_SUCCESS);
  ASSERT_EQ(srq->NdkSrqReceive(nullptr, &s, 1), STATUS_SUCCESS);
  adapter().UroceWaitForNotifier();
  EXPECT_EQ(limit.count.load(), 1) << "one-shot";

  Srq* quiet = nullptr;
  Notifications none;
  ASSERT_EQ(pd->NdkCreateSrq(16, 1, 0, &Notifications::callback, &none, nullptr, nullptr, nullptr, &quiet),
            STATUS_SUCCESS);

  Completion created;
  Notifications later;
  ASSERT_EQ(
      pd->NdkCreateSrq(16, 1, 2, &Notifications::callback, &later, nullptr, &Completion::on_create, &created, nullptr),
      STATUS_PENDING);
  ASSERT_TRUE(created.wait());
  ASSERT_EQ(created.status.load(), STATUS_SUCCESS);
  ASSERT_TRUE(eventually([&] { return later.count.load() == 1; }));
  adapter().UroceWaitForNotifier();
  EXPECT_EQ(none.count.load(), 0);
  EXPECT_EQ(later.count.load(), 1);

  EXPECT_EQ(static_cast<Srq*>(created.object.load())->NdkCloseSrq(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(quiet->NdkCloseSrq(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(srq->NdkCloseSrq(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_EQ(pd->NdkClosePd(nullptr, nullptr), STATUS_SUCCESS);
}

TEST_F(SharedReceiveQueue, OneQueueFeedsSeveralQpsAndSignalsItsLimit) {
  Pd* pd = nullptr;
  Srq* srq = nullptr;
  Notifications limit;
  ASSERT_EQ(adapter().NdkCreatePd(nullptr, nullptr, &pd), STATUS_SUCCESS);
  const GroupAffinity engine1 = adapter().UroceEngineAffinity(1);
  ASSERT_EQ(pd->NdkCreateSrq(64, 2, 0, &Notifications::callback, &limit, &engine1, nullptr, nullptr, &srq),
            STATUS_SUCCESS);
  // Two receivers on engine 1 share the SRQ; their buffers come from one MR of the SRQ's PD.
  std::vector<uint8_t> buffer(64 * std::size_t{1024});
  Mr* mr = nullptr;
  ASSERT_EQ(pd->NdkCreateMr(false, nullptr, nullptr, &mr), STATUS_SUCCESS);
  ASSERT_EQ(mr->NdkRegisterMr(buffer.data(), buffer.size(), NDK_MR_FLAG_ALLOW_LOCAL_WRITE, nullptr, nullptr),
            STATUS_SUCCESS);
  for (uintptr_t i = 0; i < 8; ++i) {
    const NdkSge s{buffer.data() + 1024 * i, 1024, mr->NdkGetLocalTokenFromMr()};
    ASSERT_EQ(srq->NdkSrqReceive(reinterpret_cast<void*>(i), &s, 1), STATUS_SUCCESS);
  }
  EXPECT_EQ(srq->NdkModifySrq(0, 65, nullptr, nullptr), STATUS_INVALID_PARAMETER) << "threshold above the depth";
  ASSERT_EQ(srq->NdkModifySrq(0, 5, nullptr, nullptr), STATUS_SUCCESS);  // fire once fewer than 5 are posted
  adapter().UroceWaitForNotifier();
  EXPECT_EQ(limit.count.load(), 0) << "8 posted";

  std::vector<Player*> receivers;
  std::vector<Player*> senders;
  for (int i = 0; i < 2; ++i) {
    PlayerOptions r;
    r.engine = 1;
    Player& receiver = player(r);
    // The receiver's QP uses the SRQ (same PD as the SRQ).
    ASSERT_EQ(receiver.qp->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS);
    ASSERT_EQ(
        pd->NdkCreateQpWithSrq(receiver.cq, receiver.cq, srq, &receiver, 64, 1, 0, nullptr, nullptr, &receiver.qp),
        STATUS_SUCCESS);
    EXPECT_EQ(receiver.receive(0, 64, 1), STATUS_INVALID_DEVICE_REQUEST) << "receives go through the SRQ";
    PlayerOptions s;
    s.engine = 0;
    Player& sender = player(s);
    connect(sender, receiver);
    receivers.push_back(&receiver);
    senders.push_back(&sender);
  }
  for (int m = 0; m < 4; ++m) {
    for (int i = 0; i < 2; ++i) {
      senders[static_cast<std::size_t>(i)]->fill(0, 100, static_cast<uint8_t>(m * 2 + i));
      ASSERT_EQ(senders[static_cast<std::size_t>(i)]->send(0, 100, static_cast<uintptr_t>(m)), STATUS_SUCCESS);
      ASSERT_EQ(senders[static_cast<std::size_t>(i)]->result().Status, STATUS_SUCCESS);
    }
  }
  std::vector<uintptr_t> contexts;
  for (Player* r : receivers) {
    for (const NdkResultEx& x : r->results(4)) {
      EXPECT_EQ(x.Status, STATUS_SUCCESS);
      EXPECT_EQ(x.QPContext, r);
      EXPECT_EQ(x.BytesTransferred, 100u);
      contexts.push_back(context_of(x));
    }
  }
  std::sort(contexts.begin(), contexts.end());
  EXPECT_EQ(contexts, (std::vector<uintptr_t>{0, 1, 2, 3, 4, 5, 6, 7})) << "each SRQ receive used once";
  ASSERT_TRUE(eventually([&] { return limit.count.load() == 1; })) << "fewer than 5 posted after the 4th";
  adapter().UroceWaitForNotifier();
  EXPECT_EQ(limit.count.load(), 1) << "one-shot until armed again";

  Completion srq_closed;
  EXPECT_EQ(srq->NdkCloseSrq(&Completion::on_close, &srq_closed), STATUS_PENDING) << "QPs still use it";
  for (Player* r : receivers) {
    ASSERT_EQ(r->qp->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS);
    r->qp = nullptr;
  }
  EXPECT_TRUE(srq_closed.wait());
  ASSERT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
  ASSERT_EQ(pd->NdkClosePd(nullptr, nullptr), STATUS_SUCCESS);
}

// ndkpi.md §9.5: NdkModifySrq with a non-zero depth resizes the SRQ, growing included. The receives posted before
// the growth are taken first and none is lost; the larger depth is usable at once.
TEST_F(SharedReceiveQueue, ModifySrqGrowsItWithoutLosingOrReorderingReceives) {
  PlayerOptions r;
  r.engine = 1;
  Player& receiver = player(r);
  Srq* srq = nullptr;
  const GroupAffinity engine1 = adapter().UroceEngineAffinity(1);
  ASSERT_EQ(receiver.pd->NdkCreateSrq(4, 1, 0, nullptr, nullptr, &engine1, nullptr, nullptr, &srq), STATUS_SUCCESS);
  ASSERT_EQ(receiver.qp->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS);
  ASSERT_EQ(receiver.pd->NdkCreateQpWithSrq(receiver.cq, receiver.cq, srq, &receiver, 64, 1, 0, nullptr, nullptr,
                                            &receiver.qp),
            STATUS_SUCCESS);
  Player& sender = player();
  connect(sender, receiver);
  const auto post = [&](uintptr_t i) {
    const NdkSge s = receiver.sge(256 * i, 256);
    return srq->NdkSrqReceive(reinterpret_cast<void*>(i), &s, 1);
  };
  for (uintptr_t i = 0; i < 4; ++i) ASSERT_EQ(post(i), STATUS_SUCCESS);
  EXPECT_EQ(post(99), STATUS_INSUFFICIENT_RESOURCES) << "depth 4";
  ASSERT_EQ(srq->NdkModifySrq(16, 0, nullptr, nullptr), STATUS_SUCCESS);
  for (uintptr_t i = 4; i < 16; ++i) ASSERT_EQ(post(i), STATUS_SUCCESS) << "receive " << i;
  EXPECT_EQ(post(99), STATUS_INSUFFICIENT_RESOURCES) << "depth 16";
  for (uintptr_t m = 0; m < 16; ++m) {
    sender.fill(0, 200, static_cast<uint8_t>(m));
    ASSERT_EQ(sender.send(0, 200, m), STATUS_SUCCESS);
    ASSERT_EQ(sender.result().Status, STATUS_SUCCESS);
  }
  const auto received = receiver.results(16);
  for (uintptr_t i = 0; i < received.size(); ++i) {
    EXPECT_EQ(received[i].Status, STATUS_SUCCESS);
    EXPECT_EQ(context_of(received[i]), i) << "in posting order across the growth";
  }
  // A second growth while nothing is posted, then the whole new depth.
  ASSERT_EQ(srq->NdkModifySrq(40, 0, nullptr, nullptr), STATUS_SUCCESS);
  for (uintptr_t i = 0; i < 40; ++i) ASSERT_EQ(post(100 + i), STATUS_SUCCESS) << "receive " << i;
  EXPECT_EQ(post(99), STATUS_INSUFFICIENT_RESOURCES) << "depth 40";
  ASSERT_EQ(sender.send(0, 8, 1000), STATUS_SUCCESS);
  EXPECT_EQ(context_of(receiver.result()), 100u);
  ASSERT_EQ(receiver.qp->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS);
  receiver.qp = nullptr;
  ASSERT_EQ(srq->NdkCloseSrq(nullptr, nullptr), STATUS_SUCCESS);
}

class CqResize : public ApiTest {};

TEST_F(CqResize, ResizingKeepsEveryEntryInOrder) {
  PlayerOptions o;
  o.cq_depth = 16;
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair(o);
  for (uintptr_t i = 0; i < 12; ++i) ASSERT_EQ(a->write(*b, 0, 0, 64, i), STATUS_SUCCESS);
  auto& cq = static_cast<detail::CqImpl&>(*a->cq);
  ASSERT_TRUE(eventually([&] { return cq.queued() == 12; }));
  ASSERT_EQ(a->write(*b, 0, 0, 64, 12), STATUS_SUCCESS);
  EXPECT_EQ(a->cq->NdkResizeCq(4, nullptr, nullptr), STATUS_BUFFER_OVERFLOW) << "never lose entries";
  EXPECT_EQ(a->cq->NdkResizeCq(1024, nullptr, nullptr), STATUS_SUCCESS);
  for (uintptr_t i = 13; i < 40; ++i) ASSERT_EQ(a->write(*b, 0, 0, 64, i), STATUS_SUCCESS);
  const auto r = a->results(40);
  for (uintptr_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(context_of(r[i]), i);
    EXPECT_EQ(r[i].Status, STATUS_SUCCESS);
  }
  EXPECT_EQ(a->cq->NdkResizeCq(0, nullptr, nullptr), STATUS_INVALID_PARAMETER);
  NdkAdapterInfo info;
  uint32_t size = sizeof info;
  ASSERT_EQ(adapter().NdkQueryAdapterInfo(&info, &size), STATUS_SUCCESS);
  EXPECT_EQ(a->cq->NdkResizeCq(info.MaxCqDepth + 1, nullptr, nullptr), STATUS_INVALID_PARAMETER);
}

// ndkpi.md §9.2: a resize never requires quiescing. One thread reaps without pause while another posts WRITEs and
// resizes the CQ between them, up and down; every completion arrives once and in order, and no resize fails.
TEST_F(CqResize, ResizingWhileAnotherThreadReapsLosesAndReordersNothing) {
  PlayerOptions o;
  o.cq_depth = 64;
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair(o);
  constexpr uintptr_t kWrites = 20000;
  constexpr uintptr_t kWindow = 32;  // below the smallest depth used: the CQ never overruns
  std::atomic<uintptr_t> reaped{0};
  std::atomic<bool> in_order{true};
  std::thread reaper([&] {
    NdkResult r[16];
    const auto deadline = std::chrono::steady_clock::now() + kGenerous;
    while (reaped.load() < kWrites && std::chrono::steady_clock::now() < deadline) {
      const uint32_t n = a->cq->NdkGetCqResults(r, 16);
      for (uint32_t i = 0; i < n; ++i) {
        if (reinterpret_cast<uintptr_t>(r[i].RequestContext) != reaped.load() || r[i].Status != STATUS_SUCCESS)
          in_order.store(false);
        reaped.fetch_add(1);
      }
    }
  });
  unsigned resizes = 0;
  for (uintptr_t i = 0; i < kWrites;) {
    if (i - reaped.load() >= kWindow) continue;
    ASSERT_EQ(a->write(*b, 0, 0, 64, i), STATUS_SUCCESS);
    if (++i % 97 == 0) {
      ASSERT_EQ(a->cq->NdkResizeCq(resizes % 2 == 0 ? 4096 : 64, nullptr, nullptr), STATUS_SUCCESS);
      ++resizes;
    }
  }
  reaper.join();
  EXPECT_EQ(reaped.load(), kWrites);
  EXPECT_TRUE(in_order.load());
  EXPECT_GT(resizes, 200u);
}

}  // namespace
}  // namespace uroce::ndk::testing
