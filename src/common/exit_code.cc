#include "common/exit_code.h"

#include "common/log.h"

namespace trun {

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return kExitSuccess;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
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

int ReportError(const Status& s) {
  log::Write(log::Level::kError, s.message(), /*each_line=*/true);
  return ExitCodeFor(s);
}

}  // namespace trun
