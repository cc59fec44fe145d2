#include "proc/exposure.h"

#include <sys/prctl.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

extern char** environ;

namespace trun::proc {
namespace {

// The start and end of the environment block that execve copied, from
// /proc/self/stat (fields 50 and 51, since Linux 3.5); {0, 0} without /proc
// (then nobody can read /proc/PID/environ either).
std::pair<uintptr_t, uintptr_t> EnvironmentBlock() {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces and parentheses: the fields
  // after it start past the last ')'.
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return {0, 0};
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  uintptr_t start = 0, end = 0;
  for (int i = 3; i <= 51 && rest >> field; ++i) {
    if (i == 50) start = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 51) end = std::strtoull(field.c_str(), nullptr, 10);
  }
  return end > start ? std::pair{start, end} : std::pair<uintptr_t, uintptr_t>{0, 0};
}

}  // namespace

bool ForgetEnvironmentVariable(std::string_view name) {
  const std::string key = std::string(name);
  const bool had = std::getenv(key.c_str()) != nullptr;
  ::unsetenv(key.c_str());
  // The entries are NUL-separated "NAME=value" strings; each one of ours is
  // zeroed whole, so the block reads as empty entries where it was.
  auto [start, end] = EnvironmentBlock();
  char* block = reinterpret_cast<char*>(start);
  const std::string prefix = key + "=";
  bool wiped = false;
  for (char* p = block; p < block + (end - start);) {
    size_t len = strnlen(p, block + (end - start) - p);
    if (std::string_view(p, len).starts_with(prefix)) {
      std::memset(p, 0, len);
      wiped = true;
    }
    p += len + 1;
  }
  return had || wiped;
}

Status MakeUndumpable() {
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    return Status::Internal(std::string("prctl(PR_SET_DUMPABLE, 0): ") + std::strerror(errno));
  }
  return Status::OK();
}

}  // namespace trun::proc
