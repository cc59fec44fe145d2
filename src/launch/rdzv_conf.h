// --rdzv-conf and --rdzv-endpoint -> rendezvous::Settings
// (rendezvous/options.h), and a checked LaunchConfig -> the rendezvous's
// Options: launch speaks rendezvous's language, not the other way round.
//
// torchrun hands --rdzv-conf to the backend as a dict, and each backend
// reads the keys it knows when it starts. trun types and checks every key it
// reads (docs/rendezvous.md, "Settings") here, beside the rest of the command
// line, so one run reports every problem and the agent starts only with
// valid values. A key trun does not read is accepted, as torch accepts it;
// one close to a key trun reads is warned about as a likely typo.
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/problems.h"
#include "launch/config.h"

namespace trun::launch {

// "k=v,k=v" as torchrun's _parse_rendezvous_config: keys and values trimmed,
// a blank text is no items; an empty item, or one without a key or a value,
// is a problem.
std::map<std::string, std::string> SplitRdzvConf(std::string_view text, Problems& p);

// Why `host` (brackets already taken off an IPv6 address) cannot be the
// store's host, or "": empty, a path or a URL ('/' in it), a space in it,
// an ASCII character other than a letter, a digit, '_', '.', ':' or '-', or
// bytes that are not UTF-8.
// torchrun refuses these too (its endpoint parser takes [\w.:-]); trun
// would otherwise look such a host up until the join timeout.
std::string HostProblem(std::string_view host);

// `s` (UTF-8) without what Python's str.strip() takes off either end, as
// torch strips an endpoint: kPythonSpace (int()'s), the separators
// \x1c-\x1f and Unicode's spaces (U+0085, U+00A0, U+2000-U+200A, ...).
std::string_view StripAsStr(std::string_view s);
// The same, at the front only (Python's lstrip()).
std::string_view LStripAsStr(std::string_view s);

// "host", "host:port", "[v6]:port", spaces around it taken off (none
// left: localhost, as torch's) -> s.endpoint_host and s.endpoint_port
// (`default_port` when the port is left out); a malformed endpoint or port
// is a problem that names it.
void SplitEndpoint(const std::string& given, int default_port, rendezvous::Settings& s,
                   Problems& p);

// One warning per key of `items` that trun does not read but that is close to
// one it does, and for a `timeout` that c's backend does not read (c10d's and
// etcd-v2's wait is join_timeout); names the key and the likely one, never
// the value (it may be a secret).
std::vector<std::string> RdzvConfWarnings(const std::map<std::string, std::string>& items,
                                          const LaunchConfig& c);

// `items` and the endpoint `c` names (c.rdzv_backend as --standalone left it,
// c.rdzv_endpoint, c.master_addr, c.master_port), typed for c's backend. Each
// bad value, and a bad endpoint, is a problem that names it.
rendezvous::Settings ParseRdzvSettings(const std::map<std::string, std::string>& items,
                                       const LaunchConfig& c, Problems& p);

// The rendezvous part of `c` (already checked by ParseLaunchArgs) and this
// node's part in the job, as the backends take them; node_id is fresh on
// every call (host, pid and a random part).
rendezvous::Options RdzvOptions(const LaunchConfig& c);

}  // namespace trun::launch
