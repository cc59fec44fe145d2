#include "store/admission.h"

#include <gtest/gtest.h>

#include <map>

#include "store/auth.h"

namespace trun::store {
namespace {

// What each op touches, written out here rather than read from the table,
// so that a row that says otherwise fails. An op added to Op without a line
// here (or a row there) fails EveryOpHasARow.
enum class Touches { kNothing, kKeys, kWholeStore };
const std::map<Op, Touches> kExpected = {
    {Op::kValidate, Touches::kNothing},
    {Op::kSet, Touches::kKeys},
    {Op::kCompareSet, Touches::kKeys},
    {Op::kGet, Touches::kKeys},
    {Op::kAdd, Touches::kKeys},
    {Op::kCheck, Touches::kKeys},
    {Op::kWait, Touches::kKeys},
    {Op::kGetNumKeys, Touches::kWholeStore},
    {Op::kWatchKey, Touches::kKeys},
    {Op::kDeleteKey, Touches::kKeys},
    {Op::kAppend, Touches::kKeys},
    {Op::kMultiGet, Touches::kKeys},
    {Op::kMultiSet, Touches::kKeys},
    {Op::kCancelWait, Touches::kNothing},
    {Op::kPing, Touches::kNothing},
    {Op::kQueuePush, Touches::kKeys},
    {Op::kQueuePop, Touches::kKeys},
    {Op::kQueueLen, Touches::kKeys},
    {Op::kListKeys, Touches::kWholeStore},
    {Op::kBarrier, Touches::kKeys},
};

// A request of `op` that names `key`, shaped as the parser makes it; where
// an op names several keys, `key` comes after an innocent one, so that
// every key is looked at, not only the first.
Request Naming(Op op, const std::string& key) {
  Request r;
  r.op = op;
  switch (op) {
    case Op::kValidate:
    case Op::kPing:
    case Op::kCancelWait:
    case Op::kGetNumKeys:
    case Op::kListKeys:
      break;
    case Op::kCompareSet:
      r.args = {key, "", "x"};
      break;
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
      r.args = {key, "v"};
      break;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      r.args = {"/worker/k", key};
      break;
    case Op::kMultiSet:
      r.args = {"/worker/k", "v", key, "v"};
      break;
    default:  // the key alone (BARRIER's world size is Request::number)
      r.args = {key};
      break;
  }
  return r;
}

Op OpAt(size_t i) { return static_cast<Op>(i); }

TEST(Admission, EveryOpHasARow) {
  for (size_t i = 0; i < kNumOps; ++i) {
    const OpRule* rule = RuleFor(OpAt(i));
    ASSERT_NE(rule, nullptr) << "no admission row for " << OpName(OpAt(i));
    EXPECT_EQ(rule->op, OpAt(i)) << OpName(OpAt(i));
    ASSERT_TRUE(kExpected.count(OpAt(i))) << "this test does not know " << OpName(OpAt(i));
    Touches want = kExpected.at(OpAt(i));
    EXPECT_EQ(rule->keys == KeyArgs::kNone, want == Touches::kNothing) << OpName(OpAt(i));
    EXPECT_EQ(rule->keys == KeyArgs::kWholeStore, want == Touches::kWholeStore) << OpName(OpAt(i));
  }
  EXPECT_EQ(RuleFor(OpAt(kNumOps)), nullptr);
  // BARRIER names no value but writes its key: the hole of issue 25.
  EXPECT_TRUE(RuleFor(Op::kBarrier)->writes);
  EXPECT_EQ(RuleFor(Op::kBarrier)->keys, KeyArgs::kFirst);
}

// Every op x {trun's key, a worker's key} x {proven, not}.
TEST(Admission, TrunsKeysNeedTheToken) {
  for (size_t i = 0; i < kNumOps; ++i) {
    Op op = OpAt(i);
    for (std::string key : {"/trun/rdzv/job/end/0", "/worker/attempt_0/x"}) {
      bool trun_key = key.starts_with(kTrunKeys);
      for (bool proven : {true, false}) {
        Standing s;
        s.token_asked = true;
        s.proven = proven;
        Verdict want = Verdict::kServe;
        if (!proven && kExpected.at(op) == Touches::kWholeStore) want = Verdict::kServeUntrun;
        if (!proven && trun_key && kExpected.at(op) == Touches::kKeys) {
          want = Verdict::kRefuseTrunKeys;
        }
        EXPECT_EQ(Admit(Naming(op, key), s).verdict, want)
            << OpName(op) << " " << key << (proven ? " proven" : " unproven");
        // A store that asks for no token serves everything to everyone.
        s.token_asked = false;
        EXPECT_EQ(Admit(Naming(op, key), s).verdict, Verdict::kServe) << OpName(op) << " " << key;
      }
    }
  }
}

TEST(Admission, TheExchangeIsOpenToAll) {
  Standing s;
  s.token_asked = true;
  s.strangers_prefix = "/trun/rdzv/job/";
  s.stranger = true;
  Request nonce = Naming(Op::kCompareSet, kAuthNonceKey);
  Request proof = Naming(Op::kCompareSet, kAuthProofKey);
  EXPECT_EQ(Admit(nonce, s).verdict, Verdict::kAuthNonce);
  EXPECT_EQ(Admit(proof, s).verdict, Verdict::kAuthProof);
  // Only COMPARE_SET is the exchange; any other op on its keys is trun's.
  EXPECT_EQ(Admit(Naming(Op::kSet, kAuthProofKey), s).verdict, Verdict::kRefuseTrunKeys);
  // Without a token the exchange's keys are an ordinary COMPARE_SET, open
  // to strangers (an agent sends it before it joins).
  s.token_asked = false;
  EXPECT_EQ(Admit(nonce, s).verdict, Verdict::kServe);
}

// Every op x {inside the rendezvous's prefix, outside} x {stranger, member}.
TEST(Admission, StrangersGetOnlyTheRendezvousKeys) {
  for (size_t i = 0; i < kNumOps; ++i) {
    Op op = OpAt(i);
    for (std::string key : {"/trun/rdzv/job/node/1", "/worker/attempt_0/x"}) {
      for (bool stranger : {true, false}) {
        Standing s;
        s.strangers_prefix = "/trun/rdzv/job/";
        s.stranger = stranger;
        Admission a = Admit(Naming(op, key), s);
        // Keyed ops with a worker key among their keys reach beyond the
        // prefix; CHECK/WAIT/MULTI_GET/MULTI_SET name one always.
        bool beyond;
        switch (kExpected.at(op)) {
          case Touches::kNothing:
            beyond = false;
            break;
          case Touches::kWholeStore:
            beyond = true;
            break;
          default:
            beyond = !key.starts_with("/trun/rdzv/job/") || op == Op::kCheck || op == Op::kWait ||
                     op == Op::kMultiGet || op == Op::kMultiSet;
        }
        EXPECT_EQ(a.beyond_prefix, beyond) << OpName(op) << " " << key;
        bool refused = stranger && (beyond || op == Op::kBarrier);
        EXPECT_EQ(a.verdict, refused ? Verdict::kRefuseStranger : Verdict::kServe)
            << OpName(op) << " " << key << (stranger ? " stranger" : " member");
      }
    }
  }
}

TEST(Admission, TheTokenRuleComesFirst) {
  // An unproven member's LIST_KEYS is served without trun's keys; a
  // stranger's is refused whatever it has proven.
  Standing s;
  s.token_asked = true;
  s.strangers_prefix = "/trun/rdzv/job/";
  EXPECT_EQ(Admit(Naming(Op::kListKeys, ""), s).verdict, Verdict::kServeUntrun);
  s.stranger = true;
  s.proven = true;
  EXPECT_EQ(Admit(Naming(Op::kListKeys, ""), s).verdict, Verdict::kRefuseStranger);
  // A proven stranger joins.
  EXPECT_EQ(Admit(Naming(Op::kAdd, "/trun/rdzv/job/seq"), s).verdict, Verdict::kServe);
}

}  // namespace
}  // namespace trun::store
