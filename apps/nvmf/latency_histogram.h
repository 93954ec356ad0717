// A latency histogram for uroce-nvmf-perf: log-linear buckets (32 per power of two, so a bucket is at most 1/32 of
// its value wide: ~3 %), as HdrHistogram and spdk_nvme_perf's -LL do, from 0 ns to hours; adding is a few
// instructions and no allocation.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <limits>

namespace uroce::nvmf {

class LatencyHistogram {
 public:
  static constexpr unsigned kSubBits = 5;                       // 32 sub-buckets per power of two
  static constexpr uint64_t kLinear = uint64_t{2} << kSubBits;  // values below are their own bucket
  static constexpr std::size_t kBuckets = kLinear + std::size_t{64 - kSubBits - 1} * (1U << kSubBits);

  static constexpr std::size_t bucket_of(uint64_t ns) {
    if (ns < kLinear) return static_cast<std::size_t>(ns);
    const unsigned msb = 63U - static_cast<unsigned>(std::countl_zero(ns));
    const unsigned shift = msb - kSubBits;
    return kLinear + std::size_t{msb - kSubBits - 1} * (1U << kSubBits) + ((ns >> shift) & ((1U << kSubBits) - 1));
  }
  // The largest value in bucket b.
  static constexpr uint64_t upper_bound(std::size_t b) {
    if (b < kLinear) return b;
    const std::size_t i = b - kLinear;
    const unsigned msb = static_cast<unsigned>(i >> kSubBits) + kSubBits + 1;
    const uint64_t sub = i & ((1U << kSubBits) - 1);
    const unsigned shift = msb - kSubBits;
    const uint64_t low = ((uint64_t{1} << kSubBits) | sub) << shift;
    return low + ((uint64_t{1} << shift) - 1);
  }

  void add(uint64_t ns) {
    ++counts_[bucket_of(ns)];
    ++count_;
    sum_ += ns;
    min_ = std::min(min_, ns);
    max_ = std::max(max_, ns);
  }
  void merge(const LatencyHistogram& other) {
    for (std::size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
    count_ += other.count_;
    sum_ += other.sum_;
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
  }
  // The value at or below which `fraction` (0..1] of the samples lie: its bucket's upper bound, never above max.
  [[nodiscard]] uint64_t percentile(double fraction) const {
    if (count_ == 0) return 0;
    const auto rank = static_cast<uint64_t>(std::max(1.0, fraction * static_cast<double>(count_) + 0.5));
    uint64_t seen = 0;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= std::min(rank, count_)) return std::min(upper_bound(i), max_);
    }
    return max_;
  }
  [[nodiscard]] uint64_t count() const { return count_; }
  [[nodiscard]] uint64_t min() const { return count_ == 0 ? 0 : min_; }
  [[nodiscard]] uint64_t max() const { return max_; }
  [[nodiscard]] double mean() const {
    return count_ == 0 ? 0.0 : static_cast<double>(sum_) / static_cast<double>(count_);
  }
  [[nodiscard]] uint64_t bucket_count(std::size_t b) const { return counts_[b]; }

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t min_ = std::numeric_limits<uint64_t>::max();
  uint64_t max_ = 0;
};

}  // namespace uroce::nvmf
