// The out-of-band TCP connection that perftest and ibv_rc_pingpong exchange QP attributes over
// (rocev2.md §8.1, §8.2): blocking reads and writes with a deadline, a client that retries until the server
// listens, and a server that takes one connection.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>

namespace uroce::apps {

class TcpStream {
 public:
  using Clock = std::chrono::steady_clock;

  TcpStream() = default;
  TcpStream(TcpStream&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  TcpStream& operator=(TcpStream&& other) noexcept;
  TcpStream(const TcpStream&) = delete;
  TcpStream& operator=(const TcpStream&) = delete;
  ~TcpStream() { close(); }

  // Connects to host:port, retrying until the deadline (the server may not be listening yet).
  [[nodiscard]] static std::optional<TcpStream> connect(const std::string& host, unsigned port,
                                                        Clock::time_point deadline, std::string& error);
  // Listens on bind_address:port (empty: every address), calls `listening` once it does, and accepts one
  // connection before the deadline.
  [[nodiscard]] static std::optional<TcpStream> accept_one(const std::string& bind_address, unsigned port,
                                                           Clock::time_point deadline,
                                                           const std::function<void()>& listening, std::string& error);

  // Exactly n bytes, or false (peer closed, error, or deadline).
  [[nodiscard]] bool read_exact(void* buffer, std::size_t n, Clock::time_point deadline) const;
  [[nodiscard]] bool write_all(const void* buffer, std::size_t n) const;
  void close();

 private:
  explicit TcpStream(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace uroce::apps
