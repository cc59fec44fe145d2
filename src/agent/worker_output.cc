#include "agent/worker_output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>

#include "proc/pump.h"

namespace trun::agent {
namespace {

namespace fs = std::filesystem;

// How much of each stream of a worker is kept for its failure: the hint
// (FailureHint) and the last lines printed before the failure table.
constexpr size_t kTailBytes = 16384;

}  // namespace

std::string TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

Result<std::string> MakeUniqueDir(const std::string& parent, const std::string& prefix) {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789_";
  std::random_device rd;
  std::mt19937 gen(rd());
  std::uniform_int_distribution<size_t> pick(0, sizeof kChars - 2);
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string name = prefix;
    for (int i = 0; i < 8; ++i) name += kChars[pick(gen)];
    std::string path = parent + "/" + name;
    if (::mkdir(path.c_str(), 0700) == 0) return path;
    if (errno != EEXIST) return Status::FromErrno("cannot create " + path, errno);
  }
  return Status::IOError("cannot create a unique directory in " + parent);
}

Result<std::string> MakeRunLogDir(const launch::LaunchConfig& config) {
  if (config.log_dir == "/dev/null") return std::string();
  std::string base;
  if (config.log_dir) {
    base = *config.log_dir;
    std::error_code ec;
    fs::create_directories(base, ec);
    if (ec) {
      return Status::InvalidArgument(fmt::format(
          "--log-dir {}: cannot create it: {}; choose a writable directory", base, ec.message()));
    }
  } else {
    auto made = MakeUniqueDir(TempDir(), "torchelastic_");
    if (!made.ok()) return made.status();
    base = *made;
  }
  auto run_dir = MakeUniqueDir(base, config.rdzv_id + "_");
  if (!run_dir.ok()) {
    return Status::InvalidArgument(fmt::format("--log-dir {}: {}; choose a writable directory",
                                               base, run_dir.status().message()));
  }
  return *run_dir;
}

std::string ShortHostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

std::string SubstitutePrefix(std::string tmpl, const std::string& role, int local_rank, int rank,
                             const std::string& hostname) {
  const std::pair<std::string, std::string> vars[] = {{"role_name", role},
                                                      {"local_rank", std::to_string(local_rank)},
                                                      {"rank", std::to_string(rank)},
                                                      {"hostname", hostname}};
  for (const auto& [name, value] : vars) {
    for (const std::string& form : {"${" + name + "}", "$" + name}) {
      size_t pos = 0;
      while ((pos = tmpl.find(form, pos)) != std::string::npos) {
        // "$rank" must not eat the start of "$rank_x".
        size_t after = pos + form.size();
        if (form[1] != '{' && after < tmpl.size() &&
            (std::isalnum(static_cast<unsigned char>(tmpl[after])) || tmpl[after] == '_')) {
          pos = after;
          continue;
        }
        tmpl.replace(pos, form.size(), value);
        pos += value.size();
      }
    }
  }
  return tmpl;
}

Result<AttemptFiles> AttemptFiles::Open(const std::string& run_log_dir, int attempt,
                                        const launch::LaunchConfig& config) {
  AttemptFiles files;
  if (run_log_dir.empty()) return files;
  files.dir_ = fmt::format("{}/attempt_{}", run_log_dir, attempt);
  std::error_code ec;
  fs::remove_all(files.dir_, ec);
  fs::create_directories(files.dir_, ec);
  if (ec) return Status::IOError(fmt::format("cannot create {}: {}", files.dir_, ec.message()));
  // torch opens filtered_std{out,err}.log in the attempt's directory
  // whenever filters are given, also when no stream is teed.
  for (auto [filters, name, fd] :
       {std::tuple{&config.duplicate_stdout_filters, "filtered_stdout.log", &files.filtered_out_},
        std::tuple{&config.duplicate_stderr_filters, "filtered_stderr.log",
                   &files.filtered_err_}}) {
    if (filters->empty()) continue;
    std::string path = files.dir_ + "/" + name;
    *fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (*fd < 0) return Status::FromErrno("cannot create " + path, errno);
  }
  return files;
}

AttemptFiles::AttemptFiles(AttemptFiles&& other) noexcept { *this = std::move(other); }

AttemptFiles& AttemptFiles::operator=(AttemptFiles&& other) noexcept {
  if (this == &other) return *this;
  for (int fd : {filtered_out_, filtered_err_}) {
    if (fd >= 0) ::close(fd);
  }
  dir_ = std::move(other.dir_);
  filtered_out_ = std::exchange(other.filtered_out_, -1);
  filtered_err_ = std::exchange(other.filtered_err_, -1);
  return *this;
}

AttemptFiles::~AttemptFiles() {
  for (int fd : {filtered_out_, filtered_err_}) {
    if (fd >= 0) ::close(fd);
  }
}

Status WorkerOutput::SetUp(const launch::LaunchConfig& config, const AttemptFiles& files,
                           int local_rank, const std::string& prefix, int devnull,
                           const std::function<void(bool, size_t)>& on_bytes) {
  if (!files.dir().empty()) {
    std::string rank_dir = fmt::format("{}/{}", files.dir(), local_rank);
    if (::mkdir(rank_dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::FromErrno("cannot create " + rank_dir, errno);
    }
    error_file = rank_dir + "/error.json";
  }
  TRUN_RETURN_IF_ERROR(SetUpStream(config, files, local_rank, false, prefix, devnull, on_bytes));
  TRUN_RETURN_IF_ERROR(SetUpStream(config, files, local_rank, true, prefix, devnull, on_bytes));
  for (auto* s : {out.get(), err.get()}) {
    if (s->pump) s->pump->KeepTail(kTailBytes);
  }
  return Status::OK();
}

// Decides where one stream goes and sets up what that takes.
Status WorkerOutput::SetUpStream(const launch::LaunchConfig& config, const AttemptFiles& files,
                                 int local_rank, bool is_stderr, const std::string& prefix,
                                 int devnull, const std::function<void(bool, size_t)>& on_bytes) {
  auto has = is_stderr ? launch::HasErr : launch::HasOut;
  proc::PipeReader& s = is_stderr ? *err : *out;
  int& child_fd = is_stderr ? child_err : child_out;
  const bool tee = has(config.tee.ForRank(local_rank));
  const bool redirect = tee || has(config.redirects.ForRank(local_rank));
  const bool shown = !config.local_ranks_filter || config.local_ranks_filter->count(local_rank);
  child_fd = -1;
  s.on_bytes = [on_bytes, is_stderr](size_t n) { on_bytes(is_stderr, n); };
  const int console = is_stderr ? STDERR_FILENO : STDOUT_FILENO;
  // Straight to a terminal, as torchrun: the worker sees the terminal (its
  // colours, progress bars and isatty() stay), and its user sees its lines.
  // Anything else (a log file, a pipe, a scheduler's capture) gets the
  // worker's lines through a pump: whole, never interleaved with another
  // worker's, and the last of them kept for its failure report.
  if (!redirect && shown && ::isatty(console)) return Status::OK();

  int file_fd = -1;
  if (redirect && !files.dir().empty()) {
    std::string path =
        fmt::format("{}/{}/{}", files.dir(), local_rank, is_stderr ? "stderr.log" : "stdout.log");
    file_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (file_fd < 0) return Status::FromErrno("cannot create " + path, errno);
    owned_fds.push_back(file_fd);
    (is_stderr ? stderr_log : stdout_log) = path;
  }
  if (!shown || (redirect && !tee)) {
    // No console copy: the worker writes its file (or nothing) itself.
    child_fd = file_fd >= 0 ? file_fd : devnull;
    return Status::OK();
  }
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return Status::FromErrno("pipe", errno);
  // A bigger pipe means fewer wake-ups for chatty workers; best effort.
  ::fcntl(p[0], F_SETPIPE_SZ, 1 << 20);
  ::fcntl(p[0], F_SETFL, O_NONBLOCK);
  s.fd = p[0];
  // torch prefixes teed lines only.
  s.pump = std::make_unique<proc::LinePump>(tee ? prefix : "", console, file_fd);
  // torch duplicates the streams it tails: teed and shown.
  int dup_fd = is_stderr ? files.filtered_err() : files.filtered_out();
  if (tee && dup_fd >= 0) {
    s.pump->DuplicateMatching(
        dup_fd, is_stderr ? config.duplicate_stderr_filters : config.duplicate_stdout_filters);
  }
  child_fd = p[1];
  return Status::OK();
}

void WorkerOutput::CloseChildEnds(int devnull) {
  for (int fd : {child_out, child_err}) {
    if (fd >= 0 && fd != devnull &&
        std::find(owned_fds.begin(), owned_fds.end(), fd) == owned_fds.end()) {
      ::close(fd);
    }
  }
  child_out = child_err = -1;
}

std::string WorkerOutput::Tail(bool is_stderr) const {
  const proc::PipeReader& s = is_stderr ? *err : *out;
  if (s.pump) return s.pump->Tail();
  const std::string& log = is_stderr ? stderr_log : stdout_log;
  if (log.empty()) return "";
  std::ifstream in(log, std::ios::binary);
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (size <= 0) return "";
  std::streamoff from = std::max<std::streamoff>(0, size - static_cast<std::streamoff>(kTailBytes));
  in.seekg(from);
  std::string tail(static_cast<size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  tail.resize(static_cast<size_t>(in.gcount()));
  return tail;
}

void WorkerOutput::Drain() {
  proc::DrainPipe(*out);
  proc::DrainPipe(*err);
}

void WorkerOutput::Close() {
  Drain();
  proc::ClosePipe(*out);
  proc::ClosePipe(*err);
  for (int fd : owned_fds) ::close(fd);
  owned_fds.clear();
}

}  // namespace trun::agent
