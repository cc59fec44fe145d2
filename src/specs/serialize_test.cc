#include "specs/serialize.h"

#include <gtest/gtest.h>

namespace trun::specs {
namespace {

AppDef FullApp() {
  Role r;
  r.name = "trainer";
  r.image = "ghcr.io/x:1";
  r.min_replicas = 1;
  r.entrypoint = "bash";
  r.args = {"-c", "echo $x", "true", "1.5", "", "null", "a: b", "- x", "#c", "multi\nline"};
  r.env = {{"A", "1"}, {"B", "yes"}, {"EMPTY", ""}};
  r.num_replicas = 2;
  r.max_retries = 3;
  r.retry_policy = RetryPolicy::kReplica;
  r.resource.cpu = 4;
  r.resource.gpu = 1;
  r.resource.mem_mb = 8192;
  r.resource.capabilities = {{"node.kubernetes.io/instance-type", "p4d.24xlarge"}};
  r.resource.devices = {{"vpc.amazonaws.com/efa", 4}};
  r.resource.tags = {{"k", 1}};
  r.port_map = {{"c10d", 29500}};
  r.metadata = {{"kubernetes", {{"spec", {{"x", {1, "two", nullptr, true}}}}}}};
  r.mounts = {{MountType::kBind, "/a", "/b", true, "rwm"},
              {MountType::kVolume, "vol", "/v", false, "rwm"},
              {MountType::kDevice, "/dev/fuse", "/dev/fuse", false, "rw"}};
  r.workspace = Workspace{{{"/src", ""}, {"/lib", "lib"}}};
  Role minimal;
  minimal.name = "ps";
  minimal.image = "";
  minimal.entrypoint = "ps.py";
  return AppDef{"app", {r, minimal}, {{"owner", "me"}, {"true", "false"}}};
}

TEST(SerializeTest, JsonRoundTrip) {
  AppDef app = FullApp();
  auto j = ToJson(app);
  auto back = AppDefFromJson(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, app);
}

TEST(SerializeTest, JsonHasTorchXsFieldsInOrder) {
  auto j = ToJson(FullApp().roles[1]);
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys,
            (std::vector<std::string>{"name", "image", "min_replicas", "entrypoint", "args", "env",
                                      "num_replicas", "max_retries", "retry_policy", "resource",
                                      "port_map", "metadata", "mounts", "workspace"}));
  EXPECT_EQ(j["resource"].dump(),
            R"({"cpu":-1,"gpu":-1,"memMB":-1,"capabilities":{},"devices":{},"tags":{}})");
  EXPECT_EQ(j["retry_policy"], "APPLICATION");
  EXPECT_TRUE(j["min_replicas"].is_null());
}

TEST(SerializeTest, YamlRoundTrip) {
  AppDef app = FullApp();
  std::string yaml = AppDefToYaml(app);
  auto back = ParseAppDef(yaml);
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << yaml;
  EXPECT_EQ(*back, app) << yaml;
}

TEST(SerializeTest, ReadsHandWrittenYaml) {
  auto app = ParseAppDef(R"(
name: train
roles:
  - name: trainer
    image: 1.0
    entrypoint: python3
    args: [train.py, --lr, 0.1, --epochs, 10]
    env: {DEBUG: true}
    resource: gpu.small
    mounts:
      - type=bind,src=/data,dst=/data,readonly
    workspace: /home/me/proj
    retry_policy: role
)");
  ASSERT_TRUE(app.ok()) << app.status().message();
  const Role& r = app->roles[0];
  EXPECT_EQ(r.image, "1.0");
  EXPECT_EQ(r.args, (std::vector<std::string>{"train.py", "--lr", "0.1", "--epochs", "10"}));
  EXPECT_EQ(r.env.at("DEBUG"), "true");
  EXPECT_EQ(r.resource.gpu, 1);
  EXPECT_TRUE(r.mounts[0].read_only);
  EXPECT_EQ(r.workspace->projects.at("/home/me/proj"), "");
  EXPECT_EQ(r.retry_policy, RetryPolicy::kRole);
}

TEST(SerializeTest, ReportsEveryProblemWithItsPath) {
  auto app = ParseAppDef(R"(
name: x
rols: []
roles:
  - name: a
    entrypoint: e
    nmu_replicas: 2
    num_replicas: two
    max_retries: 1.5
    env: [a]
    resource: {cpu: 1, gpu: 0, memMB: 1, disk: 3}
    retry_policy: sometimes
    mounts: [{type: nfs}]
  - name: b
)");
  ASSERT_FALSE(app.ok());
  const std::string& e = app.status().message();
  for (const char* needle :
       {"the app: unknown field 'rols' (did you mean 'roles'?)",
        "roles[0]: unknown field 'nmu_replicas' (did you mean 'num_replicas'?)",
        "roles[0].num_replicas: expected an integer, got a string",
        "roles[0].max_retries: expected an integer, got 1.5",
        "roles[0].env: expected a mapping, got a list", "roles[0].resource: unknown field 'disk'",
        "roles[0].retry_policy: expected REPLICA, APPLICATION or ROLE, got 'sometimes'",
        "roles[0].mounts[0].type: expected bind, volume or device"}) {
    EXPECT_NE(e.find(needle), std::string::npos) << needle << "\n" << e;
  }
  // Semantic problems come once the document reads.
  auto no_entry = ParseAppDef("name: x\nroles: [{name: a}, {name: b, num_replicas: 0}]");
  ASSERT_FALSE(no_entry.ok());
  EXPECT_NE(no_entry.status().message().find("roles[0] ('a'): no entrypoint"), std::string::npos);
  EXPECT_NE(no_entry.status().message().find("roles[1] ('b'): no entrypoint"), std::string::npos);
  EXPECT_NE(no_entry.status().message().find("num_replicas must be at least 1"), std::string::npos);
}

TEST(SerializeTest, YamlSyntaxErrorsNameTheLine) {
  auto j = ParseYaml("name: x\nroles: [a, b\n");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("line "), std::string::npos);
  EXPECT_FALSE(ParseAppDef("[1, 2]").ok());
}

TEST(SerializeTest, YamlScalarsFollowTheCoreSchema) {
  auto j = ParseYaml("a: ~\nb: True\nc: 0x1f\nd: -3\ne: 1e3\nf: '1'\ng: yes\nh:\n");
  ASSERT_TRUE(j.ok());
  EXPECT_TRUE((*j)["a"].is_null());
  EXPECT_EQ((*j)["b"], true);
  EXPECT_EQ((*j)["c"], 31);
  EXPECT_EQ((*j)["d"], -3);
  EXPECT_EQ((*j)["e"], 1000.0);
  EXPECT_EQ((*j)["f"], "1");
  EXPECT_EQ((*j)["g"], "yes");
  EXPECT_TRUE((*j)["h"].is_null());
}

}  // namespace
}  // namespace trun::specs
