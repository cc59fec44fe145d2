#include "rendezvous/etcd_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <thread>
#include <vector>

#include "common/source_dir_for_tests.h"

namespace trun::rendezvous {
namespace {

using namespace std::chrono_literals;

TEST(EtcdEndpointsTest, DefaultsSchemeAndPort) {
  auto e = EtcdEndpoints("localhost, 10.0.0.1:2380,https://h:1/", "http");
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(*e, (std::vector<std::string>{"http://localhost:2379", "http://10.0.0.1:2380",
                                          "https://h:1"}));
  EXPECT_EQ(*EtcdEndpoints("[::1]", "https"), std::vector<std::string>{"https://[::1]:2379"});
  EXPECT_EQ(*EtcdEndpoints("[::1]:7", "http"), std::vector<std::string>{"http://[::1]:7"});
}

TEST(EtcdEndpointsTest, NamesWhatIsWrong) {
  EXPECT_NE(EtcdEndpoints("", "http").status().message().find("needs --rdzv-endpoint"),
            std::string::npos);
  EXPECT_NE(EtcdEndpoints("h:99999", "http").status().message().find("'99999' is not a port"),
            std::string::npos);
  EXPECT_NE(EtcdEndpoints(":2379", "http").status().message().find("no host"), std::string::npos);
  EXPECT_NE(EtcdEndpoints("unix://x", "http").status().message().find("http:// or https://"),
            std::string::npos);
  EXPECT_EQ(EtcdEndpoints("h", "ftp").status().code(), StatusCode::kInvalidArgument);
}

TEST(EtcdEndpointsTest, PrefixEndIncrementsTheLastByte) {
  EXPECT_EQ(PrefixEnd("/a/"), "/a0");
  EXPECT_EQ(PrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixEnd(""), std::string(1, '\0'));
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string EtcdServerTool() { return (SourceDirForTests() / "tools" / "etcd-server").string(); }

// A real etcd (tools/etcd-server), once for the suite.
class EtcdClientTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("trun-etcd-test-" + std::to_string(getpid()));
    int port = FreePort();
    std::string cmd = EtcdServerTool() + " up " + dir_.string() + " " + std::to_string(port) +
                      " 127.0.0.1 " + std::to_string(FreePort()) + " >/dev/null";
    if (std::system(cmd.c_str()) == 0) endpoint_ = "http://127.0.0.1:" + std::to_string(port);
  }
  static void TearDownTestSuite() {
    std::string cmd = EtcdServerTool() + " down " + dir_.string();
    (void)std::system(cmd.c_str());
    std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    if (endpoint_.empty()) GTEST_SKIP() << "etcd could not be started";
  }
  EtcdOptions Options() const {
    EtcdOptions o;
    o.endpoints = {endpoint_};
    return o;
  }

  static int EtcdPort() { return std::stoi(endpoint_.substr(endpoint_.rfind(':') + 1)); }

  static inline std::filesystem::path dir_;
  static inline std::string endpoint_;
};

TEST_F(EtcdClientTest, PutGetAndCreateIfAbsent) {
  EtcdClient c(Options());
  auto rev = c.Put("/t/a", std::string("bin\0ary", 7));
  ASSERT_TRUE(rev.ok()) << rev.status().message();
  auto snap = c.Get({{"/t/a", ""}, {"/t/missing", ""}});
  ASSERT_TRUE(snap.ok());
  auto local = c.Get({{"/t/a", ""}}, /*serializable=*/true);
  ASSERT_TRUE(local.ok()) << local.status().message();
  ASSERT_EQ(local->ranges[0].size(), 1u);
  EXPECT_EQ(local->ranges[0][0].value, std::string("bin\0ary", 7));
  ASSERT_EQ(snap->ranges[0].size(), 1u);
  EXPECT_EQ(snap->ranges[0][0].value, std::string("bin\0ary", 7));
  EXPECT_TRUE(snap->ranges[1].empty());
  EXPECT_GE(snap->revision, *rev);
  auto first = c.PutIfAbsent("/t/once", "me");
  auto second = c.PutIfAbsent("/t/once", "you");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(first->created);
  EXPECT_FALSE(second->created);
  EXPECT_EQ(second->kv.value, "me");
  EXPECT_EQ(second->kv.create_revision, first->kv.create_revision);
  ASSERT_TRUE(c.DeletePrefix("/t/").ok());
  EXPECT_TRUE(c.Get({{"/t/", PrefixEnd("/t/")}})->ranges[0].empty());
}

TEST_F(EtcdClientTest, PutManyIsOneTransaction) {
  EtcdClient c(Options());
  std::vector<std::pair<std::string, std::string>> kvs;
  for (size_t i = 0; i < EtcdClient::kMaxOps; ++i) kvs.emplace_back("/m/" + std::to_string(i), "v");
  ASSERT_TRUE(c.PutMany(kvs).ok());
  auto snap = c.Get({{"/m/", PrefixEnd("/m/")}});
  ASSERT_TRUE(snap.ok());
  ASSERT_EQ(snap->ranges[0].size(), EtcdClient::kMaxOps);
  EXPECT_EQ(snap->ranges[0][0].mod_revision, snap->ranges[0].back().mod_revision);
  kvs.emplace_back("/m/x", "v");
  EXPECT_EQ(c.PutMany(kvs).code(), StatusCode::kInvalidArgument);
}

TEST_F(EtcdClientTest, LeasedKeysGoWithTheirLease) {
  EtcdClient c(Options());
  auto lease = c.GrantLease(5s);
  ASSERT_TRUE(lease.ok()) << lease.status().message();
  ASSERT_TRUE(c.Put("/l/k", "v", *lease).ok());
  EXPECT_TRUE(c.KeepAlive(*lease).ok());
  ASSERT_TRUE(c.Revoke(*lease).ok());
  EXPECT_TRUE(c.Get({{"/l/k", ""}})->ranges[0].empty());
  EXPECT_EQ(c.KeepAlive(*lease).code(), StatusCode::kNotFound);
  EXPECT_TRUE(c.Revoke(*lease).ok());  // revoking twice is no error
  EXPECT_FALSE(c.Put("/l/k", "v", *lease).ok());
}

TEST_F(EtcdClientTest, ALeasesTimeToLive) {
  EtcdClient c(Options());
  auto lease = c.GrantLease(5s);
  ASSERT_TRUE(lease.ok()) << lease.status().message();
  auto ttl = c.LeaseTimeToLive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status().message();
  ASSERT_TRUE(ttl->has_value());
  EXPECT_GE(**ttl, 1);
  EXPECT_LE(**ttl, 5);
  ASSERT_TRUE(c.Revoke(*lease).ok());
  for (int64_t id : {*lease, int64_t{12345}}) {  // revoked; never granted
    auto gone = c.LeaseTimeToLive(id);
    ASSERT_TRUE(gone.ok()) << gone.status().message();
    EXPECT_FALSE(gone->has_value()) << id;
  }
}

TEST_F(EtcdClientTest, WatchSeesPutsAndDeletesInOrder) {
  EtcdClient c(Options());
  auto start = c.Put("/w/x", "0");
  ASSERT_TRUE(start.ok());
  std::thread writer([&] {
    EtcdClient w(Options());
    std::this_thread::sleep_for(50ms);
    (void)w.Put("/w/y", "1");
    (void)w.DeletePrefix("/w/y");
    (void)w.Put("/w/z", "2");
  });
  std::vector<std::string> seen;
  Status s = c.Watch({{"/w/y", ""}, {"/w/z", ""}}, *start + 1, [&](const WatchEvent& e) {
    seen.push_back((e.deleted ? "-" : "+") + e.kv.key);
    return e.kv.key != "/w/z";
  });
  writer.join();
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(seen, (std::vector<std::string>{"+/w/y", "-/w/y", "+/w/z"}));
}

TEST_F(EtcdClientTest, AnOpenWatchIsReadAtTheCallersPaceAndFailsOver) {
  EtcdOptions o = Options();
  o.endpoints.insert(o.endpoints.begin(), "http://127.0.0.1:" + std::to_string(FreePort()));
  EtcdClient w(o);
  EtcdClient c(Options());
  auto start = c.Put("/s/before", "0");
  ASSERT_TRUE(start.ok());
  ASSERT_TRUE(w.OpenWatch({{"/s/", PrefixEnd("/s/")}}, *start + 1).ok());
  ASSERT_TRUE(c.Put("/s/a", "1").ok());
  ASSERT_TRUE(c.Put("/s/b", "2").ok());
  auto a = w.NextEvent();
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->kv.key, "/s/a");
  EXPECT_EQ(w.Endpoint(), endpoint_);
  // Its requests wait until the watch is closed.
  EXPECT_EQ(w.Put("/s/no", "x").status().code(), StatusCode::kInternal);
  ASSERT_TRUE(c.DeletePrefix("/s/a").ok());
  auto b = w.NextEvent();
  auto gone = w.NextEvent();
  ASSERT_TRUE(b.ok() && gone.ok());
  EXPECT_EQ(b->kv.value, "2");
  EXPECT_TRUE(gone->deleted);
  EXPECT_EQ(gone->kv.key, "/s/a");
  w.CloseWatch();
  EXPECT_TRUE(w.Put("/s/yes", "x").ok());
  EXPECT_EQ(w.NextEvent().status().code(), StatusCode::kInternal);
}

// A wait for the next event may give up at a time, the watch still open:
// what comes later is the next wait's.
TEST_F(EtcdClientTest, AWatchWaitedOnUntilATimeStaysOpen) {
  EtcdClient w(Options());
  EtcdClient c(Options());
  auto start = c.Put("/u/before", "0");
  ASSERT_TRUE(start.ok());
  ASSERT_TRUE(w.OpenWatch({{"/u/", PrefixEnd("/u/")}}, *start + 1).ok());
  auto t0 = std::chrono::steady_clock::now();
  auto none = w.NextEventBefore(t0 + 500ms);
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_FALSE(none->has_value());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 500ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 900ms);
  ASSERT_TRUE(c.Put("/u/a", "1").ok());
  auto a = w.NextEventBefore(std::chrono::steady_clock::now() + 5s);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(a->has_value());
  EXPECT_EQ((*a)->kv.key, "/u/a");
}

// A loopback proxy to etcd that does to the first `lossy` watches it
// forwards what etcd's JSON gateway does now and then: it lets only the
// first create request of the body through (the others become spaces, which
// JSON skips, so the length stays right). Everything else goes through
// unchanged.
class WatchesLoseTheirLaterWatchers {
 public:
  WatchesLoseTheirLaterWatchers(int etcd_port, int lossy) : etcd_port_(etcd_port), lossy_(lossy) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = Loopback(0);
    ::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(listener_, 16);
    socklen_t len = sizeof(a);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    accepting_ = std::thread([this] { Accept(); });
  }
  // The accepting thread ends first: fds_ and threads_ change no more.
  ~WatchesLoseTheirLaterWatchers() {
    ::shutdown(listener_, SHUT_RDWR);
    accepting_.join();
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    for (auto& t : threads_) t.join();
    ::close(listener_);
    for (int fd : fds_) ::close(fd);
  }
  int port() const { return port_; }
  int watches() const { return watches_; }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    return a;
  }
  // Connections are accepted (and their threads started) on this thread
  // only, so fds_ and threads_ change nowhere else.
  void Accept() {
    while (true) {
      int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a = Loopback(etcd_port_);
      if (::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        ::close(client);
        ::close(server);
        continue;
      }
      fds_.push_back(client);
      fds_.push_back(server);
      threads_.emplace_back([this, client, server] { Forward(client, server, true); });
      threads_.emplace_back([this, client, server] { Forward(server, client, false); });
    }
  }
  void Forward(int from, int to, bool requests) {
    std::string buf;
    char chunk[65536];
    for (ssize_t n; (n = ::read(from, chunk, sizeof chunk)) > 0;) {
      buf.append(chunk, static_cast<size_t>(n));
      if (requests && buf.starts_with("POST /v3/watch") && !Mangle(buf)) continue;
      if (::send(to, buf.data(), buf.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(buf.size())) {
        break;
      }
      buf.clear();
    }
    ::shutdown(to, SHUT_WR);
  }
  // Once the whole request is in `buf`: blanks its body after the first
  // line if it is one of the first `lossy_` watches (false: wait for more).
  bool Mangle(std::string& buf) {
    const size_t head = buf.find("\r\n\r\n");
    const size_t cl = buf.find("Content-Length: ");
    if (head == std::string::npos || cl == std::string::npos) return false;
    const size_t length = std::stoul(buf.substr(cl + 16));
    if (buf.size() < head + 4 + length) return false;
    if (watches_++ < lossy_) {
      const size_t second = buf.find('\n', head + 4) + 1;
      for (size_t i = second; i < head + 4 + length; ++i) buf[i] = ' ';
    }
    return true;
  }

  int etcd_port_;
  int lossy_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<int> watches_{0};
  std::thread accepting_;
  std::vector<int> fds_;
  std::vector<std::thread> threads_;
};

// The gateway's loss, made certain: the watch sees it and opens its stream
// anew, and every range's events come, the last's too.
TEST_F(EtcdClientTest, AWatchWhoseWatchersEtcdDidNotAllCreateIsOpenedAnew) {
  WatchesLoseTheirLaterWatchers proxy(EtcdPort(), 1);
  EtcdOptions o = Options();
  o.endpoints = {"http://127.0.0.1:" + std::to_string(proxy.port())};
  o.timeout = 1s;
  EtcdClient w(o);
  EtcdClient c(Options());
  auto start = c.Put("/g/before", "0");
  ASSERT_TRUE(start.ok());
  ASSERT_TRUE(c.Put("/g/c", "early").ok());
  auto t0 = std::chrono::steady_clock::now();
  Status open = w.OpenWatch({{"/g/a", ""}, {"/g/b", ""}, {"/g/c", ""}}, *start + 1);
  ASSERT_TRUE(open.ok()) << open.message();
  EXPECT_EQ(proxy.watches(), 2);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 1s);
  ASSERT_TRUE(c.Put("/g/a", "1").ok());
  ASSERT_TRUE(c.DeletePrefix("/g/c").ok());
  std::vector<std::string> seen;
  for (int i = 0; i < 3; ++i) {
    auto e = w.NextEventBefore(std::chrono::steady_clock::now() + 5s);
    ASSERT_TRUE(e.ok()) << e.status().message();
    ASSERT_TRUE(e->has_value()) << i;
    seen.push_back(((*e)->deleted ? "-" : "+") + (*e)->kv.key);
  }
  // Each range's events in order, the one before the watch opened once (etcd
  // orders no range's events against another's: a range with history to
  // send may come after one without).
  EXPECT_EQ(std::erase(seen, "+/g/a"), 1u);
  EXPECT_EQ(seen, (std::vector<std::string>{"+/g/c", "-/g/c"}));
}

// Where etcd never creates every watcher, the watch is an error that says
// so; a watch of one range has no later watcher to lose.
TEST_F(EtcdClientTest, AWatchEtcdNeverCreatesWhollyIsAnError) {
  WatchesLoseTheirLaterWatchers proxy(EtcdPort(), 1'000);
  EtcdOptions o = Options();
  o.endpoints = {"http://127.0.0.1:" + std::to_string(proxy.port())};
  o.timeout = 1s;
  EtcdClient w(o);
  Status two = w.OpenWatch({{"/h/a", ""}, {"/h/b", ""}}, 0);
  EXPECT_EQ(two.code(), StatusCode::kIOError);
  EXPECT_NE(
      two.message().find("only 1 of 2 watchers were created within 1000 ms, 3 times in a row"),
      std::string::npos)
      << two.message();
  EXPECT_EQ(proxy.watches(), 3);
  EXPECT_EQ(w.NextEvent().status().code(), StatusCode::kInternal);
  Status one = w.OpenWatch({{"/h/a", ""}}, 0);
  EXPECT_TRUE(one.ok()) << one.message();
}

TEST_F(EtcdClientTest, AbortEndsAWatchAtOnce) {
  EtcdClient c(Options());
  auto t0 = std::chrono::steady_clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(100ms);
    c.Abort();
  });
  Status s = c.Watch({{"/never", ""}}, 0, [](const WatchEvent&) { return true; });
  aborter.join();
  EXPECT_FALSE(s.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 900ms);
}

TEST_F(EtcdClientTest, FailsOverToTheNextEndpoint) {
  EtcdOptions o = Options();
  o.endpoints.insert(o.endpoints.begin(), "http://127.0.0.1:" + std::to_string(FreePort()));
  EtcdClient c(o);
  EXPECT_TRUE(c.Put("/f", "1").ok());
  EXPECT_EQ(c.Endpoint(), endpoint_);
  EXPECT_EQ(c.LocalAddress(), "127.0.0.1");
}

TEST_F(EtcdClientTest, NothingListeningIsAnErrorNamingTheEndpoint) {
  EtcdOptions o;
  o.endpoints = {"http://127.0.0.1:" + std::to_string(FreePort())};
  o.timeout = 500ms;
  EtcdClient c(o);
  auto r = c.Put("/x", "1");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(o.endpoints[0]), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace trun::rendezvous
