// Events: every transition of the agent and its rendezvous, as structured
// records (docs/events.md lists each name and its fields).
//
// An event is one JSON object on one line, in torch's Event envelope
// (torch/distributed/elastic/events/api.py), so that whatever reads
// torchrun's events reads ours:
//   {"name": "trun.worker.exited", "source": "AGENT", "timestamp": <ms since the epoch>,
//    "metadata": {"run_id": "...", "hostname": "...", ...}}
// Strings that are not UTF-8 are written with U+FFFD in place of the bad
// bytes: a line is always valid JSON.
//
// EventSink sends each line, whole, in one write(2): to stderr for
// torchrun's `--event-log-handler console`, and appended to trun's
// `--event-log-file` (O_APPEND, so agents sharing one file never tear each
// other's lines).
//
// Thread-safety: EncodeEvent is pure; an EventSink belongs to one thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace trun::agent {

// `metadata` keeps the order its fields were added in.
std::string EncodeEvent(std::string_view name, int64_t timestamp_ms,
                        const nlohmann::ordered_json& metadata);

class EventSink {
 public:
  EventSink() = default;
  // `console`: also to stderr. `path`: a file to append to, "" for none.
  // A file that cannot be opened is an InvalidArgument naming it.
  static Result<EventSink> Open(bool console, const std::string& path);
  ~EventSink();
  EventSink(EventSink&& other) noexcept;
  EventSink& operator=(EventSink&& other) noexcept;

  bool enabled() const { return console_ || file_fd_ >= 0; }
  // Writes one encoded event (without its newline). A file that stops
  // accepting writes is reported once and then skipped: the job goes on.
  void Write(std::string_view line);

 private:
  bool console_ = false;
  int file_fd_ = -1;
  std::string path_;
};

}  // namespace trun::agent
