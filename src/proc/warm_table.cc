#include "proc/warm_table.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "common/log.h"
#include "proc/signals.h"
#include "proc/warm_protocol.h"
#include "proc/warm_server.h"

namespace trun::proc {
namespace {

Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("warm start: writing to the warm process", errno);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::OK();
}

// Fails at EOF: the warm process is gone.
Status ReadAll(int fd, char* out, size_t size) {
  while (size > 0) {
    ssize_t n = ::recv(fd, out, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("warm start: reading from the warm process", errno);
    if (n == 0) return Status::IOError("warm start: the warm process closed its socket");
    out += n;
    size -= static_cast<size_t>(n);
  }
  return Status::OK();
}

Result<std::string> ReadFrame(int fd) {
  char head[4];
  TRUN_RETURN_IF_ERROR(ReadAll(fd, head, sizeof(head)));
  std::string payload(DecodeFrameLength(head), '\0');
  TRUN_RETURN_IF_ERROR(ReadAll(fd, payload.data(), payload.size()));
  return payload;
}

std::string DescribeExit(int exitcode) {
  return exitcode < 0 ? fmt::format("was killed by {}", SignalName(-exitcode))
                      : fmt::format("exited with {}", exitcode);
}

}  // namespace

Result<std::unique_ptr<WarmProcessTable>> WarmProcessTable::Start(asio::io_context& io,
                                                                  WarmOptions options) {
  auto system = SystemProcessTable::Start(io);
  if (!system.ok()) return system.status();
  std::unique_ptr<WarmProcessTable> table(
      new WarmProcessTable(io, std::move(*system), std::move(options)));
  TRUN_RETURN_IF_ERROR(table->StartServer());
  return table;
}

WarmProcessTable::WarmProcessTable(asio::io_context& io, std::unique_ptr<SystemProcessTable> system,
                                   WarmOptions options)
    : io_(io),
      system_(std::move(system)),
      options_(std::move(options)),
      cwd_(std::filesystem::current_path().string()) {}

WarmProcessTable::~WarmProcessTable() {
  waiting_.clear();
  if (server_ > 0) EndServer();
}

Status WarmProcessTable::StartServer() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return Status::FromErrno("warm start: socketpair", errno);
  }
  SpawnOptions o;
  o.argv = {options_.python, "-u", "-c", kWarmBootstrap};
  o.argv.insert(o.argv.end(), options_.imports.begin(), options_.imports.end());
  o.env = options_.env;
  o.default_signals = options_.default_signals;
  o.stdin_fd = sv[1];
  auto pid = system_->Spawn(o);
  ::close(sv[1]);
  if (!pid.ok()) {
    ::close(sv[0]);
    return pid.status();
  }
  server_ = *pid;
  sock_ = sv[0];
  return WriteAll(sock_, Frame(kWarmServer));
}

Status WarmProcessTable::ReadReady() {
  auto said = ReadFrame(sock_);
  if (!said.ok()) return said.status();
  if (*said != kWarmReady) {
    return Status::IOError(
        fmt::format("warm start: the warm process said '{}' before it was ready", *said));
  }
  ready_ = true;
  return Status::OK();
}

void WarmProcessTable::WhenReady(std::function<void()> ready) {
  // One that cannot start is Spawn's to report.
  if (server_ < 0 && !StartServer().ok()) return ready();
  if (ready_) return ready();
  waiting_.push_back(std::move(ready));
  if (watch_) return;
  watch_ = std::make_unique<asio::posix::stream_descriptor>(io_, sock_);
  watch_->async_wait(asio::posix::stream_descriptor::wait_read, [this](std::error_code ec) {
    // Cancelled: the warm process is gone (ServerGone hands on), or the
    // table with it.
    if (ec) return;
    // asio made the socket non-blocking; Spawn's reads block.
    std::error_code blocking;
    watch_->native_non_blocking(false, blocking);
    watch_->release();
    watch_.reset();
    // The frame is in, whole (one small write), or the socket is at EOF.
    if (Status s = ReadReady(); !s.ok()) {
      log::Warning("{}; the first worker starts a new one (warm process {})", s.message(),
                   EndServer());
    }
    Readied();
  });
}

void WarmProcessTable::Readied() {
  for (auto& ready : std::exchange(waiting_, {})) ready();
}

Result<std::string> WarmProcessTable::Ask(const std::string& frame, const int fds[3]) {
  if (!ready_) TRUN_RETURN_IF_ERROR(ReadReady());
  alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))] = {};
  iovec iov{const_cast<char*>(frame.data()), frame.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(3 * sizeof(int));
  std::memcpy(CMSG_DATA(c), fds, 3 * sizeof(int));
  ssize_t sent;
  do {
    sent = ::sendmsg(sock_, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return Status::FromErrno("warm start: writing to the warm process", errno);
  TRUN_RETURN_IF_ERROR(WriteAll(sock_, std::string_view(frame).substr(static_cast<size_t>(sent))));
  return ReadFrame(sock_);
}

Result<pid_t> WarmProcessTable::Spawn(const SpawnOptions& options) {
  auto command = ParsePythonCommand(options.argv);
  if (!command.ok()) return command.status();
  const std::string frame = EncodeRequest({*command, options.env, cwd_, ::getpid()});
  const int fds[3] = {options.stdin_fd < 0 ? STDIN_FILENO : options.stdin_fd,
                      options.stdout_fd < 0 ? STDOUT_FILENO : options.stdout_fd,
                      options.stderr_fd < 0 ? STDERR_FILENO : options.stderr_fd};
  // A warm process that is gone (killed since the last worker) is replaced
  // once; a second that cannot answer either is the reason Spawn fails.
  for (int attempt = 0;; ++attempt) {
    if (server_ < 0) TRUN_RETURN_IF_ERROR(StartServer());
    auto reply = Ask(frame, fds);
    if (reply.ok()) {
      auto pid = DecodeReply(*reply);
      if (pid.ok()) system_->Adopt(*pid);
      return pid;
    }
    std::string how = EndServer();
    if (attempt > 0) {
      return Status::IOError(
          fmt::format("warm start: the warm process {} before it started a worker (its stderr, "
                      "above, may say why)",
                      how));
    }
    log::Warning("warm start: the warm process {}; starting a new one", how);
  }
}

std::string WarmProcessTable::EndServer() {
  const pid_t pid = server_;
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ServerGone(pid);
  return fmt::format("(pid {}) {}", pid, DescribeExit(ExitCodeOf(status)));
}

void WarmProcessTable::ServerGone(pid_t pid) {
  system_->Forget(pid);
  if (watch_) {
    watch_->release();
    watch_.reset();
  }
  ::close(sock_);
  sock_ = -1;
  server_ = -1;
  ready_ = false;
  // Whoever waits for it learns from Spawn, which starts another; not from
  // here, in the middle of a reap.
  if (!waiting_.empty()) asio::post(io_, [this] { Readied(); });
}

std::optional<ChildExit> WarmProcessTable::Reap() {
  while (auto exit = system_->Reap()) {
    if (exit->pid != server_) return exit;
    log::Warning("warm start: the warm process (pid {}) {}; the next worker starts a new one",
                 exit->pid, DescribeExit(exit->exitcode));
    ServerGone(exit->pid);
  }
  return std::nullopt;
}

std::vector<pid_t> WarmProcessTable::KillChildren() {
  std::vector<pid_t> killed = system_->KillChildren();
  auto it = std::find(killed.begin(), killed.end(), server_);
  if (it != killed.end()) {
    ServerGone(server_);
    killed.erase(it);
  }
  return killed;
}

}  // namespace trun::proc
