// For tests only: a child process started with `argv` (and `env`, or this
// process's environment) that is ready once it has printed a line that
// begins with "ready" on its stdout (ready_line(): from "ready" to the end
// of that line); killed and reaped on destruction. Its stdout stays open, so that
// what it prints later cannot kill it with SIGPIPE.
//
// Thread-safety: one thread.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

namespace trun::proc {

class ReadyChild {
 public:
  explicit ReadyChild(std::vector<std::string> argv,
                      std::optional<std::vector<std::string>> env = std::nullopt) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(p[1], 1);
      std::vector<char*> args, envp;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      if (env) {
        for (auto& e : *env) envp.push_back(e.data());
        envp.push_back(nullptr);
        execve(args[0], args.data(), envp.data());
      } else {
        execv(args[0], args.data());
      }
      _exit(127);
    }
    close(p[1]);
    std::string out;
    char buf[64];
    ssize_t n;
    auto line_end = [&out] {
      auto at = out.find("ready");
      return at == std::string::npos ? at : out.find('\n', at);
    };
    while (line_end() == std::string::npos && (n = read(p[0], buf, sizeof buf)) > 0) {
      out.append(buf, static_cast<size_t>(n));
    }
    out_fd_ = p[0];
    ready_ = line_end() != std::string::npos;
    if (ready_) ready_line_ = out.substr(out.find("ready"), line_end() - out.find("ready"));
  }
  ~ReadyChild() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
  }
  ReadyChild(const ReadyChild&) = delete;
  ReadyChild& operator=(const ReadyChild&) = delete;

  pid_t pid() const { return pid_; }
  bool ready() const { return ready_; }
  const std::string& ready_line() const { return ready_line_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  bool ready_ = false;
  std::string ready_line_;
};

}  // namespace trun::proc
