// Hang detection (--hang-timeout): when the job's workers have made no
// progress for a while, where each of them is.
//
// The rule (docs/cli.md, "--hang-timeout"): each agent samples its workers
// about once a second: the CPU time of each worker and of its descendants
// (/proc/PID/stat) and the bytes of output trun's pumps read from it. A
// node has been quiet for Q seconds when, between a sample Q seconds old and
// the newest, no worker used more than kIdleCpuFraction of one core (a
// worker blocked in a gloo or NCCL wait, or asleep, uses next to none; a
// computing one uses a whole core) and none wrote a byte. One exception: a
// worker that waits for its GPU spins a core (CUDA's default
// synchronization polls while fewer contexts than cores are open), so a
// worker whose main thread stayed at one stack whose innermost frame is in
// torch.cuda or torch.distributed (torch.cuda.synchronize, a barrier, a
// collective's wait) in every sample of the window waits, whatever CPU it
// used. A loop of the user's own that computes changes nothing here: its
// innermost frame is the user's. The job has hung
// when every node of the round has been quiet for the timeout: the agent of
// group rank 0 judges that (JudgeJob) from what its peers answer; a node
// that cannot be asked keeps the verdict from being made, so that one
// node's silence is never taken for the job's. A node whose workers have
// all finished (exit 0; its agent waits in the exit barrier) makes no
// progress and needs none: it counts as quiet however long ago they
// finished, and group rank 0 keeps judging from its exit barrier while
// the others run, so that a job whose judge finished first is still judged.
//
// The report groups the whole job's workers by their main thread's Python
// stack (the whole stack: same frames, same lines). The odd ranks, those
// the others are waiting for, are the ranks outside a collective when some
// rank waits in one (a frame in torch/distributed/); else, when one group
// is larger than every other, the ranks outside it; else none (a tie names
// nobody). Finished ranks are neither: they are grouped, never named.
//
// Thread-safety: none; ProgressWindow is used from the agent's loop thread,
// the free functions are pure but TreeCpuSeconds, which reads /proc.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "proc/pystack.h"

namespace trun::agent {

// A worker that used more than this fraction of one core over the window
// made progress.
inline constexpr double kIdleCpuFraction = 0.01;
// How often an agent samples its workers: a node's quiet is known to
// within this, and the job's verdict, which waits for every node's, comes
// within a few of these after the timeout.
inline constexpr double kSamplePeriodS = 0.5;

// One look at a node's workers, each index one local rank.
struct ProgressSample {
  double at = 0;                       // seconds on a steady clock
  std::vector<double> cpu_seconds;     // each worker's, its descendants' included
  std::vector<uint64_t> output_bytes;  // what trun's pumps read from each
  // Each worker's DeviceWait() where DeviceWaitWatcher found its main thread
  // at that one wait all along since the previous sample (it is watched
  // while it uses CPU and writes nothing), else "". Empty: none known.
  std::vector<std::string> device_wait;
};

// Watches the main threads of the workers the agent names (those that used
// CPU and wrote nothing since the last sample), reading each every
// kWatchPeriodMs on average (varied) on a thread of its own. The rule's "at one and the same
// device wait in every sample" must mean that the thread never left it in
// between: a loop that spends nearly all of each step in one
// torch.cuda.synchronize() at one line leaves it only for the step's own
// work, microseconds to milliseconds at a time, which samples half a second
// apart would miss. Reads cost microseconds each (proc::PyStackReader),
// and a worker found away from a device wait is not read again until the
// next sample (Settled): only a worker that stays at one is read all along.
//
// Thread-safety: Watch and Take are called from one thread (the agent's
// loop); the watcher reads on its own thread, under its mutex.
inline constexpr int kWatchPeriodMs = 2;

class DeviceWaitWatcher {
 public:
  DeviceWaitWatcher();
  ~DeviceWaitWatcher();
  DeviceWaitWatcher(const DeviceWaitWatcher&) = delete;
  DeviceWaitWatcher& operator=(const DeviceWaitWatcher&) = delete;

  // Watch these processes from now on; forget the others.
  void Watch(const std::vector<pid_t>& pids);
  // DeviceWait() of `pid`'s main thread if every read since the previous
  // Take (two at least) found it at that one wait; "" otherwise, or when
  // it is not watched. Starts the next span.
  std::string Take(pid_t pid);

 private:
  struct Watched {
    std::optional<proc::PyStackReader> reader;
    bool unreadable = false;
    std::string key;
    int reads = 0;
    bool moved = false;
  };
  static bool Settled(const Watched& w);
  void Run();

  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::map<pid_t, Watched> watched_;
  std::thread thread_;
};

// What identifies the place of a main thread that waits on its device or
// a collective (see the header's comment): its whole stack, when the
// innermost frame is in torch/cuda/ or torch/distributed/; "" otherwise.
std::string DeviceWait(const std::vector<proc::PyFrame>& frames);

class ProgressWindow {
 public:
  explicit ProgressWindow(double timeout_s) : timeout_s_(timeout_s) {}
  // Adds the newest sample (samples come in time order, each of the same
  // workers); how long, by the rule above, the workers have been quiet: 0
  // when they made progress since the previous sample, at most a little
  // over the timeout (older samples are not kept).
  double Quiet(ProgressSample sample);
  // Whether worker `i` used more than the idle share of a core between the
  // newest sample and `cpu_seconds` at `at` without writing: whose stack
  // the next sample should read (DeviceWait).
  bool BusyAndSilent(size_t i, double at, double cpu_seconds, uint64_t output_bytes) const;

 private:
  double timeout_s_;
  std::deque<ProgressSample> samples_;
};

// --hang-action fail on the judging node when the odd ranks are all on
// other nodes: those nodes fail them, giving the job its root cause; this
// one fails on its own only after one more timeout without progress.
// Progress meanwhile puts that off: the wait starts again at the next
// sample that finds the workers quiet for the timeout.
class SecondTimeout {
 public:
  explicit SecondTimeout(double timeout_s) : timeout_s_(timeout_s) {}
  // Each sample's verdict (quiet for the timeout or not) at `now`, in time
  // order; true when the node fails now.
  bool Due(bool stalled, double now);

 private:
  double timeout_s_;
  std::optional<double> due_;
};

// The CPU time, user and system, of process `pid` and of every process
// below it (a data loader's workers), the children that exited and were
// waited for included: so it never falls when a data loader's workers end
// at the end of an epoch, which would read as a window without CPU. 0 for
// one that cannot be read.
double TreeCpuSeconds(pid_t pid);

// One worker's place: its main thread's frames, innermost first, or why
// they could not be read, or that it has finished (exited 0).
struct RankStack {
  int rank = 0;
  std::vector<proc::PyFrame> frames;
  std::string error;
  bool finished = false;
};

struct HangGroup {
  std::vector<int> ranks;  // ascending
  std::string where;       // Where() of their stack
  bool odd = false;        // not where the others are
};

// Groups by identical stack, the odd groups first, then by lowest rank.
std::vector<HangGroup> GroupStacks(const std::vector<RankStack>& stacks);

// "in FUNCTION at FILE:LINE" of the innermost frame (the file's base name);
// when that frame is in a library (site-packages, dist-packages, Python's
// own lib), ", called from FUNCTION at FILE:LINE" of the innermost frame
// that is not. "no stack: WHY" when there is none, "finished: exited 0"
// for a finished rank.
std::string Where(const RankStack& s);

// "rank 3", "ranks 0-2, 4-7".
std::string FormatRanks(std::vector<int> ranks);

// One group: "rank 3 is not where the others are: in f at x.py:12",
// "ranks 0-2: in all_reduce at ...".
std::string HangLine(const HangGroup& g);

// The one-line summary: every group's HangLine, joined by "; ".
std::string HangSummary(const std::vector<HangGroup>& groups);

// The main thread's stack of each worker of a stacks document (stacks.h);
// a worker whose status is "succeeded" has finished.
std::vector<RankStack> RankStacksOf(const nlohmann::ordered_json& doc);

// What one node told of itself for the job's verdict: how long its workers
// have been quiet, or that they have all finished, or why neither is known.
struct NodeQuiet {
  int node_rank = 0;
  std::optional<double> quiet_s;  // none: finished, or unknown (`error` says why)
  std::string error;
  bool finished = false;  // every worker exited 0: quiet for good
};

// Group rank 0's verdict over every node of the round (itself included).
struct JobVerdict {
  bool hung = false;               // every node quiet for the timeout
  double recheck_in_s = 0;         // when asking again can change the answer
  std::vector<NodeQuiet> unknown;  // the nodes that kept a verdict from being made
};

// Hung when every node has been quiet for `timeout_s` or has finished,
// and some node has not finished (a job whose nodes all finished is done,
// not hung). Otherwise the job cannot have hung before the least quiet
// running node has been quiet for the timeout: recheck_in_s is what that
// node lacks (a node that did not answer, or none running: a whole
// timeout), at least one sample period.
JobVerdict JudgeJob(const std::vector<NodeQuiet>& nodes, double timeout_s);

// A node's answer to GET /stacks?scope=hang (docs/events.md):
//   {"node_rank": N, "round": R, "quiet_seconds": Q | null, "finished": F,
//    "hang": null | {"idle_seconds": S, "summary": "...",
//                    "groups": [{"ranks": [3], "where": "...", "odd": true}, ...]}}
// `finished`: every worker of the round exited 0 (the exit barrier).
nlohmann::ordered_json HangAnswer(std::optional<int> node_rank, std::optional<int64_t> round,
                                  std::optional<double> quiet_s, bool finished, double idle_s,
                                  const std::vector<HangGroup>& groups);

// What node `node_rank`'s answer (or failure to answer) says of its quiet,
// for round `round`: a node in another round is not quiet (it is
// restarting), a finished one is quiet for good, one that does not watch
// (no --hang-timeout) is unknown.
NodeQuiet QuietOf(int node_rank, int64_t round, const Result<nlohmann::json>& answer);

// The verdict in group rank 0's answer for round `round`; none while it
// has made none.
std::optional<std::vector<HangGroup>> VerdictOf(int64_t round, const nlohmann::json& answer);

// Every worker of a whole job's stacks (job_stacks.h's array of node
// documents), node after node.
std::vector<RankStack> JobRankStacks(const nlohmann::ordered_json& job);

}  // namespace trun::agent
