#include "proc/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <mutex>

#include "proc/spawn.h"

namespace trun::proc {
namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<CommandResult> RunCommand(const std::vector<std::string>& argv, double timeout_s,
                                 const std::map<std::string, std::string>& env) {
  if (argv.empty()) return Status::InvalidArgument("RunCommand: empty argv");
  const char* path = std::getenv("PATH");
  auto program = ResolveExecutable(argv[0], path ? path : "");
  if (!program.ok()) return program.status();

  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Status::FromErrno("pipe", errno);
  Fd out_r{out[0]}, out_w{out[1]};
  if (::pipe2(err, O_CLOEXEC) != 0) return Status::FromErrno("pipe", errno);
  Fd err_r{err[0]}, err_w{err[1]};
  Fd null{::open("/dev/null", O_RDONLY | O_CLOEXEC)};
  if (null.fd < 0) return Status::FromErrno("open /dev/null", errno);

  SpawnOptions opts;
  opts.argv = argv;
  opts.argv[0] = *program;
  opts.env = EnvironWith(env);
  opts.stdin_fd = null.fd;
  opts.stdout_fd = out_w.fd;
  opts.stderr_fd = err_w.fd;
  opts.parent_death_signal = 0;
  Result<pid_t> pid = [&] {
    static std::mutex spawn_mu;
    std::lock_guard<std::mutex> lock(spawn_mu);
    return Spawn(opts);
  }();
  if (!pid.ok()) return pid.status();
  ::close(out_w.fd);
  out_w.fd = -1;
  ::close(err_w.fd);
  err_w.fd = -1;

  CommandResult r;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
  char buf[16384];
  while (out_r.fd >= 0 || err_r.fd >= 0) {
    pollfd fds[2] = {{out_r.fd, POLLIN, 0}, {err_r.fd, POLLIN, 0}};
    int wait_ms = -1;
    if (!r.timed_out) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) {
        // Killed with its group; the pipes close once it is gone.
        ::kill(-*pid, SIGKILL);
        r.timed_out = true;
        continue;
      }
      wait_ms = static_cast<int>(left);
    }
    int n = ::poll(fds, 2, wait_ms);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        Fd& f = i == 0 ? out_r : err_r;
        ::close(f.fd);
        f.fd = -1;
      }
    }
  }
  int status = 0;
  while (::waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
  return r;
}

}  // namespace trun::proc
