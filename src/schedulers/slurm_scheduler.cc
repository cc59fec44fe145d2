#include "schedulers/slurm_scheduler.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "common/files.h"
#include "common/hostlist.h"
#include "common/log.h"
#include "common/strings.h"
#include "failure/failure.h"
#include "proc/command.h"
#include "schedulers/log_files.h"
#include "schedulers/slurm_batch.h"
#include "schedulers/slurm_jobs.h"
#include "schedulers/slurm_stacks.h"
#include "specs/serialize.h"

namespace trun::schedulers {
namespace {

namespace fs = std::filesystem;
using slurm::BatchRequest;
using slurm::SlurmJob;
using specs::AppState;
using Clock = std::chrono::steady_clock;

constexpr double kDefaultTimeout = 60;
// `trun stack` waits this long at most for every node's answer (less where
// $TRUN_SLURM_TIMEOUT is less): a node that has not answered by then is named.
constexpr double kStackTimeout = 10;
constexpr std::string_view kSubmitPrefix = "submit-";

double CommandTimeout() {
  const char* v = std::getenv("TRUN_SLURM_TIMEOUT");
  if (!v || !*v) return kDefaultTimeout;
  auto d = ParseDouble(v);
  if (!d || *d <= 0) {
    log::Warning("TRUN_SLURM_TIMEOUT='{}' is not a number of seconds above 0; using {}", v,
                 kDefaultTimeout);
    return kDefaultTimeout;
  }
  return *d;
}

std::string RecordRoot() { return StateRoot() + "/slurm"; }
std::string RecordDir(const std::string& job_id) { return RecordRoot() + "/" + job_id; }

bool Contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

// What a SLURM command said last on stderr: its verdict ("sbatch: error:
// Batch job submission failed: ...") after any notes.
std::string LastLine(std::string_view err) {
  std::string_view t = Trim(err);
  size_t nl = t.rfind('\n');
  return std::string(Trim(nl == std::string_view::npos ? t : t.substr(nl + 1)));
}

bool IsJobId(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos &&
         ParseInt(s).has_value();
}

// "the SLURM controller cannot be reached" with what said so and the fix.
Status Unreachable(std::string_view said, std::string_view consequence) {
  return Status::Unavailable(fmt::format(
      "the SLURM controller cannot be reached ({}); {}. Check that slurmctld is running "
      "(`scontrol ping`) and that SLURM_CONF names this cluster's slurm.conf, then try again",
      LastLine(said), consequence));
}

// Runs one of SLURM's commands with the timeout, `timeout_s` where given
// (and `env` added to its environment).
Result<proc::CommandResult> Slurm(const std::vector<std::string>& argv,
                                  const std::map<std::string, std::string>& env = {},
                                  double timeout_s = 0) {
  auto r = proc::RunCommand(argv, timeout_s > 0 ? timeout_s : CommandTimeout(), env);
  if (!r.ok() && r.status().code() == StatusCode::kNotFound) {
    return Status::IOError(fmt::format(
        "{} is not on PATH: the slurm scheduler runs SLURM's commands (sbatch, squeue, scontrol, "
        "scancel, sacct, and srun for trun stack); run trun where they are installed (a login "
        "node of the cluster), or add their directory to PATH (Debian and Ubuntu: apt-get "
        "install slurm-client)",
        argv[0]));
  }
  return r;
}

std::string TimedOut(const std::string& command) {
  return fmt::format("{} did not answer within {} s ($TRUN_SLURM_TIMEOUT)", command,
                     CommandTimeout());
}

std::vector<SlurmJob> OfJob(std::vector<SlurmJob> jobs, const std::string& job_id) {
  if (job_id.empty()) return jobs;
  std::erase_if(jobs,
                [&](const SlurmJob& j) { return j.job_id != job_id && j.het_job_id != job_id; });
  return jobs;
}

// The controller's jobs (all of them, or those of `job_id` with its
// components): squeue --json, or scontrol where squeue has no JSON.
// Unavailable when the controller cannot be asked.
Result<std::vector<SlurmJob>> ControllerJobs(const std::string& job_id) {
  std::vector<std::string> argv = {"squeue", "--json", "--states=all"};
  if (!job_id.empty()) argv.insert(argv.end(), {"-j", job_id});
  auto r = Slurm(argv);
  if (!r.ok()) return r.status();
  if (r->timed_out) return Unreachable(TimedOut("squeue"), "SLURM cannot be asked about jobs");
  if (r->exit_code == 0) {
    auto jobs = slurm::ParseSqueueJson(r->out);
    if (jobs.ok()) return OfJob(std::move(*jobs), job_id);
    if (Contains(jobs.status().message(), "Invalid job id")) return std::vector<SlurmJob>{};
    if (jobs.status().code() == StatusCode::kUnavailable) {
      return Unreachable(jobs.status().message(), "SLURM cannot be asked about jobs");
    }
  } else if (Contains(r->err, "Unable to contact slurm controller")) {
    return Unreachable(r->err, "SLURM cannot be asked about jobs");
  } else if (Contains(r->err, "Invalid job id")) {
    return std::vector<SlurmJob>{};
  }
  // This squeue cannot print JSON: scontrol prints the same jobs as text.
  argv = {"scontrol", "-o", "show", "job"};
  if (!job_id.empty()) argv.push_back(job_id);
  r = Slurm(argv);
  if (!r.ok()) return r.status();
  if (r->timed_out) return Unreachable(TimedOut("scontrol"), "SLURM cannot be asked about jobs");
  if (r->exit_code == 0) return OfJob(slurm::ParseScontrolJobs(r->out), job_id);
  if (Contains(r->err, "Invalid job id")) return std::vector<SlurmJob>{};
  if (Contains(r->err, "Unable to contact slurm controller")) {
    return Unreachable(r->err, "SLURM cannot be asked about jobs");
  }
  return Status::IOError(fmt::format("scontrol show job {}: {}", job_id, LastLine(r->err)));
}

// What sacct knows of `ids`: the accounting database, else the
// job-completion file (sacct -c). Empty when neither knows them.
std::vector<SlurmJob> AccountingJobs(const std::vector<std::string>& ids) {
  if (ids.empty()) return {};
  std::string list;
  for (const auto& id : ids) list += (list.empty() ? "" : ",") + id;
  for (bool completion_file : {false, true}) {
    std::vector<std::string> argv = {"sacct"};
    if (completion_file) argv.push_back("-c");
    argv.insert(argv.end(), {"--parsable2", "--duplicates", "-j", list,
                             "--format=" + std::string(slurm::kSacctFormat)});
    auto r = Slurm(argv);
    if (!r.ok() || r->timed_out || r->exit_code != 0) continue;
    auto jobs = slurm::ParseSacct(r->out);
    // A database names a heterogeneous job's components LEADER+K.
    std::erase_if(jobs, [&](const SlurmJob& j) {
      return std::find(ids.begin(), ids.end(), j.job_id) == ids.end() &&
             std::find(ids.begin(), ids.end(), j.het_job_id) == ids.end();
    });
    if (!jobs.empty()) return jobs;
  }
  return {};
}

// What this trun recorded when it submitted the job; empty parts when it
// did not (another machine's or another tool's job).
struct Record {
  std::optional<specs::AppDef> app;
  std::optional<BatchRequest> request;
};

Record ReadRecord(const std::string& dir) {
  Record r;
  if (auto text = ReadFile(dir + "/app.json"); text.ok()) {
    if (auto app = specs::ParseAppDef(*text); app.ok()) r.app = std::move(*app);
  }
  if (auto text = ReadFile(dir + "/request.json"); text.ok()) {
    auto j = nlohmann::json::parse(*text, nullptr, false);
    if (!j.is_discarded()) {
      if (auto req = BatchRequest::FromJson(j); req.ok()) r.request = std::move(*req);
    }
  }
  return r;
}

// The job ids of `job_id`'s components, for sacct (which knows a
// component only by its own id: SLURM numbers them from the leader's on).
std::vector<std::string> ComponentIds(const std::string& job_id, const Record& record) {
  std::vector<std::string> ids = {job_id};
  if (!record.request || !record.request->heterogeneous) return ids;
  int n = 0;
  for (const auto& [name, replicas] : record.request->roles) n += replicas;
  long long first = *ParseInt(job_id);
  for (int i = 1; i < n; ++i) ids.push_back(std::to_string(first + i));
  return ids;
}

// The worst of the components' states: a failed component fails the app.
AppState Combined(const std::vector<SlurmJob>& jobs) {
  static constexpr AppState kOrder[] = {AppState::kFailed,  AppState::kCancelled,
                                        AppState::kUnknown, AppState::kPending,
                                        AppState::kRunning, AppState::kSucceeded};
  std::vector<AppState> states;
  for (const auto& j : jobs) states.push_back(slurm::AppStateFromSlurm(j.state));
  for (AppState s : kOrder) {
    if (std::find(states.begin(), states.end(), s) != states.end()) return s;
  }
  return AppState::kUnknown;
}

std::vector<std::string> Hosts(const std::string& nodes) {
  if (nodes.empty()) return {};
  auto hosts = ExpandHostlist(nodes);
  return hosts.ok() ? *hosts : std::vector<std::string>{nodes};
}

// An app as SLURM and the record describe it, and where its files are.
struct App {
  DescribeAppResponse d;
  std::string job_dir;
  std::vector<std::string> hosts;  // the nodes of its replicas, in order
  int components = 1;              // a heterogeneous job's, else 1
};

// A failed app's root cause, by failure::RootCause's rule, among the error
// files trun's agents wrote in `attempt`. The replicas that wrote none were
// stopped with the failed ones.
void AddRootCause(App& app, int attempt) {
  if (app.job_dir.empty()) return;
  std::vector<failure::FailureKey> keys;
  std::vector<specs::ReplicaStatus*> failed;
  for (auto& rs : app.d.roles_statuses) {
    for (auto& r : rs.replicas) {
      std::string path = slurm::ErrorFile(app.job_dir, app.d.app_id, rs.role, r.id, attempt);
      auto file = failure::ReadErrorFile(path);
      if (!file.ok()) continue;
      keys.push_back({.timestamp = file->timestamp.value_or(0),
                      .has_error_file = true,
                      .rank = static_cast<int>(failed.size()),
                      .written_ns = file->written_ns});
      r.structured_error_msg = std::string(Trim(file->json));
      failed.push_back(&r);
    }
  }
  if (failed.empty()) return;
  app.d.structured_error_msg = failed[failure::RootCause(keys)]->structured_error_msg;
  for (auto& rs : app.d.roles_statuses) {
    for (auto& r : rs.replicas) {
      r.state = r.structured_error_msg != specs::kNone ? AppState::kFailed : AppState::kCancelled;
    }
  }
}

App Build(const std::string& app_id, std::vector<SlurmJob> jobs, const Record& record) {
  std::stable_sort(jobs.begin(), jobs.end(), [](const SlurmJob& a, const SlurmJob& b) {
    return a.het_offset < b.het_offset;
  });
  const SlurmJob& lead = jobs.front();
  App app;
  DescribeAppResponse& d = app.d;
  d.app_id = app_id;
  d.name = record.app ? record.app->name : lead.name;
  d.state = Combined(jobs);
  d.num_restarts = std::max(lead.restarts, 0);
  app.job_dir = record.request ? record.request->job_dir : lead.work_dir;
  if (!app.job_dir.empty()) d.ui_url = "file://" + app.job_dir;
  d.msg = fmt::format("SLURM job {}: {}", app_id, lead.state.empty() ? "?" : lead.state);
  if (!lead.reason.empty() && lead.reason != "None") d.msg += fmt::format(" ({})", lead.reason);
  if (!lead.exit_code.empty() && lead.exit_code != "0:0") {
    d.msg += fmt::format(", exit code {}", lead.exit_code);
  }
  if (lead.restarts > 0) d.msg += fmt::format(", requeued {} time(s)", lead.restarts);

  // Roles and their replicas: recorded, or read from the job names (a
  // component per replica, "ROLE-K") or the job itself (one role).
  const bool het = record.request ? record.request->heterogeneous : !lead.het_job_id.empty();
  std::vector<std::pair<std::string, int>> roles;
  std::vector<std::pair<std::string, int>> names;  // the replica each component runs
  for (const auto& j : jobs) {
    size_t dash = j.name.rfind('-');
    auto k = dash == std::string::npos ? std::nullopt : ParseInt(j.name.substr(dash + 1));
    names.emplace_back(k ? j.name.substr(0, dash) : j.name, k ? static_cast<int>(*k) : 0);
  }
  const std::vector<std::string> hosts = Hosts(lead.nodes);
  if (het) app.components = static_cast<int>(jobs.size());
  if (record.request) {
    roles = record.request->roles;
  } else if (het) {
    for (const auto& [role, k] : names) {
      if (roles.empty() || roles.back().first != role) roles.emplace_back(role, 0);
      roles.back().second = std::max(roles.back().second, k + 1);
    }
  } else {
    roles.emplace_back(lead.name, std::max<int>(1, static_cast<int>(hosts.size())));
  }

  int index = 0;
  for (const auto& [role, count] : roles) {
    specs::RoleStatus rs{role, {}};
    for (int k = 0; k < count; ++k, ++index) {
      specs::ReplicaStatus r;
      r.id = k;
      r.role = role;
      r.state = d.state;
      if (het) {
        auto it = std::find(names.begin(), names.end(), std::make_pair(role, k));
        size_t c = it != names.end() ? static_cast<size_t>(it - names.begin())
                                     : static_cast<size_t>(index);
        if (c < jobs.size()) {
          r.state = slurm::AppStateFromSlurm(jobs[c].state);
          auto h = Hosts(jobs[c].nodes);
          if (!h.empty()) r.hostname = h.front();
        }
      } else if (static_cast<size_t>(k) < hosts.size()) {
        r.hostname = hosts[k];
      }
      r.hostaddr = r.hostname;
      if (!r.hostname.empty()) app.hosts.push_back(r.hostname);
      rs.replicas.push_back(std::move(r));
    }
    d.roles_statuses.push_back(std::move(rs));
  }
  if (d.state == AppState::kFailed) AddRootCause(app, std::max(lead.restarts, 0));
  if (record.app) {
    d.roles = record.app->roles;
  } else {
    for (const auto& [role, count] : roles) {
      specs::Role r;
      r.name = role;
      r.entrypoint = lead.command;
      r.num_replicas = count;
      d.roles.push_back(std::move(r));
    }
  }
  return app;
}

// The app from SLURM's three sources, in turn (see the header).
Result<App> Lookup(const std::string& app_id) {
  if (!IsJobId(app_id)) {
    return Status::InvalidArgument(
        fmt::format("'{}' is not a SLURM job id: slurm handles are slurm://SESSION/JOBID, e.g. "
                    "slurm://trun/1234; `trun list -s slurm` lists them",
                    app_id));
  }
  Record record = ReadRecord(RecordDir(app_id));
  auto jobs = ControllerJobs(app_id);
  Status controller = jobs.ok() ? Status::OK() : jobs.status();
  if (!jobs.ok() && jobs.status().code() != StatusCode::kUnavailable) return jobs.status();
  std::vector<SlurmJob> found = jobs.ok() ? std::move(*jobs) : std::vector<SlurmJob>{};
  if (found.empty()) found = AccountingJobs(ComponentIds(app_id, record));
  if (found.empty()) {
    if (!controller.ok()) return controller;
    return Status::UnknownApp(fmt::format(
        "no SLURM job {}: neither the controller (squeue) nor sacct knows it; `trun list -s "
        "slurm` lists your jobs",
        app_id));
  }
  return Build(app_id, std::move(found), record);
}

// Jobs cut off from their sbatch: a job whose script is `script_path`.
Result<std::optional<std::string>> FindSubmitted(const std::string& script_path) {
  auto jobs = ControllerJobs("");
  if (!jobs.ok()) return jobs.status();
  for (const auto& j : *jobs) {
    if (j.command == script_path && j.het_offset == 0) return std::optional(j.job_id);
  }
  return std::optional<std::string>();
}

// Makes the record of a submission that got its job id permanent.
void KeepRecord(const std::string& submit_dir, const std::string& job_id) {
  std::error_code ec;
  fs::remove_all(RecordDir(job_id), ec);  // a job id the cluster gave out before
  fs::rename(submit_dir, RecordDir(job_id), ec);
  if (ec)
    log::Warning("cannot keep the record of job {} in {}: {}", job_id, submit_dir, ec.message());
}

}  // namespace

SlurmScheduler::SlurmScheduler(std::string session) : Scheduler("slurm", std::move(session)) {
  using specs::OptType;
  opts_.Add("partition", OptType::kStr, "the partition to run in (default: SLURM's default)");
  opts_.Add("time", OptType::kStr,
            "the time limit: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS");
  opts_.Add("account", OptType::kStr, "the account to charge");
  opts_.Add("qos", OptType::kStr, "the quality of service");
  opts_.Add("constraint", OptType::kStr, "node features the job needs (sbatch --constraint)");
  opts_.Add("comment", OptType::kStr, "a comment on the job");
  opts_.Add("mail-user", OptType::kStr, "who SLURM mails about the job");
  opts_.Add("mail-type", OptType::kStr, "the events SLURM mails about (e.g. END,FAIL)");
  opts_.Add("job_dir", OptType::kStr,
            "where the job runs and writes its log files (created if missing; default: the "
            "working directory)");
  opts_.Add("nomem", OptType::kBool,
            "leave out --mem, for clusters whose nodes report no memory (e.g. AWS ParallelCluster)",
            false);
}

Result<DryRunInfo> SlurmScheduler::DryRun(const specs::AppDef& app, const specs::Cfg& cfg) {
  const std::string token = RandomId();
  auto req = slurm::MakeBatchRequest(app, cfg, fs::current_path().string(), token,
                                     RecordDir(std::string(kSubmitPrefix) + token));
  if (!req.ok()) return req.status();
  DryRunInfo info;
  info.text = slurm::FormatBatchRequest(*req);
  info.request = std::move(*req);
  return info;
}

Result<std::string> SlurmScheduler::Schedule(const DryRunInfo& info) {
  const auto* req = std::get_if<BatchRequest>(&info.request);
  if (req == nullptr) return Status::Internal("the slurm scheduler was given another's request");
  const std::string submit_dir = fs::path(req->script_path).parent_path().string();
  std::error_code ec;
  fs::create_directories(req->job_dir, ec);
  if (ec) {
    return Status::InvalidArgument(
        fmt::format("-cfg job_dir: cannot create {}: {}", req->job_dir, ec.message()));
  }
  fs::create_directories(submit_dir, ec);
  if (ec) return Status::IOError(fmt::format("cannot create {}: {}", submit_dir, ec.message()));
  TRUN_RETURN_IF_ERROR(
      WriteFileAtomic(submit_dir + "/app.json", specs::ToJson(info.app).dump(2) + "\n"));
  TRUN_RETURN_IF_ERROR(
      WriteFileAtomic(submit_dir + "/request.json", info.RequestJson().dump(2) + "\n"));
  TRUN_RETURN_IF_ERROR(WriteFileAtomic(req->script_path, req->script));

  std::vector<std::string> argv = {"sbatch"};
  argv.insert(argv.end(), req->sbatch_args.begin(), req->sbatch_args.end());
  argv.push_back(req->script_path);
  // The job token goes to the script in a file only the user can read,
  // which the script removes (slurm_batch.h), never in sbatch's environment:
  // SLURM hands that to the batch shell and srun (--export=ALL), whose
  // /proc/PID/environ every process of the user may read for the job's
  // life. The submitter's TRUN_JOB_TOKEN is kept out of it too.
  if (!req->job_token_file.empty()) {
    TRUN_RETURN_IF_ERROR(
        WriteFileAtomic(req->job_token_file, JobTokenForSubmission() + "\n", 0600));
  }
  auto forget_token = [&] {
    if (!req->job_token_file.empty()) fs::remove(req->job_token_file, ec);
  };
  auto r = Slurm(argv, {{kJobTokenEnv, ""}});
  if (!r.ok()) {
    fs::remove_all(submit_dir, ec);
    forget_token();
    return r.status();
  }
  const std::string said = r->timed_out ? TimedOut("sbatch") : LastLine(r->err);
  if (!r->timed_out && r->exit_code == 0) {
    std::string id(Trim(r->out.substr(0, r->out.find(';'))));
    if (IsJobId(id)) {
      KeepRecord(submit_dir, id);
      return id;
    }
    return Status::IOError(fmt::format("sbatch printed '{}' where a job id belongs; see {}",
                                       Trim(r->out), submit_dir));
  }
  if (!r->timed_out) {
    // Refused before anything was created: safe to run again once fixed.
    std::optional<Status> refused;
    if (Contains(r->err, "Unable to contact slurm controller")) {
      refused = Unreachable(r->err, "nothing was submitted");
    } else if (Contains(r->err, "configuration source") || Contains(r->err, "slurm.conf")) {
      refused = Status::IOError(fmt::format(
          "SLURM is not set up for this machine ({}); nothing was submitted. Set "
          "SLURM_CONF to the cluster's slurm.conf, or run trun on a login node of the cluster",
          said));
    } else if (Contains(r->err, "Invalid partition name")) {
      auto parts = Slurm({"sinfo", "-h", "-o", "%P"});
      std::string known;
      if (parts.ok() && parts->exit_code == 0) {
        for (const auto& p : Split(Trim(parts->out), '\n'))
          known += (known.empty() ? "" : ", ") + p;
      }
      refused = Status::InvalidArgument(fmt::format(
          "-cfg partition={}: SLURM has no such partition ({}); nothing was "
          "submitted. {}",
          info.cfg.count("partition") ? specs::CfgValueToString(info.cfg.at("partition")) : "",
          said,
          known.empty() ? "`sinfo -s` lists the partitions"
                        : "The partitions are " + known + " (* marks the default)"));
    } else if (!Contains(r->err, "Socket timed out") && !Contains(r->err, "Zero Bytes") &&
               !Contains(r->err, "Connection reset")) {
      refused = Status::InvalidArgument(
          fmt::format("sbatch refused the job: {}; nothing was submitted. The script is {}", said,
                      req->script_path));
    }
    if (refused) {
      fs::remove_all(submit_dir, ec);
      forget_token();
      return *refused;
    }
  }
  // The controller may have created the job without sbatch hearing back:
  // look for it by its script (the submission's own path) before saying
  // anything, and never submit again.
  for (int tries = 0; tries < 3; ++tries) {
    if (tries) std::this_thread::sleep_for(std::chrono::seconds(1));
    auto found = FindSubmitted(req->script_path);
    if (!found.ok()) {
      return Status::Timeout(fmt::format(
          "{}; and the controller cannot be asked whether the job arrived ({}). It may have "
          "been submitted: `trun list -s slurm` shows it once the controller answers; check "
          "there before running again",
          said, found.status().message()));
    }
    if (found->has_value()) {
      log::Warning("{}, but the job was submitted: it is job {}", said, **found);
      KeepRecord(submit_dir, **found);
      return **found;
    }
  }
  return Status::Timeout(fmt::format(
      "{}; no job of this submission is in the queue, so it was most likely not submitted, but "
      "the controller may still create it: `trun list -s slurm` shows it if so; check there "
      "before running again",
      said));
}

Result<DescribeAppResponse> SlurmScheduler::Describe(const std::string& app_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = recent_.find(app_id);
    if (it != recent_.end() && Clock::now() - it->second.first < std::chrono::seconds(1)) {
      return it->second.second;
    }
  }
  auto app = Lookup(app_id);
  if (!app.ok()) return app.status();
  std::lock_guard<std::mutex> lock(mu_);
  recent_[app_id] = {Clock::now(), app->d};
  return std::move(app->d);
}

Status SlurmScheduler::Log(const std::string& app_id, const std::string& role, int replica_id,
                           const LogOptions& options,
                           const std::function<bool(std::string_view)>& on_line) {
  auto app = Lookup(app_id);
  if (!app.ok()) return app.status();
  bool known = false;
  std::string all;
  for (const auto& rs : app->d.roles_statuses) {
    for (const auto& r : rs.replicas) {
      known = known || (rs.role == role && r.id == replica_id);
      all += (all.empty() ? "" : ", ") + fmt::format("{}/{}", rs.role, r.id);
    }
  }
  if (!known) {
    return Status::NotFound(
        fmt::format("app {} has no replica {}/{}; it has {}", app_id, role, replica_id, all));
  }
  std::vector<std::string> paths;
  if (options.streams != LogStream::kStderr) {
    paths.push_back(slurm::LogFile(app->job_dir, app_id, role, replica_id, false));
  }
  if (options.streams != LogStream::kStdout) {
    paths.push_back(slurm::LogFile(app->job_dir, app_id, role, replica_id, true));
  }
  // Asking SLURM costs an RPC to the controller: once a second is enough.
  auto last = Clock::now();
  bool ended = specs::IsTerminal(app->d.state);
  return FollowFiles(
      paths, options,
      [&] {
        if (!ended && Clock::now() - last >= std::chrono::seconds(1)) {
          last = Clock::now();
          auto now = Lookup(app_id);
          ended = !now.ok() || specs::IsTerminal(now->d.state);
        }
        return ended;
      },
      on_line);
}

Status SlurmScheduler::Cancel(const std::string& app_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    recent_.erase(app_id);
  }
  auto app = Lookup(app_id);
  if (!app.ok()) return app.status();
  if (specs::IsTerminal(app->d.state)) return Status::OK();
  auto r = Slurm({"scancel", app_id});
  if (!r.ok()) return r.status();
  if (r->timed_out) return Status::Timeout(TimedOut("scancel"));
  if (r->exit_code != 0 && !Contains(r->err, "already completing or completed")) {
    if (Contains(r->err, "Unable to contact slurm controller")) {
      return Unreachable(r->err, "the job was not cancelled");
    }
    return Status::IOError(fmt::format("scancel {}: {}", app_id, LastLine(r->err)));
  }
  const auto deadline = Clock::now() + std::chrono::duration<double>(CommandTimeout());
  while (Clock::now() < deadline) {
    auto now = Lookup(app_id);
    if (now.ok() && specs::IsTerminal(now->d.state)) return Status::OK();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return Status::Timeout(
      fmt::format("job {} did not end within {} s of scancel", app_id, CommandTimeout()));
}

Result<StacksAnswer> SlurmScheduler::Stacks(const std::string& app_id) {
  auto app = Lookup(app_id);
  if (!app.ok()) return app.status();
  if (app->d.state != AppState::kRunning) {
    return Status::InvalidArgument(fmt::format(
        "{} is {}: it has no stacks to show{}", app_id, specs::AppStateName(app->d.state),
        app->d.state == AppState::kPending
            ? "; its workers have not started yet: try again once `trun status` says RUNNING"
            : ""));
  }
  const double timeout = std::min(CommandTimeout(), kStackTimeout);
  auto r = Slurm(slurm::StackStepCommand(SelfExecutable(), app_id,
                                         static_cast<int>(app->hosts.size()), app->components),
                 {}, timeout);
  if (!r.ok()) return r.status();
  auto gathered = slurm::GatherStacks(r->out, app->hosts);
  StacksAnswer answer{std::move(gathered.nodes), {}};
  const std::string why = r->timed_out     ? fmt::format("no answer within {} s", timeout)
                          : r->err.empty() ? fmt::format("srun exited with {}", r->exit_code)
                                           : LastLine(r->err);
  for (const auto& node : gathered.missing) {
    answer.unanswered.push_back(
        fmt::format("node {} of SLURM job {} gave no stacks ({}); `scontrol show node {}` "
                    "says how the node is",
                    node, app_id, why, node));
  }
  return answer;
}

Result<std::vector<ListAppResponse>> SlurmScheduler::List() {
  auto jobs = ControllerJobs("");
  if (!jobs.ok()) return jobs.status();
  const std::string uid = std::to_string(::getuid());
  std::map<long long, ListAppResponse> apps;
  std::map<std::string, const SlurmJob*> by_script;
  for (const auto& j : *jobs) {
    if (!IsJobId(j.job_id) || j.het_offset > 0 || (!j.user_id.empty() && j.user_id != uid)) {
      continue;
    }
    apps[*ParseInt(j.job_id)] = {j.job_id, slurm::AppStateFromSlurm(j.state), Handle(j.job_id),
                                 j.name};
    by_script[j.command] = &j;
  }
  // This trun's submissions: with their apps' names, also once the
  // controller has forgotten them; and cut-off ones, adopted when found.
  std::vector<std::string> forgotten;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(RecordRoot(), ec)) {
    std::string id = e.path().filename().string();
    if (id.rfind(kSubmitPrefix, 0) == 0) {
      auto it = by_script.find(e.path().string() + "/sbatch.sh");
      if (it == by_script.end()) continue;
      KeepRecord(e.path().string(), it->second->job_id);
      id = it->second->job_id;
    }
    if (!IsJobId(id)) continue;
    Record record = ReadRecord(RecordDir(id));
    auto it = apps.find(*ParseInt(id));
    if (it == apps.end()) {
      forgotten.push_back(id);
      it = apps.emplace(*ParseInt(id), ListAppResponse{id, AppState::kUnknown, Handle(id), ""})
               .first;
    }
    if (record.app) it->second.name = record.app->name;
  }
  for (const auto& j : AccountingJobs(forgotten)) {
    if (j.het_offset > 0) continue;
    auto it = apps.find(ParseInt(j.het_job_id.empty() ? j.job_id : j.het_job_id).value_or(-1));
    if (it != apps.end()) {
      it->second.state = slurm::AppStateFromSlurm(j.state);
      if (it->second.name.empty()) it->second.name = j.name;
    }
  }
  std::vector<ListAppResponse> out;
  for (auto& [id, a] : apps) out.push_back(std::move(a));
  return out;
}

}  // namespace trun::schedulers
