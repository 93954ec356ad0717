// uroce-nvmf-perf's latency histogram: buckets that tile the values without gaps, percentiles within a bucket's
// width (1/32) of the exact ones, and merging.
#include "apps/nvmf/latency_histogram.h"

#include <gtest/gtest.h>

#include <vector>

namespace uroce::nvmf {
namespace {

TEST(LatencyHistogram, BucketsTileTheValuesAndAreNarrow) {
  for (uint64_t v : {0ULL, 1ULL, 63ULL, 64ULL, 65ULL, 127ULL, 128ULL, 1000ULL, 4095ULL, 4096ULL, 123456789ULL,
                     (1ULL << 40) + 12345ULL, ~0ULL}) {
    const std::size_t b = LatencyHistogram::bucket_of(v);
    ASSERT_LT(b, LatencyHistogram::kBuckets) << v;
    EXPECT_LE(v, LatencyHistogram::upper_bound(b)) << v;
    if (b > 0) {
      EXPECT_GT(v, LatencyHistogram::upper_bound(b - 1)) << v;
    }
    EXPECT_LE(LatencyHistogram::upper_bound(b) - v, v / 32 + 1) << v;
  }
  for (std::size_t b = 1; b < LatencyHistogram::kBuckets; ++b) {
    ASSERT_EQ(LatencyHistogram::bucket_of(LatencyHistogram::upper_bound(b - 1) + 1), b) << b;
  }
}

TEST(LatencyHistogram, PercentilesMeanAndMerge) {
  LatencyHistogram h;
  EXPECT_EQ(h.percentile(0.5), 0U);
  for (uint64_t v = 1; v <= 10000; ++v) h.add(v * 100);  // 100 ns .. 1 ms
  EXPECT_EQ(h.count(), 10000U);
  EXPECT_EQ(h.min(), 100U);
  EXPECT_EQ(h.max(), 1000000U);
  EXPECT_DOUBLE_EQ(h.mean(), 500050.0);
  for (const double p : {0.01, 0.5, 0.9, 0.99, 0.999}) {
    const double exact = p * 1000000;
    const auto got = static_cast<double>(h.percentile(p));
    EXPECT_GE(got, exact - 100) << p;
    EXPECT_LE(got, exact * (1 + 1.0 / 32) + 100) << p;
  }
  EXPECT_EQ(h.percentile(1.0), 1000000U);
  LatencyHistogram other;
  other.add(5);
  other.add(50000000);
  h.merge(other);
  EXPECT_EQ(h.count(), 10002U);
  EXPECT_EQ(h.min(), 5U);
  EXPECT_EQ(h.max(), 50000000U);
  EXPECT_EQ(h.percentile(1.0), 50000000U);
}

}  // namespace
}  // namespace uroce::nvmf
