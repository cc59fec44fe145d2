// The job token: how trun's agents prove to the store that hosts their
// rendezvous that they belong to the job, without the token crossing the
// network and without a proof that can be used twice.
//
// The exchange, in TCPStore requests any client can send (so torch's own
// clients, the workers, are untouched; they never touch trun's keys):
//
//   agent:  COMPARE_SET  /trun/auth/nonce  expected ""  desired ""
//   store:  NONCE        32 random bytes, hex; fresh for this connection
//           ("" from a store that asks for no token: it answers as any
//            store would, having set the key to "")
//   agent:  COMPARE_SET  /trun/auth/proof  expected NONCE  desired PROOF
//           PROOF = hex(HMAC-SHA-256(key = token, "trun-job-token-v1\n" NONCE))
//           (an agent without a token sends an empty PROOF, so that the
//            store's log says why it was refused)
//   store:  "ok", or "refused: <why>" and the connection is closed
//
// Until a connection has proved itself, a request that names a key under
// trun's prefix (/trun/) closes it, with one log line on the store's side.
// The nonce is used once: a proof replayed on another connection, or twice
// on one, is refused. HMAC-SHA-256 is libsodium's (crypto_auth_hmacsha256),
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

class StoreClient;

// The agent's side of the exchange, on a fresh connection to the store that
// hosts the rendezvous (`where` names it in messages). With no token, it
// checks that the store asks for none. PermissionDenied when the store
// refuses the token or asks for one this agent lacks, InvalidArgument when
// the agent has a token the store does not ask for; each names the fix.
Status ShowJobToken(StoreClient& client, const std::string& token, const std::string& where);

// A fresh job token for `trun run` to give a job's agents: 32 random bytes,
// hex.
std::string NewJobToken();

// The tokens a job's agents may be given: 16 to 1024 printable ASCII
// characters without spaces. InvalidArgument names the problem, never the
// token.
Status CheckJobToken(std::string_view token);

}  // namespace trun::store
