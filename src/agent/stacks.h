// Every worker's Python stacks, read from outside (proc/pystack.h), as the
// agent's GET /stacks and `trun stack` show them; and who may ask.
//
// The document (JSON; docs/events.md, "Stacks"), one per node:
//
//   {"hostname": H, "run_id": ID, "node_rank": N|null, "round": R|null,
//    "workers": [{"rank": 0, "local_rank": 0, "pid": 123,
//                 "status": "running",          ; /health's, or "" outside an agent
//                 "process_state": "S",         ; /proc/PID/stat's letter
//                 "cpu_seconds": 1.52,          ; user + system
//                 "python": "3.11.2" | null,
//                 "error": null | "why no stack",
//                 "threads": [{"native_id": 123, "thread_id": 1407..., "name": "python3",
//                              "partial": false,
//                              "frames": [{"function": "inner", "file": "train.py",
//                                          "line": 6}, ...]}]}]}   ; innermost first
//
// With a job token, GET /stacks is a challenge and a proof
// (store/auth.h's HttpAuthProof): a request without a good proof is 401
// with a fresh nonce in `X-Trun-Nonce`; the client asks again with
// `?nonce=NONCE&agent=AGENT&proof=PROOF`, AGENT the address and port its
// connection reached. A nonce is the time it was made, a random part and
// this agent's MAC of both, good for 30 s: the agent keeps no state for a nonce until
// it is proved, so no number of nonce requests, from however many
// addresses, can push an honest client's nonce out. A proved nonce is
// remembered until it expires, so each is good once.
//
// Thread-safety: StacksGate is owned by the agent's loop thread; the free
// functions are safe from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trun::agent {

// A worker whose stacks are wanted.
struct StackTarget {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  std::string status;  // running | succeeded | failed | stopped, "" if unknown
};

struct StacksMeta {
  std::string hostname;
  std::string run_id;
  std::optional<int> node_rank;
  std::optional<int64_t> round;
};

// Reads each running target (a target that is not running is listed with
// its status and no threads) and makes the document above.
nlohmann::ordered_json ReadStacks(const std::vector<StackTarget>& targets, const StacksMeta& meta);

// The workers below process `root` (its descendants, by /proc/PID/task/*/
// children): each that a trun agent among them lists in its RankTable, or
// whose environment names a RANK, with that rank and LOCAL_RANK; where
// none does (a plain program), every descendant that is a Python.
// Processes that cannot be read are left out.
std::vector<StackTarget> RankedDescendants(pid_t root);

// An agent's table of its workers' ranks, for `trun stack HANDLE`: a warm
// worker gets its RANK after the fork, which /proc/PID/environ (the
// environment a process started with) does not show. The agent keeps the
// table in a memfd named "trun-ranks" (close-on-exec: no worker holds
// it), one "PID RANK LOCAL_RANK" line per worker; a process of the same
// user reads it through /proc/AGENT/fd/N, nothing on the file system.
//
// Thread-safety: none; the agent's loop thread.
class RankTable {
 public:
  RankTable();  // without a memfd (none to be had) nothing is published
  ~RankTable();
  RankTable(const RankTable&) = delete;
  RankTable& operator=(const RankTable&) = delete;
  // Replaces the table with `workers` (an attempt's).
  void Publish(const std::vector<StackTarget>& workers);

 private:
  int fd_ = -1;
};

// The table process `pid` publishes; empty when it publishes none.
std::vector<StackTarget> ReadRankTable(pid_t pid);

// The environment of process `pid` as it was started (/proc/PID/environ:
// what the process set later is not there); empty when it cannot be read.
std::map<std::string, std::string> ProcessEnvironment(pid_t pid);

// The workers of a replica whose process is `root`: RankedDescendants(root)
// (trun's or torchrun's agent), else `root` itself as rank 0 (a replica
// that is the program, a plain `python`).
std::vector<StackTarget> ReplicaWorkers(pid_t root);

// Every process below `root` (by /proc/PID/task/*/children), parents
// before their children; bounded in depth and number.
std::vector<pid_t> Descendants(pid_t root);

// The body of a node's GET /stacks answer: `doc` as JSON, or, where that
// is over `max_bytes` (what a peer reads of it, job_stacks.h), the same with
// each worker's main thread only and "trimmed" saying so, so that a node of
// many threads still shows where each rank is (the hang report needs no
// more) rather than being read as no answer at all.
std::string NodeStacksBody(nlohmann::ordered_json doc, size_t max_bytes);

// Sorts node documents by the lowest rank among each node's workers, so
// that a job's stacks read rank 0 first whatever order the nodes were asked
// in (a replica's index is not its group rank); a node without ranked
// workers goes last, the order among equals kept.
void OrderNodesByRank(std::vector<nlohmann::json>& nodes);

// The documents of every node as text for people: per worker a heading
// (host, rank, local rank, pid, state, CPU), then each thread's frames,
// outermost last, as Python's tracebacks name them.
std::string FormatStacks(const std::vector<nlohmann::json>& nodes);

class StacksGate {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kNonceLifetime{30};
  // Proved nonces remembered at once (each for its lifetime, 76 bytes):
  // only a holder of the token adds to them, and one asking faster than
  // this is refused until some expire.
  static constexpr size_t kMaxSpent = 4096;

  // `token` "": the job has none and every request is let in.
  explicit StacksGate(std::string token);

  bool open() const { return token_.empty(); }
  // A fresh nonce to prove the token for: hex digits, the same length each.
  std::string Challenge(Clock::time_point now) const;
  // Whether `proof` proves the token for `nonce`, a nonce of this gate's not
  // older than kNonceLifetime and not proved before, and for `agent`, the
  // address and port the request's connection reached (SocketEndpoint).
  bool Admit(std::string_view nonce, std::string_view proof, std::string_view agent,
             Clock::time_point now);

 private:
  std::string token_;
  std::string secret_;  // signs nonces; never leaves the gate
  std::map<std::string, Clock::time_point, std::less<>> spent_;  // nonce, made at
};

// GET /stacks of the agent whose health server is `address` (HOST:PORT,
// [V6]:PORT), proving `token` when it asks for one; the whole exchange
// within `timeout`. `scope`: "" for the node's document, "job" for every
// node's in an array (job_stacks.h), "hang" for its hang watch (hang.h's
// HangAnswer). A reply of more than `max_bytes` is not read
// on. Every failure names the address and what to do.
Result<nlohmann::json> FetchStacks(const std::string& address, const std::string& token,
                                   std::chrono::milliseconds timeout, std::string_view scope,
                                   size_t max_bytes);

// The value of `key` in a request target's query ("/stacks?nonce=a&proof=b"),
// "" when absent.
std::string QueryValue(std::string_view target, std::string_view key);

}  // namespace trun::agent
