// A launcher job's stacks in one answer (issue 30): the agent asked with
// GET /stacks?scope=job reads its own workers (stacks.h) and asks the other
// agents of its current round for theirs, all at once and off its loop.
//
// Who is asked: only the nodes of the agent's own round, each at the
// address it took part in the round from (rendezvous::Participant::addr)
// and the health port it told in its join; never an address the request
// names. Each is asked as `trun stack` asks, proving the job token.
//
// The answer (docs/events.md, "A whole job's stacks") is a JSON array of
// node documents in group-rank order; a node that could not be asked keeps
// its place as
//
//   {"hostname": null, "run_id": ID, "node_rank": N, "round": R,
//    "address": "HOST:PORT" | null, "error": "why", "workers": []}
//
// so that nobody is dropped silently.
//
// Thread-safety: pure functions, except FetchPeerStacks, which blocks the
// calling thread (never the agent's loop) and may be called from any.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "rendezvous/rendezvous.h"

namespace trun::agent {

// How long the agent asks its peers for: the whole answer fits in 2 s.
inline constexpr std::chrono::milliseconds kJobStacksBudget{1500};
// The most of one peer's answer the agent reads: a node of 8 workers with a
// hundred threads of 50 frames each is under 4 MiB. A larger one is named
// as too large, so a peer cannot make the agent hold more.
inline constexpr size_t kMaxNodeStacksBytes = size_t{4} << 20;

// Another node of the round.
struct PeerNode {
  int node_rank = 0;
  std::string address;  // its health server, HOST:PORT or [V6]:PORT; "" for none
};

// Whether `j` has the shape of a node's stacks document (an object with a
// "workers" array), as every answer of a peer or an agent must.
bool IsNodeDocument(const nlohmann::json& j);

// HOST:PORT, with an IPv6 literal in brackets.
std::string HostPort(const std::string& host, int port);

// The round's nodes other than this one (round.group_rank), in group-rank
// order.
std::vector<PeerNode> PeersOf(const rendezvous::Round& round);

// GET /stacks?scope=`scope` (stacks.h's FetchStacks) of every peer at
// once (at most 32 at a time), proving `token`
// where one asks for it, each answer read up to `max_bytes`; returns after
// `budget` at the latest, a peer not done by then answered with a Timeout.
// One Result per peer, in the peers' order.
std::vector<Result<nlohmann::json>> FetchPeerStacks(const std::vector<PeerNode>& peers,
                                                    const std::string& token,
                                                    const std::string& scope,
                                                    std::chrono::milliseconds budget,
                                                    size_t max_bytes);

// The job's answer: `local` (this node's document) at `local_node_rank`,
// each peer's document or, where it failed or is not a node's document,
// the placeholder above; ordered by node rank.
nlohmann::ordered_json MergeJobStacks(nlohmann::ordered_json local, int local_node_rank,
                                      const std::vector<PeerNode>& peers,
                                      std::vector<Result<nlohmann::json>> answers);

}  // namespace trun::agent
