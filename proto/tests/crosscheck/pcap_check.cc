// uroce_pcap_check: uroce's side of the scapy/tshark cross-check (scapy_crosscheck.py).
//
//   uroce_pcap_check verify IN.pcap
//     One line per frame, INDEX counting from 0:
//       INDEX STATUS OPCODE_NAME WIRE_ICRC COMPUTED_ICRC PAYLOAD_LEN PAD
//     STATUS is "ok" or a parse_error_name(); an ICRC mismatch is "bad_icrc" with both
//     values printed. ICRCs are the uint32 that icrc_load()/icrc_compute() return (the
//     wire bytes read little-endian). Fields a failed parse cannot give are "-".
//   uroce_pcap_check generate OUT.pcap
//     Builds frames for every opcode in kOpcodeTable, over IPv4 and IPv6, with and
//     without a VLAN tag, with the payload sizes each opcode allows, and writes them.
#include <cinttypes>
#include <cstdio>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "proto/opcode.h"
#include "proto/packet_builder.h"
#include "proto/packet_parser.h"
#include "proto/tests/pcap_file.h"

namespace uroce::proto {
namespace {

int verify(const std::string& path) {
  std::string error;
  const auto records = testing::read_pcap(path, &error);
  if (!records) {
    std::fprintf(stderr, "uroce_pcap_check: %s\n", error.c_str());
    return 1;
  }
  for (std::size_t i = 0; i < records->size(); ++i) {
    const std::span<const uint8_t> frame{(*records)[i].data};
    const ParseResult r = parse_packet(frame, {.verify_icrc = false});
    if (!r.ok()) {
      const std::string_view name = r.packet.info ? r.packet.info->name : "-";
      std::printf("%zu %s %.*s - - - -\n", i, parse_error_name(r.error).data(), static_cast<int>(name.size()),
                  name.data());
      continue;
    }
    const ParsedPacket& p = r.packet;
    const uint32_t wire = p.wire_icrc();
    const uint32_t computed = icrc_compute(frame.data() + p.l3_offset, p.icrc_offset - p.l3_offset, p.ip_version);
    const std::string_view status = parse_error_name(wire == computed ? ParseError::kOk : ParseError::kBadIcrc);
    std::printf("%zu %.*s %.*s %08" PRIx32 " %08" PRIx32 " %u %u\n", i, static_cast<int>(status.size()), status.data(),
                static_cast<int>(p.info->name.size()), p.info->name.data(), wire, computed, unsigned{p.payload_length},
                unsigned{p.pad_count});
  }
  return 0;
}

// Payload sizes to build for an opcode (rocev2.md §2.3): FIRST/MIDDLE carry exactly one
// path MTU, LAST 1..PMTU, ONLY 0..PMTU; ATOMIC_WRITE exactly 8; the rest nothing.
std::vector<std::size_t> payload_sizes(const OpcodeInfo& info) {
  if (!info.is(kPayload)) return {0};
  if (info.fixed_payload() >= 0) return {static_cast<std::size_t>(info.fixed_payload())};
  if (info.is(kFirst) || info.is(kMiddle)) return {256, 1024, 4096};
  if (info.is(kLast)) return {1, 2, 3, 4, 255, 1024, 4093, 4096};
  return {0, 1, 3, 5, 1021, 1024, 4096};
}

// ACKNOWLEDGE syndromes: ACK with credits invalid, NAK PSN sequence error, RNR NAK (1.28 ms).
// READ responses and atomic ACKs always carry an ACK syndrome (credit count 0..31).
constexpr uint8_t kAckSyndromes[] = {0x1F, 0x60, 0x2E};
constexpr uint8_t kBecn = 0x40;
constexpr uint16_t kVlanTci = 0x6064;  // PCP 3, VID 100

PacketSpec make_spec(Opcode opcode, IpVersion version, bool vlan, std::size_t n) {
  const OpcodeInfo& info = opcode_info(opcode);
  PacketSpec s;
  s.dst_mac = MacAddr{0x020000000002};
  s.src_mac = MacAddr{0x020000000001};
  if (vlan) s.vlan_tci = kVlanTci;
  if (version == IpVersion::kV4) {
    s.src_gid = gid_from_ipv4(Ipv4Addr{0xC0A80101});
    s.dst_gid = gid_from_ipv4(Ipv4Addr{0xC0A80102});
  } else {
    s.src_gid = {0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x00, 0x00, 0xFF, 0xFE, 0x00, 0x00, 0x01};
    s.dst_gid = {0x20, 0x01, 0x0D, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x24};
    s.flow_label = static_cast<uint32_t>(0x1FACE + n) & 0xFFFFF;
  }
  s.traffic_class = static_cast<uint8_t>(26 << 2 | (n % 4));  // DSCP 26, every ECN codepoint
  s.hop_limit = n % 3 == 0 ? 255 : 64;
  s.ip_id = static_cast<uint16_t>(n);
  s.udp_src_port = static_cast<uint16_t>(0xC000 | ((n * 0x9E5) & 0x3FFF));
  s.opcode = opcode;
  s.mig_req = n % 5 == 0;
  s.dest_qp = Qpn{static_cast<uint32_t>(0x11 + n * 0x10101)};
  s.psn = Psn{static_cast<uint32_t>(0xFFFFF0 + n * 3)};  // wraps past 2^24 along the way
  s.solicited = info.is(kSolicitable) && n % 2 == 0;
  s.ack_req = info.is(kRequest) && (info.is(kLast) || info.is(kOnly)) && n % 3 != 1;
  s.reth = {0x00007F0000001000 + n * 0x1000, RemoteToken{static_cast<uint32_t>(0x1234 + n)},
            static_cast<uint32_t>(info.operation == Operation::kRdmaReadRequest ? 8192 : 4096)};
  s.aeth.syndrome = info.operation == Operation::kAcknowledge ? kAckSyndromes[n % std::size(kAckSyndromes)]
                                                              : static_cast<uint8_t>(n % 32);
  s.aeth.msn = Msn{static_cast<uint32_t>(n)};
  s.atomic_eth = {0x00007F0000002000 + n * 8, RemoteToken{0xABCD}, 0x0102030405060708 + n, 0xFFFFFFFF00000000};
  s.atomic_ack_original = 0x1122334455667788 ^ n;
  s.immediate = static_cast<uint32_t>(0xDEADBEEF + n);
  s.invalidate_rkey = RemoteToken{static_cast<uint32_t>(0x5678 + n)};
  s.deth = {QKey{0x11111111}, Qpn{static_cast<uint32_t>(0x100 + n)}};
  s.feth = {static_cast<uint8_t>(n % 2), static_cast<uint8_t>(1 + n % 2)};
  if (info.transport == Transport::kCnp) {
    // As a ConnectX sends it (rocev2.md §3.4 a): DSCP 48, BECN, PSN 0, no AckReq.
    s.traffic_class = 48 << 2 | 2;
    s.resv8a = kBecn;
    s.psn = Psn{0};
    s.mig_req = false;
  }
  return s;
}

int generate(const std::string& path) {
  std::vector<std::vector<uint8_t>> frames;
  std::vector<uint8_t> payload(kMaxPayload);
  for (std::size_t op = 0; op < kOpcodeTable.size(); ++op) {
    const OpcodeInfo& info = kOpcodeTable[op];
    if (!info.valid()) continue;
    for (const std::size_t size : payload_sizes(info)) {
      for (const IpVersion version : {IpVersion::kV4, IpVersion::kV6}) {
        for (const bool vlan : {false, true}) {
          const std::size_t n = frames.size();
          for (std::size_t i = 0; i < size; ++i) payload[i] = static_cast<uint8_t>(op + n + i * 7);
          PacketSpec spec = make_spec(static_cast<Opcode>(op), version, vlan, n);
          spec.payload = std::span<const uint8_t>{payload}.first(size);
          std::vector<uint8_t> frame(packet_size(spec));
          if (build_packet(spec, frame) != frame.size()) {
            std::fprintf(stderr, "uroce_pcap_check: build_packet failed for %.*s, payload %zu\n",
                         static_cast<int>(info.name.size()), info.name.data(), size);
            return 1;
          }
          frames.push_back(std::move(frame));
        }
      }
    }
  }
  if (!testing::write_pcap(path, frames)) {
    std::fprintf(stderr, "uroce_pcap_check: cannot write %s\n", path.c_str());
    return 1;
  }
  std::printf("%zu frames\n", frames.size());
  return 0;
}

}  // namespace
}  // namespace uroce::proto

int main(int argc, char** argv) {
  const std::string_view command = argc == 3 ? argv[1] : "";
  if (command == "verify") return uroce::proto::verify(argv[2]);
  if (command == "generate") return uroce::proto::generate(argv[2]);
  std::fprintf(stderr, "usage: %s verify IN.pcap | generate OUT.pcap\n", argv[0]);
  return 2;
}
