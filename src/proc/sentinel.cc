#include "proc/sentinel.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>

namespace trun::proc {
namespace {

// Runs in the forked child; never returns. Records are native int32: a
// positive pgid registers it, a negative one unregisters it.
[[noreturn]] void SentinelMain(int fd) {
  // Out of the terminal's foreground group: a Ctrl-C meant for trun must not
  // kill the sentinel before trun has had its say.
  setpgid(0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) signal(sig, SIG_IGN);
  prctl(PR_SET_NAME, "trun-sentinel");
  // A fixed table: workers are few and this process must not allocate.
  constexpr int kMax = 4096;
  static pid_t groups[kMax];
  int count = 0;
  int32_t rec;
  while (true) {
    ssize_t n = read(fd, &rec, sizeof rec);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof rec)) break;  // EOF: trun is gone
    if (rec > 0) {
      if (count < kMax) groups[count++] = rec;
    } else {
      for (int i = 0; i < count; ++i) {
        if (groups[i] == -rec) {
          groups[i] = groups[--count];
          break;
        }
      }
    }
  }
  for (int i = 0; i < count; ++i) kill(-groups[i], SIGKILL);
  _exit(0);
}

}  // namespace

Result<Sentinel> Sentinel::Start() {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return Status::FromErrno("sentinel pipe", errno);
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(p[0]);
    close(p[1]);
    return Status::FromErrno("fork sentinel", err);
  }
  if (pid == 0) {
    close(p[1]);
    // Hold none of trun's stdio open: whoever reads trun's output must see
    // EOF when trun exits, not when the sentinel does.
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      for (int fd = 0; fd < 3; ++fd) dup2(devnull, fd);
    }
    SentinelMain(p[0]);
  }
  close(p[0]);
  return Sentinel(pid, p[1]);
}

Sentinel::~Sentinel() {
  if (fd_ >= 0) close(fd_);
}

void Sentinel::Send(int32_t record) {
  if (fd_ < 0) return;
  // 4-byte writes to a pipe are atomic; a full pipe would need 16k live
  // groups, far beyond the table.
  while (write(fd_, &record, sizeof record) < 0 && errno == EINTR) {
  }
}

void Sentinel::Register(pid_t pgid) { Send(static_cast<int32_t>(pgid)); }
void Sentinel::Unregister(pid_t pgid) { Send(-static_cast<int32_t>(pgid)); }

}  // namespace trun::proc
