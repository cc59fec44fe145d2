#include "launch/args.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

namespace trun::launch {
namespace {

// Runs the parser with PET_* variables cleared, so the host's environment
// cannot leak into a case.
Result<ParsedLaunch> Parse(std::vector<std::string> args) {
  for (const char* v : {"PET_NPROC_PER_NODE", "PET_NNODES", "PET_MAX_RESTARTS", "PET_TEE",
                        "PET_STANDALONE", "OMP_NUM_THREADS"}) {
    unsetenv(v);
  }
  return ParseLaunchArgs(args);
}

TEST(ArgsTest, DefaultsMatchTorchrun) {
  auto p = Parse({"--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const auto& c = p->config;
  EXPECT_EQ(c.min_nodes, 1);
  EXPECT_EQ(c.max_nodes, 1);
  EXPECT_EQ(c.nproc_per_node, 1);
  // torchrun 2.x: one static node naming no store address runs as
  // --standalone, under a run id of its own.
  EXPECT_TRUE(c.standalone);
  EXPECT_EQ(c.rdzv_backend, "c10d");
  EXPECT_EQ(c.rdzv_id.size(), 36u);
  EXPECT_EQ(c.rdzv_endpoint, "localhost:0");
  // c10d waits join_timeout; torchrun's timeout=900 is static's and etcd's.
  EXPECT_EQ(c.rdzv.join_timeout, std::chrono::seconds(600));
  EXPECT_EQ(c.rdzv.endpoint_host, "localhost");
  EXPECT_EQ(c.rdzv.endpoint_port, 0);
  EXPECT_EQ(c.role, "default");
  EXPECT_EQ(c.max_restarts, 0);
  EXPECT_EQ(c.signals_to_handle.size(), 4u);
  EXPECT_EQ(c.worker_argv, std::vector<std::string>{"true"});
}

TEST(ArgsTest, OneStaticNodeGetsARunIdOfItsOwn) {
  auto p = Parse({"--rdzv-id", "job7", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->config.standalone);
  EXPECT_NE(p->config.rdzv_id, "job7");  // as torchrun 2.x's implied standalone
  auto s = Parse({"--standalone", "--rdzv-id", "job7", "--no-python", "true"});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_NE(s->config.rdzv_id, "job7");  // as torchrun's --standalone
}

TEST(ArgsTest, StandaloneMakesAJobTokenOfItsOwnUnlessGivenOne) {
  unsetenv("TRUN_JOB_TOKEN");
  auto a = Parse({"--standalone", "--no-python", "true"});
  auto b = Parse({"--no-python", "true"});  // standalone, implied
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->config.rdzv.job_token.size(), 64u);
  EXPECT_EQ(b->config.rdzv.job_token.size(), 64u);
  EXPECT_NE(a->config.rdzv.job_token, b->config.rdzv.job_token);
  setenv("TRUN_JOB_TOKEN", "given-token-0123456789", 1);
  auto c = Parse({"--standalone", "--no-python", "true"});
  unsetenv("TRUN_JOB_TOKEN");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->config.rdzv.job_token, "given-token-0123456789");
  // One c10d node at an endpoint of its own: nobody to share a token with.
  auto one = Parse(
      {"--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--no-python", "true"});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->config.rdzv.job_token.size(), 64u);
  // Several nodes need the same token on every agent: none is made up.
  auto d = Parse(
      {"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--no-python", "true"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->config.rdzv.job_token, "");
}

TEST(ArgsTest, JobTokenFdIsReadOnceAndClosed) {
  unsetenv("TRUN_JOB_TOKEN");
  const std::vector<std::string> two = {"--nnodes",        "2",  "--rdzv-backend", "c10d",
                                        "--rdzv-endpoint", "h:1"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = two;
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--no-python", "true"});
    return Parse(args);
  };
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string token = "fd-token-0123456789abcdef";
  ASSERT_EQ(write(fds[1], (token + "\n").data(), token.size() + 1),
            static_cast<ssize_t>(token.size() + 1));
  close(fds[1]);
  const std::string conf = "job_token_fd=" + std::to_string(fds[0]);
  auto p = with({"--rdzv-conf", conf});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->config.rdzv.job_token, token);
  // Closed once read: nothing trun starts inherits it.
  EXPECT_EQ(fcntl(fds[0], F_GETFD), -1);
  // A closed descriptor, a number that is none, or both forms, are refused
  // with the fix; the message never holds the token.
  auto closed = with({"--rdzv-conf", conf});
  ASSERT_FALSE(closed.ok());
  EXPECT_NE(closed.status().message().find("is not open: start trun with it open on the token"),
            std::string::npos)
      << closed.status().message();
  auto bad = with({"--rdzv-conf", "job_token_fd=x"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected a descriptor number"), std::string::npos);
  // Stdin (job_token_fd=0 <FILE) is left on /dev/null, so that its number
  // does not go to the next file trun opens and on to the workers.
  const int saved_stdin = dup(0);
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], token.data(), token.size()), static_cast<ssize_t>(token.size()));
  close(fds[1]);
  dup2(fds[0], 0);
  close(fds[0]);
  auto from_stdin = with({"--rdzv-conf", "job_token_fd=0"});
  char target[64] = {};
  (void)!readlink("/proc/self/fd/0", target, sizeof target - 1);
  dup2(saved_stdin, 0);
  close(saved_stdin);
  ASSERT_TRUE(from_stdin.ok()) << from_stdin.status().ToString();
  EXPECT_EQ(from_stdin->config.rdzv.job_token, token);
  EXPECT_STREQ(target, "/dev/null");
  auto both = with({"--rdzv-conf", "job_token_fd=0,job_token_file=/nonexistent"});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("give one"), std::string::npos);
}

TEST(ArgsTest, OneStaticNodeWithAStoreAddressStaysStatic) {
  auto p = Parse({"--master-port", "29511", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE(p->config.standalone);
  EXPECT_EQ(p->config.rdzv_backend, "static");
  EXPECT_EQ(p->config.rdzv_id, "none");
  EXPECT_EQ(p->config.rdzv_endpoint, "127.0.0.1:29511");
  EXPECT_EQ(p->config.rdzv.endpoint_host, "127.0.0.1");
  EXPECT_EQ(p->config.rdzv.endpoint_port, 29511);
  EXPECT_EQ(p->config.rdzv.join_timeout, std::chrono::seconds(900));
  auto two = Parse({"--nnodes", "2", "--no-python", "true"});
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(two->config.rdzv_backend, "static");
  EXPECT_EQ(two->config.rdzv_endpoint, "127.0.0.1:29500");
}

TEST(ArgsTest, DashAndUnderscoreSpellings) {
  auto a = Parse({"--nproc-per-node", "3", "--max_restarts=2", "--no_python", "true"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->config.nproc_per_node, 3);
  EXPECT_EQ(a->config.max_restarts, 2);
  auto b = Parse({"--nproc_per_node=4", "--max-restarts", "1", "--no-python", "true"});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->config.nproc_per_node, 4);
}

TEST(ArgsTest, ScriptArgumentsAreNotParsed) {
  auto p = Parse({"--no-python", "echo", "--nproc-per-node", "9", "-r", "x"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->config.nproc_per_node, 1);
  EXPECT_EQ(p->config.worker_argv,
            (std::vector<std::string>{"echo", "--nproc-per-node", "9", "-r", "x"}));
}

TEST(ArgsTest, PetEnvironmentIsTheDefaultAndFlagsWin) {
  auto p = [] {
    unsetenv("OMP_NUM_THREADS");
    setenv("PET_NPROC_PER_NODE", "3", 1);
    auto r = ParseLaunchArgs({"--no-python", "true"});
    unsetenv("PET_NPROC_PER_NODE");
    return r;
  }();
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->config.nproc_per_node, 3);
  EXPECT_TRUE(p->config.set_omp_num_threads);
  setenv("PET_NPROC_PER_NODE", "3", 1);
  auto q = ParseLaunchArgs({"--nproc-per-node", "2", "--no-python", "true"});
  unsetenv("PET_NPROC_PER_NODE");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->config.nproc_per_node, 2);
}

TEST(ArgsTest, EntrypointCommands) {
  setenv("PYTHON_EXEC", "/usr/bin/python3", 1);
  auto m = Parse({"-m", "pkg.mod", "--lr", "1"});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->config.worker_argv,
            (std::vector<std::string>{"/usr/bin/python3", "-u", "-m", "pkg.mod", "--lr", "1"}));
  EXPECT_EQ(m->config.entrypoint_name, "pkg.mod");
  auto s = Parse({"/dev/null"});  // any existing file will do as a script
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->config.worker_argv,
            (std::vector<std::string>{"/usr/bin/python3", "-u", "/dev/null"}));
  unsetenv("PYTHON_EXEC");
}

TEST(ArgsTest, StandaloneIsOneNodeC10dWithAUuid) {
  auto p = Parse({"--standalone", "--rdzv-id", "mine", "--no-python", "true"});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->config.rdzv_backend, "c10d");
  EXPECT_EQ(p->config.rdzv_id.size(), 36u);
  EXPECT_EQ(p->config.rdzv_id[14], '4');
}

TEST(ArgsTest, StdSpecs) {
  auto all = ParseStdSpec("--tee", "3");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->ForRank(7), Std::kAll);
  auto map = ParseStdSpec("--tee", "0:1,12:2");
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->ForRank(0), Std::kOut);
  EXPECT_EQ(map->ForRank(12), Std::kErr);  // torch's regex allows one digit only
  EXPECT_EQ(map->ForRank(1), Std::kNone);
  for (const char* bad : {"4", "x", "0:9", "0:", ":1", "0:1,", "-1:1"}) {
    EXPECT_FALSE(ParseStdSpec("-r", bad).ok()) << bad;
  }
}

TEST(ArgsTest, BadInputIsCollectedAndNamed) {
  auto p = Parse({"--nproc-per-node", "0", "--nnodes", "3:2", "-t", "x", "--no-python", "true"});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = p.status().message();
  EXPECT_NE(m.find("--nproc-per-node"), std::string::npos) << m;
  EXPECT_NE(m.find("--nnodes"), std::string::npos) << m;
  EXPECT_NE(m.find("--tee"), std::string::npos) << m;
}

TEST(ArgsTest, UnknownFlagGetsASuggestion) {
  auto p = Parse({"--nproc-pre-node", "2", "x.py"});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("did you mean '--nproc-per-node'"), std::string::npos)
      << p.status().message();
}

// torch's static rendezvous waits for MAX nodes; its config keeps MIN, and
// a node rank out of range is accepted (and then waits), as torchrun does.
TEST(ArgsTest, StaticKeepsMinAndAcceptsAnyRankAsTorchrun) {
  EXPECT_TRUE(Parse({"--nnodes", "2", "--node-rank", "1", "--no-python", "true"}).ok());
  auto elastic = Parse({"--nnodes", "1:2", "--no-python", "true"});
  ASSERT_TRUE(elastic.ok()) << elastic.status().ToString();
  EXPECT_EQ(elastic->config.min_nodes, 1);
  EXPECT_EQ(elastic->config.max_nodes, 2);
  auto rank = Parse({"--nnodes", "2", "--node-rank", "2", "--no-python", "true"});
  ASSERT_TRUE(rank.ok()) << rank.status().ToString();
  EXPECT_EQ(rank->config.node_rank, 2);
  auto one = Parse({"--node-rank", "1", "--master-port", "29511", "--no-python", "true"});
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->config.rdzv_backend, "static");
}

// torch's TCPStore reads port 0 as a free one; the static store's port must
// be 0-65535 (launch_agent's _get_addr_and_port), and no other backend
// reads it.
TEST(ArgsTest, MasterPortZeroIsAFreePort) {
  auto p = Parse({"--master-port", "0", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->config.rdzv_backend, "static");
  EXPECT_EQ(p->config.master_port, 0);
  EXPECT_FALSE(Parse({"--master-port", "-1", "--no-python", "true"}).ok());
  EXPECT_FALSE(Parse({"--nnodes", "2", "--master-port", "65536", "--no-python", "true"}).ok());
  auto standalone = Parse({"--standalone", "--master-port", "70000", "--no-python", "true"});
  ASSERT_TRUE(standalone.ok()) << standalone.status().ToString();
  EXPECT_EQ(standalone->config.rdzv_endpoint, "localhost:0");
  EXPECT_TRUE(Parse({"--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--master-port", "-5",
                     "--no-python", "true"})
                  .ok());
}

// torch's static store is at --rdzv-endpoint when one is given, and that is
// the workers' MASTER_ADDR and MASTER_PORT; its port is required.
TEST(ArgsTest, StaticEndpointIsTheStore) {
  auto p = Parse({"--rdzv-backend", "static", "--rdzv-endpoint", "10.0.0.1:29511", "--nnodes", "2",
                  "--node-rank", "1", "--master-port", "99999", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->config.master_addr, "10.0.0.1");
  EXPECT_EQ(p->config.master_port, 29511);
  auto no_port = Parse({"--rdzv-backend", "static", "--rdzv-endpoint", "10.0.0.1", "--nnodes", "2",
                        "--no-python", "true"});
  ASSERT_FALSE(no_port.ok());
  EXPECT_NE(no_port.status().message().find("the static backend needs the store's port"),
            std::string::npos)
      << no_port.status().message();
}

// torch parses the static store's "{master_addr}:{master_port}" as an
// endpoint: brackets come off an IPv6 address, and an empty address or a
// path is refused. A one-node job that names no port runs c10d on
// localhost, as torchrun 2.x does, and never reads the address.
TEST(ArgsTest, StaticMasterAddrIsTheStoresHost) {
  auto v6 = Parse(
      {"--nnodes", "2", "--master-addr", "[::1]", "--master-port", "29511", "--no-python", "true"});
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_EQ(v6->config.master_addr, "::1");
  EXPECT_EQ(v6->config.rdzv_endpoint, "[::1]:29511");  // as torch's config has it
  auto spaced = Parse({"--nnodes", "2", "--master-addr", " 10.0.0.1", "--master-port", "29511",
                       "--no-python", "true"});
  ASSERT_TRUE(spaced.ok()) << spaced.status().ToString();
  EXPECT_EQ(spaced->config.master_addr, "10.0.0.1");
  // What Python's str.strip() takes off, the separators \x1c-\x1f and
  // Unicode's spaces too.
  auto separated = Parse({"--nnodes", "2", "--master-addr",
                          "\u00a0\x1f"
                          "10.0.0.1",
                          "--master-port", "29511", "--no-python", "true"});
  ASSERT_TRUE(separated.ok()) << separated.status().ToString();
  EXPECT_EQ(separated->config.master_addr, "10.0.0.1");
  for (const char* addr : {"shared/rdzv", "", "[]", "10.0.0.1 ", "root@10.0.0.1"}) {
    auto bad = Parse(
        {"--nnodes", "2", "--master-addr", addr, "--master-port", "29511", "--no-python", "true"});
    ASSERT_FALSE(bad.ok()) << addr;
    EXPECT_NE(bad.status().message().find(fmt::format("--master-addr '{}': ", addr)),
              std::string::npos)
        << bad.status().message();
    EXPECT_NE(bad.status().message().find("give the host of node 0"), std::string::npos)
        << bad.status().message();
  }
  auto one_node = Parse({"--nnodes", "1", "--master-addr", "shared/rdzv", "--no-python", "true"});
  ASSERT_TRUE(one_node.ok()) << one_node.status().ToString();
  EXPECT_EQ(one_node->config.rdzv_backend, "c10d");
}

// What torch refuses before its agent runs (WorkerSpec's asserts), and what
// it accepts: any worker count above 0, any node rank.
TEST(ArgsTest, CountsAndRanksAsTorchrunTakesThem) {
  EXPECT_FALSE(Parse({"--nproc-per-node", "0", "--no-python", "true"}).ok());
  EXPECT_FALSE(Parse({"--nproc-per-node", "-2", "--no-python", "true"}).ok());
  auto many = Parse({"--nproc-per-node", "5000", "--no-python", "true"});
  ASSERT_TRUE(many.ok()) << many.status().ToString();
  EXPECT_EQ(many->config.nproc_per_node, 5000);
  EXPECT_FALSE(Parse({"--monitor-interval", "0", "--no-python", "true"}).ok());
  EXPECT_FALSE(Parse({"--monitor-interval", "-1", "--no-python", "true"}).ok());
  auto rank = Parse(
      {"--nnodes", "2", "--master-port", "29511", "--node-rank", "-1", "--no-python", "true"});
  ASSERT_TRUE(rank.ok()) << rank.status().ToString();
  EXPECT_EQ(rank->config.node_rank, -1);
  auto ignored = Parse({"--node-rank", "-3", "--rdzv-backend", "c10d", "--no-python", "true"});
  ASSERT_TRUE(ignored.ok()) << ignored.status().ToString();
  EXPECT_EQ(ignored->config.node_rank, 0);
}

// torchrun accepts these and fails as its workers start; so does trun
// (CheckBeforeStart), and SIGCHLD ends the job at the first worker exit.
TEST(ArgsTest, SignalsTorchCannotHandleFailAsTheWorkersStart) {
  auto p = Parse({"--signals-to-handle", "SIGTERM,SIGKILL, SIGSTOP", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->config.signals_to_handle, std::vector<int>{SIGTERM});
  EXPECT_EQ(p->config.unhandleable_signals, (std::vector<std::string>{"SIGKILL", "SIGSTOP"}));
  Status s = CheckBeforeStart(p->config);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no handler can be set for SIGKILL"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("no handler can be set for SIGSTOP"), std::string::npos);
  auto chld = Parse({"--signals-to-handle", "SIGCHLD", "--no-python", "true"});
  ASSERT_TRUE(chld.ok()) << chld.status().ToString();
  EXPECT_TRUE(chld->config.end_at_first_worker_exit);
  EXPECT_TRUE(chld->config.signals_to_handle.empty());
  EXPECT_TRUE(CheckBeforeStart(chld->config).ok());
}

// torch's DefaultLogsSpecs: a --log-dir that is a file, or that cannot be
// created, is refused as torchrun decides; a missing one is created.
TEST(ArgsTest, LogDirAsTorchsDefaultLogsSpecs) {
  char tmpl[] = "/tmp/trun_args_test_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto made = Parse({"--log-dir", dir + "/a/b", "--no-python", "true"});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  struct stat st;
  EXPECT_EQ(::stat((dir + "/a/b").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  const std::string file = dir + "/f";
  std::fclose(std::fopen(file.c_str(), "w"));
  auto is_file = Parse({"--log-dir", file, "--no-python", "true"});
  ASSERT_FALSE(is_file.ok());
  EXPECT_NE(is_file.status().message().find("is a file"), std::string::npos);
  EXPECT_FALSE(Parse({"--log-dir", file + "/logs", "--no-python", "true"}).ok());
  std::filesystem::remove_all(dir);
}

// torchrun keeps --nnodes under --standalone.
TEST(ArgsTest, StandaloneKeepsNnodesAsTorchrun) {
  auto p = Parse({"--standalone", "--nnodes", "2", "--no-python", "true"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->config.min_nodes, 2);
  EXPECT_EQ(p->config.max_nodes, 2);
  EXPECT_EQ(p->config.rdzv_endpoint, "localhost:0");
  auto range = Parse({"--standalone", "--nnodes", "1:2", "--no-python", "true"});
  ASSERT_TRUE(range.ok()) << range.status().ToString();
  EXPECT_EQ(range->config.min_nodes, 1);
  EXPECT_EQ(range->config.max_nodes, 2);
}

// torchrun's config_from_args: --run-path wins over -m and --no-python,
// which only conflict without it; a missing script fails in its workers.
TEST(ArgsTest, EntrypointsAsTorchrunDecidesThem) {
  EXPECT_FALSE(Parse({"--no-python", "-m", "x"}).ok());
  for (auto also : {std::vector<std::string>{"-m"}, {"--no-python"}, {"--no-python", "-m"}}) {
    std::vector<std::string> args = {"--run-path"};
    args.insert(args.end(), also.begin(), also.end());
    args.insert(args.end(), {"/bin/sh", "a"});
    auto p = Parse(args);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->config.entrypoint_kind, EntrypointKind::kRunPath);
    EXPECT_EQ(p->config.worker_argv.back(), "a");
  }
  auto missing = Parse({"missing_script.py"});
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_EQ(missing->config.worker_argv.back(), "missing_script.py");
  EXPECT_TRUE(Parse({"--no-python", "no-such-program-anywhere"}).ok());
  EXPECT_FALSE(Parse({}).ok());
}

TEST(ArgsTest, RdzvConf) {
  auto p = Parse({"--rdzv-conf", "join_timeout=5, is_host=1", "--no-python", "true"});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->config.rdzv.join_timeout, std::chrono::seconds(5));
  EXPECT_EQ(p->config.rdzv.is_host, true);
  EXPECT_FALSE(Parse({"--rdzv-conf", "novalue", "--no-python", "true"}).ok());
  // Checked for a one-node job too, which never meets a backend.
  EXPECT_FALSE(Parse({"--rdzv-conf", "join_timeout=soon", "--no-python", "true"}).ok());
}

TEST(ArgsTest, HangTimeoutAndAction) {
  auto off = Parse({"--no-python", "true"});
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->config.hang_timeout_s, 0);
  EXPECT_FALSE(off->config.hang_fail);

  auto on = Parse({"--hang-timeout", "2.5", "--hang_action", "fail", "--no-python", "true"});
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_EQ(on->config.hang_timeout_s, 2.5);
  EXPECT_TRUE(on->config.hang_fail);

  auto bad = Parse({"--hang-timeout", "0", "--hang-action", "kill", "--no-python", "true"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--hang-timeout: expected seconds > 0, got '0'"),
            std::string::npos);
  EXPECT_NE(bad.status().message().find("--hang-action: expected report or fail, got 'kill'"),
            std::string::npos);

  auto alone = Parse({"--hang-action", "fail", "--no-python", "true"});
  ASSERT_FALSE(alone.ok());
  EXPECT_NE(alone.status().message().find("--hang-action needs --hang-timeout"), std::string::npos);
}

TEST(ArgsTest, StoreRelay) {
  auto plain = Parse({"--no-python", "true"});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->config.store_relay, LaunchConfig::StoreRelay::kAuto);
  auto on = Parse({"--store_relay", "on", "--no-python", "true"});
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_EQ(on->config.store_relay, LaunchConfig::StoreRelay::kOn);
  auto off = Parse({"--store-relay", "off", "--no-python", "true"});
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->config.store_relay, LaunchConfig::StoreRelay::kOff);
  auto bad = Parse({"--store-relay", "yes", "--no-python", "true"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--store-relay: expected auto, on or off, got 'yes'"),
            std::string::npos);
}

// Two mistakes in the flags, three in --rdzv-conf and a bad endpoint: one run,
// one message, a line each.
TEST(ArgsTest, EveryProblemOfTheCommandLineAtOnce) {
  auto p = Parse({"--nnodes", "x", "--max-restarts", "-1", "--rdzv-backend", "c10d",
                  "--rdzv-endpoint", "[::1", "--rdzv-conf",
                  "last_call_timeout=abc,join_timeout=soon,is_host=maybe", "--no-python", "true"});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = p.status().message();
  for (const char* needle :
       {"--nnodes: expected N or MIN:MAX", "--max-restarts: expected a whole number",
        "--rdzv-endpoint '[::1': an IPv6 address needs its closing ']'",
        "--rdzv-conf last_call_timeout=abc: expected seconds > 0",
        "--rdzv-conf join_timeout=soon: expected seconds > 0",
        "--rdzv-conf is_host=maybe: expected true or false"}) {
    EXPECT_NE(m.find(needle), std::string::npos) << needle << " not in:\n" << m;
  }
  EXPECT_EQ(std::count(m.begin(), m.end(), '\n'), 5) << m;
}

// Issue 16: a one-node job's two mistakes in one run. (Its example was
// `timeout=abc`; a one-node job runs c10d, implicitly --standalone as under
// torchrun 2.x, and c10d reads no `timeout`: torchrun 2.x runs that line.)
TEST(ArgsTest, TwoMistakesOfOneNodeInOneRun) {
  auto p = Parse({"--nnodes=x", "--rdzv-conf", "join_timeout=abc", "--no-python", "true"});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "--nnodes: expected N or MIN:MAX with 0 < MIN <= MAX, got 'x'\n"
            "--rdzv-conf join_timeout=abc: expected seconds > 0");
  EXPECT_TRUE(Parse({"--rdzv-conf", "timeout=abc", "--no-python", "true"}).ok());
}

// torch's own launcher test (test/distributed/launcher/test_run.py,
// test_launch_elastic) quotes inside the value, which torchrun runs: c10d
// reads no `timeout` and no `'join_timeout`.
TEST(ArgsTest, TorchsElasticTestCommandLineRuns) {
  auto p = Parse({"--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d",
                  "--rdzv-endpoint=localhost:29400",
                  "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'", "--rdzv-id=7",
                  "--monitor-interval=1", "--start-method=spawn", "train.py"});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->config.rdzv.last_call_timeout, std::chrono::seconds(1));
  EXPECT_EQ(p->config.rdzv.join_timeout, std::chrono::seconds(600));
}

// The observability flags and the variables behind them.
class ObservabilityArgsTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (const char* v :
         {"TRUN_EVENT_LOG", "TORCHELASTIC_HEALTH_CHECK_PORT", "TORCHELASTIC_ENABLE_FILE_TIMER",
          "TORCHELASTIC_TIMER_FILE", "PET_EVENT_LOG_FILE", "PET_HEALTH_CHECK_PORT"}) {
      unsetenv(v);
    }
  }
};

TEST_F(ObservabilityArgsTest, OffByDefault) {
  auto p = Parse({"--no-python", "true"});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->config.event_log_file, "");
  EXPECT_FALSE(p->config.health_check_port);
  EXPECT_FALSE(p->config.file_timer);
}

TEST_F(ObservabilityArgsTest, FlagsWinOverVariables) {
  setenv("TRUN_EVENT_LOG", "/tmp/env.jsonl", 1);
  setenv("TORCHELASTIC_HEALTH_CHECK_PORT", "8000", 1);
  auto env = Parse({"--no-python", "true"});
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->config.event_log_file, "/tmp/env.jsonl");
  EXPECT_EQ(env->config.health_check_port, 8000);
  auto flags = Parse({"--event-log-file", "/tmp/flag.jsonl", "--health_check_port", "0",
                      "--health-check-addr", "127.0.0.1", "--event-log-handler", "console",
                      "--no-python", "true"});
  ASSERT_TRUE(flags.ok()) << flags.status().ToString();
  EXPECT_EQ(flags->config.event_log_file, "/tmp/flag.jsonl");
  EXPECT_EQ(flags->config.health_check_port, 0);
  EXPECT_EQ(flags->config.health_check_addr, "127.0.0.1");
  EXPECT_EQ(flags->config.event_log_handler, "console");
}

TEST_F(ObservabilityArgsTest, BadValuesAreUsageErrors) {
  auto port = Parse({"--health-check-port", "http", "--no-python", "true"});
  ASSERT_FALSE(port.ok());
  EXPECT_NE(port.status().message().find("--health-check-port"), std::string::npos);
  setenv("TORCHELASTIC_HEALTH_CHECK_PORT", "70000", 1);
  EXPECT_FALSE(Parse({"--no-python", "true"}).ok());
  unsetenv("TORCHELASTIC_HEALTH_CHECK_PORT");
  auto addr = Parse({"--health-check-addr", "::1", "--no-python", "true"});
  ASSERT_FALSE(addr.ok());
  EXPECT_NE(addr.status().message().find("needs --health-check-port"), std::string::npos);
  EXPECT_FALSE(Parse({"--event-log-handler", "file", "--no-python", "true"}).ok());
}

TEST_F(ObservabilityArgsTest, FileTimerAsTorchReadsIt) {
  setenv("TORCHELASTIC_ENABLE_FILE_TIMER", "true", 1);
  EXPECT_FALSE(Parse({"--no-python", "true"})->config.file_timer);  // torch wants exactly 1
  setenv("TORCHELASTIC_ENABLE_FILE_TIMER", "1", 1);
  setenv("TORCHELASTIC_TIMER_FILE", "/tmp/my_timer", 1);
  auto p = Parse({"--no-python", "true"});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->config.file_timer);
  EXPECT_EQ(p->config.timer_file, "/tmp/my_timer");
}

}  // namespace
}  // namespace trun::launch
