#include "rendezvous/etcd_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "net/libcurl.h"

namespace trun::rendezvous {
namespace {

using json = nlohmann::json;

// etcd's gateway writes int64 fields as strings ("revision": "5") and leaves
// out zero values; accept numbers too.
int64_t Int(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) return ParseInt(it->get<std::string>()).value_or(0);
  return 0;
}

std::string Bytes(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_string()) return "";
  return Base64Decode(it->get<std::string>()).value_or("");
}

KeyValue ToKeyValue(const json& j) {
  return {Bytes(j, "key"), Bytes(j, "value"), Int(j, "create_revision"), Int(j, "mod_revision"),
          Int(j, "lease")};
}

json RangeRequest(const KeyRange& r, bool serializable = false) {
  json j = {{"key", Base64Encode(r.key)}};
  if (!r.range_end.empty()) j["range_end"] = Base64Encode(r.range_end);
  if (serializable) j["serializable"] = true;
  return j;
}

json PutRequest(const std::string& key, const std::string& value, int64_t lease) {
  json j = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) j["lease"] = std::to_string(lease);
  return j;
}

// The error a gateway answer carries, if any: {"error": ..., "code": N}
// (gRPC codes: 5 is NOT_FOUND).
Status ErrorIn(const json& j, const std::string& what) {
  if (!j.is_object()) return Status::IOError(what + ": not a JSON object");
  auto e = j.find("error");
  if (e == j.end()) return Status::OK();
  std::string msg = j.value("message", e->is_string() ? e->get<std::string>() : e->dump());
  if (Int(j, "code") == 5) return Status::NotFound(what + ": " + msg);
  return Status::IOError(what + ": " + msg);
}

size_t OnData(char* data, size_t size, size_t n, void* user) {
  auto* f = static_cast<std::function<bool(std::string_view)>*>(user);
  // Returning less than given makes curl end the transfer (CURLE_WRITE_ERROR).
  return (*f)(std::string_view(data, size * n)) ? size * n : 0;
}

bool ConnectionFailed(CURLcode c) {
  return c == CURLE_COULDNT_CONNECT || c == CURLE_COULDNT_RESOLVE_HOST ||
         c == CURLE_OPERATION_TIMEDOUT || c == CURLE_SEND_ERROR || c == CURLE_RECV_ERROR ||
         c == CURLE_GOT_NOTHING || c == CURLE_SSL_CONNECT_ERROR;
}

}  // namespace

struct EtcdClient::Curl {
  // Why libcurl is missing or could not start, reported by every call.
  Status loaded;
  const net::CurlApi* api = nullptr;
  CURL* easy = nullptr;
  CURLM* multi = nullptr;
  curl_slist* headers = nullptr;
  ~Curl() {
    if (headers) api->slist_free_all(headers);
    if (easy) api->easy_cleanup(easy);
    if (multi) api->multi_cleanup(multi);
  }
};

EtcdClient::EtcdClient(EtcdOptions options)
    : options_(std::move(options)), curl_(std::make_unique<Curl>()) {
  auto api = net::Libcurl();
  if (!api.ok()) {
    curl_->loaded = api.status();
    return;
  }
  const net::CurlApi& c = **api;
  curl_->api = &c;
  curl_->easy = c.easy_init();
  curl_->multi = c.multi_init();
  curl_->headers = c.slist_append(nullptr, "Content-Type: application/json");
  if (!curl_->easy || !curl_->multi || !curl_->headers) {
    curl_->loaded = Status::Internal("etcd: libcurl could not start (out of memory?)");
  }
}

EtcdClient::~EtcdClient() {
  if (attached_) Detach();
}

void EtcdClient::Abort() {
  aborted_ = true;
  if (curl_->multi) curl_->api->multi_wakeup(curl_->multi);
}

std::string EtcdClient::LocalAddress() const { return local_address_; }

std::string EtcdClient::Endpoint() const {
  return options_.endpoints.empty() ? "" : options_.endpoints[endpoint_];
}

void EtcdClient::Attach(const std::string& path, bool streaming) {
  const net::CurlApi& c = *curl_->api;
  const std::string url = options_.endpoints[endpoint_] + path;
  CURL* e = curl_->easy;
  c.easy_setopt(e, CURLOPT_URL, url.c_str());
  c.easy_setopt(e, CURLOPT_HTTPHEADER, curl_->headers);
  c.easy_setopt(e, CURLOPT_POSTFIELDS, body_.c_str());
  c.easy_setopt(e, CURLOPT_POSTFIELDSIZE, static_cast<long>(body_.size()));
  c.easy_setopt(e, CURLOPT_WRITEFUNCTION, OnData);
  c.easy_setopt(e, CURLOPT_WRITEDATA, &sink_);
  c.easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  c.easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.timeout.count()));
  c.easy_setopt(e, CURLOPT_TIMEOUT_MS,
                streaming ? 0L : static_cast<long>(options_.timeout.count()));
  // A watch may be silent for as long as the job runs: let TCP notice a
  // dead peer (the rendezvous's heartbeats notice sooner).
  c.easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  c.easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  if (!options_.cacert.empty()) c.easy_setopt(e, CURLOPT_CAINFO, options_.cacert.c_str());
  if (!options_.cert.empty()) c.easy_setopt(e, CURLOPT_SSLCERT, options_.cert.c_str());
  if (!options_.key.empty()) c.easy_setopt(e, CURLOPT_SSLKEY, options_.key.c_str());
  c.multi_add_handle(curl_->multi, e);
  attached_ = true;
}

Result<bool> EtcdClient::Run(const std::function<bool()>& enough,
                             std::chrono::steady_clock::time_point until) {
  const net::CurlApi& c = *curl_->api;
  while (!aborted_) {
    int running = 0;
    c.multi_perform(curl_->multi, &running);
    int queued = 0;
    while (CURLMsg* m = c.multi_info_read(curl_->multi, &queued)) {
      if (m->msg == CURLMSG_DONE) {
        result_ = m->data.result;
        return true;
      }
    }
    if (enough()) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    c.multi_poll(curl_->multi, nullptr, 0,
                 static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 1000)), nullptr);
  }
  return Status::IOError("etcd: aborted");
}

void EtcdClient::Detach() {
  curl_->api->multi_remove_handle(curl_->multi, curl_->easy);
  attached_ = false;
}

Status EtcdClient::Outcome(const std::string& path, bool* connection_failed) {
  const net::CurlApi& c = *curl_->api;
  CURL* e = curl_->easy;
  const std::string& endpoint = options_.endpoints[endpoint_];
  *connection_failed = false;
  char* ip = nullptr;
  if (c.easy_getinfo(e, CURLINFO_LOCAL_IP, &ip) == CURLE_OK && ip && *ip) local_address_ = ip;
  const auto result = static_cast<CURLcode>(result_);
  if (result == CURLE_OK) {
    long code = 0;
    c.easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    // Errors come as JSON bodies too; the caller reads them. A status
    // without a body (a proxy, the wrong port) is reported here.
    if (code == 200 || code >= 400) return Status::OK();
    return Status::IOError(fmt::format("etcd at {}: HTTP {} for {}", endpoint, code, path));
  }
  *connection_failed = ConnectionFailed(result);
  return Status::IOError(fmt::format("etcd at {}: {}", endpoint, c.easy_strerror(result)));
}

Result<std::string> EtcdClient::Call(const std::string& path, const std::string& body) {
  TRUN_RETURN_IF_ERROR(curl_->loaded);
  if (options_.endpoints.empty()) return Status::InvalidArgument("etcd: no endpoint");
  if (attached_) return Status::Internal("etcd: a request on a client whose watch is open");
  std::string out;
  sink_ = [&out](std::string_view d) {
    out.append(d);
    return true;
  };
  body_ = body;
  Status first_error = Status::OK();
  for (size_t tried = 0; tried < options_.endpoints.size(); ++tried) {
    out.clear();
    Attach(path, /*streaming=*/false);
    auto ended = Run([] { return false; });
    Detach();
    if (!ended.ok()) return ended.status();
    bool connection_failed = false;
    Status s = Outcome(path, &connection_failed);
    if (s.ok()) return out;
    if (first_error.ok()) first_error = s;
    if (!connection_failed) return s;
    NextEndpoint();
  }
  return first_error;
}

namespace {

Result<json> ParseAnswer(const Result<std::string>& text, const std::string& what) {
  if (!text.ok()) return text.status();
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::IOError(fmt::format("{}: not JSON: {:.200}", what, *text));
  TRUN_RETURN_IF_ERROR(ErrorIn(j, what));
  return j;
}

}  // namespace

Result<int64_t> EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  auto j = ParseAnswer(Call("/v3/kv/put", PutRequest(key, value, lease).dump()), "etcd put");
  if (!j.ok()) return j.status();
  return Int((*j)["header"], "revision");
}

Status EtcdClient::PutMany(const std::vector<std::pair<std::string, std::string>>& kvs,
                           int64_t lease) {
  if (kvs.size() > kMaxOps) {
    return Status::InvalidArgument(fmt::format("etcd: {} puts in one transaction", kvs.size()));
  }
  json success = json::array();
  for (const auto& [k, v] : kvs) success.push_back({{"request_put", PutRequest(k, v, lease)}});
  return ParseAnswer(Call("/v3/kv/txn", json{{"success", success}}.dump()), "etcd put").status();
}

Result<EtcdClient::Snapshot> EtcdClient::Get(const std::vector<KeyRange>& ranges,
                                             bool serializable) {
  json success = json::array();
  for (const auto& r : ranges) {
    success.push_back({{"request_range", RangeRequest(r, serializable)}});
  }
  auto j = ParseAnswer(Call("/v3/kv/txn", json{{"success", success}}.dump()), "etcd get");
  if (!j.ok()) return j.status();
  Snapshot s;
  s.revision = Int((*j)["header"], "revision");
  const json& responses = (*j)["responses"];
  for (size_t i = 0; i < ranges.size(); ++i) {
    std::vector<KeyValue> kvs;
    if (responses.is_array() && i < responses.size()) {
      const json& range = responses[i]["response_range"];
      if (range.is_object() && range.contains("kvs")) {
        for (const auto& kv : range["kvs"]) kvs.push_back(ToKeyValue(kv));
      }
    }
    s.ranges.push_back(std::move(kvs));
  }
  return s;
}

Result<EtcdClient::Created> EtcdClient::PutIfAbsent(const std::string& key,
                                                    const std::string& value, int64_t lease) {
  json txn = {{"compare", json::array({{{"key", Base64Encode(key)},
                                        {"target", "CREATE"},
                                        {"result", "EQUAL"},
                                        {"create_revision", "0"}}})},
              {"success", json::array({{{"request_put", PutRequest(key, value, lease)}}})},
              {"failure", json::array({{{"request_range", RangeRequest({key, ""})}}})}};
  auto j = ParseAnswer(Call("/v3/kv/txn", txn.dump()), "etcd create");
  if (!j.ok()) return j.status();
  Created c;
  c.created = j->value("succeeded", false);
  if (c.created) {
    int64_t rev = Int((*j)["header"], "revision");
    c.kv = {key, value, rev, rev, lease};
    return c;
  }
  const json& responses = (*j)["responses"];
  if (responses.is_array() && !responses.empty()) {
    const json& range = responses[0]["response_range"];
    if (range.is_object() && range.contains("kvs") && !range["kvs"].empty()) {
      c.kv = ToKeyValue(range["kvs"][0]);
    }
  }
  return c;
}

Result<int64_t> EtcdClient::PutWhile(const std::string& key, const std::string& value,
                                     int64_t lease, const std::string& guard,
                                     int64_t guard_create_revision) {
  json txn = {
      {"compare", json::array({{{"key", Base64Encode(guard)},
                                {"target", "CREATE"},
                                {"result", "EQUAL"},
                                {"create_revision", std::to_string(guard_create_revision)}}})},
      {"success", json::array({{{"request_put", PutRequest(key, value, lease)}}})}};
  auto j = ParseAnswer(Call("/v3/kv/txn", txn.dump()), "etcd put");
  if (!j.ok()) return j.status();
  if (!j->value("succeeded", false)) return int64_t{0};
  return Int((*j)["header"], "revision");
}

Status EtcdClient::DeletePrefix(const std::string& prefix) {
  json req = {{"key", Base64Encode(prefix)}, {"range_end", Base64Encode(PrefixEnd(prefix))}};
  return ParseAnswer(Call("/v3/kv/deleterange", req.dump()), "etcd delete").status();
}

Result<int64_t> EtcdClient::GrantLease(std::chrono::seconds ttl) {
  auto j = ParseAnswer(Call("/v3/lease/grant", json{{"TTL", std::to_string(ttl.count())}}.dump()),
                       "etcd lease grant");
  if (!j.ok()) return j.status();
  int64_t id = Int(*j, "ID");
  if (id == 0) return Status::IOError("etcd lease grant: no lease in the answer");
  return id;
}

Status EtcdClient::KeepAlive(int64_t lease) {
  auto j = ParseAnswer(Call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump()),
                       "etcd keepalive");
  if (!j.ok()) return j.status();
  // A stream's answer comes wrapped in "result"; an expired lease has no TTL.
  const json& r = j->contains("result") ? (*j)["result"] : *j;
  if (Int(r, "TTL") <= 0) return Status::NotFound("etcd keepalive: the lease has expired");
  return Status::OK();
}

Status EtcdClient::Revoke(int64_t lease) {
  auto j = ParseAnswer(Call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump()),
                       "etcd lease revoke");
  if (!j.ok() && j.status().code() != StatusCode::kNotFound) return j.status();
  return Status::OK();
}

Result<std::optional<int64_t>> EtcdClient::LeaseTimeToLive(int64_t lease) {
  auto j = ParseAnswer(Call("/v3/lease/timetolive", json{{"ID", std::to_string(lease)}}.dump()),
                       "etcd lease time-to-live");
  if (!j.ok()) return j.status();
  // etcd answers a lease it does not know with TTL -1 and no grantedTTL;
  // one it knows, expired or not, with both.
  if (!j->contains("grantedTTL")) return std::optional<int64_t>();
  if (!j->contains("TTL")) return Status::IOError("etcd lease time-to-live: no TTL in the answer");
  return std::optional<int64_t>(Int(*j, "TTL"));
}

Status EtcdClient::Watch(const std::vector<KeyRange>& ranges, int64_t start_revision,
                         const std::function<bool(const WatchEvent&)>& on_event) {
  TRUN_RETURN_IF_ERROR(OpenWatch(ranges, start_revision));
  while (true) {
    auto e = NextEvent();
    if (!e.ok() || !on_event(*e)) {
      CloseWatch();
      return e.status();
    }
  }
}

Status EtcdClient::OpenWatch(const std::vector<KeyRange>& ranges, int64_t start_revision) {
  TRUN_RETURN_IF_ERROR(curl_->loaded);
  if (options_.endpoints.empty()) return Status::InvalidArgument("etcd: no endpoint");
  CloseWatch();
  body_.clear();
  for (const auto& r : ranges) {
    json create = RangeRequest(r);
    create["start_revision"] = std::to_string(start_revision);
    body_ += json{{"create_request", create}}.dump() + "\n";
  }
  sink_ = [this](std::string_view d) { return OnWatchData(d); };
  // etcd's JSON gateway (3.4, seen in tests) now and then forwards only the
  // first create requests of a body to the watch server: where the body
  // reaches it in pieces, the rest is lost once the first watcher's answer
  // has gone out. A watcher never created never tells anything, so every
  // `created` is awaited here (each try up to the timeout), and the stream
  // opened anew where some came and one is missing; the events that came
  // meanwhile come again on the new stream. Where none came, etcd is slow
  // or not reached, which is no loss: the stream stays, read as before
  // (failing over while no endpoint has answered).
  constexpr int kTries = 3;
  for (int tries = 1;; ++tries) {
    pending_.clear();
    events_.clear();
    created_ = 0;
    stream_failed_ = Status::OK();
    stream_answered_ = false;
    stream_tries_ = 1;
    Attach("/v3/watch", /*streaming=*/true);
    Status s = PumpWatch([&] { return created_ >= ranges.size(); },
                         std::chrono::steady_clock::now() + options_.timeout);
    if (s.ok() && (created_ >= ranges.size() || created_ == 0)) return Status::OK();
    CloseWatch();
    if (!s.ok()) return s;
    if (tries == kTries) {
      return Status::IOError(fmt::format(
          "etcd watch at {}: only {} of {} watchers were created within {} ms, {} times in a row",
          Endpoint(), created_, ranges.size(), options_.timeout.count(), kTries));
    }
  }
}

Result<WatchEvent> EtcdClient::NextEvent() {
  auto e = NextEventBefore(std::chrono::steady_clock::time_point::max());
  if (!e.ok()) return e.status();
  return std::move(**e);
}

Result<std::optional<WatchEvent>> EtcdClient::NextEventBefore(
    std::chrono::steady_clock::time_point until) {
  TRUN_RETURN_IF_ERROR(PumpWatch([&] { return !events_.empty(); }, until));
  if (events_.empty()) return std::optional<WatchEvent>();
  WatchEvent e = std::move(events_.front());
  events_.pop_front();
  return std::optional<WatchEvent>(std::move(e));
}

Status EtcdClient::PumpWatch(const std::function<bool()>& ready,
                             std::chrono::steady_clock::time_point until) {
  const auto due = [&] { return std::chrono::steady_clock::now() >= until; };
  while (!ready()) {
    if (!stream_failed_.ok()) return stream_failed_;
    if (!attached_) return Status::Internal("etcd watch: none is open");
    if (due()) return Status::OK();
    auto ended = Run([&] { return ready() || !stream_failed_.ok() || due(); }, until);
    if (!ended.ok()) return ended.status();
    if (!*ended || !stream_failed_.ok()) continue;
    Detach();
    bool connection_failed = false;
    Status s = Outcome("/v3/watch", &connection_failed);
    // Nothing came from this endpoint: the next may answer.
    if (connection_failed && !stream_answered_ && stream_tries_ < options_.endpoints.size()) {
      ++stream_tries_;
      NextEndpoint();
      Attach("/v3/watch", /*streaming=*/true);
      continue;
    }
    stream_failed_ = s.ok() ? Status::IOError("etcd watch: the stream ended") : s;
  }
  return Status::OK();
}

void EtcdClient::CloseWatch() {
  if (attached_) Detach();
  events_.clear();
}

// One JSON message per line; a message may arrive in pieces.
bool EtcdClient::OnWatchData(std::string_view d) {
  stream_answered_ = true;
  pending_.append(d);
  size_t start = 0;
  for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
    json j = json::parse(std::string_view(pending_).substr(start, nl - start), nullptr, false);
    if (j.is_discarded()) continue;
    stream_failed_ = ErrorIn(j, "etcd watch");
    if (!stream_failed_.ok()) return false;
    const json& r = j.contains("result") ? j["result"] : j;
    if (r.value("canceled", false) || Int(r, "compact_revision") != 0) {
      stream_failed_ = Status::IOError(fmt::format(
          "etcd watch: cancelled by the server{}",
          r.contains("cancel_reason") ? ": " + r["cancel_reason"].get<std::string>() : ""));
      return false;
    }
    if (r.value("created", false)) ++created_;
    if (!r.contains("events")) continue;
    const int64_t revision = Int(r["header"], "revision");
    for (const auto& e : r["events"]) {
      events_.push_back({e.value("type", "") == "DELETE", ToKeyValue(e["kv"]), revision});
    }
  }
  pending_.erase(0, start);
  // A line longer than any answer etcd sends is not one of its answers.
  if (pending_.size() > (64u << 20)) {
    stream_failed_ = Status::IOError("etcd watch: an answer over 64 MiB");
    return false;
  }
  return true;
}

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    unsigned char c = static_cast<unsigned char>(end.back());
    if (c < 0xff) {
      end.back() = static_cast<char>(c + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

Result<std::vector<std::string>> EtcdEndpoints(const std::string& spec,
                                               const std::string& protocol) {
  if (protocol != "http" && protocol != "https") {
    return Status::InvalidArgument(
        fmt::format("--rdzv-conf protocol={}: expected http or https", protocol));
  }
  std::vector<std::string> out;
  for (const auto& part : Split(spec, ',')) {
    std::string e(Trim(part));
    if (e.empty()) continue;
    if (e.find("://") == std::string::npos) e = protocol + "://" + e;
    if (!e.starts_with("http://") && !e.starts_with("https://")) {
      return Status::InvalidArgument(
          fmt::format("--rdzv-endpoint {}: etcd speaks http:// or https://, not {}", spec,
                      e.substr(0, e.find(':'))));
    }
    while (e.ends_with('/')) e.pop_back();
    // The authority after the scheme: host, [v6] or host:port (etcd's 2379
    // unless given).
    const size_t host = e.find("://") + 3;
    const size_t bracket = e.find(']', host);
    const size_t colon = e.find(':', bracket == std::string::npos ? host : bracket);
    if (colon == std::string::npos) {
      if (e.size() == host) {
        return Status::InvalidArgument(fmt::format("--rdzv-endpoint {}: no host", spec));
      }
      e += ":2379";
    } else {
      auto port = ParseInt(e.substr(colon + 1));
      if (!port || *port <= 0 || *port > 65535) {
        return Status::InvalidArgument(
            fmt::format("--rdzv-endpoint {}: '{}' is not a port", spec, e.substr(colon + 1)));
      }
      if (colon == host) {
        return Status::InvalidArgument(fmt::format("--rdzv-endpoint {}: no host", spec));
      }
    }
    out.push_back(e);
  }
  if (out.empty()) {
    return Status::InvalidArgument(
        "--rdzv-backend etcd needs --rdzv-endpoint HOST[:PORT] of an etcd server (port 2379 "
        "unless given; several separated by commas)");
  }
  return out;
}

}  // namespace trun::rendezvous
