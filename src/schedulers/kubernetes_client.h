// A small client of the Kubernetes API server's REST interface, over the
// project's libcurl (loaded when first needed, net/libcurl.h), with
// the credentials kubectl would use.
//
// Configuration, as kubectl finds it: the files of $KUBECONFIG (':'
// separated, the first to set a value wins), else ~/.kube/config; its
// current context (cluster, user, namespace); the cluster's server,
// certificate-authority(-data) and insecure-skip-tls-verify; the user's
// token(-file), client-certificate(-data)/client-key(-data) or
// username/password, or its exec credential plug-in (the cloud login
// helpers: aws eks get-token, gke-gcloud-auth-plugin, kubelogin), run as
// kubectl runs it (ExecPlugin below). With no kubeconfig, inside a pod: the
// service account's token, CA and namespace under
// /var/run/secrets/kubernetes.io/serviceaccount and
// KUBERNETES_SERVICE_HOST/PORT. auth-provider plug-ins, which kubectl itself
// dropped in 1.26, are an error that says what to use instead.
//
// Errors name what failed and why, mapped to the exit codes of docs/cli.md:
// the API server unreachable, too slow or answering 5xx is Unavailable
// (exit 4, nothing changed); 401/403 IOError (exit 3, the credentials);
// 404 NotFound; 409 and 422 (the server refused the object) InvalidArgument
// (exit 2), with the server's own message.
//
// Thread-safety: a KubeClient may be used from several threads at once;
// each request has its own libcurl handles, and the exec plug-in's
// credential is cached under a lock.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trun::schedulers::kube {

// users[].user.exec of a kubeconfig: a program that prints an ExecCredential
// (client.authentication.k8s.io/v1 or v1beta1) on stdout. It runs with this
// process's environment plus `env`, stdin /dev/null (never interactive:
// interactiveMode Always is refused when the kubeconfig is read), and
// KUBERNETES_EXEC_INFO, an ExecCredential whose spec says
// `interactive: false` and, with provideClusterInfo, holds the cluster
// (server, certificate-authority-data, ...). Its status gives a token or a
// client certificate and key, used until its expirationTimestamp.
struct ExecPlugin {
  std::string user;         // the kubeconfig user's name, for messages
  std::string api_version;  // client.authentication.k8s.io/v1 or /v1beta1
  std::string command;      // relative with a '/': to the kubeconfig's folder
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  std::string install_hint;
  nlohmann::ordered_json cluster;  // spec.cluster when provideClusterInfo, else null
};

struct ExecCredential {
  std::string token;
  std::string cert_pem, key_pem;
  std::optional<int64_t> expires;  // seconds since the epoch; none: never
};

// The value of KUBERNETES_EXEC_INFO for `plugin`.
std::string ExecInfo(const ExecPlugin& plugin);

// The credential in a plug-in's stdout, or InvalidArgument naming what is
// wrong with it (not JSON, another apiVersion, no status, neither a token
// nor a certificate and key, a bad expirationTimestamp).
Result<ExecCredential> ParseExecCredential(std::string_view out, const ExecPlugin& plugin);

// Runs the plug-in and parses what it printed; its stderr goes to ours (it
// may say why it failed). A program that is not there is IOError with the
// installHint; one that fails or runs past $TRUN_KUBE_TIMEOUT is IOError
// (exit 3: the credentials) with its stderr's last lines.
Result<ExecCredential> RunExecPlugin(const ExecPlugin& plugin);

// An RFC 3339 time ("2026-11-25T12:00:00Z", "...T12:00:00.5+02:00") in
// seconds since the epoch.
std::optional<int64_t> Rfc3339Seconds(std::string_view text);

struct KubeConfig {
  std::string source;   // the kubeconfig's path, or "in-cluster"
  std::string context;  // the context's name
  std::string server;   // https://host:port, no trailing '/'
  std::string ns = "default";
  std::string token;
  std::string username, password;
  std::string ca_file, ca_pem;      // PEM text when the config holds the data
  std::string cert_file, cert_pem;  // client certificate
  std::string key_file, key_pem;
  bool insecure = false;           // insecure-skip-tls-verify
  std::optional<ExecPlugin> exec;  // the user's exec plug-in, if it has one
};

// The config kubectl would use (see above). `home` and `service_account_dir`
// are parameters for tests.
Result<KubeConfig> LoadKubeConfig(
    const std::string& home,
    const std::string& service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// One kubeconfig file's text (YAML), with the file's directory for relative
// paths; the context `context` or, empty, the current one.
Result<KubeConfig> ParseKubeConfig(std::string_view text, const std::string& dir,
                                   const std::string& source, const std::string& context = "");

struct HttpReply {
  long code = 0;
  std::string body;
};

// What the kubernetes scheduler asks of the API server: KubeClient below,
// or a fake in the scheduler's unit tests, which answers from a table.
//
// Thread-safety: an implementation may be used from several threads at once.
class KubeApi {
 public:
  virtual ~KubeApi() = default;
  // The namespace of the kubeconfig's context: where `trun list` looks.
  virtual const std::string& Namespace() const = 0;
  // As KubeClient's below.
  virtual Result<nlohmann::json> Call(
      const std::string& method, const std::string& path, const std::string& body = "",
      const std::string& content_type = "application/json") const = 0;
  virtual Status Stream(const std::string& path,
                        const std::function<bool(std::string_view)>& on_line) const = 0;
};

class KubeClient final : public KubeApi {
 public:
  // `run_plugin`: how the exec plug-in runs (tests pass a stand-in).
  explicit KubeClient(
      KubeConfig config,
      std::function<Result<ExecCredential>(const ExecPlugin&)> run_plugin = RunExecPlugin)
      : config_(std::move(config)), run_plugin_(std::move(run_plugin)) {}
  const KubeConfig& config() const { return config_; }
  const std::string& Namespace() const override { return config_.ns; }

  // METHOD path (with its query), a JSON body when not empty. The reply's
  // JSON, or the error its status code stands for. Each request must be
  // answered within $TRUN_KUBE_TIMEOUT seconds (default 30).
  Result<nlohmann::json> Call(const std::string& method, const std::string& path,
                              const std::string& body = "",
                              const std::string& content_type = "application/json") const override;

  // GET path, its body passed to `on_line` a line at a time as it arrives
  // (pod logs with follow=true, watch streams); stops when `on_line`
  // returns false. A stream the server ends is OK; one cut off is
  // Unavailable.
  Status Stream(const std::string& path,
                const std::function<bool(std::string_view)>& on_line) const override;

 private:
  // The request, sent again once with a fresh exec credential when the
  // server answers 401 to a cached one (it may have been revoked early).
  Result<HttpReply> Perform(const std::string& method, const std::string& path,
                            const std::string& body, const std::string& content_type,
                            const std::function<bool(std::string_view)>* on_data) const;
  Result<HttpReply> PerformOnce(const std::string& method, const std::string& path,
                                const std::string& body, const std::string& content_type,
                                const std::function<bool(std::string_view)>* on_data,
                                const ExecCredential* cred) const;
  // The exec plug-in's credential: the cached one until it expires (or
  // `renew`), else the plug-in's new one.
  Result<ExecCredential> Credential(bool renew) const;

  KubeConfig config_;
  std::function<Result<ExecCredential>(const ExecPlugin&)> run_plugin_;
  mutable std::mutex mu_;
  mutable std::optional<ExecCredential> cached_;  // guarded by mu_
};

// The error an API server reply stands for, naming `what` was asked
// ("create Job x") and the server's own message (its Status object).
Status ReplyError(const HttpReply& reply, const std::string& what, const std::string& server);

// A query parameter's value, percent-encoded.
std::string UrlEncode(std::string_view s);

}  // namespace trun::schedulers::kube
