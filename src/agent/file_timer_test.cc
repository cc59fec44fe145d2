#include "agent/file_timer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>

namespace trun::agent {
namespace {

using namespace std::chrono_literals;

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// ---- the line ---------------------------------------------------------------

TEST(TimerRequestTest, ParsesTorchsClientLine) {
  // FileTimerRequest.to_json() of torch 1.13, byte for byte.
  auto r = ParseTimerRequest(
      R"({"version": 1, "pid": 4242, "scope_id": "train.py#17", "expiration_time": 1795400000.25, "signal": 9})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->pid, 4242);
  EXPECT_EQ(r->scope_id, "train.py#17");
  EXPECT_EQ(r->expiration_time, 1795400000.25);
  EXPECT_EQ(r->signal, 9);
  // A release, without a version, with an integer time.
  auto rel = ParseTimerRequest(R"({"pid": 1, "scope_id": "", "expiration_time": -1, "signal": 0})");
  ASSERT_TRUE(rel.ok()) << rel.status().ToString();
  EXPECT_LT(rel->expiration_time, 0);
  // torch: a negative signal kills nothing.
  auto neg =
      ParseTimerRequest(R"({"pid": 1, "scope_id": "s", "expiration_time": 5, "signal": -3})");
  ASSERT_TRUE(neg.ok());
  EXPECT_EQ(neg->signal, 0);
}

TEST(TimerRequestTest, NamesWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "not a JSON object"},
      {"[1, 2]", "not a JSON object"},
      {"{\"pid\": 1", "not a JSON object"},
      {R"({"version": 2, "pid": 1, "scope_id": "s", "expiration_time": 1, "signal": 9})",
       "version"},
      {R"({"scope_id": "s", "expiration_time": 1, "signal": 9})", "pid"},
      {R"({"pid": "1", "scope_id": "s", "expiration_time": 1, "signal": 9})", "pid"},
      {R"({"pid": 0, "scope_id": "s", "expiration_time": 1, "signal": 9})", "pid"},
      {R"({"pid": 99999999999, "scope_id": "s", "expiration_time": 1, "signal": 9})", "pid"},
      {R"({"pid": 1, "scope_id": 5, "expiration_time": 1, "signal": 9})", "scope_id"},
      {R"({"pid": 1, "scope_id": "s", "expiration_time": "soon", "signal": 9})", "expiration_time"},
      {R"({"pid": 1, "scope_id": "s", "expiration_time": 1, "signal": 999})", "signal"},
      {R"({"pid": 1, "scope_id": "s", "expiration_time": 1, "signal": 9.5})", "signal"},
      {R"({"pid": 1, "scope_id": "s", "expiration_time": 1})", "signal"},
  };
  for (const auto& [line, field] : cases) {
    auto r = ParseTimerRequest(line);
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_NE(r.status().message().find(field), std::string::npos)
        << line << ": " << r.status().message();
  }
  std::string long_scope = R"({"pid": 1, "scope_id": ")" + std::string(2000, 'x') +
                           R"(", "expiration_time": 1, "signal": 9})";
  EXPECT_FALSE(ParseTimerRequest(long_scope).ok());
}

// ---- the table: torch's rules --------------------------------------------

TimerRequest T(pid_t pid, std::string scope, double at, int sig = 9) {
  return {pid, std::move(scope), at, sig};
}

TEST(TimerTableTest, SetReplaceRelease) {
  TimerTable t;
  EXPECT_EQ(t.Apply(T(1, "a", 10)), TimerTable::Applied::kSet);
  EXPECT_EQ(t.Apply(T(1, "b", 5)), TimerTable::Applied::kSet);
  EXPECT_EQ(t.Earliest(), 5);
  EXPECT_EQ(t.Apply(T(1, "b", 20)), TimerTable::Applied::kSet);  // replaced
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.Earliest(), 10);
  EXPECT_EQ(t.Apply(T(1, "a", -1)), TimerTable::Applied::kReleased);
  EXPECT_EQ(t.Apply(T(1, "a", -1)), TimerTable::Applied::kNotHeld);
  EXPECT_EQ(t.Earliest(), 20);
  EXPECT_TRUE(t.TakeExpired(19).empty());
}

TEST(TimerTableTest, ExpiryActsOncePerPidWithTheEarliestSignal) {
  TimerTable t;
  t.Apply(T(1, "no-signal", 1, 0));
  t.Apply(T(1, "term", 2, SIGTERM));
  t.Apply(T(1, "kill", 3, SIGKILL));
  t.Apply(T(1, "later", 100));
  t.Apply(T(2, "quiet", 1, 0));
  t.Apply(T(3, "future", 50));
  auto expired = t.TakeExpired(10);
  ASSERT_EQ(expired.size(), 2u);
  EXPECT_EQ(expired[0].pid, 1);
  EXPECT_EQ(expired[0].scope_id, "term");
  EXPECT_EQ(expired[0].signal, SIGTERM);
  EXPECT_EQ(expired[1].pid, 2);
  EXPECT_EQ(expired[1].signal, 0);
  // Every timer of an acted-on pid is gone, the others stay.
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.Earliest(), 50);
}

TEST(TimerTableTest, IsBounded) {
  TimerTable t(2);
  EXPECT_EQ(t.Apply(T(1, "a", 1)), TimerTable::Applied::kSet);
  EXPECT_EQ(t.Apply(T(1, "b", 1)), TimerTable::Applied::kSet);
  EXPECT_EQ(t.Apply(T(1, "c", 1)), TimerTable::Applied::kFull);
  EXPECT_EQ(t.Apply(T(1, "a", 3)), TimerTable::Applied::kSet);  // replacing is fine
  t.ClearPid(1);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_FALSE(t.Earliest());
}

// ---- the server, over a real FIFO -----------------------------------------

class FileTimerServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("file_timer_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "timer").string();
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Start() {
    auto s = FileTimerServer::Start(io_, path_,
                                    {[this](pid_t pid) { return accepted_.count(pid) > 0; },
                                     [this](const TimerRequest& t, double at, int error) {
                                       fired_.push_back(t);
                                       fired_at_.push_back(at);
                                       errors_.push_back(error);
                                     }});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
  }

  // As torch's FileTimerClient: a non-blocking open, one write, close.
  void Send(const std::string& bytes) {
    int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(fd);
  }
  static std::string Line(pid_t pid, const std::string& scope, double at, int sig) {
    return fmt::format(
        R"({{"version": 1, "pid": {}, "scope_id": "{}", "expiration_time": {:.6f}, "signal": {}}})"
        "\n",
        pid, scope, at, sig);
  }
  void RunUntil(const std::function<bool()>& done) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!done() && std::chrono::steady_clock::now() < deadline) io_.run_for(10ms);
  }

  static pid_t SpawnSleeper() {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::execlp("sleep", "sleep", "30", nullptr);
      ::_exit(127);
    }
    return pid;
  }

  asio::io_context io_;
  std::filesystem::path dir_;
  std::string path_;
  std::set<pid_t> accepted_;
  std::unique_ptr<FileTimerServer> server_;
  std::vector<TimerRequest> fired_;
  std::vector<double> fired_at_;
  std::vector<int> errors_;
};

TEST_F(FileTimerServerTest, KillsAtTheDeadlineAndSurvivesGarbage) {
  Start();
  struct stat st;
  ASSERT_EQ(::lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  pid_t child = SpawnSleeper();
  accepted_.insert(child);
  Send("this is not json\n");
  Send(std::string(20000, '{') + "\n");
  Send("{\"pid\": 1}\n\n");
  Send(Line(1, "someone else", 0, SIGKILL));  // not accepted: never signalled
  const double deadline = WallNow() + 0.3;
  // Two requests in one write, the first split across writes.
  std::string two = Line(child, "step", deadline, SIGKILL) + Line(child, "other", deadline + 60, 9);
  Send(two.substr(0, 10));
  Send(two.substr(10));
  RunUntil([&] { return !fired_.empty(); });

  ASSERT_EQ(fired_.size(), 1u);
  EXPECT_EQ(fired_[0].pid, child);
  EXPECT_EQ(fired_[0].scope_id, "step");
  EXPECT_EQ(errors_[0], 0);
  EXPECT_GE(fired_at_[0], deadline);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);

  auto s = server_->stats();
  EXPECT_EQ(s.malformed, 3u);
  EXPECT_EQ(s.rejected, 1u);
  EXPECT_EQ(s.set, 2u);
  EXPECT_EQ(s.expired, 1u);
  EXPECT_EQ(s.active, 0u);  // the pid's other timer went with it
}

TEST_F(FileTimerServerTest, ReleasedTimersNeverFire) {
  Start();
  pid_t child = SpawnSleeper();
  accepted_.insert(child);
  Send(Line(child, "a", WallNow() + 0.2, SIGKILL));
  Send(Line(child, "a", -1, 0));
  Send(Line(child, "b", WallNow() + 0.3, 0));  // expires without a signal
  RunUntil([&] { return !fired_.empty(); });
  ASSERT_EQ(fired_.size(), 1u);
  EXPECT_EQ(fired_[0].scope_id, "b");
  EXPECT_EQ(fired_[0].signal, 0);
  EXPECT_EQ(::waitpid(child, nullptr, WNOHANG), 0);  // still running
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(server_->stats().released, 1u);
}

TEST_F(FileTimerServerTest, ReplacesAnOldFifoButNotAFile) {
  ASSERT_EQ(::mkfifo(path_.c_str(), 0666), 0);
  Start();
  server_.reset();
  EXPECT_FALSE(std::filesystem::exists(path_));  // removed on the way out

  std::ofstream(path_) << "precious";
  auto s = FileTimerServer::Start(io_, path_, {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("not a FIFO"), std::string::npos);
}

}  // namespace
}  // namespace trun::agent
