#include "dataplane/pcapng_writer.h"

#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <system_error>

#include <fcntl.h>
#include <rte_cycles.h>
#include <rte_mbuf.h>
#include <unistd.h>

namespace uroce::dataplane {

namespace pcapng {

namespace {

constexpr uint32_t kSectionHeaderType = 0x0A0D0D0A;
constexpr uint32_t kInterfaceDescriptionType = 0x00000001;
constexpr uint32_t kEnhancedPacketType = 0x00000006;
constexpr uint32_t kByteOrderMagic = 0x1A2B3C4D;
constexpr uint16_t kLinkTypeEthernet = 1;
constexpr uint16_t kOptEndOfOptions = 0;
constexpr uint16_t kShbUserApplication = 4;
constexpr uint16_t kIfName = 2;
constexpr uint16_t kIfTsResol = 9;
constexpr uint16_t kEpbFlags = 2;

void put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v));
  out.push_back(static_cast<uint8_t>(v >> 8));
}
void put32(std::vector<uint8_t>& out, uint32_t v) {
  put16(out, static_cast<uint16_t>(v));
  put16(out, static_cast<uint16_t>(v >> 16));
}
void pad4(std::vector<uint8_t>& out) {
  while (out.size() % 4 != 0) out.push_back(0);
}
void put_option(std::vector<uint8_t>& out, uint16_t code, std::span<const uint8_t> value) {
  put16(out, code);
  put16(out, static_cast<uint16_t>(value.size()));
  out.insert(out.end(), value.begin(), value.end());
  pad4(out);
}
void put_string_option(std::vector<uint8_t>& out, uint16_t code, std::string_view s) {
  put_option(out, code, std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

// Starts a block at out.size(); finish_block() fills in both length fields.
std::size_t begin_block(std::vector<uint8_t>& out, uint32_t type) {
  const std::size_t start = out.size();
  put32(out, type);
  put32(out, 0);
  return start;
}
void finish_block(std::vector<uint8_t>& out, std::size_t start) {
  put16(out, kOptEndOfOptions);
  put16(out, 0);
  const auto length = static_cast<uint32_t>(out.size() - start + 4);
  put32(out, length);
  for (int i = 0; i < 4; ++i) out[start + 4 + i] = static_cast<uint8_t>(length >> (8 * i));
}

}  // namespace

void append_section_header(std::vector<uint8_t>& out, std::string_view application) {
  static_assert(std::endian::native == std::endian::little, "blocks are written little-endian");
  const std::size_t start = begin_block(out, kSectionHeaderType);
  put32(out, kByteOrderMagic);
  put16(out, 1);           // major version
  put16(out, 0);           // minor version
  put32(out, UINT32_MAX);  // section length: unspecified (64-bit -1)
  put32(out, UINT32_MAX);
  put_string_option(out, kShbUserApplication, application);
  finish_block(out, start);
}

void append_interface_description(std::vector<uint8_t>& out, std::string_view name, uint32_t snap_length) {
  const std::size_t start = begin_block(out, kInterfaceDescriptionType);
  put16(out, kLinkTypeEthernet);
  put16(out, 0);  // reserved
  put32(out, snap_length);
  put_string_option(out, kIfName, name);
  const uint8_t nanoseconds = 9;  // if_tsresol: 10^-9 s
  put_option(out, kIfTsResol, std::span(&nanoseconds, 1));
  finish_block(out, start);
}

void append_enhanced_packet(std::vector<uint8_t>& out, uint32_t interface, uint64_t timestamp_ns,
                            std::span<const uint8_t> captured, uint32_t original_length, CaptureDirection direction) {
  const std::size_t start = begin_block(out, kEnhancedPacketType);
  put32(out, interface);
  put32(out, static_cast<uint32_t>(timestamp_ns >> 32));
  put32(out, static_cast<uint32_t>(timestamp_ns));
  put32(out, static_cast<uint32_t>(captured.size()));
  put32(out, original_length);
  out.insert(out.end(), captured.begin(), captured.end());
  pad4(out);
  uint8_t flags[4];
  const uint32_t value = static_cast<uint32_t>(direction);  // bits 0-1: 01 inbound, 10 outbound
  std::memcpy(flags, &value, 4);
  put_option(out, kEpbFlags, flags);
  finish_block(out, start);
}

}  // namespace pcapng

CaptureRing::CaptureRing(std::size_t bytes, uint32_t snap_length)
    : buffer_(std::make_unique<uint8_t[]>(std::bit_ceil(bytes))),
      mask_(std::bit_ceil(bytes) - 1),
      snap_length_(snap_length) {}

bool CaptureRing::push(uint32_t interface, CaptureDirection direction, const rte_mbuf* m, uint64_t tsc) noexcept {
  const uint32_t captured = m->pkt_len < snap_length_ ? m->pkt_len : snap_length_;
  const uint64_t record = (sizeof(Header) + captured + 7) & ~uint64_t{7};
  const uint64_t size = mask_ + 1;
  uint64_t tail = producer_tail_;
  const uint64_t to_end = size - (tail & mask_);
  // A record never wraps: if it does not fit before the end, a marker sends the consumer back to the start.
  const uint64_t needed = record <= to_end ? record : to_end + record;
  if (needed > size - (tail - acquire_consumer_head())) return false;
  if (record > to_end) {
    const uint32_t marker = kWrapMarker;
    std::memcpy(buffer_.get() + (tail & mask_), &marker, sizeof(marker));
    tail += to_end;
  }
  uint8_t* const at = buffer_.get() + (tail & mask_);
  Header h{};
  h.record_bytes = static_cast<uint32_t>(record);
  h.interface = interface;
  h.original_length = m->pkt_len;
  h.captured_length = captured;
  h.tsc = tsc;
  h.direction = static_cast<uint8_t>(direction);
  std::memcpy(at, &h, sizeof(h));
  // Copies every segment (rte_pktmbuf_read returns the data pointer itself when it is contiguous).
  const void* data = rte_pktmbuf_read(m, 0, captured, at + sizeof(Header));
  if (data != at + sizeof(Header)) std::memcpy(at + sizeof(Header), data, captured);
  producer_tail_ = tail + record;
  publish_capture_tail(producer_tail_);
  return true;
}

Result<std::unique_ptr<PcapngWriter>> PcapngWriter::open(const std::string& path,
                                                         const std::vector<std::string>& interfaces,
                                                         uint32_t snap_length, std::size_t engines) {
  std::unique_ptr<PcapngWriter> w(new PcapngWriter());
  // The capture holds payload bytes: readable by its owner only (0600), and never through a symbolic link, which
  // in a shared directory such as /tmp would let another user point a root process's capture at any file.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int e = errno;
    return Status::error("capture.pcapng_path '" + path +
                         "': " + (e == ELOOP ? std::string("is a symbolic link") : std::generic_category().message(e)));
  }
  w->file_ = ::fdopen(fd, "wb");
  if (w->file_ == nullptr) {
    const int e = errno;
    ::close(fd);
    return Status::error("capture.pcapng_path '" + path + "': " + std::generic_category().message(e));
  }
  std::setvbuf(w->file_, nullptr, _IOFBF, std::size_t{1} << 20);
  for (std::size_t e = 0; e < engines; ++e) w->rings_.push_back(std::make_unique<CaptureRing>(kRingBytes, snap_length));

  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  w->tsc_at_open_ = rte_rdtsc();
  w->tsc_hz_ = rte_get_tsc_hz();
  w->realtime_ns_at_open_ = static_cast<uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(now.tv_nsec);

  std::vector<uint8_t> header;
  pcapng::append_section_header(header, "uroce");
  for (const auto& name : interfaces) pcapng::append_interface_description(header, name, snap_length);
  w->write(header);
  std::fflush(w->file_);
  if (w->write_errors() != 0) return Status::error("capture.pcapng_path '" + path + "': write failed");
  w->thread_ = std::thread([writer = w.get()] { writer->run(); });
  return w;
}

PcapngWriter::~PcapngWriter() { close(); }

void PcapngWriter::write(const std::vector<uint8_t>& bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size())
    write_errors_.fetch_add(1, std::memory_order_relaxed);
}

bool PcapngWriter::drain_all() {
  std::size_t total = 0;
  for (auto& ring : rings_) {
    total += ring->drain([this](const CaptureRing::Record& r) {
      const uint64_t delta = r.tsc - tsc_at_open_;  // records are made after open: never negative
      const auto delta_ns = static_cast<uint64_t>(static_cast<unsigned __int128>(delta) * 1'000'000'000u / tsc_hz_);
      block_.clear();
      pcapng::append_enhanced_packet(block_, r.interface, realtime_ns_at_open_ + delta_ns, r.bytes, r.original_length,
                                     r.direction);
      write(block_);
    });
  }
  packets_written_.fetch_add(total, std::memory_order_relaxed);
  return total != 0;
}

void PcapngWriter::run() {
  // stop_requested_ is released by close() after the engines stopped: every record they pushed is visible
  // to the final drain below.
  while (!stop_requested_.load(std::memory_order_acquire)) {
    if (!drain_all()) {
      if (std::fflush(file_) != 0) write_errors_.fetch_add(1, std::memory_order_relaxed);  // idle: make it readable
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  while (drain_all()) {
  }
}

void PcapngWriter::close() {
  if (file_ == nullptr) return;
  if (thread_.joinable()) {
    stop_requested_.store(true, std::memory_order_release);
    thread_.join();
  }
  if (std::fclose(file_) != 0) write_errors_.fetch_add(1, std::memory_order_relaxed);
  file_ = nullptr;
}

}  // namespace uroce::dataplane
