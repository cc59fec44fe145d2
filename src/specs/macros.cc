#include "specs/macros.h"

#include <cctype>

namespace trun::specs {
namespace {

bool IdentStart(char c) { return c == '_' || std::isalpha(static_cast<unsigned char>(c)); }
bool IdentChar(char c) { return c == '_' || std::isalnum(static_cast<unsigned char>(c)); }

void SubstituteJson(nlohmann::json& j, const MacroValues& v) {
  if (j.is_string()) {
    j = v.Substitute(j.get<std::string>());
  } else if (j.is_object() || j.is_array()) {
    for (auto& child : j) SubstituteJson(child, v);
  }
}

}  // namespace

std::string SafeSubstitute(std::string_view text, const std::map<std::string, std::string>& values,
                           bool keep_escapes) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c != '$' || i + 1 >= text.size()) {
      out += c;
      ++i;
      continue;
    }
    char next = text[i + 1];
    if (next == '$') {
      out += keep_escapes ? "$$" : "$";
      i += 2;
      continue;
    }
    size_t start = 0, end = 0, after = 0;
    if (next == '{') {
      start = i + 2;
      end = start;
      if (end < text.size() && IdentStart(text[end])) {
        ++end;
        while (end < text.size() && IdentChar(text[end])) ++end;
      }
      if (end == start || end >= text.size() || text[end] != '}') {
        out += c;
        ++i;
        continue;
      }
      after = end + 1;
    } else if (IdentStart(next)) {
      start = i + 1;
      end = start + 1;
      while (end < text.size() && IdentChar(text[end])) ++end;
      after = end;
    } else {
      out += c;
      ++i;
      continue;
    }
    auto it = values.find(std::string(text.substr(start, end - start)));
    if (it == values.end()) {
      out.append(text.substr(i, after - i));
    } else {
      out += it->second;
    }
    i = after;
  }
  return out;
}

std::string MacroValues::Substitute(std::string_view text) const {
  return SafeSubstitute(text, {{"img_root", img_root},
                               {"app_id", app_id},
                               {"replica_id", replica_id},
                               {"rank0_env", rank0_env}});
}

Role MacroValues::Apply(const Role& role) const {
  Role r = role;
  for (auto& a : r.args) a = Substitute(a);
  for (auto& [k, v] : r.env) v = Substitute(v);
  SubstituteJson(r.metadata, *this);
  return r;
}

}  // namespace trun::specs
