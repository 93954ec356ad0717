// The memory table's paged regions (fast register with a page list, ndkpi.md §9.6): translation, the contiguity
// rule of resolve(), page-by-page copies, windows on them, and the staged page lists' backpressure; and the QP a
// type-2 window is bound to.
#include "dataplane/memory_table.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace uroce::dataplane {
namespace {

constexpr uint64_t kPage = kRegionPageSize;
constexpr uint32_t kPd = 3;
constexpr Requester kQp{kPd, 0x42};  // a QP of kPd
constexpr uint32_t kAll = proto::kAccessLocalWrite | proto::kAccessRemoteWrite | proto::kAccessRemoteRead;

class PagedRegion : public ::testing::Test {
 protected:
  static constexpr uint32_t kSlot = 5;
  static constexpr uint64_t kBase = (uint64_t{0x77} << 32) + 3 * kPage + 40;  // FBO 40, nothing there
  static constexpr uint64_t kLength = 4 * kPage - 40;

  PagedRegion() : memory_(static_cast<uint8_t*>(std::aligned_alloc(kPage, 8 * kPage)), &std::free) {
    std::memset(memory_.get(), 0, 8 * kPage);
    // Pages 6, 1, 2 and 4 of the block: 1 and 2 follow each other, the others do not.
    for (uint32_t i = 0; i < 4; ++i) pages_[i] = page(std::array<uint32_t, 4>{6, 1, 2, 4}[i]);
    MemoryRegion reserved;
    reserved.pd = kPd;
    reserved.token = token_ = kSlot << 8 | 1;
    reserved.kind = MemoryKind::kFastRegisterRegion;
    reserved.valid = false;
    table_.prepare_page_map(token_);
    table_.insert(reserved);
  }
  uint64_t page(uint32_t i) const { return reinterpret_cast<uint64_t>(memory_.get()) + uint64_t{i} * kPage; }
  // Where byte `offset` of the region lives.
  uint8_t* at(uint64_t offset) const {
    const uint64_t o = 40 + offset;
    return reinterpret_cast<uint8_t*>(pages_[o / kPage] + o % kPage);
  }
  bool register_pages(uint32_t new_token) {
    const uint8_t list = table_.stage_pages(token_, pages_.data(), 4, 40);
    EXPECT_NE(list, 0);
    const bool ok = table_.fast_register(new_token, kBase, kLength, kAll, kPd, list);
    table_.unstage_pages(new_token, list);
    return ok;
  }

  MemoryTable table_{16};
  std::unique_ptr<uint8_t, void (*)(void*)> memory_;
  std::array<uint64_t, 4> pages_{};
  uint32_t token_ = 0;
};

TEST_F(PagedRegion, ResolveTranslatesRangesWhosePagesAreAdjacentAndCopyMovesAnyOther) {
  const uint32_t token = kSlot << 8 | 2;
  ASSERT_TRUE(register_pages(token));
  // Inside one page, and across the boundary of pages 1 and 2 of the block (list entries 1 and 2).
  EXPECT_EQ(table_.resolve(token, kBase + 8, 64, kAll, kQp), at(8));
  const uint64_t across = kPage - 40 + kPage - 100;  // 100 bytes before list entry 2
  EXPECT_EQ(table_.resolve(token, kBase + across, 200, kAll, kQp), at(across));
  // Across entries 0 and 1 (pages 6 and 1): no single pointer, but granted.
  const uint64_t gap = kPage - 40 - 10;
  EXPECT_EQ(table_.resolve(token, kBase + gap, 20, kAll, kQp), nullptr);
  EXPECT_TRUE(table_.grants(token, kBase + gap, 20, kAll, kQp, false));
  // Out of the region, a wrong key, a wrong PD: refused either way.
  EXPECT_FALSE(table_.grants(token, kBase + kLength - 4, 8, kAll, kQp, false));
  EXPECT_FALSE(table_.grants(token + 1, kBase, 8, kAll, kQp, false));
  EXPECT_FALSE(table_.grants(token, kBase, 8, kAll, {kPd + 1, kQp.qpn}, false));
  EXPECT_FALSE(table_.copy(token, kBase - 1, memory_.get(), 8, kAll, kQp, false, true));

  // The whole region, in and out, page by page.
  std::vector<uint8_t> in(kLength);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7 + 1);
  ASSERT_TRUE(table_.copy(token, kBase, in.data(), static_cast<uint32_t>(kLength), kAll, kQp, false, true));
  for (uint64_t i = 0; i < kLength; ++i) ASSERT_EQ(*at(i), in[i]) << "byte " << i;
  std::vector<uint8_t> out(kLength);
  ASSERT_TRUE(table_.copy(token, kBase, out.data(), static_cast<uint32_t>(kLength), kAll, kQp, false, false));
  EXPECT_EQ(out, in);
  // Nothing before the first byte (the FBO) or in the pages the list does not name was written.
  for (uint32_t i = 0; i < 40; ++i) EXPECT_EQ(memory_.get()[6 * kPage + i], 0) << i;
  for (const uint32_t p : {0U, 3U, 5U, 7U})
    for (uint32_t i = 0; i < kPage; ++i) ASSERT_EQ(memory_.get()[p * kPage + i], 0) << p;

  // A window on the region translates through its pages.
  const uint32_t window_slot = 6;
  MemoryRegion window;
  window.pd = kPd;
  window.token = window_slot << 8 | 1;
  window.kind = MemoryKind::kWindow;
  window.valid = false;
  table_.insert(window);
  const uint32_t window_token = window_slot << 8 | 2;
  ASSERT_TRUE(table_.bind_window(window_token, token, kBase + gap, 100, proto::kAccessRemoteWrite, kQp));
  const uint8_t bytes[20] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  ASSERT_TRUE(table_.copy(window_token, kBase + gap, const_cast<uint8_t*>(bytes), 20, proto::kAccessRemoteWrite, kQp,
                          false, true));
  for (uint32_t i = 0; i < 20; ++i) EXPECT_EQ(*at(gap + i), bytes[i]) << i;
  EXPECT_EQ(table_.resolve(window_token, kBase + gap + 12, 8, proto::kAccessRemoteWrite, kQp), at(gap + 12));

  // Invalidated: nothing resolves or copies any more.
  ASSERT_TRUE(table_.invalidate_local(token, kQp));
  EXPECT_FALSE(table_.copy(token, kBase, out.data(), 8, kAll, kQp, false, false));
}

TEST_F(PagedRegion, AListTooShortForTheLengthIsRefused) {
  const uint8_t list = table_.stage_pages(token_, pages_.data(), 2, 40);
  ASSERT_NE(list, 0);
  EXPECT_FALSE(table_.fast_register(kSlot << 8 | 2, kBase, kLength, kAll, kPd, list));
  table_.unstage_pages(token_, list);
}

TEST_F(PagedRegion, FourListsWaitAtOnceAndARetiredOneIsTakenAgain) {
  std::array<uint8_t, kStagedPageLists> lists{};
  for (auto& list : lists) {
    list = table_.stage_pages(token_, pages_.data(), 4, 40);
    EXPECT_NE(list, 0);
  }
  EXPECT_EQ(table_.stage_pages(token_, pages_.data(), 4, 40), 0) << "every list waits for its WQE";
  table_.unstage_pages(token_, lists[2]);
  EXPECT_EQ(table_.stage_pages(token_, pages_.data(), 4, 40), lists[2]);
  EXPECT_EQ(table_.stage_pages(7 << 8 | 1, pages_.data(), 4, 40), 0) << "a slot without a page map";
}

// A table with a registered region in slot 1 (local write, over `memory_`) and a free slot 2 of `kind` (a window,
// or a fast-register region), both of kPd.
class OneRegion : public ::testing::Test {
 protected:
  void SetUp() override { set_up(MemoryKind::kWindow); }
  void set_up(MemoryKind second_kind) {
    MemoryRegion region;
    region.addr = base_;
    region.length = sizeof memory_;
    region.access = proto::kAccessLocalWrite;
    region.pd = kPd;
    region.token = kRegion;
    table_.insert(region);
    MemoryRegion free;
    free.pd = kPd;
    free.token = 2u << 8 | 1;
    free.kind = second_kind;
    free.valid = false;
    table_.insert(free);
  }
  static constexpr uint32_t kRegion = 1u << 8 | 1;
  MemoryTable table_{8};
  alignas(64) uint8_t memory_[4096] = {};
  const uint64_t base_ = reinterpret_cast<uint64_t>(memory_);
};
using MemoryWindow = OneRegion;

// A type-2 window serves only the QP it was bound through (IBTA 10.6.7.2; rocev2.md §5): another QP of the same
// PD can neither reach the memory with its key nor invalidate it with a Send with Invalidate.
TEST_F(MemoryWindow, ServesOnlyTheQueuePairItWasBoundThrough) {
  const uint32_t key = 2u << 8 | 2;
  ASSERT_TRUE(table_.bind_window(key, kRegion, base_ + 64, 128, proto::kAccessRemoteWrite, kQp));

  const Requester other{kPd, kQp.qpn + 1};
  EXPECT_EQ(table_.resolve(key, base_ + 64, 128, proto::kAccessRemoteWrite, kQp), memory_ + 64);
  EXPECT_EQ(table_.resolve(key, base_ + 64, 128, proto::kAccessRemoteWrite, other), nullptr);
  EXPECT_FALSE(table_.grants(key, base_ + 64, 8, proto::kAccessRemoteWrite, other, false));
  uint8_t bytes[8] = {};
  EXPECT_FALSE(table_.copy(key, base_ + 64, bytes, 8, proto::kAccessRemoteWrite, other, false, true));
  EXPECT_FALSE(table_.invalidate_remote(key, other));
  EXPECT_NE(table_.resolve(key, base_ + 64, 8, proto::kAccessRemoteWrite, kQp), nullptr) << "still valid";
  EXPECT_TRUE(table_.invalidate_remote(key, kQp));
  EXPECT_EQ(table_.resolve(key, base_ + 64, 8, proto::kAccessRemoteWrite, kQp), nullptr);
}

// A bind onto a window that is still bound fails (IBTA 10.6.7.2: a type-2 window is bound only while free), and the
// binding it found ends with it: the poster has already moved the window's key on, so no invalidation could name the
// old key any more, and the old MR may go away with nothing left to end the window.
TEST_F(MemoryWindow, ABindOntoAWindowStillBoundFailsAndEndsTheOldBinding) {
  const uint32_t first = 2u << 8 | 2;
  ASSERT_TRUE(table_.bind_window(first, kRegion, base_, 128, proto::kAccessRemoteWrite, kQp));
  ASSERT_EQ(table_.resolve(first, base_, 8, proto::kAccessRemoteWrite, kQp), memory_);

  const uint32_t second = 2u << 8 | 3;
  EXPECT_FALSE(table_.bind_window(second, kRegion, base_ + 1024, 128, proto::kAccessRemoteWrite, kQp));
  EXPECT_EQ(table_.resolve(first, base_, 8, proto::kAccessRemoteWrite, kQp), nullptr) << "the old binding ended";
  EXPECT_EQ(table_.resolve(second, base_ + 1024, 8, proto::kAccessRemoteWrite, kQp), nullptr) << "nothing new bound";
  // Free again: the next bind takes it.
  EXPECT_TRUE(table_.bind_window(second, kRegion, base_ + 1024, 128, proto::kAccessRemoteWrite, kQp));
  EXPECT_EQ(table_.resolve(second, base_ + 1024, 8, proto::kAccessRemoteWrite, kQp), memory_ + 1024);
}

// Zero-copy TX pins only registered regions: a fast-register region's invalidation completes without waiting for
// mbufs still pointing into its pages (only a deregistration waits for them), so its bytes are always copied.
class ZeroCopyPins : public OneRegion {
 protected:
  void SetUp() override { set_up(MemoryKind::kFastRegisterRegion); }
};

TEST_F(ZeroCopyPins, OnlyRegisteredRegionsArePinned) {
  const uint32_t fast = 2u << 8 | 2;
  ASSERT_TRUE(table_.fast_register(fast, base_, sizeof memory_, proto::kAccessLocalWrite, kPd));
  ASSERT_NE(table_.resolve(fast, base_, 64, 0, kQp, true), nullptr);

  std::atomic<uint32_t>* pins = table_.pin_for_tx(kRegion, base_, 64);
  ASSERT_NE(pins, nullptr);
  EXPECT_EQ(table_.tx_pins(kRegion), 1u);
  MemoryTable::unpin_tx(pins);
  EXPECT_EQ(table_.pin_for_tx(fast, base_, 64), nullptr);
  EXPECT_EQ(table_.tx_pins(fast), 0u);
}

}  // namespace
}  // namespace uroce::dataplane
