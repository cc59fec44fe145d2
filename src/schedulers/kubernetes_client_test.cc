#include "schedulers/kubernetes_client.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "common/files.h"
#include "common/strings.h"

namespace trun::schedulers::kube {
namespace {

namespace fs = std::filesystem;

const char* kConfig = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: prod
  cluster:
    server: https://prod.example:6443/
    certificate-authority: certs/ca.pem
- name: lab
  cluster:
    server: https://10.0.0.1:6443
    insecure-skip-tls-verify: true
contexts:
- name: dev
  context: {cluster: prod, user: alice, namespace: ml}
- name: lab
  context: {cluster: lab, user: bob}
- name: cloud
  context: {cluster: lab, user: carol}
users:
- name: alice
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
- name: bob
  user: {token: abc.def}
- name: carol
  user:
    exec: {command: aws, args: [eks, get-token]}
)";

TEST(KubeConfig, CurrentContextWithClientCertificate) {
  auto c = ParseKubeConfig(kConfig, "/home/u/.kube", "/home/u/.kube/config");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->context, "dev");
  EXPECT_EQ(c->server, "https://prod.example:6443");
  EXPECT_EQ(c->ns, "ml");
  EXPECT_EQ(c->ca_file, "/home/u/.kube/certs/ca.pem");
  EXPECT_EQ(c->cert_pem, "CERT");
  EXPECT_EQ(c->key_pem, "KEY");
  EXPECT_FALSE(c->insecure);
}

TEST(KubeConfig, TokenInsecureAndDefaultNamespace) {
  auto c = ParseKubeConfig(kConfig, "/", "cfg", "lab");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->token, "abc.def");
  EXPECT_TRUE(c->insecure);
  EXPECT_EQ(c->ns, "default");
}

TEST(KubeConfig, ProblemsNameTheirCause) {
  auto exec = ParseKubeConfig(kConfig, "/", "cfg", "cloud");
  ASSERT_FALSE(exec.ok());
  EXPECT_NE(exec.status().message().find("exec or auth-provider plug-in"), std::string::npos);
  auto missing = ParseKubeConfig(kConfig, "/", "cfg", "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("the context 'nope' is not defined"),
            std::string::npos);
  auto none = ParseKubeConfig("kind: Config\n", "/", "cfg");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("sets no current-context"), std::string::npos);
}

TEST(KubeConfig, KubeconfigFilesMergeFirstWins) {
  fs::path dir = fs::temp_directory_path() / ("kubecfg-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ASSERT_TRUE(WriteFileAtomic((dir / "a").string(),
                              "clusters:\n- name: prod\n  cluster: {server: https://first}\n")
                  .ok());
  ASSERT_TRUE(WriteFileAtomic((dir / "b").string(), kConfig).ok());
  std::string list =
      (dir / "missing").string() + ":" + (dir / "a").string() + ":" + (dir / "b").string();
  ::setenv("KUBECONFIG", list.c_str(), 1);
  auto c = LoadKubeConfig("/nonexistent");
  ::unsetenv("KUBECONFIG");
  fs::remove_all(dir);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server, "https://first");
  EXPECT_EQ(c->ns, "ml");
}

TEST(KubeConfig, InClusterServiceAccount) {
  fs::path dir = fs::temp_directory_path() / ("kubesa-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ASSERT_TRUE(WriteFileAtomic((dir / "token").string(), "tok\n").ok());
  ASSERT_TRUE(WriteFileAtomic((dir / "namespace").string(), "team").ok());
  ::unsetenv("KUBECONFIG");
  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto c = LoadKubeConfig("/nonexistent", dir.string());
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
  auto none = LoadKubeConfig("/nonexistent", dir.string());
  fs::remove_all(dir);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  EXPECT_EQ(c->token, "tok");
  EXPECT_EQ(c->ns, "team");
  EXPECT_EQ(c->ca_file, dir.string() + "/ca.crt");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no Kubernetes configuration"), std::string::npos);
}

TEST(KubeClient, RepliesMapToStatusCodes) {
  auto err = [](long code, const std::string& body) {
    return ReplyError(HttpReply{code, body}, "create Job x", "https://k");
  };
  auto s =
      err(422, R"({"kind":"Status","message":"Job.batch \"x\" is invalid: spec.completions"})");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("spec.completions"), std::string::npos);
  EXPECT_EQ(err(401, "").code(), StatusCode::kIOError);
  EXPECT_EQ(err(403, "{}").code(), StatusCode::kIOError);
  EXPECT_EQ(err(404, "").code(), StatusCode::kNotFound);
  EXPECT_EQ(err(409, "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err(503, "etcdserver: leader changed").code(), StatusCode::kUnavailable);
  EXPECT_EQ(UrlEncode("a=b,c/d"), "a%3Db%2Cc%2Fd");
}

}  // namespace
}  // namespace trun::schedulers::kube
