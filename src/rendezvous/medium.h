// Medium: what a store-like rendezvous needs of the thing its nodes and
// their coordinator talk through: trun's own store (StoreMedium, the static
// and c10d backends) or etcd (EtcdMedium). The participant's logic
// (participant.h) and the coordinator's rules (coordinator.h) are the same
// over both; only hosting the coordinator, joining, waiting for a key and
// liveness differ.
//
// Keys given to a Link are relative to the rendezvous's prefix; the medium
// puts its own prefix (and, for etcd, the coordinator's epoch) before them.
//
// Thread-safety: a Link belongs to one thread, except Abort(), which any
// thread may call. Medium's methods say which thread calls them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "rendezvous/coordinator.h"
#include "store/auth.h"

namespace trun::rendezvous {

inline constexpr Duration kNoOpTimeout = std::chrono::hours(24 * 365);

// Every key that trun's rendezvous writes in a store starts with this.
using store::kTrunKeys;

class Link {
 public:
  virtual ~Link() = default;
  // Registers this node with `info` (the JSON of docs/rendezvous.md);
  // returns its sequence number, which orders joins.
  virtual Result<int64_t> Join(const std::string& info) = 0;
  virtual Status Put(const std::string& key, const std::string& value) = 0;
  // Sets `key` only if it does not exist yet (the first of several wins).
  virtual Status PutIfAbsent(const std::string& key, const std::string& value) = 0;
  // Waits, without polling, until `key` exists; returns its value. Returns
  // an error if the medium fails or Abort() is called.
  virtual Result<std::string> Await(const std::string& key) = 0;
  // Tells the coordinator this node is alive (the medium may need nothing:
  // etcd's leases do it).
  virtual Status Heartbeat(int64_t seq) = 0;
  virtual void Abort() = 0;
  // The address this host reaches the medium from.
  virtual std::string LocalAddress() const = 0;
};

class Medium {
 public:
  virtual ~Medium() = default;
  // Loop thread, once, before any Connect: hosts the coordinator here if
  // this node is the one that should. An error is fatal (a usage error if
  // InvalidArgument).
  virtual Status Start() = 0;
  // Main or control thread: a link, trying until `deadline`. Each of the
  // link's requests fails after `op_timeout` without an answer: the control
  // thread's heartbeats must notice a host cut off from the network, which
  // keeps the connection open; the main thread's waits may last as long as
  // the job does (kNoOpTimeout).
  virtual Result<std::unique_ptr<Link>> Connect(Clock::time_point deadline,
                                                Duration op_timeout) = 0;
  // Main thread, after the coordinator's host was lost: whether this node
  // may try to host it, and the try (true: this node hosts now).
  virtual bool MayTakeOver() const = 0;
  // Whether the first host, too, is whoever takes over first (etcd), rather
  // than the one Start() chose (the store's host binds its port there).
  virtual bool ElectedAtConnect() const { return false; }
  // `stopping` says the agent is shutting down (the loop may be joining
  // this very thread): give up then.
  virtual bool TakeOver(const std::function<bool()>& stopping) = 0;
  // For messages: "the store at HOST:PORT", "etcd at URL".
  virtual std::string Where() const = 0;
  // What a node cannot reach when nobody could take over, and why.
  virtual std::string NoTakeOverReason() const = 0;
  // The port of the store this agent hosts for its workers when the
  // coordinator's host does not serve them (etcd: group rank 0's agent
  // does); 0 when it does.
  virtual int WorkerStorePort() const { return 0; }
  // Loop thread, when this node asks for a new round, its workers stopped:
  // the store it hosts for its workers (WorkerStorePort) forgets their keys
  // (StoreServer::ForgetLastRound says why). A medium whose coordinator serves
  // the workers does so when it closes a round instead.
  virtual void ForgetWorkerKeys() {}
  // Main thread: whether this node, at `group_rank`, needs the round's
  // whole list of nodes for OnRound (Round::participants) where the round
  // is too large for every node to read it.
  virtual bool WantsMembers(int /*group_rank*/) const { return false; }
  // Loop thread, when this node learns of a round it takes part in, before
  // the agent starts its workers: the store it hosts for its workers
  // (WorkerStorePort) serves that round's hosts (store_access.h).
  virtual void OnRound(const Round&) {}
  // Loop thread, once this node's threads have stopped: `then` runs on the
  // loop when nobody needs what this node hosts any more (Rendezvous::Leave),
  // at once where it hosts nothing or the job goes on without it.
  virtual void Linger(Duration limit, std::function<void()> then) = 0;
  // Loop thread, at shutdown: stop hosting.
  virtual void Stop() = 0;
};

}  // namespace trun::rendezvous
