#include "schedulers/slurm_batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "common/problems.h"
#include "common/strings.h"
#include "specs/macros.h"

namespace trun::schedulers::slurm {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRank0HetVar = "SLURM_JOB_NODELIST_HET_GROUP_0";
constexpr const char* kRank0Var = "TORCHX_RANK0_HOST";
// srun's options for every replica: stop the others when one fails, and 60
// s after the first one ends (TorchX's); keep earlier attempts' output.
constexpr const char* kSrunOpts = "--kill-on-bad-exit=1 --wait=60 --open-mode=append";

std::string OptionalStr(const specs::Cfg& cfg, const char* name) {
  auto it = cfg.find(name);
  if (it == cfg.end()) return "";
  const auto* s = std::get_if<std::string>(&it->second);
  return s ? *s : "";
}

// One word for the batch script's shell: quoted, with ${app_id} left to
// the shell as "$SLURM_JOB_ID" (TorchX's _apply_app_id_env).
std::string Word(const std::string& text) {
  std::string out;
  size_t start = 0;
  while (true) {
    size_t at = text.find(specs::kMacroAppId, start);
    std::string part = text.substr(start, at == std::string::npos ? at : at - start);
    if (!part.empty() || (start == 0 && at == std::string::npos)) out += ShellQuote(part);
    if (at == std::string::npos) break;
    out += "\"$SLURM_JOB_ID\"";
    start = at + specs::kMacroAppId.size();
  }
  return out;
}

bool SafeName(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

// The role as replica `k` sees it.
specs::Role ForReplica(const specs::Role& role, const std::string& job_dir, int k,
                       const char* rank0_env) {
  return specs::MacroValues{job_dir, std::string(specs::kMacroAppId), std::to_string(k), rank0_env}
      .Apply(role);
}

// Whether every replica of `role` runs the same command with the same
// environment.
bool ReplicasAlike(const specs::Role& role) {
  auto a = ForReplica(role, "", 0, kRank0Var), b = ForReplica(role, "", 1, kRank0Var);
  return a.args == b.args && a.env == b.env;
}

// `#SBATCH` options of one job (or component): name, requeue, resources,
// the per-group run options.
std::vector<std::string> GroupOptions(const std::string& name, const specs::Role& role, int nodes,
                                      const specs::Cfg& cfg, bool nomem) {
  std::vector<std::string> o = {"--job-name=" + name, "--requeue", "--open-mode=append"};
  if (nodes > 0) o.push_back(fmt::format("--nodes={}", nodes));
  o.push_back("--ntasks-per-node=1");
  const auto& r = role.resource;
  if (r.cpu > 0) o.push_back(fmt::format("--cpus-per-task={}", r.cpu));
  if (r.mem_mb > 0 && !nomem) o.push_back(fmt::format("--mem={}", r.mem_mb));
  if (r.gpu > 0) o.push_back(fmt::format("--gpus-per-node={}", r.gpu));
  for (const char* key : {"partition", "time", "constraint", "qos"}) {
    std::string v = OptionalStr(cfg, key);
    if (!v.empty()) o.push_back(fmt::format("--{}={}", key, v));
  }
  return o;
}

// `env K=V ... ENTRYPOINT ARGS` of one replica, as script words.
std::string Command(const specs::Role& r, const std::vector<std::string>& extra_env) {
  std::string out = "env";
  for (const auto& e : extra_env) out += " " + e;
  for (const auto& [k, v] : r.env) out += " " + Word(k + "=" + v);
  out += " " + Word(r.entrypoint);
  for (const auto& a : r.args) out += " " + Word(a);
  return out;
}

// The task of a role that runs trun's agent takes the job token from its
// stdin (srun's, from the script), and this shell becomes the agent, so no
// process but the agent, which hides it (proc/exposure.h), holds it.
constexpr const char* kReadToken = "IFS= read -r TRUN_JOB_TOKEN; export TRUN_JOB_TOKEN; ";

std::string Join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

}  // namespace

std::string LogFile(const std::string& job_dir, const std::string& job_id, const std::string& role,
                    int replica, bool stderr_file) {
  return fmt::format("{}/slurm-{}-{}-{}.{}", job_dir, job_id, role, replica,
                     stderr_file ? "err" : "out");
}

std::string ErrorFile(const std::string& job_dir, const std::string& job_id,
                      const std::string& role, int replica, int attempt) {
  return fmt::format("{}/slurm-{}-{}-{}.{}.error.json", job_dir, job_id, role, replica, attempt);
}

Result<BatchRequest> MakeBatchRequest(const specs::AppDef& app, const specs::Cfg& cfg,
                                      const std::string& cwd, const std::string& token,
                                      const std::string& record_dir) {
  Problems p;
  BatchRequest req;
  req.token = token;
  req.script_path = record_dir + "/sbatch.sh";
  std::string job_dir = OptionalStr(cfg, "job_dir");
  req.job_dir = job_dir.empty() ? cwd : (fs::path(cwd) / job_dir).lexically_normal().string();
  while (req.job_dir.size() > 1 && req.job_dir.back() == '/') req.job_dir.pop_back();
  const auto* nomem_v = std::get_if<bool>(&cfg.at("nomem"));
  const bool nomem = nomem_v && *nomem_v;

  for (const char* key : {"partition", "time", "constraint", "qos"}) {
    std::string v = OptionalStr(cfg, key);
    if (v.find_first_of(" \t\n") != std::string::npos) {
      p.Add(fmt::format("-cfg {}='{}': white space cannot go on an #SBATCH line", key, v));
    }
  }
  for (const char* key : {"comment", "mail-user", "mail-type", "account", "job_dir"}) {
    if (OptionalStr(cfg, key).find('\n') != std::string::npos) {
      p.Add(fmt::format("-cfg {}: a value cannot span lines", key));
    }
  }
  for (const auto& role : app.roles) {
    if (!SafeName(role.name)) {
      p.Add(fmt::format(
          "role '{}': the slurm scheduler needs role names of letters, digits, '_', '.' and '-' "
          "(they name the SLURM job and the replicas' log files)",
          role.name));
    }
    if (!role.mounts.empty()) {
      p.Add(fmt::format(
          "role '{}': the slurm scheduler does not mount anything (replicas see the cluster's "
          "file systems); drop the mounts",
          role.name));
    }
    req.roles.emplace_back(role.name, role.num_replicas);
  }
  if (!p.empty()) return p.ToStatus();

  if (std::any_of(app.roles.begin(), app.roles.end(), specs::RunsTrunsAgent)) {
    req.job_token_file = fmt::format("{}/.trun-job-token-{}", req.job_dir, token);
  }
  req.max_retries = app.roles.front().max_retries;
  for (const auto& role : app.roles) req.max_retries = std::min(req.max_retries, role.max_retries);
  req.heterogeneous = app.roles.size() > 1 || !ReplicasAlike(app.roles.front());

  req.sbatch_args = {"--parsable"};
  for (const char* key : {"comment", "mail-user", "mail-type", "account"}) {
    std::string v = OptionalStr(cfg, key);
    if (!v.empty()) req.sbatch_args.push_back(fmt::format("--{}={}", key, v));
  }
  req.sbatch_args.push_back("--chdir=" + req.job_dir);

  std::string sbatch_lines, srun;
  if (!req.heterogeneous) {
    const specs::Role& role = app.roles.front();
    sbatch_lines =
        "#SBATCH " + Join(GroupOptions(role.name, role, role.num_replicas, cfg, nomem)) + "\n";
    specs::Role r = ForReplica(role, req.job_dir, 0, kRank0Var);
    // Replica k is task k: its error file is named in the task itself.
    const bool agent = specs::RunsTrunsAgent(role);
    srun = fmt::format(
        "{}srun {} \\\n    --output=slurm-\"$SLURM_JOB_ID\"-{}-%t.out "
        "--error=slurm-\"$SLURM_JOB_ID\"-{}-%t.err \\\n"
        "    bash -c '{}TORCHELASTIC_ERROR_FILE=\"$PWD/slurm-$SLURM_JOB_ID-{}-$SLURM_PROCID."
        "${{SLURM_RESTART_COUNT:-0}}.error.json\" exec \"$@\"' {} \\\n    {}",
        agent ? "printf '%s\\n' \"$job_token\" | " : "", kSrunOpts, role.name, role.name,
        agent ? kReadToken : "", role.name, role.name, Command(r, {}));
  } else {
    std::vector<std::string> groups, components;
    for (const auto& role : app.roles) {
      for (int k = 0; k < role.num_replicas; ++k) {
        const std::string name = fmt::format("{}-{}", role.name, k);
        groups.push_back("#SBATCH " + Join(GroupOptions(name, role, 0, cfg, nomem)) + "\n");
        specs::Role r = ForReplica(role, req.job_dir, k, kRank0HetVar);
        std::string error_file = fmt::format(
            "TORCHELASTIC_ERROR_FILE=\"$PWD\"/slurm-\"$SLURM_JOB_ID\"-{}.\"$attempt\".error.json",
            name);
        std::string command = Command(r, {error_file});
        if (specs::RunsTrunsAgent(role)) {
          // srun forwards its own stdin to the first component only: each
          // agent's component reads a pipe of its own.
          command =
              fmt::format("--input=<(printf '%s\\n' \"$job_token\") bash -c '{}exec \"$@\"' {} {}",
                          kReadToken, name, command);
        } else if (!req.job_token_file.empty()) {
          command = "--input=none " + command;
        }
        components.push_back(
            fmt::format("{} \\\n    --output=slurm-\"$SLURM_JOB_ID\"-{}.out "
                        "--error=slurm-\"$SLURM_JOB_ID\"-{}.err \\\n    {}",
                        kSrunOpts, name, name, command));
      }
    }
    for (size_t i = 0; i < groups.size(); ++i) {
      sbatch_lines += (i ? "#SBATCH hetjob\n" : "") + groups[i];
    }
    srun = "srun";
    for (size_t i = 0; i < components.size(); ++i) {
      srun += (i ? " :\\\n  " : " ") + components[i];
    }
  }

  std::string command = "sbatch";
  for (const auto& a : req.sbatch_args) command += " " + ShellQuote(a);
  command += " " + ShellQuote(req.script_path);
  std::string rank0 = req.heterogeneous
                          ? fmt::format("# ${{rank0_env}} is {}, set by SLURM.\n", kRank0HetVar)
                          : fmt::format(
                                "# ${{rank0_env}} is {}: the allocation's first host.\n"
                                "export {}=\"$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | "
                                "head -n 1)\"\n",
                                kRank0Var, kRank0Var);
  // The job token's file: read and removed at once, written back before a
  // requeue (umask 077: the user's alone). A job started without it (a
  // requeue by SLURM itself, after a node failed) runs its agents without
  // a token, and they say so.
  std::string token_read, token_write;
  if (!req.job_token_file.empty()) {
    token_read = fmt::format(
        "# The job token of trun's agents, in this shell only (no environment):\n"
        "token_file={}\n"
        "job_token=\n"
        "if [ -r \"$token_file\" ]; then IFS= read -r job_token <\"$token_file\"; "
        "rm -f \"$token_file\"; fi\n",
        ShellQuote(req.job_token_file));
    token_write = "    (umask 077; printf '%s\\n' \"$job_token\" >\"$token_file\")\n";
  }
  req.script = fmt::format(
      "#!/bin/bash\n"
      "#\n"
      "# Generated by trun {} for the app '{}'.\n"
      "# Run with: {}\n"
      "#\n"
      "{}"
      "set -e\n"
      "\n"
      "export PYTHONUNBUFFERED=1 SLURM_UNBUFFEREDIO=1\n"
      "export TORCHX_MAX_RETRIES={}\n"
      "{}"
      "attempt=${{SLURM_RESTART_COUNT:-0}}\n"
      "echo \"trun: job $SLURM_JOB_ID attempt $attempt on $SLURM_JOB_NODELIST\"\n"
      "{}"
      "\n"
      "set +e\n"
      "{}\n"
      "exitcode=$?\n"
      "set -e\n"
      "\n"
      "echo \"trun: job exited with code $exitcode\"\n"
      "if [ $exitcode -ne 0 ] && [ \"$TORCHX_MAX_RETRIES\" -gt \"$attempt\" ]; then\n"
      "{}"
      "    scontrol requeue \"$SLURM_JOB_ID\"\n"
      "fi\n"
      "exit $exitcode\n",
      TRUN_VERSION, app.name, command, sbatch_lines, req.max_retries, rank0, token_read, srun,
      token_write);
  return req;
}

std::string FormatBatchRequest(const BatchRequest& req) {
  std::string command = "sbatch";
  for (const auto& a : req.sbatch_args) command += " " + ShellQuote(a);
  return fmt::format("{} {}\n\n#----------------\n# {}\n#----------------\n{}", command,
                     ShellQuote(req.script_path), req.script_path, req.script);
}

nlohmann::ordered_json BatchRequest::ToJson() const {
  nlohmann::ordered_json j;
  j["token"] = token;
  j["script_path"] = script_path;
  j["sbatch_args"] = sbatch_args;
  j["job_dir"] = job_dir;
  j["heterogeneous"] = heterogeneous;
  j["max_retries"] = max_retries;
  j["roles"] = nlohmann::ordered_json::array();
  for (const auto& [name, n] : roles) j["roles"].push_back({{"name", name}, {"replicas", n}});
  j["job_token_file"] = job_token_file;
  j["script"] = script;
  return j;
}

Result<BatchRequest> BatchRequest::FromJson(const nlohmann::json& j) {
  try {
    BatchRequest r;
    r.token = j.at("token").get<std::string>();
    r.script_path = j.at("script_path").get<std::string>();
    r.sbatch_args = j.at("sbatch_args").get<std::vector<std::string>>();
    r.job_dir = j.at("job_dir").get<std::string>();
    r.heterogeneous = j.at("heterogeneous").get<bool>();
    r.max_retries = j.at("max_retries").get<int>();
    for (const auto& role : j.at("roles")) {
      r.roles.emplace_back(role.at("name").get<std::string>(), role.at("replicas").get<int>());
    }
    r.job_token_file = j.value("job_token_file", "");
    r.script = j.at("script").get<std::string>();
    return r;
  } catch (const nlohmann::json::exception& e) {
    return Status::IOError(std::string("a slurm request record is damaged: ") + e.what());
  }
}

}  // namespace trun::schedulers::slurm
