#include "store/auth.h"

#include <gtest/gtest.h>

#include "store/client.h"
#include "store/server.h"
#include "store/server_thread.h"

namespace trun::store {
namespace {

using std::chrono::milliseconds;

constexpr const char* kToken = "0123456789abcdef0123456789abcdef";

TEST(JobToken, ProofsAreBoundToTokenAndNonce) {
  std::string n1 = NewAuthNonce(), n2 = NewAuthNonce();
  EXPECT_EQ(n1.size(), 64u);
  EXPECT_NE(n1, n2);
  std::string p = AuthProof(kToken, n1);
  EXPECT_TRUE(AuthProofMatches(kToken, n1, p));
  EXPECT_FALSE(AuthProofMatches(kToken, n2, p));
  EXPECT_FALSE(AuthProofMatches("another-token-0123456789", n1, p));
  EXPECT_FALSE(AuthProofMatches(kToken, n1, p.substr(1)));
}

TEST(JobToken, CheckJobToken) {
  EXPECT_TRUE(CheckJobToken(NewJobToken()).ok());
  EXPECT_FALSE(CheckJobToken("short").ok());
  EXPECT_FALSE(CheckJobToken("has a space in it, sixteen+").ok());
  EXPECT_EQ(CheckJobToken("short").message().find("short"), std::string::npos);
}

TEST(JobToken, TheStoreAnswersEachProofOnce) {
  std::string nonce = NewAuthNonce(), agent = NewAuthNonce();
  std::string offer = AuthProof(kToken, nonce) + " " + agent;
  ProofAnswer ok = AnswerProof(kToken, nonce, nonce, offer);
  EXPECT_TRUE(ok.ok);
  EXPECT_EQ(ok.answer, AuthOkAnswer(kToken, agent, nonce));
  // No nonce outstanding (used already), or another connection's.
  EXPECT_EQ(AnswerProof(kToken, "", nonce, offer).answer,
            "refused: no fresh nonce on this connection (a replayed proof?)");
  EXPECT_FALSE(AnswerProof(kToken, NewAuthNonce(), nonce, offer).ok);
  EXPECT_EQ(AnswerProof(kToken, nonce, nonce, " " + agent).answer, "refused: no job token");
  ProofAnswer wrong = AnswerProof("another-token-0123456789", nonce, nonce, offer);
  EXPECT_FALSE(wrong.ok);
  EXPECT_EQ(wrong.answer, "refused: wrong job token");
}

class JobTokenServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.host = "127.0.0.1";
    auto s = StoreServerThread::Start(o);
    ASSERT_TRUE(s.ok());
    server_ = std::move(*s);
  }
  void Require(const std::string& token) {
    server_->RunOnLoop([&](StoreServer& s) { s.RequireJobToken(token); });
  }
  StoreClient Connect() {
    auto c =
        StoreClient::Connect("127.0.0.1", server_->port(), milliseconds(5000), milliseconds(2000));
    EXPECT_TRUE(c.ok());
    return std::move(*c);
  }
  std::unique_ptr<StoreServerThread> server_;
};

TEST_F(JobTokenServerTest, TheRightTokenOpensTrunsKeys) {
  Require(kToken);
  auto c = Connect();
  ASSERT_TRUE(ShowJobToken(c, kToken, "the store").ok());
  EXPECT_TRUE(c.Add("/trun/rdzv/x/seq", 1).ok());
}

TEST_F(JobTokenServerTest, TrunsKeysWithoutTheTokenCloseTheConnection) {
  Require(kToken);
  auto c = Connect();
  EXPECT_FALSE(c.Add("/trun/rdzv/x/seq", 1).ok());
  // torch's keys stay open to everyone.
  auto worker = Connect();
  EXPECT_TRUE(worker.Add("/worker/x", 1).ok());
}

TEST_F(JobTokenServerTest, AWrongOrMissingTokenIsNamedOnTheAgentsSide) {
  Require(kToken);
  auto c = Connect();
  Status s = ShowJobToken(c, "a-wrong-token-0123456789", "the store at h:1");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("wrong job token"), std::string::npos) << s.message();
  auto d = Connect();
  s = ShowJobToken(d, "", "the store at h:1");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("has none"), std::string::npos) << s.message();
}

TEST_F(JobTokenServerTest, AnEmptyProofIsNoToken) {
  Require(kToken);
  auto c = Connect();
  auto nonce = c.CompareSet(kAuthNonceKey, "", "");
  ASSERT_TRUE(nonce.ok());
  EXPECT_EQ(*c.CompareSet(kAuthProofKey, *nonce, ""), "refused: no job token");
  EXPECT_FALSE(c.Add("/trun/rdzv/x/seq", 1).ok());
}

TEST_F(JobTokenServerTest, AReplayedProofIsRefused) {
  Require(kToken);
  auto c = Connect();
  auto nonce = c.CompareSet(kAuthNonceKey, "", "");
  ASSERT_TRUE(nonce.ok());
  std::string proof = AuthProof(kToken, *nonce) + " " + NewAuthNonce();
  EXPECT_TRUE(c.CompareSet(kAuthProofKey, *nonce, proof)->starts_with("ok "));
  // The same bytes again, on this connection and on another.
  EXPECT_TRUE(c.CompareSet(kAuthProofKey, *nonce, proof)->starts_with("refused: no fresh nonce"));
  auto d = Connect();
  EXPECT_TRUE(d.CompareSet(kAuthProofKey, *nonce, proof)->starts_with("refused: no fresh nonce"));
  EXPECT_FALSE(d.Add("/trun/rdzv/x/seq", 1).ok());
}

TEST_F(JobTokenServerTest, AStoreThatAsksNoTokenRefusesAnAgentWithOne) {
  auto c = Connect();
  EXPECT_TRUE(ShowJobToken(c, "", "the store").ok());
  Status s = ShowJobToken(c, kToken, "the store at h:1");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("the store at h:1 does not know the job token"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("another process holds the port?"), std::string::npos);
}

// Issue 25: one wrong guess costs the connection; the refusal is sent
// first, so that an agent can say why.
TEST_F(JobTokenServerTest, ARefusedProofClosesTheConnection) {
  Require(kToken);
  auto c = Connect();
  auto nonce = c.CompareSet(kAuthNonceKey, "", "");
  ASSERT_TRUE(nonce.ok());
  EXPECT_EQ(*c.CompareSet(kAuthProofKey, *nonce, AuthProof("a-wrong-token-0123456789", *nonce)),
            "refused: wrong job token");
  EXPECT_FALSE(c.Ping().ok());
  EXPECT_FALSE(c.CompareSet(kAuthNonceKey, "", "").ok());
}

// The store proves the token too: the agent checks "ok" against its own
// nonce, so a store that does not know the token is found out.
TEST_F(JobTokenServerTest, TheStoreProvesItKnowsTheToken) {
  Require(kToken);
  auto c = Connect();
  auto nonce = c.CompareSet(kAuthNonceKey, "", "");
  ASSERT_TRUE(nonce.ok());
  std::string mine = NewAuthNonce();
  auto answer = c.CompareSet(kAuthProofKey, *nonce, AuthProof(kToken, *nonce) + " " + mine);
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(*answer, AuthOkAnswer(kToken, mine, *nonce));
  EXPECT_NE(*answer, AuthOkAnswer("another-token-0123456789", mine, *nonce));
  EXPECT_NE(*answer, AuthOkAnswer(kToken, NewAuthNonce(), *nonce));
}

// A process on the port that plays a store without the token: here a plain
// store whose nonce key an earlier agent left set. The agent stops, naming
// the cause, instead of trusting what it reads.
TEST_F(JobTokenServerTest, AStoreWithoutTheTokenIsFoundOut) {
  auto c = Connect();
  ASSERT_TRUE(c.Set(kAuthNonceKey, NewAuthNonce()).ok());
  Status s = ShowJobToken(c, kToken, "the store at h:1");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("the store at h:1 does not know the job token"), std::string::npos)
      << s.message();
  // A nonce that is not one trun makes is not proven for at all.
  auto d = Connect();
  ASSERT_TRUE(d.Set(kAuthNonceKey, "store\nnot-hex").ok());
  s = ShowJobToken(d, kToken, "the store at h:1");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_FALSE(*d.Check({kAuthProofKey}));  // no proof was offered for it
}

// Without the token, trun's keys are neither shown nor counted, and
// BARRIER (which writes its key) on one closes the connection.
TEST_F(JobTokenServerTest, AnUnprovenClientSeesNoTrunKey) {
  Require(kToken);
  auto agent = Connect();
  ASSERT_TRUE(ShowJobToken(agent, kToken, "the store").ok());
  ASSERT_TRUE(agent.Set("/trun/rdzv/job/round/0", "r").ok());
  auto worker = Connect();
  ASSERT_TRUE(worker.Set("/w", "1").ok());
  auto keys = worker.ListKeys();
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(*keys, std::vector<std::string>{"/w"});
  EXPECT_EQ(*worker.NumKeys(), 1);
  EXPECT_EQ(agent.ListKeys()->size(), 2u);
  EXPECT_EQ(*agent.NumKeys(), 2);
  EXPECT_FALSE(worker.Barrier("/trun/rdzv/job/end/0", 1, milliseconds(1000)).ok());
  EXPECT_FALSE(worker.Ping().ok());
  EXPECT_FALSE(*agent.Check({"/trun/rdzv/job/end/0"}));
}

}  // namespace
}  // namespace trun::store
