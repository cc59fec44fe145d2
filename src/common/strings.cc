#include "common/strings.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace trun {

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    out.emplace_back(s.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

std::string_view StripSpace(std::string_view s) {
  const size_t first = s.find_first_not_of(kPythonSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kPythonSpace) - first + 1);
}

std::optional<long long> ParseInt(std::string_view s) {
  s = Trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  long long v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

namespace {

// `s` without the single underscores Python allows between two digits.
std::string WithoutDigitSeparators(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto digit = [&](size_t j) { return std::isdigit(static_cast<unsigned char>(s[j])) != 0; };
    const bool between_digits = i > 0 && i + 1 < s.size() && digit(i - 1) && digit(i + 1);
    if (s[i] == '_' && between_digits) continue;
    out += s[i];
  }
  return out;
}

}  // namespace

std::optional<long long> ParsePythonInt(std::string_view s) {
  return ParseInt(WithoutDigitSeparators(StripSpace(s)));
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<bool> ParseBool(std::string_view s) {
  std::string l = Lower(Trim(s));
  if (l == "true" || l == "1" || l == "yes" || l == "on") return true;
  if (l == "false" || l == "0" || l == "no" || l == "off") return false;
  return std::nullopt;
}

std::optional<double> ParseDouble(std::string_view s) {
  s = Trim(s);
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> ParsePythonFloat(std::string_view s) {
  std::string text = WithoutDigitSeparators(StripSpace(s));
  // from_chars takes no "+"; one, before a digit or a point, is Python's.
  if (text.size() > 1 && text[0] == '+' && text[1] != '+' && text[1] != '-') text.erase(0, 1);
  return ParseDouble(text);
}

std::string ShellQuote(std::string_view s) {
  if (s.empty()) return "''";
  bool safe = std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("_@%+=:,./-").find(c) != std::string_view::npos;
  });
  if (safe) return std::string(s);
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\"'\"'";
    } else {
      out += c;
    }
  }
  return out + "'";
}

namespace {
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}
}  // namespace

std::string ClosestMatch(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(3, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    size_t d = EditDistance(word, c);
    // A prefix of a long option is a likely abbreviation too.
    if (c.size() > word.size() && c.compare(0, word.size(), word) == 0 && word.size() >= 4) d = 1;
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string JoinSome(const std::vector<std::string>& names, size_t total, size_t shown) {
  const size_t named = std::min({names.size(), total, shown});
  std::string out;
  for (size_t i = 0; i < named; ++i) {
    if (i > 0) out += ", ";
    out += names[i];
  }
  if (total > named) out += (named > 0 ? " and " : "") + std::to_string(total - named) + " more";
  return out;
}

namespace {
constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 2]);
    out += kBase64[(n >> 18) & 63];
    out += kBase64[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kBase64[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kBase64[n & 63] : '=';
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t n = 0;
    int pad = 0;
    for (size_t j = 0; j < 4; ++j) {
      char c = text[i + j];
      uint32_t v = 0;
      if (c == '=' && i + 4 == text.size() && j >= 2) {
        ++pad;
      } else if (pad > 0) {
        return std::nullopt;  // data after padding
      } else {
        const char* at = std::char_traits<char>::find(kBase64, 64, c);
        if (!at) return std::nullopt;
        v = static_cast<uint32_t>(at - kBase64);
      }
      n = (n << 6) | v;
    }
    out += static_cast<char>((n >> 16) & 255);
    if (pad < 2) out += static_cast<char>((n >> 8) & 255);
    if (pad < 1) out += static_cast<char>(n & 255);
  }
  return out;
}

}  // namespace trun
