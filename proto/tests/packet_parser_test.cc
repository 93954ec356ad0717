#include "proto/packet_parser.h"

#include <gtest/gtest.h>

#include <random>

#include "proto/aeth.h"
#include "proto/tests/test_vectors.h"

namespace uroce::proto {
namespace {

using testing::from_hex;
using testing::kReferenceFrames;

std::vector<uint8_t> reference(std::string_view name) {
  for (const auto& r : kReferenceFrames)
    if (r.name == name) return from_hex(r.hex);
  ADD_FAILURE() << name;
  return {};
}

// Re-seals an IPv4 frame (no VLAN) after a test edits it: IP checksum and ICRC
// become correct again, so the parser reaches the rule under test.
void reseal(std::vector<uint8_t>& f) {
  MutView<Ipv4>{f.data() + 14}.set(Ipv4::checksum, ipv4_header_checksum(f.data() + 14));
  if (f.size() >= 14 + 20 + 8 + 12 + 4)
    icrc_store(f.data() + f.size() - 4, icrc_compute(f.data() + 14, f.size() - 18, IpVersion::kV4));
}

// Sets IP total length and UDP length for a frame whose bytes after Ethernet are all IP.
void set_lengths(std::vector<uint8_t>& f) {
  MutView<Ipv4>{f.data() + 14}.set(Ipv4::total_length, static_cast<uint16_t>(f.size() - 14));
  MutView<Udp>{f.data() + 34}.set(Udp::length, static_cast<uint16_t>(f.size() - 34));
  reseal(f);
}

ParseError error_of(const std::vector<uint8_t>& f) { return parse_packet(f).error; }

TEST(PacketParser, ReferenceFramesParseWithTheirFields) {
  for (const auto& r : kReferenceFrames) {
    const auto f = from_hex(r.hex);
    EXPECT_TRUE(parse_packet(f).ok()) << r.name;
  }

  const auto w = reference("rc_write_only");
  const ParsedPacket p = parse_packet(w).packet;
  EXPECT_EQ(p.opcode(), Opcode::kRcRdmaWriteOnly);
  EXPECT_EQ(p.bth().get(Bth::dest_qp), Qpn{0x12});
  EXPECT_EQ(p.bth().get(Bth::psn), Psn{0x100});
  EXPECT_TRUE(p.bth().get(Bth::ack_req));
  const auto reth = p.ext<Reth>(ExtHeader::kReth);
  EXPECT_EQ(reth.get(Reth::va), 0x00007f0000001000u);
  EXPECT_EQ(reth.get(Reth::rkey), RemoteToken{0x1234});
  EXPECT_EQ(reth.get(Reth::dma_length), 16u);
  ASSERT_EQ(p.payload().size(), 16u);
  EXPECT_EQ(p.payload()[15], 0x0f);

  const auto s = reference("rc_send_only_padded");
  const ParsedPacket sp = parse_packet(s).packet;
  EXPECT_EQ(sp.pad_count, 3);
  EXPECT_EQ(std::string(sp.payload().begin(), sp.payload().end()), "hello");

  const auto rnr_frame = reference("rc_rnr_nak");
  const ParsedPacket rnr = parse_packet(rnr_frame).packet;
  const AethSyndrome syn(rnr.ext<Aeth>(ExtHeader::kAeth).get(Aeth::syndrome));
  EXPECT_EQ(syn.kind(), AethKind::kRnrNak);
  EXPECT_EQ(rnr.ext<Aeth>(ExtHeader::kAeth).get(Aeth::msn), Msn{3});

  const auto ud_frame = reference("ud_send_only_qp1");
  const ParsedPacket ud = parse_packet(ud_frame).packet;
  EXPECT_EQ(ud.ext<Deth>(ExtHeader::kDeth).get(Deth::qkey), kGsiQKey);
  EXPECT_EQ(ud.ext<Deth>(ExtHeader::kDeth).get(Deth::src_qp), kGsiQpn);

  const auto v6_frame = reference("uc_send_only_ipv6");
  const ParsedPacket v6 = parse_packet(v6_frame).packet;
  EXPECT_EQ(v6.ip_version, IpVersion::kV6);
  EXPECT_EQ(v6.payload_length, 18);
  const auto cnp_frame = reference("connectx_cnp");
  const ParsedPacket cnp = parse_packet(cnp_frame).packet;
  EXPECT_EQ(cnp.opcode(), Opcode::kCnp);
  EXPECT_TRUE(cnp.bth().get(Bth::becn));
}

TEST(PacketParser, LengthsComeFromIpNotFromTheFrame) {
  auto ack = reference("rc_ack");  // 62 bytes; add Ethernet padding as a NIC would
  ack.resize(80, 0);
  const ParseResult r = parse_packet(ack);
  ASSERT_TRUE(r.ok()) << parse_error_name(r.error);
  EXPECT_EQ(r.packet.length(), 62u);
}

TEST(PacketParser, RejectsEachMalformationWithItsReason) {
  const auto good = reference("rc_write_only");
  auto f = good;

  EXPECT_EQ(error_of({good.begin(), good.begin() + 10}), ParseError::kTruncatedEthernet);
  f = good;
  f[12] = 0x08, f[13] = 0x06;
  EXPECT_EQ(error_of(f), ParseError::kNotIp);
  EXPECT_EQ(error_of({good.begin(), good.begin() + 30}), ParseError::kTruncatedIp);
  f = good;
  f[14] = 0x65;
  EXPECT_EQ(error_of(f), ParseError::kBadIpVersion);
  f = good;
  f[14] = 0x46;
  reseal(f);
  EXPECT_EQ(error_of(f), ParseError::kIpOptions);
  f = good;
  f[24] ^= 1;
  EXPECT_EQ(error_of(f), ParseError::kBadIpChecksum);
  EXPECT_TRUE(parse_packet(f, {.verify_icrc = true, .verify_ip_checksum = false}).ok());
  f = good;
  MutView<Ipv4>{f.data() + 14}.set(Ipv4::total_length, static_cast<uint16_t>(good.size()));  // 14 too long
  reseal(f);
  EXPECT_EQ(error_of(f), ParseError::kBadIpLength);
  f = good;
  MutView<Ipv4>{f.data() + 14}.set(Ipv4::total_length, 27);
  reseal(f);
  EXPECT_EQ(error_of(f), ParseError::kBadIpLength);
  f = good;
  MutView<Ipv4>{f.data() + 14}.set(Ipv4::more_fragments, true);
  reseal(f);
  EXPECT_EQ(error_of(f), ParseError::kIpFragment);
  f = good;
  MutView<Ipv4>{f.data() + 14}.set(Ipv4::fragment_offset, 8);
  reseal(f);
  EXPECT_EQ(error_of(f), ParseError::kIpFragment);
  f = good;
  MutView<Ipv4>{f.data() + 14}.set(Ipv4::protocol, 6);
  reseal(f);
  EXPECT_EQ(error_of(f), ParseError::kNotUdp);
  f = good;
  MutView<Udp>{f.data() + 34}.set(Udp::dst_port, 4790);
  EXPECT_EQ(error_of(f), ParseError::kNotRoceV2);
  f = good;
  MutView<Udp>{f.data() + 34}.set(Udp::length, 20);
  EXPECT_EQ(error_of(f), ParseError::kBadUdpLength);
  f.assign(good.begin(), good.begin() + 14 + 20 + 8 + 12 + 3);  // BTH but no room for an ICRC
  set_lengths(f);
  EXPECT_EQ(error_of(f), ParseError::kTruncatedBth);
  f = good;
  f[43] |= 0x01;  // TVer
  reseal(f);
  EXPECT_EQ(error_of(f), ParseError::kBadTransportVersion);
  f = good;
  f[42] = 0x15;  // reserved opcode
  reseal(f);
  EXPECT_EQ(error_of(f), ParseError::kUnknownOpcode);
  f.assign(good.begin(), good.begin() + 14 + 20 + 8 + 12 + 8);  // WRITE_ONLY with half a RETH
  f.resize(f.size() + 4);
  set_lengths(f);
  EXPECT_EQ(error_of(f), ParseError::kTruncatedHeaders);
  f = good;
  f.erase(f.end() - 5);  // 15 payload bytes and PadCnt 0: not padded to a 4-byte multiple
  set_lengths(f);
  EXPECT_EQ(error_of(f), ParseError::kBadPad);
  f = good;
  f[42] = static_cast<uint8_t>(Opcode::kRcRdmaWriteFirst);  // 16-byte FIRST is no path MTU
  reseal(f);
  EXPECT_EQ(error_of(f), ParseError::kBadPayloadLength);
  f = reference("rc_ack");
  f.insert(f.end() - 4, {1, 2, 3, 4});  // an ACK with a payload
  set_lengths(f);
  EXPECT_EQ(error_of(f), ParseError::kBadPayloadLength);
  f = good;
  f[f.size() - 1] ^= 0x80;
  EXPECT_EQ(error_of(f), ParseError::kBadIcrc);
  EXPECT_TRUE(parse_packet(f, {.verify_icrc = false}).ok());
}

TEST(PacketParser, PadLargerThanThePayloadIsRejected) {
  auto f = reference("rc_ack");
  f[42] = static_cast<uint8_t>(Opcode::kRcSendOnly);
  f.erase(f.end() - 8, f.end() - 4);  // drop the AETH: a zero-length SEND_ONLY
  f[43] = 0x30;                       // with PadCnt 3
  set_lengths(f);
  EXPECT_EQ(error_of(f), ParseError::kBadPad);
  f[43] = 0;
  reseal(f);
  EXPECT_TRUE(parse_packet(f).ok()) << "a zero-length SEND_ONLY is legal";
}

TEST(PacketParser, EveryPrefixOfEveryReferenceFrameIsRejected) {
  for (const auto& r : kReferenceFrames) {
    const auto f = from_hex(r.hex);
    for (std::size_t n = 0; n < f.size(); ++n) {
      const std::vector<uint8_t> prefix(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n));
      EXPECT_FALSE(parse_packet(prefix).ok()) << r.name << " prefix " << n;
    }
  }
}

// Random corruption must never read out of bounds (ASan/UBSan builds check that)
// and, when a frame is still accepted, everything it points at lies inside it.
TEST(PacketParser, RandomCorruptionIsRejectedOrStaysInBounds) {
  std::mt19937_64 rng(20261121);
  for (const auto& r : kReferenceFrames) {
    const auto good = from_hex(r.hex);
    for (int round = 0; round < 3000; ++round) {
      auto f = good;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) f[rng() % f.size()] = static_cast<uint8_t>(rng());
      if (rng() % 4 == 0) f.resize(rng() % (f.size() + 1));
      const ParseResult res = parse_packet(f, {.verify_icrc = rng() % 2 == 0, .verify_ip_checksum = false});
      if (!res.ok()) continue;
      const ParsedPacket& p = res.packet;
      EXPECT_LE(p.length(), f.size());
      EXPECT_LE(std::size_t{p.payload_offset} + p.payload_length + p.pad_count, p.icrc_offset);
    }
  }
}

TEST(PacketParser, EveryErrorHasAName) {
  for (int e = 0; e < static_cast<int>(ParseError::kCount); ++e)
    EXPECT_NE(parse_error_name(static_cast<ParseError>(e)), "invalid") << e;
}

}  // namespace
}  // namespace uroce::proto
