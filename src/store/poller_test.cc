#include "store/poller.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <vector>

namespace trun::store {
namespace {

// A connected pair of sockets, closed at the end.
struct Pair {
  Pair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fd), 0); }
  ~Pair() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
  int fd[2] = {-1, -1};
};

class PollerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status s = poller_.Start(alive_, [this](uint64_t id, uint32_t events) {
      seen_[id] |= events;
      ++calls_[id];
    });
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // Runs the loop for a moment: long enough for every ready socket to be
  // reported (on a loaded machine too), and to be reported again.
  void Run() {
    io_.restart();
    io_.run_for(std::chrono::milliseconds(200));
  }

  asio::io_context io_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  Poller poller_{io_};
  std::map<uint64_t, uint32_t> seen_;
  std::map<uint64_t, int> calls_;
};

TEST_F(PollerTest, ReportsReadableSocketsByIdUntilTheyAreRead) {
  Pair a, b;
  ASSERT_TRUE(poller_.Add(a.fd[0], 7, EPOLLIN).ok());
  ASSERT_TRUE(poller_.Add(b.fd[0], 8, EPOLLIN).ok());
  Run();
  EXPECT_TRUE(seen_.empty());  // nothing to read yet
  ASSERT_EQ(write(a.fd[1], "x", 1), 1);
  Run();
  EXPECT_TRUE(seen_[7] & EPOLLIN);
  EXPECT_EQ(seen_.count(8), 0u);
  // Level-triggered: a byte left unread is reported again, round after
  // round, without a new one arriving.
  EXPECT_GT(calls_[7], 1);
  char c;
  ASSERT_EQ(read(a.fd[0], &c, 1), 1);
  calls_.clear();
  Run();
  EXPECT_EQ(calls_.count(7), 0u);
}

TEST_F(PollerTest, ChangeAsksForWritabilityAndRemoveStopsReports) {
  Pair a;
  ASSERT_TRUE(poller_.Add(a.fd[0], 1, 0).ok());
  Run();
  EXPECT_TRUE(seen_.empty());
  ASSERT_TRUE(poller_.Change(a.fd[0], 1, EPOLLOUT).ok());
  Run();
  EXPECT_TRUE(seen_[1] & EPOLLOUT);
  poller_.Remove(a.fd[0]);
  seen_.clear();
  Run();
  EXPECT_TRUE(seen_.empty());
  // A socket it does not watch cannot be changed.
  EXPECT_FALSE(poller_.Change(a.fd[0], 1, EPOLLIN).ok());
}

TEST_F(PollerTest, NothingRunsOnceItsOwnerIsGoneOrItIsClosed) {
  Pair a;
  ASSERT_TRUE(poller_.Add(a.fd[0], 3, EPOLLIN).ok());
  ASSERT_EQ(write(a.fd[1], "x", 1), 1);
  alive_.reset();
  Run();
  EXPECT_TRUE(seen_.empty());
  poller_.Close();
  Run();
  EXPECT_TRUE(seen_.empty());
}

}  // namespace
}  // namespace trun::store
