// Typed views of the IB Communication Management MADs (IBTA vol. 1 ch. 12; cm-nvmf-dcqcn.md §1.2-1.4).
//
// A CM MAD is always 256 bytes: the 24-byte MAD header, then one CM message. Every field below is given at its
// offset in the whole MAD (the IBTA tables count from the start of the CM message: add kMadHeaderSize), with the
// bit positions of IBTA's tables (bit 7 is a byte's most significant bit). Private data and GIDs are byte ranges,
// given as offset and size. The CM travels on the GSI QP (QPN 1, Q_Key 0x80010000) as UD SEND_ONLY.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "proto/types.h"
#include "proto/wire_field.h"

namespace uroce::proto {

inline constexpr std::size_t kMadSize = 256;
inline constexpr std::size_t kMadHeaderSize = 24;

inline constexpr uint8_t kMadBaseVersion = 1;
inline constexpr uint8_t kCmManagementClass = 0x07;
inline constexpr uint8_t kCmClassVersion = 2;  // the only version Linux's CM registers

enum class MadMethod : uint8_t {
  kGet = 0x01,
  kSend = 0x03,  // every CM message
  kGetResponse = 0x81,
};

// MAD status, IBTA 13.4.7 (bits 4:2 hold the "invalid field" code).
enum class MadStatus : uint16_t {
  kOk = 0,
  kBadVersion = 1 << 2,
  kMethodNotSupported = 2 << 2,
  kMethodAttributeNotSupported = 3 << 2,
  kInvalidAttributeValue = 7 << 2,
};

enum class CmAttribute : uint16_t {
  kClassPortInfo = 0x0001,
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
  kLap = 0x0019,
  kApr = 0x001A,
};

// The MAD header (IBTA 13.4.3).
struct Mad {
  static constexpr std::size_t kSize = kMadSize;
  static constexpr WireField<uint8_t, 0, 1> base_version{};
  static constexpr WireField<uint8_t, 1, 1> management_class{};
  static constexpr WireField<uint8_t, 2, 1> class_version{};
  static constexpr WireField<MadMethod, 3, 1> method{};
  static constexpr WireField<MadStatus, 4, 2> status{};
  static constexpr WireField<uint16_t, 6, 2> class_specific{};
  static constexpr WireField<uint64_t, 8, 8> transaction_id{};
  static constexpr WireField<CmAttribute, 16, 2> attribute_id{};
  static constexpr WireField<uint16_t, 18, 2> reserved{};
  static constexpr WireField<uint32_t, 20, 4> attribute_modifier{};
};

// A field at `MsgOffset` in the CM message, which starts after the MAD header.
template <class T, std::size_t MsgOffset, unsigned Bytes, unsigned Shift = 0, unsigned Width = Bytes * 8>
using CmField = WireField<T, kMadHeaderSize + MsgOffset, Bytes, Shift, Width>;

// A byte range of the CM message (GIDs, private data, ARI), at its offset in the MAD.
template <std::size_t MsgOffset, std::size_t Size>
struct CmBytes {
  static constexpr std::size_t kOffset = kMadHeaderSize + MsgOffset;
  static constexpr std::size_t kSize = Size;
  static_assert(kOffset + kSize <= kMadSize);
};

using Gid = std::array<uint8_t, 16>;

// IBTA Table 106.
struct CmReq {
  static constexpr std::size_t kSize = kMadSize;
  static constexpr CmField<uint32_t, 0, 4> local_comm_id{};
  static constexpr CmField<uint32_t, 5, 3> vendor_id{};
  static constexpr CmField<uint64_t, 8, 8> service_id{};
  static constexpr CmField<uint64_t, 16, 8> local_ca_guid{};
  static constexpr CmField<QKey, 28, 4> local_qkey{};
  static constexpr CmField<Qpn, 32, 3> local_qpn{};
  static constexpr CmField<uint8_t, 35, 1> responder_resources{};
  static constexpr CmField<uint32_t, 36, 3> local_eecn{};
  static constexpr CmField<uint8_t, 39, 1> initiator_depth{};
  static constexpr CmField<uint32_t, 40, 3> remote_eecn{};
  static constexpr CmField<uint8_t, 43, 1, 3, 5> remote_cm_response_timeout{};
  static constexpr CmField<uint8_t, 43, 1, 1, 2> transport_service_type{};  // 0 RC, 1 UC, 3 extended (XRC)
  static constexpr CmField<bool, 43, 1, 0, 1> end_to_end_flow_control{};
  static constexpr CmField<Psn, 44, 3> starting_psn{};
  static constexpr CmField<uint8_t, 47, 1, 3, 5> local_cm_response_timeout{};
  static constexpr CmField<uint8_t, 47, 1, 0, 3> retry_count{};
  static constexpr CmField<PKey, 48, 2> pkey{};
  static constexpr CmField<uint8_t, 50, 1, 4, 4> path_mtu{};  // IB MTU code: 1 = 256 ... 5 = 4096
  static constexpr CmField<bool, 50, 1, 3, 1> rdc_exists{};
  static constexpr CmField<uint8_t, 50, 1, 0, 3> rnr_retry_count{};
  static constexpr CmField<uint8_t, 51, 1, 4, 4> max_cm_retries{};
  static constexpr CmField<bool, 51, 1, 3, 1> srq{};
  static constexpr CmField<uint8_t, 51, 1, 0, 3> extended_transport_type{};
  static constexpr CmField<uint16_t, 52, 2> primary_local_lid{};
  static constexpr CmField<uint16_t, 54, 2> primary_remote_lid{};
  static constexpr CmBytes<56, 16> primary_local_gid{};
  static constexpr CmBytes<72, 16> primary_remote_gid{};
  static constexpr CmField<uint32_t, 88, 4, 12, 20> primary_flow_label{};
  static constexpr CmField<uint8_t, 91, 1, 0, 6> primary_packet_rate{};
  static constexpr CmField<uint8_t, 92, 1> primary_traffic_class{};
  static constexpr CmField<uint8_t, 93, 1> primary_hop_limit{};
  static constexpr CmField<uint8_t, 94, 1, 4, 4> primary_sl{};
  static constexpr CmField<bool, 94, 1, 3, 1> primary_subnet_local{};
  static constexpr CmField<uint8_t, 95, 1, 3, 5> primary_local_ack_timeout{};
  static constexpr CmField<uint16_t, 96, 2> alternate_local_lid{};  // non-zero: an alternate path is given
  static constexpr CmBytes<140, 92> private_data{};
};

// IBTA Table 107.
struct CmMra {
  static constexpr std::size_t kSize = kMadSize;
  static constexpr CmField<uint32_t, 0, 4> local_comm_id{};
  static constexpr CmField<uint32_t, 4, 4> remote_comm_id{};
  static constexpr CmField<uint8_t, 8, 1, 6, 2> message_mraed{};  // 0 REQ, 1 REP, 2 LAP
  static constexpr CmField<uint8_t, 9, 1, 3, 5> service_timeout{};
  static constexpr CmBytes<10, 222> private_data{};
};

// IBTA Table 108.
struct CmRej {
  static constexpr std::size_t kSize = kMadSize;
  static constexpr CmField<uint32_t, 0, 4> local_comm_id{};
  static constexpr CmField<uint32_t, 4, 4> remote_comm_id{};
  static constexpr CmField<uint8_t, 8, 1, 6, 2> message_rejected{};  // 0 REQ, 1 REP, 2 other
  static constexpr CmField<uint8_t, 9, 1, 1, 7> reject_info_length{};
  static constexpr CmField<uint16_t, 10, 2> reason{};
  static constexpr CmBytes<12, 72> additional_reject_info{};
  static constexpr CmBytes<84, 148> private_data{};
};

// IBTA Table 110.
struct CmRep {
  static constexpr std::size_t kSize = kMadSize;
  static constexpr CmField<uint32_t, 0, 4> local_comm_id{};
  static constexpr CmField<uint32_t, 4, 4> remote_comm_id{};
  static constexpr CmField<QKey, 8, 4> local_qkey{};
  static constexpr CmField<Qpn, 12, 3> local_qpn{};
  static constexpr CmField<uint32_t, 16, 3> local_eecn{};
  static constexpr CmField<Psn, 20, 3> starting_psn{};
  static constexpr CmField<uint8_t, 24, 1> responder_resources{};
  static constexpr CmField<uint8_t, 25, 1> initiator_depth{};
  static constexpr CmField<uint8_t, 26, 1, 3, 5> target_ack_delay{};
  static constexpr CmField<uint8_t, 26, 1, 1, 2> failover_accepted{};
  static constexpr CmField<bool, 26, 1, 0, 1> end_to_end_flow_control{};
  static constexpr CmField<uint8_t, 27, 1, 5, 3> rnr_retry_count{};
  static constexpr CmField<bool, 27, 1, 4, 1> srq{};
  static constexpr CmField<uint64_t, 28, 8> local_ca_guid{};
  static constexpr CmBytes<36, 196> private_data{};
};

// IBTA Table 111.
struct CmRtu {
  static constexpr std::size_t kSize = kMadSize;
  static constexpr CmField<uint32_t, 0, 4> local_comm_id{};
  static constexpr CmField<uint32_t, 4, 4> remote_comm_id{};
  static constexpr CmBytes<8, 224> private_data{};
};

// IBTA Table 112.
struct CmDreq {
  static constexpr std::size_t kSize = kMadSize;
  static constexpr CmField<uint32_t, 0, 4> local_comm_id{};
  static constexpr CmField<uint32_t, 4, 4> remote_comm_id{};
  static constexpr CmField<Qpn, 8, 3> remote_qpn{};  // the receiver's QPN: Linux drops a DREQ naming another
  static constexpr CmBytes<12, 220> private_data{};
};

// IBTA Table 113.
struct CmDrep {
  static constexpr std::size_t kSize = kMadSize;
  static constexpr CmField<uint32_t, 0, 4> local_comm_id{};
  static constexpr CmField<uint32_t, 4, 4> remote_comm_id{};
  static constexpr CmBytes<8, 224> private_data{};
};

// ClassPortInfo (IBTA 13.4.8.1), the answer to a Get: only the fields a CM client reads.
struct CmClassPortInfo {
  static constexpr std::size_t kSize = kMadSize;
  static constexpr WireField<uint8_t, kMadHeaderSize + 0, 1> base_version{};
  static constexpr WireField<uint8_t, kMadHeaderSize + 1, 1> class_version{};
  static constexpr WireField<uint16_t, kMadHeaderSize + 2, 2> capability_mask{};
  static constexpr WireField<uint8_t, kMadHeaderSize + 4, 4, 0, 5> response_time_value{};
};

// REJ reasons (IBTA Table 109; Linux `enum ib_cm_rej_reason`).
enum class CmRejectReason : uint16_t {
  kNoQp = 1,
  kNoResources = 3,
  kTimeout = 4,
  kUnsupportedRequest = 5,
  kInvalidCommId = 6,
  kInvalidServiceId = 8,  // no listener: rdma_cm reports ECONNREFUSED
  kInvalidTransportType = 9,
  kStaleConnection = 10,
  kInvalidGid = 12,
  kInvalidMtu = 26,
  kInsufficientResponderResources = 27,
  kConsumerDefined = 28,  // rdma_reject(); the consumer's private data rides along
  kInvalidRnrRetry = 29,
  kDuplicateLocalCommId = 30,
  kInvalidClassVersion = 31,
};

// Which message a REJ or an MRA answers (CmRej::message_rejected, CmMra::message_mraed).
enum class CmMessageAnswered : uint8_t { kReq = 0, kRep = 1, kOther = 2 };

// IBTA's 5-bit time codes: 4.096 us x 2^code, as Linux rounds it (cm_convert_to_ms: 2^(code-8) ms, at least 1).
constexpr uint64_t cm_time_code_to_ms(uint8_t code) noexcept { return uint64_t{1} << (code > 8 ? code - 8 : 0); }

template <class Layout>
using CmView = HeaderView<Layout, const uint8_t>;
template <class Layout>
using CmMutView = HeaderView<Layout, uint8_t>;

// A CM MAD to send (method Send): the common header filled (versions, class, transaction ID, attribute), the
// message itself zero.
inline std::array<uint8_t, kMadSize> cm_send_mad(CmAttribute attribute, uint64_t tid) noexcept {
  std::array<uint8_t, kMadSize> mad{};
  const CmMutView<Mad> h(mad.data());
  h.set(Mad::base_version, kMadBaseVersion);
  h.set(Mad::management_class, kCmManagementClass);
  h.set(Mad::class_version, kCmClassVersion);
  h.set(Mad::method, MadMethod::kSend);
  h.set(Mad::transaction_id, tid);
  h.set(Mad::attribute_id, attribute);
  return mad;
}

}  // namespace uroce::proto
