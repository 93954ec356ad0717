// proto/entropy.h: values from the kernel's CSPRNG. Unpredictability cannot be tested; these catch a source that
// is constant, zero, or repeats (a fixed seed, a stub).
#include "proto/entropy.h"

#include <gtest/gtest.h>

#include <array>
#include <set>
#include <thread>
#include <vector>

namespace uroce::proto {
namespace {

TEST(Entropy, BytesCoverTheByteRangeAndDrawsDoNotRepeat) {
  std::array<uint8_t, 4096> bytes{};
  random_bytes(bytes.data(), bytes.size());
  const std::set<uint8_t> distinct(bytes.begin(), bytes.end());
  // 4096 uniform bytes leave a given value out with probability (255/256)^4096 ~ 1e-7: about 256 distinct.
  EXPECT_GT(distinct.size(), 240u);

  std::set<uint64_t> draws;
  for (int i = 0; i < 1000; ++i) draws.insert(random_u64());
  EXPECT_EQ(draws.size(), 1000u);  // a repeat among 1000 64-bit draws: ~3e-14
  std::set<uint32_t> small;
  for (int i = 0; i < 100; ++i) small.insert(random_u32());
  EXPECT_GE(small.size(), 99u);  // one repeat among 100 32-bit draws: ~1e-6; two: never
}

TEST(Entropy, ThreadsDrawIndependently) {
  // Each thread's draws are its own: no shared generator state that two threads could race on or replay.
  std::vector<uint64_t> a(256);
  std::vector<uint64_t> b(256);
  std::thread ta([&] {
    for (auto& v : a) v = random_u64();
  });
  std::thread tb([&] {
    for (auto& v : b) v = random_u64();
  });
  ta.join();
  tb.join();
  std::set<uint64_t> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), a.size() + b.size());
}

}  // namespace
}  // namespace uroce::proto
