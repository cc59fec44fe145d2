// LaunchConfig: everything `trun [torchrun flags] script args` asked for,
// validated, with torchrun's defaults. Produced by ParseLaunchArgs (args.h),
// consumed by the agent.
//
// Thread-safety: a plain value.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rendezvous/options.h"

namespace trun::launch {

// Which of a worker's streams go to files (redirect) or to files and the
// console (tee): torchrun's Std, 0..3.
enum class Std { kNone = 0, kOut = 1, kErr = 2, kAll = 3 };

inline bool HasOut(Std s) { return s == Std::kOut || s == Std::kAll; }
inline bool HasErr(Std s) { return s == Std::kErr || s == Std::kAll; }

// One value for every local rank ("3") or one per listed rank ("0:3,1:1";
// ranks not listed get kNone).
struct StdSpec {
  Std all = Std::kNone;
  std::map<int, Std> per_rank;
  bool is_map = false;

  Std ForRank(int local_rank) const {
    if (!is_map) return all;
    auto it = per_rank.find(local_rank);
    return it == per_rank.end() ? Std::kNone : it->second;
  }
};

enum class EntrypointKind { kScript, kModule, kBinary, kRunPath };

struct LaunchConfig {
  // --nnodes MIN:MAX
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc_per_node = 1;

  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";
  rendezvous::Settings rdzv;  // typed by ParseRdzvSettings (rdzv_conf.h)
  bool standalone = false;

  int max_restarts = 0;
  // Lines of a failed worker's output, per stream, printed before the
  // failure table (--failure-lines).
  int failure_lines = 20;
  // --hang-timeout: seconds without progress before a hang is reported
  // (agent/hang.h); 0: off. --hang-action fail: the hang fails the attempt.
  double hang_timeout_s = 0;
  bool hang_fail = false;
  // --store-relay: whether the workers reach the job's store through their
  // agent's relay (store/relay.h), one connection per node: on, off, or
  // auto (on for a job of more than kAutoRelayWorkers workers).
  enum class StoreRelay { kAuto, kOn, kOff };
  StoreRelay store_relay = StoreRelay::kAuto;
  static constexpr int kAutoRelayWorkers = 1024;
  double monitor_interval = 0.1;  // accepted; failure detection never waits for it
  std::string start_method = "spawn";
  std::string event_log_handler = "null";
  // --event-log-file or TRUN_EVENT_LOG: events appended as JSON lines; "" for none.
  std::string event_log_file;
  // --health-check-port or TORCHELASTIC_HEALTH_CHECK_PORT (0: a free port):
  // /health and /metrics over HTTP, bound to health_check_addr ("": every address).
  std::optional<int> health_check_port;
  std::string health_check_addr;
  // TORCHELASTIC_ENABLE_FILE_TIMER=1: the watchdog, at TORCHELASTIC_TIMER_FILE
  // ("": a fresh FIFO in a private directory under $TMPDIR).
  bool file_timer = false;
  std::string timer_file;
  std::string role = "default";

  EntrypointKind entrypoint_kind = EntrypointKind::kScript;
  std::string training_script;
  std::vector<std::string> training_script_args;
  // The worker's full command line, derived from the entrypoint.
  std::vector<std::string> worker_argv;
  // What the failure table calls the job: the script, module or binary name.
  std::string entrypoint_name;

  // Unset: a fresh directory under $TMPDIR, like torchrun. "/dev/null": no
  // files at all.
  std::optional<std::string> log_dir;
  StdSpec redirects;
  StdSpec tee;
  std::optional<std::set<int>> local_ranks_filter;
  // --log-line-prefix-template, else TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE;
  // empty means "[${role_name}${local_rank}]:".
  std::string log_line_prefix_template;
  // --duplicate-std{out,err}-filters: teed lines that contain any of these
  // (plain substrings) are also written, prefixed, to
  // attempt_N/filtered_std{out,err}.log. Empty: no such file.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;

  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool master_port_given = false;  // by flag or PET_MASTER_PORT
  std::optional<std::string> local_addr;
  std::optional<std::string> logs_specs;
  // --numa-binding's mode, and each local rank's CPUs once BindWorkersToNuma
  // (numa_binding.h) has chosen them; empty: workers run where trun may.
  std::optional<std::string> numa_binding;
  std::vector<std::set<int>> worker_cpus;

  // Forwarded to the workers, then trun exits 128+signal.
  std::vector<int> signals_to_handle;
  // --signals-to-handle names torchrun accepts but cannot set a handler for
  // (SIGKILL, SIGSTOP): CheckBeforeStart refuses to start the workers.
  std::vector<std::string> unhandleable_signals;
  // --signals-to-handle SIGCHLD: every worker exit sends it, so the first
  // one ends the job, as torchrun's handler does.
  bool end_at_first_worker_exit = false;
  // --shutdown-timeout, else TORCH_ELASTIC_SHUTDOWN_TIMEOUT: grace between
  // the stop signal and SIGKILL.
  double shutdown_timeout_s = 30;

  // --virtual-local-rank: every worker gets LOCAL_RANK=0 and
  // CUDA_VISIBLE_DEVICES=virtual_devices[local_rank] (one per local rank).
  bool virtual_local_rank = false;
  std::vector<std::string> virtual_devices;

  // Whether trun set OMP_NUM_THREADS=1 for the workers (and warned).
  bool set_omp_num_threads = false;
};

}  // namespace trun::launch
