#include "schedulers/scheduler.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <random>

#include "common/strings.h"
#include "schedulers/kubernetes_scheduler.h"
#include "schedulers/local_scheduler.h"
#include "schedulers/slurm_scheduler.h"
#include "specs/serialize.h"
#include "store/auth.h"

namespace trun::schedulers {

nlohmann::ordered_json DryRunInfo::RequestJson() const {
  struct {
    nlohmann::ordered_json operator()(const local::Request& r) const { return local::ToJson(r); }
    nlohmann::ordered_json operator()(const slurm::BatchRequest& r) const { return r.ToJson(); }
    nlohmann::ordered_json operator()(const kube::Request& r) const { return r.ToJson(); }
  } to_json;
  return std::visit(to_json, request);
}

std::string DryRunInfo::Format() const {
  return text.empty() ? specs::ToYaml(RequestJson()) : text;
}

specs::AppStatus DescribeAppResponse::ToAppStatus() const {
  specs::AppStatus s;
  s.state = state;
  s.num_restarts = num_restarts;
  s.msg = msg;
  s.structured_error_msg = structured_error_msg;
  s.ui_url = ui_url;
  s.roles = roles_statuses;
  return s;
}

std::optional<LogStream> ParseLogStream(std::string_view s) {
  if (s == "stdout") return LogStream::kStdout;
  if (s == "stderr") return LogStream::kStderr;
  if (s == "combined") return LogStream::kCombined;
  return std::nullopt;
}

Result<DryRunInfo> Scheduler::SubmitDryRun(const specs::AppDef& app, const specs::Cfg& cfg) {
  TRUN_RETURN_IF_ERROR(specs::Validate(app));
  auto resolved = RunOpts().Resolve(cfg, name_);
  if (!resolved.ok()) return resolved.status();
  auto info = DryRun(app, *resolved);
  if (!info.ok()) return info.status();
  info->scheduler = name_;
  info->app = app;
  info->cfg = *resolved;
  return info;
}

const std::vector<SchedulerInfo>& Schedulers() {
  static const std::vector<SchedulerInfo> kSchedulers = {
      {"local", "replicas are processes on this machine, detached from the terminal",
       [](const std::string& session) -> std::unique_ptr<Scheduler> {
         return std::make_unique<LocalScheduler>(session);
       }},
      {"slurm", "one SLURM batch job per app, submitted with sbatch",
       [](const std::string& session) -> std::unique_ptr<Scheduler> {
         return std::make_unique<SlurmScheduler>(session);
       }},
      {"kubernetes", "a Volcano Job, a JobSet or Indexed Jobs per app, through the API server",
       [](const std::string& session) -> std::unique_ptr<Scheduler> {
         return std::make_unique<KubernetesScheduler>(session);
       }},
  };
  return kSchedulers;
}

Result<std::unique_ptr<Scheduler>> CreateScheduler(const std::string& name,
                                                   const std::string& session) {
  // TorchX's default scheduler name, for the command lines and handles of its
  // users: trun's local scheduler is TorchX's local_cwd (local_scheduler.h).
  const std::string wanted = name == "local_cwd" ? std::string("local") : name;
  std::vector<std::string> names;
  for (const auto& s : Schedulers()) {
    names.push_back(s.name);
    if (wanted != s.name) continue;
    if (!s.create) {
      return Status::Unsupported(fmt::format(
          "the {} scheduler is not available yet; `-s local` runs the app on this machine", name));
    }
    return s.create(session);
  }
  std::string guess = ClosestMatch(name, names);
  std::string all;
  for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
  return Status::InvalidArgument(
      fmt::format("no scheduler '{}'{}; the schedulers are {}", name,
                  guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess), all));
}

std::string RandomId() {
  static constexpr std::string_view kStart = "bcdfghjklmnpqrstvwxz";
  static constexpr std::string_view kRest = "bcdfghjklmnpqrstvwxz012345679";
  uint64_t v = 0;
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::read(fd, &v, sizeof v) != static_cast<ssize_t>(sizeof v)) {
    v = std::random_device{}();
    v = (v << 32) ^ std::random_device{}();
  }
  if (fd >= 0) ::close(fd);
  std::string out;
  while (v > 0) {
    std::string_view letters = out.empty() ? kStart : kRest;
    out += letters[v % letters.size()];
    v /= letters.size();
  }
  return out.empty() ? std::string(1, kStart[0]) : out;
}

std::string StateRoot() {
  const char* xdg = std::getenv("XDG_STATE_HOME");
  if (xdg && *xdg == '/') return std::string(xdg) + "/trun";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.local/state/trun";
}

std::string JobTokenForSubmission() {
  const char* given = std::getenv(kJobTokenEnv);
  return given && *given ? given : store::NewJobToken();
}

Result<StacksAnswer> Scheduler::Stacks(const std::string& app_id) {
  return Status::Unsupported(fmt::format(
      "trun stack of {}: the {} scheduler's apps are not reachable from here; give trun stack "
      "--health HOST:PORT,... of the job's agents (--health-check-port) instead",
      app_id, name()));
}

}  // namespace trun::schedulers
