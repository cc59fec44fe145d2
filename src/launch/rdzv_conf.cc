#include "launch/rdzv_conf.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <set>

#include "common/files.h"
#include "common/net.h"
#include "common/strings.h"
#include "rendezvous/etcd_client.h"
#include "store/auth.h"

namespace trun::launch {
namespace {

using Ms = rendezvous::Settings::Ms;

// The keys trun reads (docs/rendezvous.md, "Settings").
const std::vector<std::string> kReadKeys = {"timeout",
                                            "join_timeout",
                                            "last_call_timeout",
                                            "close_timeout",
                                            "heartbeat_interval",
                                            "heartbeat_timeout",
                                            "keep_alive_interval",
                                            "keep_alive_max_attempt",
                                            "is_host",
                                            "store_allow",
                                            "store_type",
                                            "read_timeout",
                                            "protocol",
                                            "cacert",
                                            "cert",
                                            "key",
                                            "ca_cert",
                                            "ssl_cert",
                                            "ssl_cert_key",
                                            "etcd_prefix",
                                            "job_token",
                                            "job_token_file",
                                            "job_token_fd"};

// torch's keys that trun has no use for ("rank" is torchrun's own, from
// --node-rank): no typo warning, however close they are to a key trun reads.
const std::set<std::string> kIgnoredTorchKeys = {"rank", "use_libuv"};

// Longer than any rendezvous wait anyone means, and short enough that its
// milliseconds, times keep_alive_max_attempt, fit an int64.
constexpr double kMaxSeconds = 1e9;
constexpr long long kMaxAttempts = 1'000'000;

// job_token_fd=N: the token is what descriptor N gives until EOF (as gpg's
// --passphrase-fd reads), e.g. `3<FILE`. The command line shows only the
// number; N is closed once read, so nothing trun starts inherits it, and
// the agent keeps no way back to where the token came from.
Result<std::string> ReadJobTokenFd(const std::string& text) {
  auto fd = ParseInt(text);
  if (!fd || *fd < 0 || *fd > INT32_MAX) {
    return Status::InvalidArgument("expected a descriptor number, e.g. job_token_fd=3 with 3<FILE");
  }
  const int n = static_cast<int>(*fd);
  if (::fcntl(n, F_GETFD) < 0) {
    return Status::InvalidArgument(fmt::format(
        "descriptor {} is not open: start trun with it open on the token, e.g. {}<FILE", n, n));
  }
  // The token checks allow 1024 characters; a little more shows it is too long.
  auto text_read = ReadToEnd(n, fmt::format("descriptor {}", n), 4096);
  // stdin, stdout or stderr (job_token_fd=0 with <FILE) becomes /dev/null
  // instead: closed, its number would go to the next file trun opens, which
  // the workers would then inherit as that stream.
  int devnull = n <= 2 ? ::open("/dev/null", O_RDWR | O_CLOEXEC) : -1;
  if (devnull >= 0) {
    ::dup2(devnull, n);
    ::close(devnull);
  } else {
    ::close(n);
  }
  return text_read;
}

// The job token (store/auth.h): --rdzv-conf job_token_fd=N or
// job_token_file=PATH, else job_token=TOKEN (which `ps` shows: for tests and
// one-off runs), else $TRUN_JOB_TOKEN. Each is read once, here, at start. A
// problem never quotes the token.
void ParseJobToken(const std::map<std::string, std::string>& items, rendezvous::Settings& s,
                   Problems& p) {
  std::string from;
  auto fd = items.find("job_token_fd");
  auto file = items.find("job_token_file");
  if (fd != items.end() && file != items.end()) {
    p.Add("--rdzv-conf: job_token_fd and job_token_file both name the job token; give one");
    return;
  }
  if (fd != items.end() || file != items.end()) {
    const auto& [key, value] = fd != items.end() ? *fd : *file;
    auto text = fd != items.end() ? ReadJobTokenFd(value) : ReadFile(value);
    from = fmt::format("--rdzv-conf {}={}", key, value);
    if (!text.ok()) {
      p.Add(fmt::format("{}: {}", from, text.status().message()));
      return;
    }
    s.job_token = std::string(Trim(*text));
  } else if (auto it = items.find("job_token"); it != items.end()) {
    s.job_token = it->second;
    from = "--rdzv-conf job_token";
  } else if (const char* env = std::getenv("TRUN_JOB_TOKEN"); env && *env) {
    s.job_token = env;
    from = "TRUN_JOB_TOKEN";
  }
  if (from.empty()) return;
  if (Status st = store::CheckJobToken(s.job_token); !st.ok()) {
    p.Add(fmt::format("{}: {}", from, st.message()));
  }
}

// Sets `out` to the key's seconds where the key is there and valid; true
// when it was set.
bool Seconds(const std::map<std::string, std::string>& items, const std::string& key, Ms& out,
             Problems& p) {
  auto it = items.find(key);
  if (it == items.end()) return false;
  auto v = ParseDouble(it->second);
  if (!v || !(*v > 0)) {
    p.Add(fmt::format("--rdzv-conf {}={}: expected seconds > 0", key, it->second));
    return false;
  }
  if (*v > kMaxSeconds) {
    p.Add(fmt::format("--rdzv-conf {}={}: at most {:.0f} seconds", key, it->second, kMaxSeconds));
    return false;
  }
  out = Ms(static_cast<int64_t>(*v * 1000));
  return true;
}

// torch's get_as_bool words, in any case.
void ParseIsHost(const std::string& value, rendezvous::Settings& s, Problems& p) {
  static const std::set<std::string> kTrue = {"1", "true", "t", "yes", "y"};
  static const std::set<std::string> kFalse = {"0", "false", "f", "no", "n"};
  std::string v = Lower(value);
  if (kTrue.count(v)) {
    s.is_host = true;
  } else if (kFalse.count(v)) {
    s.is_host = false;
  } else {
    p.Add(fmt::format("--rdzv-conf is_host={}: expected true or false", value));
  }
}

// torch reads `timeout` in its static and etcd backends alone (int() of the
// text: a bad one fails the launch); c10d and etcd-v2 wait join_timeout and
// never look at it, so a value there, even one torch could not parse (its own
// launcher tests pass `timeout=5'`), must not stop the job. A one-node job
// runs c10d (--standalone, or implied as torchrun 2.x implies it: args.cc).
bool ReadsTimeout(const LaunchConfig& c) {
  return c.rdzv_backend == "static" || c.rdzv_backend == "etcd";
}

// c10d's store_type as torch compares it (in any case), or "" when not given.
std::string StoreType(const std::map<std::string, std::string>& items) {
  auto it = items.find("store_type");
  return it == items.end() ? "" : Lower(Trim(it->second));
}

// torch's c10d store_type=file for a job of one node: its rendezvous needs
// no store that other hosts reach, so trun's TCP store on this host serves
// it. Of several nodes it is refused (ParseRdzvSettings).
bool FileStoreOfOneNode(const std::map<std::string, std::string>& items, const LaunchConfig& c) {
  return c.rdzv_backend == "c10d" && c.max_nodes == 1 && StoreType(items) == "file";
}

// torch's dynamic rendezvous backends, which ignore `timeout` and read
// `read_timeout` (an unknown backend is its own error).
bool DynamicBackend(const LaunchConfig& c) {
  return c.rdzv_backend == "c10d" || c.rdzv_backend == "etcd-v2";
}

// The UTF-8 of the spaces beyond ASCII that Python's str.isspace() knows.
constexpr std::string_view kUnicodeSpaces[] = {"\u0085", "\u00a0", "\u1680", "\u2000", "\u2001",
                                               "\u2002", "\u2003", "\u2004", "\u2005", "\u2006",
                                               "\u2007", "\u2008", "\u2009", "\u200a", "\u2028",
                                               "\u2029", "\u202f", "\u205f", "\u3000"};

// Whether `s` is well-formed UTF-8 (no overlong forms, no surrogates).
bool IsUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80           ? 1
                     : (b >> 5) == 0x6  ? 2
                     : (b >> 4) == 0xe  ? 3
                     : (b >> 3) == 0x1e ? 4
                                        : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? b : b & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3f);
    }
    constexpr uint32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kLeast[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n;
  }
  return true;
}

// The length of the space (of those str.strip() takes) that `s` starts
// with (`front`) or ends with; 0 if none. Of ASCII, str.strip() takes
// kPythonSpace and the separators \x1c-\x1f.
size_t SpaceAt(std::string_view s, bool front) {
  if (s.empty()) return 0;
  const char end = front ? s.front() : s.back();
  if (kPythonSpace.find(end) != std::string_view::npos || (end >= '\x1c' && end <= '\x1f'))
    return 1;
  for (std::string_view u : kUnicodeSpaces) {
    if (front ? s.starts_with(u) : s.ends_with(u)) return u.size();
  }
  return 0;
}

}  // namespace

std::string_view LStripAsStr(std::string_view s) {
  while (size_t n = SpaceAt(s, true)) s.remove_prefix(n);
  return s;
}

std::string_view StripAsStr(std::string_view s) {
  s = LStripAsStr(s);
  while (size_t n = SpaceAt(s, false)) s.remove_suffix(n);
  return s;
}

std::string HostProblem(std::string_view host) {
  if (host.empty()) return "no host";
  if (host.find('/') != std::string_view::npos) return "not a host ('/' in it: a path or a URL)";
  if (host.find_first_of(kPythonSpace) != std::string_view::npos)
    return "not a host (a space in it)";
  // torch's [\w.:-]: of ASCII, letters, digits, '_', '.', ':' and '-'.
  // Beyond ASCII its \w takes the letters and digits of every script;
  // trun leaves those bytes to the resolver rather than judge them.
  for (const char ch : host) {
    const auto u = static_cast<unsigned char>(ch);
    if (u >= 0x80 || std::isalnum(u) || ch == '_' || ch == '.' || ch == ':' || ch == '-') continue;
    const std::string shown =
        std::isprint(u) ? fmt::format("'{}'", ch) : fmt::format("byte 0x{:02x}", u);
    return fmt::format(
        "not a host ({} in it: a host is a name, an IPv4 or an IPv6 address, of letters, digits, "
        "'_', '.', ':' and '-', as torchrun requires)",
        shown);
  }
  // torch takes what Python's \w takes; bytes that are not UTF-8 it never
  // sees as word characters (Python decodes them as lone surrogates).
  if (!IsUtf8(host)) return "not a host (bytes that are not UTF-8 in it)";
  return "";
}

void SplitEndpoint(const std::string& given, int default_port, rendezvous::Settings& s,
                   Problems& p) {
  // torch strips the endpoint before it parses it.
  const std::string endpoint(StripAsStr(given));
  if (endpoint.empty()) {
    s.endpoint_host = "localhost";
    s.endpoint_port = default_port;
    return;
  }
  std::string host;
  std::optional<std::string> port_text;  // after a colon, even if empty
  if (endpoint.starts_with("[")) {
    size_t close = endpoint.find(']');
    if (close == std::string::npos) {
      p.Add(fmt::format("--rdzv-endpoint '{}': an IPv6 address needs its closing ']'", endpoint));
      return;
    }
    host = endpoint.substr(1, close - 1);
    if (close + 1 < endpoint.size()) {
      if (endpoint[close + 1] != ':') {
        p.Add(fmt::format("--rdzv-endpoint '{}': expected [address]:port", endpoint));
        return;
      }
      port_text = endpoint.substr(close + 2);
    }
  } else {
    // torch splits at the last colon, so `fe80::1:29500` is fe80::1, port
    // 29500. An IPv6 address without brackets or port, which that split
    // would break (`fe80::1` as host "fe80:", port 1), is taken whole.
    const size_t colon = endpoint.rfind(':');
    auto v6 = [](const std::string& text) {
      std::error_code ec;
      asio::ip::make_address_v6(text, ec);
      return !ec;
    };
    if (colon == std::string::npos ||
        (endpoint.find(':') != colon && v6(endpoint) && !v6(endpoint.substr(0, colon)))) {
      host = endpoint;
    } else {
      host = endpoint.substr(0, colon);
      port_text = endpoint.substr(colon + 1);
    }
  }
  if (std::string why = HostProblem(host); !why.empty()) {
    p.Add(fmt::format(
        "--rdzv-endpoint '{}': {}; give the host that runs the store, as HOST:PORT (trun's "
        "rendezvous runs over TCP)",
        endpoint, why));
    return;
  }
  int port = default_port;
  if (port_text) {
    // torch's port: one to five ASCII digits, below 65536; no sign, no
    // space, no Python underscores, and not empty.
    const bool digits =
        !port_text->empty() && port_text->size() <= 5 &&
        std::ranges::all_of(*port_text, [](char ch) { return ch >= '0' && ch <= '9'; });
    auto n = digits ? ParseInt(*port_text) : std::nullopt;
    if (!n || *n > 65535) {
      p.Add(fmt::format("--rdzv-endpoint '{}': expected a port 0-65535, got '{}'", endpoint,
                        *port_text));
      return;
    }
    port = static_cast<int>(*n);
  }
  s.endpoint_host = std::move(host);
  s.endpoint_port = port;
}

std::map<std::string, std::string> SplitRdzvConf(std::string_view text, Problems& p) {
  std::map<std::string, std::string> items;
  if (Trim(text).empty()) return items;
  for (auto& item : Split(Trim(text), ',')) {
    std::string_view kv = Trim(item);
    if (kv.empty()) {
      p.Add(fmt::format(
          "--rdzv-conf '{}': an empty item (two commas in a row, or one at either end), which "
          "torchrun refuses too; drop the extra comma",
          text));
      continue;
    }
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos || Trim(kv.substr(0, eq)).empty() ||
        Trim(kv.substr(eq + 1)).empty()) {
      p.Add(fmt::format("--rdzv-conf: '{}' is not of the form key=value", kv));
      continue;
    }
    items[std::string(Trim(kv.substr(0, eq)))] = std::string(Trim(kv.substr(eq + 1)));
  }
  return items;
}

std::vector<std::string> RdzvConfWarnings(const std::map<std::string, std::string>& items,
                                          const LaunchConfig& c) {
  std::vector<std::string> warnings;
  // A typo is matched against the keys this backend reads.
  std::vector<std::string> read = kReadKeys;
  if (DynamicBackend(c)) std::erase(read, "timeout");
  if (FileStoreOfOneNode(items, c)) {
    warnings.push_back(
        "--rdzv-conf store_type=file: trun serves this one-node job's rendezvous from a store on "
        "a free port of this host instead of a file (it serves no file store)");
  }
  for (const auto& [key, value] : items) {
    if (key == "timeout" && DynamicBackend(c)) {
      warnings.push_back(fmt::format(
          "--rdzv-conf timeout: the {} backend{} does not read it and ignores it, as torchrun's "
          "does; its join timeout is join_timeout",
          c.rdzv_backend, c.standalone ? " of a standalone job" : ""));
      continue;
    }
    bool known = std::find(kReadKeys.begin(), kReadKeys.end(), key) != kReadKeys.end();
    if (known || kIgnoredTorchKeys.count(key)) continue;
    std::string guess = ClosestMatch(key, read);
    if (guess.empty()) continue;
    warnings.push_back(fmt::format(
        "--rdzv-conf {}: trun reads no such key and ignores it (did you mean '{}'?)", key, guess));
  }
  return warnings;
}

rendezvous::Settings ParseRdzvSettings(const std::map<std::string, std::string>& items,
                                       const LaunchConfig& c, Problems& p) {
  rendezvous::Settings s;
  auto conf = [&](const char* key, const char* fallback) {
    auto it = items.find(key);
    return it == items.end() ? std::string(fallback) : it->second;
  };
  const bool etcd = c.rdzv_backend == "etcd" || c.rdzv_backend == "etcd-v2";
  if (c.rdzv_backend == "static") {
    s.endpoint_host = c.master_addr;
    s.endpoint_port = c.master_port;
  } else if (etcd) {
    // torch's etcd backend reads protocol as given and cacert, cert and key;
    // its etcd-v2 lowercases protocol and reads ca_cert, ssl_cert and
    // ssl_cert_key. trun's etcd-v2 takes those, and the first names too
    // (this backend's older documentation gave them for both).
    const bool v2 = c.rdzv_backend == "etcd-v2";
    std::string protocol = conf("protocol", "http");
    if (v2) protocol = Lower(Trim(protocol));
    auto endpoints = rendezvous::EtcdEndpoints(c.rdzv_endpoint, protocol);
    if (endpoints.ok()) {
      s.etcd.endpoints = std::move(*endpoints);
    } else {
      p.Add(endpoints.status().message());
    }
    auto tls = [&](const char* name, const char* v2_name) {
      return v2 && items.count(v2_name) ? items.at(v2_name) : conf(name, "");
    };
    s.etcd.cacert = tls("cacert", "ca_cert");
    s.etcd.cert = tls("cert", "ssl_cert");
    s.etcd.key = tls("key", "ssl_cert_key");
    s.etcd_prefix = conf("etcd_prefix", "/torchelastic/p2p");
    while (s.etcd_prefix.ends_with('/')) s.etcd_prefix.pop_back();
  } else if (c.rdzv_backend == "c10d") {
    // A one-node job's file store (a path, or none: torch's temporary file)
    // is served as a store on a free port of this host (RdzvConfWarnings).
    const bool one_node_file = FileStoreOfOneNode(items, c);
    SplitEndpoint(one_node_file ? "localhost" : c.rdzv_endpoint, one_node_file ? 0 : 29400, s, p);
    // torch's c10d backend takes tcp or file (only it reads store_type).
    if (const std::string type = StoreType(items); !type.empty() && !one_node_file) {
      if (type == "file") {
        p.Add(
            "--rdzv-conf store_type=file: trun's c10d rendezvous runs over TCP only, through a "
            "store that an agent (or `trun store`) serves; drop store_type and give that host as "
            "--rdzv-endpoint HOST:PORT, or use --rdzv-backend etcd-v2");
      } else if (type != "tcp") {
        p.Add(fmt::format(
            "--rdzv-conf store_type={}: expected tcp (torchrun's c10d also takes file, which trun "
            "does not serve)",
            items.at("store_type")));
      }
    }
  }

  // static's and etcd's "timeout" is their join timeout; torchrun's default
  // for it is 900 s.
  if (ReadsTimeout(c)) {
    s.join_timeout = Ms(900'000);
    Seconds(items, "timeout", s.join_timeout, p);
  }
  // torch's c10d (but not its file store) and etcd-v2 time their store
  // requests out after read_timeout seconds (int() of the text, > 0, and a
  // timedelta that holds it, or the launch fails). trun's links give up on
  // a store that stops answering after heartbeat_timeout instead, so the
  // value is checked as torch checks it and not used.
  const bool file_store = c.rdzv_backend == "c10d" && StoreType(items) == "file";
  if (auto it = items.find("read_timeout"); it != items.end() && DynamicBackend(c) && !file_store) {
    if (auto n = ParsePythonInt(it->second); !n || *n <= 0) {
      p.Add(fmt::format(
          "--rdzv-conf read_timeout={}: expected a whole number of seconds > 0 (torchrun refuses "
          "it too)",
          it->second));
    }
  }
  Seconds(items, "join_timeout", s.join_timeout, p);
  Seconds(items, "last_call_timeout", s.last_call_timeout, p);
  Seconds(items, "close_timeout", s.close_timeout, p);
  // torch's keep-alive settings, then trun's own names for the same thing.
  Ms keep_alive = s.heartbeat_interval;
  if (Seconds(items, "keep_alive_interval", keep_alive, p)) {
    s.heartbeat_interval = keep_alive;
    s.heartbeat_timeout = keep_alive * 3;
  }
  if (auto it = items.find("keep_alive_max_attempt"); it != items.end()) {
    auto n = ParseInt(it->second);
    if (!n || *n < 1) {
      p.Add(fmt::format("--rdzv-conf keep_alive_max_attempt={}: expected a whole number >= 1",
                        it->second));
    } else if (*n > kMaxAttempts) {
      p.Add(fmt::format("--rdzv-conf keep_alive_max_attempt={}: at most {}", it->second,
                        kMaxAttempts));
    } else {
      s.heartbeat_timeout = s.heartbeat_interval * *n;
    }
  }
  Seconds(items, "heartbeat_interval", s.heartbeat_interval, p);
  Seconds(items, "heartbeat_timeout", s.heartbeat_timeout, p);
  if (s.heartbeat_timeout <= s.heartbeat_interval) {
    p.Add(
        fmt::format("--rdzv-conf: heartbeat_timeout ({} ms) must exceed heartbeat_interval ({} ms)",
                    s.heartbeat_timeout.count(), s.heartbeat_interval.count()));
  }
  if (auto it = items.find("is_host"); it != items.end()) ParseIsHost(it->second, s, p);
  if (auto access = rendezvous::ParseStoreAccess(items); access.ok()) {
    s.store_access = std::move(*access);
  } else {
    p.Add(access.status().message());
  }
  ParseJobToken(items, s, p);
  return s;
}

rendezvous::Options RdzvOptions(const LaunchConfig& c) {
  rendezvous::Options o;
  static_cast<rendezvous::Settings&>(o) = c.rdzv;
  o.backend = c.rdzv_backend == "etcd-v2" ? "etcd" : c.rdzv_backend;
  o.run_id = c.rdzv_id;
  std::mt19937 rng(std::random_device{}());
  o.node_id = fmt::format("{}_{}_{:04x}", FqdnHostname(), ::getpid(), rng() & 0xffff);
  // torch's static rendezvous waits for MAX nodes, whatever MIN says.
  o.min_nodes = c.rdzv_backend == "static" ? c.max_nodes : c.min_nodes;
  o.max_nodes = c.max_nodes;
  o.nproc = c.nproc_per_node;
  o.max_restarts = c.max_restarts;
  o.node_rank = c.node_rank;
  o.local_addr = c.local_addr.value_or("");
  o.linger =
      rendezvous::Duration(static_cast<int64_t>(c.shutdown_timeout_s * 1000)) + o.heartbeat_timeout;
  o.port_given = c.rdzv_backend == "static";
  // A static node of rank 1 or more of a one-node job waits for a node 0
  // that hosts the store, as torch's does (args.cc warned).
  if (c.max_nodes == 1 && c.node_rank == 0 && (c.rdzv_backend == "static" || c.standalone)) {
    o.single_node = rendezvous::Options::SingleNode{
        c.rdzv_backend == "static" ? c.master_addr : c.local_addr.value_or(FqdnHostname()),
        c.rdzv_backend == "static" && c.master_port_given ? c.master_port : 0};
  }
  return o;
}

}  // namespace trun::launch
