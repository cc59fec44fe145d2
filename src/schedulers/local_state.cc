#include "schedulers/local_state.h"

#include <fmt/format.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "common/files.h"
#include "proc/pystack.h"
#include "schedulers/scheduler.h"

namespace trun::schedulers::local {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// The JSON files are trun's own, so a malformed one is reported, not
// patched up: nlohmann's exceptions are caught at this edge.
template <typename F>
auto Guard(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return Status::IOError(fmt::format("{} is malformed: {}", what, e.what()));
  }
}

}  // namespace

std::string LocalRoot() { return StateRoot() + "/local"; }

std::string AppDir(const std::string& app_id) { return LocalRoot() + "/" + app_id; }

Status MakePrivateDirs(const std::string& path) {
  // Each prefix that ends before a '/' (or at the end) is one directory.
  for (size_t end = 1; end <= path.size(); ++end) {
    if (end < path.size() && path[end] != '/') continue;
    if (path[end - 1] == '/') continue;
    std::string dir = path.substr(0, end);
    if (::mkdir(dir.c_str(), kPrivateDir) == 0) {
      if (::chmod(dir.c_str(), kPrivateDir) != 0) {
        return Status::FromErrno("cannot make " + dir + " private", errno);
      }
    } else if (errno != EEXIST) {
      return Status::FromErrno("cannot create " + dir, errno);
    }
  }
  return Status::OK();
}

Status CheckOwner(const std::string& app_id) {
  struct stat st {};
  if (::stat(AppDir(app_id).c_str(), &st) != 0) return Status::OK();  // the caller reports it
  if (st.st_uid == ::geteuid()) return Status::OK();
  std::string who = fmt::format("uid {}", st.st_uid);
  if (passwd* pw = ::getpwuid(st.st_uid)) who = fmt::format("{} (uid {})", pw->pw_name, st.st_uid);
  return Status::PermissionDenied(fmt::format(
      "local app '{}' belongs to user {}, not to you (uid {}): trun shows and stops only your "
      "own apps",
      app_id, who, ::geteuid()));
}

ojson ToJson(const Request& r) {
  ojson j;
  j["app_id"] = r.app_id;
  j["session"] = r.session;
  j["app_dir"] = r.app_dir;
  j["stop_timeout_s"] = r.stop_timeout_s;
  j["roles"] = ojson::array();
  for (const auto& role : r.roles) {
    ojson rj;
    rj["name"] = role.name;
    rj["max_retries"] = role.max_retries;
    rj["retry_policy"] = std::string(specs::RetryPolicyName(role.retry_policy));
    rj["job_token"] = role.job_token;
    rj["replicas"] = ojson::array();
    for (const auto& rep : role.replicas) {
      ojson x;
      x["id"] = rep.id;
      x["argv"] = rep.argv;
      x["env"] = rep.env;
      x["cwd"] = rep.cwd;
      x["log_dir"] = rep.log_dir;
      rj["replicas"].push_back(std::move(x));
    }
    j["roles"].push_back(std::move(rj));
  }
  return j;
}

Result<Request> RequestFromJson(const json& j) {
  return Guard("request.json", [&]() -> Result<Request> {
    Request r;
    r.app_id = j.at("app_id").get<std::string>();
    r.session = j.at("session").get<std::string>();
    r.app_dir = j.at("app_dir").get<std::string>();
    r.stop_timeout_s = j.at("stop_timeout_s").get<double>();
    for (const auto& rj : j.at("roles")) {
      RoleRequest role;
      role.name = rj.at("name").get<std::string>();
      role.max_retries = rj.at("max_retries").get<int>();
      role.retry_policy = specs::ParseRetryPolicy(rj.at("retry_policy").get<std::string>())
                              .value_or(specs::RetryPolicy::kApplication);
      role.job_token = rj.value("job_token", false);
      for (const auto& x : rj.at("replicas")) {
        ReplicaRequest rep;
        rep.id = x.at("id").get<int>();
        rep.argv = x.at("argv").get<std::vector<std::string>>();
        rep.env = x.at("env").get<std::map<std::string, std::string>>();
        rep.cwd = x.at("cwd").get<std::string>();
        rep.log_dir = x.at("log_dir").get<std::string>();
        role.replicas.push_back(std::move(rep));
      }
      r.roles.push_back(std::move(role));
    }
    return r;
  });
}

ojson ToJson(const State& s) {
  ojson j;
  j["app_id"] = s.app_id;
  j["session"] = s.session;
  j["name"] = s.name;
  j["state"] = std::string(specs::AppStateName(s.state));
  j["num_restarts"] = s.num_restarts;
  j["msg"] = s.msg;
  j["structured_error_msg"] = s.structured_error_msg;
  j["supervisor_pid"] = s.supervisor_pid;
  j["supervisor_start"] = s.supervisor_start;
  j["submitted_at"] = s.submitted_at;
  j["finished_at"] = s.finished_at;
  j["roles"] = ojson::array();
  for (const auto& role : s.roles) {
    ojson rj;
    rj["name"] = role.name;
    rj["restarts"] = role.restarts;
    rj["replicas"] = ojson::array();
    for (const auto& rep : role.replicas) {
      ojson x;
      x["id"] = rep.id;
      x["state"] = std::string(specs::AppStateName(rep.state));
      x["pid"] = rep.pid;
      x["exitcode"] = rep.exitcode ? ojson(*rep.exitcode) : ojson();
      x["structured_error_msg"] = rep.structured_error_msg;
      rj["replicas"].push_back(std::move(x));
    }
    j["roles"].push_back(std::move(rj));
  }
  return j;
}

Result<State> StateFromJson(const json& j) {
  return Guard("state.json", [&]() -> Result<State> {
    State s;
    s.app_id = j.at("app_id").get<std::string>();
    s.session = j.at("session").get<std::string>();
    s.name = j.at("name").get<std::string>();
    s.state =
        specs::ParseAppState(j.at("state").get<std::string>()).value_or(specs::AppState::kUnknown);
    s.num_restarts = j.at("num_restarts").get<int>();
    s.msg = j.at("msg").get<std::string>();
    s.structured_error_msg = j.at("structured_error_msg").get<std::string>();
    s.supervisor_pid = j.at("supervisor_pid").get<pid_t>();
    s.supervisor_start = j.at("supervisor_start").get<uint64_t>();
    s.submitted_at = j.at("submitted_at").get<double>();
    s.finished_at = j.at("finished_at").get<double>();
    for (const auto& rj : j.at("roles")) {
      RoleState role;
      role.name = rj.at("name").get<std::string>();
      role.restarts = rj.at("restarts").get<int>();
      for (const auto& x : rj.at("replicas")) {
        ReplicaState rep;
        rep.id = x.at("id").get<int>();
        rep.state = specs::ParseAppState(x.at("state").get<std::string>())
                        .value_or(specs::AppState::kUnknown);
        rep.pid = x.at("pid").get<pid_t>();
        if (!x.at("exitcode").is_null()) rep.exitcode = x.at("exitcode").get<int>();
        rep.structured_error_msg = x.at("structured_error_msg").get<std::string>();
        role.replicas.push_back(std::move(rep));
      }
      s.roles.push_back(std::move(role));
    }
    return s;
  });
}

State SubmittedState(const Request& req, const std::string& name) {
  State st;
  st.app_id = req.app_id;
  st.session = req.session;
  st.name = name;
  st.state = specs::AppState::kSubmitted;
  st.submitted_at = Now();
  for (const auto& role : req.roles) {
    RoleState rs;
    rs.name = role.name;
    for (const auto& rep : role.replicas) {
      ReplicaState r;
      r.id = rep.id;
      rs.replicas.push_back(r);
    }
    st.roles.push_back(std::move(rs));
  }
  return st;
}

Result<State> ReadState(const std::string& app_dir) {
  auto text = ReadFile(app_dir + "/state.json");
  if (!text.ok()) return text.status();
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded()) return Status::IOError(app_dir + "/state.json is not JSON");
  return StateFromJson(j);
}

Status WriteState(const std::string& app_dir, const State& s) {
  return WriteFileAtomic(app_dir + "/state.json", ToJson(s).dump(2) + "\n", kPrivateFile);
}

uint64_t ProcessStartTime(pid_t pid) {
  if (pid <= 0) return 0;
  auto stat = proc::ReadProcStat(pid);
  // A zombie has finished; it is not running anything.
  if (!stat.ok() || stat->state == 'Z') return 0;
  return stat->start_time;
}

bool ProcessIs(pid_t pid, uint64_t start_time) {
  return start_time != 0 && ProcessStartTime(pid) == start_time;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace trun::schedulers::local
