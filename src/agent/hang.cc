#include "agent/hang.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <random>

#include "agent/stacks.h"

namespace trun::agent {

namespace {

// For each worker, the first sample from which every sample up to the
// newest found its main thread at the newest one's device wait; the
// number of samples when the newest found none. One pass, newest first.
std::vector<size_t> WaitingSince(const std::deque<ProgressSample>& samples) {
  const ProgressSample& now = samples.back();
  const size_t workers = now.cpu_seconds.size();
  std::vector<size_t> since(workers, samples.size());
  for (size_t i = 0; i < workers; ++i) {
    if (now.device_wait.size() != workers || now.device_wait[i].empty()) continue;
    size_t k = samples.size();
    while (k > 0) {
      const auto& wait = samples[k - 1].device_wait;
      if (wait.size() != workers || wait[i] != now.device_wait[i]) break;
      --k;
    }
    since[i] = k;
  }
  return since;
}

// Whether no worker made progress between samples `from` and the newest: no
// output, and no more than the idle share of a core, unless every sample
// from `from` on found the worker at one and the same device wait.
bool QuietBetween(const std::deque<ProgressSample>& samples, size_t from,
                  const std::vector<size_t>& waiting_since) {
  const ProgressSample& old = samples[from];
  const ProgressSample& now = samples.back();
  if (old.cpu_seconds.size() != now.cpu_seconds.size() ||
      old.output_bytes.size() != now.output_bytes.size() || old.output_bytes != now.output_bytes) {
    return false;
  }
  for (size_t i = 0; i < now.cpu_seconds.size(); ++i) {
    const bool busy =
        now.cpu_seconds[i] - old.cpu_seconds[i] > kIdleCpuFraction * (now.at - old.at);
    if (busy && from < waiting_since[i]) return false;
  }
  return true;
}

}  // namespace

double ProgressWindow::Quiet(ProgressSample sample) {
  samples_.push_back(std::move(sample));
  const double now = samples_.back().at;
  // Keep the newest sample that is at least the timeout old, and what is
  // newer: the longest window the rule needs to judge.
  while (samples_.size() > 2 && now - samples_[1].at >= timeout_s_) samples_.pop_front();
  // The oldest sample the workers have been quiet since gives the longest
  // quiet.
  const std::vector<size_t> waiting_since = WaitingSince(samples_);
  for (size_t from = 0; from + 1 < samples_.size(); ++from) {
    if (QuietBetween(samples_, from, waiting_since)) return now - samples_[from].at;
  }
  return 0;
}

bool ProgressWindow::BusyAndSilent(size_t i, double at, double cpu_seconds,
                                   uint64_t output_bytes) const {
  if (samples_.empty()) return false;
  const ProgressSample& last = samples_.back();
  if (i >= last.cpu_seconds.size() || i >= last.output_bytes.size()) return false;
  return output_bytes == last.output_bytes[i] &&
         cpu_seconds - last.cpu_seconds[i] > kIdleCpuFraction * (at - last.at);
}

bool SecondTimeout::Due(bool stalled, double now) {
  if (!stalled) {
    due_.reset();
    return false;
  }
  if (!due_) due_ = now + timeout_s_;
  return now >= *due_;
}

double TreeCpuSeconds(pid_t pid) {
  double total = 0;
  auto add = [&](pid_t p) {
    if (auto st = proc::ReadProcStat(p); st.ok()) {
      total += st->cpu_seconds + st->reaped_children_cpu_seconds;
    }
  };
  add(pid);
  for (pid_t child : Descendants(pid)) add(child);
  return total;
}

namespace {

bool InCollective(const RankStack& s) {
  return std::any_of(s.frames.begin(), s.frames.end(), [](const proc::PyFrame& f) {
    return f.file.find("torch/distributed/") != std::string::npos;
  });
}

bool InLibrary(const proc::PyFrame& f) {
  return f.file.empty() || f.file.starts_with("<") ||
         f.file.find("/site-packages/") != std::string::npos ||
         f.file.find("/dist-packages/") != std::string::npos ||
         f.file.find("/lib/python3") != std::string::npos;
}

std::string FrameAt(const proc::PyFrame& f) {
  const size_t slash = f.file.rfind('/');
  return fmt::format("{} at {}:{}", f.function,
                     slash == std::string::npos ? f.file : f.file.substr(slash + 1), f.line);
}

// What makes two stacks the same place.
std::string Signature(const RankStack& s) {
  if (s.finished) return "=finished";
  if (s.frames.empty()) return "!" + s.error;
  std::string sig;
  for (const auto& f : s.frames) sig += fmt::format("{}\n{}\n{}\n", f.function, f.file, f.line);
  return sig;
}

}  // namespace

std::string DeviceWait(const std::vector<proc::PyFrame>& frames) {
  if (frames.empty()) return "";
  const std::string& file = frames.front().file;
  if (file.find("torch/cuda/") == std::string::npos &&
      file.find("torch/distributed/") == std::string::npos) {
    return "";
  }
  return Signature({0, frames, ""});
}

DeviceWaitWatcher::DeviceWaitWatcher() : thread_([this] { Run(); }) {}

DeviceWaitWatcher::~DeviceWaitWatcher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void DeviceWaitWatcher::Watch(const std::vector<pid_t>& pids) {
  {
    std::lock_guard lock(mu_);
    std::erase_if(watched_, [&](const auto& kv) {
      return std::find(pids.begin(), pids.end(), kv.first) == pids.end();
    });
    for (pid_t pid : pids) watched_.try_emplace(pid);
  }
  wake_.notify_one();
}

std::string DeviceWaitWatcher::Take(pid_t pid) {
  std::lock_guard lock(mu_);
  auto it = watched_.find(pid);
  if (it == watched_.end()) return "";
  Watched& w = it->second;
  std::string key = !w.moved && w.reads >= 2 ? w.key : "";
  w.reads = 0;
  w.moved = false;
  w.key.clear();
  wake_.notify_one();
  return key;
}

// Once a span's answer is known to be "" (its first read found no device
// wait, or a later one found the thread elsewhere), reading on until Take
// starts the next span would change nothing: a worker busy in its own code
// is read once per span, not every kWatchPeriodMs.
bool DeviceWaitWatcher::Settled(const Watched& w) {
  return w.reads > 0 && (w.moved || w.key.empty());
}

void DeviceWaitWatcher::Run() {
  std::minstd_rand jitter(std::random_device{}());
  std::unique_lock lock(mu_);
  while (!stop_) {
    const auto unsettled = [this] {
      return std::any_of(watched_.begin(), watched_.end(),
                         [](const auto& kv) { return !Settled(kv.second); });
    };
    if (!unsettled()) {
      wake_.wait(lock, [&] { return stop_ || unsettled(); });
      continue;
    }
    // Reads take microseconds; Watch and Take wait for them at most that.
    for (auto& [pid, w] : watched_) {
      if (Settled(w)) continue;
      if (!w.reader && !w.unreadable) {
        auto opened = proc::PyStackReader::Open(pid);
        if (opened.ok()) {
          w.reader.emplace(std::move(*opened));
        } else {
          w.unreadable = true;
        }
      }
      std::string here;
      if (w.reader) {
        auto r = w.reader->Read();
        if (r.ok() && !r->threads.empty()) here = DeviceWait(r->threads.front().frames);
      }
      if (w.reads == 0) {
        w.key = here;
      } else if (here != w.key) {
        w.moved = true;
      }
      ++w.reads;
    }
    // A period that varies, so that the reads cannot fall in step with a
    // loop of the same period and always find it in its wait.
    const auto period = std::chrono::microseconds(
        std::uniform_int_distribution<int>(500, 2000 * kWatchPeriodMs - 500)(jitter));
    wake_.wait_for(lock, period, [this] { return stop_; });
  }
}

std::string Where(const RankStack& s) {
  if (s.finished) return "finished: exited 0";
  if (s.frames.empty()) return "no stack: " + (s.error.empty() ? "no Python frames" : s.error);
  std::string out = "in " + FrameAt(s.frames.front());
  if (InLibrary(s.frames.front())) {
    auto own = std::find_if(s.frames.begin(), s.frames.end(),
                            [](const proc::PyFrame& f) { return !InLibrary(f); });
    if (own != s.frames.end()) out += ", called from " + FrameAt(*own);
  }
  return out;
}

std::vector<HangGroup> GroupStacks(const std::vector<RankStack>& stacks) {
  std::map<std::string, size_t> index;
  std::vector<HangGroup> groups;
  // Of each group: whether it waits in a collective, and whether it has
  // finished. Finished ranks wait on nobody and nobody waits on them: the
  // rule below weighs the others only.
  std::vector<bool> waiting;
  std::vector<bool> finished;
  for (const auto& s : stacks) {
    auto [it, fresh] = index.try_emplace(Signature(s), groups.size());
    if (fresh) {
      groups.push_back({{}, Where(s), false});
      waiting.push_back(InCollective(s));
      finished.push_back(s.finished);
    }
    groups[it->second].ranks.push_back(s.rank);
  }
  bool some_wait = false;
  bool all_wait = true;
  size_t running = 0;
  size_t largest = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (finished[i]) continue;
    ++running;
    some_wait = some_wait || waiting[i];
    all_wait = all_wait && waiting[i];
    largest = std::max(largest, groups[i].ranks.size());
  }
  if (some_wait && !all_wait) {
    for (size_t i = 0; i < groups.size(); ++i) groups[i].odd = !finished[i] && !waiting[i];
  } else if (running > 1) {
    size_t ties = 0;
    for (size_t i = 0; i < groups.size(); ++i) {
      ties += !finished[i] && groups[i].ranks.size() == largest;
    }
    if (ties == 1) {
      for (size_t i = 0; i < groups.size(); ++i) {
        groups[i].odd = !finished[i] && groups[i].ranks.size() != largest;
      }
    }
  }
  for (auto& g : groups) std::sort(g.ranks.begin(), g.ranks.end());
  std::sort(groups.begin(), groups.end(), [](const HangGroup& a, const HangGroup& b) {
    return a.odd != b.odd ? a.odd : a.ranks.front() < b.ranks.front();
  });
  return groups;
}

std::string FormatRanks(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out += ", ";
    out += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string HangLine(const HangGroup& g) {
  std::string out = FormatRanks(g.ranks);
  if (g.odd) {
    out += g.ranks.size() == 1 ? " is not where the others are" : " are not where the others are";
  }
  return out + ": " + g.where;
}

std::string HangSummary(const std::vector<HangGroup>& groups) {
  std::string out;
  for (const auto& g : groups) out += (out.empty() ? "" : "; ") + HangLine(g);
  return out;
}

std::vector<RankStack> RankStacksOf(const nlohmann::ordered_json& doc) {
  std::vector<RankStack> out;
  auto workers = doc.find("workers");
  if (workers == doc.end() || !workers->is_array()) return out;
  for (const auto& w : *workers) {
    RankStack s;
    s.rank = w.value("rank", -1);
    auto status = w.find("status");
    s.finished = status != w.end() && *status == "succeeded";
    if (auto e = w.find("error"); e != w.end() && e->is_string()) s.error = e->get<std::string>();
    auto threads = w.find("threads");
    if (threads != w.end() && threads->is_array() && !threads->empty()) {
      // The main thread, listed first.
      for (const auto& f : (*threads)[0].value("frames", nlohmann::ordered_json::array())) {
        s.frames.push_back({f.value("function", "?"), f.value("file", "?"), f.value("line", -1)});
      }
    } else if (s.error.empty() && !s.finished) {
      s.error = "not running";
    }
    out.push_back(std::move(s));
  }
  return out;
}

JobVerdict JudgeJob(const std::vector<NodeQuiet>& nodes, double timeout_s) {
  JobVerdict v;
  // The least quiet of the nodes still running; none running: infinity.
  double least = std::numeric_limits<double>::infinity();
  for (const auto& n : nodes) {
    if (n.finished) continue;
    if (n.quiet_s) {
      least = std::min(least, *n.quiet_s);
    } else {
      v.unknown.push_back(n);
    }
  }
  const bool some_run = least < std::numeric_limits<double>::infinity() || !v.unknown.empty();
  v.hung = some_run && v.unknown.empty() && least >= timeout_s;
  const double lacks = some_run && v.unknown.empty() ? timeout_s - least : timeout_s;
  v.recheck_in_s = v.hung ? 0 : std::max(kSamplePeriodS, lacks);
  return v;
}

nlohmann::ordered_json HangAnswer(std::optional<int> node_rank, std::optional<int64_t> round,
                                  std::optional<double> quiet_s, bool finished, double idle_s,
                                  const std::vector<HangGroup>& groups) {
  using ojson = nlohmann::ordered_json;
  ojson j;
  j["node_rank"] = node_rank ? ojson(*node_rank) : ojson(nullptr);
  j["round"] = round ? ojson(*round) : ojson(nullptr);
  j["quiet_seconds"] = quiet_s ? ojson(*quiet_s) : ojson(nullptr);
  j["finished"] = finished;
  if (groups.empty()) {
    j["hang"] = nullptr;
    return j;
  }
  ojson list = ojson::array();
  for (const auto& g : groups) {
    list.push_back({{"ranks", g.ranks}, {"where", g.where}, {"odd", g.odd}});
  }
  j["hang"] = {{"idle_seconds", idle_s}, {"summary", HangSummary(groups)}, {"groups", list}};
  return j;
}

NodeQuiet QuietOf(int node_rank, int64_t round, const Result<nlohmann::json>& answer) {
  NodeQuiet n{node_rank, std::nullopt, ""};
  if (!answer.ok()) {
    n.error = answer.status().message();
    return n;
  }
  const auto& j = *answer;
  if (!j.is_object() || !j.contains("quiet_seconds")) {
    n.error = "its /stacks?scope=hang answer is not one: is it an older trun?";
  } else if (!j["round"].is_number_integer() || j["round"].get<int64_t>() != round) {
    n.quiet_s = 0;  // between rounds: its workers are being restarted
  } else if (auto f = j.find("finished"); f != j.end() && *f == true) {
    n.finished = true;
  } else if (!j["quiet_seconds"].is_number()) {
    n.error = "it does not watch its workers: start every agent with --hang-timeout";
  } else {
    n.quiet_s = j["quiet_seconds"].get<double>();
  }
  return n;
}

std::optional<std::vector<HangGroup>> VerdictOf(int64_t round, const nlohmann::json& answer) {
  if (!answer.is_object() || !answer.contains("round") || !answer["round"].is_number_integer() ||
      answer["round"].get<int64_t>() != round) {
    return std::nullopt;
  }
  auto hang = answer.find("hang");
  if (hang == answer.end() || !hang->is_object() || !hang->contains("groups") ||
      !(*hang)["groups"].is_array()) {
    return std::nullopt;
  }
  std::vector<HangGroup> groups;
  for (const auto& g : (*hang)["groups"]) {
    if (!g.is_object() || !g.contains("ranks") || !g["ranks"].is_array()) continue;
    HangGroup out;
    for (const auto& r : g["ranks"]) {
      if (r.is_number_integer()) out.ranks.push_back(r.get<int>());
    }
    out.where = g.value("where", std::string());
    out.odd = g.value("odd", false);
    groups.push_back(std::move(out));
  }
  return groups;
}

std::vector<RankStack> JobRankStacks(const nlohmann::ordered_json& job) {
  std::vector<RankStack> out;
  if (!job.is_array()) return out;
  for (const auto& node : job) {
    for (auto& s : RankStacksOf(node)) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace trun::agent
