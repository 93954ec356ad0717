// libFuzzer target for the packet parser and builder.
//
// The first input byte picks the parse options (so frames without a valid ICRC
// still reach the deep checks); the rest is the frame. Oracles beyond the
// sanitizers: an accepted frame's offsets lie inside it, and rebuilding it from
// its parsed fields gives a frame that parses to the same opcode and payload.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "proto/packet_builder.h"
#include "proto/packet_parser.h"

using namespace uroce::proto;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const ParseOptions options{.verify_icrc = (data[0] & 1) != 0, .verify_ip_checksum = (data[0] & 2) != 0};
  // Copy into an exact-size heap buffer so ASan sees any read past the frame.
  const std::vector<uint8_t> frame(data + 1, data + size);
  const ParseResult r = parse_packet(frame, options);
  if (!r.ok()) return 0;

  const ParsedPacket& p = r.packet;
  if (p.length() > frame.size() || p.payload_offset + p.payload_length + p.pad_count != p.icrc_offset) std::abort();

  const PacketSpec spec = spec_from_packet(p);
  std::vector<uint8_t> rebuilt(packet_size(spec));
  if (build_packet(spec, rebuilt) != rebuilt.size()) std::abort();
  const ParseResult again = parse_packet(rebuilt);
  if (!again.ok() || again.packet.opcode() != p.opcode() || again.packet.payload_length != p.payload_length ||
      std::memcmp(again.packet.payload().data(), p.payload().data(), p.payload_length) != 0)
    std::abort();
  return 0;
}
