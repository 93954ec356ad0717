// perftest's out-of-band exchange (rocev2.md §8.2), spoken byte for byte so that real ib_write_bw, ib_read_bw,
// ib_send_bw and the latency tools can sit on the other end of uroce-perf.
//
// Every step of perftest's exchange is symmetric: the client writes its part, then reads the peer's; the server
// reads, then writes. The steps are, in order: a 16-byte version string (peers older than 5.70 are refused, as
// perftest does), the cycle-buffer and cache-line sizes (4-byte big-endian each; both keep the larger), the MTU
// as a 2-byte ASCII enum (both keep the smaller), then a 108-byte key message per QP, sent again as a barrier
// wherever the test needs one (how often depends on the test: see uroce_perf.cc), the bandwidth reports (five
// big-endian 8-byte fields) and "done". Over TCP by default; with -R over an RDMA connection that perftest makes
// through rdma_cm, where each step is one SEND and the key message is binary (perftest_rdma_cm.h).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "apps/common/tcp_stream.h"

namespace uroce::apps::perf {

using Clock = TcpStream::Clock;

// What perftest announces per QP. LID is 0 on RoCE; SRQN 0 without SRQ/XRC/DC.
struct PerftestDest {
  uint16_t lid = 0;
  uint16_t out_reads = 0;  // the sender's IRD: how many READs the peer may keep outstanding towards it
  uint32_t qpn = 0;        // 24 bits
  uint32_t psn = 0;        // 24 bits
  uint32_t rkey = 0;
  uint64_t vaddr = 0;  // where the peer's WRITEs land and its READs read from
  std::array<uint8_t, 16> gid{};
  uint32_t srqn = 0;
  bool operator==(const PerftestDest&) const = default;
};

// The key message with a GID (what perftest sends whenever a GID index is in use, i.e. always on RoCE):
// "LID:OUT:QPN:PSN:RKEY:VADDR:" in fixed-width hex, the 16 GID bytes as "xx:", then "SRQN:", NUL-padded.
inline constexpr std::size_t kKeyMessageSize = 108;
using KeyMessage = std::array<char, kKeyMessageSize>;
[[nodiscard]] KeyMessage format_key_message(const PerftestDest& dest);
// Strict: every field present, hexadecimal, within its width; nothing is trusted from the peer.
[[nodiscard]] std::optional<PerftestDest> parse_key_message(const KeyMessage& message);

// perftest's IBV_MTU enum (1 = 256 .. 5 = 4096) and back; 0 for anything else.
[[nodiscard]] uint32_t mtu_enum_of_bytes(uint32_t bytes);
[[nodiscard]] uint32_t mtu_bytes_of_enum(uint32_t value);

// The bandwidth report the bandwidth tests hand to their peer (the server prints the client's).
struct BwReport {
  uint64_t size = 0;
  uint64_t iters = 0;
  double bw_peak = 0;
  double bw_avg = 0;
  double msg_rate = 0;  // Mpps
};

inline constexpr const char* kPerftestVersion = "6.06";  // the exchange we speak is perftest 6.06's

// The binary key message perftest sends over an RDMA exchange (-R): its struct pingpong_dest, each integer
// big-endian: LID, OUT, QPN, PSN, RKEY (4 bytes each), 4 bytes of padding, VADDR (8), the GID (16), SRQN and the
// GID index (4 each).
inline constexpr std::size_t kBinaryKeySize = 56;
using BinaryKey = std::array<uint8_t, kBinaryKeySize>;
[[nodiscard]] BinaryKey format_binary_key(const PerftestDest& dest);
[[nodiscard]] PerftestDest parse_binary_key(const BinaryKey& key);

// What carries the exchange: perftest's TCP stream, or (with -R) an RDMA connection of its own.
class ExchangeTransport {
 public:
  virtual ~ExchangeTransport() = default;
  [[nodiscard]] virtual bool send(const void* data, std::size_t n) = 0;
  // Exactly n bytes, by `deadline`.
  [[nodiscard]] virtual bool receive(void* data, std::size_t n, Clock::time_point deadline) = 0;
  // Key messages in binary (struct pingpong_dest) rather than perftest's text.
  [[nodiscard]] virtual bool binary_keys() const = 0;
  // Why the last send or receive failed, when the transport knows more than that it did.
  [[nodiscard]] const std::string& failure() const { return failure_; }
  // The TCP stream, for stop_polling_with_peer(); none over RDMA.
  [[nodiscard]] virtual const TcpStream* stream() const { return nullptr; }

 protected:
  std::string failure_;
};

class TcpExchange final : public ExchangeTransport {
 public:
  explicit TcpExchange(TcpStream stream) : stream_(std::move(stream)) {}
  bool send(const void* data, std::size_t n) override { return stream_.write_all(data, n); }
  bool receive(void* data, std::size_t n, Clock::time_point deadline) override {
    return stream_.read_exact(data, n, deadline);
  }
  [[nodiscard]] bool binary_keys() const override { return false; }
  [[nodiscard]] const TcpStream* stream() const override { return &stream_; }

 private:
  TcpStream stream_;
};

class PerftestSession {
 public:
  // timeout: how long one exchange step may wait for the peer; zero waits forever (as perftest does).
  PerftestSession(std::unique_ptr<ExchangeTransport> transport, bool client, Clock::duration timeout)
      : transport_(std::move(transport)), client_(client), timeout_(timeout) {}

  // One symmetric step: the client writes `mine` then reads `theirs`, the server the other way round.
  [[nodiscard]] bool exchange(const void* mine, void* theirs, std::size_t n);

  [[nodiscard]] bool exchange_versions(std::string& peer_version);
  // cycle_buffer and cache_line: ours in, the agreed (larger of the two) out.
  [[nodiscard]] bool exchange_sys_data(uint32_t& cycle_buffer, uint32_t& cache_line);
  // mtu_bytes: ours in, the agreed (smaller of the two valid ones) out.
  [[nodiscard]] bool exchange_mtu(uint32_t& mtu_bytes);
  [[nodiscard]] bool hand_shake(const PerftestDest& mine, PerftestDest& theirs);
  [[nodiscard]] bool exchange_bw_reports(const BwReport& mine, BwReport& theirs);
  // perftest's ctx_close_connection: a last hand shake, then over TCP "done" (which nobody reads). The stream
  // stays open until the session ends, for stop_polling_with_peer().
  [[nodiscard]] bool close_connection(const PerftestDest& mine);
  [[nodiscard]] const ExchangeTransport& transport() const { return *transport_; }

  [[nodiscard]] const std::string& error() const { return error_; }

 private:
  std::unique_ptr<ExchangeTransport> transport_;
  bool client_;
  Clock::duration timeout_;
  std::string error_;
};

}  // namespace uroce::apps::perf
