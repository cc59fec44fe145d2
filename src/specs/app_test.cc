#include "specs/app.h"

#include <gtest/gtest.h>

namespace trun::specs {
namespace {

Role GoodRole(const std::string& name) {
  Role r;
  r.name = name;
  r.image = "img";
  r.entrypoint = "python3";
  return r;
}

TEST(ValidateTest, AcceptsAGoodApp) {
  AppDef app{"app", {GoodRole("a"), GoodRole("b")}, {}};
  EXPECT_TRUE(Validate(app).ok());
}

TEST(ValidateTest, ReportsEveryProblemAtOnce) {
  Role bad = GoodRole("a");
  bad.entrypoint = std::string(kMissing);
  bad.num_replicas = 0;
  bad.min_replicas = 3;
  bad.max_retries = -1;
  bad.resource.cpu = -2;
  bad.resource.gpu = 0;
  bad.resource.mem_mb = 10;
  bad.port_map["c10d"] = 70000;
  bad.env["A=B"] = "x";
  bad.mounts.push_back({MountType::kDevice, "/dev/fuse", "/dev/fuse", false, "rx"});
  AppDef app{"", {bad, GoodRole("a")}, {}};
  Status s = Validate(app);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  const std::string& m = s.message();
  for (const char* needle :
       {"the app has no name", "roles[0] ('a'): no entrypoint", "num_replicas must be at least 1",
        "min_replicas must be between 0 and num_replicas", "max_retries must be 0 or more",
        "resource.cpu must be 0 or more", "port_map[c10d]", "invalid name 'A=B'",
        "may only use the letters r, w, m", "roles[1] ('a'): another role has the same name"}) {
    EXPECT_NE(m.find(needle), std::string::npos) << needle << "\n" << m;
  }
}

TEST(ValidateTest, AnAppWithoutRoles) {
  EXPECT_NE(Validate(AppDef{"x", {}, {}}).message().find("no roles"), std::string::npos);
}

TEST(AppStateTest, NamesNumbersAndClasses) {
  EXPECT_EQ(AppStateName(AppState::kCancelled), "CANCELLED");
  EXPECT_EQ(static_cast<int>(AppState::kUnknown), 7);
  EXPECT_EQ(ParseAppState("RUNNING"), AppState::kRunning);
  EXPECT_FALSE(ParseAppState("running").has_value());
  EXPECT_TRUE(IsTerminal(AppState::kFailed));
  EXPECT_FALSE(IsTerminal(AppState::kRunning));
  EXPECT_TRUE(IsStarted(AppState::kRunning));
  EXPECT_FALSE(IsStarted(AppState::kPending));
}

TEST(AppHandleTest, ParsesAsTorchXDoes) {
  auto h = ParseAppHandle("local://trun/echo-abc");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->scheduler, "local");
  EXPECT_EQ(h->session, "trun");
  EXPECT_EQ(h->app_id, "echo-abc");
  EXPECT_EQ(h->ToString(), "local://trun/echo-abc");
  auto empty_session = ParseAppHandle("kubernetes:///ns:job");
  ASSERT_TRUE(empty_session.ok());
  EXPECT_EQ(empty_session->session, "");
  EXPECT_EQ(empty_session->app_id, "ns:job");
  EXPECT_FALSE(ParseAppHandle("echo-abc").ok());
  EXPECT_FALSE(ParseAppHandle("local://trun/").ok());
}

TEST(AppStatusTest, FormatShowsTheRootCauseOfAReplica) {
  AppStatus st;
  st.state = AppState::kFailed;
  st.num_restarts = 1;
  st.msg = "replica trainer/1 failed";
  ReplicaStatus ok{0, AppState::kSucceeded, "trainer", "host0", std::string(kNone), ""};
  ReplicaStatus bad{1,
                    AppState::kFailed,
                    "trainer",
                    "host1",
                    R"({"message": {"message": "ValueError: boom", "errorCode": 1,
                        "extraInfo": {"timestamp": "0"}}})",
                    ""};
  ReplicaStatus cancelled{2, AppState::kCancelled, "trainer", "host2", std::string(kNone), ""};
  st.roles.push_back({"trainer", {bad, ok, cancelled}});
  std::string f = st.Format();
  EXPECT_EQ(f.rfind("AppStatus:\n    State: FAILED\n    Num Restarts: 1\n    Roles: \n *trainer[0]:"
                    "SUCCEEDED\n  trainer[1]:FAILED (exitcode: 1)\n",
                    0),
            0u)
      << f;
  EXPECT_NE(f.find("        hostname: host1\n        error_msg: ValueError: boom"),
            std::string::npos);
  EXPECT_NE(f.find("trainer[2]:CANCELLED (no reply file)"), std::string::npos);
  EXPECT_NE(f.find("    UI URL: None\n"), std::string::npos);
  EXPECT_EQ(st.Format({"other"}).find("trainer["), std::string::npos);
}

TEST(AppStatusTest, ToJsonHasTorchXsKeys) {
  AppStatus st;
  st.state = AppState::kRunning;
  st.ui_url = "file:///tmp/x";
  st.roles.push_back({"echo", {{0, AppState::kRunning, "echo", "h", std::string(kNone), ""}}});
  auto j = st.ToJson();
  EXPECT_EQ(
      j.dump(),
      R"({"state":"RUNNING","num_restarts":0,"roles":[{"role":"echo","replicas":[{"id":0,)"
      R"("state":3,"role":"echo","hostname":"h","structured_error_msg":"<NONE>",)"
      R"("hostaddr":"h"}]}],"msg":"","structured_error_msg":"<NONE>","url":"file:///tmp/x"})");
}

}  // namespace
}  // namespace trun::specs
