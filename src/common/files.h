// Whole-file reads and crash-safe writes.
// Thread-safety: pure functions over the file system.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace trun {

// The file's bytes; NotFound when it does not exist, IOError otherwise.
Result<std::string> ReadFile(const std::string& path);

// What descriptor `fd` gives until EOF, which it leaves open; `what` names it
// in errors. More than `limit` bytes is InvalidArgument, read no further.
Result<std::string> ReadToEnd(int fd, const std::string& what, size_t limit = SIZE_MAX);

// Writes `data` to `path` through `path.tmp` and a rename, so a reader sees
// the old content or the new, never half of it.
Status WriteFileAtomic(const std::string& path, const std::string& data, mode_t mode = 0644);

// The absolute path of the running program (/proc/self/exe), e.g. for a
// process that runs trun again.
std::string SelfExecutable();

}  // namespace trun
