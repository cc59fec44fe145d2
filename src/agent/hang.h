// Hang detection (--hang-timeout): when a node's workers have made no
// progress for a while, where each of them is.
//
// The rule (docs/cli.md, "--hang-timeout"): the agent samples its workers
// about once a second: the CPU time of each worker and of its descendants
// (/proc/PID/stat) and the bytes of output trun's pumps read from it. The
// workers have made no progress when, between a sample at least the timeout
// old and the newest, no worker used more than kIdleCpuFraction of one core
// (a worker blocked in a gloo or NCCL wait, or asleep, uses next to none; a
// computing one uses a whole core) and none wrote a byte.
//
// The report groups the workers by their main thread's Python stack (the
// whole stack: same frames, same lines). The odd ranks, those the others
// are waiting for, are the ranks outside a collective when some rank waits
// in one (a frame in torch/distributed/); else, when one group is larger
// than every other, the ranks outside it; else none (a tie names nobody).
//
// Thread-safety: none; ProgressWindow is used from the agent's loop thread,
// the free functions are pure but TreeCpuSeconds, which reads /proc.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "proc/pystack.h"

namespace trun::agent {

// A worker that used more than this fraction of one core over the window
// made progress.
inline constexpr double kIdleCpuFraction = 0.01;

// One look at a node's workers, each index one local rank.
struct ProgressSample {
  double at = 0;                       // seconds on a steady clock
  std::vector<double> cpu_seconds;     // each worker's, its descendants' included
  std::vector<uint64_t> output_bytes;  // what trun's pumps read from each
};

class ProgressWindow {
 public:
  explicit ProgressWindow(double timeout_s) : timeout_s_(timeout_s) {}
  // Adds the newest sample (samples come in time order, each of the same
  // workers); true when the rule above finds no progress.
  bool Stalled(ProgressSample sample);

 private:
  double timeout_s_;
  std::deque<ProgressSample> samples_;
};

// --hang-action fail on a node whose report named nobody (its ranks all
// wait): it fails after one more timeout without progress, so that the node
// of the hung rank fails first and gives the job its root cause. Progress
// meanwhile puts that off: the wait starts again at the next sample that
// finds the workers stalled.
class SecondTimeout {
 public:
  explicit SecondTimeout(double timeout_s) : timeout_s_(timeout_s) {}
  // Each sample's verdict (ProgressWindow::Stalled) at `now`, in time
  // order; true when the node fails now.
  bool Due(bool stalled, double now);

 private:
  double timeout_s_;
  std::optional<double> due_;
};

// The CPU time, user and system, of process `pid` and of every process
// below it (a data loader's workers); 0 for one that cannot be read.
double TreeCpuSeconds(pid_t pid);

// One worker's place: its main thread's frames, innermost first, or why
// they could not be read.
struct RankStack {
  int rank = 0;
  std::vector<proc::PyFrame> frames;
  std::string error;
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
// that is not. "no stack: WHY" when there is none.
std::string Where(const RankStack& s);

// "rank 3", "ranks 0-2, 4-7".
std::string FormatRanks(std::vector<int> ranks);

// One group: "rank 3 is not where the others are: in f at x.py:12",
// "ranks 0-2: in all_reduce at ...".
std::string HangLine(const HangGroup& g);

// The one-line summary: every group's HangLine, joined by "; ".
std::string HangSummary(const std::vector<HangGroup>& groups);

// The main thread's stack of each worker of a stacks document (stacks.h).
std::vector<RankStack> RankStacksOf(const nlohmann::ordered_json& doc);

}  // namespace trun::agent
