// What the store sets and reads of its whole process: the open-file limit
// that bounds its clients, and glibc's mmap threshold that lets it return
// the large buffers clients make it grow (server.cc).
//
// Thread-safety: any thread; RaiseOpenFileLimit changes the process's
// limit, which the caller means to happen once, at start.
#pragma once

#include <cstddef>

namespace trun::store {

// Raises the soft open-file limit to the hard one, so that thousands of
// clients can connect. Returns the new soft limit.
size_t RaiseOpenFileLimit();

// ServerOptions::max_connections' default (server.h): the open-file limit
// less a reserve for the process's own descriptors; SIZE_MAX where the
// limit is infinite or unknown.
size_t DefaultMaxConnections();

// Keeps every heap buffer of 128 KiB or more in a mapping of its own, so
// that a freed one goes back to the system. Idempotent.
void ReturnLargeBuffersWhenFreed();

}  // namespace trun::store
