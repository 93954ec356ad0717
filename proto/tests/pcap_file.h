// A small reader and writer for classic libpcap files (Ethernet link type), enough
// to feed captured frames to tests and to hand frames uroce built to tshark/scapy.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace uroce::proto::testing {

struct PcapRecord {
  uint64_t timestamp_ns = 0;
  uint32_t original_length = 0;  // on the wire; data may be shorter if the capture truncated it
  std::vector<uint8_t> data;
};

// All records of the file, or nullopt (with `error` set) if it is not a readable
// Ethernet pcap.
std::optional<std::vector<PcapRecord>> read_pcap(const std::string& path, std::string* error);

// Writes `frames` as an Ethernet pcap with microsecond timestamps 1 µs apart.
bool write_pcap(const std::string& path, std::span<const std::vector<uint8_t>> frames);

}  // namespace uroce::proto::testing
