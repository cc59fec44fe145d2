#include "schedulers/log_files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <regex>
#include <thread>

namespace trun::schedulers {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(100);

// One file being read: its descriptor once it exists, and a partial last
// line waiting for its newline.
struct Reader {
  std::string path;
  int fd = -1;
  std::string pending;
  ~Reader() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<std::function<bool(std::string_view)>> FilterLines(
    const LogOptions& options, std::function<bool(std::string_view)> on_line) {
  if (options.regex.empty()) return on_line;
  std::regex filter;
  try {
    filter = std::regex(options.regex);
  } catch (const std::regex_error& e) {
    return Status::InvalidArgument(fmt::format("--regex '{}': {}", options.regex, e.what()));
  }
  return std::function<bool(std::string_view)>(
      [filter = std::move(filter), on_line = std::move(on_line)](std::string_view line) {
        return !std::regex_search(line.begin(), line.end(), filter) || on_line(line);
      });
}

Status FollowFiles(const std::vector<std::string>& paths, const LogOptions& options,
                   const std::function<bool()>& ended,
                   const std::function<bool(std::string_view)>& on_line) {
  auto filtered = FilterLines(options, on_line);
  if (!filtered.ok()) return filtered.status();
  const auto& emit = *filtered;
  std::vector<Reader> readers(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) readers[i].path = paths[i];
  char buf[65536];
  while (true) {
    // Asked before the files are read: once the app has ended, everything
    // its replicas wrote is in them.
    const bool done = !options.tail || ended();
    for (auto& r : readers) {
      if (r.fd < 0) r.fd = ::open(r.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (r.fd < 0) continue;
      ssize_t n;
      while ((n = ::read(r.fd, buf, sizeof buf)) > 0) {
        r.pending.append(buf, static_cast<size_t>(n));
        size_t start = 0, nl;
        while ((nl = r.pending.find('\n', start)) != std::string::npos) {
          if (!emit(std::string_view(r.pending).substr(start, nl - start))) return Status::OK();
          start = nl + 1;
        }
        r.pending.erase(0, start);
      }
      if (done && !r.pending.empty()) {
        if (!emit(r.pending)) return Status::OK();
        r.pending.clear();
      }
    }
    if (done) return Status::OK();
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace trun::schedulers
