#include "proto/entropy.h"

#include <cerrno>
#include <random>

#include <sys/random.h>

namespace uroce::proto {

void random_bytes(void* out, std::size_t length) noexcept {
  auto* const bytes = static_cast<uint8_t*>(out);
  std::size_t done = 0;
  while (done < length) {
    // Flags 0: the urandom pool, which blocks only before the kernel's pool was first seeded (early boot).
    const ssize_t n = getrandom(bytes + done, length - done, 0);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      break;  // ENOSYS on a kernel before 3.17: fall back below
    }
  }
  if (done == length) return;
  // std::random_device reads the CPU's RDRAND/RDSEED or /dev/urandom: non-deterministic as well.
  std::random_device device;
  for (; done < length; ++done) bytes[done] = static_cast<uint8_t>(device());
}

uint32_t random_u32() noexcept {
  uint32_t v = 0;
  random_bytes(&v, sizeof(v));
  return v;
}

uint64_t random_u64() noexcept {
  uint64_t v = 0;
  random_bytes(&v, sizeof(v));
  return v;
}

}  // namespace uroce::proto
