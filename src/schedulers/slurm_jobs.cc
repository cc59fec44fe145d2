#include "schedulers/slurm_jobs.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>

#include "common/strings.h"

namespace trun::schedulers::slurm {
namespace {

using specs::AppState;

// A number that newer Slurm wraps as {"set": true, "number": N}.
std::optional<long long> Number(const nlohmann::json& j) {
  if (j.is_number_integer()) return j.get<long long>();
  if (j.is_object() && j.value("set", true) && j.contains("number") &&
      j["number"].is_number_integer()) {
    return j["number"].get<long long>();
  }
  return std::nullopt;
}

std::string Str(const nlohmann::json& job, const char* key) {
  auto it = job.find(key);
  if (it == job.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (auto n = Number(*it)) return std::to_string(*n);
  return "";
}

// 22.05 gives the wait status (768 is exit 3); later versions an object
// with return_code and signal.
std::string ExitCode(const nlohmann::json& job) {
  auto it = job.find("exit_code");
  if (it == job.end()) return "";
  if (it->is_number_integer()) {
    int status = it->get<int>();
    return (status & 0x7f) ? fmt::format("0:{}", status & 0x7f)
                           : fmt::format("{}:0", (status >> 8) & 0xff);
  }
  if (it->is_object()) {
    auto code = it->contains("return_code") ? Number((*it)["return_code"]) : std::nullopt;
    auto sig =
        it->contains("signal") && (*it)["signal"].is_object() && (*it)["signal"].contains("id")
            ? Number((*it)["signal"]["id"])
            : std::nullopt;
    if (code) return fmt::format("{}:{}", *code, sig.value_or(0));
  }
  return "";
}

std::string FirstWord(std::string_view s) {
  s = Trim(s);
  size_t space = s.find(' ');
  std::string w(s.substr(0, space));
  while (!w.empty() && w.back() == '+') w.pop_back();
  return w;
}

// "Key=Value Key2=Value two" -> {Key: Value, Key2: "Value two"}: a word
// starts a new pair when it looks like Key=, so values may hold spaces.
std::map<std::string, std::string> KeyValues(std::string_view line) {
  std::map<std::string, std::string> out;
  std::string key;
  std::string* value = nullptr;
  for (const auto& word : Split(Trim(line), ' ')) {
    size_t eq = word.find('=');
    bool is_key = eq != std::string::npos && eq > 0 &&
                  std::isalpha(static_cast<unsigned char>(word[0])) &&
                  word.find_first_not_of(
                      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_:/") == eq;
    if (is_key) {
      value = &out[word.substr(0, eq)];
      *value = word.substr(eq + 1);
    } else if (value) {
      *value += " " + word;
    }
  }
  return out;
}

std::string NullIsEmpty(std::string s) { return s == "(null)" ? "" : s; }

}  // namespace

AppState AppStateFromSlurm(std::string_view state) {
  static const std::map<std::string, AppState, std::less<>> kStates = {
      {"BOOT_FAIL", AppState::kFailed},     {"CANCELLED", AppState::kCancelled},
      {"COMPLETED", AppState::kSucceeded},  {"DEADLINE", AppState::kFailed},
      {"FAILED", AppState::kFailed},        {"NODE_FAIL", AppState::kFailed},
      {"OUT_OF_MEMORY", AppState::kFailed}, {"PENDING", AppState::kPending},
      {"PREEMPTED", AppState::kFailed},     {"RUNNING", AppState::kRunning},
      {"REQUEUED", AppState::kPending},     {"RESIZING", AppState::kPending},
      {"REVOKED", AppState::kFailed},       {"SUSPENDED", AppState::kPending},
      {"TIMEOUT", AppState::kFailed},
  };
  auto it = kStates.find(FirstWord(state));
  return it == kStates.end() ? AppState::kUnknown : it->second;
}

Result<std::vector<SlurmJob>> ParseSqueueJson(std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("jobs") || !j["jobs"].is_array()) {
    return Status::IOError("squeue --json printed no JSON with a \"jobs\" list");
  }
  if (j.contains("errors") && j["errors"].is_array() && !j["errors"].empty()) {
    std::string why;
    for (const auto& e : j["errors"]) {
      std::string one = e.is_object() ? e.value("description", "") : "";
      if (e.is_object() && e.contains("error") && e["error"].is_string()) {
        one += (one.empty() ? "" : ": ") + e["error"].get<std::string>();
      }
      why += (why.empty() ? "" : "; ") + (one.empty() ? e.dump() : one);
    }
    return Status::Unavailable("squeue: " + why);
  }
  std::vector<SlurmJob> out;
  for (const auto& job : j["jobs"]) {
    if (!job.is_object()) continue;
    SlurmJob s;
    s.job_id = Str(job, "job_id");
    auto het = job.contains("het_job_id") ? Number(job["het_job_id"]) : std::nullopt;
    if (het && *het > 0) s.het_job_id = std::to_string(*het);
    auto offset = job.contains("het_job_offset") ? Number(job["het_job_offset"]) : std::nullopt;
    s.het_offset = static_cast<int>(offset.value_or(0));
    s.name = Str(job, "name");
    s.user_id = Str(job, "user_id");
    const auto& st = job.contains("job_state") ? job["job_state"] : nlohmann::json();
    if (st.is_array() && !st.empty() && st[0].is_string()) {
      s.state = st[0].get<std::string>();
    } else if (st.is_string()) {
      s.state = FirstWord(st.get<std::string>());
    }
    s.reason = Str(job, "state_reason");
    s.exit_code = ExitCode(job);
    auto restarts = job.contains("restart_cnt") ? Number(job["restart_cnt"]) : std::nullopt;
    s.restarts = static_cast<int>(restarts.value_or(-1));
    s.nodes = Str(job, "nodes");
    s.work_dir = Str(job, "current_working_directory");
    s.command = Str(job, "command");
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<SlurmJob> ParseScontrolJobs(std::string_view text) {
  std::vector<SlurmJob> out;
  for (const auto& line : Split(text, '\n')) {
    auto kv = KeyValues(line);
    if (!kv.count("JobId")) continue;
    SlurmJob s;
    s.job_id = kv["JobId"];
    s.het_job_id = kv["HetJobId"];
    s.het_offset = static_cast<int>(ParseInt(kv["HetJobOffset"]).value_or(0));
    s.name = kv["JobName"];
    s.user_id = kv["UserId"].substr(kv["UserId"].find('(') + 1);
    if (!s.user_id.empty() && s.user_id.back() == ')') s.user_id.pop_back();
    s.state = FirstWord(kv["JobState"]);
    s.reason = NullIsEmpty(kv["Reason"]);
    s.exit_code = kv["ExitCode"];
    s.restarts = static_cast<int>(ParseInt(kv["Restarts"]).value_or(-1));
    s.nodes = NullIsEmpty(kv["NodeList"]);
    s.work_dir = NullIsEmpty(kv["WorkDir"]);
    s.command = NullIsEmpty(kv["Command"]);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<SlurmJob> ParseSacct(std::string_view text) {
  auto lines = Split(text, '\n');
  std::vector<SlurmJob> out;
  if (lines.empty()) return out;
  std::map<std::string, size_t> column;
  auto header = Split(Trim(lines[0]), '|');
  for (size_t i = 0; i < header.size(); ++i) column[header[i]] = i;
  auto get = [&](const std::vector<std::string>& row, const char* name) -> std::string {
    auto it = column.find(name);
    return it == column.end() || it->second >= row.size() ? "" : row[it->second];
  };
  std::map<std::string, size_t> index;  // job id -> place in `out`
  for (size_t l = 1; l < lines.size(); ++l) {
    if (Trim(lines[l]).empty()) continue;
    auto row = Split(lines[l], '|');
    std::string id = get(row, "JobID");
    // Steps ("12.batch", "12.0", "10+0.0") are not jobs; a component may be
    // written "10+1".
    if (id.empty() || id.find('.') != std::string::npos) continue;
    SlurmJob s;
    size_t plus = id.find('+');
    if (plus != std::string::npos) {
      s.het_job_id = id.substr(0, plus);
      s.het_offset = static_cast<int>(ParseInt(id.substr(plus + 1)).value_or(0));
    }
    s.job_id = id;
    s.name = get(row, "JobName");
    s.state = FirstWord(get(row, "State"));
    s.exit_code = get(row, "ExitCode");
    s.nodes = get(row, "NodeList");
    if (s.nodes == "None assigned") s.nodes.clear();
    s.work_dir = get(row, "WorkDir");
    s.user_id = get(row, "UID");
    auto it = index.find(id);
    if (it == index.end()) {
      s.restarts = 0;
      index[id] = out.size();
      out.push_back(std::move(s));
    } else {
      s.restarts = out[it->second].restarts + 1;
      out[it->second] = std::move(s);
    }
  }
  return out;
}

}  // namespace trun::schedulers::slurm
