#include "store/process_limits.h"

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>

namespace trun::store {

size_t RaiseOpenFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur;
}

// ServerOptions::max_connections' default: the open-file limit less a
// reserve for the process's own descriptors. An agent that hosts the store
// holds a few per worker (pipes, pidfds, log files) besides its own dozen:
// 256 covers a node of 64 workers, and 1/64 of a larger limit leaves room
// for more, while 19,000 of the 20,000 this project's machines allow stay
// for clients (issue 31; a reserve of 1/8 capped them at 17,500).
size_t DefaultMaxConnections() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  size_t limit = rl.rlim_cur;
  size_t reserve = std::max<size_t>(256, limit / 64);
  return limit > reserve ? limit - reserve : 1;
}

// Clients decide the sizes of the buffers the store grows, and a buffer
// grows by doubling: copied into one twice its size, the old one freed.
// glibc's default raises its mmap threshold to the size of each mapped
// block freed, so after the first few of them every later buffer up to
// 32 MiB comes from the heap, whose freed middle is never returned: 40
// unfinished 4 MiB requests then took the process's peak 84 MiB past what
// they held, over the budget of unfinished requests (pressure.h). A fixed
// threshold keeps every buffer of 128 KiB or more in its own mapping,
// returned when freed, so what the store holds is what it resides in (68
// MiB peak for the same 40). The setting is the process's; the store is
// what makes it matter, so the store sets it.
void ReturnLargeBuffersWhenFreed() {
  [[maybe_unused]] static const int once = mallopt(M_MMAP_THRESHOLD, 128 * 1024);
}

}  // namespace trun::store
