#include "apps/perf/perftest_exchange.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <endian.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace uroce::apps::perf {

namespace {

// Milliseconds left before a deadline, for poll(): -1 (forever) for the far future.
int poll_timeout(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1000));
}

bool expired(Clock::time_point deadline) { return deadline != Clock::time_point::max() && Clock::now() >= deadline; }

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

ExchangeStream& ExchangeStream::operator=(ExchangeStream&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void ExchangeStream::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::optional<ExchangeStream> ExchangeStream::connect_tcp(const std::string& host, uint16_t port,
                                                          Clock::time_point deadline, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_INET;  // perftest's exchange is IPv4 only
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    error = "cannot resolve '" + host + "': " + ::gai_strerror(rc);
    return std::nullopt;
  }
  for (;;) {
    for (addrinfo* t = res; t != nullptr; t = t->ai_next) {
      const int fd = ::socket(t->ai_family, t->ai_socktype | SOCK_CLOEXEC, t->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, t->ai_addr, t->ai_addrlen) == 0) {
        ::freeaddrinfo(res);
        return ExchangeStream(fd);
      }
      error = errno_text(("connect to " + host + ":" + service).c_str());
      ::close(fd);
    }
    if (expired(deadline)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ::freeaddrinfo(res);
  return std::nullopt;
}

std::optional<ExchangeStream> ExchangeStream::accept_tcp(uint16_t port, Clock::time_point deadline,
                                                         const std::function<void()>& listening, std::string& error) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = errno_text("socket");
    return std::nullopt;
  }
  ExchangeStream listener(fd);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_port = htons(port);
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&any), sizeof any) != 0 || ::listen(fd, 1) != 0) {
    error = errno_text(("listen on TCP port " + std::to_string(port)).c_str());
    return std::nullopt;
  }
  if (listening) listening();
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, poll_timeout(deadline));
    if (r < 0 && errno != EINTR) {
      error = errno_text("poll");
      return std::nullopt;
    }
    if (r > 0) {
      const int conn = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn >= 0) return ExchangeStream(conn);
      if (errno != EINTR && errno != ECONNABORTED) {
        error = errno_text("accept");
        return std::nullopt;
      }
    }
    if (expired(deadline)) {
      error = "no client connected to TCP port " + std::to_string(port) + " in time";
      return std::nullopt;
    }
  }
}

std::optional<std::pair<ExchangeStream, ExchangeStream>> ExchangeStream::pair(std::string& error) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    error = errno_text("socketpair");
    return std::nullopt;
  }
  return std::make_pair(ExchangeStream(fds[0]), ExchangeStream(fds[1]));
}

bool ExchangeStream::read_exact(void* buffer, std::size_t n, Clock::time_point deadline) const {
  auto* p = static_cast<char*>(buffer);
  while (n > 0) {
    pollfd pfd{fd_, POLLIN, 0};
    const int r = ::poll(&pfd, 1, poll_timeout(deadline));
    if (r < 0 && errno != EINTR) return false;
    if (r > 0) {
      const ssize_t got = ::read(fd_, p, n);
      if (got == 0) return false;  // the peer closed
      if (got < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return false;
      }
      p += got;
      n -= static_cast<std::size_t>(got);
      continue;
    }
    if (expired(deadline)) return false;
  }
  return true;
}

bool ExchangeStream::write_all(const void* buffer, std::size_t n) const {
  const auto* p = static_cast<const char*>(buffer);
  while (n > 0) {
    const ssize_t put = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (put < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += put;
    n -= static_cast<std::size_t>(put);
  }
  return true;
}

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

bool PerftestSession::exchange(const void* mine, void* theirs, std::size_t n) {
  const Clock::time_point deadline =
      timeout_ == Clock::duration::zero() ? Clock::time_point::max() : Clock::now() + timeout_;
  const bool ok = client_ ? stream_.write_all(mine, n) && stream_.read_exact(theirs, n, deadline)
                          : stream_.read_exact(theirs, n, deadline) && stream_.write_all(mine, n);
  if (!ok) error_ = "the out-of-band exchange with the peer failed (it closed, or did not answer in time)";
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
  // Nobody reads "done", and the peer may already have closed: its fate does not matter.
  static constexpr char kDone[] = "done";
  (void)stream_.write_all(kDone, sizeof kDone);
  stream_.close();
  return true;
}

}  // namespace uroce::apps::perf
