// EtcdClient: a small blocking client of etcd's v3 API, spoken through
// etcd's JSON gateway (HTTP/1.1 POSTs of JSON to /v3/..., keys and values in
// base64, 64-bit numbers as decimal strings) with libcurl. It does what the
// etcd rendezvous needs and nothing more: put, get, create-if-absent,
// delete a prefix, leases (grant, keep alive, revoke) and watches.
//
// Why the gateway and not gRPC: etcd serves it on the client port by
// default, libcurl is one small Debian package where gRPC would bring
// protobuf, a code generator and a large runtime; the rendezvous sends a few
// messages per node per round, so JSON's cost is nothing beside a raft
// commit. A watch is one long POST whose response streams one JSON message
// per line; several watches share one stream (one create_request per line of
// the request body).
//
// Every call waits at most the client's timeout (watches have none: they
// last until the event they wait for, an error or Abort()). Endpoints are
// tried in order; the one that answered is kept until it fails. TLS comes
// from the options (https:// endpoints, a CA file, a client certificate).
//
// Thread-safety: one client per thread, except Abort(), which any thread
// may call to make the call in progress (and every later one) return an
// error at once. A client keeps its connection between calls.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace trun::rendezvous {

struct EtcdOptions {
  // "http://host:port" or "https://host:port", tried in order.
  std::vector<std::string> endpoints;
  std::string cacert;  // PEM file of the CA that signed the server's certificate
  std::string cert;    // PEM client certificate, when the server asks for one
  std::string key;     // and its private key
  std::chrono::milliseconds timeout{5'000};
};

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct WatchEvent {
  bool deleted = false;  // a DELETE (or a lease's expiry); else a PUT
  KeyValue kv;
  int64_t revision = 0;  // the store's revision when it happened
};

// A key, or every key in [key, range_end) when range_end is set.
struct KeyRange {
  std::string key;
  std::string range_end;
};

class EtcdClient {
 public:
  explicit EtcdClient(EtcdOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // Puts; returns the store's revision after the put.
  Result<int64_t> Put(const std::string& key, const std::string& value, int64_t lease = 0);
  // Puts up to kMaxOps keys in one transaction (etcd's default limit of
  // operations per transaction is 128).
  static constexpr size_t kMaxOps = 128;
  Status PutMany(const std::vector<std::pair<std::string, std::string>>& kvs, int64_t lease = 0);
  // The keys of each range, read at one revision (returned in `revision`).
  struct Snapshot {
    std::vector<std::vector<KeyValue>> ranges;
    int64_t revision = 0;
  };
  // `serializable`: read from the member's own state, without a round of
  // consensus (etcd's serializable read): it answers while commits are
  // held up, and may lag them.
  Result<Snapshot> Get(const std::vector<KeyRange>& ranges, bool serializable = false);
  // Creates `key` only if it does not exist. `created` says whether this
  // call did; `kv` is the key as it is now (ours or the one that was there).
  struct Created {
    bool created = false;
    KeyValue kv;
  };
  Result<Created> PutIfAbsent(const std::string& key, const std::string& value, int64_t lease = 0);
  // Puts `key` only while `guard` is the key created at
  // `guard_create_revision` (a coordinator still in office); returns the
  // store's revision after the put, or 0 where the guard is gone or
  // another (nothing was put).
  Result<int64_t> PutWhile(const std::string& key, const std::string& value, int64_t lease,
                           const std::string& guard, int64_t guard_create_revision);
  Status DeletePrefix(const std::string& prefix);

  // A lease of `ttl` (etcd raises it to its minimum, about 2 s).
  Result<int64_t> GrantLease(std::chrono::seconds ttl);
  // Renews a lease; NotFound once it has expired or been revoked.
  Status KeepAlive(int64_t lease);
  Status Revoke(int64_t lease);
  // The seconds a lease has left, rounded toward zero as etcd rounds them
  // (0: less than a second either side of its expiry; below 0: expired at
  // least a second ago and not yet revoked, as etcd revokes through a
  // commit, which a stalled disk holds up); nothing where etcd knows no
  // such lease (it was revoked, or never granted).
  Result<std::optional<int64_t>> LeaseTimeToLive(int64_t lease);

  // Watches the ranges from `start_revision` on, calling `on_event` for each
  // event in order until it returns false (then OK), the stream fails, or
  // Abort() is called (an error either way).
  Status Watch(const std::vector<KeyRange>& ranges, int64_t start_revision,
               const std::function<bool(const WatchEvent&)>& on_event);

  // A watch read at the caller's pace, which may last as long as the client:
  // OpenWatch starts it and returns once etcd has created a watcher for
  // every range (opening it anew where some but not all were created
  // within the timeout, an error after three such tries; where none was,
  // at once, the stream still open), NextEvent waits for its next event in
  // order (an error once the stream fails or Abort() is called; the events
  // before come first), NextEventBefore the same until `until` (nothing
  // where it came first, the watch still open), CloseWatch ends it. While
  // one is open the client's other calls fail: a node keeps one client for
  // its requests and one for its watch, each on one kept-alive connection
  // (a watch ended early costs its connection; etcd spends CPU on every new
  // one).
  Status OpenWatch(const std::vector<KeyRange>& ranges, int64_t start_revision);
  Result<WatchEvent> NextEvent();
  Result<std::optional<WatchEvent>> NextEventBefore(std::chrono::steady_clock::time_point until);
  void CloseWatch();

  void Abort();
  // The address this host's end of the last connection had: how etcd sees
  // this host, which a node advertises to the others.
  std::string LocalAddress() const;
  // The endpoint in use (for messages).
  std::string Endpoint() const;

 private:
  // POSTs `body` to `path` on the current endpoint, failing over to the
  // next on a connection error; the answer's body.
  Result<std::string> Call(const std::string& path, const std::string& body);
  // Starts a POST of body_ to `path` on the current endpoint, its answer's
  // bytes going to sink_ (which returns false to end it).
  void Attach(const std::string& path, bool streaming);
  // Drives the attached transfer until it ends (true; its code in result_)
  // or `enough()` holds (false); an error only when aborted. `enough()` is
  // asked at least every second, and at `until`.
  Result<bool> Run(
      const std::function<bool()>& enough,
      std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max());
  void Detach();
  // What the ended transfer's code and HTTP status mean; `connection_failed`
  // says whether another endpoint is worth a try.
  Status Outcome(const std::string& path, bool* connection_failed);
  // Drives the open watch until `ready()` holds, its stream fails (its
  // error) or `until` passes (OK either way), failing over to the next
  // endpoint while none has answered.
  Status PumpWatch(const std::function<bool()>& ready, std::chrono::steady_clock::time_point until);
  // The watch stream's bytes: whole lines become events_, created_ or
  // stream_failed_.
  bool OnWatchData(std::string_view data);
  void NextEndpoint() { endpoint_ = (endpoint_ + 1) % options_.endpoints.size(); }

  struct Curl;
  EtcdOptions options_;
  std::unique_ptr<Curl> curl_;
  size_t endpoint_ = 0;
  std::string local_address_;
  std::atomic<bool> aborted_{false};
  // The transfer in progress (attached_), what it sends, where its answer
  // goes, and how it ended.
  bool attached_ = false;
  std::string body_;
  std::function<bool(std::string_view)> sink_;
  int result_ = 0;  // a CURLcode
  // The open watch: its bytes not yet a whole line, its events not yet
  // taken, how many of its watchers etcd created, why it ended, and whether
  // any byte came (before, another endpoint may be tried).
  std::string pending_;
  std::deque<WatchEvent> events_;
  size_t created_ = 0;
  Status stream_failed_;
  bool stream_answered_ = false;
  size_t stream_tries_ = 0;
};

// A prefix's range end: the prefix with its last byte incremented, as etcd
// defines it.
std::string PrefixEnd(const std::string& prefix);

// Parses `--rdzv-endpoint` for etcd ("host", "host:port", a URL, or several
// of them separated by commas) into endpoints; `protocol` is http or https.
Result<std::vector<std::string>> EtcdEndpoints(const std::string& spec,
                                               const std::string& protocol);

}  // namespace trun::rendezvous
