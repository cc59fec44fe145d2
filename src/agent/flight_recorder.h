// NCCL's flight recorder (torch 2.x's own, ProcessGroupNCCL): with a hang
// report, trun asks each hung worker for its recorder's dump, but only where
// the user turned the recorder's dump pipe on with torch's own variables.
//
// What torch does (torch 2.3 and later): when TORCH_NCCL_TRACE_BUFFER_SIZE
// (TORCH_FR_BUFFER_SIZE in newer releases) is above 0 and
// TORCH_NCCL_DEBUG_INFO_PIPE_FILE names a stem, the first NCCL process group
// makes a FIFO "<stem><rank>.pipe" and holds it open for reading; its
// heartbeat monitor reads it about once a second, and a byte there makes it
// write the recorder's pickled dump to "<prefix><rank>", the prefix being
// TORCH_FR_DUMP_TEMP_FILE, else TORCH_NCCL_DEBUG_INFO_TEMP_FILE, else
// "/tmp/nccl_trace_rank_". The training goes on after a dump.
//
// What trun does: the pipe is found among the worker's open descriptors (a
// FIFO named "*.pipe"), so a stem the script set in os.environ before
// init_process_group is found too; the dump's prefix is read from the
// environment the worker started with (/proc/PID/environ), torch's default
// where that has none. One byte is written through /proc/PID/fd/N, never
// blocking; then the dump file is watched (through /proc/PID/root, so a
// worker in a chroot is read from outside it) until it has changed and its
// size has held for one poll, or the wait ends. A worker without the pipe
// is left alone: nothing is written, and nothing is reported for it.
//
// Thread-safety: free functions over their arguments; CollectDumps blocks
// (it polls) and belongs off the agent's loop.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trun::agent {

struct FlightRecorderDump {
  int rank = 0;
  pid_t pid = 0;
  std::string pipe;    // the worker's FIFO, as it named it
  std::string path;    // where the worker writes its dump, as it names it
  uint64_t bytes = 0;  // the dump's size once written
  std::string error;   // why no dump came; "" when one did
};

// The worker's recorder pipe: an open descriptor of `pid` on a FIFO whose
// name ends in "<rank>.pipe" (else in ".pipe"); its descriptor number and
// name, or nullopt when it holds none.
struct DumpPipe {
  int fd = -1;
  std::string name;
};
std::optional<DumpPipe> FindDumpPipe(pid_t pid, int rank);

// The dump file's path as the worker names it, from `environ` (the
// NUL-separated block of /proc/PID/environ) and the rank.
std::string DumpPath(const std::string& environ, int rank);

struct DumpTarget {
  int rank = 0;
  pid_t pid = 0;
};

// Asks every target that has a recorder pipe for a dump and waits, at most
// `wait_s` in all, for the dumps to be written; one entry per target that
// had a pipe, in the targets' order.
std::vector<FlightRecorderDump> CollectDumps(const std::vector<DumpTarget>& targets, double wait_s);

}  // namespace trun::agent
