// Who may use a store: torch's clients carry no credential, so the store
// tells its own job's hosts from others by their address. The peer address
// a connection comes from is checked at accept, before any of its bytes are
// read; what a stranger may then do is the admission rule's (admission.h).
//
// Thread-safety: Network and ParseNetworks are pure; a Members is used on
// one thread (the store's loop).
#pragma once

#include <asio.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace trun::store {

struct Network {
  asio::ip::address address;
  int prefix_length = 0;  // 32 or 128: one address
  bool Contains(const asio::ip::address& a) const;
};
// "any" -> nullopt (everyone); otherwise a comma-separated list of CIDRs or
// addresses ("10.0.0.0/8,192.168.1.7"), as TRUN_STORE_ALLOW takes them. An
// InvalidArgument names what is wrong.
Result<std::optional<std::vector<Network>>> ParseNetworks(const std::string& spec);

struct Allowlist {
  // The hosts served in full; loopback and this host's own addresses too
  // while local_always (tests turn it off, to be refused over loopback).
  std::vector<Network> networks;
  bool local_always = true;
  // "": anyone else is refused at accept, with one log line. Otherwise
  // anyone else is served only requests whose every key starts with this
  // (a rendezvous's join traffic) and is dropped at the first other one;
  // requests that read the whole store (NUM_KEYS, LIST_KEYS) and BARRIER,
  // which no join sends, are refused to them too (admission.h).
  std::string strangers_prefix;
  // Named in the log line of a refusal: how to widen the list.
  std::string widen_hint = "the allowlist of whoever started this store widens it";
};

// The allowlist in force (none: everyone is a member), with this host's own
// addresses looked up once per peer address until the list changes.
class Members {
 public:
  void Set(std::optional<Allowlist> allowlist);
  const std::optional<Allowlist>& allowlist() const { return allow_; }
  // Whether a client from `a` is served in full.
  bool Contains(const asio::ip::address& a);
  // Whether a client that is no member may stay, kept to the strangers'
  // prefix.
  bool StrangersServed() const { return allow_ && !allow_->strangers_prefix.empty(); }

 private:
  std::optional<Allowlist> allow_;
  std::unordered_map<std::string, bool> local_cache_;  // peer -> one of ours
};

}  // namespace trun::store
