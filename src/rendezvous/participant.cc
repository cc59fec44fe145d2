#include "rendezvous/participant.h"

#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/log.h"
#include "common/strings.h"

namespace trun::rendezvous {
namespace {

using json = nlohmann::json;

// A message from the node to the coordinator, sent by the control thread.
struct Request {
  int64_t seq;
  std::string key;
  std::string value;
  bool if_absent;
};

class Node final : public Rendezvous {
 public:
  Node(asio::io_context& io, Options o, std::unique_ptr<Medium> medium, ClockNow now)
      : io_(io),
        o_(std::move(o)),
        medium_(std::move(medium)),
        now_(std::move(now)),
        id_(o_.node_id) {}
  ~Node() override { Shutdown(); }

  Status Start(Handlers handlers) override {
    handlers_ = std::move(handlers);
    TRUN_RETURN_IF_ERROR(medium_->Start());
    want_round_ = true;
    main_ = std::thread([this] { MainLoop(); });
    control_ = std::thread([this] { ControlLoop(); });
    return Status::OK();
  }

  void Failed(const std::string& reason) override {
    std::lock_guard lk(mu_);
    if (!in_round_) return;
    requests_.push_back({seq_, fmt::format("end/{}", round_),
                         fmt::format("failure: {}: {}", id_, reason), /*if_absent=*/true});
    control_cv_.notify_one();
  }

  void Ready() override {
    medium_->ForgetWorkerKeys();
    std::lock_guard lk(mu_);
    want_round_ = true;
    main_cv_.notify_one();
  }

  void Succeeded(std::function<void()> done) override {
    std::lock_guard lk(mu_);
    on_done_ = std::move(done);
    succeeded_ = true;
    requests_.push_back({seq_, fmt::format("done/{}", seq_), std::to_string(round_), false});
    main_cv_.notify_one();
    control_cv_.notify_one();
  }

  void Shutdown() override {
    StopThreads();
    medium_->Stop();
  }

  void Leave(std::function<void()> then) override {
    StopThreads();
    medium_->Linger(o_.linger, [this, then = std::move(then)] {
      medium_->Stop();
      then();
    });
  }

 private:
  void StopThreads() {
    if (shut_) return;
    shut_ = true;
    {
      std::lock_guard lk(mu_);
      if (seq_ != 0) requests_.push_back({seq_, fmt::format("left/{}", seq_), "1", false});
      stopping_ = true;
      if (main_link_) main_link_->Abort();
      main_cv_.notify_one();
      control_cv_.notify_one();
    }
    if (control_.joinable()) control_.join();
    if (main_.joinable()) main_.join();
  }

  template <typename F>
  void Post(F f) {
    asio::post(io_, [this, f = std::move(f)]() mutable {
      if (!shut_) f();
    });
  }

  void PostNoRound(NoRound none) {
    Post([this, none = std::move(none)] { handlers_.round(none); });
  }

  void PostDone() {
    Post([done = on_done_] { done(); });
  }

  bool Stopping() {
    std::lock_guard lk(mu_);
    return stopping_;
  }

  // Connects, giving up at the deadline or when the agent stops. A node the
  // medium allows keeps trying to host too, if nobody does (after the host
  // was lost, whose port may take a moment to free up; under etcd, also at
  // the start): the first wins, the others connect to it.
  // The job token's answers (store::ShowJobToken), and a process on the
  // port that is no store (StoreClient::Connect): final, not worth a retry.
  static bool IsTokenRefusal(const Status& s) {
    return s.code() == StatusCode::kPermissionDenied || s.code() == StatusCode::kInvalidArgument;
  }

  // A node that has tried this long says once why it cannot connect: the
  // host may simply start later, but something else on the port (a
  // listener that never answers) would otherwise keep it silent until its
  // deadline (join_timeout at the start).
  static constexpr Duration kSayWhyAfter{30'000};

  Result<std::unique_ptr<Link>> Connect(Clock::time_point deadline, bool take_over,
                                        bool after_loss) {
    const auto since = now_();
    bool said = false;
    while (true) {
      if (take_over && medium_->TakeOver([this] { return Stopping(); })) {
        if (after_loss) log::Warning("rendezvous: took over {}", medium_->Where());
        take_over = false;
      }
      auto step = now_() + (take_over ? Duration(200) : Duration(1000));
      auto link = medium_->Connect(std::min(deadline, step), kNoOpTimeout);
      if (link.ok() || now_() >= deadline || Stopping()) return link;
      // A store that refuses this agent's job token will refuse it again.
      if (IsTokenRefusal(link.status())) return link;
      if (!said && now_() - since >= kSayWhyAfter) {
        said = true;
        log::Warning("rendezvous: {} has not let this node in for {} s: {}; trying for {} s more",
                     medium_->Where(),
                     std::chrono::duration_cast<std::chrono::seconds>(now_() - since).count(),
                     link.status().message(),
                     std::chrono::duration_cast<std::chrono::seconds>(deadline - now_()).count());
      }
    }
  }

  // ---- the main thread: join, rounds, their ends ---------------------------

  void MainLoop() {
    std::string lost_host;
    auto deadline = now_() + o_.join_timeout;
    bool take_over = medium_->ElectedAtConnect();
    while (true) {
      auto link = Connect(deadline, take_over, !lost_host.empty());
      if (Stopping()) return;
      if (!link.ok()) {
        if (IsTokenRefusal(link.status())) {
          PostNoRound({NoRound::Kind::kOther,
                       Status::PermissionDenied("rendezvous: " + link.status().message())});
        } else if (lost_host.empty()) {
          PostNoRound({NoRound::Kind::kTimedOut,
                       Status::Timeout(fmt::format(
                           "rendezvous: cannot reach {} within join_timeout: {}; is {} running, "
                           "and is --rdzv-endpoint right?",
                           medium_->Where(), link.status().message(),
                           o_.backend == "etcd"     ? "etcd"
                           : o_.backend == "static" ? "the host agent (node rank 0)"
                                                    : "the host agent"))});
        } else {
          PostNoRound({NoRound::Kind::kOther,
                       Status::IOError(fmt::format(
                           "rendezvous: lost {} hosted by {}, and no surviving node could take "
                           "it over: {}",
                           medium_->Where(), lost_host, medium_->NoTakeOverReason()))});
        }
        return;
      }
      {
        std::lock_guard lk(mu_);
        main_link_ = link->get();
        if (stopping_) return;
      }
      Status s = Participate(**link);
      {
        std::lock_guard lk(mu_);
        main_link_ = nullptr;
        seq_ = 0;
      }
      if (s.ok() || Stopping()) return;
      // The host is gone. Stop the workers, then find a new one. A node
      // whose workers still run gets round_ended below and calls Ready()
      // once they are stopped (want_round_ is false since its round began);
      // one whose workers failed before the loss was heard has called
      // Ready() already, and keeps it: its agent waits for a round, and
      // would never ask again.
      bool was_in_round;
      {
        std::lock_guard lk(mu_);
        was_in_round = in_round_;
        in_round_ = false;
        if (succeeded_) {
          // Our workers are done; the host went away after the barrier.
          PostDone();
          return;
        }
      }
      lost_host = last_host_.empty() ? "an unknown node" : last_host_;
      log::Warning("rendezvous: lost {} ({}): {}", medium_->Where(), lost_host, s.message());
      if (was_in_round) {
        RoundEnd end{RoundEnd::Cause::kMembership,
                     fmt::format("membership: lost {} ({})", medium_->Where(), lost_host)};
        Post([this, end] { handlers_.round_ended(end); });
      }
      take_over = medium_->MayTakeOver();
      deadline = now_() + o_.heartbeat_timeout + o_.heartbeat_interval;
    }
  }

  // One life on one host: join, then rounds until the job ends for this
  // node (OK) or the medium fails (the error).
  Status Participate(Link& link) {
    if (addr_.empty()) addr_ = o_.local_addr.empty() ? link.LocalAddress() : o_.local_addr;
    json info = {{"id", id_},
                 {"addr", addr_},
                 {"nproc", o_.nproc},
                 {"node_rank", o_.node_rank},
                 {"round", known_round_},
                 {"failures", known_failures_},
                 {"prev_rank", prev_rank_},
                 {"prev_nodes", prev_nodes_},
                 {"prev_host_rank", prev_host_rank_},
                 {"store_port", medium_->WorkerStorePort()},
                 {"health_port", o_.health_port}};
    // A node whose workers are stopped asks for its first round in its
    // join: one request less per node (docs/rendezvous.md).
    bool ready_at_join;
    {
      std::lock_guard lk(mu_);
      ready_at_join = want_round_ && !succeeded_;
    }
    if (ready_at_join) info["ready"] = 1;
    auto seq = link.Join(info.dump());
    if (!seq.ok()) return seq.status();
    {
      std::lock_guard lk(mu_);
      seq_ = *seq;
    }
    int64_t asked = 0;
    while (true) {
      {
        std::unique_lock lk(mu_);
        main_cv_.wait(lk, [&] { return stopping_ || succeeded_ || want_round_; });
        if (stopping_) return Status::OK();
        if (succeeded_) {
          PostDone();
          return Status::OK();
        }
        ++asked;
      }
      if (asked > 1 || !ready_at_join) {
        TRUN_RETURN_IF_ERROR(link.Put(fmt::format("ready/{}", *seq), std::to_string(asked)));
      }
      auto assign = link.Await(fmt::format("assign/{}/{}", *seq, asked));
      if (!assign.ok()) return assign.status();
      auto answer = DecodeAssignment(*assign);
      if (!answer.ok()) {
        PostNoRound({NoRound::Kind::kOther, answer.status()});
        return Status::OK();
      }
      if (auto* none = std::get_if<NoRound>(&*answer)) {
        PostNoRound(std::move(*none));
        return Status::OK();
      }
      auto place = std::get<Placement>(std::move(*answer));
      // The whole list of the round's nodes only where it is small, for
      // group rank 0 (the hang watch's judge asks every node), or where the
      // medium needs it (Round::participants).
      std::optional<std::string> list;
      if (place.nodes <= o_.listed_nodes || place.group_rank == 0 ||
          medium_->WantsMembers(place.group_rank)) {
        auto text = link.Await(fmt::format("round/{}", place.round));
        if (!text.ok()) return text.status();
        list = std::move(*text);
      }
      auto round = TakePlace(std::move(place), list);
      if (!round.ok()) {
        PostNoRound({NoRound::Kind::kOther, round.status()});
        return Status::OK();
      }
      {
        std::lock_guard lk(mu_);
        round_ = round->number;
        in_round_ = true;
        want_round_ = false;
      }
      Post([this, rd = *round] {
        medium_->OnRound(rd);
        handlers_.round(rd);
      });
      auto reason = link.Await(fmt::format("end/{}", round->number));
      if (!reason.ok()) return reason.status();
      {
        std::lock_guard lk(mu_);
        in_round_ = false;
        if (succeeded_) {
          PostDone();
          return Status::OK();
        }
      }
      Post([this, end = RoundEnd::FromWire(*reason)] { handlers_.round_ended(end); });
    }
  }

  // The round as this node takes part in it, with `list` (round/<r>) where
  // it was read.
  Result<Round> TakePlace(Placement p, const std::optional<std::string>& list) {
    Round r;
    r.number = p.round;
    r.group_rank = p.group_rank;
    r.nodes = p.nodes;
    r.world_size = p.world_size;
    r.rank_offset = p.rank_offset;
    r.addr = addr_;
    r.store_addr = std::move(p.store_addr);
    r.store_port = p.store_port;
    r.failures = p.failures;
    if (list) {
      auto doc = DecodeRound(*list);
      if (!doc.ok()) return doc.status();
      r.participants = std::move(doc->nodes);
      const auto g = static_cast<size_t>(p.group_rank);
      if (r.participants.size() != static_cast<size_t>(p.nodes) || r.participants[g].id != id_) {
        return Status::Internal(fmt::format(
            "rendezvous: round {} places this node ({}) at group rank {} of {}, which its list "
            "of nodes does not",
            p.round, id_, p.group_rank, p.nodes));
      }
    }
    known_round_ = r.number;
    known_failures_ = r.failures;
    prev_rank_ = r.group_rank;
    prev_nodes_ = r.nodes;
    prev_host_rank_ = p.host_rank;
    last_host_ = std::move(p.host);
    return r;
  }

  // ---- the control thread: heartbeats and messages --------------------------

  void ControlLoop() {
    std::unique_ptr<Link> link;
    auto last_ok = now_();
    std::unique_lock lk(mu_);
    while (true) {
      control_cv_.wait_for(lk, o_.heartbeat_interval,
                           [&] { return stopping_ || !requests_.empty(); });
      const int64_t seq = seq_;
      if (seq == 0) {
        // Not joined (or joining anew): what was asked, of an old host or
        // while joining (seq 0: a success or failure heard meanwhile, which
        // the main thread acts on), is for no host and moot. Kept, it would
        // satisfy the wait above at once, forever.
        requests_.clear();
        if (stopping_) return;
        last_ok = now_();
        link.reset();
        continue;
      }
      std::deque<Request> batch;
      batch.swap(requests_);
      const bool stopping = stopping_;
      lk.unlock();
      Status s = Status::OK();
      if (!link) {
        auto made = medium_->Connect(now_() + o_.heartbeat_interval, o_.heartbeat_timeout);
        if (made.ok()) {
          link = std::move(*made);
        } else {
          s = made.status();
        }
      }
      size_t sent = 0;
      for (; s.ok() && sent < batch.size(); ++sent) {
        const Request& r = batch[sent];
        if (r.seq != seq) continue;
        s = r.if_absent ? link->PutIfAbsent(r.key, r.value) : link->Put(r.key, r.value);
        if (!s.ok()) break;
      }
      if (s.ok() && !stopping) s = link->Heartbeat(seq);
      lk.lock();
      if (stopping) return;
      if (s.ok()) {
        last_ok = now_();
        continue;
      }
      // What was not sent goes again over a new link (to a new host, or
      // under etcd a new coordinator's epoch, once the main thread has
      // joined it: a "done" must not be lost to a takeover).
      requests_.insert(requests_.begin(), batch.begin() + static_cast<std::ptrdiff_t>(sent),
                       batch.end());
      link.reset();
      if (now_() - last_ok >= o_.heartbeat_timeout && main_link_) {
        // The host stopped answering (one cut off from the network keeps
        // its connections open): wake the main thread to recover.
        log::Warning("rendezvous: {} has not answered for {} ms: {}", medium_->Where(),
                     o_.heartbeat_timeout.count(), s.message());
        main_link_->Abort();
        last_ok = now_();
      }
      // Not at once: a request the medium keeps refusing must not spin.
      control_cv_.wait_for(lk, Duration(100), [&] { return stopping_; });
    }
  }

  asio::io_context& io_;
  Options o_;
  std::unique_ptr<Medium> medium_;
  const ClockNow now_;
  const std::string id_;
  Handlers handlers_;
  bool shut_ = false;  // loop thread only

  // The main thread's own.
  std::string addr_;
  int64_t known_round_ = -1;
  int64_t known_failures_ = 0;
  int prev_rank_ = -1;       // this node's group rank in the last round
  int prev_nodes_ = 0;       // that round's nodes
  int prev_host_rank_ = -1;  // and its host's group rank (-1: none)
  std::string last_host_;

  // Shared, under mu_.
  std::mutex mu_;
  // What each thread waits for: the main thread, a wish for a round (or
  // the end); the control thread, a message to send (or the end). Apart,
  // so that neither wakes the other for nothing (10,000 agents on a few
  // cores are 10,000 needless wake-ups).
  std::condition_variable main_cv_;
  std::condition_variable control_cv_;
  int64_t seq_ = 0;  // 0: not joined to the current host
  int64_t round_ = -1;
  bool in_round_ = false;
  // The agent has no workers running and waits for a round.
  bool want_round_ = false;
  bool succeeded_ = false;
  bool stopping_ = false;
  std::function<void()> on_done_;
  std::deque<Request> requests_;
  Link* main_link_ = nullptr;

  std::thread main_;
  std::thread control_;
};

}  // namespace

std::unique_ptr<Rendezvous> MakeParticipant(asio::io_context& io, Options options,
                                            std::unique_ptr<Medium> medium, ClockNow now) {
  return std::make_unique<Node>(io, std::move(options), std::move(medium), std::move(now));
}

}  // namespace trun::rendezvous
