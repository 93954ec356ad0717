// Status and Result for the dataplane's control path (bring-up, registration, resolution).
//
// A failed bring-up step returns a message that says what failed and why, in words an operator can act on
// ("port b (ring:ab): rte_eth_dev_start: Operation not supported"). Nothing here is used per packet: the
// datapath reports through counters instead.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace uroce::dataplane {

class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  static Status error(std::string message) { return Status{std::move(message)}; }

  [[nodiscard]] bool ok() const noexcept { return !message_.has_value(); }
  // Empty on success.
  [[nodiscard]] const std::string& message() const noexcept {
    static const std::string kNone;
    return message_ ? *message_ : kNone;
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor): returns read naturally
  Result(Status error) : status_(std::move(error)) { assert(!status_.ok()); }  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool ok() const noexcept { return value_.has_value(); }
  [[nodiscard]] const Status& status() const noexcept { return status_; }
  [[nodiscard]] const std::string& error() const noexcept { return status_.message(); }
  // Precondition: ok().
  [[nodiscard]] T& value() & { return *value_; }
  [[nodiscard]] T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  T* operator->() { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace uroce::dataplane
