#include "agent/job_stacks.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "agent/stacks.h"

namespace trun::agent {
namespace {

using namespace std::chrono_literals;
using ojson = nlohmann::ordered_json;

rendezvous::Round ThreeNodes(int group_rank) {
  rendezvous::Round r;
  r.number = 4;
  r.group_rank = group_rank;
  r.participants = {
      {"a", "10.0.0.1", 4, 0, 8081}, {"b", "fd00::2", 4, 0, 8082}, {"c", "10.0.0.3", 4, 0, 0}};
  return r;
}

TEST(JobStacks, PeersAreTheRoundsOtherNodesAtTheirRoundAddress) {
  auto peers = PeersOf(ThreeNodes(0));
  ASSERT_EQ(peers.size(), 2u);
  EXPECT_EQ(peers[0].node_rank, 1);
  EXPECT_EQ(peers[0].address, "[fd00::2]:8082");
  EXPECT_EQ(peers[1].node_rank, 2);
  EXPECT_EQ(peers[1].address, "");  // no health server
  peers = PeersOf(ThreeNodes(1));
  ASSERT_EQ(peers.size(), 2u);
  EXPECT_EQ(peers[0].address, "10.0.0.1:8081");
  EXPECT_EQ(peers[1].node_rank, 2);
  rendezvous::Round alone;
  alone.participants = {{"a", "10.0.0.1", 1, 0, 8081}};
  EXPECT_TRUE(PeersOf(alone).empty());
}

Result<nlohmann::json> Parsed(const char* text) { return nlohmann::json::parse(text); }

TEST(JobStacks, MergeOrdersByNodeRankAndNamesWhoCouldNotBeAsked) {
  ojson local = {{"hostname", "b-host"},
                 {"run_id", "job"},
                 {"node_rank", 1},
                 {"round", 4},
                 {"workers", ojson::array({{{"rank", 4}}})}};
  std::vector<PeerNode> peers = {{0, "10.0.0.1:8081"}, {2, ""}, {3, "10.0.0.4:8084"}};
  std::vector<Result<nlohmann::json>> answers;
  answers.push_back(Parsed(R"({"hostname": "a-host", "node_rank": 0, "workers": [{"rank": 0}]})"));
  answers.emplace_back(Status::Unavailable("its agent has no health server"));
  answers.push_back(Parsed("[]"));  // not a node's document
  ojson job = MergeJobStacks(local, 1, peers, std::move(answers));
  ASSERT_EQ(job.size(), 4u);
  EXPECT_EQ(job[0]["hostname"], "a-host");
  EXPECT_EQ(job[1]["hostname"], "b-host");
  EXPECT_EQ(job[2]["hostname"], nullptr);
  EXPECT_EQ(job[2]["node_rank"], 2);
  EXPECT_EQ(job[2]["round"], 4);
  EXPECT_EQ(job[2]["run_id"], "job");
  EXPECT_EQ(job[2]["address"], nullptr);
  EXPECT_EQ(job[2]["error"], "its agent has no health server");
  EXPECT_TRUE(job[2]["workers"].empty());
  EXPECT_EQ(job[3]["address"], "10.0.0.4:8084");
  EXPECT_NE(job[3]["error"].get<std::string>().find("other than a node's document"),
            std::string::npos);
  // Fewer answers than peers: the rest are named, not dropped.
  job = MergeJobStacks(local, 1, peers, {});
  ASSERT_EQ(job.size(), 4u);
  EXPECT_EQ(job[3]["error"], "not asked");
}

// A listening socket on loopback that a test thread serves by hand.
class Listener {
 public:
  Listener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(fd_, 8) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "cannot listen";
    }
    port_ = ntohs(a.sin_port);
  }
  ~Listener() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    if (server_.joinable()) server_.join();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Answers one request with `bytes` bytes of JSON-looking body, sent until
  // the client stops reading.
  void AnswerHuge(size_t bytes) {
    server_ = std::thread([this, bytes] {
      int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      char buf[4096];
      (void)!recv(c, buf, sizeof buf, 0);
      std::string head =
          "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(bytes) + "\r\n\r\n[";
      (void)!send(c, head.data(), head.size(), MSG_NOSIGNAL);
      std::string chunk(65536, ' ');
      for (size_t sent = 0; sent < bytes; sent += chunk.size()) {
        if (send(c, chunk.data(), chunk.size(), MSG_NOSIGNAL) <= 0) break;
      }
      close(c);
    });
  }

  // Answers one request with `body`.
  void Answer(std::string body) {
    server_ = std::thread([this, body = std::move(body)] {
      int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      char buf[4096];
      (void)!recv(c, buf, sizeof buf, 0);
      std::string reply =
          "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
      for (size_t sent = 0; sent < reply.size();) {
        ssize_t n = send(c, reply.data() + sent, reply.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      close(c);
    });
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread server_;
};

TEST(JobStacks, APeerIsReadUpToTheBoundAndASilentOneWithinTheBudget) {
  Listener huge, silent;  // silent accepts (the backlog) and never answers
  huge.AnswerHuge(size_t{64} << 20);
  const auto t0 = std::chrono::steady_clock::now();
  auto answers = FetchPeerStacks({{1, huge.address()}, {2, silent.address()}, {3, ""}}, "token", "",
                                 1500ms, size_t{1} << 20);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(answers.size(), 3u);
  ASSERT_FALSE(answers[0].ok());
  EXPECT_NE(answers[0].status().message().find("larger than 1024 KiB"), std::string::npos)
      << answers[0].status().message();
  ASSERT_FALSE(answers[1].ok());
  EXPECT_NE(answers[1].status().message().find(silent.address()), std::string::npos)
      << answers[1].status().message();
  ASSERT_FALSE(answers[2].ok());
  EXPECT_NE(answers[2].status().message().find("--health-check-port"), std::string::npos);
  // The budget, and not much more, on a loaded machine.
  EXPECT_LT(took, 5s);
}

TEST(JobStacks, AnAnswerNestedDeeperThanAnyAgentsIsRefusedNotRecursedInto) {
  // A million brackets would overflow the stack of whatever printed or
  // freed them (`trun stack --json` did, a reviewer found).
  Listener deep;
  deep.Answer(std::string(1'000'000, '[') + std::string(1'000'000, ']'));
  auto answer = FetchStacks(deep.address(), "", 5000ms, "", size_t{4} << 20);
  ASSERT_FALSE(answer.ok());
  EXPECT_NE(answer.status().message().find("nested over 16 levels"), std::string::npos)
      << answer.status().message();
  Listener fine;
  fine.Answer(R"({"workers": [{"rank": 0, "threads": [{"frames": [{"line": 1}]}]}]})");
  auto node = FetchStacks(fine.address(), "", 5000ms, "", size_t{4} << 20);
  ASSERT_TRUE(node.ok()) << node.status().message();
  EXPECT_TRUE(IsNodeDocument(*node));
}

}  // namespace
}  // namespace trun::agent
