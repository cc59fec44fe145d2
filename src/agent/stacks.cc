#include "agent/stacks.h"

#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "common/net.h"
#include "common/strings.h"
#include "proc/pystack.h"
#include "store/auth.h"

namespace trun::agent {
namespace {

using ojson = nlohmann::ordered_json;

// The bounds of a descent through /proc: a job's tree is a few levels deep.
constexpr int kMaxDepth = 6;
constexpr size_t kMaxDescendants = 4096;

std::vector<pid_t> Children(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream in(task.path() / "children");
    pid_t child = 0;
    while (in >> child) out.push_back(child);
  }
  return out;
}

void Descend(pid_t pid, int depth, std::vector<pid_t>* out) {
  if (depth > kMaxDepth) return;
  for (pid_t child : Children(pid)) {
    if (out->size() >= kMaxDescendants) return;
    out->push_back(child);
    Descend(child, depth + 1, out);
  }
}

// RANK and LOCAL_RANK of a process's environment, as torchrun sets them.
std::optional<std::pair<int, int>> Ranks(pid_t pid) {
  const auto env = ProcessEnvironment(pid);
  auto rank = env.find("RANK"), local_rank = env.find("LOCAL_RANK");
  if (rank == env.end()) return std::nullopt;
  return std::make_pair(std::atoi(rank->second.c_str()),
                        local_rank == env.end() ? 0 : std::atoi(local_rank->second.c_str()));
}

ojson ThreadJson(const proc::PyThreadStack& t) {
  ojson frames = ojson::array();
  for (const auto& f : t.frames) {
    frames.push_back({{"function", f.function}, {"file", f.file}, {"line", f.line}});
  }
  return {{"native_id", t.native_id},
          {"thread_id", t.thread_id},
          {"name", t.name},
          {"partial", t.partial},
          {"frames", std::move(frames)}};
}

ojson WorkerJson(const StackTarget& t) {
  ojson w;
  w["rank"] = t.rank;
  w["local_rank"] = t.local_rank;
  w["pid"] = t.pid;
  w["status"] = t.status;
  w["process_state"] = nullptr;
  w["cpu_seconds"] = nullptr;
  w["python"] = nullptr;
  w["error"] = nullptr;
  w["threads"] = ojson::array();
  if (t.pid <= 0 || (!t.status.empty() && t.status != "running")) return w;
  if (auto stat = proc::ReadProcStat(t.pid); stat.ok()) {
    w["process_state"] = std::string(1, stat->state);
    w["cpu_seconds"] = stat->cpu_seconds;
  }
  auto stacks = proc::ReadPythonStacks(t.pid);
  if (!stacks.ok()) {
    w["error"] = stacks.status().message();
    return w;
  }
  w["python"] = stacks->version;
  for (const auto& th : stacks->threads) w["threads"].push_back(ThreadJson(th));
  return w;
}

template <typename T>
T Get(const nlohmann::json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

using Clock = std::chrono::steady_clock;

int MsLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

// One HTTP/1.1 GET of `target` (the server closes after its reply), its
// whole reply as bytes, at most `max_bytes` of them; `reached` is set to the
// address and port the connection reached (SocketEndpoint).
Result<std::string> HttpGet(const std::string& host, const std::string& port,
                            const std::string& target, Clock::time_point deadline, size_t max_bytes,
                            std::string& reached) {
  auto found = ResolveWithin(host, port, deadline);
  if (!found.ok()) return found.status();
  int fd = -1;
  Status failed = Status::Unavailable(fmt::format("{}:{}: no address to connect to", host, port));
  for (addrinfo* a = found->get(); a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      failed = Status::Unavailable(
          fmt::format("{}:{}: cannot connect: {}", host, port, std::strerror(errno)));
      close(fd);
      fd = -1;
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (poll(&p, 1, MsLeft(deadline)) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      failed = Status::Unavailable(fmt::format("{}:{}: cannot connect: {}", host, port,
                                               err ? std::strerror(err) : "timed out"));
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0) return failed;
  reached = SocketEndpoint(fd, true);
  const std::string request = fmt::format(
      "GET {} HTTP/1.1\r\nHost: {}:{}\r\nConnection: close\r\n\r\n", target, host, port);
  size_t sent = 0;
  std::string reply;
  char buf[65536];
  while (true) {
    pollfd p{fd, static_cast<short>(sent < request.size() ? POLLOUT : POLLIN), 0};
    if (poll(&p, 1, MsLeft(deadline)) != 1) {
      close(fd);
      return Status::Timeout(fmt::format("{}:{}: no whole reply in time", host, port));
    }
    if (sent < request.size()) {
      ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN) break;
      if (n > 0) sent += static_cast<size_t>(n);
      continue;
    }
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EAGAIN) continue;
    if (n <= 0) break;
    if (reply.size() + static_cast<size_t>(n) > max_bytes) {
      close(fd);
      return Status::IOError(
          fmt::format("{}:{}: the reply is larger than {} KiB, more than stacks take; not read on",
                      host, port, max_bytes >> 10));
    }
    reply.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (reply.empty()) {
    return Status::Unavailable(fmt::format("{}:{}: closed without a reply", host, port));
  }
  return reply;
}

struct Reply {
  int status = 0;
  std::string nonce;    // X-Trun-Nonce
  std::string refused;  // X-Trun-Refused: why a proof was refused, where it says
  std::string body;
};

Reply ParseReply(const std::string& bytes) {
  Reply r;
  auto head_end = bytes.find("\r\n\r\n");
  std::string head = bytes.substr(0, head_end);
  if (head_end != std::string::npos) r.body = bytes.substr(head_end + 4);
  std::istringstream lines(head);
  std::string line;
  if (std::getline(lines, line)) {
    auto sp = line.find(' ');
    if (sp != std::string::npos) r.status = std::atoi(line.c_str() + sp + 1);
  }
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    if (name == "x-trun-nonce") r.nonce = std::string(Trim(line.substr(colon + 1)));
    if (name == "x-trun-refused") r.refused = std::string(Trim(line.substr(colon + 1)));
  }
  return r;
}

}  // namespace

Result<nlohmann::json> FetchStacks(const std::string& address, const std::string& token,
                                   std::chrono::milliseconds timeout, std::string_view scope,
                                   size_t max_bytes) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return Status::InvalidArgument(fmt::format(
        "'{}': expected an agent's health address HOST:PORT (its --health-check-port)", address));
  }
  const auto deadline = Clock::now() + timeout;
  const std::string path = scope.empty() ? "/stacks" : fmt::format("/stacks?scope={}", scope);
  std::string reached;
  auto ask = [&](std::string_view at, const std::string& target) -> Result<Reply> {
    const auto colon = at.rfind(':');
    std::string host(at.substr(0, colon));
    if (host.size() > 2 && host.front() == '[' && host.back() == ']')
      host = host.substr(1, host.size() - 2);
    auto bytes =
        HttpGet(host, std::string(at.substr(colon + 1)), target, deadline, max_bytes, reached);
    if (!bytes.ok()) return bytes.status();
    return ParseReply(*bytes);
  };
  auto r = ask(address, path);
  if (r.ok() && r->status == 401 && !r->nonce.empty()) {
    if (token.empty()) {
      return Status::PermissionDenied(fmt::format(
          "{}: the job has a job token and /stacks asks for it: set TRUN_JOB_TOKEN to the job's",
          address));
    }
    // The proof names the agent this connection reached, and goes there.
    const std::string agent = reached;
    r = ask(agent, fmt::format("{}{}nonce={}&agent={}&proof={}", path, scope.empty() ? "?" : "&",
                               r->nonce, agent, store::HttpAuthProof(token, r->nonce, agent)));
    if (r.ok() && r->status == 401 && r->refused == "agent-address") {
      return Status::PermissionDenied(fmt::format("{}: the agent refused the proof: {}", address,
                                                  Trim(std::string_view(r->body).substr(0, 300))));
    }
    if (r.ok() && r->status == 401) {
      return Status::PermissionDenied(fmt::format(
          "{}: the agent refused the job token: is TRUN_JOB_TOKEN this job's?", address));
    }
  }
  if (!r.ok()) return r.status();
  if (r->status != 200) {
    return Status::IOError(fmt::format("{}: /stacks answered {}: {}", address, r->status,
                                       Trim(std::string_view(r->body).substr(0, 200))));
  }
  // Every answer of trun's nests a few levels (a job's array, a node, its
  // workers, threads, frames, a frame); a deeper one is no agent's, and
  // printing or freeing it would recurse once per level, so an answer of
  // a million brackets would end this process on its stack. The parse
  // stops at the first level too deep.
  constexpr int kMaxDepth = 16;
  struct TooDeep {};
  try {
    return nlohmann::json::parse(
        r->body, [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
          if (event == nlohmann::json::parse_event_t::object_start ||
              event == nlohmann::json::parse_event_t::array_start) {
            if (depth >= kMaxDepth) throw TooDeep{};
          }
          return true;
        });
  } catch (const nlohmann::json::exception& e) {
    return Status::IOError(fmt::format("{}: /stacks is not JSON: {}", address, e.what()));
  } catch (const TooDeep&) {
    return Status::IOError(
        fmt::format("{}: /stacks answered JSON nested over {} levels, which no trun agent writes",
                    address, kMaxDepth));
  }
}

ojson ReadStacks(const std::vector<StackTarget>& targets, const StacksMeta& meta) {
  ojson doc;
  doc["hostname"] = meta.hostname;
  doc["run_id"] = meta.run_id;
  doc["node_rank"] = meta.node_rank ? ojson(*meta.node_rank) : ojson(nullptr);
  doc["round"] = meta.round ? ojson(*meta.round) : ojson(nullptr);
  doc["workers"] = ojson::array();
  for (const auto& t : targets) doc["workers"].push_back(WorkerJson(t));
  return doc;
}

std::vector<StackTarget> ReplicaWorkers(pid_t root) {
  std::vector<StackTarget> targets = RankedDescendants(root);
  if (targets.empty()) targets.push_back({0, 0, root, ""});
  return targets;
}

std::map<std::string, std::string> ProcessEnvironment(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::map<std::string, std::string> env;
  std::string var;
  while (std::getline(in, var, '\0')) {
    auto eq = var.find('=');
    if (eq != std::string::npos) env.emplace(var.substr(0, eq), var.substr(eq + 1));
  }
  return env;
}

std::vector<pid_t> Descendants(pid_t root) {
  std::vector<pid_t> pids;
  Descend(root, 0, &pids);
  return pids;
}

constexpr const char kRankTableName[] = "trun-ranks";

RankTable::RankTable() : fd_(::memfd_create(kRankTableName, MFD_CLOEXEC)) {}

RankTable::~RankTable() {
  if (fd_ >= 0) ::close(fd_);
}

void RankTable::Publish(const std::vector<StackTarget>& workers) {
  if (fd_ < 0) return;
  std::string text;
  for (const auto& w : workers) text += fmt::format("{} {} {}\n", w.pid, w.rank, w.local_rank);
  // A reader that comes between the two sees a short table for a moment:
  // it only numbers those workers from their environment instead.
  if (::ftruncate(fd_, 0) != 0) return;
  (void)!::pwrite(fd_, text.data(), text.size(), 0);
}

std::vector<StackTarget> ReadRankTable(pid_t pid) {
  std::vector<StackTarget> out;
  const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
  const std::string want = fmt::format("/memfd:{} (deleted)", kRankTableName);
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator(fds, ec)) {
    std::error_code link_ec;
    if (std::filesystem::read_symlink(fd.path(), link_ec).string() != want) continue;
    std::ifstream in(fd.path());
    StackTarget t;
    while (in >> t.pid >> t.rank >> t.local_rank) out.push_back(t);
    break;
  }
  return out;
}

std::vector<StackTarget> RankedDescendants(pid_t root) {
  const std::vector<pid_t> pids = Descendants(root);
  // The agents' own tables first: they name warm workers too.
  std::vector<StackTarget> published = ReadRankTable(root);
  for (pid_t pid : pids) {
    for (auto& t : ReadRankTable(pid)) published.push_back(t);
  }
  std::vector<StackTarget> ranked, pythons;
  for (pid_t pid : pids) {
    auto listed = std::find_if(published.begin(), published.end(),
                               [&](const StackTarget& t) { return t.pid == pid; });
    if (listed != published.end()) {
      ranked.push_back({listed->rank, listed->local_rank, pid, ""});
    } else if (auto r = Ranks(pid)) {
      ranked.push_back({r->first, r->second, pid, ""});
    } else if (proc::ReadPythonStacks(pid).ok()) {
      pythons.push_back({0, 0, pid, ""});
    }
  }
  if (ranked.empty()) {
    for (size_t i = 0; i < pythons.size(); ++i) pythons[i].rank = pythons[i].local_rank = int(i);
    return pythons;
  }
  // A worker's own children (a data loader's) inherit its RANK: keep the
  // first, outermost, process of each rank (Descend lists parents first).
  std::vector<StackTarget> out;
  for (const auto& t : ranked) {
    bool seen =
        std::any_of(out.begin(), out.end(), [&](const StackTarget& o) { return o.rank == t.rank; });
    if (!seen) out.push_back(t);
  }
  std::sort(out.begin(), out.end(),
            [](const StackTarget& a, const StackTarget& b) { return a.rank < b.rank; });
  return out;
}

std::string NodeStacksBody(ojson doc, size_t max_bytes) {
  const auto dump = [](const ojson& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  };
  std::string body = dump(doc);
  if (body.size() <= max_bytes) return body;
  const size_t whole = body.size();
  if (auto workers = doc.find("workers"); workers != doc.end() && workers->is_array()) {
    for (auto& w : *workers) {
      auto threads = w.find("threads");
      if (threads != w.end() && threads->is_array() && threads->size() > 1)
        threads->erase(threads->begin() + 1, threads->end());
    }
  }
  doc["trimmed"] = fmt::format(
      "each worker's main thread only: all threads' stacks are {} KiB, over the {} KiB a node "
      "answers with; `trun stack` on that node's own agent (--health) shows them all",
      whole >> 10, max_bytes >> 10);
  return dump(doc);
}

void OrderNodesByRank(std::vector<nlohmann::json>& nodes) {
  const auto lowest = [](const nlohmann::json& node) {
    int64_t low = std::numeric_limits<int64_t>::max();
    auto workers = node.find("workers");
    if (workers == node.end() || !workers->is_array()) return low;
    for (const auto& w : *workers) {
      if (auto r = w.find("rank"); r != w.end() && r->is_number_integer()) {
        low = std::min(low, r->get<int64_t>());
      }
    }
    return low;
  };
  std::stable_sort(nodes.begin(), nodes.end(),
                   [&](const auto& a, const auto& b) { return lowest(a) < lowest(b); });
}

std::string FormatStacks(const std::vector<nlohmann::json>& nodes) {
  std::string out;
  for (const auto& node : nodes) {
    const std::string host = Get<std::string>(node, "hostname", "?");
    if (auto why = Get<std::string>(node, "trimmed", ""); !why.empty()) {
      out += fmt::format("host {}: {}\n", host, why);
    }
    auto workers = node.find("workers");
    if (workers == node.end() || !workers->is_array()) continue;
    for (const auto& w : *workers) {
      std::string cpu = "?";
      if (auto c = w.find("cpu_seconds"); c != w.end() && c->is_number()) {
        cpu = fmt::format("{:.2f} s", c->get<double>());
      }
      out += fmt::format("rank {} (local_rank {}, host {}, pid {}, state {}, cpu {})",
                         Get<int>(w, "rank", -1), Get<int>(w, "local_rank", -1), host,
                         Get<int>(w, "pid", 0), Get<std::string>(w, "process_state", "?"), cpu);
      const std::string status = Get<std::string>(w, "status", "");
      if (!status.empty() && status != "running") out += fmt::format(": {}", status);
      out += "\n";
      if (auto err = Get<std::string>(w, "error", ""); !err.empty()) {
        out += fmt::format("  no stack: {}\n", err);
      }
      auto threads = w.find("threads");
      if (threads == w.end() || !threads->is_array()) continue;
      for (const auto& t : *threads) {
        out += fmt::format("  thread {} ({}){}\n", Get<int>(t, "native_id", 0),
                           Get<std::string>(t, "name", ""),
                           Get<bool>(t, "partial", false) ? ", partial" : "");
        auto frames = t.find("frames");
        if (frames == t.end() || !frames->is_array()) continue;
        // Outermost first, as a traceback reads.
        for (auto f = frames->rbegin(); f != frames->rend(); ++f) {
          out += fmt::format("    File \"{}\", line {}, in {}\n", Get<std::string>(*f, "file", "?"),
                             Get<int>(*f, "line", -1), Get<std::string>(*f, "function", "?"));
        }
      }
    }
  }
  return out;
}

namespace {

// A nonce: 16 hex digits of the time it was made (milliseconds of the gate's
// clock) and 16 random ones, then the gate's MAC of those 32 digits. The
// random part keeps two nonces of the same millisecond apart: the hang
// judge asks a peer twice in a row (scope=hang, then its stacks), often
// within one, and a nonce is good once.
constexpr size_t kStampDigits = 16;
constexpr size_t kSaltDigits = 16;

std::string NonceMessage(std::string_view stamp) { return fmt::format("stacks-nonce\n{}", stamp); }

}  // namespace

StacksGate::StacksGate(std::string token)
    : token_(std::move(token)), secret_(store::NewAuthNonce()) {}

std::string StacksGate::Challenge(Clock::time_point now) const {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch());
  const std::string stamp = fmt::format("{:016x}", static_cast<uint64_t>(ms.count())) +
                            store::NewAuthNonce().substr(0, kSaltDigits);
  return stamp + store::AuthProof(secret_, NonceMessage(stamp));
}

bool StacksGate::Admit(std::string_view nonce, std::string_view proof, std::string_view agent,
                       Clock::time_point now) {
  if (open()) return true;
  if (nonce.size() != kStampDigits + kSaltDigits + 64 || spent_.contains(nonce)) return false;
  const std::string_view stamp = nonce.substr(0, kStampDigits + kSaltDigits);
  uint64_t ms = 0;
  auto [end, ec] = std::from_chars(stamp.data(), stamp.data() + kStampDigits, ms, 16);
  if (ec != std::errc() || end != stamp.data() + kStampDigits) return false;
  if (!store::AuthProofMatches(secret_, NonceMessage(stamp), nonce.substr(stamp.size())))
    return false;
  const Clock::time_point made{std::chrono::milliseconds(ms)};
  if (made > now || now - made > kNonceLifetime) return false;
  if (!store::HttpAuthProofMatches(token_, nonce, agent, proof)) return false;
  std::erase_if(spent_, [&](const auto& s) { return now - s.second > kNonceLifetime; });
  if (spent_.size() >= kMaxSpent) return false;
  spent_.emplace(nonce, made);
  return true;
}

std::string QueryValue(std::string_view target, std::string_view key) {
  auto q = target.find('?');
  if (q == std::string_view::npos) return "";
  std::string_view query = target.substr(q + 1);
  query = query.substr(0, query.find('#'));
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    auto eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == key) {
      return std::string(pair.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    query = query.substr(amp + 1);
  }
  return "";
}

}  // namespace trun::agent
