#include "store/auth.h"

#include <gtest/gtest.h>

#include "store/client.h"
#include "store/server.h"

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
  std::string proof = AuthProof(kToken, *nonce);
  EXPECT_EQ(*c.CompareSet(kAuthProofKey, *nonce, proof), kAuthOk);
  // The same bytes again, on this connection and on another.
  EXPECT_NE(*c.CompareSet(kAuthProofKey, *nonce, proof), kAuthOk);
  auto d = Connect();
  EXPECT_NE(*d.CompareSet(kAuthProofKey, *nonce, proof), kAuthOk);
  EXPECT_FALSE(d.Add("/trun/rdzv/x/seq", 1).ok());
}

TEST_F(JobTokenServerTest, AStoreThatAsksNoTokenRefusesAnAgentWithOne) {
  auto c = Connect();
  EXPECT_TRUE(ShowJobToken(c, "", "the store").ok());
  Status s = ShowJobToken(c, kToken, "the store");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trun::store
