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

std::string Format(Level level, std::string_view msg) {
  static constexpr std::string_view kNames[] = {"debug: ", "", "warning: ", "error: "};
  const std::string_view prefix = kNames[static_cast<int>(level)];
  std::string line = "trun: ";
  line += prefix;
  for (char c : msg) {
    line += c;
    // Every line of an error says it is one (docs/cli.md, "Exit codes"), so
    // a reader of any one line, or a grep, knows.
    if (c == '\n' && level == Level::kError) line += "trun: " + std::string(prefix);
  }
  line += '\n';
  return line;
}

void Write(Level level, std::string_view msg) {
  const std::string line = Format(level, msg);
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
