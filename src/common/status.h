// Status and Result<T>: how errors cross module boundaries in trun.
//
// A Status is a cheap value: OK, or a code plus a message written for the
// person who will read it ("--nproc-per-node: expected ... got '0'"). Modules
// that use throwing libraries (CLI11, nlohmann-json, asio) catch at their edge
// and return one of these instead.
//
// Thread-safety: values; no shared state.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace trun {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the user's input is wrong: exit 2
  kNotFound,
  kIOError,
  kUnsupported,  // valid input, not implemented (yet)
  kTimeout,
  kInternal,
  kUnavailable,       // a service trun needs (the SLURM controller) cannot be reached: exit 4
  kPermissionDenied,  // another user's app (the local scheduler): exit 5
  // The scheduler knows no such app (an app id nobody submitted, or one
  // deleted since): exit 2 like any bad input, but its own kind, so that a
  // caller (the Python runner, through TRUN_ERROR_JSON) tells it apart.
  kUnknownApp,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return Status(StatusCode::kInvalidArgument, std::move(msg));
  }
  static Status NotFound(std::string msg) { return Status(StatusCode::kNotFound, std::move(msg)); }
  static Status IOError(std::string msg) { return Status(StatusCode::kIOError, std::move(msg)); }
  static Status Unsupported(std::string msg) {
    return Status(StatusCode::kUnsupported, std::move(msg));
  }
  static Status Timeout(std::string msg) { return Status(StatusCode::kTimeout, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(StatusCode::kInternal, std::move(msg)); }
  static Status PermissionDenied(std::string msg) {
    return Status(StatusCode::kPermissionDenied, std::move(msg));
  }
  static Status Unavailable(std::string msg) {
    return Status(StatusCode::kUnavailable, std::move(msg));
  }
  static Status UnknownApp(std::string msg) {
    return Status(StatusCode::kUnknownApp, std::move(msg));
  }
  // An IOError carrying strerror(err), prefixed with what was being done.
  static Status FromErrno(const std::string& what, int err);

  // The same error, marked with the HTTP status of the reply it describes
  // (an HTTP client's errors: 404, 409, ...), so that callers decide by the
  // number and never by the message.
  Status WithHttpStatus(int http_status) && {
    http_status_ = http_status;
    return std::move(*this);
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The HTTP status the error came from; 0 when it came from no HTTP reply.
  int http_status() const { return http_status_; }
  std::string ToString() const;

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  int http_status_ = 0;
};

// Either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(v_).ok());
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace trun

// Early return on error, for functions that return Status or Result<U>.
#define TRUN_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::trun::Status trun_status_ = (expr);        \
    if (!trun_status_.ok()) return trun_status_; \
  } while (0)
