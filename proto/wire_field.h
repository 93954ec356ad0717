// Big-endian wire fields described as data: (byte offset, byte span, shift, width).
//
// A header is a set of WireField constants; a HeaderView reads and writes them
// through unaligned-safe memcpy loads, so there are no C bitfields and no host-order
// packed structs anywhere (STYLE.md §2). The value type of a field is a strong type
// from types.h or a plain integer, and conversion happens only here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace uroce::proto {

namespace detail {

template <unsigned Bytes>
using WordFor = std::conditional_t<(Bytes <= 4), uint32_t, uint64_t>;

// Reads `Bytes` big-endian bytes into the low bits of a word.
template <unsigned Bytes>
constexpr WordFor<Bytes> load_be(const uint8_t* p) noexcept {
  static_assert(Bytes >= 1 && Bytes <= 8);
  if constexpr (Bytes == 1) {
    return p[0];
  } else if constexpr (Bytes == 2 || Bytes == 4 || Bytes == 8) {
    using W = std::conditional_t<Bytes == 2, uint16_t, std::conditional_t<Bytes == 4, uint32_t, uint64_t>>;
    W w;
    std::memcpy(&w, p, Bytes);
    if constexpr (Bytes == 2) return __builtin_bswap16(w);
    if constexpr (Bytes == 4) return __builtin_bswap32(w);
    if constexpr (Bytes == 8) return __builtin_bswap64(w);
  } else if constexpr (Bytes == 3) {  // PSN, QPN, MSN: a byte and a 16-bit word, not three byte loads
    return static_cast<uint32_t>(p[0]) << 16 | load_be<2>(p + 1);
  } else if constexpr (Bytes == 6) {  // MAC addresses
    return static_cast<uint64_t>(load_be<4>(p)) << 16 | load_be<2>(p + 4);
  } else {
    WordFor<Bytes> v = 0;
    for (unsigned i = 0; i < Bytes; ++i) v = (v << 8) | p[i];
    return v;
  }
}

template <unsigned Bytes>
constexpr void store_be(uint8_t* p, WordFor<Bytes> v) noexcept {
  static_assert(Bytes >= 1 && Bytes <= 8);
  if constexpr (Bytes == 1) {
    p[0] = static_cast<uint8_t>(v);
  } else if constexpr (Bytes == 2) {
    const uint16_t w = __builtin_bswap16(static_cast<uint16_t>(v));
    std::memcpy(p, &w, 2);
  } else if constexpr (Bytes == 4) {
    const uint32_t w = __builtin_bswap32(static_cast<uint32_t>(v));
    std::memcpy(p, &w, 4);
  } else if constexpr (Bytes == 8) {
    const uint64_t w = __builtin_bswap64(static_cast<uint64_t>(v));
    std::memcpy(p, &w, 8);
  } else if constexpr (Bytes == 3) {
    p[0] = static_cast<uint8_t>(v >> 16);
    store_be<2>(p + 1, v & 0xFFFF);
  } else if constexpr (Bytes == 6) {
    store_be<4>(p, static_cast<uint32_t>(v >> 16));
    store_be<2>(p + 4, v & 0xFFFF);
  } else {
    for (unsigned i = Bytes; i-- > 0; v >>= 8) p[i] = static_cast<uint8_t>(v);
  }
}

template <class T>
constexpr auto to_raw(T v) noexcept {
  if constexpr (std::is_enum_v<T>) {
    return static_cast<std::underlying_type_t<T>>(v);
  } else if constexpr (std::is_integral_v<T>) {
    return v;
  } else {
    return v.value();
  }
}

}  // namespace detail

// Value of type T stored in bits [Shift, Shift+Width) of the big-endian word made
// of bytes [Offset, Offset+Bytes) of a header.
template <class T, std::size_t Offset, unsigned Bytes, unsigned Shift = 0, unsigned Width = Bytes * 8>
struct WireField {
  using value_type = T;
  using Word = detail::WordFor<Bytes>;
  static constexpr std::size_t kOffset = Offset;
  static constexpr unsigned kBytes = Bytes;
  static constexpr Word kMask = Width >= sizeof(Word) * 8 ? ~Word{0} : ((Word{1} << Width) - 1);
  static_assert(Shift + Width <= Bytes * 8, "field does not fit its bytes");

  static constexpr T get(const uint8_t* header) noexcept {
    const Word raw = (detail::load_be<Bytes>(header + Offset) >> Shift) & kMask;
    if constexpr (std::is_same_v<T, bool>) {
      return raw != 0;
    } else if constexpr (std::is_enum_v<T> || std::is_integral_v<T>) {
      return static_cast<T>(raw);
    } else {
      return T{static_cast<typename T::rep_type>(raw)};
    }
  }

  static constexpr void set(uint8_t* header, T value) noexcept {
    const Word v = static_cast<Word>(detail::to_raw(value)) & kMask;
    if constexpr (Shift == 0 && Width == Bytes * 8) {
      detail::store_be<Bytes>(header + Offset, v);
    } else {
      Word w = detail::load_be<Bytes>(header + Offset);
      w = (w & ~(kMask << Shift)) | (v << Shift);
      detail::store_be<Bytes>(header + Offset, w);
    }
  }
};

// A typed window onto one header. `Layout` names the header's fields and its size;
// Mutable views (over uint8_t*) can also set fields.
template <class Layout, class Byte>
class HeaderView {
  static_assert(std::is_same_v<std::remove_const_t<Byte>, uint8_t>);

 public:
  static constexpr std::size_t kSize = Layout::kSize;
  static constexpr bool kMutable = !std::is_const_v<Byte>;

  constexpr explicit HeaderView(Byte* p) noexcept : p_(p) {}

  template <class F>
  [[nodiscard]] constexpr typename F::value_type get(F) const noexcept {
    static_assert(F::kOffset + F::kBytes <= kSize, "field outside this header");
    return F::get(p_);
  }

  template <class F>
  constexpr void set(F, typename F::value_type v) const noexcept requires kMutable {
    static_assert(F::kOffset + F::kBytes <= kSize, "field outside this header");
    F::set(p_, v);
  }

  [[nodiscard]] constexpr Byte* data() const noexcept { return p_; }

 private:
  Byte* p_;
};

}  // namespace uroce::proto
