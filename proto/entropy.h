// Numbers a peer must not be able to predict: CM communication IDs and transaction IDs, starting PSNs, the QPN
// and memory-key choices. An off-path attacker who knows a connection's QPN and PSN window can inject into it,
// and one who knows both communication IDs can end it with a forged DREQ.
//
// Each value comes from the kernel's CSPRNG (getrandom(2)), as Linux's own rdma_cm takes get_random_u32() for
// its PSNs. A std::mt19937 seeded with 32 bits, which this replaces, gave away its seed to a brute force over
// 2^32 candidates from a few values a peer sees, and then every later one. These are control-path calls (a
// system call each); nothing on the datapath needs them. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::proto {

void random_bytes(void* out, std::size_t length) noexcept;
[[nodiscard]] uint32_t random_u32() noexcept;
[[nodiscard]] uint64_t random_u64() noexcept;

}  // namespace uroce::proto
