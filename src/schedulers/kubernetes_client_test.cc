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
    tls-server-name: api.lab
    extensions:
    - name: client.authentication.k8s.io/exec
      extension: {audience: lab}
contexts:
- name: dev
  context: {cluster: prod, user: alice, namespace: ml}
- name: lab
  context: {cluster: lab, user: bob}
- name: cloud
  context: {cluster: lab, user: carol}
- name: old
  context: {cluster: lab, user: dave}
- name: prod-exec
  context: {cluster: prod, user: erin}
users:
- name: alice
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
- name: bob
  user: {token: abc.def}
- name: carol
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: bin/login
      args: [eks, get-token]
      env: [{name: AWS_PROFILE, value: ml}]
      installHint: install the login helper
      interactiveMode: Never
      provideClusterInfo: true
- name: dave
  user:
    auth-provider: {name: gcp}
- name: erin
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: login}
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

TEST(KubeConfig, ExecPluginAsKubectlRunsIt) {
  auto c = ParseKubeConfig(kConfig, "/home/u/.kube", "cfg", "cloud");
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE(c->exec.has_value());
  const ExecPlugin& p = *c->exec;
  EXPECT_EQ(p.command, "/home/u/.kube/bin/login");  // relative with a '/': to the kubeconfig
  EXPECT_EQ(p.args, (std::vector<std::string>{"eks", "get-token"}));
  ASSERT_EQ(p.env.size(), 1u);
  EXPECT_EQ(p.env[0], (std::pair<std::string, std::string>{"AWS_PROFILE", "ml"}));
  EXPECT_EQ(p.install_hint, "install the login helper");
  EXPECT_EQ(
      ExecInfo(p),
      R"({"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1",)"
      R"("spec":{"cluster":{"server":"https://10.0.0.1:6443","tls-server-name":"api.lab",)"
      R"("insecure-skip-tls-verify":true,"config":{"audience":"lab"}},"interactive":false}})");
  // v1beta1: interactiveMode may be left out; no cluster unless asked for.
  auto beta = ParseKubeConfig(kConfig, "/", "cfg", "prod-exec");
  ASSERT_TRUE(beta.ok()) << beta.status().message();
  EXPECT_EQ(beta->exec->command, "login");  // no '/': looked up on PATH
  EXPECT_EQ(ExecInfo(*beta->exec), R"({"kind":"ExecCredential","apiVersion":)"
                                   R"("client.authentication.k8s.io/v1beta1",)"
                                   R"("spec":{"interactive":false}})");
}

TEST(KubeConfig, ExecPluginProblemsNameTheFix) {
  auto with = [](const std::string& exec) {
    return ParseKubeConfig(
        "current-context: f\nclusters:\n- name: c\n  cluster: {server: https://k}\n"
        "contexts:\n- name: f\n  context: {cluster: c, user: frank}\n"
        "users:\n- name: frank\n  user:\n    exec: " +
            exec + "\n",
        "/", "cfg");
  };
  auto expect = [&](const std::string& exec, const std::string& says) {
    auto c = with(exec);
    ASSERT_FALSE(c.ok()) << exec;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << exec;
    EXPECT_NE(c.status().message().find(says), std::string::npos) << c.status().message();
  };
  const std::string v1 = "apiVersion: client.authentication.k8s.io/v1";
  expect("{" + v1 + ", command: x, interactiveMode: Always}",
         "interactiveMode is Always, but trun runs the plug-in without a terminal; set "
         "interactiveMode: IfAvailable (or Never)");
  expect("{" + v1 + ", command: x}", "interactiveMode must be set");
  expect("{" + v1 + ", interactiveMode: Never}", "exec has no command");
  expect("{apiVersion: client.authentication.k8s.io/v1alpha1, command: x}",
         "use client.authentication.k8s.io/v1");
  expect("{" + v1 + ", command: x, interactiveMode: Sometimes}", "'Sometimes' is not Never");
  expect("{" + v1 + ", command: x, interactiveMode: Never, env: [{value: 1}]}",
         "env has an entry without a name");
}

TEST(ExecCredential, StatusTokenCertificateAndExpiry) {
  ExecPlugin p;
  p.api_version = "client.authentication.k8s.io/v1";
  p.command = "login";
  p.user = "u";
  auto tok = ParseExecCredential(
      R"({"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1",)"
      R"("spec":{},"status":{"token":"t1","expirationTimestamp":"2026-11-25T12:00:00Z"}})",
      p);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->token, "t1");
  EXPECT_EQ(tok->expires, 1795608000);
  auto cert = ParseExecCredential(
      R"({"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1",)"
      R"("status":{"clientCertificateData":"C","clientKeyData":"K"}})",
      p);
  ASSERT_TRUE(cert.ok()) << cert.status().message();
  EXPECT_EQ(cert->cert_pem, "C");
  EXPECT_EQ(cert->key_pem, "K");
  EXPECT_FALSE(cert->expires.has_value());
  auto bad = [&](const std::string& out, const std::string& says) {
    auto r = ParseExecCredential(out, p);
    ASSERT_FALSE(r.ok()) << out;
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
  };
  const std::string head =
      R"({"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1",)";
  bad("token please", "printed no ExecCredential");
  bad(R"({"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1"})",
      "printed a ExecCredential of client.authentication.k8s.io/v1beta1, but the kubeconfig asks "
      "for an ExecCredential of client.authentication.k8s.io/v1");
  bad(head + R"("spec":{}})", "returned no status");
  bad(head + R"("status":{}})", "neither a token nor a client certificate and key");
  bad(head + R"("status":{"clientKeyData":"K","token":"t"}})",
      "a client key without its certificate");
  bad(head + R"("status":{"token":"t","expirationTimestamp":"tomorrow"}})",
      "'tomorrow', which is not an RFC 3339 time");
}

TEST(ExecCredential, Rfc3339) {
  EXPECT_EQ(Rfc3339Seconds("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(Rfc3339Seconds("1970-01-01T01:00:00.250+01:00"), 0);
  EXPECT_EQ(Rfc3339Seconds("1970-01-01T00:00:00-00:30"), 1800);
  EXPECT_FALSE(Rfc3339Seconds("1970-01-01T00:00:00").has_value());
  EXPECT_FALSE(Rfc3339Seconds("1970-01-01T00:00:00Zx").has_value());
  EXPECT_FALSE(Rfc3339Seconds("1970-01-01").has_value());
}

TEST(ExecCredential, RunsThePluginWithItsEnvironment) {
  fs::path dir = fs::temp_directory_path() / ("kubeexec-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string script = (dir / "plugin").string();
  const std::string info = (dir / "info").string();
  ASSERT_TRUE(WriteFileAtomic(script,
                              "#!/bin/sh\necho \"to the user\" >&2\n"
                              "printf %s \"$KUBERNETES_EXEC_INFO\" > " +
                                  info +
                                  "\nprintf '{\"kind\":\"ExecCredential\",\"apiVersion\":"
                                  "\"client.authentication.k8s.io/v1\",\"status\":{"
                                  "\"token\":\"%s/%s\"}}' \"$1\" \"$TEAM\"\n")
                  .ok());
  fs::permissions(script, fs::perms::owner_all);
  ExecPlugin p;
  p.api_version = "client.authentication.k8s.io/v1";
  p.command = script;
  p.args = {"a1"};
  p.env = {{"TEAM", "ml"}};
  p.user = "u";
  auto cred = RunExecPlugin(p);
  ASSERT_TRUE(cred.ok()) << cred.status().message();
  EXPECT_EQ(cred->token, "a1/ml");
  auto seen = ReadFile(info);
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ(*seen, ExecInfo(p));
  p.command = (dir / "missing").string();
  p.install_hint = "get it from the cloud's console";
  auto missing = RunExecPlugin(p);
  fs::remove_all(dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kIOError);
  EXPECT_NE(missing.status().message().find("cannot be run"), std::string::npos);
  EXPECT_NE(missing.status().message().find("\nget it from the cloud's console"),
            std::string::npos);
}

TEST(KubeConfig, ProblemsNameTheirCause) {
  auto provider = ParseKubeConfig(kConfig, "/", "cfg", "old");
  ASSERT_FALSE(provider.ok());
  EXPECT_NE(provider.status().message().find("use the provider's exec plug-in instead"),
            std::string::npos);
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
