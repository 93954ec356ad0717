#include "apps/stat/telemetry_client.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

namespace uroce::stat {

namespace {

constexpr const char* kSocketName = "dpdk_telemetry.v2";
constexpr int kMaxDepth = 16;  // containers inside containers; telemetry answers nest two levels

std::string errno_text() { return std::strerror(errno); }  // NOLINT(concurrency-mt-unsafe): one thread

// One message; SOCK_SEQPACKET keeps message boundaries, so one read is one answer.
std::optional<std::string> read_message(int fd, std::size_t capacity, std::string& error) {
  std::string buffer(capacity + 1, '\0');
  const ssize_t n = ::read(fd, buffer.data(), buffer.size());
  if (n <= 0) {
    if (n == 0) {
      error = "the process closed the telemetry connection";
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      error = "the process did not answer in time (stopped or hung?)";
    } else {
      error = "reading the telemetry socket: " + errno_text();
    }
    return std::nullopt;
  }
  buffer.resize(static_cast<std::size_t>(n));
  return buffer;
}

// Where DPDK keeps a process's runtime directory (eal_create_runtime_dir, and dpdk-telemetry.py): /var/run/dpdk for
// root, else $XDG_RUNTIME_DIR/dpdk, or /tmp/dpdk without it. uroce-stat finds the processes of its own user.
std::string runtime_directory() {
  if (::geteuid() == 0) return "/var/run/dpdk";
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");  // NOLINT(concurrency-mt-unsafe): nothing sets the environment
  return std::string(xdg != nullptr && *xdg != '\0' ? xdg : "/tmp") + "/dpdk";
}

}  // namespace

std::optional<Json> parse_telemetry_json(std::string_view text) {
  // nlohmann's parser keeps its own stack, so deep input cannot overflow ours while parsing; the callback stops
  // building anything below kMaxDepth and marks the document refused.
  bool too_deep = false;
  const Json::parser_callback_t limit_depth = [&too_deep](int depth, Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxDepth) {
      too_deep = true;
      return false;
    }
    return true;
  };
  Json value = Json::parse(text, limit_depth, /*allow_exceptions=*/false);
  if (value.is_discarded() || too_deep) return std::nullopt;
  return value;
}

std::optional<uint64_t> unsigned_integer(const Json& value) noexcept {
  if (const auto* u = value.get_ptr<const Json::number_unsigned_t*>()) return *u;
  if (const auto* i = value.get_ptr<const Json::number_integer_t*>(); i != nullptr && *i >= 0)
    return static_cast<uint64_t>(*i);
  return std::nullopt;
}

std::string dump_json(const Json& value) {
  return value.dump(/*indent=*/-1, /*indent_char=*/' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

std::string telemetry_socket_path(const std::string& file_prefix) {
  return runtime_directory() + "/" + file_prefix + "/" + kSocketName;
}

namespace {

// A process that ended without cleaning up leaves its runtime directory and socket file behind: only a socket
// that accepts a connection belongs to a running process (a stale one refuses with ECONNREFUSED).
bool socket_accepts(const std::filesystem::path& path) {
  std::string error;
  return TelemetryClient::connect(path.string(), error).has_value();
}

}  // namespace

std::vector<std::string> find_file_prefixes(const std::string& prefix_start) {
  std::vector<std::string> prefixes;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(runtime_directory(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(prefix_start) && socket_accepts(entry.path() / kSocketName)) prefixes.push_back(name);
  }
  std::sort(prefixes.begin(), prefixes.end());
  return prefixes;
}

std::optional<TelemetryClient> TelemetryClient::connect(const std::string& socket_path, std::string& error,
                                                        std::chrono::milliseconds answer_timeout) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(address.sun_path)) {
    error = "the socket path is too long: " + socket_path;
    return std::nullopt;
  }
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = "socket(AF_UNIX, SOCK_SEQPACKET): " + errno_text();
    return std::nullopt;
  }
  TelemetryClient client(fd);
  const timeval timeout{static_cast<time_t>(answer_timeout.count() / 1000),
                        static_cast<suseconds_t>(answer_timeout.count() % 1000 * 1000)};
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    error = "cannot connect to " + socket_path + ": " + errno_text() +
            " (is the uroce process running, with this --file-prefix, and are you root?)";
    return std::nullopt;
  }
  auto greeting_text = read_message(fd, client.max_output_len_, error);
  if (!greeting_text) return std::nullopt;
  const auto greeting = parse_telemetry_json(*greeting_text);
  if (!greeting || !greeting->is_object()) {
    error = "the telemetry greeting is not JSON: " + *greeting_text;
    return std::nullopt;
  }
  if (const auto pid = greeting->find("pid"); pid != greeting->end() && unsigned_integer(*pid))
    client.pid_ = static_cast<long>(*unsigned_integer(*pid));
  // DPDK's default is 16 KiB; a read buffer beyond 64 MiB is no telemetry answer (and UINT64_MAX + 1 would wrap).
  constexpr uint64_t kMaxOutputLength = uint64_t{64} << 20;
  if (const auto len = greeting->find("max_output_len"); len != greeting->end() && unsigned_integer(*len)) {
    if (*unsigned_integer(*len) == 0 || *unsigned_integer(*len) > kMaxOutputLength) {
      error = "the telemetry greeting announces an unusable max_output_len: " + *greeting_text;
      return std::nullopt;
    }
    client.max_output_len_ = static_cast<std::size_t>(*unsigned_integer(*len));
  }
  return client;
}

TelemetryClient::TelemetryClient(TelemetryClient&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), pid_(other.pid_), max_output_len_(other.max_output_len_) {}

TelemetryClient& TelemetryClient::operator=(TelemetryClient&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    pid_ = other.pid_;
    max_output_len_ = other.max_output_len_;
  }
  return *this;
}

TelemetryClient::~TelemetryClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<Json> TelemetryClient::query(const std::string& command, std::string& error) {
  if (::write(fd_, command.data(), command.size()) != static_cast<ssize_t>(command.size())) {
    error = "writing to the telemetry socket: " + errno_text();
    return std::nullopt;
  }
  auto answer_text = read_message(fd_, max_output_len_, error);
  if (!answer_text) return std::nullopt;
  auto answer = parse_telemetry_json(*answer_text);
  if (!answer) {
    error = "the answer to " + command + " is not JSON: " + *answer_text;
    return std::nullopt;
  }
  const std::string name = command.substr(0, command.find(','));
  const auto data = answer->find(name);
  return data != answer->end() ? std::move(*data) : Json();
}

}  // namespace uroce::stat
