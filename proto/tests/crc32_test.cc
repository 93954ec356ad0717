// CRC-32 variants against zlib, the reference the interface promises to match.
#include "proto/crc32.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

namespace uroce::proto {
namespace {

constexpr std::array<std::size_t, 5> kOffsets = {0, 1, 3, 7, 13};
constexpr std::size_t kMaxLength = std::size_t{64} * 1024;

uint32_t zlib_crc(uint32_t crc, const uint8_t* data, std::size_t len) {
  return static_cast<uint32_t>(::crc32(crc, data, static_cast<uInt>(len)));
}

std::vector<uint8_t> random_bytes(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

class Crc32ImplTest : public testing::TestWithParam<Crc32Impl> {
 protected:
  void SetUp() override {
    if (!crc32_impl_supported(GetParam())) {
      GTEST_SKIP() << crc32_impl_name(GetParam()) << " is not supported on this CPU";
    }
  }
  uint32_t crc(uint32_t start, const uint8_t* data, std::size_t len) const {
    return crc32_ieee_with(GetParam(), start, data, len);
  }

  // Room for the longest length at the largest offset.
  std::vector<uint8_t> data_ = random_bytes(kMaxLength + 64, 0xC0FFEE);
  std::mt19937 rng_{12345};
  uint32_t nonzero_crc() { return rng_() | 1u; }
};

TEST_P(Crc32ImplTest, CheckValue) {
  const char* check = "123456789";
  EXPECT_EQ(crc(0, reinterpret_cast<const uint8_t*>(check), 9), 0xCBF43926u);
}

TEST_P(Crc32ImplTest, EmptyInputReturnsTheStartingCrc) {
  EXPECT_EQ(crc(0, nullptr, 0), 0u);
  EXPECT_EQ(crc(0xDEADBEEF, data_.data(), 0), 0xDEADBEEFu);
}

TEST_P(Crc32ImplTest, MatchesZlibForEveryLengthUpTo2048AtMisalignedOffsets) {
  for (const std::size_t offset : kOffsets) {
    const uint8_t* p = data_.data() + offset;
    for (std::size_t len = 0; len <= 2048; ++len) {
      const uint32_t start = nonzero_crc();
      ASSERT_EQ(crc(start, p, len), zlib_crc(start, p, len)) << "len " << len << " offset " << offset;
      ASSERT_EQ(crc(0, p, len), zlib_crc(0, p, len)) << "len " << len << " offset " << offset;
    }
  }
}

TEST_P(Crc32ImplTest, MatchesZlibForLargeLengths) {
  constexpr std::array<std::size_t, 14> kLengths = {2049,  2303,  4095,  4096,  4097,  8191,           9000,
                                                    12345, 16383, 16400, 32768, 40000, kMaxLength - 1, kMaxLength};
  for (const std::size_t offset : kOffsets) {
    for (const std::size_t len : kLengths) {
      const uint8_t* p = data_.data() + offset;
      const uint32_t start = nonzero_crc();
      EXPECT_EQ(crc(start, p, len), zlib_crc(start, p, len)) << "len " << len << " offset " << offset;
    }
  }
}

TEST_P(Crc32ImplTest, ChainingEqualsOneShot) {
  constexpr std::size_t kLen = 5000;
  const uint8_t* p = data_.data() + 3;
  const uint32_t start = nonzero_crc();
  const uint32_t whole = zlib_crc(start, p, kLen);
  ASSERT_EQ(crc(start, p, kLen), whole);
  std::vector<std::size_t> splits;
  for (std::size_t i = 0; i <= 300; ++i) splits.push_back(i);
  for (std::size_t i = 301; i <= kLen; i += 37) splits.push_back(i);
  splits.push_back(kLen - 1);
  splits.push_back(kLen);
  for (const std::size_t s : splits) {
    EXPECT_EQ(crc(crc(start, p, s), p + s, kLen - s), whole) << "split at " << s;
  }
  // Many pieces of varied sizes, each continuing the last.
  uint32_t running = start;
  std::size_t at = 0;
  for (std::size_t piece = 1; at < kLen; piece = piece * 3 % 257 + 1) {
    const std::size_t n = std::min(piece, kLen - at);
    running = crc(running, p + at, n);
    at += n;
  }
  EXPECT_EQ(running, whole);
}

// The first mask_len bytes ORed with a mask in registers (the ICRC's masked fields): equal to the CRC of a
// masked copy, at every length from the mask's to past the wide loop's, and nothing is written.
TEST_P(Crc32ImplTest, MaskedEqualsTheCrcOfAMaskedCopy) {
  const uint32_t start = nonzero_crc();
  std::array<uint8_t, 64> mask{};
  for (std::size_t i = 0; i < mask.size(); ++i) mask[i] = static_cast<uint8_t>(i % 3 == 0 ? 0xFF : 1u << (i % 8));
  std::vector<uint8_t> copy(1024);
  for (const std::size_t mask_len : {16, 32, 48, 64}) {
    for (std::size_t len = mask_len; len <= 700; ++len) {
      const uint8_t* data = data_.data() + 3;
      std::memcpy(copy.data(), data, len);
      for (std::size_t i = 0; i < mask_len; ++i) copy[i] |= mask[i];
      const uint32_t expected = zlib_crc(start, copy.data(), len);
      EXPECT_EQ(crc32_ieee_masked_with(GetParam(), start, data, len, mask.data(), mask_len), expected)
          << "mask " << mask_len << ", length " << len;
    }
  }
}

// Data placed against inaccessible pages: any read before the start or past the end faults.
TEST_P(Crc32ImplTest, ReadsNothingOutsideTheBuffer) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* map = mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto* base = static_cast<uint8_t*>(map);
  ASSERT_EQ(mprotect(base, page, PROT_NONE), 0);
  ASSERT_EQ(mprotect(base + 2 * page, page, PROT_NONE), 0);
  uint8_t* const first = base + page;
  uint8_t* const last_end = base + 2 * page;
  std::memcpy(first, data_.data(), page);
  for (std::size_t len = 0; len <= 600; ++len) {
    const uint32_t start = nonzero_crc();
    EXPECT_EQ(crc(start, first, len), zlib_crc(start, first, len)) << "at page start, len " << len;
    EXPECT_EQ(crc(start, last_end - len, len), zlib_crc(start, last_end - len, len)) << "at page end, len " << len;
  }
  // The masked form with a 48-byte mask (IPv4's) of zeros: the data at the page's start with the mask against the
  // guard page after it (its 64-byte load must stop at 48), and the data against that guard page with the mask at
  // the page's start.
  constexpr std::size_t kMaskLen = 48;
  uint8_t* const mask_at_end = last_end - kMaskLen;
  std::memset(mask_at_end, 0, kMaskLen);
  std::memset(first, 0, kMaskLen);
  for (std::size_t len = kMaskLen; len <= 600; ++len) {
    const uint32_t start = nonzero_crc();
    EXPECT_EQ(crc32_ieee_masked_with(GetParam(), start, first, len, mask_at_end, kMaskLen), zlib_crc(start, first, len))
        << "masked, data at page start, len " << len;
    EXPECT_EQ(crc32_ieee_masked_with(GetParam(), start, last_end - len, len, first, kMaskLen),
              zlib_crc(start, last_end - len, len))
        << "masked, data at page end, len " << len;
  }
  ASSERT_EQ(munmap(map, 3 * page), 0);
}

INSTANTIATE_TEST_SUITE_P(AllImpls, Crc32ImplTest, testing::ValuesIn(kAllCrc32Impls),
                         [](const testing::TestParamInfo<Crc32Impl>& info) {
                           return std::string(crc32_impl_name(info.param));
                         });

TEST(Crc32Dispatch, ActiveImplIsTheBestSupported) {
  const Crc32Impl active = crc32_active_impl();
  EXPECT_TRUE(crc32_impl_supported(active));
  EXPECT_TRUE(crc32_impl_supported(Crc32Impl::kPortable));
  Crc32Impl best = Crc32Impl::kPortable;
  if (crc32_impl_supported(Crc32Impl::kPclmul)) best = Crc32Impl::kPclmul;
  if (crc32_impl_supported(Crc32Impl::kVpclmul256)) best = Crc32Impl::kVpclmul256;
  if (crc32_impl_supported(Crc32Impl::kVpclmul)) best = Crc32Impl::kVpclmul;
  EXPECT_EQ(active, best) << "active " << crc32_impl_name(active) << ", best " << crc32_impl_name(best);
  if (!crc32_impl_supported(Crc32Impl::kVpclmul)) {
    std::printf("note: this CPU lacks AVX-512 VPCLMULQDQ; active implementation is %s\n",
                std::string(crc32_impl_name(active)).c_str());
  }
}

// Calls below kCrc32WideMinBytes take the 128-bit folds where the 512-bit ones are active (crc32.h), and every
// entry point gives the same CRC on both sides of that length.
TEST(Crc32Dispatch, ShortCallsTakeThe128BitFoldsWhereThe512BitOnesAreActive) {
  if (std::getenv("UROCE_CRC32") != nullptr) GTEST_SKIP() << "UROCE_CRC32 forces one variant for every length";
  const Crc32Impl active = crc32_active_impl();
  EXPECT_EQ(crc32_short_impl(), active == Crc32Impl::kVpclmul ? Crc32Impl::kPclmul : active);
  const std::vector<uint8_t> data = random_bytes(2048, 11);
  const std::vector<uint8_t> mask(64, 0xFF);
  std::vector<uint8_t> copy(2048);
  for (const std::size_t len : {kCrc32WideMinBytes - 64, kCrc32WideMinBytes - 1, kCrc32WideMinBytes,
                                kCrc32WideMinBytes + 1, kCrc32WideMinBytes + 64}) {
    SCOPED_TRACE(len);
    EXPECT_EQ(crc32_ieee(7, data.data(), len), zlib_crc(7, data.data(), len));
    std::vector<uint8_t> masked(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(len));
    std::fill_n(masked.begin(), 64, 0xFF);
    EXPECT_EQ(crc32_ieee_masked(7, data.data(), len, mask.data(), 64), zlib_crc(7, masked.data(), len));
    EXPECT_EQ(crc32_ieee_copy(7, copy.data(), data.data(), len), zlib_crc(7, data.data(), len));
    EXPECT_TRUE(std::equal(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(len), copy.begin()));
  }
}

TEST(Crc32Dispatch, DispatchedCrcMatchesZlib) {
  const std::vector<uint8_t> data = random_bytes(5000, 7);
  for (const std::size_t len : {0, 1, 15, 16, 63, 64, 255, 256, 1024, 4096, 4999}) {
    EXPECT_EQ(crc32_ieee(0x12345678, data.data(), len), zlib_crc(0x12345678, data.data(), len)) << "len " << len;
  }
}

TEST(Crc32Names, AreDistinct) {
  EXPECT_EQ(crc32_impl_name(Crc32Impl::kPortable), "portable");
  EXPECT_EQ(crc32_impl_name(Crc32Impl::kPclmul), "pclmul");
  EXPECT_EQ(crc32_impl_name(Crc32Impl::kVpclmul), "vpclmul");
  EXPECT_EQ(crc32_impl_name(Crc32Impl::kVpclmul256), "vpclmul256");
}

}  // namespace
}  // namespace uroce::proto
