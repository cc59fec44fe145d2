#include "schedulers/local_scheduler.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "agent/stacks.h"
#include "common/files.h"
#include "common/gpus.h"
#include "common/net.h"
#include "common/problems.h"
#include "common/strings.h"
#include "proc/spawn.h"
#include "schedulers/local_state.h"
#include "schedulers/log_files.h"
#include "specs/macros.h"
#include "specs/serialize.h"

extern char** environ;

namespace trun::schedulers {
namespace {

namespace fs = std::filesystem;
using local::ReadState;
using local::Request;
using specs::AppState;

constexpr auto kPoll = std::chrono::milliseconds(100);

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// "a:b" + "c" with empty parts left out.
std::string JoinPath(std::initializer_list<std::string> parts) {
  std::string out;
  for (const auto& p : parts) {
    if (!p.empty()) out += (out.empty() ? "" : ":") + p;
  }
  return out;
}

// An app id from an app name: characters that do not belong in a path or a
// handle become '-'.
std::string IdFromName(const std::string& name) {
  std::string out;
  for (char c : name) {
    out +=
        std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' ? c : '-';
  }
  while (!out.empty() && out.front() == '.') out.erase(0, 1);
  return out.empty() ? "app" : out;
}

Status MakeDirs(const std::string& path) { return local::MakePrivateDirs(path); }

Result<Request> ReadRequest(const std::string& app_dir) {
  auto text = ReadFile(app_dir + "/request.json");
  if (!text.ok()) return text.status();
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) return Status::IOError(app_dir + "/request.json is not JSON");
  return local::RequestFromJson(j);
}

std::vector<std::string> KnownAppIds() {
  std::vector<std::string> ids;
  if (DIR* d = ::opendir(local::LocalRoot().c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ids.emplace_back(e->d_name);
    }
    ::closedir(d);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

Status UnknownApp(const std::string& app_id) {
  std::string guess = ClosestMatch(app_id, KnownAppIds());
  return Status::UnknownApp(
      fmt::format("no local app '{}'{}; `trun list -s local` lists them", app_id,
                  guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess)));
}

// The state, with a dead supervisor's unfinished app reported as failed:
// its replicas died with it (parent-death signal).
Result<local::State> CurrentState(const std::string& app_id) {
  TRUN_RETURN_IF_ERROR(local::CheckOwner(app_id));
  std::string dir = local::AppDir(app_id);
  auto s = ReadState(dir);
  if (!s.ok()) {
    if (s.status().code() == StatusCode::kNotFound) return UnknownApp(app_id);
    return s.status();
  }
  if (!specs::IsTerminal(s->state) && !local::ProcessIs(s->supervisor_pid, s->supervisor_start)) {
    // The supervisor may have finished between the read and the check.
    auto again = ReadState(dir);
    if (again.ok() && specs::IsTerminal(again->state)) return again;
    s->state = AppState::kFailed;
    s->msg = fmt::format(
        "the app's supervisor (pid {}) is gone without recording an end, and its replicas with "
        "it; see {}/supervisor.log",
        s->supervisor_pid, dir);
    for (auto& role : s->roles) {
      for (auto& r : role.replicas) {
        if (!specs::IsTerminal(r.state)) r.state = AppState::kUnknown;
      }
    }
  }
  return s;
}

// Starts `trun local-supervisor APP_DIR FD` detached: a new session (no
// controlling terminal, no SIGHUP when the terminal goes), then a second
// fork so the supervisor is not a session leader and can never acquire a
// terminal; stdin is /dev/null, stdout and stderr its own log. Returns once
// the supervisor has recorded itself, or why it could not start. The job
// token reaches the supervisor, and through it every replica, in its
// environment.
Status StartSupervisor(const std::string& app_dir, const std::string& job_token) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return Status::FromErrno("pipe", errno);
  const std::string exe = SelfExecutable();
  const std::string log = app_dir + "/supervisor.log";
  const std::string fd_arg = std::to_string(ready[1]);
  std::vector<const char*> argv = {"trun", "local-supervisor", app_dir.c_str(), fd_arg.c_str(),
                                   nullptr};
  const std::vector<std::string> env = proc::EnvironWith({{kJobTokenEnv, job_token}});
  std::vector<const char*> envp;
  for (const auto& kv : env) envp.push_back(kv.c_str());
  envp.push_back(nullptr);
  pid_t child = ::fork();
  if (child < 0) {
    int err = errno;
    ::close(ready[0]);
    ::close(ready[1]);
    return Status::FromErrno("fork", err);
  }
  if (child == 0) {
    ::setsid();
    pid_t grandchild = ::fork();
    if (grandchild != 0) ::_exit(grandchild < 0 ? 1 : 0);
    ::close(ready[0]);
    ::fcntl(ready[1], F_SETFD, 0);  // the supervisor's, across exec
    int null = ::open("/dev/null", O_RDWR);
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, local::kPrivateFile);
    if (null < 0 || out < 0) ::_exit(127);
    (void)::fchmod(out, local::kPrivateFile);
    ::dup2(null, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGPIPE, SIGHUP, SIGINT, SIGTERM}) ::signal(sig, SIG_DFL);
    ::execve(exe.c_str(), const_cast<char* const*>(argv.data()),
             const_cast<char* const*>(envp.data()));
    dprintf(2, "trun: error: cannot start the supervisor %s: %s\n", exe.c_str(),
            std::strerror(errno));
    ::_exit(127);
  }
  ::close(ready[1]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  char byte = 0;
  ssize_t n;
  while ((n = ::read(ready[0], &byte, 1)) < 0 && errno == EINTR) {
  }
  ::close(ready[0]);
  if (n == 1) return Status::OK();
  auto why = ReadFile(log);
  return Status::IOError(fmt::format("the app's supervisor did not start: {}",
                                     why.ok() && !why->empty() ? Trim(*why) : "see " + log));
}

}  // namespace

LocalScheduler::LocalScheduler(std::string session) : Scheduler("local", std::move(session)) {
  opts_.Add("log_dir", specs::OptType::kStr,
            "directory for the replicas' log files, as <log_dir>/<session>/<app_id>/<role>/<k>/ "
            "(default: the app's state directory)");
  opts_.Add("prepend_cwd", specs::OptType::kBool,
            "put the working directory first on PATH, so its programs win (default: last)", false);
  opts_.Add("auto_set_cuda_visible_devices", specs::OptType::kBool,
            "give each replica of a role that asks for GPUs its own CUDA_VISIBLE_DEVICES", false);
  opts_.Add("stop_timeout", specs::OptType::kFloat,
            "seconds between SIGTERM and SIGKILL when replicas are stopped (cancel, a failure "
            "elsewhere, a restart)",
            10.0);
}

Result<DryRunInfo> LocalScheduler::DryRun(const specs::AppDef& app, const specs::Cfg& cfg) {
  Problems p;
  Request req;
  req.app_id = IdFromName(app.name) + "-" + RandomId();
  req.session = session();
  req.app_dir = local::AppDir(req.app_id);
  if (const auto* t = std::get_if<double>(&cfg.at("stop_timeout"))) req.stop_timeout_s = *t;
  if (const auto* t = std::get_if<long long>(&cfg.at("stop_timeout"))) req.stop_timeout_s = *t;
  if (req.stop_timeout_s < 0) p.Add("-cfg stop_timeout: expected seconds >= 0");
  std::string log_root = req.app_dir;
  if (const auto* d = std::get_if<std::string>(&cfg.at("log_dir"))) {
    log_root = fmt::format("{}/{}/{}", fs::absolute(*d).string(), session(), req.app_id);
  }
  const bool prepend_cwd = std::get<bool>(cfg.at("prepend_cwd"));
  const bool auto_cuda = std::get<bool>(cfg.at("auto_set_cuda_visible_devices"));
  const std::string cwd = fs::current_path().string();
  int next_gpu = 0;
  const int gpus = auto_cuda ? CountGpus() : 0;

  for (const auto& role : app.roles) {
    if (role.name.find('/') != std::string::npos || role.name == "." || role.name == "..") {
      p.Add(
          fmt::format("role '{}': the local scheduler needs role names without '/' (they "
                      "name directories and log handles)",
                      role.name));
      continue;
    }
    local::RoleRequest rr;
    rr.name = role.name;
    rr.max_retries = role.max_retries;
    rr.retry_policy = role.retry_policy;
    rr.job_token = specs::RunsTrunsAgent(role);
    auto role_path = role.env.find("PATH");
    std::string base_path = role_path == role.env.end() ? "" : role_path->second;
    std::string path = prepend_cwd ? JoinPath({cwd, base_path, Getenv("PATH")})
                                   : JoinPath({base_path, Getenv("PATH"), cwd});
    for (int k = 0; k < role.num_replicas; ++k) {
      specs::MacroValues values{cwd, req.app_id, std::to_string(k), "TORCHX_RANK0_HOST"};
      specs::Role r = values.Apply(role);
      local::ReplicaRequest rep;
      rep.id = k;
      rep.cwd = cwd;
      rep.log_dir = fmt::format("{}/{}/{}", log_root, role.name, k);
      rep.env = r.env;
      rep.env["PATH"] = values.Substitute(path);
      rep.env["TORCHX_RANK0_HOST"] = "localhost";
      rep.env.emplace("TORCHELASTIC_ERROR_FILE", rep.ErrorFile());
      rep.env.emplace("PET_LOG_DIR", fmt::format("{}/torchelastic/{}", log_root, role.name));
      if (Getenv("PYTHONUNBUFFERED").empty()) rep.env.emplace("PYTHONUNBUFFERED", "x");
      if (auto_cuda && role.resource.gpu > 0) {
        if (next_gpu + role.resource.gpu > gpus) {
          p.Add(
              fmt::format("role '{}' replica {}: auto_set_cuda_visible_devices needs GPUs {} to "
                          "{}, but this machine has {}",
                          role.name, k, next_gpu, next_gpu + role.resource.gpu - 1, gpus));
        }
        std::string devices;
        for (int g = 0; g < role.resource.gpu; ++g) {
          devices += (g ? "," : "") + std::to_string(next_gpu++);
        }
        rep.env["CUDA_VISIBLE_DEVICES"] = devices;
      }
      std::string program = r.entrypoint;
      if (program.find('/') == std::string::npos) {
        auto resolved = proc::ResolveExecutable(program, rep.env["PATH"]);
        if (!resolved.ok()) {
          if (k == 0) {
            p.Add(fmt::format("role '{}': entrypoint '{}' is not a program on PATH", role.name,
                              program));
          }
          continue;
        }
        program = *resolved;
      } else if (program[0] != '/') {
        program = cwd + "/" + program;
      }
      if (program.find('/') != std::string::npos && ::access(program.c_str(), X_OK) != 0 &&
          k == 0) {
        p.Add(fmt::format("role '{}': entrypoint '{}' is not an executable file", role.name,
                          program));
      }
      rep.argv = {program};
      rep.argv.insert(rep.argv.end(), r.args.begin(), r.args.end());
      rr.replicas.push_back(std::move(rep));
    }
    req.roles.push_back(std::move(rr));
  }
  if (!p.empty()) return p.ToStatus();
  DryRunInfo info;
  info.request = std::move(req);
  return info;
}

Result<std::string> LocalScheduler::Schedule(const DryRunInfo& info) {
  const auto* req = std::get_if<local::Request>(&info.request);
  if (req == nullptr) return Status::Internal("the local scheduler was given another's request");
  TRUN_RETURN_IF_ERROR(MakeDirs(local::LocalRoot()));
  if (::mkdir(req->app_dir.c_str(), local::kPrivateDir) != 0 ||
      ::chmod(req->app_dir.c_str(), local::kPrivateDir) != 0) {
    return Status::FromErrno("cannot create the app's directory " + req->app_dir, errno);
  }
  for (const auto& role : req->roles) {
    for (const auto& rep : role.replicas) {
      Status s = MakeDirs(rep.log_dir);
      if (!s.ok()) return Status::InvalidArgument("-cfg log_dir: " + s.message());
    }
  }
  local::State st;
  st.app_id = req->app_id;
  st.session = req->session;
  st.name = info.app.name;
  st.state = AppState::kSubmitted;
  st.submitted_at = local::Now();
  for (const auto& role : req->roles) {
    local::RoleState rs;
    rs.name = role.name;
    for (const auto& rep : role.replicas) {
      local::ReplicaState r;
      r.id = rep.id;
      rs.replicas.push_back(r);
    }
    st.roles.push_back(std::move(rs));
  }
  TRUN_RETURN_IF_ERROR(WriteFileAtomic(
      req->app_dir + "/app.json", specs::ToJson(info.app).dump(2) + "\n", local::kPrivateFile));
  TRUN_RETURN_IF_ERROR(WriteFileAtomic(req->app_dir + "/request.json",
                                       info.RequestJson().dump(2) + "\n", local::kPrivateFile));
  TRUN_RETURN_IF_ERROR(local::WriteState(req->app_dir, st));
  Status started = StartSupervisor(req->app_dir, JobTokenForSubmission());
  if (!started.ok()) {
    st.state = AppState::kFailed;
    st.msg = started.message();
    st.finished_at = local::Now();
    (void)local::WriteState(req->app_dir, st);
    return started;
  }
  return req->app_id;
}

Result<DescribeAppResponse> LocalScheduler::Describe(const std::string& app_id) {
  auto st = CurrentState(app_id);
  if (!st.ok()) return st.status();
  DescribeAppResponse d;
  d.app_id = app_id;
  d.name = st->name;
  d.state = st->state;
  d.num_restarts = st->num_restarts;
  d.msg = st->msg;
  d.structured_error_msg = st->structured_error_msg;
  d.ui_url = "file://" + local::AppDir(app_id);
  for (const auto& role : st->roles) {
    specs::RoleStatus rs{role.name, {}};
    for (const auto& r : role.replicas) {
      rs.replicas.push_back(
          {r.id, r.state, role.name, "localhost", r.structured_error_msg, "localhost"});
    }
    d.roles_statuses.push_back(std::move(rs));
  }
  auto app_text = ReadFile(local::AppDir(app_id) + "/app.json");
  if (app_text.ok()) {
    auto app = specs::ParseAppDef(*app_text);
    if (app.ok()) d.roles = app->roles;
  }
  return d;
}

Status LocalScheduler::Log(const std::string& app_id, const std::string& role, int replica_id,
                           const LogOptions& options,
                           const std::function<bool(std::string_view)>& on_line) {
  TRUN_RETURN_IF_ERROR(local::CheckOwner(app_id));
  auto req = ReadRequest(local::AppDir(app_id));
  if (!req.ok()) {
    if (req.status().code() == StatusCode::kNotFound) return UnknownApp(app_id);
    return req.status();
  }
  const local::ReplicaRequest* rep = nullptr;
  std::vector<std::string> known;
  for (const auto& r : req->roles) {
    for (const auto& x : r.replicas) {
      known.push_back(fmt::format("{}/{}", r.name, x.id));
      if (r.name == role && x.id == replica_id) rep = &x;
    }
  }
  if (!rep) {
    std::string all;
    for (const auto& k : known) all += (all.empty() ? "" : ", ") + k;
    return Status::NotFound(
        fmt::format("app {} has no replica {}/{}; it has {}", app_id, role, replica_id, all));
  }
  const char* file = "combined.log";
  if (options.streams == LogStream::kStdout) file = "stdout.log";
  if (options.streams == LogStream::kStderr) file = "stderr.log";
  return FollowFiles(
      {rep->log_dir + "/" + file}, options,
      [&] {
        auto st = CurrentState(app_id);
        return !st.ok() || specs::IsTerminal(st->state);
      },
      on_line);
}

Status LocalScheduler::Cancel(const std::string& app_id) {
  TRUN_RETURN_IF_ERROR(local::CheckOwner(app_id));
  const std::string dir = local::AppDir(app_id);
  auto st = ReadState(dir);
  if (!st.ok()) {
    if (st.status().code() == StatusCode::kNotFound) return UnknownApp(app_id);
    return st.status();
  }
  if (specs::IsTerminal(st->state)) return Status::OK();
  auto req = ReadRequest(dir);
  double grace = req.ok() ? req->stop_timeout_s : 10;
  if (local::ProcessIs(st->supervisor_pid, st->supervisor_start)) {
    // The supervisor stops the replicas and records CANCELLED.
    ::kill(st->supervisor_pid, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(static_cast<long long>(grace * 1000) + 30000);
    while (std::chrono::steady_clock::now() < deadline) {
      auto now = ReadState(dir);
      if (now.ok() && specs::IsTerminal(now->state)) return Status::OK();
      if (!local::ProcessIs(st->supervisor_pid, st->supervisor_start)) break;
      std::this_thread::sleep_for(kPoll);
    }
    auto now = ReadState(dir);
    if (now.ok() && specs::IsTerminal(now->state)) return Status::OK();
    if (local::ProcessIs(st->supervisor_pid, st->supervisor_start)) {
      return Status::Timeout(
          fmt::format("the supervisor (pid {}) did not stop the app in time", st->supervisor_pid));
    }
  }
  // No supervisor: its orphan sentinel (proc/sentinel.h) took the replicas'
  // groups with it, so only the record is left to close. Their pids are not
  // signalled: by now they may name someone else's processes.
  for (auto& role : st->roles) {
    for (auto& r : role.replicas) {
      if (!specs::IsTerminal(r.state)) r.state = AppState::kCancelled;
    }
  }
  st->state = AppState::kCancelled;
  st->msg = "cancelled after its supervisor was gone";
  st->finished_at = local::Now();
  return local::WriteState(dir, *st);
}

Status LocalScheduler::Delete(const std::string& app_id) {
  TRUN_RETURN_IF_ERROR(Cancel(app_id));
  std::error_code ec;
  std::filesystem::remove_all(local::AppDir(app_id), ec);
  if (ec) {
    return Status::IOError(
        fmt::format("delete: could not remove {}: {}", local::AppDir(app_id), ec.message()));
  }
  return Status::OK();
}

Result<StacksAnswer> LocalScheduler::Stacks(const std::string& app_id) {
  auto st = CurrentState(app_id);
  if (!st.ok()) return st.status();
  if (specs::IsTerminal(st->state)) {
    return Status::InvalidArgument(
        fmt::format("{} is {}: it has no stacks to show", app_id, specs::AppStateName(st->state)));
  }
  StacksAnswer answer;
  for (const auto& role : st->roles) {
    for (const auto& r : role.replicas) {
      if (r.pid <= 0 || r.state != AppState::kRunning) continue;
      answer.nodes.push_back(agent::ReadStacks(agent::ReplicaWorkers(r.pid),
                                               {FqdnHostname(), app_id, r.id, std::nullopt}));
    }
  }
  return answer;
}

Result<std::vector<ListAppResponse>> LocalScheduler::List() {
  std::vector<std::pair<double, ListAppResponse>> apps;
  for (const auto& id : KnownAppIds()) {
    // Another user's app (a shared state directory) is not ours to show.
    if (!local::CheckOwner(id).ok()) continue;
    auto st = CurrentState(id);
    if (!st.ok()) continue;
    apps.push_back(
        {st->submitted_at,
         {id, st->state, specs::AppHandle{name(), st->session, id}.ToString(), st->name}});
  }
  std::stable_sort(apps.begin(), apps.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<ListAppResponse> out;
  for (auto& [t, a] : apps) out.push_back(std::move(a));
  return out;
}

}  // namespace trun::schedulers
