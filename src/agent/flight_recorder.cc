#include "agent/flight_recorder.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/files.h"

namespace trun::agent {

namespace {

// torch's default prefix of the dump (DebugInfoWriter).
constexpr const char* kDefaultDumpPrefix = "/tmp/nccl_trace_rank_";
constexpr auto kPoll = std::chrono::milliseconds(100);

std::string ProcPath(pid_t pid, const std::string& rest) {
  return "/proc/" + std::to_string(pid) + rest;
}

// What a dump file looks like now: absent, or its change time and size.
struct FileState {
  bool exists = false;
  int64_t mtime_ns = 0;
  uint64_t size = 0;
  bool operator==(const FileState&) const = default;
};

FileState StateOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {true, int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec,
          static_cast<uint64_t>(st.st_size)};
}

}  // namespace

std::optional<DumpPipe> FindDumpPipe(pid_t pid, int rank) {
  const std::string dir = ProcPath(pid, "/fd");
  DIR* d = ::opendir(dir.c_str());
  if (!d) return std::nullopt;
  std::optional<DumpPipe> any;
  std::optional<DumpPipe> ranked;
  const std::string own = std::to_string(rank) + ".pipe";
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string link = dir + "/" + e->d_name;
    char target[4096];
    const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    const std::string name(target, static_cast<size_t>(n));
    if (!name.ends_with(".pipe")) continue;
    struct stat st {};
    if (::stat(link.c_str(), &st) != 0 || !S_ISFIFO(st.st_mode)) continue;
    DumpPipe p{std::atoi(e->d_name), name};
    // "<stem><rank>.pipe": rank 0's is not "...10.pipe".
    const bool mine =
        name.ends_with(own) &&
        (name.size() == own.size() ||
         !std::isdigit(static_cast<unsigned char>(name[name.size() - own.size() - 1])));
    if (mine) {
      ranked = p;
    } else if (!any) {
      any = p;
    }
  }
  ::closedir(d);
  return ranked ? ranked : any;
}

std::string DumpPath(const std::string& environ, int rank) {
  std::string fr, nccl;
  size_t at = 0;
  while (at < environ.size()) {
    size_t end = environ.find('\0', at);
    if (end == std::string::npos) end = environ.size();
    const std::string_view entry(environ.data() + at, end - at);
    if (entry.starts_with("TORCH_FR_DUMP_TEMP_FILE=")) {
      fr = entry.substr(sizeof "TORCH_FR_DUMP_TEMP_FILE=" - 1);
    } else if (entry.starts_with("TORCH_NCCL_DEBUG_INFO_TEMP_FILE=")) {
      nccl = entry.substr(sizeof "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=" - 1);
    }
    at = end + 1;
  }
  const std::string prefix = !fr.empty() ? fr : !nccl.empty() ? nccl : kDefaultDumpPrefix;
  return prefix + std::to_string(rank);
}

std::vector<FlightRecorderDump> CollectDumps(const std::vector<DumpTarget>& targets,
                                             double wait_s) {
  struct Pending {
    FlightRecorderDump dump;
    std::string readable;  // the dump's path through /proc/PID/root
    FileState before;
    FileState last;
    bool done = false;
  };
  std::vector<Pending> pending;
  for (const auto& t : targets) {
    auto pipe = FindDumpPipe(t.pid, t.rank);
    if (!pipe) continue;
    Pending p;
    p.dump.rank = t.rank;
    p.dump.pid = t.pid;
    p.dump.pipe = pipe->name;
    auto env = ReadFile(ProcPath(t.pid, "/environ"));
    p.dump.path = DumpPath(env.ok() ? *env : std::string(), t.rank);
    p.readable = ProcPath(t.pid, "/root") + p.dump.path;
    p.before = StateOf(p.readable);
    const std::string fd = ProcPath(t.pid, "/fd/" + std::to_string(pipe->fd));
    const int w = ::open(fd.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (w < 0 || ::write(w, "1", 1) != 1) {
      p.dump.error =
          fmt::format("could not write to its pipe {}: {}", pipe->name, std::strerror(errno));
      p.done = true;
    }
    if (w >= 0) ::close(w);
    pending.push_back(std::move(p));
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(wait_s));
  for (;;) {
    bool waiting = false;
    for (auto& p : pending) {
      if (p.done) continue;
      const FileState now = StateOf(p.readable);
      // Written: changed since the byte, not empty, and its size held for
      // one poll (torch writes it in one go, but not atomically).
      if (now.exists && now.size > 0 && !(now == p.before) && now == p.last) {
        p.dump.bytes = now.size;
        p.done = true;
        continue;
      }
      p.last = now;
      waiting = true;
    }
    if (!waiting || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(kPoll);
  }
  std::vector<FlightRecorderDump> out;
  for (auto& p : pending) {
    if (!p.done) {
      p.dump.error = fmt::format("no dump at {} within {:g} s of asking", p.dump.path, wait_s);
    }
    out.push_back(std::move(p.dump));
  }
  return out;
}

}  // namespace trun::agent
