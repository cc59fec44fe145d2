#include "common/hostlist.h"

#include <fmt/format.h>

#include <cctype>

#include "common/strings.h"

namespace trun {
namespace {

Status Bad(std::string_view list, std::string_view why) {
  return Status::InvalidArgument(fmt::format("host list '{}': {}", list, why));
}

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// The numbers of one bracket group's "1-3,07" as strings, padded.
Result<std::vector<std::string>> ExpandRanges(std::string_view list, std::string_view ranges) {
  std::vector<std::string> out;
  for (const auto& range : Split(ranges, ',')) {
    size_t dash = range.find('-');
    std::string_view lo = std::string_view(range).substr(0, dash);
    std::string_view hi = dash == std::string::npos ? lo : std::string_view(range).substr(dash + 1);
    if (!AllDigits(lo) || !AllDigits(hi)) {
      return Bad(list, fmt::format("'[{}]' holds '{}', which is not N or LO-HI", ranges, range));
    }
    auto a = ParseInt(lo), b = ParseInt(hi);
    if (!a || !b || *a > *b) return Bad(list, fmt::format("'{}' is not a range LO-HI", range));
    if (static_cast<size_t>(*b - *a) >= kMaxHosts) return Bad(list, "too many hosts");
    for (long long n = *a; n <= *b; ++n) {
      out.push_back(fmt::format("{:0{}d}", n, lo.size()));
      if (out.size() > kMaxHosts) return Bad(list, "too many hosts");
    }
  }
  return out;
}

// One expression: text and bracket groups, multiplied out.
Status ExpandExpr(std::string_view list, std::string_view expr, std::vector<std::string>& out) {
  std::vector<std::string> names = {""};
  size_t i = 0;
  while (i < expr.size()) {
    size_t open = expr.find('[', i);
    std::string_view text = expr.substr(i, open == std::string_view::npos ? open : open - i);
    if (text.find(']') != std::string_view::npos) return Bad(list, "a ']' without its '['");
    for (auto& n : names) n += text;
    if (open == std::string_view::npos) break;
    size_t close = expr.find(']', open);
    if (close == std::string_view::npos) return Bad(list, "a '[' without its ']'");
    auto numbers = ExpandRanges(list, expr.substr(open + 1, close - open - 1));
    if (!numbers.ok()) return numbers.status();
    if (names.size() * numbers->size() > kMaxHosts) return Bad(list, "too many hosts");
    std::vector<std::string> next;
    next.reserve(names.size() * numbers->size());
    for (const auto& n : names) {
      for (const auto& num : *numbers) next.push_back(n + num);
    }
    names = std::move(next);
    i = close + 1;
  }
  if (names.size() == 1 && names[0].empty()) return Bad(list, "an empty host name");
  if (out.size() + names.size() > kMaxHosts) return Bad(list, "too many hosts");
  out.insert(out.end(), names.begin(), names.end());
  return Status::OK();
}

}  // namespace

Result<std::vector<std::string>> ExpandHostlist(std::string_view list) {
  std::vector<std::string> out;
  std::string_view s = Trim(list);
  if (s.empty()) return Bad(list, "it is empty");
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && s[i] == '[') ++depth;
    if (i < s.size() && s[i] == ']') --depth;
    if (depth < 0) return Bad(list, "a ']' without its '['");
    if (i == s.size() || (s[i] == ',' && depth == 0)) {
      TRUN_RETURN_IF_ERROR(ExpandExpr(list, s.substr(start, i - start), out));
      start = i + 1;
    }
  }
  return out;
}

}  // namespace trun
