// Host names as the launcher needs them.
// Thread-safety: pure functions over the OS's resolver.
#pragma once

#include <string>

namespace trun {

// This host's fully qualified name, chosen as Python's socket.getfqdn() does
// (torchrun puts that in MASTER_ADDR and in the failure table).
std::string FqdnHostname();

}  // namespace trun
