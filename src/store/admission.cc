#include "store/admission.h"

#include <algorithm>
#include <array>

#include "store/auth.h"

namespace trun::store {
namespace {

// One row per op, in Op's order: {op, which args are keys, writes, for strangers}.
constexpr std::array<OpRule, kNumOps> kRules = {{
    {Op::kValidate, KeyArgs::kNone, false, true},
    {Op::kSet, KeyArgs::kFirst, true, true},
    {Op::kCompareSet, KeyArgs::kFirst, true, true},
    {Op::kGet, KeyArgs::kFirst, false, true},
    {Op::kAdd, KeyArgs::kFirst, true, true},
    {Op::kCheck, KeyArgs::kAll, false, true},
    {Op::kWait, KeyArgs::kAll, false, true},
    {Op::kGetNumKeys, KeyArgs::kWholeStore, false, false},
    {Op::kWatchKey, KeyArgs::kFirst, false, true},
    {Op::kDeleteKey, KeyArgs::kFirst, true, true},
    {Op::kAppend, KeyArgs::kFirst, true, true},
    {Op::kMultiGet, KeyArgs::kAll, false, true},
    {Op::kMultiSet, KeyArgs::kEveryOther, true, true},
    {Op::kCancelWait, KeyArgs::kNone, false, true},
    {Op::kPing, KeyArgs::kNone, false, true},
    {Op::kQueuePush, KeyArgs::kFirst, true, true},
    {Op::kQueuePop, KeyArgs::kFirst, true, true},
    {Op::kQueueLen, KeyArgs::kFirst, false, true},
    {Op::kListKeys, KeyArgs::kWholeStore, false, false},
    // Writes its key (a count of arrivals), so it can end a round that a
    // WAIT on that key waits for; a join never sends it.
    {Op::kBarrier, KeyArgs::kFirst, true, false},
}};

constexpr bool InOpOrder() {
  for (size_t i = 0; i < kRules.size(); ++i) {
    if (static_cast<size_t>(kRules[i].op) != i) return false;
  }
  return true;
}
static_assert(InOpOrder(), "kRules needs one row per Op, in Op's order");

// Calls f on every key `r` names, as its rule says; stops at the first
// false and returns it.
template <typename F>
bool EveryKey(const Request& r, KeyArgs keys, F f) {
  const auto& a = r.args;
  switch (keys) {
    case KeyArgs::kNone:
    case KeyArgs::kWholeStore:
      return true;
    case KeyArgs::kFirst:
      return a.empty() || f(a[0]);
    case KeyArgs::kAll:
      return std::all_of(a.begin(), a.end(), f);
    case KeyArgs::kEveryOther:
      for (size_t i = 0; i < a.size(); i += 2) {
        if (!f(a[i])) return false;
      }
      return true;
  }
  return true;
}

bool IsAuthKey(std::string_view k) { return k == kAuthNonceKey || k == kAuthProofKey; }

}  // namespace

bool IsTrunKey(std::string_view key) { return key.starts_with(kTrunKeys); }

const OpRule* RuleFor(Op op) {
  auto i = static_cast<size_t>(op);
  return i < kRules.size() ? &kRules[i] : nullptr;
}

Admission Admit(const Request& r, const Standing& s) {
  const OpRule* rule = RuleFor(r.op);
  // Unreachable for a parsed request; refused rather than trusted.
  if (rule == nullptr) return {Verdict::kRefuseStranger, true};
  Admission out;
  out.names_other_keys = rule->keys != KeyArgs::kWholeStore && !EveryKey(r, rule->keys, IsTrunKey);
  if (s.token_asked) {
    // The exchange itself is open to everyone, strangers too: it is how an
    // agent that is no member yet proves it may join.
    if (r.op == Op::kCompareSet && r.args[0] == kAuthNonceKey) return {Verdict::kAuthNonce};
    if (r.op == Op::kCompareSet && r.args[0] == kAuthProofKey) return {Verdict::kAuthProof};
    if (!s.proven) {
      if (rule->keys == KeyArgs::kWholeStore) out.verdict = Verdict::kServeUntrun;
      if (!EveryKey(r, rule->keys, [](const std::string& k) { return !IsTrunKey(k); })) {
        return {Verdict::kRefuseTrunKeys};
      }
    }
  }
  if (s.strangers_prefix.empty()) return out;
  // The exchange's keys count as the rendezvous's: without a token they are
  // an ordinary COMPARE_SET that an agent sends before it joins.
  bool inside =
      rule->keys != KeyArgs::kWholeStore && EveryKey(r, rule->keys, [&](const std::string& k) {
        return k.starts_with(s.strangers_prefix) || IsAuthKey(k);
      });
  out.beyond_prefix = !inside;
  if (s.stranger && !(inside && rule->for_strangers)) out.verdict = Verdict::kRefuseStranger;
  return out;
}

}  // namespace trun::store
