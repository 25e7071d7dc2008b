// Status and StatusOr: errors as values (how a kernel says it could not run a problem, how a
// reader says a file is malformed), instead of exceptions inside the libraries.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace deltacheck {

enum class StatusCode { kOk = 0, kInvalidArgument, kUnsupported, kInternal };

class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return Status(StatusCode::kInvalidArgument, std::move(m));
  }
  static Status Unsupported(std::string m) {
    return Status(StatusCode::kUnsupported, std::move(m));
  }
  static Status Internal(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(StatusCode c, std::string m) : code_(c), message_(std::move(m)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status saying why there is none.
template <typename T>
class StatusOr {
 public:
  // Implicit, so that functions can `return status;` or `return value;`.
  StatusOr(Status s) : status_(std::move(s)) {}  // NOLINT
  StatusOr(T&& v) : value_(std::move(v)) {}      // NOLINT
  StatusOr(const T& v) : value_(v) {}            // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T take() { return std::move(*value_); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace deltacheck
