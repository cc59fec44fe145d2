#include "common/status.h"

#include <cstring>

namespace trun {

Status Status::FromErrno(const std::string& what, int err) {
  return IOError(what + ": " + std::strerror(err));
}

std::string Status::ToString() const {
  switch (code_) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "invalid argument: " + message_;
    case StatusCode::kNotFound:
      return "not found: " + message_;
    case StatusCode::kIOError:
      return "I/O error: " + message_;
    case StatusCode::kUnsupported:
      return "not supported yet: " + message_;
    case StatusCode::kTimeout:
      return "timed out: " + message_;
    case StatusCode::kInternal:
      return "internal error: " + message_;
    case StatusCode::kUnavailable:
      return "unavailable: " + message_;
    case StatusCode::kPermissionDenied:
      return "permission denied: " + message_;
    case StatusCode::kUnknownApp:
      return "unknown app: " + message_;
  }
  return message_;
}

}  // namespace trun
