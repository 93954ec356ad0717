#include "proto/tests/pcap_file.h"

#include <cstdio>
#include <cstring>
#include <memory>

namespace uroce::proto::testing {

namespace {

constexpr uint32_t kMagicMicros = 0xA1B2C3D4;
constexpr uint32_t kMagicNanos = 0xA1B23C4D;
constexpr uint32_t kLinkTypeEthernet = 1;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

uint32_t swap_if(bool swap, uint32_t v) { return swap ? __builtin_bswap32(v) : v; }

}  // namespace

std::optional<std::vector<PcapRecord>> read_pcap(const std::string& path, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<std::vector<PcapRecord>> {
    if (error) *error = path + ": " + why;
    return std::nullopt;
  };
  File f{std::fopen(path.c_str(), "rb")};
  if (!f) return fail("cannot open");
  uint32_t header[6];
  if (std::fread(header, sizeof header, 1, f.get()) != 1) return fail("shorter than a pcap header");
  bool swap = false;
  bool nanos = false;
  if (header[0] == kMagicMicros || header[0] == kMagicNanos) {
    nanos = header[0] == kMagicNanos;
  } else if (__builtin_bswap32(header[0]) == kMagicMicros || __builtin_bswap32(header[0]) == kMagicNanos) {
    swap = true;
    nanos = __builtin_bswap32(header[0]) == kMagicNanos;
  } else {
    return fail("not a classic pcap file (pcapng is not supported)");
  }
  if ((swap_if(swap, header[5]) & 0xFFFF) != kLinkTypeEthernet) return fail("link type is not Ethernet");
  const uint32_t snaplen = swap_if(swap, header[4]);

  std::vector<PcapRecord> records;
  uint32_t rec[4];
  while (std::fread(rec, sizeof rec, 1, f.get()) == 1) {
    const uint32_t captured = swap_if(swap, rec[2]);
    if (captured > snaplen && captured > 262144) return fail("record longer than the snap length");
    PcapRecord r;
    r.timestamp_ns =
        uint64_t{swap_if(swap, rec[0])} * 1'000'000'000 + uint64_t{swap_if(swap, rec[1])} * (nanos ? 1 : 1000);
    r.original_length = swap_if(swap, rec[3]);
    r.data.resize(captured);
    if (captured && std::fread(r.data.data(), captured, 1, f.get()) != 1) return fail("truncated record");
    records.push_back(std::move(r));
  }
  return records;
}

bool write_pcap(const std::string& path, std::span<const std::vector<uint8_t>> frames) {
  File f{std::fopen(path.c_str(), "wb")};
  if (!f) return false;
  const uint32_t header[6] = {kMagicMicros, 0x00040002, 0, 0, 65535, kLinkTypeEthernet};
  bool ok = std::fwrite(header, sizeof header, 1, f.get()) == 1;
  uint32_t micros = 0;
  for (const auto& frame : frames) {
    const uint32_t rec[4] = {0, micros++, static_cast<uint32_t>(frame.size()), static_cast<uint32_t>(frame.size())};
    ok = ok && std::fwrite(rec, sizeof rec, 1, f.get()) == 1;
    ok = ok && (frame.empty() || std::fwrite(frame.data(), frame.size(), 1, f.get()) == 1);
  }
  return ok && std::fflush(f.get()) == 0;
}

}  // namespace uroce::proto::testing
