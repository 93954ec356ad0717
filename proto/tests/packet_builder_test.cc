#include "proto/packet_builder.h"

#include <gtest/gtest.h>

#include <numeric>

#include "proto/packet_template.h"
#include "proto/tests/test_vectors.h"

namespace uroce::proto {
namespace {

PacketSpec base_spec(Opcode op) {
  PacketSpec s;
  s.dst_mac = MacAddr{0x020000000002};
  s.src_mac = MacAddr{0x020000000001};
  s.src_gid = gid_from_ipv4(Ipv4Addr{0xC0A80101});
  s.dst_gid = gid_from_ipv4(Ipv4Addr{0xC0A80102});
  s.udp_src_port = 0xC132;
  s.opcode = op;
  s.dest_qp = Qpn{0x12};
  s.psn = Psn{0xFFFFFE};
  s.reth = {0x7f0000001000, RemoteToken{0x1234}, 1 << 20};
  s.aeth = {0x1F, Msn{7}};
  s.atomic_eth = {0x7f0000003000, RemoteToken{0x99}, 5, 6};
  s.atomic_ack_original = 0x1122334455667788;
  s.immediate = 0xCAFEBABE;
  s.invalidate_rkey = RemoteToken{0xABCD};
  s.deth = {kGsiQKey, Qpn{1}};
  return s;
}

std::vector<std::size_t> legal_payloads(const OpcodeInfo& info) {
  if (!info.is(kPayload)) return {0};
  if (info.fixed_payload() >= 0) return {static_cast<std::size_t>(info.fixed_payload())};
  if (info.is(kFirst) || info.is(kMiddle)) return {256, 1024, 4096};
  // Both sides of kSealWhileCopyingMinPayload (512), where copy_and_seal() starts copying while it CRCs.
  if (info.is(kLast)) return {1, 2, 3, 4, 511, 513, 1023, 4096};
  return {0, 1, 5, 511, 512, 1024, 4095, 4096};
}

TEST(PacketBuilder, EveryOpcodeRoundTripsThroughTheParser) {
  std::vector<uint8_t> payload(4096);
  std::iota(payload.begin(), payload.end(), uint8_t{0});
  int built = 0;
  for (int op = 0; op < 256; ++op) {
    const OpcodeInfo& info = kOpcodeTable[op];
    if (!info.valid()) continue;
    for (std::size_t len : legal_payloads(info)) {
      for (bool v6 : {false, true}) {
        for (bool vlan : {false, true}) {
          SCOPED_TRACE(std::string(info.name) + " len " + std::to_string(len) + (v6 ? " v6" : " v4") +
                       (vlan ? " vlan" : ""));
          PacketSpec s = base_spec(Opcode{static_cast<uint8_t>(op)});
          s.payload = std::span<const uint8_t>(payload).first(len);
          if (v6) {
            s.dst_gid = Gid{0x20, 0x23, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x24};
            s.flow_label = 0x1FACE;
          }
          if (vlan) s.vlan_tci = 0x6064;
          std::vector<uint8_t> frame(packet_size(s));
          ASSERT_EQ(build_packet(s, frame), frame.size());
          const ParseResult r = parse_packet(frame);
          ASSERT_TRUE(r.ok()) << parse_error_name(r.error);
          const ParsedPacket& p = r.packet;
          EXPECT_EQ(p.opcode(), s.opcode);
          EXPECT_EQ(p.ip_version, v6 ? IpVersion::kV6 : IpVersion::kV4);
          EXPECT_EQ(p.has_vlan, vlan);
          EXPECT_EQ(p.payload_length, len);
          EXPECT_EQ(p.pad_count, (4 - len % 4) % 4);
          EXPECT_EQ(p.bth().get(Bth::psn), Psn{0xFFFFFE});
          EXPECT_TRUE(std::equal(p.payload().begin(), p.payload().end(), payload.begin()));
          if (info.carries(ExtHeader::kImmDt)) {
            EXPECT_EQ(p.ext<ImmDt>(ExtHeader::kImmDt).get(ImmDt::immediate), 0xCAFEBABE);
          }
          if (info.carries(ExtHeader::kAtomicEth)) {
            EXPECT_EQ(p.ext<AtomicEth>(ExtHeader::kAtomicEth).get(AtomicEth::compare), 6u);
          }
          // And the parsed fields rebuild the same bytes.
          std::vector<uint8_t> again(frame.size());
          ASSERT_EQ(build_packet(spec_from_packet(p), again), frame.size());
          EXPECT_EQ(again, frame);
          ++built;
        }
      }
    }
  }
  EXPECT_GT(built, 400);
}

// A QP's template, stamped and sealed with the extension headers and payload filled in between,
// gives the very bytes build_packet() writes from the whole spec: IPv4 (stamped in registers)
// and IPv6, with and without VLAN, every RC opcode, flag and pad combination, and PSNs that
// exercise all three PSN bytes. copy_and_seal() (the payload copied in while its CRC is taken, from
// kSealWhileCopyingMinPayload bytes) gives them too.
TEST(PacketTemplate, StampAndSealEqualTheBuilder) {
  std::vector<uint8_t> payload(4096);
  std::iota(payload.begin(), payload.end(), uint8_t{3});
  int compared = 0;
  for (int op = 0; op < 256; ++op) {
    const OpcodeInfo& info = kOpcodeTable[op];
    if (!info.valid() || info.transport != Transport::kRc) continue;
    for (std::size_t len : legal_payloads(info)) {
      for (bool v6 : {false, true}) {
        for (bool vlan : {false, true}) {
          for (uint8_t flags : {0, 1, 2, 3}) {
            for (Psn psn : {Psn{0}, Psn{0x0102A3}, Psn{0xFFFFFE}}) {
              SCOPED_TRACE(std::string(info.name) + " len " + std::to_string(len) + (v6 ? " v6" : " v4") +
                           (vlan ? " vlan" : "") + " flags " + std::to_string(flags) + " psn " +
                           std::to_string(psn.value()));
              PacketSpec s = base_spec(Opcode{static_cast<uint8_t>(op)});
              s.payload = std::span<const uint8_t>(payload).first(len);
              s.psn = psn;
              s.ack_req = flags & kBthAckReq;
              s.solicited = flags & kBthSolicited;
              s.traffic_class = 0x68;
              s.ip_id = 0x4321;
              if (v6) s.dst_gid = Gid{0x20, 0x23, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x24};
              if (vlan) s.vlan_tci = 0x6064;
              std::vector<uint8_t> want(packet_size(s));
              ASSERT_EQ(build_packet(s, want), want.size());

              PacketTemplate t;
              t.init(s);
              const Opcode opcode{static_cast<uint8_t>(op)};
              ASSERT_EQ(t.frame_length(opcode, len), want.size());
              std::vector<uint8_t> got(want.size(), 0xEE);
              const PacketTemplate::Stamped st = t.stamp(got.data(), opcode, len, psn, flags);
              // The extension headers and payload as the builder laid them out.
              const std::size_t ext_at = static_cast<std::size_t>(st.ext - got.data());
              std::memcpy(st.ext, want.data() + ext_at, info.ext_length + len);
              t.seal(got.data(), st, len);
              ASSERT_EQ(got, want);

              std::vector<uint8_t> copied(want.size(), 0xEE);
              const PacketTemplate::Stamped st2 = t.stamp(copied.data(), opcode, len, psn, flags);
              std::memcpy(st2.ext, want.data() + ext_at, info.ext_length);
              t.copy_and_seal(copied.data(), st2, payload.data(), len);
              ASSERT_EQ(copied, want);
              ++compared;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 1000);
}

TEST(PacketBuilder, ReproducesTheReferenceWriteFromAHandWrittenSpec) {
  PacketSpec s = base_spec(Opcode::kRcRdmaWriteOnly);
  s.traffic_class = 0x6A;
  s.ip_id = 1;
  s.ack_req = true;
  s.psn = Psn{0x100};
  s.reth = {0x00007f0000001000, RemoteToken{0x1234}, 16};
  std::vector<uint8_t> payload(16);
  std::iota(payload.begin(), payload.end(), uint8_t{0});
  s.payload = payload;
  std::vector<uint8_t> frame(packet_size(s));
  ASSERT_EQ(build_packet(s, frame), frame.size());
  EXPECT_EQ(frame, testing::from_hex(testing::kReferenceFrames[3].hex));
  EXPECT_EQ(testing::kReferenceFrames[3].name, "rc_write_only");
}

TEST(PacketBuilder, RefusesWithoutWritingWhenItCannot) {
  PacketSpec s = base_spec(Opcode::kRcSendOnly);
  std::vector<uint8_t> big(5000);
  s.payload = big;
  std::vector<uint8_t> out(8000, 0xEE);
  EXPECT_EQ(build_packet(s, out), 0u) << "payload beyond the largest PMTU";
  s.payload = std::span<const uint8_t>(big).first(100);
  EXPECT_EQ(build_packet(s, std::span<uint8_t>(out).first(packet_size(s) - 1)), 0u) << "buffer too small";
  s.opcode = Opcode{0x15};
  EXPECT_EQ(build_packet(s, out), 0u) << "reserved opcode";
  for (uint8_t b : out) ASSERT_EQ(b, 0xEE);
}

TEST(Gid, Ipv4MappedForm) {
  const Gid g = gid_from_ipv4(Ipv4Addr{0xC0A80101});
  EXPECT_EQ(std::vector<uint8_t>(g.begin(), g.end()), testing::from_hex("00000000000000000000ffffc0a80101"));
  EXPECT_TRUE(gid_is_ipv4_mapped(g));
  EXPECT_EQ(gid_to_ipv4(g), Ipv4Addr{0xC0A80101});
}

}  // namespace
}  // namespace uroce::proto
