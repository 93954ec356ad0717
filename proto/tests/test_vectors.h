// Reference frames from shared/ref/rocev2.md §3.4, each checked there by two
// independent ICRC implementations. Complete Ethernet frames without FCS; the
// last four bytes are the ICRC.
#pragma once

#include <cctype>
#include <cstdint>
#include <string_view>
#include <vector>

namespace uroce::proto::testing {

inline std::vector<uint8_t> from_hex(std::string_view hex) {
  std::vector<uint8_t> out;
  int high = -1;
  for (char c : hex) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) continue;
    const int v = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10;
    if (high < 0) {
      high = v;
    } else {
      out.push_back(static_cast<uint8_t>(high << 4 | v));
      high = -1;
    }
  }
  return out;
}

struct ReferenceFrame {
  std::string_view name;
  std::string_view hex;
};

inline constexpr ReferenceFrame kReferenceFrames[] = {
    {"connectx_cnp",
     "e41d2dab2bc27cfe90643b320800 45c2003c718c400040119161 0a0011010a001201"
     "000012b700280000 8100ffff40000118 00000000 00000000000000000000000000000000 82fd002a"},
    {"uc_send_only_ipv4",
     "248a07a8fa22248a07a8fa220800 450100400478400040 11b4d5c0a80007c0a80007"
     "c00012b7002caca2 2460ffff000000d300cf1710 4630818be28935d90e9a95505401be885e500000 78f353f3"},
    {"uc_send_only_ipv6",
     "248a07a8fa22248a07a8fa2286dd 6e21face002c11ff"
     "20220000000000000000000000001023 20230000000000000000000000001024"
     "c00012b7002ce7c5 2460ffff000000d300cf1710 4630818be28935d90e9a95505401be885e500000 3e5b743b"},
    {"rc_write_only",
     "0200000000020200000000010800 456a004c000140004011b6e2c0a80101c0a80102"
     "c13212b700380000 0a00ffff0000001280000100 00007f0000001000 00001234 00000010"
     "000102030405060708090a0b0c0d0e0f 96849a87"},
    {"rc_send_only_padded",
     "0200000000020200000000010800 450200340002400040 11b761c0a80101c0a80102"
     "c13212b700200000 0430ffff0000001280000101 68656c6c6f000000 86708423"},
    {"rc_ack",
     "0200000000010200000000020800 450200300010400040 11b757c0a80102c0a80101"
     "c13212b7001c0000 1100ffff0000001100000101 1f000002 0d79853b"},
    {"rc_read_request",
     "0200000000020200000000010800 4502003c000340004011b758c0a80101c0a80102"
     "c13212b700280000 0c00ffff0000001280000102 00007f0000002000 00001234 00002000 680f0171"},
    {"rc_nak_psn_sequence",
     "0200000000010200000000020800 450200300011400040 11b756c0a80102c0a80101"
     "c13212b7001c0000 1100ffff0000001100000105 60000003 3854d7c4"},
    {"rc_rnr_nak",
     "0200000000010200000000020800 450200300012400040 11b755c0a80102c0a80101"
     "c13212b7001c0000 1100ffff0000001100000106 2e000003 1d1d272b"},
    {"ud_send_only_qp1",
     "0200000000020200000000010800 4500003c000440004011b759c0a80101c0a80102"
     "c00012b700280000 6400ffff0000000100000000 8001000000000001 0107020300000000 454e96d0"},
};

}  // namespace uroce::proto::testing
