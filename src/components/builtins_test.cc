#include "components/builtins.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "specs/macros.h"

namespace trun::components {
namespace {

constexpr const char* kTrun = "/opt/trun/bin/trun";

TEST(ParseJTest, TorchXsThreeForms) {
  auto e = ParseJ("1:2x4");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->min_nodes, 1);
  EXPECT_EQ(e->max_nodes, 2);
  EXPECT_EQ(e->nproc_per_node, 4);
  EXPECT_EQ(e->nnodes, "1:2");
  auto f = ParseJ("2x3");
  EXPECT_EQ(f->min_nodes, 2);
  EXPECT_EQ(f->max_nodes, 2);
  EXPECT_EQ(f->nnodes, "2");
  auto one = ParseJ("8");
  EXPECT_EQ(one->max_nodes, 1);
  EXPECT_EQ(one->nproc_per_node, 8);
  EXPECT_EQ(one->nnodes, "1");
  auto most = ParseJ("100000x100000");
  ASSERT_TRUE(most.ok());
  EXPECT_EQ(most->max_nodes, kMaxJ);
  for (const char* bad : {"", "x", "2x", "x4", "1:x4", "2:1x4", "0x4", "2x0", "1x2x3", "a1x2",
                          " 2x2", "-1x2", "1.5x2", "100001x1", "1x100001", "1:100001x1",
                          "99999999999999999999x1", "1x99999999999999999999"}) {
    auto r = ParseJ(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("-j"), std::string::npos);
    }
  }
}

Result<specs::AppDef> Build(const std::string& name, std::vector<std::string> argv) {
  auto c = FindComponent(name, kTrun);
  if (!c.ok()) return c.status();
  auto parsed = ParseComponentArgs(*c, argv, {});
  if (!parsed.ok()) return parsed.status();
  return Materialize(*c, parsed->args);
}

std::string Command(const specs::AppDef& app) {
  EXPECT_EQ(app.roles[0].entrypoint, "bash");
  EXPECT_EQ(app.roles[0].args[0], "-c");
  return app.roles[0].args[1];
}

TEST(DdpTest, MultiNodeCommandIsTorchXsWithTrun) {
  unsetenv("LOGLEVEL");
  auto app = Build("dist.ddp", {"-j", "1:2x4", "--script", "main.py", "--", "--lr", "0.1"});
  ASSERT_TRUE(app.ok()) << app.status().message();
  EXPECT_EQ(Command(*app),
            "/opt/trun/bin/trun --rdzv_backend c10d --rdzv_endpoint "
            "$${${rank0_env}:=localhost}:29500 --rdzv_id '${app_id}' --nnodes 1:2 "
            "--nproc_per_node 4 --tee 3 --role '' main.py --lr 0.1");
  // After the scheduler's macros: TorchX's verified command, with trun.
  specs::MacroValues v{"/img", "main-abc", "0", "TORCHX_RANK0_HOST"};
  EXPECT_EQ(v.Apply(app->roles[0]).args[1],
            "/opt/trun/bin/trun --rdzv_backend c10d --rdzv_endpoint "
            "${TORCHX_RANK0_HOST:=localhost}:29500 --rdzv_id 'main-abc' --nnodes 1:2 "
            "--nproc_per_node 4 --tee 3 --role '' main.py --lr 0.1");
  const specs::Role& r = app->roles[0];
  EXPECT_EQ(app->name, "main");
  EXPECT_EQ(r.name, "main");
  EXPECT_EQ(r.num_replicas, 2);
  EXPECT_EQ(r.min_replicas, 1);
  EXPECT_EQ(r.port_map.at("c10d"), 29500);
  EXPECT_EQ(r.resource.cpu, 2);
  EXPECT_EQ(r.resource.mem_mb, 1024);
  EXPECT_EQ(r.env.at("LOGLEVEL"), "WARNING");
  EXPECT_EQ(r.env.at("TORCHX_TRACKING_EXPERIMENT_NAME"), "default-experiment");
  EXPECT_EQ(r.env.at("TORCHX_TRACKING_RUN_NAME"), "main");
  EXPECT_EQ(r.image, DefaultImage());
  // Its replicas run trun's agent: the local scheduler gives them, and only
  // them, the job token.
  EXPECT_TRUE(specs::RunsTrunsAgent(r));
}

TEST(DdpTest, OneNodeUsesAFreePort) {
  auto app = Build("dist.ddp", {"-m", "pkg.train", "--name", "exp/", "--rdzv_conf",
                                "join_timeout=600", "--debug", "true", "--tee", "0"});
  ASSERT_TRUE(app.ok()) << app.status().message();
  EXPECT_EQ(Command(*app),
            "/opt/trun/bin/trun --rdzv_backend c10d --rdzv_conf join_timeout=600 "
            "--rdzv_endpoint localhost:0 --rdzv_id '${app_id}' --nnodes 1 --nproc_per_node 2 "
            "--tee 0 --role '' -m pkg.train");
  const specs::Role& r = app->roles[0];
  EXPECT_EQ(r.name, "train");
  EXPECT_EQ(app->name, "train");
  EXPECT_EQ(r.env.at("TORCHX_TRACKING_EXPERIMENT_NAME"), "exp");
  EXPECT_EQ(r.env.at("TORCH_DISTRIBUTED_DEBUG"), "DETAIL");
  EXPECT_EQ(r.env.at("CUDA_LAUNCH_BLOCKING"), "1");
}

TEST(DdpTest, StaticBackendGivesNodeRankAndMaster) {
  auto app = Build("dist.ddp", {"-j",
                                "2x1",
                                "--rdzv_backend",
                                "static",
                                "--rdzv_port",
                                "4000",
                                "--script",
                                "dir/my train.py",
                                "a b",
                                "--name",
                                "/run1",
                                "-h",
                                "cpu.small",
                                "--env",
                                "A=1",
                                "--metadata",
                                "k=v",
                                "--mounts",
                                "type=bind,src=/d,dst=/d",
                                "--max_retries",
                                "2"});
  ASSERT_TRUE(app.ok()) << app.status().message();
  EXPECT_EQ(Command(*app),
            "/opt/trun/bin/trun --rdzv_backend static --rdzv_endpoint "
            "$${${rank0_env}:=localhost}:4000 --rdzv_id '${app_id}' --nnodes 2 --nproc_per_node "
            "1 --tee 3 --role '' --node_rank '${replica_id}' --master_addr "
            "$${${rank0_env}:=localhost} --master_port 4000 'dir/my train.py' 'a b' --name /run1 "
            "-h cpu.small --env A=1 --metadata k=v --mounts type=bind,src=/d,dst=/d "
            "--max_retries 2");
  EXPECT_EQ(app->roles[0].name, "my train");
  EXPECT_EQ(app->name, "my train");
}

TEST(DdpTest, NamedResourceEnvMountsRetries) {
  auto app = Build("dist.ddp", {"--script", "t.py", "-h", "aws_p4d.24xlarge", "--env", "A=1,B=2",
                                "--metadata", "k=v", "--mounts", "type=bind,src=/d,dst=/d,readonly",
                                "--max_retries", "2", "--name", "e/r"});
  ASSERT_TRUE(app.ok()) << app.status().message();
  const specs::Role& r = app->roles[0];
  EXPECT_EQ(r.resource.mem_mb, 1132416);
  EXPECT_EQ(r.env.at("B"), "2");
  EXPECT_EQ(app->metadata.at("k"), "v");
  EXPECT_TRUE(r.mounts[0].read_only);
  EXPECT_EQ(r.max_retries, 2);
  EXPECT_EQ(app->name, "r");
}

TEST(DdpTest, BadInputs) {
  for (const auto& [argv, needle] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"-j", "2x2"}, "exactly one of --script and -m"},
           {{"--script", "a.py", "-m", "b"}, "exactly one of --script and -m"},
           {{"--script", "a.py", "-j", "2y2"}, "-j: expected [MIN:]MAXxNPROC"},
           {{"--script", "a.py", "-h", "gpu.smal"}, "did you mean 'gpu.small'"},
           {{"--script", "a.py", "--tee", "7"}, "--tee: expected 0"},
           {{"--script", "a.py", "--rdzv_port", "0"}, "--rdzv_port"},
           {{"--script", "a.py", "--mounts", "type=nfs,src=a,dst=b"}, "invalid mount type"},
       }) {
    auto app = Build("dist.ddp", argv);
    ASSERT_FALSE(app.ok()) << needle;
    EXPECT_EQ(app.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(app.status().message().find(needle), std::string::npos) << app.status().message();
  }
}

TEST(SpmdTest, ProcessesPerNodeFromTheHostsGpus) {
  auto app = Build("dist.spmd", {"-j", "2", "-h", "aws_p4d.24xlarge", "--script", "t.py"});
  ASSERT_TRUE(app.ok()) << app.status().message();
  EXPECT_NE(Command(*app).find("--nnodes 2 --nproc_per_node 8"), std::string::npos);
  EXPECT_EQ(app->roles[0].resource.gpu, 8);
  auto given = Build("dist.spmd", {"-j", "1x4", "--script", "t.py"});
  ASSERT_TRUE(given.ok());
  EXPECT_NE(Command(*given).find("--nnodes 1 --nproc_per_node 4"), std::string::npos);
  auto cpu = Build("dist.spmd", {"-j", "2", "-h", "aws_trn1.32xlarge", "--script", "t.py"});
  ASSERT_FALSE(cpu.ok());
  EXPECT_NE(cpu.status().message().find("has no GPUs"), std::string::npos);
}

TEST(TorchrunTest, DdpsReadingWithoutAHostAndSpmdsWithOne) {
  // Without -h: dist.ddp's app, bare -j included (processes on one node).
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {"-j", "2x4", "--script", "t.py", "a"},
           {"-j", "4", "--script", "t.py"},
           {"-j", "1:3x2", "--cpu", "8", "-m", "pkg.train", "--rdzv_port", "29600"}}) {
    auto torchrun = Build("dist.torchrun", argv);
    auto ddp = Build("dist.ddp", argv);
    ASSERT_TRUE(torchrun.ok()) << torchrun.status().message();
    ASSERT_TRUE(ddp.ok());
    EXPECT_EQ(Command(*torchrun), Command(*ddp));
    EXPECT_EQ(torchrun->roles[0].num_replicas, ddp->roles[0].num_replicas);
    EXPECT_EQ(torchrun->roles[0].resource.cpu, ddp->roles[0].resource.cpu);
  }
  auto defaults = Build("dist.torchrun", {"--script", "t.py"});
  ASSERT_TRUE(defaults.ok());
  EXPECT_NE(Command(*defaults).find("--nnodes 1 --nproc_per_node 2"), std::string::npos);
  EXPECT_EQ(defaults->roles[0].resource.cpu, 2);
  EXPECT_EQ(defaults->roles[0].resource.gpu, 0);
  EXPECT_EQ(defaults->roles[0].resource.mem_mb, 1024);

  // With -h: a bare -j counts nodes of one process per GPU; NxP stays.
  auto nodes = Build("dist.torchrun", {"-j", "2", "-h", "aws_p4d.24xlarge", "--script", "t.py"});
  ASSERT_TRUE(nodes.ok()) << nodes.status().message();
  EXPECT_NE(Command(*nodes).find("--nnodes 2 --nproc_per_node 8"), std::string::npos);
  EXPECT_EQ(nodes->roles[0].num_replicas, 2);
  EXPECT_EQ(nodes->roles[0].resource.gpu, 8);
  auto elastic = Build("dist.torchrun", {"-j", "1:4", "-h", "gpu.small", "--script", "t.py"});
  ASSERT_TRUE(elastic.ok()) << elastic.status().message();
  EXPECT_NE(Command(*elastic).find("--nnodes 1:4 --nproc_per_node 1"), std::string::npos);
  EXPECT_EQ(elastic->roles[0].min_replicas, 1);
  EXPECT_EQ(elastic->roles[0].num_replicas, 4);
  // An empty -h is no host, as in dist.ddp.
  auto empty = Build("dist.torchrun", {"-j", "2", "-h", "", "--script", "t.py"});
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_NE(Command(*empty).find("--nnodes 1 --nproc_per_node 2"), std::string::npos);
  auto given = Build("dist.torchrun", {"-j", "1x2", "-h", "gpu.small", "--script", "t.py"});
  ASSERT_TRUE(given.ok());
  EXPECT_NE(Command(*given).find("--nnodes 1 --nproc_per_node 2"), std::string::npos);

  for (const auto& [argv, needle] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"-j", "2", "-h", "aws_trn1.32xlarge", "--script", "t.py"},
            "has no GPUs; give -j 2xNPROC"},
           {{"-j", "two", "-h", "gpu.small", "--script", "t.py"}, "with -h, expected [MIN:]NODES"},
           {{"-j", "2", "-h", "gpu.smal", "--script", "t.py"}, "did you mean 'gpu.small'"},
           {{"-j", "2", "-h", "gpu.small"}, "exactly one of --script and -m"},
           // The nodes' form and range before the host's GPUs.
           {{"-j", "0", "-h", "gpu.small", "--script", "t.py"}, "needs 1 <= MIN <= MAX <= 100000"},
           {{"-j", "2:1", "-h", "gpu.small", "--script", "t.py"}, "needs 1 <= MIN <= MAX"},
           {{"-j", "0", "-h", "aws_trn1.32xlarge", "--script", "t.py"}, "needs 1 <= MIN"},
           {{"-j", "two", "-h", "aws_trn1.32xlarge", "--script", "t.py"}, "expected [MIN:]NODES"},
           {{"-j", "200000", "-h", "gpu.small", "--script", "t.py"}, "<= 100000 nodes"},
           {{"-j", "99999999999999999999", "-h", "gpu.small", "--script", "t.py"},
            "<= 100000 nodes"},
           {{"-j", "99999999999999999999x1", "--script", "t.py"}, "at most 100000 nodes"}}) {
    auto app = Build("dist.torchrun", argv);
    ASSERT_FALSE(app.ok()) << needle;
    EXPECT_EQ(app.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(app.status().message().find(needle), std::string::npos) << app.status().message();
  }
}

TEST(UtilsTest, EveryBuiltinBuilds) {
  auto echo = Build("utils.echo", {"--msg", "hi there"});
  ASSERT_TRUE(echo.ok());
  EXPECT_EQ(echo->roles[0].entrypoint, "echo");
  EXPECT_EQ(echo->roles[0].args, (std::vector<std::string>{"hi there"}));
  EXPECT_EQ(echo->roles[0].resource.cpu, 1);

  auto sh = Build("utils.sh", {"--num_replicas", "2", "echo", "a b", "$HOME"});
  ASSERT_TRUE(sh.ok());
  EXPECT_EQ(sh->roles[0].args, (std::vector<std::string>{"-c", "echo 'a b' '$HOME'"}));
  EXPECT_EQ(sh->roles[0].num_replicas, 2);
  auto sh_ep = Build("utils.sh", {"--entrypoint", "bash", "x y"});
  EXPECT_EQ(sh_ep->roles[0].entrypoint, "bash");
  EXPECT_EQ(sh_ep->roles[0].args, (std::vector<std::string>{"'x y'"}));

  auto py = Build("utils.python", {"-m", "json.tool", "--", "--indent", "2"});
  ASSERT_TRUE(py.ok());
  EXPECT_EQ(py->roles[0].entrypoint, "python3");
  EXPECT_EQ(py->roles[0].args, (std::vector<std::string>{"-m", "json.tool", "--indent", "2"}));
  EXPECT_EQ(py->roles[0].env.at("HYDRA_MAIN_MODULE"), "json.tool");
  EXPECT_EQ(py->name, "trun_utils_python");
  EXPECT_FALSE(Build("utils.python", {"-m", "a", "-c", "b"}).ok());

  auto bin = Build("utils.binary", {"--entrypoint", "/bin/true", "x"});
  ASSERT_TRUE(bin.ok());
  EXPECT_EQ(bin->roles[0].image, "<NONE>");
  EXPECT_FALSE(Build("utils.binary", {}).ok());

  auto touch = Build("utils.touch", {"--file", "/tmp/f"});
  ASSERT_TRUE(touch.ok());
  EXPECT_EQ(touch->roles[0].args, (std::vector<std::string>{"/tmp/f"}));

  auto copy = Build("utils.copy", {"--src", "/a", "--dst", "/b"});
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(copy->roles[0].args.back(), "/b");

  auto booth = Build("utils.booth", {"--x1", "1", "--x2", "2.5", "--trial_idx", "3"});
  ASSERT_TRUE(booth.ok());
  EXPECT_EQ(booth->name, "trun-utils-booth");
  EXPECT_EQ(booth->roles[0].entrypoint, "python3");
  EXPECT_EQ(
      booth->roles[0].args,
      (std::vector<std::string>{"-m", "trun.apps.utils.booth_main", "--x1", "1.0", "--x2", "2.5",
                                "--trial_idx", "3", "--tracker_base", "/tmp/torchx-util-booth"}));
  EXPECT_FALSE(Build("utils.booth", {"--x1", "1"}).ok());
}

TEST(FindComponentTest, SuggestsABuiltin) {
  auto c = FindComponent("dist.dpp", kTrun);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("did you mean 'dist.ddp'"), std::string::npos);
  auto names = Builtins(kTrun);
  ASSERT_EQ(names.size(), 10u);
  EXPECT_EQ(names[0].name, "dist.ddp");
}

TEST(FileComponentTest, ParameterisedAppDef) {
  std::string path = testing::TempDir() + "/train.yaml";
  std::ofstream(path) << R"(description: |
  Trains my model.
  Second line.
params:
  lr: {type: float, default: 0.01, help: learning rate}
  nodes: {type: int, default: 1}
  data: {type: str, help: where the data is}
  tags: {type: list, default: [a, b]}
  env: {type: dict, default: {X: "1"}}
  debug: {type: bool, default: false}
  config: {type: str, aliases: [-cn], default: base}
  rest: {type: varargs}
app:
  name: train-${nodes}
  roles:
    - name: trainer
      image: img
      entrypoint: python3
      args: [train.py, --lr, "${lr}", --data, "${data}", "--tags=${tags}", "--dbg=$debug",
             "${app_id}", "$${HOME}", "-c", "${config}", "${rest}"]
      env: ${env}
      num_replicas: ${nodes}
)";
  auto c = FindComponent(path, kTrun);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->summary, "Trains my model.");
  auto parsed = ParseComponentArgs(
      *c, {"--lr", "0.5", "--data", "/d", "--nodes", "3", "-cn", "big", "--", "--x", "y"}, {});
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  auto app = Materialize(*c, parsed->args);
  ASSERT_TRUE(app.ok()) << app.status().message();
  EXPECT_EQ(app->name, "train-3");
  const specs::Role& r = app->roles[0];
  EXPECT_EQ(r.num_replicas, 3);
  EXPECT_EQ(r.args, (std::vector<std::string>{"train.py", "--lr", "0.5", "--data", "/d",
                                              "--tags=a,b", "--dbg=false", "${app_id}", "$${HOME}",
                                              "-c", "big", "--x", "y"}));
  EXPECT_EQ(r.env.at("X"), "1");
  auto missing = ParseComponentArgs(*c, {}, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("the argument --data is required"), std::string::npos);
}

TEST(FileComponentTest, PlainAppDefAndBadFiles) {
  std::string plain = testing::TempDir() + "/app.json";
  std::ofstream(plain)
      << R"({"name": "a", "roles": [{"name": "r", "image": "", "entrypoint": "true"}]})";
  auto c = FindComponent(plain, kTrun);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->params.empty());
  EXPECT_EQ(c->build({})->roles[0].entrypoint, "true");

  std::string bad = testing::TempDir() + "/bad.yaml";
  std::ofstream(bad) << "params:\n  app_id: {type: str}\n  n: {type: integer}\n"
                        "  m: {type: int, default: x, hlp: y}\napp: {name: x}\nextra: 1\n";
  auto b = FindComponent(bad, kTrun);
  ASSERT_FALSE(b.ok());
  for (const char* needle :
       {"taken by TorchX's macro ${app_id}", "params.n.type: expected str, int", "params.m.default",
        "unknown field 'hlp' (did you mean 'help'?)", "unknown field 'extra'"}) {
    EXPECT_NE(b.status().message().find(needle), std::string::npos) << needle << "\n"
                                                                    << b.status().message();
  }
  auto gone = FindComponent("./nope.yaml", kTrun);
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find("no such file"), std::string::npos);
}

}  // namespace
}  // namespace trun::components
