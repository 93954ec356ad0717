// AETH syndrome encoding, IBTA 9.7.5.1 (rocev2.md §4.6).
//
//   bit 7     reserved, 0
//   bits 6-5  00 ACK, 01 RNR NAK, 10 reserved, 11 NAK
//   bits 4-0  ACK: credit code | RNR NAK: timer code | NAK: error code
#pragma once

#include <array>
#include <cstdint>
#include <optional>

namespace uroce::proto {

enum class AethKind : uint8_t { kAck = 0, kRnrNak = 1, kReserved = 2, kNak = 3 };

enum class NakCode : uint8_t {
  kPsnSequenceError = 0,
  kInvalidRequest = 1,
  kRemoteAccessError = 2,
  kRemoteOperationalError = 3,
  kInvalidRdRequest = 4,
};

// ACK credit codes 0..30 -> receive WQEs advertised beyond the MSN; 31 = invalid/unlimited.
inline constexpr std::array<uint16_t, 31> kAckCreditCounts = {
    0,   1,   2,   3,   4,    6,    8,    12,   16,   24,   32,   48,    64,    96,    128,  192,
    256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768};
inline constexpr uint8_t kCreditsInvalid = 31;

// RNR NAK timer codes -> minimum wait in nanoseconds (IBTA Table 45). Code 0 is the longest.
inline constexpr std::array<uint64_t, 32> kRnrTimerNs = {
    655'360'000, 10'000,     20'000,     30'000,      40'000,      60'000,      80'000,      120'000,
    160'000,     240'000,    320'000,    480'000,     640'000,     960'000,     1'280'000,   1'920'000,
    2'560'000,   3'840'000,  5'120'000,  7'680'000,   10'240'000,  15'360'000,  20'480'000,  30'720'000,
    40'960'000,  61'440'000, 81'920'000, 122'880'000, 163'840'000, 245'760'000, 327'680'000, 491'520'000};

class AethSyndrome {
 public:
  constexpr explicit AethSyndrome(uint8_t raw) noexcept : raw_(raw) {}

  static constexpr AethSyndrome ack(uint8_t credit_code) noexcept {
    return AethSyndrome(static_cast<uint8_t>(credit_code & 0x1F));
  }
  // The largest credit code whose count does not exceed `available` receive WQEs.
  static constexpr AethSyndrome ack_with_credits(uint32_t available) noexcept {
    std::size_t code = 0;
    while (code + 1 < kAckCreditCounts.size() && kAckCreditCounts[code + 1] <= available) ++code;
    return ack(static_cast<uint8_t>(code));
  }
  static constexpr AethSyndrome ack_unlimited() noexcept { return ack(kCreditsInvalid); }
  static constexpr AethSyndrome rnr_nak(uint8_t timer_code) noexcept {
    return AethSyndrome(static_cast<uint8_t>(0x20 | (timer_code & 0x1F)));
  }
  static constexpr AethSyndrome nak(NakCode code) noexcept {
    return AethSyndrome(static_cast<uint8_t>(0x60 | static_cast<uint8_t>(code)));
  }

  [[nodiscard]] constexpr uint8_t raw() const noexcept { return raw_; }
  [[nodiscard]] constexpr AethKind kind() const noexcept { return static_cast<AethKind>((raw_ >> 5) & 3); }
  [[nodiscard]] constexpr uint8_t value() const noexcept { return raw_ & 0x1F; }
  // A well-formed syndrome on RC has bit 7 clear, is not the reserved kind, and a NAK code ≤ 3: code 4 (Invalid RD
  // Request) is Reliable Datagram's alone, and reserved on RC (rocev2.md §4.6).
  [[nodiscard]] constexpr bool valid() const noexcept {
    return (raw_ & 0x80) == 0 && kind() != AethKind::kReserved && (kind() != AethKind::kNak || value() <= 3);
  }

  // ACK only: advertised credits, or nullopt when the code says "invalid" (31).
  [[nodiscard]] constexpr std::optional<uint32_t> credits() const noexcept {
    if (kind() != AethKind::kAck || value() == kCreditsInvalid) return std::nullopt;
    return kAckCreditCounts[value()];
  }
  // RNR NAK only: the minimum wait before retrying.
  [[nodiscard]] constexpr uint64_t rnr_wait_ns() const noexcept { return kRnrTimerNs[value()]; }
  [[nodiscard]] constexpr NakCode nak_code() const noexcept { return static_cast<NakCode>(value()); }

  constexpr bool operator==(const AethSyndrome&) const noexcept = default;

 private:
  uint8_t raw_;
};

static_assert(AethSyndrome::ack_unlimited().raw() == 0x1F);
static_assert(AethSyndrome::nak(NakCode::kPsnSequenceError).raw() == 0x60);
static_assert(AethSyndrome::rnr_nak(14).raw() == 0x2E && AethSyndrome(0x2E).rnr_wait_ns() == 1'280'000);
static_assert(AethSyndrome::ack_with_credits(100).credits() == 96u);
static_assert(AethSyndrome::ack_with_credits(0).credits() == 0u);
static_assert(AethSyndrome::ack_with_credits(1'000'000).credits() == 32768u);
static_assert(!AethSyndrome(0x40).valid() && !AethSyndrome(0x64).valid() && AethSyndrome(0x63).valid());

}  // namespace uroce::proto
