#include "proc/warm_protocol.h"

#include <fmt/format.h>

#include <charconv>

namespace trun::proc {

Result<PythonCommand> ParsePythonCommand(const std::vector<std::string>& argv) {
  PythonCommand c;
  size_t i = 1;
  if (i < argv.size() && argv[i] == "-u") ++i;
  if (i < argv.size() && (argv[i] == "-m" || argv[i] == "-c")) {
    c.kind = argv[i] == "-m" ? PythonCommand::Kind::kModule : PythonCommand::Kind::kCode;
    if (++i == argv.size()) {
      return Status::InvalidArgument(fmt::format("warm start: {} needs a value", argv[i - 1]));
    }
  } else if (i == argv.size() || argv[i].starts_with("-")) {
    return Status::InvalidArgument(
        fmt::format("warm start runs `python [-u] FILE|-m MODULE|-c CODE ...`, not `{}`",
                    i < argv.size() ? argv[i] : std::string("python")));
  }
  c.target = argv[i];
  c.args.assign(argv.begin() + static_cast<std::ptrdiff_t>(i) + 1, argv.end());
  return c;
}

namespace {

void Field(std::string& out, std::string_view s) {
  out.append(s);
  out.push_back('\0');
}

// Indexed by PythonCommand::Kind.
constexpr std::string_view kKindNames[] = {"script", "module", "code"};

}  // namespace

std::string Frame(std::string_view payload) {
  const uint32_t n = static_cast<uint32_t>(payload.size());
  std::string out{static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                  static_cast<char>(n)};
  out.append(payload);
  return out;
}

std::string EncodeRequest(const WarmRequest& r) {
  std::string out;
  Field(out, kWarmMagic);
  Field(out, std::to_string(r.parent));
  Field(out, r.cwd);
  Field(out, kKindNames[static_cast<int>(r.command.kind)]);
  Field(out, r.command.target);
  Field(out, std::to_string(r.command.args.size()));
  for (const auto& a : r.command.args) Field(out, a);
  Field(out, std::to_string(r.env.size()));
  for (const auto& e : r.env) Field(out, e);
  return Frame(out);
}

uint32_t DecodeFrameLength(const char header[4]) {
  uint32_t n = 0;
  for (int b = 0; b < 4; ++b) n = (n << 8) | static_cast<unsigned char>(header[b]);
  return n;
}

Result<pid_t> DecodeReply(std::string_view payload) {
  if (payload.starts_with("ok ")) {
    std::string_view digits = payload.substr(3);
    pid_t pid = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (ec == std::errc() && end == digits.data() + digits.size() && pid > 0) return pid;
  } else if (payload.starts_with("error ")) {
    return Status::IOError(fmt::format("warm start: {}", payload.substr(6)));
  }
  return Status::Internal(fmt::format("warm start: unreadable answer '{}'", payload));
}

}  // namespace trun::proc
