#include "failure/failure.h"

#include <fcntl.h>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <tuple>

#include "common/files.h"
#include "proc/pump.h"
#include "proc/signals.h"

namespace trun::failure {
namespace {

std::string ReplaceAll(std::string s, std::string_view from, std::string_view to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

// Truncates and writes `path` where it is (no rename), as Python's
// open(path, "w") does; false when that fails too.
bool WriteInPlace(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool written = proc::WriteAll(fd, text).ok();
  return ::close(fd) == 0 && written;
}

// torch's timestamp_isoformat: local time, "YYYY-MM-DD_HH:MM:SS".
std::string IsoTime(int64_t ts) {
  std::time_t t = static_cast<std::time_t>(ts);
  std::tm tm{};
  localtime_r(&t, &tm);
  return fmt::format("{:%Y-%m-%d_%H:%M:%S}", tm);
}

}  // namespace

std::string FailureHint(std::string_view text) {
  if (text.find("use_libuv was requested but PyTorch was built without libuv support") !=
      std::string_view::npos) {
    return "this torch was built without libuv: set USE_LIBUV=0 in the environment (env:// and "
           "torchrun-style stores) or pass use_libuv=False to TCPStore";
  }
  return "";
}

Result<ErrorFile> ReadErrorFile(const std::string& path) {
  struct stat st;
  if (path.empty() || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Status::NotFound("no error file at " + path);
  }
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  auto file = ParseErrorFile(std::move(*text), "error file " + path);
  if (file.ok()) file->written_ns = st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec;
  return file;
}

Result<ErrorFile> ParseErrorFile(std::string text, std::string_view what) {
  ErrorFile f;
  f.json = std::move(text);
  auto timestamp = [](const nlohmann::json& ts) -> int64_t {
    return ts.is_string() ? std::stoll(ts.get<std::string>()) : ts.get<int64_t>();
  };
  try {
    auto j = nlohmann::json::parse(f.json);
    const auto& msg = j.at("message");
    if (msg.is_string()) {
      f.message = msg.get<std::string>();
      f.legacy = true;
      if (j.contains("timestamp")) f.timestamp = timestamp(j["timestamp"]);
    } else {
      const auto& extra = msg.value("extraInfo", nlohmann::json::object());
      f.message = extra.contains("py_callstack") ? extra["py_callstack"].get<std::string>()
                                                 : msg.value("message", std::string(kNotAvailable));
      if (extra.contains("timestamp")) f.timestamp = timestamp(extra["timestamp"]);
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument(fmt::format("unreadable {}: {}", what, e.what()));
  }
  return f;
}

WorkerFailure DescribeFailure(int local_rank, int global_rank, pid_t pid, int exitcode,
                              const std::string& error_file, int64_t detected_at,
                              std::string_view stderr_tail) {
  WorkerFailure f;
  f.local_rank = local_rank;
  f.global_rank = global_rank;
  f.pid = pid;
  f.exitcode = exitcode;
  f.timestamp = detected_at;
  auto file = ReadErrorFile(error_file);
  if (file.ok()) {
    // The table indents a traceback's lines under its row, as torch does.
    f.message = file->legacy ? file->message : ReplaceAll(file->message, "\n", "\n  ");
    f.timestamp = file->timestamp.value_or(detected_at);
    f.written_ns = file->written_ns;
    f.error_file = error_file;
    f.error_json = std::move(file->json);
  } else {
    // No file: the record the agent builds of it is dated now, when the exit
    // was seen, not when the agent writes it (after stopping the others).
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    f.written_ns = now.tv_sec * 1'000'000'000LL + now.tv_nsec;
    if (file.status().code() != StatusCode::kNotFound) {
      // A torn or foreign file is reported, not fatal: the exit code still
      // tells the story.
      f.message = "(" + file.status().message() + ")";
    }
  }
  if (f.message.empty()) {
    f.message =
        exitcode < 0
            ? fmt::format("Signal {} ({}) received by PID {}", -exitcode,
                          proc::SignalName(-exitcode), pid)
            : "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";
  }
  f.hint = FailureHint(f.error_json);
  if (f.hint.empty()) f.hint = FailureHint(stderr_tail);
  return f;
}

namespace {

// The last `n` lines of `tail`, each as shown on a terminal: after its last
// carriage return, without its end.
std::vector<std::string_view> LastLines(std::string_view tail, size_t n) {
  std::vector<std::string_view> lines;
  while (!tail.empty() && lines.size() < n) {
    if (tail.back() == '\n') tail.remove_suffix(1);
    size_t start = tail.rfind('\n');
    std::string_view line = start == std::string_view::npos ? tail : tail.substr(start + 1);
    tail.remove_suffix(line.size());
    while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (size_t cr = line.rfind('\r'); cr != std::string_view::npos) line.remove_prefix(cr + 1);
    lines.push_back(line);
  }
  std::reverse(lines.begin(), lines.end());
  return lines;
}

}  // namespace

std::string FormatLastLines(const WorkerFailure& f, std::string_view out_tail,
                            std::string_view err_tail, size_t n) {
  auto out = LastLines(out_tail, n);
  auto err = LastLines(err_tail, n);
  if (out.empty() && err.empty()) return "";
  std::string text = fmt::format("last lines of rank {} (local_rank {}, pid {}):", f.global_rank,
                                 f.local_rank, f.pid);
  for (auto [name, lines] : {std::pair{"stdout", &out}, std::pair{"stderr", &err}}) {
    for (auto line : *lines) text += fmt::format("\n  {} | {}", name, line);
  }
  return text;
}

size_t RootCause(std::span<const FailureKey> failures) {
  auto key = [](const FailureKey& f) {
    // An unknown time (0) sorts after every known one.
    const int64_t written = f.written_ns != 0 ? f.written_ns : INT64_MAX;
    return std::tuple(f.stopped, f.timestamp, !f.has_error_file, written, f.rank);
  };
  size_t best = 0;
  for (size_t i = 1; i < failures.size(); ++i) {
    if (key(failures[i]) < key(failures[best])) best = i;
  }
  return best;
}

size_t RootCause(const std::vector<WorkerFailure>& failures) {
  std::vector<FailureKey> keys;
  keys.reserve(failures.size());
  for (const auto& f : failures) {
    // Without the files' times: among one agent's workers, torchrun's rule
    // (the lowest rank within a second) names the root cause.
    keys.push_back({f.timestamp, !f.error_json.empty(), f.global_rank, f.stopped});
  }
  return RootCause(keys);
}

void AttemptFailures::Add(WorkerFailure failure) {
  failures_.push_back(std::move(failure));
  root_ = RootCause(failures_);
}

void AttemptFailures::Clear() {
  failures_.clear();
  root_ = 0;
}

std::string FormatFailureTable(const std::string& name, const std::vector<WorkerFailure>& failures,
                               const std::string& hostname) {
  std::string title = name + " FAILED";
  size_t root = RootCause(failures);
  std::string root_fmt;
  std::vector<std::string> others;
  size_t width = title.size();
  for (size_t idx = 0; idx < failures.size(); ++idx) {
    const auto& f = failures[idx];
    std::string s = fmt::format(
        "[{}]:\n  time      : {}\n  host      : {}\n  rank      : {} (local_rank: {})\n"
        "  exitcode  : {} (pid: {}) {}\n  error_file: {}\n  traceback : {}",
        idx, IsoTime(f.timestamp), hostname, f.global_rank, f.local_rank, f.exitcode, f.pid,
        f.exitcode < 0 ? fmt::format(" ({})", proc::SignalName(-f.exitcode)) : "", f.error_file,
        f.message);
    if (!f.hint.empty()) s += "\n  hint      : " + f.hint;
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find('\n', start);
      if (end == std::string::npos) end = s.size();
      width = std::max(width, end - start);
      start = end + 1;
    }
    if (idx == root) {
      root_fmt = std::move(s);
    } else {
      others.push_back(std::move(s));
    }
  }
  width = std::min<size_t>(width, 60);
  std::string other_fmt;
  for (size_t i = 0; i < others.size(); ++i) other_fmt += (i ? "\n" : "") + others[i];
  if (others.empty()) other_fmt = "  <NO_OTHER_FAILURES>";
  std::string border(width, '='), section(width, '-');
  return fmt::format(
      "\n{}\n{}\n{}\nFailures:\n{}\n{}\nRoot Cause (first observed failure):\n{}\n{}", border,
      title, section, other_fmt, section, root_fmt, border);
}

std::string FailureReportJson(const std::string& name, const AttemptFailures& failures,
                              const std::string& hostname, int64_t restarts) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& f : failures.all()) {
    list.push_back({{"rank", f.global_rank},
                    {"local_rank", f.local_rank},
                    {"pid", f.pid},
                    {"exitcode", f.exitcode},
                    {"signal", f.exitcode < 0 ? nlohmann::json(proc::SignalName(-f.exitcode))
                                              : nlohmann::json(nullptr)},
                    {"host", hostname},
                    {"time", f.timestamp},
                    {"error_file", f.error_file == kNotAvailable ? nlohmann::json(nullptr)
                                                                 : nlohmann::json(f.error_file)},
                    {"stopped", f.stopped},
                    {"message", f.message}});
  }
  return nlohmann::json{{"name", name},
                        {"host", hostname},
                        {"restarts", restarts},
                        {"root_cause", failures.root_index()},
                        {"failures", std::move(list)}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status WriteFailureReport(const std::string& where, const std::string& report) {
  if (where != "-") {
    Status s = WriteFileAtomic(where, report + "\n");
    if (!s.ok()) return Status::IOError("cannot write the failure report: " + s.message());
    return Status::OK();
  }
  // One write, so that no other line of trun's lands inside it.
  const std::string line = std::string(kFailureReportMark) + report + "\n";
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::FromErrno("cannot write the failure report to stderr", errno);
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

Status WriteAgentErrorFile(const std::string& path, const WorkerFailure& root) {
  nlohmann::json j;
  bool from_worker = false;
  if (!root.error_json.empty()) {
    try {
      j = nlohmann::json::parse(root.error_json);
      from_worker = true;
    } catch (const std::exception&) {
    }
  }
  if (from_worker) {
    // torch adds the code only to the structured form, and only when non-zero.
    if (root.exitcode != 0 && j.contains("message") && j["message"].is_object()) {
      j["message"]["errorCode"] = root.exitcode;
    }
    if (!root.hint.empty() && j.contains("message")) {
      auto& m = j["message"];
      if (m.is_string()) {
        m = m.get<std::string>() + "\nhint: " + root.hint;
      } else if (m.is_object() && m.contains("message") && m["message"].is_string()) {
        m["message"] = m["message"].get<std::string>() + "\nhint: " + root.hint;
      }
    }
  } else {
    std::string message = root.message;
    if (!root.hint.empty()) message += "\nhint: " + root.hint;
    j = {{"message",
          {{"message", message},
           {"errorCode", root.exitcode},
           {"extraInfo",
            {{"py_callstack", root.message},
             {"timestamp", std::to_string(root.timestamp)},
             {"rank", root.global_rank},
             {"pid", root.pid}}}}}};
  }
  const std::string text = j.dump();
  Status s = WriteFileAtomic(path, text);
  // A file that cannot be replaced by a rename is written in place, as
  // torch's @record writes: Kubernetes' /dev/termination-log is a file
  // mounted into the container (the rename fails with EBUSY).
  if (!s.ok() && !WriteInPlace(path, text)) {
    return Status::IOError("cannot write error file " + path + ": " + s.message());
  }
  if (root.written_ns != 0) {
    // The copy is dated when the worker wrote the original (or when the
    // exit was seen): the agent may write it seconds later, after stopping
    // the other workers, and the scheduler that compares agents' files
    // orders them by this time. Where a file system refuses, the order
    // falls back to the rule's next key; the file itself is written.
    const timespec times[2] = {
        {.tv_sec = 0, .tv_nsec = UTIME_OMIT},
        {.tv_sec = root.written_ns / 1'000'000'000, .tv_nsec = root.written_ns % 1'000'000'000}};
    (void)::utimensat(AT_FDCWD, path.c_str(), times, 0);
  }
  return Status::OK();
}

}  // namespace trun::failure
