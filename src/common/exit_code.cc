#include "common/exit_code.h"

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/log.h"

namespace trun {

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return kExitSuccess;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kUnknownApp:
    case StatusCode::kUnsupported:
      return kExitUsage;
    case StatusCode::kTimeout:
      return kExitFailed;
    case StatusCode::kUnavailable:
      return kExitUnavailable;
    case StatusCode::kPermissionDenied:
      return kExitPermission;
    case StatusCode::kIOError:
    case StatusCode::kInternal:
      return kExitCannot;
  }
  return kExitCannot;
}

const char* ErrorKindName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid_argument";
    case StatusCode::kNotFound:
      return "not_found";
    case StatusCode::kUnknownApp:
      return "unknown_app";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kTimeout:
      return "timeout";
    case StatusCode::kIOError:
      return "io_error";
    case StatusCode::kInternal:
      return "internal";
    case StatusCode::kUnavailable:
      return "unavailable";
    case StatusCode::kPermissionDenied:
      return "permission_denied";
  }
  return "internal";
}

std::string ErrorJson(const Status& s) {
  return nlohmann::json{
      {"kind", ErrorKindName(s.code())}, {"exit_code", ExitCodeFor(s)}, {"message", s.message()}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {
std::string& ErrorReportPath() {
  static std::string path;
  return path;
}
}  // namespace

void TakeErrorReportPath() {
  const char* path = std::getenv("TRUN_ERROR_JSON");
  ErrorReportPath() = path != nullptr ? path : "";
  ::unsetenv("TRUN_ERROR_JSON");
}

int ReportError(const Status& s) {
  log::Write(log::Level::kError, s.message(), /*each_line=*/true);
  if (const std::string& path = ErrorReportPath(); !path.empty()) {
    Status w = WriteFileAtomic(path, ErrorJson(s) + "\n", 0600);
    if (!w.ok()) log::Warning("TRUN_ERROR_JSON: cannot write {}: {}", path, w.message());
  }
  return ExitCodeFor(s);
}

}  // namespace trun
