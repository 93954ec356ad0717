#include "apps/perf/perftest_exchange.h"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <endian.h>

namespace uroce::apps::perf {

KeyMessage format_key_message(const PerftestDest& d) {
  KeyMessage m{};
  int n = std::snprintf(m.data(), m.size(), "%04x:%04x:%06x:%06x:%08x:%016" PRIx64 ":", d.lid, d.out_reads,
                        d.qpn & 0xFFFFFF, d.psn & 0xFFFFFF, d.rkey, d.vaddr);
  for (uint8_t b : d.gid) n += std::snprintf(m.data() + n, m.size() - n, "%02x:", b);
  std::snprintf(m.data() + n, m.size() - n, "%08x:", d.srqn);
  return m;
}

std::optional<PerftestDest> parse_key_message(const KeyMessage& message) {
  const auto nul = std::find(message.begin(), message.end(), '\0');
  if (nul == message.end()) return std::nullopt;  // perftest always terminates it
  const std::string_view text(message.data(), static_cast<std::size_t>(nul - message.begin()));
  // Fields: LID, OUT, QPN, PSN, RKEY, VADDR, 16 GID bytes, SRQN, each followed by ':'.
  constexpr std::size_t kWidths[] = {4, 4, 6, 6, 8, 16};
  std::vector<uint64_t> fields;
  std::size_t pos = 0, index = 0;
  while (pos < text.size()) {
    const std::size_t colon = text.find(':', pos);
    if (colon == std::string_view::npos) return std::nullopt;
    const std::string_view field = text.substr(pos, colon - pos);
    const std::size_t width = index < std::size(kWidths) ? kWidths[index] : index < 22 ? 2 : 8;
    if (field.empty() || field.size() > width) return std::nullopt;
    uint64_t v = 0;
    for (char c : field) {
      const int digit = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
      if (digit < 0) return std::nullopt;
      v = v << 4 | static_cast<uint64_t>(digit);
    }
    fields.push_back(v);
    pos = colon + 1;
    ++index;
  }
  if (fields.size() != 23) return std::nullopt;
  PerftestDest d;
  d.lid = static_cast<uint16_t>(fields[0]);
  d.out_reads = static_cast<uint16_t>(fields[1]);
  d.qpn = static_cast<uint32_t>(fields[2]);
  d.psn = static_cast<uint32_t>(fields[3]);
  d.rkey = static_cast<uint32_t>(fields[4]);
  d.vaddr = fields[5];
  for (std::size_t i = 0; i < 16; ++i) d.gid[i] = static_cast<uint8_t>(fields[6 + i]);
  d.srqn = static_cast<uint32_t>(fields[22]);
  return d;
}

uint32_t mtu_enum_of_bytes(uint32_t bytes) {
  switch (bytes) {
    case 256:
      return 1;
    case 512:
      return 2;
    case 1024:
      return 3;
    case 2048:
      return 4;
    case 4096:
      return 5;
    default:
      return 0;
  }
}

uint32_t mtu_bytes_of_enum(uint32_t value) { return value >= 1 && value <= 5 ? 128u << value : 0; }

namespace {
void put_be32(uint8_t* at, uint32_t v) {
  v = htobe32(v);
  std::memcpy(at, &v, 4);
}
uint32_t get_be32(const uint8_t* at) {
  uint32_t v;
  std::memcpy(&v, at, 4);
  return be32toh(v);
}
// Where struct pingpong_dest's fields sit (x86-64 and every LP64 ABI: vaddr aligned to 8).
enum BinaryKeyOffset : std::size_t {
  kLid = 0,
  kOutReads = 4,
  kQpn = 8,
  kPsn = 12,
  kRkey = 16,
  kVaddr = 24,
  kGid = 32,
  kSrqn = 48,
  kGidIndex = 52
};
}  // namespace

BinaryKey format_binary_key(const PerftestDest& d) {
  BinaryKey k{};
  put_be32(&k[kLid], d.lid);
  put_be32(&k[kOutReads], d.out_reads);
  put_be32(&k[kQpn], d.qpn & 0xFFFFFF);
  put_be32(&k[kPsn], d.psn & 0xFFFFFF);
  put_be32(&k[kRkey], d.rkey);
  const uint64_t vaddr = htobe64(d.vaddr);
  std::memcpy(&k[kVaddr], &vaddr, 8);
  std::memcpy(&k[kGid], d.gid.data(), 16);
  put_be32(&k[kSrqn], d.srqn);
  put_be32(&k[kGidIndex], 0);  // perftest's reader ignores it (it keeps its own)
  return k;
}

PerftestDest parse_binary_key(const BinaryKey& k) {
  PerftestDest d;
  d.lid = static_cast<uint16_t>(get_be32(&k[kLid]));
  d.out_reads = static_cast<uint16_t>(get_be32(&k[kOutReads]));
  d.qpn = get_be32(&k[kQpn]) & 0xFFFFFF;
  d.psn = get_be32(&k[kPsn]) & 0xFFFFFF;
  d.rkey = get_be32(&k[kRkey]);
  uint64_t vaddr;
  std::memcpy(&vaddr, &k[kVaddr], 8);
  d.vaddr = be64toh(vaddr);
  std::memcpy(d.gid.data(), &k[kGid], 16);
  d.srqn = get_be32(&k[kSrqn]);
  return d;
}

bool PerftestSession::exchange(const void* mine, void* theirs, std::size_t n) {
  const Clock::time_point deadline =
      timeout_ == Clock::duration::zero() ? Clock::time_point::max() : Clock::now() + timeout_;
  const bool ok = client_ ? transport_->send(mine, n) && transport_->receive(theirs, n, deadline)
                          : transport_->receive(theirs, n, deadline) && transport_->send(mine, n);
  if (!ok) {
    error_ = transport_->failure().empty()
                 ? "the out-of-band exchange with the peer failed (it closed, or did not answer in time)"
                 : "the out-of-band exchange with the peer failed: " + transport_->failure();
  }
  return ok;
}

bool PerftestSession::exchange_versions(std::string& peer_version) {
  char mine[16] = {}, theirs[16] = {};
  std::strncpy(mine, kPerftestVersion, sizeof mine - 1);
  if (!exchange(mine, theirs, sizeof mine)) return false;
  peer_version.assign(theirs, strnlen(theirs, sizeof theirs));
  // perftest refuses peers before 5.70; the report, sys-data and MTU formats below are those of 5.70 and later.
  if (std::strtod(peer_version.c_str(), nullptr) < 5.70) {
    error_ = "the peer speaks perftest version '" + peer_version + "'; 5.70 or later is needed";
    return false;
  }
  return true;
}

bool PerftestSession::exchange_sys_data(uint32_t& cycle_buffer, uint32_t& cache_line) {
  uint32_t mine = htobe32(cycle_buffer), theirs = 0;
  if (!exchange(&mine, &theirs, sizeof mine)) return false;
  cycle_buffer = std::max(cycle_buffer, be32toh(theirs));
  mine = htobe32(cache_line);
  if (!exchange(&mine, &theirs, sizeof mine)) return false;
  cache_line = std::max(cache_line, be32toh(theirs));
  return true;
}

bool PerftestSession::exchange_mtu(uint32_t& mtu_bytes) {
  char mine[2] = {static_cast<char>('0' + mtu_enum_of_bytes(mtu_bytes)), '\0'}, theirs[2] = {};
  if (!exchange(mine, theirs, sizeof mine)) return false;
  // As perftest: the peer's value counts only if it is a valid MTU enum and smaller than ours.
  const uint32_t peer =
      theirs[1] == '\0' && theirs[0] >= '1' && theirs[0] <= '5' ? mtu_bytes_of_enum(theirs[0] - '0') : 0;
  if (peer != 0 && peer < mtu_bytes) mtu_bytes = peer;
  return true;
}

bool PerftestSession::hand_shake(const PerftestDest& mine, PerftestDest& theirs) {
  if (transport_->binary_keys()) {
    const BinaryKey out = format_binary_key(mine);
    BinaryKey in{};
    if (!exchange(out.data(), in.data(), in.size())) return false;
    theirs = parse_binary_key(in);  // every bit pattern is a value: nothing to reject
    return true;
  }
  const KeyMessage out = format_key_message(mine);
  KeyMessage in{};
  if (!exchange(out.data(), in.data(), in.size())) return false;
  const std::optional<PerftestDest> parsed = parse_key_message(in);
  if (!parsed) {
    error_ = "the peer's key message is malformed: '" + std::string(in.data(), strnlen(in.data(), in.size())) + "'";
    return false;
  }
  theirs = *parsed;
  return true;
}

bool PerftestSession::exchange_bw_reports(const BwReport& mine, BwReport& theirs) {
  // Each field is its own step, 8 bytes in network order (doubles as their IEEE bits).
  const uint64_t out[5] = {htobe64(mine.size), htobe64(mine.iters), htobe64(std::bit_cast<uint64_t>(mine.bw_peak)),
                           htobe64(std::bit_cast<uint64_t>(mine.bw_avg)),
                           htobe64(std::bit_cast<uint64_t>(mine.msg_rate))};
  uint64_t in[5] = {};
  for (int i = 0; i < 5; ++i) {
    if (!exchange(&out[i], &in[i], sizeof out[i])) return false;
  }
  theirs.size = be64toh(in[0]);
  theirs.iters = be64toh(in[1]);
  theirs.bw_peak = std::bit_cast<double>(be64toh(in[2]));
  theirs.bw_avg = std::bit_cast<double>(be64toh(in[3]));
  theirs.msg_rate = std::bit_cast<double>(be64toh(in[4]));
  return true;
}

bool PerftestSession::close_connection(const PerftestDest& mine) {
  PerftestDest theirs;
  if (!hand_shake(mine, theirs)) return false;
  // Nobody reads "done", and the peer may already have closed: its fate does not matter. The stream stays open
  // for the end of two uroce processes (apps/common/peer_shutdown.h); perftest has closed its end by then.
  // perftest sends it over TCP only.
  static constexpr char kDone[] = "done";
  if (!transport_->binary_keys()) (void)transport_->send(kDone, sizeof kDone);
  return true;
}

}  // namespace uroce::apps::perf
