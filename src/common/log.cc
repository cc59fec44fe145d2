#include "common/log.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace trun::log {

Level Threshold() {
  static const Level level = [] {
    const char* env = std::getenv("TRUN_LOG_LEVEL");
    std::string_view v = env ? env : "";
    if (v == "debug") return Level::kDebug;
    if (v == "warning") return Level::kWarning;
    if (v == "error") return Level::kError;
    return Level::kInfo;
  }();
  return level;
}

std::string Format(Level level, std::string_view msg, bool each_line) {
  static constexpr std::string_view kNames[] = {"debug: ", "", "warning: ", "error: "};
  const std::string prefix = "trun: " + std::string(kNames[static_cast<int>(level)]);
  std::string line = prefix;
  for (char c : msg) {
    line += c;
    if (c == '\n' && each_line) line += prefix;
  }
  line += '\n';
  return line;
}

void Write(Level level, std::string_view msg, bool each_line) {
  const std::string line = Format(level, msg, each_line);
  // One write so that concurrent lines never interleave mid-line.
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace trun::log
