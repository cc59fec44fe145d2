// Host names as the launcher needs them.
// Thread-safety: pure functions over the OS's resolver.
#pragma once

#include <string>

namespace trun {

// This host's fully qualified name, chosen as Python's socket.getfqdn() does
// (torchrun puts that in MASTER_ADDR and in the failure table).
std::string FqdnHostname();

// Whether `host` (a name or a literal) names this host: it resolves to an
// address a socket here can bind. torchrun's c10d backend asks the same to
// decide which agent hosts the store.
bool IsLocalAddress(const std::string& host);

}  // namespace trun
