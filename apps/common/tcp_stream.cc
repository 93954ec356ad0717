#include "apps/common/tcp_stream.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <thread>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace uroce::apps {

namespace {

// What strerror(error) says ("Connection refused"), without strerror's shared buffer: glibc's GNU strerror_r
// (g++ defines _GNU_SOURCE) returns the text, in `buffer` or a constant string.
std::string errno_text(int error) {
  char buffer[256];
  return strerror_r(error, buffer, sizeof buffer);
}

// Waits until fd is ready for `events`, polling in slices so a deadline far away stays exact.
bool wait_for(int fd, short events, TcpStream::Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - TcpStream::Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list != nullptr) freeaddrinfo(list);
  }
};

}  // namespace

TcpStream& TcpStream::operator=(TcpStream&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void TcpStream::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::optional<TcpStream> TcpStream::connect(const std::string& host, unsigned port, Clock::time_point deadline,
                                            std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string service = std::to_string(port);
  AddrInfo addresses;
  if (const int r = getaddrinfo(host.c_str(), service.c_str(), &hints, &addresses.list); r != 0) {
    error = "cannot resolve '" + host + "': " + gai_strerror(r);
    return std::nullopt;
  }
  int last_errno = 0;
  while (Clock::now() < deadline) {
    for (addrinfo* a = addresses.list; a != nullptr; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        const int one = 1;  // the exchange is a few small messages each way: don't let Nagle delay them
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return TcpStream(fd);
      }
      last_errno = errno;
      ::close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  error = "cannot connect to " + host + ":" + service + ": " + errno_text(last_errno);
  return std::nullopt;
}

std::optional<TcpStream> TcpStream::accept_one(const std::string& bind_address, unsigned port,
                                               Clock::time_point deadline, const std::function<void()>& listening,
                                               std::string& error) {
  addrinfo hints{};
  hints.ai_flags = AI_PASSIVE;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string service = std::to_string(port);
  AddrInfo addresses;
  if (const int r =
          getaddrinfo(bind_address.empty() ? nullptr : bind_address.c_str(), service.c_str(), &hints, &addresses.list);
      r != 0) {
    error = "cannot resolve '" + bind_address + "': " + gai_strerror(r);
    return std::nullopt;
  }
  TcpStream listener;
  int last_errno = 0;
  for (addrinfo* a = addresses.list; a != nullptr && listener.fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1) == 0) {
      listener.fd_ = fd;
    } else {
      last_errno = errno;
      ::close(fd);
    }
  }
  if (listener.fd_ < 0) {
    error = "cannot listen on TCP port " + service + ": " + errno_text(last_errno);
    return std::nullopt;
  }
  if (listening) listening();
  if (!wait_for(listener.fd_, POLLIN, deadline)) {
    error = "no peer connected to TCP port " + service + " in time";
    return std::nullopt;
  }
  const int fd = ::accept(listener.fd_, nullptr, nullptr);
  if (fd < 0) {
    error = "accept failed: " + errno_text(errno);
    return std::nullopt;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return TcpStream(fd);
}

bool TcpStream::read_exact(void* buffer, std::size_t n, Clock::time_point deadline) const {
  auto* p = static_cast<uint8_t*>(buffer);
  while (n > 0) {
    if (!wait_for(fd_, POLLIN, deadline)) return false;
    const ssize_t r = ::read(fd_, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool TcpStream::write_all(const void* buffer, std::size_t n) const {
  const auto* p = static_cast<const uint8_t*>(buffer);
  while (n > 0) {
    const ssize_t r = ::send(fd_, p, n, MSG_NOSIGNAL);  // a peer that went away is an error, not SIGPIPE
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

}  // namespace uroce::apps
