// Portable CRC-32: slicing-by-8 over tables built at compile time. No ISA flags; the
// fallback on CPUs without PCLMULQDQ, and the short-input path of the folding variants.
#include <array>
#include <cstddef>
#include <cstdint>

#include "proto/crc32_internal.h"

namespace uroce::proto::crc32_internal {
namespace {

using Table = std::array<uint32_t, 256>;

// kTables[k][b] is the register contribution of byte b followed by k zero bytes, so eight
// bytes are absorbed with eight independent lookups instead of eight dependent ones.
constexpr std::array<Table, 8> make_tables() noexcept {
  std::array<Table, 8> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int i = 0; i < 8; ++i) r = (r >> 1) ^ ((r & 1u) != 0 ? kPolyReflected : 0u);
    t[0][b] = r;
  }
  for (std::size_t k = 1; k < t.size(); ++k) {
    for (std::size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}

constexpr std::array<Table, 8> kTables = make_tables();
static_assert(kTables[0][1] == 0x77073096u && kTables[0][255] == 0x2D02EF8Du, "zlib's byte table");

// Little-endian 32-bit load from any alignment; compiles to one load on little-endian CPUs.
inline uint32_t load_le32(const uint8_t* p) noexcept {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

uint32_t portable_update(uint32_t state, const uint8_t* p, std::size_t len) noexcept {
  while (len >= 8) {
    const uint32_t lo = load_le32(p) ^ state;
    const uint32_t hi = load_le32(p + 4);
    state = kTables[7][lo & 0xFFu] ^ kTables[6][(lo >> 8) & 0xFFu] ^ kTables[5][(lo >> 16) & 0xFFu] ^
            kTables[4][lo >> 24] ^ kTables[3][hi & 0xFFu] ^ kTables[2][(hi >> 8) & 0xFFu] ^
            kTables[1][(hi >> 16) & 0xFFu] ^ kTables[0][hi >> 24];
    p += 8;
    len -= 8;
  }
  for (; len != 0; --len) state = (state >> 8) ^ kTables[0][(state ^ *p++) & 0xFFu];
  return state;
}

uint32_t crc32_portable(uint32_t crc, const void* data, std::size_t len) noexcept {
  return ~portable_update(~crc, static_cast<const uint8_t*>(data), len);
}

uint32_t crc32_portable_masked(uint32_t crc, const void* data, std::size_t len, const void* mask,
                               std::size_t mask_len) noexcept {
  const auto* p = static_cast<const uint8_t*>(data);
  const auto* m = static_cast<const uint8_t*>(mask);
  uint8_t head[64];
  for (std::size_t i = 0; i < mask_len; ++i) head[i] = static_cast<uint8_t>(p[i] | m[i]);
  const uint32_t state = portable_update(~crc, head, mask_len);
  return ~portable_update(state, p + mask_len, len - mask_len);
}

}  // namespace uroce::proto::crc32_internal
