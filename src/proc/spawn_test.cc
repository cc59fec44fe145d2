#include "proc/spawn.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

namespace trun::proc {
namespace {

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

// Spawns `o` with its stdout on a pipe; its output once it exited 0.
std::string SpawnAndRead(SpawnOptions o, pid_t* spawned = nullptr) {
  int p[2];
  EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
  o.stdout_fd = p[1];
  auto pid = Spawn(o);
  close(p[1]);
  EXPECT_TRUE(pid.ok()) << pid.status().ToString();
  std::string out = ReadAll(p[0]);
  close(p[0]);
  if (!pid.ok()) return out;
  int status = 0;
  EXPECT_EQ(waitpid(*pid, &status, 0), *pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (spawned) *spawned = *pid;
  return out;
}

TEST(SpawnTest, RunsWithExactEnvironmentAndOwnProcessGroup) {
  SpawnOptions o;
  o.argv = {"sh", "-c", "echo \"$FOO $(ps -o pgid= -p $$ | tr -d ' ') $$\""};
  o.env = {"FOO=bar", "PATH=/usr/bin:/bin"};
  pid_t pid = 0;
  std::string out = SpawnAndRead(o, &pid);
  EXPECT_EQ(out, "bar " + std::to_string(pid) + " " + std::to_string(pid) + "\n");
}

// A descriptor trun opened without O_CLOEXEC (asio's accepted sockets) does
// not reach the worker.
TEST(SpawnTest, DescriptorsPastStdioStayWithTrun) {
  int leaky[2];
  ASSERT_EQ(pipe(leaky), 0);
  SpawnOptions o;
  o.argv = {"sh", "-c", "ls /proc/self/fd | sort -n | tr '\\n' ' '"};
  o.env = {"PATH=/usr/bin:/bin"};
  std::string out = SpawnAndRead(o);
  close(leaky[0]);
  close(leaky[1]);
  // 0-2, and the descriptor ls opens to read /proc/self/fd.
  EXPECT_EQ(out, "0 1 2 3 ");
}

TEST(SpawnTest, MissingProgramIsAnErrorNotAChild) {
  SpawnOptions o;
  o.argv = {"/nonexistent/program"};
  auto pid = Spawn(o);
  EXPECT_FALSE(pid.ok());
  o.argv = {"surely-not-a-program-on-path"};
  o.env = {"PATH=/usr/bin"};
  EXPECT_FALSE(Spawn(o).ok());
}

TEST(SpawnTest, ResolveFollowsPath) {
  auto sh = ResolveExecutable("sh", "/nonexistent:/bin:/usr/bin");
  ASSERT_TRUE(sh.ok());
  EXPECT_EQ(*sh, "/bin/sh");
  EXPECT_FALSE(ResolveExecutable("sh", "/nonexistent").ok());
}

// trun ignores SIGPIPE and raises its open-file limit for the store; its
// workers get neither, as under torchrun.
TEST(SpawnTest, WorkersGetDefaultSigpipeAndTheStartingFileLimit) {
  rlimit start{};
  getrlimit(RLIMIT_NOFILE, &start);
  rlimit lowered = start;
  lowered.rlim_cur = start.rlim_cur > 64 ? start.rlim_cur - 1 : start.rlim_cur;
  auto old = signal(SIGPIPE, SIG_IGN);
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  SpawnOptions o;
  // SigIgn is a hex mask; SIGPIPE (13) is bit 12, i.e. 0x1000.
  o.argv = {"sh", "-c",
            "m=$(awk '/^SigIgn/{print $2}' /proc/self/status); "
            "echo $(( 0x$m & 0x1000 )) $(ulimit -Sn)"};
  o.env = {"PATH=/usr/bin:/bin"};
  o.stdout_fd = p[1];
  setrlimit(RLIMIT_NOFILE, &lowered);  // as if raised or lowered after start-up
  auto pid = Spawn(o);
  setrlimit(RLIMIT_NOFILE, &start);
  signal(SIGPIPE, old);
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  close(p[1]);
  std::string out = ReadAll(p[0]);
  close(p[0]);
  waitpid(*pid, nullptr, 0);
  EXPECT_EQ(out, "0 " + std::to_string(start.rlim_cur) + "\n");
}

}  // namespace
}  // namespace trun::proc
