#include "launch/rdzv_conf.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <tuple>

namespace trun::launch {
namespace {

using std::chrono::seconds;
using Items = std::map<std::string, std::string>;

LaunchConfig Backend(const std::string& backend, const std::string& endpoint = "") {
  LaunchConfig c;
  c.rdzv_backend = backend;
  c.rdzv_endpoint = endpoint;
  return c;
}

// Parses `items` for `c`; the problems, one a line, in `problems`.
rendezvous::Settings Settings(const Items& items, const LaunchConfig& c, std::string* problems) {
  Problems p;
  rendezvous::Settings s = ParseRdzvSettings(items, c, p);
  *problems = p.ToStatus().message();
  return s;
}

TEST(RdzvConfTest, SplitsAsTorchrun) {
  Problems p;
  auto items = SplitRdzvConf(" join_timeout = 5 , is_host=1 ", p);
  EXPECT_TRUE(p.empty());
  EXPECT_EQ(items, (Items{{"join_timeout", "5"}, {"is_host", "1"}}));
  EXPECT_TRUE(SplitRdzvConf("  ", p).empty());
  EXPECT_TRUE(p.empty());
  // torchrun refuses an empty item (ValueError): two commas, or one at an end.
  for (const char* bad : {"a=1,,b=2", "a=1,", ",a=1"}) {
    Problems q;
    SplitRdzvConf(bad, q);
    ASSERT_EQ(q.messages().size(), 1u) << bad;
    EXPECT_NE(q.messages()[0].find("drop the extra comma"), std::string::npos) << bad;
  }
  SplitRdzvConf("novalue,=3,k= ", p);
  ASSERT_EQ(p.messages().size(), 3u);
  EXPECT_EQ(p.messages()[0], "--rdzv-conf: 'novalue' is not of the form key=value");
  EXPECT_EQ(p.messages()[1], "--rdzv-conf: '=3' is not of the form key=value");
  EXPECT_EQ(p.messages()[2], "--rdzv-conf: 'k=' is not of the form key=value");
}

TEST(RdzvConfTest, EachBackendsDefaults) {
  std::string problems;
  auto c10d = Settings({}, Backend("c10d"), &problems);
  EXPECT_EQ(problems, "");
  EXPECT_EQ(c10d.endpoint_host, "localhost");
  EXPECT_EQ(c10d.endpoint_port, 29400);
  EXPECT_EQ(c10d.join_timeout, seconds(600));
  EXPECT_EQ(c10d.last_call_timeout, seconds(30));
  EXPECT_EQ(c10d.close_timeout, seconds(30));
  EXPECT_EQ(c10d.heartbeat_interval, seconds(1));
  EXPECT_EQ(c10d.heartbeat_timeout, seconds(5));
  EXPECT_FALSE(c10d.is_host.has_value());
  EXPECT_FALSE(c10d.store_access.any);
  EXPECT_TRUE(c10d.store_access.extra.empty());

  LaunchConfig st = Backend("static");
  st.master_addr = "10.0.0.5";
  st.master_port = 29511;
  auto s = Settings({}, st, &problems);
  EXPECT_EQ(problems, "");
  EXPECT_EQ(s.endpoint_host, "10.0.0.5");
  EXPECT_EQ(s.endpoint_port, 29511);
  EXPECT_EQ(s.join_timeout, seconds(900));

  auto etcd = Settings({{"etcd_prefix", "/mine//"}, {"cacert", "ca.pem"}},
                       Backend("etcd-v2", "e1,https://e2:7"), &problems);
  EXPECT_EQ(problems, "");
  EXPECT_EQ(etcd.etcd.endpoints, (std::vector<std::string>{"http://e1:2379", "https://e2:7"}));
  EXPECT_EQ(etcd.etcd_prefix, "/mine");
  EXPECT_EQ(etcd.etcd.cacert, "ca.pem");
  // etcd-v2 is torch's dynamic rendezvous over etcd: join_timeout, 600 s.
  EXPECT_EQ(etcd.join_timeout, seconds(600));
}

TEST(RdzvConfTest, TimeoutIsStaticsAndEtcdsJoinTimeout) {
  std::string problems;
  EXPECT_EQ(Settings({{"timeout", "1.5"}}, Backend("static"), &problems).join_timeout,
            std::chrono::milliseconds(1500));
  EXPECT_EQ(Settings({{"timeout", "7"}}, Backend("etcd", "e"), &problems).join_timeout, seconds(7));
  // join_timeout wins.
  EXPECT_EQ(Settings({{"timeout", "7"}, {"join_timeout", "3"}}, Backend("static"), &problems)
                .join_timeout,
            seconds(3));
  EXPECT_EQ(problems, "");
  Settings({{"timeout", "abc"}}, Backend("etcd", "e"), &problems);
  EXPECT_EQ(problems, "--rdzv-conf timeout=abc: expected seconds > 0");
}

// c10d and etcd-v2 wait join_timeout and never read `timeout`, as torch's
// do: torch's own launcher test (test/distributed/launcher/test_run.py)
// passes --rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5', quotes
// and all, and torchrun runs it; so does a one-node job, which runs c10d.
// torch's etcd-v2 names its TLS files ca_cert, ssl_cert and ssl_cert_key
// and lowercases protocol; its etcd reads cacert, cert and key, protocol as
// given.
TEST(RdzvConfTest, EtcdV2TakesTorchsEtcdV2Names) {
  std::string problems;
  auto v2 = Settings({{"protocol", " HTTPS"},
                      {"ca_cert", "ca.pem"},
                      {"ssl_cert", "c.pem"},
                      {"ssl_cert_key", "k.pem"}},
                     Backend("etcd-v2", "e1"), &problems);
  EXPECT_EQ(problems, "");
  EXPECT_EQ(v2.etcd.endpoints, std::vector<std::string>{"https://e1:2379"});
  EXPECT_EQ(std::make_tuple(v2.etcd.cacert, v2.etcd.cert, v2.etcd.key),
            std::make_tuple("ca.pem", "c.pem", "k.pem"));
  auto older = Settings({{"cacert", "a.pem"}, {"cert", "b.pem"}, {"key", "c.pem"}},
                        Backend("etcd-v2", "e1"), &problems);
  EXPECT_EQ(std::make_tuple(older.etcd.cacert, older.etcd.cert, older.etcd.key),
            std::make_tuple("a.pem", "b.pem", "c.pem"));
  auto v1 = Settings({{"ssl_cert", "c.pem"}}, Backend("etcd", "e1"), &problems);
  EXPECT_EQ(v1.etcd.cert, "");
  Settings({{"protocol", "HTTPS"}}, Backend("etcd", "e1"), &problems);
  EXPECT_EQ(problems, "--rdzv-conf protocol=HTTPS: expected http or https");
  EXPECT_TRUE(RdzvConfWarnings({{"ssl_cert", "c"}, {"ca_cert", "a"}}, Backend("etcd-v2")).empty());
}

TEST(RdzvConfTest, C10dAndEtcdV2IgnoreTimeoutAsTorchDoes) {
  std::string problems;
  for (const char* backend : {"c10d", "etcd-v2"}) {
    LaunchConfig c = Backend(backend, "localhost:2379");
    EXPECT_EQ(Settings({{"timeout", "5'"}}, c, &problems).join_timeout, seconds(600)) << backend;
    EXPECT_EQ(problems, "") << backend;
    auto w = RdzvConfWarnings({{"timeout", "5'"}}, c);
    ASSERT_EQ(w.size(), 1u) << backend;
    EXPECT_EQ(w[0], fmt::format("--rdzv-conf timeout: the {} backend does not read it and ignores "
                                "it, as torchrun's does; its join timeout is join_timeout",
                                backend));
  }
  LaunchConfig standalone = Backend("c10d", "localhost:0");
  standalone.standalone = true;
  Settings({{"timeout", "abc"}}, standalone, &problems);
  EXPECT_EQ(problems, "");
  EXPECT_EQ(RdzvConfWarnings({{"timeout", "abc"}}, standalone),
            std::vector<std::string>{
                "--rdzv-conf timeout: the c10d backend of a standalone job does not read it and "
                "ignores it, as torchrun's does; its join timeout is join_timeout"});
  // A typo's hint is a key the backend reads (not `timeout` here, which
  // would be ignored too); an unknown backend is its own error, not a reason
  // to warn.
  EXPECT_TRUE(RdzvConfWarnings({{"timeou", "5"}}, Backend("c10d")).empty());
  EXPECT_EQ(RdzvConfWarnings({{"timeou", "5"}}, Backend("static")),
            std::vector<std::string>{"--rdzv-conf timeou: trun reads no such key and ignores it "
                                     "(did you mean 'timeout'?)"});
  EXPECT_TRUE(RdzvConfWarnings({{"timeout", "5"}}, Backend("zookeeper")).empty());
}

// torch's c10d and etcd-v2 refuse a read_timeout that int() cannot read or
// that is not above 0; static and etcd never read it.
TEST(RdzvConfTest, ReadTimeoutCheckedAsTorchChecksIt) {
  std::string problems;
  for (const char* backend : {"c10d", "etcd-v2"}) {
    LaunchConfig c = Backend(backend, "localhost:2379");
    Settings({{"read_timeout", "60"}}, c, &problems);
    EXPECT_EQ(problems, "") << backend;
    // (torch's timedelta cannot hold the last: OverflowError.)
    for (const char* bad : {"0", "-1", "1.5", "soon", "99999999999999999999999"}) {
      Settings({{"read_timeout", bad}}, c, &problems);
      EXPECT_EQ(problems, fmt::format("--rdzv-conf read_timeout={}: expected a whole number of "
                                      "seconds > 0 (torchrun refuses it too)",
                                      bad))
          << backend;
    }
  }
  // Python's int() reads these; a file store never reads the key.
  for (const char* good : {"1_000", "+5", " 5\r\n"}) {
    Settings({{"read_timeout", good}}, Backend("c10d"), &problems);
    EXPECT_EQ(problems, "") << good;
  }
  LaunchConfig one = Backend("c10d");
  one.max_nodes = 1;
  Settings({{"read_timeout", "soon"}, {"store_type", "file"}}, one, &problems);
  EXPECT_EQ(problems, "");
  for (const char* backend : {"static", "etcd"}) {
    Settings({{"read_timeout", "soon"}}, Backend(backend, "localhost:2379"), &problems);
    EXPECT_EQ(problems, "") << backend;
  }
  EXPECT_EQ(RdzvConfWarnings({{"read_timeut", "5"}}, Backend("c10d")),
            std::vector<std::string>{"--rdzv-conf read_timeut: trun reads no such key and ignores "
                                     "it (did you mean 'read_timeout'?)"});
}

TEST(RdzvConfTest, KeepAliveThenHeartbeat) {
  std::string problems;
  auto s = Settings({{"keep_alive_interval", "2"}}, Backend("c10d"), &problems);
  EXPECT_EQ(s.heartbeat_interval, seconds(2));
  EXPECT_EQ(s.heartbeat_timeout, seconds(6));
  s = Settings({{"keep_alive_interval", "2"}, {"keep_alive_max_attempt", "4"}}, Backend("c10d"),
               &problems);
  EXPECT_EQ(s.heartbeat_timeout, seconds(8));
  s = Settings({{"keep_alive_interval", "2"}, {"heartbeat_timeout", "3"}}, Backend("c10d"),
               &problems);
  EXPECT_EQ(s.heartbeat_timeout, seconds(3));
  EXPECT_EQ(problems, "");
  Settings({{"heartbeat_interval", "5"}}, Backend("c10d"), &problems);
  EXPECT_EQ(problems,
            "--rdzv-conf: heartbeat_timeout (5000 ms) must exceed heartbeat_interval (5000 ms)");
}

TEST(RdzvConfTest, IsHostInTorchsWords) {
  std::string problems;
  EXPECT_EQ(Settings({{"is_host", "Yes"}}, Backend("c10d"), &problems).is_host, true);
  EXPECT_EQ(Settings({{"is_host", "f"}}, Backend("c10d"), &problems).is_host, false);
  EXPECT_EQ(problems, "");
  EXPECT_FALSE(Settings({{"is_host", "maybe"}}, Backend("c10d"), &problems).is_host.has_value());
  EXPECT_EQ(problems, "--rdzv-conf is_host=maybe: expected true or false");
}

TEST(RdzvConfTest, StoreAllow) {
  std::string problems;
  auto s = Settings({{"store_allow", "10.9.0.0/16;192.168.1.7"}}, Backend("c10d"), &problems);
  EXPECT_EQ(problems, "");
  EXPECT_EQ(s.store_access.extra.size(), 2u);
  EXPECT_TRUE(Settings({{"store_allow", "any"}}, Backend("c10d"), &problems).store_access.any);
  Settings({{"store_allow", "10.0.0.0/40"}}, Backend("static"), &problems);
  EXPECT_NE(problems.find("--rdzv-conf store_allow=10.0.0.0/40"), std::string::npos) << problems;
}

TEST(RdzvConfTest, EndpointForms) {
  std::string problems;
  auto v6 = Settings({}, Backend("c10d", "[::1]:7"), &problems);
  EXPECT_EQ(v6.endpoint_host, "::1");
  EXPECT_EQ(v6.endpoint_port, 7);
  auto bare = Settings({}, Backend("c10d", "[fd00::2]"), &problems);
  EXPECT_EQ(bare.endpoint_host, "fd00::2");
  EXPECT_EQ(bare.endpoint_port, 29400);
  // torch strips the endpoint; a space inside the host is no host.
  auto spaced = Settings({}, Backend("c10d", "\u00a0\n h:7 \r\x1f\u3000"), &problems);
  EXPECT_EQ(spaced.endpoint_host, "h");
  EXPECT_EQ(spaced.endpoint_port, 7);
  EXPECT_EQ(problems, "");
  // Beyond ASCII, a host is left to the resolver if it is UTF-8.
  auto unicode = Settings({}, Backend("c10d", "m\u00fcnchen.example:7"), &problems);
  EXPECT_EQ(unicode.endpoint_host, "m\u00fcnchen.example");
  EXPECT_EQ(problems, "");
  // torch's host characters take '_'; its port, up to five digits.
  auto underscore = Settings({}, Backend("c10d", "node_1.example-2.com:00080"), &problems);
  EXPECT_EQ(underscore.endpoint_host, "node_1.example-2.com");
  EXPECT_EQ(underscore.endpoint_port, 80);
  EXPECT_EQ(problems, "");
  // Without brackets: split at the last colon, as torch splits, unless
  // that would break an IPv6 address given without a port.
  for (const auto& [endpoint, host, port] : std::vector<std::tuple<std::string, std::string, int>>{
           {"fe80::1:29500", "fe80::1", 29500},
           {"2001:db8::5:21234", "2001:db8::5", 21234},
           {"fe80::1", "fe80::1", 29400},
           {"::1", "::1", 29400}}) {
    auto bare_v6 = Settings({}, Backend("c10d", endpoint), &problems);
    EXPECT_EQ(problems, "") << endpoint;
    EXPECT_EQ(bare_v6.endpoint_host, host) << endpoint;
    EXPECT_EQ(bare_v6.endpoint_port, port) << endpoint;
  }
  auto blank = Settings({}, Backend("c10d", " "), &problems);
  EXPECT_EQ(blank.endpoint_host, "localhost");
  EXPECT_EQ(blank.endpoint_port, 29400);
  EXPECT_EQ(problems, "");
  for (const auto& [endpoint, needle] : std::vector<std::pair<std::string, std::string>>{
           {"[::1", "an IPv6 address needs its closing ']'"},
           {"[::1]7", "expected [address]:port"},
           {":29400", "no host; give the host that runs the store"},
           {"h:http", "expected a port 0-65535, got 'http'"},
           {"h:65536", "expected a port 0-65535, got '65536'"},
           {"/shared/rdzv", "not a host ('/' in it: a path or a URL)"},
           {"http://h:1", "not a host ('/' in it: a path or a URL)"},
           {"my host:1", "not a host (a space in it)"},
           {"user@h:1", "not a host ('@' in it: a host is a name, an IPv4 or an IPv6 address"},
           {"[fe80::1%eth0]:1", "not a host ('%' in it"},
           {std::string("a\x01"
                        "b:1"),
            "not a host (byte 0x01 in it"},
           {"h:+7", "expected a port 0-65535, got '+7'"},
           {"h:-1", "expected a port 0-65535, got '-1'"},
           {"h:000080", "expected a port 0-65535, got '000080'"},
           {"h:", "expected a port 0-65535, got ''"},
           {"[::1]:", "expected a port 0-65535, got ''"},
           {"a:b:c", "expected a port 0-65535, got 'c'"},
           {"\xff"
            "h:80",
            "not a host (bytes that are not UTF-8 in it)"},
           {"\xed\xa0\x80"
            "h:80",
            "not a host (bytes that are not UTF-8 in it)"}}) {
    Settings({}, Backend("c10d", endpoint), &problems);
    EXPECT_EQ(problems.rfind("--rdzv-endpoint '" + endpoint + "': ", 0), 0u) << problems;
    EXPECT_NE(problems.find(needle), std::string::npos) << problems;
  }
  Settings({}, Backend("etcd"), &problems);
  EXPECT_NE(problems.find("--rdzv-backend etcd needs --rdzv-endpoint"), std::string::npos);
  Settings({{"protocol", "gopher"}}, Backend("etcd", "localhost"), &problems);
  EXPECT_EQ(problems, "--rdzv-conf protocol=gopher: expected http or https");
}

// torch's c10d takes store_type tcp or file; trun serves tcp alone, and says
// so of file rather than run without it. Other backends ignore the key, as
// torch's do.
TEST(RdzvConfTest, C10dStoreTypeTcpOnly) {
  std::string problems;
  LaunchConfig two = Backend("c10d", "h:1");
  two.max_nodes = 2;
  Settings({{"store_type", " TCP "}}, two, &problems);
  EXPECT_EQ(problems, "");
  Settings({{"store_type", "file"}}, two, &problems);
  EXPECT_EQ(problems.rfind("--rdzv-conf store_type=file: trun's c10d rendezvous runs over TCP", 0),
            0u)
      << problems;
  Settings({{"store_type", "redis"}}, two, &problems);
  EXPECT_EQ(problems.rfind("--rdzv-conf store_type=redis: expected tcp", 0), 0u) << problems;
  Settings({{"store_type", "file"}}, Backend("etcd-v2", "h:2379"), &problems);
  EXPECT_EQ(problems, "");
  // One node: torch's file store needs no other host; trun's store on a
  // free port of this one serves it, with a warning, whatever the path.
  for (const char* endpoint : {"", "/tmp/rdzv-file"}) {
    LaunchConfig one = Backend("c10d", endpoint);
    one.max_nodes = 1;
    auto s = Settings({{"store_type", "File"}}, one, &problems);
    EXPECT_EQ(problems, "") << endpoint;
    EXPECT_EQ(s.endpoint_host, "localhost");
    EXPECT_EQ(s.endpoint_port, 0);
    auto warnings = RdzvConfWarnings({{"store_type", "File"}}, one);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("from a store on a free port of this host"), std::string::npos);
  }
}

TEST(RdzvConfTest, EveryBadValueNamedAtOnce) {
  std::string problems;
  Settings({{"timeout", "abc"},
            {"join_timeout", "0"},
            {"last_call_timeout", "-1"},
            {"close_timeout", "inf"},
            {"keep_alive_max_attempt", "0"},
            {"heartbeat_interval", "nan"},
            {"is_host", "2"},
            {"store_allow", "nowhere"}},
           Backend("static"), &problems);
  for (const char* needle :
       {"--rdzv-conf timeout=abc: expected seconds > 0",
        "--rdzv-conf join_timeout=0: expected seconds > 0",
        "--rdzv-conf last_call_timeout=-1: expected seconds > 0",
        "--rdzv-conf close_timeout=inf: at most 1000000000 seconds",
        "--rdzv-conf keep_alive_max_attempt=0: expected a whole number >= 1",
        "--rdzv-conf heartbeat_interval=nan: expected seconds > 0",
        "--rdzv-conf is_host=2: expected true or false", "--rdzv-conf store_allow=nowhere"}) {
    EXPECT_NE(problems.find(needle), std::string::npos) << needle << " not in:\n" << problems;
  }
  EXPECT_EQ(std::count(problems.begin(), problems.end(), '\n'), 7) << problems;
}

TEST(RdzvConfTest, TooLargeToBeMeant) {
  std::string problems;
  Settings({{"join_timeout", "1e300"}, {"keep_alive_max_attempt", "99999999999"}}, Backend("c10d"),
           &problems);
  EXPECT_NE(problems.find("--rdzv-conf join_timeout=1e300: at most 1000000000 seconds"),
            std::string::npos)
      << problems;
  EXPECT_NE(problems.find("--rdzv-conf keep_alive_max_attempt=99999999999: at most 1000000"),
            std::string::npos)
      << problems;
}

// torch passes any key on, so an unknown one is no error; a likely typo of a
// key trun reads is a warning that names neither the value nor a secret.
TEST(RdzvConfTest, UnknownKeysWarnOnlyWhenLikelyTypos) {
  auto w = RdzvConfWarnings({{"jion_timeout", "5"},
                             {"heartbeat_timout", "9"},
                             {"password", "hunter2"},
                             {"rank", "1"},
                             {"read_timeout", "60"},
                             {"join_timeout", "5"}},
                            Backend("c10d"));
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0],
            "--rdzv-conf heartbeat_timout: trun reads no such key and ignores it (did you mean "
            "'heartbeat_timeout'?)");
  EXPECT_EQ(w[1],
            "--rdzv-conf jion_timeout: trun reads no such key and ignores it (did you mean "
            "'join_timeout'?)");
  std::string problems;
  Settings({{"jion_timeout", "5"}, {"password", "hunter2"}}, Backend("c10d"), &problems);
  EXPECT_EQ(problems, "");
}

// torch's static rendezvous takes MAX as its world size; its config keeps
// MIN (args.cc), so the rendezvous's options are where MAX wins.
TEST(RdzvOptionsTest, StaticWaitsForMaxNodesAndC10dForMin) {
  LaunchConfig c;
  c.min_nodes = 1;
  c.max_nodes = 2;
  c.rdzv_backend = "static";
  EXPECT_EQ(RdzvOptions(c).min_nodes, 2);
  c.rdzv_backend = "c10d";
  EXPECT_EQ(RdzvOptions(c).min_nodes, 1);
  EXPECT_EQ(RdzvOptions(c).max_nodes, 2);
}

// One node that hosts the store alone needs no agreement: a one-node
// static job (on the given --master-port) or --standalone (on a free port
// unless one is given); a static node of rank 1 waits for its node 0.
TEST(RdzvOptionsTest, OneNodeRunsAloneWhereItHostsTheStore) {
  LaunchConfig c;
  c.rdzv_backend = "static";
  c.master_addr = "10.0.0.1";
  c.master_port = 29555;
  c.master_port_given = true;
  auto alone = RdzvOptions(c).single_node;
  ASSERT_TRUE(alone.has_value());
  EXPECT_EQ(alone->addr, "10.0.0.1");
  EXPECT_EQ(alone->port, 29555);

  c.rdzv_backend = "c10d";
  c.standalone = true;
  c.master_port_given = false;
  c.local_addr = "node-a";
  alone = RdzvOptions(c).single_node;
  ASSERT_TRUE(alone.has_value());
  EXPECT_EQ(alone->addr, "node-a");
  EXPECT_EQ(alone->port, 0);

  c.standalone = false;
  EXPECT_FALSE(RdzvOptions(c).single_node.has_value());
  c.rdzv_backend = "static";
  c.node_rank = 1;
  EXPECT_FALSE(RdzvOptions(c).single_node.has_value());
  c.node_rank = 0;
  c.max_nodes = 2;
  EXPECT_FALSE(RdzvOptions(c).single_node.has_value());
}

}  // namespace
}  // namespace trun::launch
