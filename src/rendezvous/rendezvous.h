// Rendezvous: how the agents of one job agree on a round (who takes part,
// in which order, where the workers' store is) and on when a round ends.
//
// The agent drives a Rendezvous from its event loop and hears back on that
// loop: Start() joins; `round` delivers each round the node takes part in
// (or, typed, why there will be none: NoRound); `round_ended` says the
// running round is over (a node's workers failed, a node joined or was
// lost), after which the agent stops its workers and calls Ready(). A node whose workers failed
// calls Failed() first, so that every node restarts, and the job's restart
// budget is spent once per failed round, not once per agent (torch's
// #108158). Succeeded() is the exit barrier.
//
// Backends: SingleNode (one node, nothing to agree on, in-process) and
// a Participant (participant.h) over a Medium: trun's own store for static
// and c10d (store_medium.h), an etcd cluster for etcd and etcd-v2
// (etcd_medium.h); see docs/rendezvous.md for the protocol.
//
// Thread-safety: every method is called on the agent's loop thread, and
// every handler runs there.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "rendezvous/options.h"

namespace trun::rendezvous {

// One node of a round.
struct Participant {
  std::string id;    // unique per agent: host, pid and a random part
  std::string addr;  // the address it reaches the others from
  int nproc = 0;     // its workers
  // The store its agent hosts for its workers, where the medium has no
  // common one (etcd); 0 otherwise.
  int store_port = 0;
  // Its agent's health server (--health-check-port), at `addr`; 0 for none.
  // How `GET /stacks?scope=job` reaches the round's other agents.
  int health_port = 0;
};

struct Round {
  // Job-wide, one more for every round; the workers' TORCHELASTIC_RESTART_COUNT,
  // so that torch's store prefix /worker/attempt_<N> is the same on every node.
  int64_t number = 0;
  int group_rank = 0;
  int nodes = 0;           // in the round
  int world_size = 0;      // the round's workers, all nodes together
  int rank_offset = 0;     // the global rank of this node's local rank 0
  std::string addr;        // this node's address, as it took part
  std::string store_addr;  // the workers' MASTER_ADDR
  int store_port = 0;      // and MASTER_PORT
  int64_t failures = 0;    // failed rounds so far, job-wide
  // Every node of the round in group-rank order, where this node read them:
  // rounds of at most Options::listed_nodes nodes, and group rank 0's (the
  // hang watch's judge asks every node; under etcd its store serves the
  // round's hosts); empty otherwise, as
  // each of N nodes reading an N-node list is N^2 bytes through one store
  // (docs/rendezvous.md, "Who reads the whole round").
  std::vector<Participant> participants;
};

// Why this node gets no round: the job cannot go on. The coordinator says
// it on the node's assign/ key (coordinator.h gives the grammar), the
// node's own side when its medium fails, a single node when its budget is
// spent; the agent acts on the kind and only prints the message.
struct NoRound {
  enum class Kind {
    kBudgetSpent,  // more rounds failed than --max-restarts allows
    kTimedOut,     // join_timeout passed: too few nodes ready, or none to reach
    // Any other: the job finished before this node had a round, two nodes
    // claim one --node-rank, the rendezvous's host was lost with nobody to
    // take over, the job token was refused, an answer was malformed.
    kOther,
  };
  Kind kind = Kind::kOther;
  // Never OK: the message users see, and the error kind it is reported as
  // (TRUN_ERROR_JSON).
  Status why;
};

// What the rendezvous answers a node that asks for a round.
using RoundOutcome = std::variant<Round, NoRound>;

// Why a running round ended. The rendezvous's nodes say it to each other as
// text (`end/<r>` in docs/rendezvous.md); the backend reads that text once,
// here, so that the agent acts on the cause and only prints the reason.
struct RoundEnd {
  enum class Cause {
    kMembership,   // a node joined, left or was lost: no restart is spent
    kPeerFailure,  // a node's workers failed
    kOther,        // a reason of no known kind
  };
  Cause cause = Cause::kOther;
  std::string reason;  // the whole text, for the log and the events

  // The cause from the protocol's text: "membership: ..." or
  // "failure: <node>: ...".
  static RoundEnd FromWire(std::string reason);
};

// The cause as the agent's events and metrics name a restart's cause:
// "membership", "peer_failure" or "round_ended".
std::string_view CauseName(RoundEnd::Cause cause);

class Rendezvous {
 public:
  struct Handlers {
    std::function<void(RoundOutcome)> round;
    std::function<void(const RoundEnd& end)> round_ended;
  };
  virtual ~Rendezvous() = default;

  // Binds what this node hosts and joins; the handlers fire later.
  virtual Status Start(Handlers handlers) = 0;
  // This node's workers failed in the running round: end it for everyone.
  virtual void Failed(const std::string& reason) = 0;
  // This node's workers are stopped: put the node in the next round.
  virtual void Ready() = 0;
  // This node's workers all succeeded: `done` runs once every node of the
  // round has succeeded, or the round ended otherwise (then this node is
  // done all the same).
  virtual void Succeeded(std::function<void()> done) = 0;
  // Leaves the job and stops the backend's threads; no handler runs after.
  virtual void Shutdown() = 0;
  // Leaves the job as Shutdown() does, but a node that hosts the
  // rendezvous keeps serving while the job is over and other nodes have yet
  // to read how it ended (a failed job's last answers, the exit barrier's
  // end), at most Options::linger; then `then` runs on the loop. Without
  // this, the host's exit would race the others' last reads, and they would
  // take the closed store for a lost host.
  virtual void Leave(std::function<void()> then) {
    Shutdown();
    then();
  }
};

// The backend `options` ask for: SingleNode where options.single_node is
// set, a Participant over the backend's medium otherwise.
Result<std::unique_ptr<Rendezvous>> Make(asio::io_context& io, Options options);

}  // namespace trun::rendezvous
