#include "agent/events.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "proc/pump.h"

namespace trun::agent {

std::string EncodeEvent(std::string_view name, int64_t timestamp_ms,
                        const nlohmann::ordered_json& metadata) {
  nlohmann::ordered_json e;
  e["name"] = name;
  e["source"] = "AGENT";
  e["timestamp"] = timestamp_ms;
  e["metadata"] = metadata;
  return e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<EventSink> EventSink::Open(bool console, const std::string& path) {
  EventSink sink;
  sink.console_ = console;
  if (!path.empty()) {
    sink.file_fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (sink.file_fd_ < 0) {
      return Status::InvalidArgument(
          fmt::format("--event-log-file {}: cannot open it: {}; choose a writable path", path,
                      std::strerror(errno)));
    }
    sink.path_ = path;
  }
  return sink;
}

EventSink::~EventSink() {
  if (file_fd_ >= 0) ::close(file_fd_);
}

EventSink::EventSink(EventSink&& other) noexcept { *this = std::move(other); }

EventSink& EventSink::operator=(EventSink&& other) noexcept {
  if (this == &other) return *this;
  if (file_fd_ >= 0) ::close(file_fd_);
  console_ = other.console_;
  file_fd_ = other.file_fd_;
  path_ = std::move(other.path_);
  other.file_fd_ = -1;
  other.console_ = false;
  return *this;
}

void EventSink::Write(std::string_view line) {
  if (!enabled()) return;
  std::string text(line);
  text += '\n';
  if (console_) (void)proc::WriteAll(STDERR_FILENO, text);
  if (file_fd_ >= 0) {
    Status s = proc::WriteAll(file_fd_, text);
    if (!s.ok()) {
      log::Warning("--event-log-file {}: {}; no more events go there", path_, s.message());
      ::close(file_fd_);
      file_fd_ = -1;
    }
  }
}

}  // namespace trun::agent
