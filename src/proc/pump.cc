#include "proc/pump.h"

#include <unistd.h>

#include <cerrno>

namespace trun::proc {

Status WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("write", errno);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status::OK();
}

namespace {
// A very long line is written in pieces rather than held without bound.
constexpr size_t kMaxHeld = 64 * 1024;
}  // namespace

void LinePump::DuplicateMatching(int fd, std::vector<std::string> needles) {
  dup_fd_ = fd;
  needles_ = std::move(needles);
}

void LinePump::Feed(std::string_view bytes) {
  if (bytes.empty()) return;
  if (file_fd_ >= 0 && !WriteAll(file_fd_, bytes).ok()) file_fd_ = -1;
  if (tail_limit_ > 0) {
    tail_.append(bytes.substr(bytes.size() > tail_limit_ ? bytes.size() - tail_limit_ : 0));
    if (tail_.size() > tail_limit_) tail_.erase(0, tail_.size() - tail_limit_);
  }
  if (dup_fd_ >= 0) FeedDuplicate(bytes);
  if (console_fd_ < 0) return;
  // Copy line by line, adding the prefix at each line start; whatever is
  // complete (ends in \n or \r) is written, the tail of a partial line stays.
  // What is held on entry is a partial line: it waits for its end.
  size_t flushable = 0;
  while (!bytes.empty()) {
    if (at_line_start_) console_buf_ += prefix_;
    size_t end = bytes.find_first_of("\n\r");
    if (end == std::string_view::npos) {
      console_buf_.append(bytes);
      at_line_start_ = false;
      break;
    }
    // "\r\n" ends one line, not two.
    size_t len = end + 1;
    if (bytes[end] == '\r' && len < bytes.size() && bytes[len] == '\n') ++len;
    console_buf_.append(bytes.substr(0, len));
    // After a bare \r the line is redrawn from column 0: prefix it again.
    at_line_start_ = true;
    bytes.remove_prefix(len);
    flushable = console_buf_.size();
  }
  if (console_buf_.size() > kMaxHeld) flushable = console_buf_.size();
  if (flushable == 0) return;
  if (!WriteAll(console_fd_, std::string_view(console_buf_).substr(0, flushable)).ok()) {
    console_fd_ = -1;
  }
  console_buf_.erase(0, flushable);
}

void LinePump::FlushConsole() {
  if (console_fd_ >= 0 && !console_buf_.empty() && !WriteAll(console_fd_, console_buf_).ok()) {
    console_fd_ = -1;
  }
  console_buf_.clear();
}

void LinePump::FeedDuplicate(std::string_view bytes) {
  // The "\n" of a "\r\n" split between two reads ends no second line.
  if (dup_after_cr_ && bytes.front() == '\n') bytes.remove_prefix(1);
  dup_after_cr_ = bytes.ends_with('\r');
  while (!bytes.empty()) {
    size_t end = bytes.find_first_of("\n\r");
    if (end == std::string_view::npos) {
      dup_line_.append(bytes);
      if (dup_line_.size() > kMaxHeld) EmitDuplicate(false);
      return;
    }
    size_t len = end + 1;
    if (bytes[end] == '\r' && len < bytes.size() && bytes[len] == '\n') ++len;
    dup_line_.append(bytes.substr(0, end));
    EmitDuplicate(true);
    bytes.remove_prefix(len);
  }
}

// Judges dup_line_ as torch does, on the text its readline() returns: the
// line with its "\n", or without one for a line cut short.
void LinePump::EmitDuplicate(bool line_end) {
  if (line_end) dup_line_ += '\n';
  bool match = false;
  for (const auto& needle : needles_) {
    if (dup_line_.find(needle) != std::string::npos) {
      match = true;
      break;
    }
  }
  if (match) {
    if (!line_end) dup_line_ += '\n';
    if (!WriteAll(dup_fd_, prefix_ + dup_line_).ok()) dup_fd_ = -1;
  }
  dup_line_.clear();
}

void LinePump::Finish() {
  if (dup_fd_ >= 0 && !dup_line_.empty()) EmitDuplicate(false);
  FlushConsole();
}

}  // namespace trun::proc
