// StoreClient: a small blocking client of the TCPStore protocol (v2), for
// trun's own use (rendezvous, tests, the load generator); PrefixStore puts a
// prefix before every key, as torch's PrefixStore does.
//
// Connecting retries with exponential backoff (100 ms doubling to 2 s,
// jittered +-50%) until the deadline, so agents may start before the store;
// each attempt is a non-blocking connect bounded by the time left, then the
// v2 handshake (VALIDATE, PING). Every call waits at most the client's
// timeout, sends included (SO_SNDTIMEO); a failed call leaves the connection
// unusable (the stream may be mid-message), and the caller reconnects.
//
// Thread-safety: one client per thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trun::store {

class StoreClient {
 public:
  using Duration = std::chrono::milliseconds;

  // Connects to host:port, retrying until `connect_timeout` has passed.
  // A server that closes kMaxCutShort handshakes in a row is no TCPStore of
  // protocol v2 (torch 1.13's server, another program): PermissionDenied
  // at once, naming that, rather than retrying until the deadline.
  static Result<StoreClient> Connect(const std::string& host, int port, Duration connect_timeout,
                                     Duration timeout = std::chrono::seconds(300));
  static constexpr int kMaxCutShort = 3;
  StoreClient(StoreClient&& o) noexcept : fd_(o.fd_), timeout_(o.timeout_) { o.fd_ = -1; }
  StoreClient& operator=(StoreClient&&) = delete;
  ~StoreClient();

  Status Set(const std::string& key, const std::string& value);
  Result<std::string> Get(const std::string& key);  // waits for the key first, as torch
  Result<int64_t> Add(const std::string& key, int64_t delta);
  Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired);
  Result<bool> Check(const std::vector<std::string>& keys);
  // Waits until every key exists; a Timeout status after `timeout` (the
  // wait is then cancelled on the server).
  Status Wait(const std::vector<std::string>& keys, std::optional<Duration> timeout = {});
  // Waits up to `timeout` for `key`, then reads it: Get with its own limit
  // on the wait (the read after it is bounded by the client's timeout).
  Result<std::string> WaitAndGet(const std::string& key, Duration timeout);
  Result<bool> DeleteKey(const std::string& key);
  Result<int64_t> NumKeys();
  Status Append(const std::string& key, const std::string& value);
  Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys);
  Status MultiSet(const std::vector<std::pair<std::string, std::string>>& kvs);
  Status Ping();
  // Every key in the store, unfiltered (torch's client keeps those under its
  // prefix "/" and strips it).
  Result<std::vector<std::string>> ListKeys();
  // Returns once `world_size` clients have called Barrier on `key`; a
  // Timeout status after `timeout` (cancelled on the server, as Wait; the
  // arrival still counts, as in torch).
  Status Barrier(const std::string& key, int64_t world_size, std::optional<Duration> timeout = {});
  // Queues, as torch's libuv-backed client: a blocking pop waits for the key
  // first. An empty queue on a pop that does not block is NotFound.
  Status QueuePush(const std::string& key, const std::string& value);
  Result<std::string> QueuePop(const std::string& key, bool block);
  Result<int64_t> QueueLen(const std::string& key);

  // The limit on each later call, as Connect's `timeout`.
  void SetTimeout(Duration timeout);
  // Makes a call blocked in another thread return an error at once (the
  // connection is shut down; the object stays valid until destroyed). The
  // one method that may be called from another thread.
  void Abort();
  // Hands the connection's socket to the caller, who closes it; the client
  // is left unusable. For a relay, whose link (link.h) starts as a client.
  int ReleaseSocket() { return std::exchange(fd_, -1); }
  // The address this end of the connection has: the one the server sees
  // this host by, which is how a node picks the address it advertises.
  std::string LocalAddress() const;

 private:
  StoreClient(int fd, Duration timeout) : fd_(fd), timeout_(timeout) {}
  void SetSendTimeout();
  Status SendAll(const std::string& bytes);
  Status SendKeyValue(uint8_t op, const std::string& key, const std::string& value);
  // Sends `prefix` (requests without a reply) and a PING in one write, and
  // reads the PING's echo.
  Status PingAfter(std::string prefix);
  Status RecvAll(void* buf, size_t n, Duration timeout);
  Result<std::string> RecvBytes();
  Result<int64_t> RecvI64();
  Result<uint8_t> RecvU8(Duration timeout);
  // The STOP_WAITING that answers a WAIT or BARRIER just sent; after
  // `timeout`, CANCEL_WAIT and a Timeout status naming `what`.
  Status AwaitStopWaiting(Duration timeout, const std::string& what);

  int fd_;
  Duration timeout_;
};

// Every key is stored as `prefix + "/" + key`, as torch's PrefixStore; for
// example torchelastic's workers use the prefix "/worker/attempt_<N>".
// Thread-safety: as the client it wraps.
class PrefixStore {
 public:
  PrefixStore(StoreClient& client, std::string prefix)
      : client_(client), prefix_(std::move(prefix)) {}
  std::string Key(const std::string& key) const { return prefix_ + "/" + key; }

  Status Set(const std::string& key, const std::string& value) {
    return client_.Set(Key(key), value);
  }
  Result<std::string> Get(const std::string& key) { return client_.Get(Key(key)); }
  Result<int64_t> Add(const std::string& key, int64_t delta) {
    return client_.Add(Key(key), delta);
  }
  Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired) {
    return client_.CompareSet(Key(key), expected, desired);
  }
  Result<bool> Check(const std::vector<std::string>& keys) { return client_.Check(Keys(keys)); }
  Status Wait(const std::vector<std::string>& keys,
              std::optional<StoreClient::Duration> timeout = {}) {
    return client_.Wait(Keys(keys), timeout);
  }
  Result<bool> DeleteKey(const std::string& key) { return client_.DeleteKey(Key(key)); }
  Status Append(const std::string& key, const std::string& value) {
    return client_.Append(Key(key), value);
  }
  Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys) {
    return client_.MultiGet(Keys(keys));
  }
  Status MultiSet(const std::vector<std::pair<std::string, std::string>>& kvs);
  // Counts every key in the store, as torch's PrefixStore does.
  Result<int64_t> NumKeys() { return client_.NumKeys(); }

 private:
  std::vector<std::string> Keys(const std::vector<std::string>& keys) const;

  StoreClient& client_;
  std::string prefix_;
};

}  // namespace trun::store
