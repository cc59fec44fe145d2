// Small string helpers shared by every module.
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trun {

std::vector<std::string> Split(std::string_view s, char sep);
std::string_view Trim(std::string_view s);
// The ASCII whitespace Python's int() and float() take off (str.strip(): \x1c-\x1f too).
inline constexpr std::string_view kPythonSpace = " \t\n\r\f\v";
// `s` without kPythonSpace at either end, as int() and float() strip their text.
std::string_view StripSpace(std::string_view s);
// `s` with its ASCII letters lowercased (HTTP header names, torch's
// case-blind words).
std::string Lower(std::string_view s);
// Parses a whole decimal integer (optional sign); nullopt on any junk.
std::optional<long long> ParseInt(std::string_view s);
// Python's int(s): ParseInt's syntax, single underscores between digits
// ("1_000") and any ASCII whitespace around it, as torchrun's argparse reads
// its numbers.
std::optional<long long> ParsePythonInt(std::string_view s);
// The INI words for a bool, in any case: true/1/yes/on, false/0/no/off.
std::optional<bool> ParseBool(std::string_view s);
// Parses a whole decimal number, e.g. "0.1", "30".
std::optional<double> ParseDouble(std::string_view s);
// Python's float(s) for the decimal forms: ParseDouble's syntax, a leading
// "+", single underscores between digits ("1_0.5") and any ASCII whitespace
// around it, as torchrun's argparse reads its fractions.
std::optional<double> ParsePythonFloat(std::string_view s);
// Python's shlex.quote: `s` as one word for a POSIX shell ('' when empty,
// as is when it has only [A-Za-z0-9_@%+=:,./-], else single-quoted).
std::string ShellQuote(std::string_view s);
// The candidate closest to `word` by edit distance, when it is close enough
// to be a plausible typo ("did you mean ...?"); empty otherwise.
std::string ClosestMatch(std::string_view word, const std::vector<std::string>& candidates);
// A list of `total` things named by its first few, for a message that must
// stay readable however many there are: the first `shown` of `names` (a
// caller may collect only those) joined by ", ", then " and <N> more" for
// the rest of `total` ("<N> more" alone when none is named).
// {"a", "b", "c"}, total 5, shown 2: "a, b and 3 more".
std::string JoinSome(const std::vector<std::string>& names, size_t total, size_t shown = 8);
// Standard base64 (RFC 4648, padded), as etcd's JSON gateway carries bytes.
std::string Base64Encode(std::string_view bytes);
// nullopt on a character outside the alphabet or a bad length.
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace trun
