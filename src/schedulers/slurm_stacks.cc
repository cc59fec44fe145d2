#include "schedulers/slurm_stacks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "agent/stacks.h"
#include "common/net.h"
#include "common/strings.h"
#include "proc/pystack.h"

namespace trun::schedulers::slurm {
namespace {

std::string Var(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

std::string OwnVar(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Whether a process is a task (or below one) of another step of the job on
// this node.
bool InOtherStep(const NodeProcess& p, const std::string& job_id, const std::string& node,
                 const std::string& own_step) {
  const std::string step = Var(p.env, "SLURM_STEP_ID");
  return Var(p.env, "SLURM_JOB_ID") == job_id && Var(p.env, "SLURMD_NODENAME") == node &&
         !step.empty() && step != own_step;
}

}  // namespace

std::vector<pid_t> StepTaskRoots(const std::vector<NodeProcess>& procs, const std::string& job_id,
                                 const std::string& node, const std::string& own_step) {
  std::set<pid_t> in_steps;
  for (const auto& p : procs) {
    if (InOtherStep(p, job_id, node, own_step)) in_steps.insert(p.pid);
  }
  // A task's children inherit its environment: a root is one whose parent
  // (slurmstepd) is not in a step itself.
  std::vector<pid_t> roots;
  for (pid_t pid : in_steps) {
    auto p = std::find_if(procs.begin(), procs.end(),
                          [pid](const NodeProcess& q) { return q.pid == pid; });
    if (!in_steps.contains(p->ppid)) roots.push_back(pid);
  }
  return roots;
}

Result<nlohmann::ordered_json> ReadNodeStacks(const std::string& job_id) {
  if (OwnVar("SLURM_JOB_ID") != job_id || OwnVar("SLURM_STEP_ID").empty()) {
    return Status::InvalidArgument(fmt::format(
        "{} {}: this runs inside a step of SLURM job {} on each of its nodes, which `trun "
        "stack slurm://SESSION/{}` starts with srun; run that instead",
        kStackSubcommand, job_id, job_id, job_id));
  }
  const std::string node = OwnVar("SLURMD_NODENAME");
  std::vector<NodeProcess> procs;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    auto pid = ParseInt(e.path().filename().string());
    if (!pid) continue;
    NodeProcess p{static_cast<pid_t>(*pid), 0, agent::ProcessEnvironment(*pid)};
    // Only the job's processes are worth their /proc/PID/stat.
    if (Var(p.env, "SLURM_JOB_ID") != job_id) continue;
    auto stat = proc::ReadProcStat(p.pid);
    if (!stat.ok()) continue;
    p.ppid = stat->ppid;
    procs.push_back(std::move(p));
  }
  std::vector<agent::StackTarget> targets;
  for (pid_t root : StepTaskRoots(procs, job_id, node, OwnVar("SLURM_STEP_ID"))) {
    for (auto& t : agent::ReplicaWorkers(root)) targets.push_back(t);
  }
  std::stable_sort(
      targets.begin(), targets.end(),
      [](const agent::StackTarget& a, const agent::StackTarget& b) { return a.rank < b.rank; });
  auto node_id = ParseInt(OwnVar("SLURM_NODEID"));
  return agent::ReadStacks(
      targets,
      {node.empty() ? FqdnHostname() : node, job_id,
       node_id ? std::optional<int>(static_cast<int>(*node_id)) : std::nullopt, std::nullopt});
}

std::vector<std::string> StackStepCommand(const std::string& trun, const std::string& job_id,
                                          int nodes, int components) {
  std::vector<std::string> argv = {"srun", "--jobid=" + job_id};
  if (components > 1) {
    argv.push_back(fmt::format("--het-group=0-{}", components - 1));
  } else {
    argv.push_back(fmt::format("--nodes={}", nodes));
  }
  // --overlap: the step shares the CPUs the app's step holds, so it starts
  // at once; --input=none: srun's stdin is no task's; --label: see
  // GatherStacks.
  argv.insert(argv.end(), {"--ntasks-per-node=1", "--overlap", "--quiet", "--input=none", "--label",
                           "--job-name=trun-stack", trun, kStackSubcommand, job_id});
  return argv;
}

GatheredStacks GatherStacks(std::string_view srun_out, const std::vector<std::string>& expected) {
  // srun interleaves its tasks' output in pieces of up to 1 KiB; with
  // --label each piece is a line of its own, "TASK: PIECE" (TASK padded
  // with spaces), so a task's one line of JSON is its pieces joined.
  std::map<long long, std::string> by_task;
  for (const auto& line : Split(srun_out, '\n')) {
    std::string_view rest(line);
    rest.remove_prefix(std::min(rest.size(), rest.find_first_not_of(' ')));
    size_t colon = rest.find(": ");
    auto task = colon == std::string_view::npos ? std::nullopt : ParseInt(rest.substr(0, colon));
    if (task) by_task[*task] += rest.substr(colon + 2);
  }
  std::map<std::string, nlohmann::json> by_node;
  std::vector<std::string> order;
  for (auto& [task, text] : by_task) {
    auto doc = nlohmann::json::parse(text, nullptr, false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("workers")) continue;
    auto host = doc.value("hostname", nlohmann::json()).is_string()
                    ? doc["hostname"].get<std::string>()
                    : "";
    if (by_node.contains(host)) continue;
    order.push_back(host);
    by_node.emplace(host, std::move(doc));
  }
  GatheredStacks out;
  std::set<std::string> named;  // a node of two het-job components is expected twice
  for (const auto& node : expected) {
    if (!named.insert(node).second) continue;
    auto it = by_node.find(node);
    if (it == by_node.end()) {
      out.missing.push_back(node);
      continue;
    }
    out.nodes.push_back(std::move(it->second));
    by_node.erase(it);
  }
  // Nodes the caller did not expect (a job that grew): shown all the same.
  for (const auto& node : order) {
    auto it = by_node.find(node);
    if (it != by_node.end()) out.nodes.push_back(std::move(it->second));
  }
  return out;
}

}  // namespace trun::schedulers::slurm
