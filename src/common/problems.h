// Problems: every mistake in one input, collected so the user fixes them in
// one go (a command line, a spec file, a component's arguments), then
// returned as one InvalidArgument Status, one problem per line.
//
// Thread-safety: a plain value.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trun {

class Problems {
 public:
  void Add(std::string msg) { msgs_.push_back(std::move(msg)); }
  bool empty() const { return msgs_.empty(); }
  const std::vector<std::string>& messages() const { return msgs_; }
  // OK when there is no problem.
  Status ToStatus() const {
    if (msgs_.empty()) return Status::OK();
    std::string all;
    for (size_t i = 0; i < msgs_.size(); ++i) all += (i ? "\n" : "") + msgs_[i];
    return Status::InvalidArgument(all);
  }

 private:
  std::vector<std::string> msgs_;
};

}  // namespace trun
