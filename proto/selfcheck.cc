// uroce-proto-selfcheck: a quick, dependency-free proof that the protocol layer
// works on this machine. It checks the CRC-32 implementation this CPU selected
// against the portable one, the ICRC of a real ConnectX CNP (rocev2.md §3.4a),
// and a build -> parse -> rebuild round trip of every opcode in the table.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "proto/crc32.h"
#include "proto/packet_builder.h"
#include "proto/packet_parser.h"

namespace uroce::proto {
namespace {

int failures = 0;

void check(bool ok, const char* what) {
  std::printf("  %-58s %s\n", what, ok ? "ok" : "FAILED");
  failures += ok ? 0 : 1;
}

bool crc_matches_portable() {
  std::mt19937 rng(1);
  std::vector<uint8_t> buf(70000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (std::size_t len : {0u, 1u, 15u, 64u, 255u, 1024u, 4096u, 65537u}) {
    for (std::size_t off : {0u, 3u}) {
      if (crc32_ieee(0x1234, buf.data() + off, len) !=
          crc32_ieee_with(Crc32Impl::kPortable, 0x1234, buf.data() + off, len))
        return false;
    }
  }
  return true;
}

bool connectx_cnp_icrc() {
  // A CNP captured from a ConnectX-4 Lx: IPv4, DSCP 48, ECN 10, BECN set.
  static constexpr uint8_t kFrame[] = {
      0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2, 0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32, 0x08, 0x00, 0x45, 0xc2, 0x00, 0x3c, 0x71,
      0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00, 0x11, 0x01, 0x0a, 0x00, 0x12, 0x01, 0x00, 0x00, 0x12, 0xb7,
      0x00, 0x28, 0x00, 0x00, 0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x82, 0xfd, 0x00, 0x2a};
  const ParseResult r = parse_packet(kFrame);
  return r.ok() && r.packet.opcode() == Opcode::kCnp && r.packet.wire_icrc() == 0x2A00FD82;
}

int round_trip_every_opcode() {
  std::vector<uint8_t> payload(4096, 0xA5);
  std::vector<uint8_t> frame(8192), again(8192);
  int n = 0;
  for (const OpcodeInfo& info : kOpcodeTable) {
    if (!info.valid()) continue;
    PacketSpec s;
    s.src_gid = gid_from_ipv4(Ipv4Addr{0xC6120001});  // 198.18.0.1
    s.dst_gid = gid_from_ipv4(Ipv4Addr{0xC6120002});
    s.opcode = static_cast<Opcode>(&info - kOpcodeTable.data());
    const std::size_t len = !info.is(kPayload)                    ? 0
                            : info.fixed_payload() >= 0           ? static_cast<std::size_t>(info.fixed_payload())
                            : info.is(kFirst) || info.is(kMiddle) ? 1024
                                                                  : 1021;
    s.payload = std::span<const uint8_t>(payload).first(len);
    const std::size_t size = build_packet(s, frame);
    const ParseResult r = parse_packet(std::span<const uint8_t>(frame).first(size));
    if (size == 0 || !r.ok() || build_packet(spec_from_packet(r.packet), again) != size ||
        !std::equal(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(size), again.begin())) {
      std::printf("    %s: %s\n", info.name.data(), r.ok() ? "rebuild differs" : parse_error_name(r.error).data());
      return -1;
    }
    ++n;
  }
  return n;
}

}  // namespace
}  // namespace uroce::proto

int main() {
  using namespace uroce::proto;
  std::printf("uroce proto self-check\n");
  std::printf("  CRC-32 implementation selected for this CPU: %s (%s below %zu bytes)\n",
              crc32_impl_name(crc32_active_impl()).data(), crc32_impl_name(crc32_short_impl()).data(),
              kCrc32WideMinBytes);
  check(crc32_ieee(0, "123456789", 9) == 0xCBF43926, "CRC-32 check value of \"123456789\" is 0xcbf43926");
  check(crc_matches_portable(), "selected CRC-32 equals the portable table version");
  check(connectx_cnp_icrc(), "ICRC of a ConnectX-4 Lx CNP matches the wire (82 fd 00 2a)");
  const int opcodes = round_trip_every_opcode();
  check(opcodes == 40, "build -> parse -> rebuild is byte-exact for all 40 opcodes");
  std::printf("%s\n", failures == 0 ? "self-check passed" : "self-check FAILED");
  return failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
