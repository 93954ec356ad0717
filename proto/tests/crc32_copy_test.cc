// crc32_ieee_copy (the fused copy and CRC of the RX path) against zlib and memcpy, for every variant.
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "proto/crc32.h"

namespace uroce::proto {
namespace {

constexpr std::array<std::size_t, 5> kOffsets = {0, 1, 3, 7, 13};
constexpr uint8_t kGuard = 0xA5;

uint32_t zlib_crc(uint32_t crc, const uint8_t* data, std::size_t len) {
  return static_cast<uint32_t>(::crc32(crc, data, static_cast<uInt>(len)));
}

std::vector<uint8_t> random_bytes(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

class Crc32CopyTest : public testing::TestWithParam<Crc32Impl> {
 protected:
  void SetUp() override {
    if (!crc32_impl_supported(GetParam())) GTEST_SKIP() << crc32_impl_name(GetParam()) << " is not supported here";
  }
  uint32_t copy(uint32_t start, uint8_t* dst, const uint8_t* src, std::size_t len) const {
    return crc32_ieee_copy_with(GetParam(), start, dst, src, len);
  }
  // Checks one copy of `len` bytes from src_offset into a guarded destination at dst_offset: the CRC is zlib's,
  // the destination holds the source bytes, and not one byte around it changed.
  void check(std::size_t len, std::size_t src_offset, std::size_t dst_offset, uint32_t start) {
    constexpr std::size_t kSlack = 64;
    std::vector<uint8_t> dst(len + dst_offset + 2 * kSlack, kGuard);
    uint8_t* const out = dst.data() + kSlack + dst_offset;
    const uint8_t* const in = src_.data() + src_offset;
    ASSERT_EQ(copy(start, out, in, len), zlib_crc(start, in, len))
        << "len " << len << ", src offset " << src_offset << ", dst offset " << dst_offset;
    ASSERT_EQ(std::memcmp(out, in, len), 0) << "len " << len << ", offsets " << src_offset << "/" << dst_offset;
    for (uint8_t* b = dst.data(); b != out; ++b) ASSERT_EQ(*b, kGuard) << "wrote before the destination, len " << len;
    for (uint8_t* b = out + len; b != dst.data() + dst.size(); ++b)
      ASSERT_EQ(*b, kGuard) << "wrote past the destination, len " << len;
  }

  std::vector<uint8_t> src_ = random_bytes(std::size_t{64} * 1024 + 64, 0xF00D);
  std::mt19937 rng_{777};
};

TEST_P(Crc32CopyTest, CheckValue) {
  const char* check = "123456789";
  std::array<uint8_t, 9> out{};
  EXPECT_EQ(copy(0, out.data(), reinterpret_cast<const uint8_t*>(check), 9), 0xCBF43926u);
  EXPECT_EQ(std::memcmp(out.data(), check, 9), 0);
}

TEST_P(Crc32CopyTest, MatchesZlibAndMemcpyForEveryLengthUpTo2048AtMisalignedOffsets) {
  for (std::size_t len = 0; len <= 2048; ++len) {
    for (const std::size_t src_offset : kOffsets) {
      // Destination offsets cycle so that every pairing of source and destination alignment occurs.
      const std::size_t dst_offset = kOffsets[(len + src_offset) % kOffsets.size()];
      check(len, src_offset, dst_offset, static_cast<uint32_t>(rng_()));
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(Crc32CopyTest, MatchesZlibForLargeLengths) {
  for (const std::size_t len : {4095u, 4096u, 4097u, 8192u + 48u, 65536u}) {
    for (const std::size_t offset : kOffsets) {
      check(len, offset, (offset * 5) % 16, static_cast<uint32_t>(rng_()));
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(Crc32CopyTest, ChainsLikeCrc32Ieee) {
  // The ICRC continues a header state across the payload and then the pad: the fused copy must chain.
  std::vector<uint8_t> out(3000);
  const uint32_t head = crc32_ieee(0, src_.data(), 60);
  const uint32_t body = copy(head, out.data(), src_.data() + 60, 2900);
  EXPECT_EQ(crc32_ieee(body, src_.data() + 2960, 3), zlib_crc(0, src_.data(), 2963));
}

// Source and destination against inaccessible pages: any access outside either range faults.
TEST_P(Crc32CopyTest, TouchesNothingOutsideEitherRange) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* map = mmap(nullptr, 5 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto* base = static_cast<uint8_t*>(map);
  ASSERT_EQ(mprotect(base, page, PROT_NONE), 0);
  ASSERT_EQ(mprotect(base + 2 * page, page, PROT_NONE), 0);
  ASSERT_EQ(mprotect(base + 4 * page, page, PROT_NONE), 0);
  uint8_t* const in = base + page;
  uint8_t* const out = base + 3 * page;
  std::memcpy(in, src_.data(), page);
  for (std::size_t len = 0; len <= 600; ++len) {
    const auto start = static_cast<uint32_t>(rng_());
    EXPECT_EQ(copy(start, out, in + page - len, len), zlib_crc(start, in + page - len, len)) << "ends at guard " << len;
    EXPECT_EQ(std::memcmp(out, in + page - len, len), 0);
    EXPECT_EQ(copy(start, out + page - len, in, len), zlib_crc(start, in, len)) << "starts at guard " << len;
    EXPECT_EQ(std::memcmp(out + page - len, in, len), 0);
  }
  ASSERT_EQ(munmap(map, 5 * page), 0);
}

INSTANTIATE_TEST_SUITE_P(AllImpls, Crc32CopyTest, testing::ValuesIn(kAllCrc32Impls),
                         [](const testing::TestParamInfo<Crc32Impl>& info) {
                           return std::string(crc32_impl_name(info.param));
                         });

TEST(Crc32Copy, DispatchUsesTheActiveVariantAndMatchesZlib) {
  const std::vector<uint8_t> in = random_bytes(4096, 99);
  std::vector<uint8_t> out(4096);
  EXPECT_EQ(crc32_ieee_copy(0x1234, out.data(), in.data(), in.size()), zlib_crc(0x1234, in.data(), in.size()));
  EXPECT_EQ(out, in);
}

}  // namespace
}  // namespace uroce::proto
