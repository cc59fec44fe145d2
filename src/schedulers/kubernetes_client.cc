#include "schedulers/kubernetes_client.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>

#include "common/files.h"
#include "common/strings.h"
#include "net/libcurl.h"
#include "proc/command.h"
#include "specs/serialize.h"

namespace trun::schedulers::kube {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The entry called `name` of a kubeconfig list ("clusters", ...), with its
// value under `field` ("cluster", ...).
const json* Named(const json& config, const char* list, const char* field,
                  const std::string& name) {
  auto it = config.find(list);
  if (it == config.end() || !it->is_array()) return nullptr;
  for (const auto& e : *it) {
    if (e.is_object() && e.value("name", "") == name && e.contains(field) && e[field].is_object()) {
      return &e[field];
    }
  }
  return nullptr;
}

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string Resolve(const std::string& dir, const std::string& path) {
  if (path.empty() || path.starts_with("/")) return path;
  return (fs::path(dir) / path).lexically_normal().string();
}

Result<std::string> Decode(const std::string& b64, const std::string& what) {
  std::string compact;
  for (char c : b64) {
    if (!std::isspace(static_cast<unsigned char>(c))) compact += c;
  }
  auto d = Base64Decode(compact);
  if (!d) return Status::InvalidArgument(fmt::format("{} is not base64", what));
  return *d;
}

// Appends `b` to `a` keeping the first of each named entry: KUBECONFIG's
// merge rule.
void Merge(json& a, const json& b) {
  if (!b.is_object()) return;
  if (Str(a, "current-context").empty() && !Str(b, "current-context").empty()) {
    a["current-context"] = b["current-context"];
  }
  for (const char* list : {"clusters", "contexts", "users"}) {
    if (!b.contains(list) || !b[list].is_array()) continue;
    if (!a.contains(list) || !a[list].is_array()) a[list] = json::array();
    for (const auto& e : b[list]) {
      bool have = false;
      for (const auto& x : a[list]) have = have || (x.value("name", "") == e.value("name", ""));
      if (!have) a[list].push_back(e);
    }
  }
}

constexpr std::string_view kExecV1 = "client.authentication.k8s.io/v1";
constexpr std::string_view kExecV1Beta1 = "client.authentication.k8s.io/v1beta1";

// users[].user.exec, checked as kubectl checks it when it loads the
// kubeconfig; `cluster` is the context's cluster (for provideClusterInfo).
Result<ExecPlugin> ParseExec(const json& exec, const json& cluster, const KubeConfig& c,
                             const std::string& dir, const std::string& user) {
  const std::string where = fmt::format("{}: the user '{}'", c.source, user);
  if (!exec.is_object()) {
    return Status::InvalidArgument(fmt::format("{}: exec is not a mapping", where));
  }
  ExecPlugin p;
  p.user = user;
  p.api_version = Str(exec, "apiVersion");
  if (p.api_version != kExecV1 && p.api_version != kExecV1Beta1) {
    return Status::InvalidArgument(
        fmt::format("{}: exec apiVersion '{}' is not one kubectl runs; use {} (or {})", where,
                    p.api_version, kExecV1, kExecV1Beta1));
  }
  p.command = Str(exec, "command");
  if (p.command.empty()) {
    return Status::InvalidArgument(fmt::format("{}: exec has no command", where));
  }
  // kubectl: a relative command with a '/' is relative to the kubeconfig.
  if (p.command.find('/') != std::string::npos) p.command = Resolve(dir, p.command);
  if (auto it = exec.find("args"); it != exec.end() && !it->is_null()) {
    if (!it->is_array()) {
      return Status::InvalidArgument(fmt::format("{}: exec args is not a list", where));
    }
    for (const auto& a : *it) {
      if (!a.is_string()) {
        return Status::InvalidArgument(fmt::format("{}: exec args holds a non-string", where));
      }
      p.args.push_back(a.get<std::string>());
    }
  }
  if (auto it = exec.find("env"); it != exec.end() && !it->is_null()) {
    if (!it->is_array()) {
      return Status::InvalidArgument(
          fmt::format("{}: exec env is not a list of {{name, value}}", where));
    }
    for (const auto& e : *it) {
      if (!e.is_object() || Str(e, "name").empty()) {
        return Status::InvalidArgument(
            fmt::format("{}: exec env has an entry without a name", where));
      }
      p.env.emplace_back(Str(e, "name"), Str(e, "value"));
    }
  }
  p.install_hint = Str(exec, "installHint");
  // v1 requires interactiveMode; v1beta1 defaults to IfAvailable.
  std::string mode = Str(exec, "interactiveMode");
  if (mode.empty() && p.api_version == kExecV1) {
    return Status::InvalidArgument(
        fmt::format("{}: exec interactiveMode must be set for {}; set it to Never (or IfAvailable)",
                    where, kExecV1));
  }
  if (mode == "Always") {
    return Status::InvalidArgument(fmt::format(
        "{}: exec interactiveMode is Always, but trun runs the plug-in without a terminal; set "
        "interactiveMode: IfAvailable (or Never) if the plug-in can log in without asking, or log "
        "in once with kubectl so that it finds a cached login",
        where));
  }
  if (!mode.empty() && mode != "Never" && mode != "IfAvailable") {
    return Status::InvalidArgument(fmt::format(
        "{}: exec interactiveMode '{}' is not Never, IfAvailable or Always", where, mode));
  }
  if (auto it = exec.find("provideClusterInfo");
      it != exec.end() && it->is_boolean() && it->get<bool>()) {
    nlohmann::ordered_json info = {{"server", c.server}};
    if (!Str(cluster, "tls-server-name").empty()) {
      info["tls-server-name"] = Str(cluster, "tls-server-name");
    }
    if (c.insecure) info["insecure-skip-tls-verify"] = true;
    std::string ca = c.ca_pem;
    if (ca.empty() && !c.ca_file.empty()) {
      auto text = ReadFile(c.ca_file);
      if (!text.ok()) {
        return Status::InvalidArgument(
            fmt::format("{}: certificate-authority: {}", c.source, text.status().message()));
      }
      ca = *text;
    }
    if (!ca.empty()) info["certificate-authority-data"] = Base64Encode(ca);
    if (!Str(cluster, "proxy-url").empty()) info["proxy-url"] = Str(cluster, "proxy-url");
    if (auto d = cluster.find("disable-compression");
        d != cluster.end() && d->is_boolean() && d->get<bool>()) {
      info["disable-compression"] = true;
    }
    // The cluster's extension for exec plug-ins, handed over as is; null
    // when there is none, as kubectl sends it.
    info["config"] = nullptr;
    if (auto ext = cluster.find("extensions"); ext != cluster.end() && ext->is_array()) {
      for (const auto& e : *ext) {
        if (e.is_object() && Str(e, "name") == "client.authentication.k8s.io/exec" &&
            e.contains("extension")) {
          info["config"] = e["extension"];
        }
      }
    }
    p.cluster = std::move(info);
  }
  return p;
}

Result<KubeConfig> FromConfig(const json& config, const std::string& dir, const std::string& source,
                              const std::string& want) {
  KubeConfig c;
  c.source = source;
  c.context = want.empty() ? Str(config, "current-context") : want;
  if (c.context.empty()) {
    return Status::InvalidArgument(fmt::format(
        "{} sets no current-context: choose one with `kubectl config use-context NAME`", source));
  }
  const json* ctx = Named(config, "contexts", "context", c.context);
  if (!ctx) {
    return Status::InvalidArgument(
        fmt::format("{}: the context '{}' is not defined there", source, c.context));
  }
  if (!Str(*ctx, "namespace").empty()) c.ns = Str(*ctx, "namespace");
  const std::string cluster_name = Str(*ctx, "cluster"), user_name = Str(*ctx, "user");
  const json* cluster = Named(config, "clusters", "cluster", cluster_name);
  if (!cluster) {
    return Status::InvalidArgument(
        fmt::format("{}: the context '{}' names the cluster '{}', which "
                    "is not defined there",
                    source, c.context, cluster_name));
  }
  c.server = Str(*cluster, "server");
  while (c.server.ends_with("/")) c.server.pop_back();
  if (c.server.empty()) {
    return Status::InvalidArgument(
        fmt::format("{}: the cluster '{}' has no server", source, cluster_name));
  }
  c.ca_file = Resolve(dir, Str(*cluster, "certificate-authority"));
  if (auto data = Str(*cluster, "certificate-authority-data"); !data.empty()) {
    auto pem = Decode(data, fmt::format("{}: certificate-authority-data", source));
    if (!pem.ok()) return pem.status();
    c.ca_pem = *pem;
  }
  if (auto it = cluster->find("insecure-skip-tls-verify"); it != cluster->end()) {
    c.insecure = it->is_boolean() && it->get<bool>();
  }
  const json* user = Named(config, "users", "user", user_name);
  if (!user) return c;  // an anonymous user
  if (user->contains("auth-provider")) {
    return Status::InvalidArgument(fmt::format(
        "{}: the user '{}' logs in through an auth-provider plug-in, which kubectl itself no "
        "longer runs (since 1.26); use the provider's exec plug-in instead (e.g. "
        "gke-gcloud-auth-plugin, kubelogin), a token or a client certificate",
        source, user_name));
  }
  if (auto it = user->find("exec"); it != user->end() && !it->is_null()) {
    auto exec = ParseExec(*it, *cluster, c, dir, user_name);
    if (!exec.ok()) return exec.status();
    c.exec = std::move(*exec);
  }
  c.token = Str(*user, "token");
  if (auto file = Str(*user, "tokenFile"); c.token.empty() && !file.empty()) {
    auto t = ReadFile(Resolve(dir, file));
    if (!t.ok())
      return Status::InvalidArgument(
          fmt::format("{}: tokenFile: {}", source, t.status().message()));
    c.token = std::string(Trim(*t));
  }
  c.username = Str(*user, "username");
  c.password = Str(*user, "password");
  c.cert_file = Resolve(dir, Str(*user, "client-certificate"));
  c.key_file = Resolve(dir, Str(*user, "client-key"));
  if (auto data = Str(*user, "client-certificate-data"); !data.empty()) {
    auto pem = Decode(data, fmt::format("{}: client-certificate-data", source));
    if (!pem.ok()) return pem.status();
    c.cert_pem = *pem;
  }
  if (auto data = Str(*user, "client-key-data"); !data.empty()) {
    auto pem = Decode(data, fmt::format("{}: client-key-data", source));
    if (!pem.ok()) return pem.status();
    c.key_pem = *pem;
  }
  return c;
}

struct CurlHandles {
  const net::CurlApi* api = nullptr;
  CURLM* multi = nullptr;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  ~CurlHandles() {
    if (!api) return;
    if (multi && easy) api->multi_remove_handle(multi, easy);
    if (easy) api->easy_cleanup(easy);
    if (multi) api->multi_cleanup(multi);
    if (headers) api->slist_free_all(headers);
  }
};

struct Sink {
  const net::CurlApi* api = nullptr;
  CURL* easy = nullptr;
  std::string body;     // the whole answer, or an error's when streaming
  std::string pending;  // a streamed line not yet complete
  const std::function<bool(std::string_view)>* on_line = nullptr;
  bool stopped = false;
};

size_t OnData(char* data, size_t size, size_t n, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t len = size * n;
  long code = 0;
  sink->api->easy_getinfo(sink->easy, CURLINFO_RESPONSE_CODE, &code);
  // An error's body is the server's Status object, never lines of a log.
  if (!sink->on_line || code < 200 || code >= 300) {
    sink->body.append(data, len);
    return len;
  }
  sink->pending.append(data, len);
  size_t start = 0;
  for (size_t nl; (nl = sink->pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    if (!(*sink->on_line)(std::string_view(sink->pending).substr(start, nl - start))) {
      sink->stopped = true;
      return 0;  // libcurl ends the transfer
    }
  }
  sink->pending.erase(0, start);
  return len;
}

constexpr double kDefaultTimeout = 30;

double Timeout() {
  const char* v = std::getenv("TRUN_KUBE_TIMEOUT");
  auto d = v && *v ? ParseDouble(v) : std::nullopt;
  return d && *d > 0 ? *d : kDefaultTimeout;
}

std::string Unreachable(const KubeConfig& c) {
  return fmt::format("the Kubernetes API server {} (context '{}' of {})", c.server, c.context,
                     c.source);
}

}  // namespace

Result<KubeConfig> ParseKubeConfig(std::string_view text, const std::string& dir,
                                   const std::string& source, const std::string& context) {
  auto j = specs::ParseYaml(text);
  if (!j.ok()) {
    return Status::InvalidArgument(fmt::format("{}: {}", source, j.status().message()));
  }
  if (!j->is_object()) {
    return Status::InvalidArgument(fmt::format("{}: not a kubeconfig (a YAML mapping)", source));
  }
  return FromConfig(*j, dir, source, context);
}

Result<KubeConfig> LoadKubeConfig(const std::string& home, const std::string& service_account_dir) {
  std::vector<std::string> files;
  const char* env = std::getenv("KUBECONFIG");
  if (env && *env) {
    for (const auto& f : Split(env, ':')) {
      if (!f.empty()) files.push_back(f);
    }
  } else if (!home.empty()) {
    files.push_back(home + "/.kube/config");
  }
  json merged = json::object();
  std::string first;
  for (const auto& f : files) {
    auto text = ReadFile(f);
    if (!text.ok()) continue;  // kubectl skips missing files too
    auto j = specs::ParseYaml(*text);
    if (!j.ok()) return Status::InvalidArgument(fmt::format("{}: {}", f, j.status().message()));
    if (first.empty()) first = f;
    // Relative paths are relative to their own file.
    for (const char* list : {"clusters", "users"}) {
      if (!j->contains(list) || !(*j)[list].is_array()) continue;
      for (auto& e : (*j)[list]) {
        json* v = e.contains("cluster") ? &e["cluster"] : e.contains("user") ? &e["user"] : nullptr;
        if (!v || !v->is_object()) continue;
        const std::string file_dir = fs::path(f).parent_path().string();
        for (const char* key :
             {"certificate-authority", "client-certificate", "client-key", "tokenFile"}) {
          if (v->contains(key) && (*v)[key].is_string()) {
            (*v)[key] = Resolve(file_dir, (*v)[key].get<std::string>());
          }
        }
        if (v->contains("exec") && (*v)["exec"].is_object()) {
          json& exec = (*v)["exec"];
          const std::string command = Str(exec, "command");
          if (command.find('/') != std::string::npos) exec["command"] = Resolve(file_dir, command);
        }
      }
    }
    Merge(merged, *j);
  }
  if (!first.empty()) return FromConfig(merged, "/", env && *env ? "$KUBECONFIG" : first, "");

  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  auto token = ReadFile(service_account_dir + "/token");
  if (host && *host && token.ok()) {
    KubeConfig c;
    c.source = "in-cluster";
    c.context = "in-cluster";
    std::string h = host;
    if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6
    c.server = fmt::format("https://{}:{}", h, port && *port ? port : "443");
    c.token = std::string(Trim(*token));
    c.ca_file = service_account_dir + "/ca.crt";
    if (auto ns = ReadFile(service_account_dir + "/namespace"); ns.ok() && !Trim(*ns).empty()) {
      c.ns = std::string(Trim(*ns));
    }
    return c;
  }
  return Status::IOError(fmt::format(
      "no Kubernetes configuration: {} does not exist and this is not a pod with a service "
      "account; point $KUBECONFIG at a kubeconfig (e.g. the one `kubectl` uses)",
      env && *env ? "$KUBECONFIG=" + std::string(env) : home + "/.kube/config"));
}

std::string UrlEncode(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::optional<int64_t> Rfc3339Seconds(std::string_view text) {
  const std::string t(text);
  std::tm tm{};
  const char* p = ::strptime(t.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!p) return std::nullopt;
  if (*p == '.') {
    ++p;
    if (!std::isdigit(static_cast<unsigned char>(*p))) return std::nullopt;
    while (std::isdigit(static_cast<unsigned char>(*p))) ++p;
  }
  int64_t offset = 0;
  if (*p == 'Z' || *p == 'z') {
    ++p;
  } else if (*p == '+' || *p == '-') {
    int h = 0, m = 0, n = 0;
    if (std::sscanf(p + 1, "%2d:%2d%n", &h, &m, &n) != 2 || n != 5) return std::nullopt;
    offset = (*p == '+' ? 1 : -1) * (h * 3600 + m * 60);
    p += 1 + n;
  } else {
    return std::nullopt;
  }
  if (*p != '\0') return std::nullopt;
  return static_cast<int64_t>(::timegm(&tm)) - offset;
}

std::string ExecInfo(const ExecPlugin& plugin) {
  nlohmann::ordered_json spec;
  if (!plugin.cluster.is_null()) spec["cluster"] = plugin.cluster;
  spec["interactive"] = false;
  nlohmann::ordered_json info = {
      {"kind", "ExecCredential"}, {"apiVersion", plugin.api_version}, {"spec", spec}};
  return info.dump();
}

Result<ExecCredential> ParseExecCredential(std::string_view out, const ExecPlugin& plugin) {
  const std::string what =
      fmt::format("the exec plug-in {} of the kubeconfig user '{}'", plugin.command, plugin.user);
  auto j = json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument(fmt::format(
        "{} printed no ExecCredential (not a JSON object): {}", what, Trim(out.substr(0, 120))));
  }
  if (Str(j, "kind") != "ExecCredential" || Str(j, "apiVersion") != plugin.api_version) {
    return Status::InvalidArgument(fmt::format(
        "{} printed a {} of {}, but the kubeconfig asks for an ExecCredential of {}; make them "
        "agree (the exec apiVersion, or the plug-in's own option for it)",
        what, Str(j, "kind").empty() ? "document" : Str(j, "kind"),
        Str(j, "apiVersion").empty() ? "no apiVersion" : Str(j, "apiVersion"), plugin.api_version));
  }
  auto st = j.find("status");
  if (st == j.end() || !st->is_object()) {
    return Status::InvalidArgument(fmt::format("{} returned no status", what));
  }
  ExecCredential cred;
  cred.token = Str(*st, "token");
  cred.cert_pem = Str(*st, "clientCertificateData");
  cred.key_pem = Str(*st, "clientKeyData");
  if (cred.token.empty() && (cred.cert_pem.empty() || cred.key_pem.empty())) {
    return Status::InvalidArgument(
        fmt::format("{} returned neither a token nor a client certificate and key", what));
  }
  if (cred.cert_pem.empty() != cred.key_pem.empty()) {
    return Status::InvalidArgument(fmt::format("{} returned a client {} without its {}", what,
                                               cred.cert_pem.empty() ? "key" : "certificate",
                                               cred.cert_pem.empty() ? "certificate" : "key"));
  }
  if (auto e = Str(*st, "expirationTimestamp"); !e.empty()) {
    cred.expires = Rfc3339Seconds(e);
    if (!cred.expires) {
      return Status::InvalidArgument(fmt::format(
          "{} returned expirationTimestamp '{}', which is not an RFC 3339 time", what, e));
    }
  }
  return cred;
}

Result<ExecCredential> RunExecPlugin(const ExecPlugin& plugin) {
  std::vector<std::string> argv = {plugin.command};
  argv.insert(argv.end(), plugin.args.begin(), plugin.args.end());
  std::map<std::string, std::string> env(plugin.env.begin(), plugin.env.end());
  env["KUBERNETES_EXEC_INFO"] = ExecInfo(plugin);
  const std::string who =
      fmt::format("the exec plug-in {} of the kubeconfig user '{}'", plugin.command, plugin.user);
  auto r = proc::RunCommand(argv, Timeout(), env);
  if (!r.ok()) {
    return Status::IOError(fmt::format("{} cannot be run: {}{}", who, r.status().message(),
                                       plugin.install_hint.empty()
                                           ? "; install it or fix the kubeconfig's exec command"
                                           : "\n" + plugin.install_hint));
  }
  // As under kubectl, what it says on stderr is the user's to see.
  if (!r->err.empty()) std::fputs(r->err.c_str(), stderr);
  if (r->timed_out || r->exit_code != 0) {
    const std::string how = r->timed_out ? fmt::format(
                                               "did not finish within {} s "
                                               "($TRUN_KUBE_TIMEOUT)",
                                               Timeout())
                                         : fmt::format("failed (exit code {})", r->exit_code);
    return Status::IOError(
        fmt::format("{} {}; run it by hand to see why (it may need a new "
                    "login)",
                    who, how));
  }
  auto cred = ParseExecCredential(r->out, plugin);
  if (!cred.ok()) return Status::IOError(cred.status().message());
  return cred;
}

// The error `reply` is, in words; ReplyError marks it with the reply's status.
Status DescribeReply(const HttpReply& reply, const std::string& what, const std::string& server) {
  std::string message;
  auto j = json::parse(reply.body, nullptr, false);
  if (!j.is_discarded() && j.is_object()) message = Str(j, "message");
  if (message.empty()) message = std::string(Trim(reply.body.substr(0, 200)));
  const std::string said = message.empty() ? "" : ": " + message;
  switch (reply.code) {
    case 401:
      return Status::IOError(fmt::format(
          "{}: the API server {} did not accept the credentials (401 Unauthorized{}); renew the "
          "token or certificate of the kubeconfig's user",
          what, server, said));
    case 403:
      return Status::IOError(fmt::format(
          "{}: forbidden (403{}); the kubeconfig's user needs a Role that allows it", what, said));
    case 404:
      return Status::NotFound(fmt::format("{}: not found (404{})", what, said));
    case 409:
      return Status::InvalidArgument(fmt::format("{}: conflict (409{})", what, said));
    case 400:
    case 422:
      return Status::InvalidArgument(
          fmt::format("{}: the API server refused it ({}{})", what, reply.code, said));
    default:
      break;
  }
  if (reply.code >= 500 || reply.code == 429) {
    return Status::Unavailable(fmt::format(
        "{}: the API server {} answered {}{}; nothing was changed by trun, try again later", what,
        server, reply.code, said));
  }
  return Status::IOError(fmt::format("{}: the API server answered {}{}", what, reply.code, said));
}

Status ReplyError(const HttpReply& reply, const std::string& what, const std::string& server) {
  return DescribeReply(reply, what, server).WithHttpStatus(static_cast<int>(reply.code));
}

Result<ExecCredential> KubeClient::Credential(bool renew) const {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  if (cached_ && !renew && (!cached_->expires || now < *cached_->expires)) return *cached_;
  auto cred = run_plugin_(*config_.exec);
  if (!cred.ok()) return cred.status();
  cached_ = *cred;
  return cred;
}

Result<HttpReply> KubeClient::Perform(const std::string& method, const std::string& path,
                                      const std::string& body, const std::string& content_type,
                                      const std::function<bool(std::string_view)>* on_data) const {
  if (!config_.exec) return PerformOnce(method, path, body, content_type, on_data, nullptr);
  auto cred = Credential(/*renew=*/false);
  if (!cred.ok()) return cred.status();
  auto reply = PerformOnce(method, path, body, content_type, on_data, &*cred);
  if (!reply.ok() || reply->code != 401) return reply;
  cred = Credential(/*renew=*/true);
  if (!cred.ok()) return cred.status();
  return PerformOnce(method, path, body, content_type, on_data, &*cred);
}

Result<HttpReply> KubeClient::PerformOnce(const std::string& method, const std::string& path,
                                          const std::string& body, const std::string& content_type,
                                          const std::function<bool(std::string_view)>* on_data,
                                          const ExecCredential* cred) const {
  const double timeout_s = Timeout();
  auto api = net::Libcurl();
  if (!api.ok()) return api.status();
  const net::CurlApi& c = **api;
  CurlHandles h;
  h.api = &c;
  h.multi = c.multi_init();
  h.easy = c.easy_init();
  if (!h.multi || !h.easy) return Status::Internal("libcurl could not make a handle");
  const std::string url = config_.server + path;
  std::vector<std::string> headers = {"Accept: application/json"};
  if (!body.empty()) headers.push_back("Content-Type: " + content_type);
  const std::string& token = cred && !cred->token.empty() ? cred->token : config_.token;
  if (!token.empty()) headers.push_back("Authorization: Bearer " + token);
  for (const auto& line : headers) h.headers = c.slist_append(h.headers, line.c_str());
  CURL* e = h.easy;
  c.easy_setopt(e, CURLOPT_URL, url.c_str());
  c.easy_setopt(e, CURLOPT_CUSTOMREQUEST, method.c_str());
  c.easy_setopt(e, CURLOPT_HTTPHEADER, h.headers);
  if (!body.empty()) {
    c.easy_setopt(e, CURLOPT_POSTFIELDS, body.c_str());
    c.easy_setopt(e, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  Sink sink;
  sink.api = &c;
  sink.easy = e;
  sink.on_line = on_data;
  c.easy_setopt(e, CURLOPT_WRITEFUNCTION, OnData);
  c.easy_setopt(e, CURLOPT_WRITEDATA, &sink);
  c.easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  c.easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout_s * 1000));
  if (!on_data) c.easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_s * 1000));
  if (!config_.username.empty()) {
    c.easy_setopt(e, CURLOPT_USERNAME, config_.username.c_str());
    c.easy_setopt(e, CURLOPT_PASSWORD, config_.password.c_str());
  }
  curl_blob ca{const_cast<char*>(config_.ca_pem.data()), config_.ca_pem.size(), CURL_BLOB_COPY};
  // An exec plug-in's certificate and key stand in for the kubeconfig's.
  const bool exec_cert = cred && !cred->cert_pem.empty();
  const std::string& cert_pem = exec_cert ? cred->cert_pem : config_.cert_pem;
  const std::string& key_pem = exec_cert ? cred->key_pem : config_.key_pem;
  curl_blob cert{const_cast<char*>(cert_pem.data()), cert_pem.size(), CURL_BLOB_COPY};
  curl_blob key{const_cast<char*>(key_pem.data()), key_pem.size(), CURL_BLOB_COPY};
  if (!config_.ca_pem.empty()) c.easy_setopt(e, CURLOPT_CAINFO_BLOB, &ca);
  if (!config_.ca_file.empty()) c.easy_setopt(e, CURLOPT_CAINFO, config_.ca_file.c_str());
  if (!cert_pem.empty()) c.easy_setopt(e, CURLOPT_SSLCERT_BLOB, &cert);
  if (!exec_cert && !config_.cert_file.empty()) {
    c.easy_setopt(e, CURLOPT_SSLCERT, config_.cert_file.c_str());
  }
  if (!key_pem.empty()) c.easy_setopt(e, CURLOPT_SSLKEY_BLOB, &key);
  if (!exec_cert && !config_.key_file.empty()) {
    c.easy_setopt(e, CURLOPT_SSLKEY, config_.key_file.c_str());
  }
  if (config_.insecure) {
    c.easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
    c.easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  c.multi_add_handle(h.multi, e);
  CURLcode result = CURLE_OK;
  for (bool done = false; !done;) {
    int running = 0;
    c.multi_perform(h.multi, &running);
    int queued = 0;
    while (CURLMsg* m = c.multi_info_read(h.multi, &queued)) {
      if (m->msg == CURLMSG_DONE) {
        result = m->data.result;
        done = true;
      }
    }
    if (!done) c.multi_poll(h.multi, nullptr, 0, 1000, nullptr);
  }
  HttpReply reply;
  c.easy_getinfo(e, CURLINFO_RESPONSE_CODE, &reply.code);
  if (sink.stopped) return reply;
  if (result != CURLE_OK) {
    std::string why = c.easy_strerror(result);
    if (result == CURLE_OPERATION_TIMEDOUT) {
      why = fmt::format("no complete answer within {} s ($TRUN_KUBE_TIMEOUT)", timeout_s);
    } else if (result == CURLE_PEER_FAILED_VERIFICATION || result == CURLE_SSL_CACERT_BADFILE ||
               result == CURLE_SSL_CERTPROBLEM) {
      return Status::IOError(fmt::format(
          "{}: TLS failed ({}); check the kubeconfig's certificate-authority and client "
          "certificate",
          Unreachable(config_), why));
    }
    return Status::Unavailable(
        fmt::format("{} cannot be reached ({}); nothing was changed by trun, try again later",
                    Unreachable(config_), why));
  }
  if (on_data && !sink.pending.empty() && reply.code >= 200 && reply.code < 300) {
    (*on_data)(sink.pending);
  }
  reply.body = std::move(sink.body);
  return reply;
}

Result<json> KubeClient::Call(const std::string& method, const std::string& path,
                              const std::string& body, const std::string& content_type) const {
  auto reply = Perform(method, path, body, content_type, nullptr);
  if (!reply.ok()) return reply.status();
  const std::string what = fmt::format("{} {}", method, path);
  if (reply->code < 200 || reply->code >= 300) return ReplyError(*reply, what, config_.server);
  auto j = json::parse(reply->body, nullptr, false);
  if (j.is_discarded()) {
    return Status::Unavailable(fmt::format("{}: the answer of {} is not JSON (cut off?): {}", what,
                                           Unreachable(config_), reply->body.substr(0, 120)));
  }
  return j;
}

Status KubeClient::Stream(const std::string& path,
                          const std::function<bool(std::string_view)>& on_line) const {
  auto reply = Perform("GET", path, "", "", &on_line);
  if (!reply.ok()) return reply.status();
  if (reply->code >= 200 && reply->code < 300) return Status::OK();
  return ReplyError(*reply, "GET " + path, config_.server);
}

}  // namespace trun::schedulers::kube
