// trun's own diagnostics on stderr, one line each: "trun: warning: ...".
//
// Worker output never goes through here; see proc/pump.h.
// Thread-safety: each call is one write(2), so lines from threads never mix.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace trun::log {

enum class Level { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Messages below this level are dropped, except errors, which are always
// written. From TRUN_LOG_LEVEL (debug|info|warning|error), default info.
Level Threshold();
// The text Write() writes: "trun: " and the level's name before `msg` (with
// `each_line`, before each of its lines), a newline after. A problem the
// user reads is written with each_line, so that any one line of it, or a
// grep, says what it is (ReportError); torchrun's failure table keeps the
// one prefix that torchrun's logger gives it.
std::string Format(Level level, std::string_view msg, bool each_line = false);
void Write(Level level, std::string_view msg, bool each_line = false);

template <typename... Args>
void Debug(fmt::format_string<Args...> f, Args&&... args) {
  if (Threshold() <= Level::kDebug)
    Write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Info(fmt::format_string<Args...> f, Args&&... args) {
  if (Threshold() <= Level::kInfo) Write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Warning(fmt::format_string<Args...> f, Args&&... args) {
  if (Threshold() <= Level::kWarning)
    Write(Level::kWarning, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Error(fmt::format_string<Args...> f, Args&&... args) {
  Write(Level::kError, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace trun::log
