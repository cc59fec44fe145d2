// Who may use the stores an agent hosts (docs/rendezvous.md, "Who may use
// the store"): torch's workers are the store's clients and carry no
// credential, so the store serves in full only the hosts of the job's
// current round, plus loopback and this host's own addresses. A host of the
// round is where its agent's proven connection came from where agents prove
// the job token (the store medium fills each participant's `addr` so), and
// the address the agent advertised otherwise (no token: nothing is proven). `--rdzv-conf
// store_allow` widens it: `any`, or networks separated by ';' (the ',' separates
// --rdzv-conf's own items).
//
// Thread-safety: pure functions (AllowlistFor resolves host names through
// the OS's resolver).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/server.h"

namespace trun::rendezvous {

struct Participant;

struct StoreAccess {
  bool any = false;                   // store_allow=any: everyone, as torch's store
  std::vector<store::Network> extra;  // store_allow=CIDR;...: served besides the round's hosts
};

// From --rdzv-conf store_allow; an InvalidArgument names a bad value.
Result<StoreAccess> ParseStoreAccess(const std::map<std::string, std::string>& rdzv_configs);

// The allowlist of a store whose round has `members` (none before the first
// round closes); nullopt where `access` lets everyone in. A member's addr
// that is a name is resolved here, to every address it has; an empty one
// (its connection closed before the store saw where from) adds nothing.
std::optional<store::Allowlist> AllowlistFor(const StoreAccess& access,
                                             const std::vector<Participant>& members,
                                             std::string strangers_prefix);

}  // namespace trun::rendezvous
