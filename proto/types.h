// Strong types for RoCEv2 protocol quantities.
//
// Each quantity is its own type, so passing a QPN where a PSN is expected, or an
// R_Key where an L_Key is expected, fails to compile. Values are host order; the
// header views in headers.h convert at the wire boundary.
#pragma once

#include <compare>
#include <cstdint>

namespace uroce::proto {

// A fixed-width unsigned quantity. Width < 32 masks on construction, so a value
// of the type can never hold bits the wire field cannot carry.
template <class Tag, class Rep, unsigned Width = sizeof(Rep) * 8>
class Quantity {
 public:
  using rep_type = Rep;
  static constexpr unsigned kWidth = Width;
  static constexpr Rep kMask =
      Width >= sizeof(Rep) * 8 ? static_cast<Rep>(~Rep{0}) : static_cast<Rep>((Rep{1} << Width) - 1);

  constexpr Quantity() noexcept = default;
  constexpr explicit Quantity(Rep v) noexcept : value_(static_cast<Rep>(v & kMask)) {}
  [[nodiscard]] constexpr Rep value() const noexcept { return value_; }
  constexpr bool operator==(const Quantity&) const noexcept = default;

 private:
  Rep value_ = 0;
};

// Identity quantities: equality and (where useful for maps) ordering, no arithmetic.
template <class Tag, class Rep, unsigned Width = sizeof(Rep) * 8>
class Identifier : public Quantity<Tag, Rep, Width> {
 public:
  using Quantity<Tag, Rep, Width>::Quantity;
  constexpr auto operator<=>(const Identifier& o) const noexcept { return this->value() <=> o.value(); }
  constexpr bool operator==(const Identifier&) const noexcept = default;
};

struct QpnTag;
struct PKeyTag;
struct QKeyTag;
struct LocalTokenTag;
struct RemoteTokenTag;

using Qpn = Identifier<QpnTag, uint32_t, 24>;              // BTH DestQP, DETH SrcQP
using PKey = Identifier<PKeyTag, uint16_t>;                // BTH P_Key
using QKey = Identifier<QKeyTag, uint32_t>;                // DETH Q_Key
using LocalToken = Identifier<LocalTokenTag, uint32_t>;    // L_Key (never on the wire)
using RemoteToken = Identifier<RemoteTokenTag, uint32_t>;  // R_Key in RETH, AtomicETH, IETH

inline constexpr PKey kDefaultPKey{0xFFFF};
inline constexpr QKey kGsiQKey{0x80010000};
inline constexpr Qpn kGsiQpn{1};

// IBTA 9.7.8.1: a P_Key matches when the low 15 bits are equal and at least one
// of the two is a full member (bit 15 set).
constexpr bool pkey_matches(PKey a, PKey b) noexcept {
  return ((a.value() ^ b.value()) & 0x7FFF) == 0 && ((a.value() | b.value()) & 0x8000) != 0;
}

// 24-bit sequence numbers (PSN, MSN) with modular arithmetic. There is no
// operator<: ordering is only meaningful within half the sequence space, so
// callers say so explicitly with is_before()/distance().
template <class Tag>
class Seq24 : public Quantity<Tag, uint32_t, 24> {
  using Base = Quantity<Tag, uint32_t, 24>;

 public:
  using Base::Base;
  constexpr bool operator==(const Seq24&) const noexcept = default;

  constexpr Seq24 operator+(uint32_t n) const noexcept { return Seq24{this->value() + n}; }
  constexpr Seq24 operator-(uint32_t n) const noexcept { return Seq24{this->value() - n}; }
  constexpr Seq24& operator+=(uint32_t n) noexcept { return *this = *this + n; }
  constexpr Seq24& operator++() noexcept { return *this = *this + 1; }

  // Signed distance a - b in [-2^23, 2^23): shift the 24-bit difference into the
  // top of an int32 so its sign is the 24-bit sign (rocev2.md §4.2).
  friend constexpr int32_t distance(Seq24 a, Seq24 b) noexcept {
    return static_cast<int32_t>((a.value() - b.value()) << 8) >> 8;
  }
  friend constexpr bool is_before(Seq24 a, Seq24 b) noexcept { return distance(a, b) < 0; }
  friend constexpr bool is_after(Seq24 a, Seq24 b) noexcept { return distance(a, b) > 0; }
};

// BTH OpCode (IBTA 9.2). Declared opaque here; opcode.h names every value and
// holds the table of their properties.
enum class Opcode : uint8_t;

// Ethernet MAC address, 48 bits, in wire order as a big-endian integer.
struct MacTag;
using MacAddr = Identifier<MacTag, uint64_t, 48>;
// IPv4 address, host order.
struct Ipv4Tag;
using Ipv4Addr = Identifier<Ipv4Tag, uint32_t>;

// A group (multicast or broadcast) MAC: the I/G bit, the least significant bit of the first octet. No host sends
// from one.
constexpr bool is_group_mac(MacAddr mac) noexcept { return ((mac.value() >> 40) & 1) != 0; }
// A multicast (224.0.0.0/4) or the limited broadcast address. No host sends from one.
constexpr bool is_group_ipv4(Ipv4Addr ip) noexcept { return (ip.value() >> 28) == 0xE || ip.value() == 0xFFFFFFFF; }

struct PsnTag;
struct MsnTag;
using Psn = Seq24<PsnTag>;
using Msn = Seq24<MsnTag>;

static_assert(distance(Psn{0}, Psn{0xFFFFFF}) == 1, "PSN wraps at 2^24");
static_assert(is_before(Psn{0xFFFFF0}, Psn{0x10}));
static_assert(Psn{0xFFFFFF} + 1 == Psn{0});
static_assert(Qpn{0x1234567}.value() == 0x234567, "QPN is 24 bits");
static_assert(pkey_matches(PKey{0xFFFF}, PKey{0x7FFF}) && !pkey_matches(PKey{0x7FFF}, PKey{0x7FFF}));

}  // namespace uroce::proto
