// What a rendezvous backend needs, owned here: the launcher (launch/) fills
// it from its command line (launch/rdzv_conf.h), so that the arrow runs
// from launch to rendezvous and never back.
//
// Thread-safety: plain values.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "rendezvous/etcd_client.h"
#include "rendezvous/store_access.h"

namespace trun::rendezvous {

using Duration = std::chrono::milliseconds;

// Where the rendezvous is and how long it waits: --rdzv-endpoint (or
// --master-addr/--master-port) and --rdzv-conf, typed and checked by
// launch::ParseRdzvSettings, with the chosen backend's defaults in place of
// what the command line left out.
struct Settings {
  using Ms = std::chrono::milliseconds;
  // static: --master-addr:--master-port; c10d: --rdzv-endpoint HOST[:PORT]
  // (localhost:29400 by default). Unused by etcd.
  std::string endpoint_host;
  int endpoint_port = 0;
  // etcd: the servers of --rdzv-endpoint as URLs (schemed by `protocol`), the
  // TLS files, and where the run's keys live (no trailing '/').
  EtcdOptions etcd;
  std::string etcd_prefix = "/torchelastic/p2p";
  // join_timeout (static and etcd: torchrun's `timeout`, 900 s by default).
  Ms join_timeout{600'000};
  Ms last_call_timeout{30'000};
  Ms close_timeout{30'000};
  // heartbeat_*, or torch's keep_alive_interval and keep_alive_max_attempt.
  Ms heartbeat_interval{1'000};
  Ms heartbeat_timeout{5'000};
  std::optional<bool> is_host;  // c10d; unset: whether the endpoint is this host
  StoreAccess store_access;     // store_allow
  // The job token the agents prove to the rendezvous's store (store/auth.h):
  // job_token_file, job_token or $TRUN_JOB_TOKEN; "" for none. Never logged.
  std::string job_token;
  // The token is one the agent made for itself (a one-node job given none):
  // nobody else knows it, so it guards only trun's store keys.
  bool job_token_own = false;
};

// Everything a backend needs: the settings, and this node's part in the job
// (launch::RdzvOptions fills it from the launch flags).
// Options::listed_nodes's default, and the largest round whose events name
// every node (docs/events.md): beyond it an event line would grow with the
// job (10,000 ids at 10,000 nodes).
inline constexpr int kListedNodes = 256;

struct Options : Settings {
  std::string backend;  // static | c10d | etcd (etcd-v2 is the same)
  std::string run_id;
  std::string node_id;  // this agent's: host, pid and a random part
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc = 1;
  int max_restarts = 0;
  int node_rank = 0;       // static
  std::string local_addr;  // --local-addr; empty: the address the store sees us from
  // This agent's health server's port, told to the other nodes in its
  // join (docs/rendezvous.md); 0 for none.
  int health_port = 0;
  // How long a leaving host serves the others' last reads (Leave): their
  // workers' shutdown grace plus a heartbeat timeout.
  Duration linger{35'000};
  // static's MASTER_PORT given by flag: bind exactly that port.
  bool port_given = false;
  // Rounds of up to this many nodes are read whole by every node
  // (Round::participants); in larger ones each node reads only its own
  // placement, as every node reading the list costs N^2 bytes.
  int listed_nodes = kListedNodes;

  // A job of one node that hosts its workers' store alone (a one-node
  // static or --standalone job) has nothing to agree on: Make() returns an
  // in-process backend whose store binds `port` (0: a free one, else the
  // --master-port given) and which its workers reach at `addr`.
  struct SingleNode {
    std::string addr;
    int port = 0;
  };
  std::optional<SingleNode> single_node;
};

}  // namespace trun::rendezvous
