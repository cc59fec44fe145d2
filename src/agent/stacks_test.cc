#include "agent/stacks.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "store/auth.h"

namespace trun::agent {
namespace {

using Clock = StacksGate::Clock;

constexpr std::string_view kAgent = "10.0.0.7:8000";

std::string Proof(std::string_view token, const std::string& nonce,
                  std::string_view agent = kAgent) {
  return store::HttpAuthProof(token, nonce, agent);
}

TEST(StacksGate, OpenWithoutAToken) {
  StacksGate gate("");
  EXPECT_TRUE(gate.open());
  EXPECT_TRUE(gate.Admit("", "", "", Clock::now()));
}

TEST(StacksGate, AProofIsGoodOnceForItsNonceAndAgent) {
  StacksGate gate("secret");
  const auto now = Clock::now();
  EXPECT_FALSE(gate.Admit("", "", kAgent, now));
  std::string nonce = gate.Challenge(now);
  EXPECT_FALSE(gate.Admit(nonce, Proof("wrong", nonce), kAgent, now));
  EXPECT_FALSE(gate.Admit(nonce, store::AuthProof("secret", nonce), kAgent, now));  // the store's
  // Proved for the address a client was pointed at, shown at the agent's
  // own: a listener passing a client's proof on.
  EXPECT_FALSE(gate.Admit(nonce, Proof("secret", nonce, "10.0.0.9:8000"), kAgent, now));
  EXPECT_TRUE(gate.Admit(nonce, Proof("secret", nonce), kAgent, now));
  EXPECT_FALSE(gate.Admit(nonce, Proof("secret", nonce), kAgent, now));  // replayed
  // Nonces this gate never gave: random, another gate's, one with its time changed.
  std::string other = store::NewAuthNonce();
  EXPECT_FALSE(gate.Admit(other, Proof("secret", other), kAgent, now));
  other = StacksGate("secret").Challenge(now);
  EXPECT_FALSE(gate.Admit(other, Proof("secret", other), kAgent, now));
  other = gate.Challenge(now);
  other[15] = other[15] == '0' ? '1' : '0';
  EXPECT_FALSE(gate.Admit(other, Proof("secret", other), kAgent, now));
}

// Nonces used to be the millisecond they were made and its MAC: the hang
// judge's two asks of a peer in a row (scope=hang, then its stacks) often
// got the same nonce, and the second was refused as a replay.
TEST(StacksGate, TwoNoncesOfTheSameMillisecondAreEachGoodOnce) {
  StacksGate gate("secret");
  const auto now = Clock::now();
  std::string first = gate.Challenge(now);
  std::string second = gate.Challenge(now);
  EXPECT_NE(first, second);
  EXPECT_TRUE(gate.Admit(first, Proof("secret", first), kAgent, now));
  EXPECT_TRUE(gate.Admit(second, Proof("secret", second), kAgent, now));
  EXPECT_FALSE(gate.Admit(second, Proof("secret", second), kAgent, now));
  // The random part is under the MAC too.
  std::string third = gate.Challenge(now);
  third[20] = third[20] == '0' ? '1' : '0';
  EXPECT_FALSE(gate.Admit(third, Proof("secret", third), kAgent, now));
}

TEST(StacksGate, NoncesExpireAndNoFloodForgetsOne) {
  StacksGate gate("secret");
  const auto now = Clock::now();
  std::string old = gate.Challenge(now);
  EXPECT_FALSE(gate.Admit(old, Proof("secret", old), kAgent,
                          now + StacksGate::kNonceLifetime + std::chrono::seconds(1)));
  // The gate keeps nothing for a nonce it gives, so an honest client's
  // survives any number given after it.
  std::string first = gate.Challenge(now);
  for (int i = 0; i < 100'000; ++i) gate.Challenge(now);
  EXPECT_TRUE(gate.Admit(first, Proof("secret", first), kAgent, now + std::chrono::seconds(29)));
}

TEST(StacksGate, ProvedNoncesAreBounded) {
  StacksGate gate("secret");
  const auto now = Clock::now();
  for (size_t i = 0; i < StacksGate::kMaxSpent; ++i) {
    std::string n = gate.Challenge(now + std::chrono::milliseconds(i));
    ASSERT_TRUE(gate.Admit(n, Proof("secret", n), kAgent, now + std::chrono::milliseconds(i)));
  }
  const auto later = now + std::chrono::seconds(10);
  std::string n = gate.Challenge(later);
  EXPECT_FALSE(gate.Admit(n, Proof("secret", n), kAgent, later));  // full until some expire
  const auto expired = now + StacksGate::kNonceLifetime + std::chrono::seconds(5);
  n = gate.Challenge(expired);
  EXPECT_TRUE(gate.Admit(n, Proof("secret", n), kAgent, expired));
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

TEST(Stacks, ANodeOverItsLimitAnswersWithMainThreadsOnly) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(R"({"hostname": "h", "workers": [
    {"rank": 0, "threads": [{"native_id": 1, "frames": []}, {"native_id": 2, "frames": []}]},
    {"rank": 1, "threads": [{"native_id": 3, "frames": []}]}]})");
  const std::string whole = NodeStacksBody(doc, 1 << 20);
  EXPECT_EQ(nlohmann::ordered_json::parse(whole), doc);
  auto trimmed = nlohmann::json::parse(NodeStacksBody(doc, whole.size() - 1));
  EXPECT_EQ(trimmed["workers"][0]["threads"].size(), 1u);
  EXPECT_EQ(trimmed["workers"][0]["threads"][0]["native_id"], 1);
  EXPECT_EQ(trimmed["workers"][1]["threads"][0]["native_id"], 3);
  EXPECT_NE(trimmed["trimmed"].get<std::string>().find("main thread only"), std::string::npos);
  EXPECT_NE(FormatStacks({trimmed}).find("host h: each worker's main thread only"),
            std::string::npos);
}

TEST(Stacks, NodesReadInRankOrder) {
  std::vector<nlohmann::json> nodes = {
      nlohmann::json::parse(R"({"replica": 0, "workers": [{"rank": 5}, {"rank": 4}]})"),
      nlohmann::json::parse(R"({"replica": 1, "error": "timed out"})"),
      nlohmann::json::parse(R"({"replica": 2, "workers": [{"rank": 1}, {"rank": 0}]})"),
      nlohmann::json::parse(R"({"replica": 3, "workers": [{"rank": null}]})")};
  OrderNodesByRank(nodes);
  std::vector<int> order;
  for (const auto& n : nodes) order.push_back(n["replica"].get<int>());
  EXPECT_EQ(order, (std::vector<int>{2, 0, 1, 3}));
}

}  // namespace
}  // namespace trun::agent
