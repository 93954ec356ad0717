// pcapng capture of everything the engines send and receive (config.capture.pcapng_path).
//
// DPDK 22.11's rte_pcapng writes timestamps centuries off (dpdk-env.md §6), so the blocks are written here:
// one Section Header Block, one Interface Description Block per port (Ethernet, nanosecond timestamps), and
// an Enhanced Packet Block per packet with its direction (inbound/outbound) in epb_flags.
//
// Design: each engine copies packets into its own CaptureRing (a preallocated SPSC byte ring: no syscall, no
// lock, no allocation on the datapath) and one writer thread drains every ring into the single file. A full
// ring drops the packet and the engine counts capture_drops; the engine never waits for the disk. One writer
// means blocks never interleave, with no per-engine files to merge afterwards.
//
// Timestamps: the writer reads CLOCK_REALTIME and the TSC once when it opens the file; a packet's time is
// that wall-clock time plus its TSC delta.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "dataplane/status.h"

struct rte_mbuf;

namespace uroce::dataplane {

enum class CaptureDirection : uint8_t { kInbound = 1, kOutbound = 2 };  // the pcapng epb_flags values

// Encoders for the three block types, appending to `out` (little-endian, as the SHB's byte-order magic says).
namespace pcapng {
void append_section_header(std::vector<uint8_t>& out, std::string_view application);
void append_interface_description(std::vector<uint8_t>& out, std::string_view name, uint32_t snap_length);
void append_enhanced_packet(std::vector<uint8_t>& out, uint32_t interface, uint64_t timestamp_ns,
                            std::span<const uint8_t> captured, uint32_t original_length, CaptureDirection direction);
}  // namespace pcapng

// One engine's packets on their way to the writer thread: single producer (the engine), single consumer.
class CaptureRing {
 public:
  struct Record {
    uint32_t interface;
    CaptureDirection direction;
    uint32_t original_length;
    uint64_t tsc;
    std::span<const uint8_t> bytes;
  };

  // `bytes` is rounded up to a power of two.
  CaptureRing(std::size_t bytes, uint32_t snap_length);
  CaptureRing(const CaptureRing&) = delete;
  CaptureRing& operator=(const CaptureRing&) = delete;

  // Producer: copies up to snap_length bytes of `m` (all segments). False when the ring is full.
  bool push(uint32_t interface, CaptureDirection direction, const rte_mbuf* m, uint64_t tsc) noexcept;

  // Consumer: calls fn(record) for every record published so far, then frees their space. Returns how many.
  template <class Fn>
  std::size_t drain(Fn&& fn);

 private:
  struct Header {
    uint32_t record_bytes;  // header + data, rounded up to 8; kWrapMarker: skip to the ring's start
    uint32_t interface;
    uint32_t original_length;
    uint32_t captured_length;
    uint64_t tsc;
    uint8_t direction;
    uint8_t reserved[7];
  };
  static constexpr uint32_t kWrapMarker = UINT32_MAX;

  // The consumer's reads of old records happen before the producer overwrites their space: the consumer
  // releases its head after reading, the producer acquires it before writing.
  [[nodiscard]] uint64_t acquire_consumer_head() const noexcept { return head_.load(std::memory_order_acquire); }
  void release_capture_space(uint64_t head) noexcept { head_.store(head, std::memory_order_release); }
  // A record's bytes are visible to the consumer before its tail is: release here, acquire in drain().
  void publish_capture_tail(uint64_t tail) noexcept { tail_.store(tail, std::memory_order_release); }
  [[nodiscard]] uint64_t acquire_producer_tail() const noexcept { return tail_.load(std::memory_order_acquire); }

  std::unique_ptr<uint8_t[]> buffer_;
  std::size_t mask_;
  uint32_t snap_length_;
  alignas(64) std::atomic<uint64_t> head_{0};  // consumer position (bytes, monotonic)
  alignas(64) std::atomic<uint64_t> tail_{0};  // producer position
  alignas(64) uint64_t producer_tail_ = 0;     // producer-private copy of tail_
};

class PcapngWriter {
 public:
  static constexpr std::size_t kRingBytes = std::size_t{8} << 20;  // per engine

  // Creates `path`, writes the section header and one interface per name, and starts the writer thread.
  [[nodiscard]] static Result<std::unique_ptr<PcapngWriter>> open(const std::string& path,
                                                                  const std::vector<std::string>& interfaces,
                                                                  uint32_t snap_length, std::size_t engines);
  ~PcapngWriter();  // close()
  PcapngWriter(const PcapngWriter&) = delete;
  PcapngWriter& operator=(const PcapngWriter&) = delete;

  [[nodiscard]] CaptureRing& ring(std::size_t engine) noexcept { return *rings_[engine]; }
  // Drains every ring (stop the engines first), writes, and closes the file. Idempotent.
  void close();
  // Blocks written since open (packets) and write failures (disk full, ...), for tests and telemetry.
  [[nodiscard]] uint64_t packets_written() const noexcept { return packets_written_.load(std::memory_order_relaxed); }
  [[nodiscard]] uint64_t write_errors() const noexcept { return write_errors_.load(std::memory_order_relaxed); }

 private:
  PcapngWriter() = default;
  void run();
  bool drain_all();
  void write(const std::vector<uint8_t>& bytes);

  std::FILE* file_ = nullptr;
  std::vector<std::unique_ptr<CaptureRing>> rings_;
  std::vector<uint8_t> block_;  // writer thread's scratch
  uint64_t realtime_ns_at_open_ = 0;
  uint64_t tsc_at_open_ = 0;
  uint64_t tsc_hz_ = 1;
  std::thread thread_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<uint64_t> packets_written_{0};
  std::atomic<uint64_t> write_errors_{0};
};

template <class Fn>
std::size_t CaptureRing::drain(Fn&& fn) {
  uint64_t head = head_.load(std::memory_order_relaxed);  // only this thread writes head_
  const uint64_t tail = acquire_producer_tail();
  std::size_t count = 0;
  while (head != tail) {
    const uint8_t* at = buffer_.get() + (head & mask_);
    uint32_t record_bytes = 0;  // a wrap marker may be all there is before the end: read just its first field
    std::memcpy(&record_bytes, at, sizeof(record_bytes));
    if (record_bytes == kWrapMarker) {
      head += (mask_ + 1) - (head & mask_);
      continue;
    }
    Header h{};
    std::memcpy(&h, at, sizeof(h));
    fn(Record{h.interface, static_cast<CaptureDirection>(h.direction), h.original_length, h.tsc,
              std::span<const uint8_t>(at + sizeof(Header), h.captured_length)});
    head += h.record_bytes;
    ++count;
  }
  release_capture_space(head);
  return count;
}

}  // namespace uroce::dataplane
