// Host names as the launcher needs them, and listening sockets.
// Thread-safety: pure functions over the OS's resolver, safe from any
// thread; ListenTcp touches only the acceptor it is given.
#pragma once

#include <netdb.h>

#include <asio.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace trun {

// This host's fully qualified name, chosen as Python's socket.getfqdn() does
// (torchrun puts that in MASTER_ADDR and in the failure table). Looked up
// on the first call; later calls return the same. Thread-safe.
std::string FqdnHostname();

// Whether `host` (a name or a literal) names this host: it resolves to an
// address a socket here can bind. torchrun's c10d backend asks the same to
// decide which agent hosts the store.
bool IsLocalAddress(const std::string& host);

// `a`, or the IPv4 address it maps where it is one (an IPv4 peer of a
// dual-stack socket arrives as ::ffff:a.b.c.d).
asio::ip::address Unmapped(const asio::ip::address& a);

// The address and port of socket `fd`'s own end (`peer` false) or of the
// other end (`peer` true) as "a.b.c.d:P" or "[v6]:P", an IPv4 address
// mapped into IPv6 written as IPv4, so that both ends of one connection
// write its address alike; "" when the socket has none.
std::string SocketEndpoint(int fd, bool peer);

// The stream addresses of `host`:`port`, looked up by `deadline`. A name's
// lookup may wait on DNS for many seconds, past any budget the caller has,
// so one not done by then is left to end on a thread of its own and the
// answer is a Timeout; an IP literal is read at once. A name that does not
// resolve is an InvalidArgument with the resolver's words.
using AddressList = std::unique_ptr<addrinfo, void (*)(addrinfo*)>;
Result<AddressList> ResolveWithin(const std::string& host, const std::string& port,
                                  std::chrono::steady_clock::time_point deadline);

// Opens, binds (SO_REUSEADDR) and listens `acceptor` on `host`:`port`. ""
// or "::" is every address, IPv6 and IPv4 at once (IPv4 alone where the
// kernel has IPv6 off), as torch's libuv store listens; anything else must
// be an IP literal. `what` names the server in errors: an InvalidArgument
// for a host that is not an IP, an IOError for a port that cannot be bound.
Status ListenTcp(asio::ip::tcp::acceptor& acceptor, const std::string& host, int port,
                 std::string_view what);

}  // namespace trun
