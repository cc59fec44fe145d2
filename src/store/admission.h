// Admission: which requests a connection to trun's store may make, judged
// by every key each request reads or writes. One table holds a row per
// operation of both protocol generations; the server asks Admit() before it
// handles anything, so no request is classified anywhere else.
//
// Two rules meet here:
// - The job token (auth.h): where the store asks for one, a connection that
//   has not proved it may not name any of trun's keys (/trun/...) in any
//   request, writes and waits included (BARRIER writes its key), and the
//   requests that read the whole store (GETNUMKEYS, LIST_KEYS) are answered
//   as if trun's keys were not there, so that neither the run id nor the
//   round leaks. Requests that touch no key (VALIDATE, PING, CANCEL_WAIT)
//   are open to all: torch's workers never prove anything.
// - The allowlist's strangers (server.h, Allowlist::strangers_prefix): a
//   connection from outside the round may use only the rendezvous's keys,
//   and only the operations a join makes.
//
// Thread-safety: pure functions over a constant table.
#pragma once

#include <string_view>

#include "store/parser.h"

namespace trun::store {

// Which of a request's args (Request::args) are keys.
enum class KeyArgs {
  kNone,        // names no key and reads none: VALIDATE, PING, CANCEL_WAIT
  kFirst,       // the key, then values: SET, GET, ADD, BARRIER, the queues, ...
  kAll,         // every arg: CHECK, WAIT, MULTI_GET
  kEveryOther,  // key, value, key, value, ...: MULTI_SET
  kWholeStore,  // names none but reads every key: GETNUMKEYS, LIST_KEYS
};

struct OpRule {
  Op op;
  KeyArgs keys;
  // Whether it changes the keys it names (documentation for the table's
  // reader, and the unit test's: BARRIER does).
  bool writes;
  // Whether a stranger may send it on the rendezvous's keys: what a join
  // needs, and nothing that reads or counts the whole store.
  bool for_strangers;
};

// The row of `op`; nullptr for an op the table lacks (a unit test walks
// every op and requires a row).
const OpRule* RuleFor(Op op);

// Where a connection stands when it sends a request.
struct Standing {
  bool token_asked = false;  // the store asks for the job token
  bool proven = false;       // this connection has shown it
  // The allowlist's strangers_prefix ("" when there is none), and whether
  // this connection is kept to it.
  std::string_view strangers_prefix;
  bool stranger = false;
};

enum class Verdict {
  kServe,           // as any TCPStore would
  kServeUntrun,     // serve, leaving trun's keys out of the answer
  kAuthNonce,       // the job token's exchange, step 1 (auth.h)
  kAuthProof,       // step 2
  kRefuseTrunKeys,  // names trun's keys without the token: close
  kRefuseStranger,  // outside what a stranger may do: close
};

struct Admission {
  Verdict verdict = Verdict::kServe;
  // With a strangers_prefix: the request reaches beyond it (the server
  // closes, rather than demotes, a member's connection that did this once
  // its host leaves the round).
  bool beyond_prefix = false;
  // The request names a key outside trun's (/trun/): a worker's, never an
  // agent's (the server closes such connections between rounds).
  bool names_other_keys = false;
};

// The verdict on `r` from a connection standing as `s`. `r` must be a
// request the parser produced (its args as its op's grammar has them).
Admission Admit(const Request& r, const Standing& s);

// Whether `key` is one of trun's own (under kTrunKeys).
bool IsTrunKey(std::string_view key);

}  // namespace trun::store
