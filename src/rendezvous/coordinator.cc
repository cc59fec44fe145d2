#include "rendezvous/coordinator.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <utility>

#include "common/log.h"
#include "common/strings.h"

namespace trun::rendezvous {
namespace {

using json = nlohmann::json;

// "kind/<number>" -> number; nullopt for any other shape.
std::optional<int64_t> Suffix(std::string_view key, std::string_view kind) {
  if (!key.starts_with(kind) || key.size() <= kind.size() + 1 || key[kind.size()] != '/') {
    return std::nullopt;
  }
  return ParseInt(key.substr(kind.size() + 1));
}

std::string Seconds(Duration d) { return fmt::format("{:g} s", d.count() / 1000.0); }

// NoRound::Kind as assign/'s grammar spells it (coordinator.h).
constexpr std::pair<NoRound::Kind, std::string_view> kKindWords[] = {
    {NoRound::Kind::kBudgetSpent, "budget_spent"},
    {NoRound::Kind::kTimedOut, "timed_out"},
    {NoRound::Kind::kOther, "other"},
};
constexpr std::string_view kNoRoundPrefix = "error:";

// Messages name at most this many nodes and count the rest (JoinSome).
constexpr size_t kNamed = 8;

}  // namespace

std::string EncodeRound(const RoundDoc& doc) {
  std::string out = json{
      {"round", doc.round},
      {"failures", doc.failures},
      {"store_addr", doc.store_addr},
      {"store_port", doc.store_port},
      {"host",
       doc.host}}.dump();
  for (const auto& n : doc.nodes) {
    out += fmt::format("\n{} {} {} {} {}", n.id, n.addr, n.nproc, n.store_port, n.health_port);
  }
  return out;
}

Result<RoundDoc> DecodeRound(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Status::Internal(
        fmt::format("rendezvous: a malformed round from the coordinator ({}): {:.200}", why, text));
  };
  size_t nl = text.find('\n');
  json j = json::parse(text.substr(0, nl), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return bad("its header is not a JSON object");
  RoundDoc doc;
  doc.round = j.value("round", int64_t{0});
  doc.failures = j.value("failures", int64_t{0});
  doc.store_addr = j.value("store_addr", "");
  doc.store_port = j.value("store_port", 0);
  doc.host = j.value("host", "");
  while (nl != std::string_view::npos) {
    size_t start = nl + 1;
    nl = text.find('\n', start);
    std::string_view line = text.substr(start, nl == std::string_view::npos ? nl : nl - start);
    std::string_view f[5];
    for (auto& field : f) {
      size_t sp = line.find(' ');
      field = line.substr(0, sp);
      line = sp == std::string_view::npos ? std::string_view() : line.substr(sp + 1);
    }
    auto nproc = ParseInt(f[2]);
    auto port = ParseInt(f[3]);
    auto health = ParseInt(f[4]);
    if (f[0].empty() || !nproc || !port || !health || !line.empty()) return bad("a node line");
    doc.nodes.push_back({std::string(f[0]), std::string(f[1]), static_cast<int>(*nproc),
                         static_cast<int>(*port), static_cast<int>(*health)});
  }
  if (doc.nodes.empty()) return bad("no nodes");
  return doc;
}

std::string EncodeAssignment(const Assignment& answer) {
  if (const auto* p = std::get_if<Placement>(&answer)) {
    return json{
        {"round", p->round},           {"group_rank", p->group_rank},   {"nodes", p->nodes},
        {"world_size", p->world_size}, {"rank_offset", p->rank_offset}, {"failures", p->failures},
        {"store_addr", p->store_addr}, {"store_port", p->store_port},   {"host", p->host},
        {"host_rank", p->host_rank}}
        .dump();
  }
  const auto& none = std::get<NoRound>(answer);
  std::string_view word = "other";
  for (const auto& [kind, w] : kKindWords) {
    if (kind == none.kind) word = w;
  }
  return fmt::format("{}{}:{}", kNoRoundPrefix, word, none.why.message());
}

Result<Assignment> DecodeAssignment(std::string_view text) {
  if (text.starts_with(kNoRoundPrefix)) {
    std::string_view rest = text.substr(kNoRoundPrefix.size());
    size_t colon = rest.find(':');
    for (const auto& [kind, word] : kKindWords) {
      if (colon != std::string_view::npos && rest.substr(0, colon) == word) {
        return Assignment(NoRound{kind, Status::Internal(std::string(rest.substr(colon + 1)))});
      }
    }
  } else if (text.starts_with("{")) {
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    Placement p;
    auto field = [&](const char* name, auto& to) {
      if (!j.contains(name)) return false;
      const json& v = j[name];
      using T = std::decay_t<decltype(to)>;
      if constexpr (std::is_same_v<T, std::string>) {
        if (!v.is_string()) return false;
      } else if (!v.is_number_integer()) {
        return false;
      }
      to = v.get<T>();
      return true;
    };
    if (j.is_object() && field("round", p.round) && field("group_rank", p.group_rank) &&
        field("nodes", p.nodes) && field("world_size", p.world_size) &&
        field("rank_offset", p.rank_offset) && field("failures", p.failures) &&
        field("store_addr", p.store_addr) && field("store_port", p.store_port) &&
        field("host", p.host) && field("host_rank", p.host_rank) && p.round >= 0 &&
        p.group_rank >= 0 && p.group_rank < p.nodes) {
      return Assignment(std::move(p));
    }
  }
  return Status::Internal(
      fmt::format("rendezvous: a malformed answer from the coordinator (neither a placement nor "
                  "error:<kind>:<message>): {:.200}",
                  text));
}

Coordinator::Coordinator(CoordinatorOptions options, Clock::time_point now)
    : options_(std::move(options)), forming_since_(now) {}

void Coordinator::SetWaiting(Node& n, bool waiting) {
  if (n.waiting == waiting || !n.alive) return;
  n.waiting = waiting;
  waiting ? ++waiting_ : --waiting_;
  if (pending_failure_ && n.judged) waiting ? --awaited_ : ++awaited_;
}

void Coordinator::SetDone(Node& n, bool done) {
  if (n.done == done) return;
  n.done = done;
  if (n.alive && n.participant) done ? ++done_ : --done_;
}

void Coordinator::SetGone(Node& n) {
  if (!n.alive) return;
  SetWaiting(n, false);
  if (pending_failure_ && n.judged) --awaited_;
  if (n.participant) {
    --running_;
    if (n.done) --done_;
  }
  n.alive = false;
  --live_;
}

std::string Coordinator::Describe(const Node& n) const {
  if (options_.by_node_rank) return fmt::format("node rank {} ({})", n.node_rank, n.id);
  return n.id;
}

void Coordinator::OnKey(uint64_t conn, std::string_view key, std::string_view value,
                        Clock::time_point now) {
  if (auto r = Suffix(key, "end")) {
    OnRoundEnded(*r, value, now);
    Evaluate(now);
    return;
  }
  std::optional<int64_t> seq;
  std::string_view kind;
  for (std::string_view k : {"node", "hb", "ready", "done", "left"}) {
    if ((seq = Suffix(key, k))) {
      kind = k;
      break;
    }
  }
  if (!seq) return;  // our own round/ and assign/ keys, or a stranger's
  if (kind == "node") {
    OnJoin(*seq, value, now);
    if (conn != 0) conn_to_seq_[conn] = *seq;
    if (auto it = nodes_.find(*seq); it != nodes_.end() && conn != 0 && options_.peer_of) {
      it->second.seen_from = options_.peer_of(conn);
    }
    Evaluate(now);
    return;
  }
  auto it = nodes_.find(*seq);
  if (it == nodes_.end() || !it->second.alive) return;  // lost already: it must join anew
  Node& n = it->second;
  n.last_seen = now;
  if (conn != 0) conn_to_seq_[conn] = n.seq;
  if (kind == "ready") {
    auto k = ParseInt(value);
    if (!k || *k <= n.ready_count) return;
    n.ready_count = *k;
    SetWaiting(n, true);
    if (n.participant) {
      SetDone(n, false);
      --running_;
      n.participant = false;
    }
  } else if (kind == "done") {
    if (ParseInt(value) == round_ && n.participant) SetDone(n, true);
  } else if (kind == "left") {
    n.left = true;
    const bool ends_round = phase_ == Phase::kRunning && n.participant && !n.done;
    SetGone(n);
    if (ends_round) {
      lost_.push_back(n.id);
      EndRound(fmt::format("membership: {} left", Describe(n)));
    }
  } else {
    return;  // a heartbeat: last_seen is all it changes
  }
  Evaluate(now);
}

void Coordinator::OnJoin(int64_t seq, std::string_view info, Clock::time_point now) {
  json j = json::parse(info, nullptr, /*allow_exceptions=*/false);
  auto blank = [](const std::string& s) { return s.find_first_of(" \t\r\n") != s.npos; };
  if (!j.is_object() || !j.contains("id") || !j["id"].is_string() ||
      blank(j["id"].get<std::string>()) || blank(j.value("addr", ""))) {
    log::Warning("rendezvous: ignored a malformed join (node/{})", seq);
    return;
  }
  Node n;
  n.seq = seq;
  n.id = j["id"].get<std::string>();
  n.addr = j.value("addr", "");
  n.nproc = j.value("nproc", 0);
  n.node_rank = j.value("node_rank", -1);
  n.store_port = j.value("store_port", 0);
  n.health_port = j.value("health_port", 0);
  // Peers ask it for stacks: a port that cannot be one is none.
  if (n.health_port < 0 || n.health_port > 65535) n.health_port = 0;
  n.last_seen = now;
  if (n.nproc <= 0) {
    log::Warning("rendezvous: ignored a join without workers ({})", n.id);
    return;
  }
  if (options_.by_node_rank) {
    for (auto& [s, other] : nodes_) {
      if (other.alive && other.node_rank == n.node_rank) {
        Fail(NoRound::Kind::kOther,
             fmt::format("two nodes claim --node-rank {}: {} and {}; give every node its own rank",
                         n.node_rank, other.id, n.id));
        return;
      }
    }
    if (n.node_rank < 0 || n.node_rank >= options_.max_nodes) {
      log::Warning("rendezvous: {} has --node-rank {}, outside 0..{}; it is not admitted", n.id,
                   n.node_rank, options_.max_nodes - 1);
      return;
    }
  }
  // A node that ran under an earlier store (we took it over) brings what
  // it knew: rounds and spent restarts go on from there.
  if (first_) {
    n.prev_round = j.value("round", int64_t{-1});
    n.prev_rank = j.value("prev_rank", -1);
    next_ = std::max(next_, n.prev_round + 1);
    failures_ = std::max(failures_, j.value("failures", int64_t{0}));
    // The last round's group ranks come back, but for the lost host's.
    const int prev_nodes = j.value("prev_nodes", 0);
    if (expected_.empty() && n.prev_round >= 0 && prev_nodes > 0 && prev_nodes <= 1'000'000) {
      const int lost = j.value("prev_host_rank", -1);
      for (int r = 0; r < prev_nodes; ++r) {
        if (r != lost) expected_.insert(r);
      }
      expected_round_ = n.prev_round;
    }
  }
  log::Debug("rendezvous: {} joined (node/{})", n.id, seq);
  if (auto old = nodes_.find(seq); old != nodes_.end()) SetGone(old->second);
  if (!oldest_seen_) oldest_seen_ = now;
  ++live_;
  Node& added = nodes_[seq] = std::move(n);
  // "ready" 1 in the join: its first request for a round.
  if (j.contains("ready") && j["ready"] == 1) {
    added.ready_count = 1;
    SetWaiting(added, true);
  }
}

// Whether every node of the round before a takeover that is expected back
// is waiting: walked only once enough nodes wait that it may be so.
bool Coordinator::ExpectedAllBack() const {
  if (waiting_ < expected_.size()) return false;
  size_t back = 0;
  for (const auto& [seq, n] : nodes_) {
    back += n.alive && n.waiting && n.prev_round == expected_round_ && expected_.count(n.prev_rank);
  }
  return back >= expected_.size();
}

void Coordinator::OnDisconnect(uint64_t conn, Clock::time_point now) {
  auto it = conn_to_seq_.find(conn);
  if (it == conn_to_seq_.end()) return;
  int64_t seq = it->second;
  conn_to_seq_.erase(it);
  OnNodeGone(seq, "its connection to the store closed", now);
}

void Coordinator::OnNodeGone(int64_t seq, const std::string& why, Clock::time_point now) {
  auto n = nodes_.find(seq);
  if (n == nodes_.end() || !n->second.alive) return;
  Lose(n->second, why, now);
  Evaluate(now);
}

void Coordinator::OnTimer(Clock::time_point now) {
  if (options_.heartbeat_timeout.count() > 0 && oldest_seen_ &&
      now - *oldest_seen_ >= options_.heartbeat_timeout) {
    oldest_seen_.reset();
    for (auto& [seq, n] : nodes_) {
      if (!n.alive) continue;
      if (now - n.last_seen >= options_.heartbeat_timeout) {
        Lose(n, fmt::format("no heartbeat for {}", Seconds(options_.heartbeat_timeout)), now);
      } else if (!oldest_seen_ || n.last_seen < *oldest_seen_) {
        oldest_seen_ = n.last_seen;
      }
    }
  }
  Evaluate(now);
}

void Coordinator::Lose(Node& n, const std::string& why, Clock::time_point) {
  const bool was_done = n.done || n.finished;
  SetGone(n);
  if (over() || was_done) {
    // Gone after its part was played: nothing is lost.
    log::Debug("rendezvous: {} ({}) is gone: {}", Describe(n), n.addr, why);
  } else {
    log::Warning("rendezvous: lost {} ({}): {}", Describe(n), n.addr, why);
  }
  if (pending_failure_ && n.judged) judging_lost_ = true;
  if (n.participant && !was_done) {
    lost_.push_back(n.id);
    if (phase_ == Phase::kRunning) {
      EndRound(fmt::format("membership: lost {} ({}): {}", Describe(n), n.addr, why));
    }
  }
}

void Coordinator::EndRound(const std::string& reason) {
  // Through the store, as a node's "failure" is: whichever comes first wins,
  // and OnKey sees it either way.
  writes_.push_back({fmt::format("end/{}", round_), reason, /*if_absent=*/true});
}

void Coordinator::OnRoundEnded(int64_t r, std::string_view reason, Clock::time_point now) {
  if (phase_ != Phase::kRunning || r != round_) return;
  if (reason == "done") {
    phase_ = Phase::kFinished;
    error_kind_ = NoRound::Kind::kOther;
    error_ = fmt::format("job '{}' has already finished", options_.run_id);
    return;
  }
  phase_ = Phase::kForming;
  next_ = round_ + 1;
  forming_since_ = now;
  min_reached_at_.reset();
  const bool failure = reason.starts_with("failure");
  if (done_ > 0) {
    for (auto& [seq, n] : nodes_) {
      // A node done when the round fails has ended: its agent exits with
      // its workers' success (the exit barrier ends) and never comes back.
      if (failure && n.done && n.alive && n.participant) n.finished = true;
      SetDone(n, false);
    }
  }
  if (failure) {
    // Judged once the round's nodes are all back (JudgeFailure): a node
    // lost meanwhile makes it a membership change. A finished node is
    // neither waited for nor lost when it leaves.
    pending_failure_ = std::string(reason);
    judging_lost_ = false;
    awaited_ = 0;
    for (auto& [seq, n] : nodes_) {
      n.judged = n.participant && n.alive && !n.finished;
      if (n.judged && !n.waiting) ++awaited_;
    }
  }
}

// A failed round spends a restart, unless one of its nodes was lost before
// they were all back: a dead node's peers fail on their broken connections,
// often before its loss is known (etcd learns of it only when its lease
// expires), and the loss, not their failure, is what happened.
void Coordinator::JudgeFailure() {
  std::string reason = std::move(*pending_failure_);
  pending_failure_.reset();
  if (judging_lost_) {
    log::Info(
        "rendezvous: round {} ended with {}, but a node of it was lost: a membership "
        "change, not a failure",
        round_, reason);
    return;
  }
  ++failures_;
  if (failures_ > options_.max_restarts) {
    Fail(NoRound::Kind::kBudgetSpent,
         fmt::format("the restart budget of the job is spent ({} failed round{}, --max-restarts "
                     "{}); last: {}",
                     failures_, failures_ == 1 ? "" : "s", options_.max_restarts, reason));
    return;
  }
  // Nodes that finished do not come back: where too few are left for a
  // round, waiting for join_timeout would only delay the same end.
  std::vector<std::string> finished;
  size_t finished_count = 0, left = 0;
  for (const auto& [seq, n] : nodes_) {
    if (n.finished) {
      if (finished.size() < kNamed) finished.push_back(Describe(n));
      ++finished_count;
    } else if (n.alive) {
      ++left;
    }
  }
  if (finished_count > 0 && left < static_cast<size_t>(options_.min_nodes)) {
    Fail(NoRound::Kind::kOther,
         fmt::format("round {} failed after {} had finished (their workers succeeded, their "
                     "agents exit): {} node{} left, fewer than the {} a round needs, so the job "
                     "ends without a restart; last: {}",
                     round_, JoinSome(finished, finished_count, kNamed), left, left == 1 ? "" : "s",
                     options_.min_nodes, reason));
  }
}

void Coordinator::Fail(NoRound::Kind kind, const std::string& message) {
  phase_ = Phase::kFailed;
  error_kind_ = kind;
  error_ = message;
  log::Error("rendezvous: {}", message);
}

// Everyone waiting when the job cannot go on is told why.
void Coordinator::AnswerErrors() {
  if (waiting_ == 0) return;
  for (auto& [seq, n] : nodes_) {
    if (!n.waiting || !n.alive) continue;
    writes_.push_back({fmt::format("assign/{}/{}", seq, n.ready_count),
                       EncodeAssignment(NoRound{error_kind_, Status::Internal(error_)})});
    SetWaiting(n, false);
  }
}

void Coordinator::Evaluate(Clock::time_point now) {
  if (phase_ == Phase::kFailed || phase_ == Phase::kFinished) return AnswerErrors();

  if (phase_ == Phase::kRunning) {
    const bool any_done = done_ > 0, all_done = done_ == running_, newcomer = waiting_ > 0;
    const size_t participants = running_;
    if (any_done && all_done) {
      writes_.push_back({fmt::format("end/{}", round_), "done", /*if_absent=*/true});
    } else if (newcomer && !any_done && participants < static_cast<size_t>(options_.max_nodes)) {
      // A late node: the running round restarts with it (not a failure).
      for (auto& [seq, n] : nodes_) {
        if (n.waiting && n.alive) {
          EndRound(fmt::format("membership: {} joined", Describe(n)));
          break;
        }
      }
    }
    return;
  }

  // Forming round next_, once the last one's failure, if any, is judged:
  // when its nodes are all back or lost (or close_timeout has passed).
  if (pending_failure_) {
    if (awaited_ > 0 && now - forming_since_ < options_.close_timeout) return;
    JudgeFailure();
    if (phase_ == Phase::kFailed) return AnswerErrors();
  }
  const size_t count = waiting_, live = live_;
  const auto min = static_cast<size_t>(options_.min_nodes);
  if (count >= min) {
    if (!min_reached_at_) min_reached_at_ = now;
  } else {
    min_reached_at_.reset();
  }
  bool close = count >= static_cast<size_t>(options_.max_nodes);
  if (!close && count >= min) {
    if (!first_) {
      // A restart: every node still alive is known; close once they are
      // all back, or after close_timeout without the stragglers.
      close = count == live || now - forming_since_ >= options_.close_timeout;
    } else if (!expected_.empty()) {
      // After a takeover: the previous round's survivors are known.
      close = now - forming_since_ >= options_.close_timeout || ExpectedAllBack();
    } else {
      // The first round: wait last_call_timeout for more to come.
      close = now - *min_reached_at_ >= options_.last_call_timeout;
    }
  }
  if (close) {
    std::vector<Node*> candidates;
    candidates.reserve(count);
    for (auto& [seq, n] : nodes_) {
      if (n.alive && n.waiting) candidates.push_back(&n);
    }
    return Close(std::move(candidates));
  }
  if (count < min && now - forming_since_ >= options_.join_timeout) {
    Fail(NoRound::Kind::kTimedOut, TimeoutMessage(count));
    AnswerErrors();
  }
}

std::string Coordinator::TimeoutMessage(size_t joined) const {
  // Named by their first few and counted: a 10,000-node job's message must
  // stay readable.
  std::vector<std::string> present, missing;
  size_t missing_count = 0;
  auto miss = [&](auto name) {
    if (missing.size() < kNamed) missing.push_back(name());
    ++missing_count;
  };
  std::set<int> ranks, prev_ranks;
  std::set<std::string> present_ids;
  for (const auto& [seq, n] : nodes_) {
    if (!n.alive || !n.waiting) continue;
    if (present.size() < kNamed) present.push_back(Describe(n));
    ranks.insert(n.node_rank);
    present_ids.insert(n.id);
    if (n.prev_round == expected_round_) prev_ranks.insert(n.prev_rank);
  }
  std::string never_joined;
  if (options_.by_node_rank) {
    for (int r = 0; r < options_.max_nodes; ++r) {
      if (!ranks.count(r)) miss([r] { return fmt::format("node rank {}", r); });
    }
  } else {
    for (int r : expected_) {
      if (!prev_ranks.count(r)) {
        miss([&] { return fmt::format("group rank {} of round {}", r, expected_round_); });
      }
    }
    for (const auto& id : lost_) {
      if (!present_ids.count(id)) miss([&] { return id + " (lost)"; });
    }
    size_t unknown = static_cast<size_t>(options_.min_nodes) - joined;
    if (missing_count < unknown) {
      never_joined = fmt::format("{}{} more node{} that never joined", missing_count ? ", " : "",
                                 unknown - missing_count, unknown - missing_count == 1 ? "" : "s");
    }
  }
  return fmt::format(
      "rendezvous '{}' timed out after {} (join_timeout): {} of at least {} node{} ready ({}); "
      "never arrived: {}{}",
      options_.run_id, Seconds(options_.join_timeout), joined, options_.min_nodes,
      options_.min_nodes == 1 ? "" : "s", joined == 0 ? "none" : JoinSome(present, joined, kNamed),
      JoinSome(missing, missing_count, kNamed), never_joined);
}

void Coordinator::Close(std::vector<Node*> candidates) {
  // The documented order: --node-rank for static, join order (the store's
  // sequence number) for c10d. Stable across rounds: survivors keep their
  // relative order and newcomers come last.
  std::sort(candidates.begin(), candidates.end(), [&](const Node* a, const Node* b) {
    return options_.by_node_rank ? a->node_rank < b->node_rank : a->seq < b->seq;
  });
  if (candidates.size() > static_cast<size_t>(options_.max_nodes)) {
    candidates.resize(static_cast<size_t>(options_.max_nodes));  // the rest stay on standby
  }
  round_ = next_;
  RoundDoc doc{round_, failures_, options_.store_addr, options_.store_port, options_.host_id, {}};
  // No common store (etcd): group rank 0's agent hosts the workers'.
  if (doc.store_addr.empty()) {
    doc.store_addr = candidates[0]->addr;
    doc.store_port = candidates[0]->store_port;
  }
  doc.nodes.reserve(candidates.size());
  Write round{fmt::format("round/{}", round_), "", false, {}};
  Placement place{round_,
                  0,
                  static_cast<int>(candidates.size()),
                  0,
                  0,
                  failures_,
                  doc.store_addr,
                  doc.store_port,
                  options_.host_id,
                  -1};
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Node* n = candidates[i];
    doc.nodes.push_back({n->id, n->addr, n->nproc, n->store_port, n->health_port});
    if (options_.peer_of) round.seen_from.push_back(n->seen_from);
    place.world_size += n->nproc;
    if (n->id == options_.host_id) place.host_rank = static_cast<int>(i);
  }
  round.value = EncodeRound(doc);
  writes_.push_back(std::move(round));
  for (Node* n : candidates) {
    writes_.push_back(
        {fmt::format("assign/{}/{}", n->seq, n->ready_count), EncodeAssignment(place)});
    ++place.group_rank;
    place.rank_offset += n->nproc;
    SetWaiting(*n, false);
    n->participant = true;
    ++running_;
  }
  log::Info("rendezvous: round {} closed with {} node{}", round_, candidates.size(),
            candidates.size() == 1 ? "" : "s");
  phase_ = Phase::kRunning;
  first_ = false;
  expected_.clear();
  lost_.clear();
  min_reached_at_.reset();
}

std::vector<Write> Coordinator::TakeWrites() { return std::exchange(writes_, {}); }

std::optional<Clock::time_point> Coordinator::NextDeadline() const {
  std::optional<Clock::time_point> next;
  auto consider = [&](Clock::time_point t) {
    if (!next || t < *next) next = t;
  };
  if (options_.heartbeat_timeout.count() > 0 && oldest_seen_) {
    consider(*oldest_seen_ + options_.heartbeat_timeout);
  }
  if (phase_ == Phase::kForming) {
    if (min_reached_at_) {
      consider(*min_reached_at_ +
               (first_ && expected_.empty() ? options_.last_call_timeout : options_.close_timeout));
    }
    // Each deadline only where Evaluate acts on it: one left in the past
    // would fire the timer again at once, forever (100% of a core). The
    // close timeout acts on a failure to judge or on a round with its
    // minimum; the join timeout on a round short of it, once no failure
    // waits to be judged (which waits for the close timeout).
    const bool short_of_min = waiting_ < static_cast<size_t>(options_.min_nodes);
    const auto close_at = forming_since_ + options_.close_timeout;
    const auto join_at = forming_since_ + options_.join_timeout;
    if ((!first_ || !expected_.empty()) && (pending_failure_ || !short_of_min)) consider(close_at);
    if (short_of_min)
      consider(pending_failure_ && awaited_ > 0 ? std::max(join_at, close_at) : join_at);
  }
  return next;
}

}  // namespace trun::rendezvous
