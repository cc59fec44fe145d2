// Coordinator: the judge of a store-based rendezvous. It lives in the agent
// that hosts the store, on the store's loop, and hears of the nodes'
// messages as the store applies them (StoreServer::Observe): a join, a
// heartbeat, "ready for the next round", "my workers failed", "done". It
// decides when a round closes, who is in it and in which order, when a node
// is lost, and answers with writes to the store that the waiting nodes'
// WAITs pick up. A constant number of messages per node per round, no
// polling, and liveness judged on one clock: this one.
//
// Pure logic over a clock it is given, so its rules are unit-tested with a
// fake one; HostedCoordinator (hosted_coordinator.h) runs it on a loop with a
// timer, and each medium feeds it the nodes' messages. The
// key layout and the rules are documented in docs/rendezvous.md.
//
// Thread-safety: none; one thread (the store's loop) owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "rendezvous/rendezvous.h"

namespace trun::rendezvous {

using Clock = std::chrono::steady_clock;

struct CoordinatorOptions {
  std::string run_id;
  int min_nodes = 1;
  int max_nodes = 1;
  bool by_node_rank = false;  // static: order by --node-rank; c10d: by join order
  int max_restarts = 0;
  Duration join_timeout{600'000};
  Duration last_call_timeout{30'000};
  Duration close_timeout{30'000};
  // 0: liveness is the medium's business (etcd's leases), not heartbeats.
  Duration heartbeat_timeout{5'000};
  // Published in every round: the workers' store, and who hosts it.
  std::string store_addr;
  int store_port = 0;
  std::string host_id;
  // Where a store connection comes from, as the store saw it ("" when it
  // is gone); unset where the medium has no connections (etcd). Each round
  // write then says where its nodes' joins came from (Write::seen_from).
  std::function<std::string(uint64_t conn)> peer_of;
};

// round/<r>, as the coordinator writes it and whoever needs the whole round
// reads it: a JSON header line {"round", "failures", "store_addr",
// "store_port", "host"}, then one line per node in group-rank order, "<id>
// <addr> <nproc> <store_port> <health_port>". Lines rather than JSON
// objects: splitting lines costs a fraction of parsing JSON (ids and
// addresses never hold spaces; joins that do are refused).
struct RoundDoc {
  int64_t round = 0;
  int64_t failures = 0;
  std::string store_addr;
  int store_port = 0;
  std::string host;
  std::vector<Participant> nodes;
};
std::string EncodeRound(const RoundDoc& doc);
Result<RoundDoc> DecodeRound(std::string_view text);

// A node's place in a round: all that it needs to start its workers, so
// that no node must read the whole round (N nodes each reading N lines is
// N^2 bytes through one store: 5 GB at 10,000 nodes).
struct Placement {
  int64_t round = 0;
  int group_rank = 0;
  int nodes = 0;
  int world_size = 0;
  int rank_offset = 0;  // the global rank of the node's local rank 0
  int64_t failures = 0;
  std::string store_addr;  // the workers' store
  int store_port = 0;
  std::string host;    // the id of the node that hosts the coordinator
  int host_rank = -1;  // its group rank in this round; -1: it takes no part
};

// assign/<s>/<k>, the coordinator's answer to node s's k-th "ready", in
// ABNF (RFC 5234); nodes decode it here, once, into a Placement or a
// typed NoRound, so that nobody matches the message's words:
//   answer    = placement / no-round
//   placement = "{" *OCTET      ; a JSON object of Placement's fields, by name
//   no-round  = "error:" kind ":" message
//   kind      = "budget_spent" / "timed_out" / "other"   ; NoRound::Kind
//   message   = *OCTET          ; printed whole by the agent
// A decoded no-round's `why` is an internal error with the message.
using Assignment = std::variant<Placement, NoRound>;
std::string EncodeAssignment(const Assignment& answer);
Result<Assignment> DecodeAssignment(std::string_view text);

// A write the coordinator wants made, key relative to the rendezvous prefix.
// `if_absent`: only if the key does not exist yet (COMPARE_SET with "").
struct Write {
  std::string key;
  std::string value;
  bool if_absent = false;
  // A round/ write, with CoordinatorOptions::peer_of: for each of the
  // round's nodes in order, the address its join came from ("" unknown).
  // Never an address a node names: the store serves the round's hosts by
  // these where agents prove the job token (store_medium.cc).
  std::vector<std::string> seen_from{};
};

class Coordinator {
 public:
  Coordinator(CoordinatorOptions options, Clock::time_point now);

  // A key under the prefix changed; `conn` is the store connection that
  // changed it (0 for the coordinator's own writes).
  void OnKey(uint64_t conn, std::string_view key, std::string_view value, Clock::time_point now);
  // A store connection closed: a node whose connection it was is lost.
  void OnDisconnect(uint64_t conn, Clock::time_point now);
  // The medium says node `seq` is gone (etcd: its lease expired).
  void OnNodeGone(int64_t seq, const std::string& why, Clock::time_point now);
  // The deadline returned by NextDeadline() has passed.
  void OnTimer(Clock::time_point now);

  std::vector<Write> TakeWrites();
  std::optional<Clock::time_point> NextDeadline() const;

  // For tests and the health endpoint.
  int64_t round() const { return round_; }
  int64_t failures() const { return failures_; }
  size_t live_nodes() const { return live_; }
  // The job has ended (every node done, or failed for good): what is left
  // is for the nodes to read how.
  bool over() const { return phase_ == Phase::kFinished || phase_ == Phase::kFailed; }
  // A round's failure waits to be judged (until its nodes are back or
  // lost): whether the job is over is not known yet.
  bool judging() const { return pending_failure_.has_value(); }

 private:
  enum class Phase { kForming, kRunning, kFinished, kFailed };
  struct Node {
    int64_t seq = 0;
    std::string id;
    std::string addr;
    int nproc = 0;
    int node_rank = -1;
    int store_port = 0;       // its workers' store, where the medium has none
    int health_port = 0;      // its agent's health server, 0 for none
    int64_t prev_round = -1;  // before a takeover: its last round
    int prev_rank = -1;       // and its group rank in it
    std::string seen_from;    // where its join came from (peer_of)
    Clock::time_point last_seen;
    bool alive = true;
    bool left = false;
    bool waiting = false;      // asked for a round and not yet given one
    int64_t ready_count = 0;   // the number of its latest "ready"
    bool participant = false;  // in the running round
    bool done = false;         // its workers succeeded in the running round
    // Its workers succeeded in a round that then failed: its agent exits,
    // and it never asks for another round.
    bool finished = false;
    // Of the failed round being judged (pending_failure_): its loss makes
    // the failure a membership change.
    bool judged = false;
  };

  void OnJoin(int64_t seq, std::string_view info, Clock::time_point now);
  // The only ways a node's `alive`, `waiting` and `done` change, so that
  // the counts below (and awaited_) stay true and judging an event costs
  // O(1), not a walk over every node (N events of N nodes: N^2).
  void SetWaiting(Node& n, bool waiting);
  void SetDone(Node& n, bool done);
  void SetGone(Node& n);
  bool ExpectedAllBack() const;
  void Lose(Node& n, const std::string& why, Clock::time_point now);
  void EndRound(const std::string& reason);
  void OnRoundEnded(int64_t r, std::string_view reason, Clock::time_point now);
  void Evaluate(Clock::time_point now);
  void Close(std::vector<Node*> candidates);
  void Fail(NoRound::Kind kind, const std::string& message);
  void JudgeFailure();
  void AnswerErrors();
  std::string Describe(const Node& n) const;
  std::string TimeoutMessage(size_t joined) const;

  CoordinatorOptions options_;
  std::map<int64_t, Node> nodes_;
  std::map<uint64_t, int64_t> conn_to_seq_;
  size_t live_ = 0;     // nodes alive
  size_t waiting_ = 0;  // of them, waiting for a round
  size_t running_ = 0;  // participants of the running round alive
  size_t done_ = 0;     // of them, done
  // No node's heartbeat is due before this (a lower bound: last_seen only
  // grows), so that a heartbeat costs O(1); OnTimer makes it exact.
  std::optional<Clock::time_point> oldest_seen_;
  Phase phase_ = Phase::kForming;
  bool first_ = true;   // no round closed yet by this coordinator
  int64_t round_ = -1;  // the running (or last) round
  int64_t next_ = 0;    // the round being formed
  int64_t failures_ = 0;
  // Why the job cannot go on (kFailed, kFinished): every node that asks
  // for a round from then on is told this.
  NoRound::Kind error_kind_ = NoRound::Kind::kOther;
  std::string error_;
  Clock::time_point forming_since_;
  std::optional<Clock::time_point> min_reached_at_;
  // After a store takeover: the previous round's group ranks, less the lost
  // host's, that the first round waits for, and that round's number.
  std::set<int> expected_;
  int64_t expected_round_ = -1;
  std::vector<std::string> lost_;  // nodes lost since the last round closed
  // The last round ended in a failure not judged yet, how many of its
  // nodes (Node::judged) are neither back nor gone, and whether one of
  // them was lost since.
  std::optional<std::string> pending_failure_;
  size_t awaited_ = 0;
  bool judging_lost_ = false;
  std::vector<Write> writes_;
};

}  // namespace trun::rendezvous
