#include "agent/stacks.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "store/auth.h"

namespace trun::agent {
namespace {

using Clock = StacksGate::Clock;

TEST(StacksGate, OpenWithoutAToken) {
  StacksGate gate("");
  EXPECT_TRUE(gate.open());
  EXPECT_TRUE(gate.Admit("", "", Clock::now()));
}

TEST(StacksGate, AProofIsGoodOnceForItsNonce) {
  StacksGate gate("secret");
  const auto now = Clock::now();
  EXPECT_FALSE(gate.Admit("", "", now));
  std::string nonce = gate.Challenge(now);
  EXPECT_FALSE(gate.Admit(nonce, store::HttpAuthProof("wrong", nonce), now));
  // A refused proof used the nonce up.
  EXPECT_FALSE(gate.Admit(nonce, store::HttpAuthProof("secret", nonce), now));
  nonce = gate.Challenge(now);
  EXPECT_FALSE(gate.Admit(nonce, store::AuthProof("secret", nonce), now));  // the store's proof
  nonce = gate.Challenge(now);
  EXPECT_TRUE(gate.Admit(nonce, store::HttpAuthProof("secret", nonce), now));
  EXPECT_FALSE(gate.Admit(nonce, store::HttpAuthProof("secret", nonce), now));  // replayed
  // A nonce this gate never gave.
  std::string other = store::NewAuthNonce();
  EXPECT_FALSE(gate.Admit(other, store::HttpAuthProof("secret", other), now));
}

TEST(StacksGate, NoncesExpireAndAreBounded) {
  StacksGate gate("secret");
  const auto now = Clock::now();
  std::string old = gate.Challenge(now);
  EXPECT_FALSE(gate.Admit(old, store::HttpAuthProof("secret", old),
                          now + StacksGate::kNonceLifetime + std::chrono::seconds(1)));
  std::string first = gate.Challenge(now);
  for (size_t i = 0; i < StacksGate::kMaxOutstanding; ++i) gate.Challenge(now);
  EXPECT_FALSE(gate.Admit(first, store::HttpAuthProof("secret", first), now));
  std::string last = gate.Challenge(now);
  EXPECT_TRUE(gate.Admit(last, store::HttpAuthProof("secret", last), now));
}

TEST(StacksQuery, Values) {
  EXPECT_EQ(QueryValue("/stacks?nonce=ab&proof=cd", "nonce"), "ab");
  EXPECT_EQ(QueryValue("/stacks?nonce=ab&proof=cd", "proof"), "cd");
  EXPECT_EQ(QueryValue("/stacks?proof=cd#x", "proof"), "cd");
  EXPECT_EQ(QueryValue("/stacks?xnonce=ab", "nonce"), "");
  EXPECT_EQ(QueryValue("/stacks", "nonce"), "");
  EXPECT_EQ(QueryValue("/stacks?&&=&nonce", "nonce"), "");
}

TEST(Stacks, ATargetThatIsNotRunningHasNoThreads) {
  auto doc = ReadStacks({{3, 1, getpid(), "failed"}}, {"host-a", "run", 1, 2});
  EXPECT_EQ(doc["hostname"], "host-a");
  EXPECT_EQ(doc["node_rank"], 1);
  ASSERT_EQ(doc["workers"].size(), 1u);
  EXPECT_EQ(doc["workers"][0]["rank"], 3);
  EXPECT_TRUE(doc["workers"][0]["threads"].empty());
}

TEST(Stacks, ANonPythonTargetSaysWhy) {
  // This test binary is no Python.
  auto doc = ReadStacks({{0, 0, getpid(), "running"}}, {"host-a", "run", 0, 1});
  const auto& w = doc["workers"][0];
  EXPECT_EQ(w["process_state"], "R");
  EXPECT_NE(w["error"].get<std::string>().find("_PyRuntime"), std::string::npos);
}

TEST(Stacks, FormatReadsAsATraceback) {
  nlohmann::json node = nlohmann::json::parse(R"({"hostname": "h", "workers": [
    {"rank": 2, "local_rank": 0, "pid": 7, "status": "running", "process_state": "S",
     "cpu_seconds": 1.5, "error": null, "threads": [{"native_id": 7, "name": "python",
     "partial": false, "frames": [{"function": "inner", "file": "t.py", "line": 6},
                                  {"function": "<module>", "file": "t.py", "line": 9}]}]}]})");
  EXPECT_EQ(FormatStacks({node}),
            "rank 2 (local_rank 0, host h, pid 7, state S, cpu 1.50 s)\n"
            "  thread 7 (python)\n"
            "    File \"t.py\", line 9, in <module>\n"
            "    File \"t.py\", line 6, in inner\n");
}

}  // namespace
}  // namespace trun::agent
