#include "agent/job_stacks.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "agent/stacks.h"

namespace trun::agent {
namespace {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxParallel = 32;

// What the askers share with the thread that waits for them. The askers
// are detached: one stuck past the budget (a resolver that does not
// answer) must not hold up the reply, and it still finds this alive.
struct Fanout {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Result<nlohmann::json>> answers;  // a timeout until answered
  size_t done = 0;
  std::atomic<size_t> next{0};
};

}  // namespace

bool IsNodeDocument(const nlohmann::json& j) {
  return j.is_object() && j.contains("workers") && j["workers"].is_array();
}

std::string HostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

std::vector<PeerNode> PeersOf(const rendezvous::Round& round) {
  std::vector<PeerNode> peers;
  for (size_t i = 0; i < round.participants.size(); ++i) {
    if (static_cast<int>(i) == round.group_rank) continue;
    const auto& p = round.participants[i];
    peers.push_back({static_cast<int>(i),
                     p.health_port > 0 && !p.addr.empty() ? HostPort(p.addr, p.health_port) : ""});
  }
  return peers;
}

std::vector<Result<nlohmann::json>> FetchPeerStacks(const std::vector<PeerNode>& peers,
                                                    const std::string& token,
                                                    const std::string& scope,
                                                    std::chrono::milliseconds budget,
                                                    size_t max_bytes) {
  const auto deadline = Clock::now() + budget;
  auto f = std::make_shared<Fanout>();
  for (const auto& p : peers) {
    f->answers.push_back(
        Status::Timeout(fmt::format("{}: no answer within {} ms", p.address, budget.count())));
  }
  const size_t askers = std::min(peers.size(), kMaxParallel);
  for (size_t a = 0; a < askers; ++a) {
    std::thread([f, peers, token, scope, deadline, max_bytes] {
      for (size_t i; (i = f->next.fetch_add(1)) < peers.size();) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        Result<nlohmann::json> r = Status::Timeout("not asked within the budget");
        if (peers[i].address.empty()) {
          r = Status::Unavailable(
              "its agent has no health server: start it with --health-check-port");
        } else if (left.count() > 0) {
          r = FetchStacks(peers[i].address, token, left, scope, max_bytes);
        }
        std::lock_guard lk(f->mu);
        f->answers[i] = std::move(r);
        ++f->done;
        f->cv.notify_all();
      }
    }).detach();
  }
  std::unique_lock lk(f->mu);
  f->cv.wait_until(lk, deadline, [&] { return f->done == peers.size(); });
  // A copy: an asker past the budget may still write its place.
  return f->answers;
}

ojson MergeJobStacks(ojson local, int local_node_rank, const std::vector<PeerNode>& peers,
                     std::vector<Result<nlohmann::json>> answers) {
  std::vector<std::pair<int, ojson>> nodes;
  for (size_t i = 0; i < peers.size(); ++i) {
    const PeerNode& p = peers[i];
    std::string why;
    if (i >= answers.size()) {
      why = "not asked";
    } else if (!answers[i].ok()) {
      why = answers[i].status().message();
    } else if (!IsNodeDocument(*answers[i])) {
      why = fmt::format("{}: /stacks answered something other than a node's document", p.address);
    } else {
      nodes.emplace_back(p.node_rank, ojson(std::move(*answers[i])));
      continue;
    }
    ojson gap;
    gap["hostname"] = nullptr;
    gap["run_id"] = local.value("run_id", ojson(nullptr));
    gap["node_rank"] = p.node_rank;
    gap["round"] = local.value("round", ojson(nullptr));
    gap["address"] = p.address.empty() ? ojson(nullptr) : ojson(p.address);
    gap["error"] = why;
    gap["workers"] = ojson::array();
    nodes.emplace_back(p.node_rank, std::move(gap));
  }
  nodes.emplace_back(local_node_rank, std::move(local));
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  ojson out = ojson::array();
  for (auto& [rank, doc] : nodes) out.push_back(std::move(doc));
  return out;
}

}  // namespace trun::agent
