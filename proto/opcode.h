// The IBTA opcode table as data (STYLE.md §1).
//
// One constexpr row per opcode: its IBTA name, the extension headers it carries
// and its properties. Header offsets and lengths are computed from the header set
// in the one canonical order (IBTA 9.2 / rocev2.md §2.2) and checked against the
// spec sizes by static_assert at the bottom of this file.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "proto/headers.h"
#include "proto/types.h"

namespace uroce::proto {

enum class Opcode : uint8_t {
  // Reliable Connected, IBTA 9.2.1 (base 0x00).
  kRcSendFirst = 0x00,
  kRcSendMiddle = 0x01,
  kRcSendLast = 0x02,
  kRcSendLastWithImmediate = 0x03,
  kRcSendOnly = 0x04,
  kRcSendOnlyWithImmediate = 0x05,
  kRcRdmaWriteFirst = 0x06,
  kRcRdmaWriteMiddle = 0x07,
  kRcRdmaWriteLast = 0x08,
  kRcRdmaWriteLastWithImmediate = 0x09,
  kRcRdmaWriteOnly = 0x0A,
  kRcRdmaWriteOnlyWithImmediate = 0x0B,
  kRcRdmaReadRequest = 0x0C,
  kRcRdmaReadResponseFirst = 0x0D,
  kRcRdmaReadResponseMiddle = 0x0E,
  kRcRdmaReadResponseLast = 0x0F,
  kRcRdmaReadResponseOnly = 0x10,
  kRcAcknowledge = 0x11,
  kRcAtomicAcknowledge = 0x12,
  kRcCompareSwap = 0x13,
  kRcFetchAdd = 0x14,
  kRcSendLastWithInvalidate = 0x16,
  kRcSendOnlyWithInvalidate = 0x17,
  kRcFlush = 0x1C,
  kRcAtomicWrite = 0x1D,
  // Unreliable Connected (base 0x20).
  kUcSendFirst = 0x20,
  kUcSendMiddle = 0x21,
  kUcSendLast = 0x22,
  kUcSendLastWithImmediate = 0x23,
  kUcSendOnly = 0x24,
  kUcSendOnlyWithImmediate = 0x25,
  kUcRdmaWriteFirst = 0x26,
  kUcRdmaWriteMiddle = 0x27,
  kUcRdmaWriteLast = 0x28,
  kUcRdmaWriteLastWithImmediate = 0x29,
  kUcRdmaWriteOnly = 0x2A,
  kUcRdmaWriteOnlyWithImmediate = 0x2B,
  // Unreliable Datagram (base 0x60).
  kUdSendOnly = 0x64,
  kUdSendOnlyWithImmediate = 0x65,
  // RoCEv2 congestion notification packet (not Linux's IB_OPCODE_CNP 0x80).
  kCnp = 0x81,
};

enum class Transport : uint8_t { kRc, kUc, kUd, kCnp };

enum class Operation : uint8_t {
  kSend,
  kRdmaWrite,
  kRdmaReadRequest,
  kRdmaReadResponse,
  kAcknowledge,
  kAtomicAcknowledge,
  kCompareSwap,
  kFetchAdd,
  kFlush,
  kAtomicWrite,
  kCongestionNotification,
};

// Extension headers, in the order they follow the BTH.
enum class ExtHeader : uint8_t { kDeth, kFeth, kReth, kAtomicEth, kImmDt, kIeth, kAeth, kAtomicAckEth, kCnpBody };
inline constexpr std::size_t kExtHeaderCount = 9;

// IBA 1.5 FLUSH Extended Transport Header: selectivity and placement type.
struct Feth {
  static constexpr std::size_t kSize = 4;
  static constexpr WireField<uint8_t, 3, 1, 4, 2> selectivity{};
  static constexpr WireField<uint8_t, 3, 1, 0, 4> placement_type{};
};

constexpr std::size_t ext_header_size(ExtHeader h) noexcept {
  constexpr std::array<std::size_t, kExtHeaderCount> kSizes = {Deth::kSize,      Feth::kSize,         Reth::kSize,
                                                               AtomicEth::kSize, ImmDt::kSize,        Ieth::kSize,
                                                               Aeth::kSize,      AtomicAckEth::kSize, CnpBody::kSize};
  return kSizes[static_cast<std::size_t>(h)];
}

using HeaderSet = uint16_t;
constexpr HeaderSet bit(ExtHeader h) noexcept { return static_cast<HeaderSet>(1u << static_cast<unsigned>(h)); }

// Packet properties. First/Middle/Last/Only give the packet's place in its message;
// single-packet operations (READ request, atomics, ACKs, UD, CNP) are Only.
enum Property : uint32_t {
  kFirst = 1u << 0,
  kMiddle = 1u << 1,
  kLast = 1u << 2,
  kOnly = 1u << 3,
  kPayload = 1u << 4,          // may carry a payload
  kConsumesRecvWqe = 1u << 5,  // lands in a receive WQE (SEND, WRITE with immediate)
  kRequest = 1u << 6,          // requester -> responder
  kResponse = 1u << 7,         // responder -> requester (READ response, ACK, atomic ACK)
  kImmediate = 1u << 8,
  kInvalidate = 1u << 9,
  kSolicitable = 1u << 10,   // SE may be set (last/only SEND, WRITE with immediate)
  kAckSemantics = 1u << 11,  // carries an AETH that acknowledges PSNs
  kReadClass = 1u << 12,     // uses a responder resource slot (READ, atomics, FLUSH, ATOMIC_WRITE)
};

struct OpcodeInfo {
  std::string_view name;  // IBTA spelling, e.g. "RC_SEND_FIRST"; empty for reserved opcodes
  Transport transport = Transport::kRc;
  Operation operation = Operation::kSend;
  HeaderSet headers = 0;
  uint32_t properties = 0;
  uint8_t ext_length = 0;                             // bytes of extension headers after the BTH
  std::array<uint8_t, kExtHeaderCount> ext_offset{};  // from the end of the BTH; valid where carried

  [[nodiscard]] constexpr bool valid() const noexcept { return !name.empty(); }
  [[nodiscard]] constexpr bool is(uint32_t props) const noexcept { return (properties & props) == props; }
  [[nodiscard]] constexpr bool carries(ExtHeader h) const noexcept { return (headers & bit(h)) != 0; }
  [[nodiscard]] constexpr std::size_t offset_of(ExtHeader h) const noexcept {
    return ext_offset[static_cast<std::size_t>(h)];
  }
  // Fixed payload the opcode demands (ATOMIC_WRITE's 8 bytes), or -1 for "any that the position allows".
  [[nodiscard]] constexpr int fixed_payload() const noexcept { return operation == Operation::kAtomicWrite ? 8 : -1; }
};

namespace detail {

constexpr OpcodeInfo make_row(std::string_view name, Transport t, Operation op, HeaderSet headers, uint32_t props) {
  OpcodeInfo row{name, t, op, headers, props, 0, {}};
  std::size_t offset = 0;
  for (std::size_t i = 0; i < kExtHeaderCount; ++i) {
    const auto h = static_cast<ExtHeader>(i);
    row.ext_offset[i] = static_cast<uint8_t>(offset);
    if (headers & bit(h)) offset += ext_header_size(h);
  }
  row.ext_length = static_cast<uint8_t>(offset);
  return row;
}

constexpr std::array<OpcodeInfo, 256> make_opcode_table() {
  std::array<OpcodeInfo, 256> t{};
  constexpr HeaderSet kNone = 0;
  constexpr HeaderSet kReth = bit(ExtHeader::kReth);
  constexpr HeaderSet kImm = bit(ExtHeader::kImmDt);
  constexpr HeaderSet kIeth = bit(ExtHeader::kIeth);
  constexpr HeaderSet kAeth = bit(ExtHeader::kAeth);
  constexpr HeaderSet kDeth = bit(ExtHeader::kDeth);
  constexpr uint32_t kReq = kRequest;
  constexpr uint32_t kSendMsg = kReq | kPayload | kConsumesRecvWqe;

  // RC and UC share the SEND and RDMA WRITE rows; only RC has the rest (IBTA Table 35).
  struct Shared {
    uint8_t op;
    std::string_view rc_name;
    std::string_view uc_name;
    Operation operation;
    HeaderSet headers;
    uint32_t props;
  };
  constexpr Shared kShared[] = {
      {0x00, "RC_SEND_FIRST", "UC_SEND_FIRST", Operation::kSend, kNone, kSendMsg | kFirst},
      {0x01, "RC_SEND_MIDDLE", "UC_SEND_MIDDLE", Operation::kSend, kNone, kSendMsg | kMiddle},
      {0x02, "RC_SEND_LAST", "UC_SEND_LAST", Operation::kSend, kNone, kSendMsg | kLast | kSolicitable},
      {0x03, "RC_SEND_LAST_WITH_IMMEDIATE", "UC_SEND_LAST_WITH_IMMEDIATE", Operation::kSend, kImm,
       kSendMsg | kLast | kSolicitable | kImmediate},
      {0x04, "RC_SEND_ONLY", "UC_SEND_ONLY", Operation::kSend, kNone, kSendMsg | kOnly | kSolicitable},
      {0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", "UC_SEND_ONLY_WITH_IMMEDIATE", Operation::kSend, kImm,
       kSendMsg | kOnly | kSolicitable | kImmediate},
      {0x06, "RC_RDMA_WRITE_FIRST", "UC_RDMA_WRITE_FIRST", Operation::kRdmaWrite, kReth, kReq | kPayload | kFirst},
      {0x07, "RC_RDMA_WRITE_MIDDLE", "UC_RDMA_WRITE_MIDDLE", Operation::kRdmaWrite, kNone, kReq | kPayload | kMiddle},
      {0x08, "RC_RDMA_WRITE_LAST", "UC_RDMA_WRITE_LAST", Operation::kRdmaWrite, kNone, kReq | kPayload | kLast},
      {0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", Operation::kRdmaWrite, kImm,
       kReq | kPayload | kLast | kImmediate | kConsumesRecvWqe | kSolicitable},
      {0x0A, "RC_RDMA_WRITE_ONLY", "UC_RDMA_WRITE_ONLY", Operation::kRdmaWrite, kReth, kReq | kPayload | kOnly},
      {0x0B, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", Operation::kRdmaWrite,
       kReth | kImm, kReq | kPayload | kOnly | kImmediate | kConsumesRecvWqe | kSolicitable},
  };
  for (const Shared& c : kShared) {
    t[c.op] = make_row(c.rc_name, Transport::kRc, c.operation, c.headers, c.props);
    t[0x20 | c.op] = make_row(c.uc_name, Transport::kUc, c.operation, c.headers, c.props);
  }

  constexpr uint32_t kReadResp = kResponse | kPayload | kAckSemantics;
  t[0x0C] =
      make_row("RC_RDMA_READ_REQUEST", Transport::kRc, Operation::kRdmaReadRequest, kReth, kReq | kOnly | kReadClass);
  t[0x0D] =
      make_row("RC_RDMA_READ_RESPONSE_FIRST", Transport::kRc, Operation::kRdmaReadResponse, kAeth, kReadResp | kFirst);
  // MIDDLE carries no AETH, so it acknowledges nothing by itself.
  t[0x0E] = make_row("RC_RDMA_READ_RESPONSE_MIDDLE", Transport::kRc, Operation::kRdmaReadResponse, kNone,
                     kResponse | kPayload | kMiddle);
  t[0x0F] =
      make_row("RC_RDMA_READ_RESPONSE_LAST", Transport::kRc, Operation::kRdmaReadResponse, kAeth, kReadResp | kLast);
  t[0x10] =
      make_row("RC_RDMA_READ_RESPONSE_ONLY", Transport::kRc, Operation::kRdmaReadResponse, kAeth, kReadResp | kOnly);
  t[0x11] =
      make_row("RC_ACKNOWLEDGE", Transport::kRc, Operation::kAcknowledge, kAeth, kResponse | kOnly | kAckSemantics);
  t[0x12] = make_row("RC_ATOMIC_ACKNOWLEDGE", Transport::kRc, Operation::kAtomicAcknowledge,
                     kAeth | bit(ExtHeader::kAtomicAckEth), kResponse | kOnly | kAckSemantics);
  t[0x13] = make_row("RC_COMPARE_SWAP", Transport::kRc, Operation::kCompareSwap, bit(ExtHeader::kAtomicEth),
                     kReq | kOnly | kReadClass);
  t[0x14] = make_row("RC_FETCH_ADD", Transport::kRc, Operation::kFetchAdd, bit(ExtHeader::kAtomicEth),
                     kReq | kOnly | kReadClass);
  t[0x16] = make_row("RC_SEND_LAST_WITH_INVALIDATE", Transport::kRc, Operation::kSend, kIeth,
                     kSendMsg | kLast | kSolicitable | kInvalidate);
  t[0x17] = make_row("RC_SEND_ONLY_WITH_INVALIDATE", Transport::kRc, Operation::kSend, kIeth,
                     kSendMsg | kOnly | kSolicitable | kInvalidate);
  t[0x1C] =
      make_row("RC_FLUSH", Transport::kRc, Operation::kFlush, bit(ExtHeader::kFeth) | kReth, kReq | kOnly | kReadClass);
  t[0x1D] =
      make_row("RC_ATOMIC_WRITE", Transport::kRc, Operation::kAtomicWrite, kReth, kReq | kOnly | kPayload | kReadClass);

  t[0x64] = make_row("UD_SEND_ONLY", Transport::kUd, Operation::kSend, kDeth, kSendMsg | kOnly | kSolicitable);
  t[0x65] = make_row("UD_SEND_ONLY_WITH_IMMEDIATE", Transport::kUd, Operation::kSend, kDeth | kImm,
                     kSendMsg | kOnly | kSolicitable | kImmediate);
  t[0x81] = make_row("CNP", Transport::kCnp, Operation::kCongestionNotification, bit(ExtHeader::kCnpBody), kOnly);
  return t;
}

}  // namespace detail

inline constexpr std::array<OpcodeInfo, 256> kOpcodeTable = detail::make_opcode_table();

constexpr const OpcodeInfo& opcode_info(Opcode op) noexcept { return kOpcodeTable[static_cast<uint8_t>(op)]; }

// Header offsets from the start of the BTH, checked against IBTA layouts.
constexpr std::size_t header_length(Opcode op) noexcept { return Bth::kSize + opcode_info(op).ext_length; }

// --- Spec checks (IBTA 9.2-9.5, rocev2.md §2.3) ---
static_assert(header_length(Opcode::kRcSendFirst) == 12);
static_assert(header_length(Opcode::kRcSendLastWithImmediate) == 16);
static_assert(header_length(Opcode::kRcRdmaWriteFirst) == 28);
static_assert(header_length(Opcode::kRcRdmaWriteOnlyWithImmediate) == 32);
static_assert(opcode_info(Opcode::kRcRdmaWriteOnlyWithImmediate).offset_of(ExtHeader::kImmDt) == Reth::kSize);
static_assert(header_length(Opcode::kRcRdmaReadRequest) == 28);
static_assert(header_length(Opcode::kRcRdmaReadResponseFirst) == 16);
static_assert(header_length(Opcode::kRcRdmaReadResponseMiddle) == 12);
static_assert(header_length(Opcode::kRcAcknowledge) == 16);
static_assert(header_length(Opcode::kRcAtomicAcknowledge) == 24);
static_assert(opcode_info(Opcode::kRcAtomicAcknowledge).offset_of(ExtHeader::kAtomicAckEth) == Aeth::kSize);
static_assert(header_length(Opcode::kRcCompareSwap) == 40);
static_assert(header_length(Opcode::kRcFetchAdd) == 40);
static_assert(header_length(Opcode::kRcSendOnlyWithInvalidate) == 16);
static_assert(header_length(Opcode::kRcFlush) == 32);
static_assert(opcode_info(Opcode::kRcFlush).offset_of(ExtHeader::kReth) == Feth::kSize);
static_assert(header_length(Opcode::kUdSendOnly) == 20);
static_assert(header_length(Opcode::kUdSendOnlyWithImmediate) == 24);
static_assert(opcode_info(Opcode::kUdSendOnlyWithImmediate).offset_of(ExtHeader::kImmDt) == Deth::kSize);
static_assert(header_length(Opcode::kCnp) == 28);
static_assert(opcode_info(Opcode::kUcRdmaWriteOnly).transport == Transport::kUc);
static_assert(opcode_info(Opcode::kUcRdmaWriteOnly).name == "UC_RDMA_WRITE_ONLY");
static_assert(!opcode_info(Opcode{0x15}).valid() && !opcode_info(Opcode{0x80}).valid());

constexpr std::size_t count_valid_opcodes() {
  std::size_t n = 0;
  for (const auto& row : kOpcodeTable) n += row.valid() ? 1 : 0;
  return n;
}
static_assert(count_valid_opcodes() == 25 + 12 + 2 + 1, "RC 25, UC 12, UD 2, CNP 1");

// Exactly one position bit per valid opcode, and payload-free rows never claim one.
constexpr bool positions_consistent() {
  for (const auto& row : kOpcodeTable) {
    if (!row.valid()) continue;
    const uint32_t pos = row.properties & (kFirst | kMiddle | kLast | kOnly);
    if (pos == 0 || (pos & (pos - 1)) != 0) return false;
    if (row.is(kImmediate) != row.carries(ExtHeader::kImmDt)) return false;
    if (row.is(kInvalidate) != row.carries(ExtHeader::kIeth)) return false;
    if (row.carries(ExtHeader::kAeth) && !row.is(kResponse)) return false;
  }
  return true;
}
static_assert(positions_consistent());

}  // namespace uroce::proto
