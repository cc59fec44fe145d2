// The job token: how trun's agents prove to the store that hosts their
// rendezvous that they belong to the job, without the token crossing the
// network and without a proof that can be used twice.
//
// The exchange, in TCPStore requests any client can send (so torch's own
// clients, the workers, are untouched; they never touch trun's keys). Each
// side proves to the other that it knows the token:
//
//   agent:  COMPARE_SET  /trun/auth/nonce  expected ""  desired ""
//   store:  NONCE        32 random bytes, hex; fresh for this connection
//           ("" from a store that asks for no token: it answers as any
//            store would, having set the key to "")
//   agent:  COMPARE_SET  /trun/auth/proof  expected NONCE
//                        desired PROOF " " AGENT_NONCE
//           PROOF = hex(HMAC-SHA-256(key = token, "trun-job-token-v1\n" NONCE))
//           AGENT_NONCE = 32 random bytes, hex, fresh for this exchange
//           (an agent without a token sends an empty desired, so that the
//            store's log says why it was refused)
//   store:  "ok " STORE_PROOF, or "refused: <why>" and the connection is
//           closed once that answer is sent
//           STORE_PROOF = hex(HMAC-SHA-256(key = token,
//                             "trun-job-token-v1\nstore\n" AGENT_NONCE "\n" NONCE))
//
// The agent trusts nothing it reads from the store until STORE_PROOF checks
// out: a process that holds the endpoint's port without the token (torch's
// own TCPStore, a plain store) answers NONCE with "" or an echo, and the
// proof with anything but a STORE_PROOF, and the agent stops with a message
// that names the cause. The agent proves itself only for a NONCE of 64 hex
// digits, which never starts with "store\n": a squatter cannot have an agent
// compute a STORE_PROOF for it.
//
// Until a connection has proved itself, a request that names a key under
// trun's prefix (/trun/) closes it, with a log line on the store's side (at
// most one a minute per source address and reason), and GETNUMKEYS and
// LIST_KEYS answer as if those keys were not there (admission.h has the
// rule for every request). The nonce is used once: a proof replayed on
// another connection, or twice on one, is refused. A refused proof closes
// its connection. HMAC-SHA-256 is libsodium's (crypto_auth_hmacsha256),
// compared in constant time.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace trun::store {

// Every key that trun's rendezvous writes in a store starts with this; a
// worker's key (torch's) never does.
inline constexpr const char* kTrunKeys = "/trun/";
inline constexpr const char* kAuthNonceKey = "/trun/auth/nonce";
inline constexpr const char* kAuthProofKey = "/trun/auth/proof";
inline constexpr const char* kAuthOk = "ok";

// A fresh nonce: 32 random bytes, hex.
std::string NewAuthNonce();

// hex(HMAC-SHA-256(token, "trun-job-token-v1\n" + nonce)).
std::string AuthProof(std::string_view token, std::string_view nonce);

// Whether `proof` is AuthProof(token, nonce), in constant time.
bool AuthProofMatches(std::string_view token, std::string_view nonce, std::string_view proof);

// The proof a client of an agent's HTTP server shows for the agent's nonce
// (GET /stacks, docs/events.md): AuthProof(token, "http\n" NONCE "\n"
// AGENT), AGENT the address and port the client's connection reached, as
// common/net.h's SocketEndpoint writes them. No other exchange proves a
// message of that form, so neither side of the store's can be made to
// compute it, nor it theirs; and since the agent checks AGENT against the
// address its own socket was reached at, a listener that a client was
// pointed at cannot pass the client's proof on to the real agent.
std::string HttpAuthProof(std::string_view token, std::string_view nonce, std::string_view agent);
bool HttpAuthProofMatches(std::string_view token, std::string_view nonce, std::string_view agent,
                          std::string_view proof);

// The store's answer to a good proof: "ok " + STORE_PROOF (above).
std::string AuthOkAnswer(std::string_view token, std::string_view agent_nonce,
                         std::string_view nonce);

// The store's side of the exchange, step 2: `nonce` is the one this
// connection was given ("" when none is outstanding: a nonce is good for
// one proof), `offered_nonce` the one the proof names, `offer` the agent's
// PROOF " " AGENT_NONCE. `answer` is the reply's value: "ok " STORE_PROOF,
// or "refused: <why>".
struct ProofAnswer {
  bool ok = false;
  std::string answer;
};
ProofAnswer AnswerProof(std::string_view token, std::string_view nonce,
                        std::string_view offered_nonce, std::string_view offer);

class StoreClient;

// The agent's side of the exchange, on a fresh connection to the store that
// hosts the rendezvous (`where` names it in messages): the agent proves the
// token, and checks that the store proves it too. With no token, it checks
// that the store asks for none. PermissionDenied when the store refuses the
// token, asks for one this agent lacks, or does not know the token (another
// process holds the port); InvalidArgument when the agent has a token and
// the store asks for none; each names the cause and the fix.
Status ShowJobToken(StoreClient& client, const std::string& token, const std::string& where);

// A fresh job token for `trun run` to give a job's agents: 32 random bytes,
// hex.
std::string NewJobToken();

// The tokens a job's agents may be given: 16 to 1024 printable ASCII
// characters without spaces. InvalidArgument names the problem, never the
// token.
Status CheckJobToken(std::string_view token);

}  // namespace trun::store
