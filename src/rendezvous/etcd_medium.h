// EtcdMedium: the etcd backend's medium (`--rdzv-backend etcd` or
// `etcd-v2`): the same conversation and the same coordinator as the store
// backends (docs/rendezvous.md), carried by an etcd cluster instead of an
// agent's store, so no agent is the one whose loss ends the job.
//
// Who coordinates: the agent that creates the key `coord` (create-if-absent,
// under its own lease) runs the coordinator on its loop, fed by one watch of
// the run's keys; its epoch is that key's create revision, and every other
// key of the conversation lives under `e<epoch>/`, so an old coordinator's
// keys never confuse a new one. When the coordinator's agent dies its lease
// expires, `coord` vanishes, every node's wait sees it, and the first to
// create it anew coordinates; all join again under the new epoch, carrying
// the round number and spent restarts, exactly as after a store takeover.
//
// Liveness is etcd's: each node's join keys are under a lease of
// `heartbeat_timeout` that its control thread keeps alive, so a dead or cut
// off node's keys expire and the coordinator hears of it from the watch.
// The coordinator's own writes are under its lease: when it goes, they go.
//
// Workers' store: every agent hosts one for its workers, and a round's
// workers use the one of its group rank 0 (its advertised address and port).
//
// Thread-safety: as Medium.
#pragma once

#include <asio.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "rendezvous/etcd_client.h"
#include "rendezvous/medium.h"
#include "rendezvous/rendezvous.h"

namespace trun::rendezvous {

std::unique_ptr<Medium> MakeEtcdMedium(asio::io_context& io, const Options& options);

// The coordinator's host's view of the nodes' join keys (join/<lease>, each
// put by one node under that lease, of its own, as it joins): the revision
// of a put is that node's sequence number (node/<seq> to the coordinator),
// which a node learns only from the put's answer, so the key is named by
// its lease. A deletion (the lease ended or was revoked) ends the node of
// that number; so does a put over the key (another number for the same
// lease, which trun's nodes never make).
// Thread-safety: none; the host's watcher thread owns it.
class JoinKeys {
 public:
  struct Heard {
    std::optional<int64_t> gone;    // this sequence number's node is gone
    std::optional<int64_t> joined;  // and this one joined
  };
  Heard OnPut(const std::string& key, int64_t revision);
  Heard OnDelete(const std::string& key);

 private:
  std::map<std::string, int64_t> seq_of_;
};

}  // namespace trun::rendezvous
