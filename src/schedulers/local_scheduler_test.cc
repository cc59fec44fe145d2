#include "schedulers/local_scheduler.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include "schedulers/local_state.h"

namespace trun::schedulers {
namespace {

namespace fs = std::filesystem;

class LocalSchedulerTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) / ("state" + std::to_string(getpid()));
    setenv("XDG_STATE_HOME", dir_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("XDG_STATE_HOME");
    fs::remove_all(dir_);
  }
  fs::path dir_;
};

specs::AppDef App() {
  specs::Role r;
  r.name = "trainer";
  r.image = "ignored";
  r.entrypoint = "sh";
  r.args = {"-c", "echo ${app_id} ${replica_id} ${img_root} $${TORCHX_RANK0_HOST}"};
  r.env = {{"ID", "${app_id}-${replica_id}"}, {"PATH", "/opt/role/bin"}};
  r.num_replicas = 2;
  r.max_retries = 3;
  r.retry_policy = specs::RetryPolicy::kRole;
  return specs::AppDef{"my app/1", {r}, {}};
}

TEST_F(LocalSchedulerTest, DryRunIsTheExactRequest) {
  LocalScheduler s("sess");
  auto info = s.SubmitDryRun(App(), {});
  ASSERT_TRUE(info.ok()) << info.status().message();
  const auto* req = std::get_if<local::Request>(&info->request);
  ASSERT_TRUE(req);
  EXPECT_TRUE(std::regex_match(req->app_id, std::regex("my-app-1-[b-z][b-z0-79]+"))) << req->app_id;
  EXPECT_EQ(req->session, "sess");
  EXPECT_EQ(req->app_dir, (dir_ / "trun" / "local" / req->app_id).string());
  EXPECT_EQ(req->stop_timeout_s, 10);
  const std::string cwd = fs::current_path().string();
  ASSERT_EQ(req->roles.size(), 1u);
  const auto& role = req->roles[0];
  EXPECT_EQ(role.max_retries, 3);
  EXPECT_EQ(role.retry_policy, specs::RetryPolicy::kRole);
  ASSERT_EQ(role.replicas.size(), 2u);
  const auto& r1 = role.replicas[1];
  EXPECT_EQ(r1.argv[0].back(), 'h');  // resolved: /usr/bin/sh or /bin/sh
  EXPECT_EQ(r1.argv[0].front(), '/');
  EXPECT_EQ(r1.argv[2], "echo " + req->app_id + " 1 " + cwd + " ${TORCHX_RANK0_HOST}");
  EXPECT_EQ(r1.env.at("ID"), req->app_id + "-1");
  EXPECT_EQ(r1.env.at("TORCHX_RANK0_HOST"), "localhost");
  EXPECT_EQ(r1.env.at("TORCHELASTIC_ERROR_FILE"), req->app_dir + "/trainer/1/error.json");
  EXPECT_EQ(r1.env.at("PET_LOG_DIR"), req->app_dir + "/torchelastic/trainer");
  EXPECT_EQ(r1.env.at("PATH").rfind("/opt/role/bin:", 0), 0u);
  EXPECT_EQ(r1.env.at("PATH").substr(r1.env.at("PATH").size() - cwd.size() - 1), ":" + cwd);
  EXPECT_EQ(r1.cwd, cwd);
  EXPECT_EQ(r1.log_dir, req->app_dir + "/trainer/1");
  EXPECT_EQ(std::get<double>(info->cfg.at("stop_timeout")), 10.0);
  // Nothing was created by a dry run.
  EXPECT_FALSE(fs::exists(req->app_dir));
  // The JSON printed and stored as request.json, which the supervisor reads.
  auto stored = local::RequestFromJson(nlohmann::json::parse(info->RequestJson().dump()));
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  EXPECT_EQ(local::ToJson(*stored), local::ToJson(*req));
}

TEST_F(LocalSchedulerTest, OnlyARoleThatRunsTrunsAgentGetsTheJobToken) {
  specs::AppDef app = App();
  specs::Role agent = app.roles[0];
  agent.name = "agent";
  agent.metadata[specs::kJobTokenRoleKey] = true;
  app.roles.push_back(agent);
  LocalScheduler s("sess");
  auto info = s.SubmitDryRun(app, {});
  ASSERT_TRUE(info.ok()) << info.status().message();
  const auto* req = std::get_if<local::Request>(&info->request);
  ASSERT_TRUE(req);
  ASSERT_EQ(req->roles.size(), 2u);
  EXPECT_FALSE(req->roles[0].job_token);
  EXPECT_TRUE(req->roles[1].job_token);
}

TEST_F(LocalSchedulerTest, RunOptionsShapeTheRequest) {
  LocalScheduler s("sess");
  auto cfg = s.RunOpts().CfgFromStr("log_dir=/logs,prepend_cwd=true,stop_timeout=2", "local");
  ASSERT_TRUE(cfg.ok());
  auto info = s.SubmitDryRun(App(), *cfg);
  ASSERT_TRUE(info.ok()) << info.status().message();
  const auto* req = std::get_if<local::Request>(&info->request);
  ASSERT_TRUE(req);
  const auto& r0 = req->roles[0].replicas[0];
  EXPECT_EQ(r0.log_dir, "/logs/sess/" + req->app_id + "/trainer/0");
  EXPECT_EQ(r0.env.at("PATH").rfind(fs::current_path().string() + ":/opt/role/bin", 0), 0u);
  EXPECT_EQ(req->stop_timeout_s, 2);
}

TEST_F(LocalSchedulerTest, DryRunReportsEveryProblem) {
  specs::AppDef app = App();
  app.roles[0].entrypoint = "no-such-program-anywhere";
  specs::Role other = app.roles[0];
  other.name = "a/b";
  app.roles.push_back(other);
  LocalScheduler s("sess");
  auto info = s.SubmitDryRun(app, {});
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(info.status().message().find("'no-such-program-anywhere' is not a program on PATH"),
            std::string::npos);
  EXPECT_NE(info.status().message().find("role 'a/b'"), std::string::npos);
  // A bad cfg value and an invalid AppDef are caught before the request.
  EXPECT_FALSE(s.SubmitDryRun(App(), {{"stop_timeout", std::string("x")}}).ok());
  specs::AppDef empty = App();
  empty.roles[0].num_replicas = 0;
  EXPECT_FALSE(s.SubmitDryRun(empty, {}).ok());
}

TEST_F(LocalSchedulerTest, UnknownAppsGetASuggestion) {
  fs::create_directories(dir_ / "trun" / "local" / "echo-bcdf");
  LocalScheduler s("sess");
  auto d = s.Describe("echo-bcdg");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnknownApp);
  EXPECT_NE(d.status().message().find("did you mean 'echo-bcdf'"), std::string::npos);
  EXPECT_FALSE(s.Cancel("nope").ok());
  EXPECT_TRUE(s.List()->empty());
}

TEST_F(LocalSchedulerTest, ADeadSupervisorsAppIsFailed) {
  local::State st;
  st.app_id = "x-b";
  st.session = "s";
  st.name = "x";
  st.state = specs::AppState::kRunning;
  st.supervisor_pid = 1;  // init: alive, but not started when recorded
  st.supervisor_start = 12345678;
  st.roles.push_back({"r", 0, {{0, specs::AppState::kRunning, 0, std::nullopt, "<NONE>"}}});
  fs::create_directories(dir_ / "trun" / "local" / "x-b");
  ASSERT_TRUE(local::WriteState((dir_ / "trun" / "local" / "x-b").string(), st).ok());
  LocalScheduler s("s");
  auto d = s.Describe("x-b");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->state, specs::AppState::kFailed);
  EXPECT_NE(d->msg.find("supervisor (pid 1) is gone"), std::string::npos);
  EXPECT_EQ(d->roles_statuses[0].replicas[0].state, specs::AppState::kUnknown);
  auto listed = s.List();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].app_handle, "local://s/x-b");
  // Cancel records CANCELLED itself when nobody else can.
  ASSERT_TRUE(s.Cancel("x-b").ok());
  EXPECT_EQ(s.Describe("x-b")->state, specs::AppState::kCancelled);
  // Delete removes the app: it is unknown afterwards, and deleting it again
  // says so.
  ASSERT_TRUE(s.Delete("x-b").ok());
  EXPECT_FALSE(fs::exists(dir_ / "trun" / "local" / "x-b"));
  EXPECT_EQ(s.Describe("x-b").status().code(), StatusCode::kUnknownApp);
  EXPECT_TRUE(s.List()->empty());
  EXPECT_EQ(s.Delete("x-b").code(), StatusCode::kUnknownApp);
}

TEST(LocalStateTest, RoundTrips) {
  local::State st;
  st.app_id = "a-b";
  st.session = "s";
  st.name = "a";
  st.state = specs::AppState::kFailed;
  st.num_restarts = 2;
  st.msg = "m";
  st.structured_error_msg = "{}";
  st.supervisor_pid = 42;
  st.supervisor_start = 7;
  st.submitted_at = 1.5;
  st.roles.push_back({"r",
                      1,
                      {{0, specs::AppState::kSucceeded, 9, 0, "<NONE>"},
                       {1, specs::AppState::kFailed, 10, -9, "{}"}}});
  auto back = local::StateFromJson(nlohmann::json::parse(local::ToJson(st).dump()));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(local::ToJson(*back).dump(), local::ToJson(st).dump());
  EXPECT_FALSE(local::StateFromJson(nlohmann::json::parse("{\"app_id\": 1}")).ok());
  EXPECT_GT(local::ProcessStartTime(getpid()), 0u);
  EXPECT_TRUE(local::ProcessIs(getpid(), local::ProcessStartTime(getpid())));
  EXPECT_FALSE(local::ProcessIs(getpid(), 1));
}

TEST(SchedulersTest, TableAndIds) {
  EXPECT_TRUE(CreateScheduler("local", "s").ok());
  EXPECT_TRUE(CreateScheduler("slurm", "s").ok());
  EXPECT_TRUE(CreateScheduler("kubernetes", "s").ok());
  auto typo = CreateScheduler("locl", "s");
  EXPECT_EQ(typo.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(typo.status().message().find("did you mean 'local'"), std::string::npos);
  for (int i = 0; i < 100; ++i) {
    std::string id = RandomId();
    EXPECT_TRUE(
        std::regex_match(id, std::regex("[bcdfghjklmnpqrstvwxz][bcdfghjklmnpqrstvwxz0-79]*")))
        << id;
  }
  const std::string home = getenv("HOME") ? getenv("HOME") : "";
  setenv("XDG_STATE_HOME", "/x", 1);
  EXPECT_EQ(StateRoot(), "/x/trun");
  setenv("XDG_STATE_HOME", "relative", 1);  // not absolute: ignored, as the spec says
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(StateRoot(), "/home/u/.local/state/trun");
  unsetenv("XDG_STATE_HOME");
  setenv("HOME", home.c_str(), 1);
}

}  // namespace
}  // namespace trun::schedulers
