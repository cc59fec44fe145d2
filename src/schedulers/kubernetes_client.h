// A small client of the Kubernetes API server's REST interface, over the
// project's libcurl (loaded when first needed, rendezvous/libcurl.h), with
// the credentials kubectl would use.
//
// Configuration, as kubectl finds it: the files of $KUBECONFIG (':'
// separated, the first to set a value wins), else ~/.kube/config; its
// current context (cluster, user, namespace); the cluster's server,
// certificate-authority(-data) and insecure-skip-tls-verify; the user's
// token(-file), client-certificate(-data)/client-key(-data) or
// username/password. With no kubeconfig, inside a pod: the service
// account's token, CA and namespace under
// /var/run/secrets/kubernetes.io/serviceaccount and
// KUBERNETES_SERVICE_HOST/PORT. Exec and auth-provider plug-ins (cloud
// login helpers) are not run; they are an error that says what to use.
//
// Errors name what failed and why, mapped to the exit codes of docs/cli.md:
// the API server unreachable, too slow or answering 5xx is Unavailable
// (exit 4, nothing changed); 401/403 IOError (exit 3, the credentials);
// 404 NotFound; 409 and 422 (the server refused the object) InvalidArgument
// (exit 2), with the server's own message.
//
// Thread-safety: a KubeClient may be used from several threads at once;
// each request has its own libcurl handles.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace trun::schedulers::kube {

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
  bool insecure = false;  // insecure-skip-tls-verify
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

class KubeClient {
 public:
  explicit KubeClient(KubeConfig config) : config_(std::move(config)) {}
  const KubeConfig& config() const { return config_; }

  // METHOD path (with its query), a JSON body when not empty. The reply's
  // JSON, or the error its status code stands for. Each request must be
  // answered within $TRUN_KUBE_TIMEOUT seconds (default 30).
  Result<nlohmann::json> Call(const std::string& method, const std::string& path,
                              const std::string& body = "",
                              const std::string& content_type = "application/json") const;

  // GET path, its body passed to `on_line` a line at a time as it arrives
  // (pod logs with follow=true, watch streams); stops when `on_line`
  // returns false. A stream the server ends is OK; one cut off is
  // Unavailable.
  Status Stream(const std::string& path,
                const std::function<bool(std::string_view)>& on_line) const;

 private:
  Result<HttpReply> Perform(const std::string& method, const std::string& path,
                            const std::string& body, const std::string& content_type,
                            const std::function<bool(std::string_view)>* on_data) const;
  KubeConfig config_;
};

// The error an API server reply stands for, naming `what` was asked
// ("create Job x") and the server's own message (its Status object).
Status ReplyError(const HttpReply& reply, const std::string& what, const std::string& server);

// A query parameter's value, percent-encoded.
std::string UrlEncode(std::string_view s);

}  // namespace trun::schedulers::kube
