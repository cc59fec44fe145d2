#include "schedulers/kubernetes_client.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "common/files.h"
#include "common/strings.h"
#include "rendezvous/libcurl.h"
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
  if (user->contains("exec") || user->contains("auth-provider")) {
    return Status::IOError(fmt::format(
        "{}: the user '{}' logs in through an exec or auth-provider plug-in, which trun does not "
        "run; give the context a token (e.g. `kubectl create token SERVICE_ACCOUNT`) or a client "
        "certificate",
        source, user_name));
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
  const rendezvous::CurlApi* api = nullptr;
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
  const rendezvous::CurlApi* api = nullptr;
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
        for (const char* key :
             {"certificate-authority", "client-certificate", "client-key", "tokenFile"}) {
          if (v->contains(key) && (*v)[key].is_string()) {
            (*v)[key] = Resolve(fs::path(f).parent_path().string(), (*v)[key].get<std::string>());
          }
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

Status ReplyError(const HttpReply& reply, const std::string& what, const std::string& server) {
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

Result<HttpReply> KubeClient::Perform(const std::string& method, const std::string& path,
                                      const std::string& body, const std::string& content_type,
                                      const std::function<bool(std::string_view)>* on_data) const {
  const double timeout_s = Timeout();
  auto api = rendezvous::Libcurl();
  if (!api.ok()) return api.status();
  const rendezvous::CurlApi& c = **api;
  CurlHandles h;
  h.api = &c;
  h.multi = c.multi_init();
  h.easy = c.easy_init();
  if (!h.multi || !h.easy) return Status::Internal("libcurl could not make a handle");
  const std::string url = config_.server + path;
  std::vector<std::string> headers = {"Accept: application/json"};
  if (!body.empty()) headers.push_back("Content-Type: " + content_type);
  if (!config_.token.empty()) headers.push_back("Authorization: Bearer " + config_.token);
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
  curl_blob cert{const_cast<char*>(config_.cert_pem.data()), config_.cert_pem.size(),
                 CURL_BLOB_COPY};
  curl_blob key{const_cast<char*>(config_.key_pem.data()), config_.key_pem.size(), CURL_BLOB_COPY};
  if (!config_.ca_pem.empty()) c.easy_setopt(e, CURLOPT_CAINFO_BLOB, &ca);
  if (!config_.ca_file.empty()) c.easy_setopt(e, CURLOPT_CAINFO, config_.ca_file.c_str());
  if (!config_.cert_pem.empty()) c.easy_setopt(e, CURLOPT_SSLCERT_BLOB, &cert);
  if (!config_.cert_file.empty()) c.easy_setopt(e, CURLOPT_SSLCERT, config_.cert_file.c_str());
  if (!config_.key_pem.empty()) c.easy_setopt(e, CURLOPT_SSLKEY_BLOB, &key);
  if (!config_.key_file.empty()) c.easy_setopt(e, CURLOPT_SSLKEY, config_.key_file.c_str());
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
