#include "store/auth.h"

#include <fmt/format.h>
#include <sodium.h>

#include <algorithm>

#include "store/client.h"

namespace trun::store {
namespace {

constexpr std::string_view kContext = "trun-job-token-v1\n";

std::string Hex(const unsigned char* bytes, size_t n) {
  std::string out(n * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), bytes, n);
  out.pop_back();
  return out;
}

std::string RandomHex(size_t n) {
  // sodium_init is idempotent and thread-safe; it picks the random source.
  if (sodium_init() < 0) std::abort();
  std::string bytes(n, '\0');
  randombytes_buf(bytes.data(), n);
  return Hex(reinterpret_cast<const unsigned char*>(bytes.data()), n);
}

}  // namespace

std::string NewAuthNonce() { return RandomHex(32); }

std::string NewJobToken() { return RandomHex(32); }

std::string AuthProof(std::string_view token, std::string_view nonce) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(token.data()),
                              token.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(kContext.data()),
                                kContext.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(nonce.data()),
                                nonce.size());
  unsigned char mac[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256_final(&st, mac);
  return Hex(mac, sizeof mac);
}

bool AuthProofMatches(std::string_view token, std::string_view nonce, std::string_view proof) {
  std::string want = AuthProof(token, nonce);
  return proof.size() == want.size() && sodium_memcmp(proof.data(), want.data(), want.size()) == 0;
}

std::string HttpAuthProof(std::string_view token, std::string_view nonce, std::string_view agent) {
  return AuthProof(token, fmt::format("http\n{}\n{}", nonce, agent));
}

bool HttpAuthProofMatches(std::string_view token, std::string_view nonce, std::string_view agent,
                          std::string_view proof) {
  return AuthProofMatches(token, fmt::format("http\n{}\n{}", nonce, agent), proof);
}

std::string AuthOkAnswer(std::string_view token, std::string_view agent_nonce,
                         std::string_view nonce) {
  std::string message = fmt::format("store\n{}\n{}", agent_nonce, nonce);
  return fmt::format("{} {}", kAuthOk, AuthProof(token, message));
}

namespace {

// A nonce as trun's store makes them: 64 hex digits. The agent proves
// itself for nothing else, so that no proof it sends is a store's answer.
bool IsNonce(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

Status Squatter(const std::string& where, std::string_view what) {
  return Status::PermissionDenied(fmt::format(
      "{} does not know the job token ({}): another process holds the port? Stop it, or give "
      "--rdzv-endpoint the port the job's host agent listens on",
      where, what));
}

}  // namespace

Status ShowJobToken(StoreClient& client, const std::string& token, const std::string& where) {
  auto nonce = client.CompareSet(kAuthNonceKey, "", "");
  if (!nonce.ok()) return nonce.status();
  if (nonce->empty()) {
    if (token.empty()) return Status::OK();
    return Status::InvalidArgument(
        where +
        " does not know the job token (it asks for none, as a store without one or torch's own "
        "TCPStore does): another process holds the port? Otherwise give every agent of the job "
        "the same TRUN_JOB_TOKEN, or none");
  }
  if (token.empty()) {
    // An empty proof, so that the store's side says why this agent is
    // refused too; its answer adds nothing here.
    (void)client.CompareSet(kAuthProofKey, *nonce, "");
    return Status::PermissionDenied(
        where +
        " asks for the job's token and this agent has none: set TRUN_JOB_TOKEN (or --rdzv-conf "
        "job_token_file=PATH) to the token every agent of the job has");
  }
  if (!IsNonce(*nonce)) return Squatter(where, "its nonce is not one trun's store makes");
  std::string agent_nonce = NewAuthNonce();
  auto answer = client.CompareSet(kAuthProofKey, *nonce,
                                  fmt::format("{} {}", AuthProof(token, *nonce), agent_nonce));
  if (!answer.ok()) return answer.status();
  if (answer->starts_with("refused:")) {
    return Status::PermissionDenied(fmt::format(
        "{} {}: this agent's TRUN_JOB_TOKEN is not the job's; give every agent the same one", where,
        *answer));
  }
  std::string want = AuthOkAnswer(token, agent_nonce, *nonce);
  if (answer->size() != want.size() ||
      sodium_memcmp(answer->data(), want.data(), want.size()) != 0) {
    return Squatter(where, "it did not prove it");
  }
  return Status::OK();
}

Status CheckJobToken(std::string_view token) {
  if (token.size() < 16 || token.size() > 1024) {
    return Status::InvalidArgument(
        fmt::format("the job token has {} characters; it needs 16 to 1024 (e.g. `openssl rand "
                    "-hex 32`)",
                    token.size()));
  }
  for (char c : token) {
    if (c <= ' ' || c > '~') {
      return Status::InvalidArgument(
          "the job token may hold only printable ASCII characters without spaces");
    }
  }
  return Status::OK();
}

ProofAnswer AnswerProof(std::string_view token, std::string_view nonce,
                        std::string_view offered_nonce, std::string_view offer) {
  auto space = offer.find(' ');
  std::string_view proof = offer.substr(0, space);
  std::string_view agent_nonce = space == offer.npos ? "" : offer.substr(space + 1);
  if (nonce.empty() || offered_nonce != nonce) {
    return {false, "refused: no fresh nonce on this connection (a replayed proof?)"};
  }
  if (proof.empty()) return {false, "refused: no job token"};
  if (!AuthProofMatches(token, nonce, proof)) return {false, "refused: wrong job token"};
  return {true, AuthOkAnswer(token, agent_nonce, nonce)};
}

}  // namespace trun::store
