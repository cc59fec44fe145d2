#include "proc/spawn.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/strings.h"

extern char** environ;

namespace trun::proc {
namespace {

// Everything the child needs, prepared by the parent: between clone and
// execve the child may only make system calls (no allocation, no locks).
struct ChildArgs {
  const char* path;
  char* const* argv;
  char* const* envp;
  int fds[3];
  bool new_process_group;
  int parent_death_signal;
  pid_t parent_pid;
  sigset_t child_mask;
  const int* default_signals;
  size_t default_signal_count;
  rlimit nofile;
  bool set_cpus;
  cpu_set_t cpus;
  int error;  // errno of the failed step, written by the child
  int step;   // which step failed, for the message
};

// The open-file limit this process started with, read before main() runs,
// i.e. before the store raises it.
const rlimit kStartNofile = [] {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  return rl;
}();

// CLOSE_RANGE_CLOEXEC from <linux/close_range.h>, which Debian 12's glibc
// headers do not pull in.
constexpr unsigned kCloseRangeCloexec = 1U << 2;
constexpr const char* kSteps[] = {"",     "setpgid", "prctl(PR_SET_PDEATHSIG)",
                                  "dup2", "execve",  "sched_setaffinity"};

// The kernel's struct sigaction. The child changes its signal dispositions
// through the kernel directly, not libc's sigaction(): it shares the
// parent's memory (CLONE_VM), and a sanitizer's interceptor (ThreadSanitizer
// keeps the handlers it wraps in user space) would change the parent's
// bookkeeping, not just the child's, and the parent would lose its SIGCHLD.
struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  uint64_t mask;
};

void SetDefault(int sig) {
  KernelSigaction dfl{SIG_DFL, 0, nullptr, 0};
  syscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof(uint64_t));
}

int ChildMain(void* raw) {
  auto* a = static_cast<ChildArgs*>(raw);
  // Undo the parent's signal handlers before unblocking anything: a handler
  // running here would run on the parent's memory.
  for (int sig = 1; sig <= 64; ++sig) {
    KernelSigaction sa{};
    if (syscall(SYS_rt_sigaction, sig, nullptr, &sa, sizeof(uint64_t)) == 0 &&
        sa.handler != SIG_DFL && sa.handler != SIG_IGN) {
      SetDefault(sig);
    }
  }
  // What trun ignores for itself the worker must not inherit: a worker
  // writing to a closed pipe should die of SIGPIPE, as under Python's
  // subprocess (restore_signals), and see the open-file limit trun started
  // with, not the one the store raised.
  SetDefault(SIGPIPE);
  SetDefault(SIGXFSZ);
  for (size_t i = 0; i < a->default_signal_count; ++i) SetDefault(a->default_signals[i]);
  setrlimit(RLIMIT_NOFILE, &a->nofile);
  if (a->new_process_group && setpgid(0, 0) != 0) {
    a->error = errno;
    a->step = 1;
    _exit(127);
  }
  if (a->parent_death_signal != 0) {
    if (prctl(PR_SET_PDEATHSIG, a->parent_death_signal) != 0) {
      a->error = errno;
      a->step = 2;
      _exit(127);
    }
    // The parent may have died before prctl took effect.
    if (getppid() != a->parent_pid) _exit(127);
  }
  for (int i = 0; i < 3; ++i) {
    if (a->fds[i] < 0 || a->fds[i] == i) continue;
    if (dup2(a->fds[i], i) < 0) {
      a->error = errno;
      a->step = 3;
      _exit(127);
    }
  }
  // Nothing of trun's own may reach the program: the store's accepted
  // sockets, say, kept open by a worker would hide a closed connection from
  // its peer. asio and the pipes do not all set O_CLOEXEC, so every
  // descriptor past stdio is marked here (Linux 5.11; older kernels skip it).
  syscall(SYS_close_range, 3U, ~0U, kCloseRangeCloexec);
  // The kernel's mask is the first 64 bits of glibc's sigset_t.
  if (a->set_cpus && sched_setaffinity(0, sizeof a->cpus, &a->cpus) != 0) {
    a->error = errno;
    a->step = 5;
    _exit(127);
  }
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, &a->child_mask, nullptr, sizeof(uint64_t));
  execve(a->path, a->argv, a->envp);
  a->error = errno;
  a->step = 4;
  _exit(127);
}

bool IsExecutableFile(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

}  // namespace

std::vector<std::string> EnvironWith(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string_view kv(*e);
    if (!overrides.count(std::string(kv.substr(0, kv.find('='))))) env.emplace_back(kv);
  }
  for (const auto& [k, v] : overrides) env.push_back(k + "=" + v);
  return env;
}

Result<std::string> ResolveExecutable(const std::string& name, const std::string& path) {
  if (name.empty()) return Status::InvalidArgument("empty program name");
  if (name.find('/') != std::string::npos) {
    if (IsExecutableFile(name)) return name;
    return Status::NotFound(name + " is not an executable file");
  }
  for (const auto& dir : Split(path.empty() ? "/usr/local/bin:/usr/bin:/bin" : path, ':')) {
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (IsExecutableFile(candidate)) return candidate;
  }
  return Status::NotFound(name + " was not found on PATH");
}

Result<pid_t> Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return Status::InvalidArgument("spawn: empty argv");
  std::string path_env;
  for (const auto& kv : options.env) {
    if (kv.rfind("PATH=", 0) == 0) path_env = kv.substr(5);
  }
  if (path_env.empty() && std::getenv("PATH")) path_env = std::getenv("PATH");
  Result<std::string> path = ResolveExecutable(options.argv[0], path_env);
  if (!path.ok()) return path.status();

  std::vector<char*> argv;
  argv.reserve(options.argv.size() + 1);
  for (const auto& s : options.argv) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(options.env.size() + 1);
  for (const auto& s : options.env) envp.push_back(const_cast<char*>(s.c_str()));
  envp.push_back(nullptr);

  ChildArgs args{};
  args.path = path->c_str();
  args.argv = argv.data();
  args.envp = envp.data();
  args.fds[0] = options.stdin_fd;
  args.fds[1] = options.stdout_fd;
  args.fds[2] = options.stderr_fd;
  args.new_process_group = options.new_process_group;
  args.parent_death_signal = options.parent_death_signal;
  args.parent_pid = ::getpid();
  args.default_signals = options.default_signals.data();
  args.default_signal_count = options.default_signals.size();
  args.nofile = kStartNofile;
  CPU_ZERO(&args.cpus);
  for (int cpu : options.cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return Status::InvalidArgument("spawn: no CPU " + std::to_string(cpu) + " to bind to");
    }
    CPU_SET(cpu, &args.cpus);
  }
  args.set_cpus = !options.cpus.empty();
  sigemptyset(&args.child_mask);

  // The child runs on its own small stack; CLONE_VFORK keeps us suspended
  // until it has exec'd, so one stack serves every spawn.
  static constexpr size_t kStackSize = 64 * 1024;
  static void* stack = [] {
    void* p = ::mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }();
  if (stack == nullptr) return Status::Internal("spawn: cannot map a stack for clone");

  // Block every signal across the clone so no handler of ours runs in the
  // child before it has reset them.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = ::clone(ChildMain, static_cast<char*>(stack) + kStackSize,
                      CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
  int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return Status::FromErrno("spawn " + options.argv[0] + ": clone", clone_errno);
  if (args.step != 0) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return Status::IOError("cannot start " + options.argv[0] + ": " + kSteps[args.step] + ": " +
                           std::strerror(args.error));
  }
  return pid;
}

}  // namespace trun::proc
