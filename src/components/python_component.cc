#include "components/python_component.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include "common/problems.h"
#include "common/strings.h"
#include "components/file_component.h"
#include "proc/command.h"
#include "proc/spawn.h"
#include "specs/serialize.h"

namespace trun::components {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Loading a component imports the user's module, which may import torch:
// seconds, not minutes.
constexpr double kLoaderTimeoutS = 120;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The folder that holds trun's Python package, when it sits beside this
// binary; empty when the package must come from the interpreter's own path.
std::string PackageDir(const std::string& trun_path) {
  const fs::path up = fs::path(trun_path).parent_path().parent_path();
  // build/trun in a source tree, then site-packages/trun/bin/trun.
  for (const fs::path& dir : {up / "python", up.parent_path()}) {
    std::error_code ec;
    if (fs::exists(dir / "trun" / "_component.py", ec)) return dir.string();
  }
  return "";
}

// Runs `python -m trun._component VERB NAME [PAYLOAD]` and returns what it
// printed. The loader reports a bad component (the linter's findings, an
// import error, the function raising) on stderr with exit 2.
Result<std::string> RunLoader(const std::string& verb, const std::string& name,
                              const std::string& trun_path, const std::string& payload) {
  std::string python = Env("PYTHON_EXEC");
  if (python.empty()) python = "python3";
  auto resolved = proc::ResolveExecutable(python, Env("PATH"));
  if (resolved.ok() && ::access(resolved->c_str(), X_OK) != 0) {
    resolved = Status::FromErrno(*resolved, errno);
  }
  if (!resolved.ok()) {
    return Status::IOError(fmt::format(
        "component {}: cannot run the Python interpreter '{}' ({}); set PYTHON_EXEC to one "
        "that has trun's package",
        name, python, resolved.status().message()));
  }
  // Through env(1), so that the settings reach the loader only, not this
  // process's environment, which the local scheduler hands to replicas.
  std::vector<std::string> argv = {"env"};
  if (std::string dir = PackageDir(trun_path); !dir.empty()) {
    std::string old = Env("PYTHONPATH");
    argv.push_back("PYTHONPATH=" + dir + (old.empty() ? "" : ":" + old));
  }
  argv.push_back("TRUN_BINARY=" + trun_path);
  for (const std::string& a :
       {*resolved, std::string("-m"), std::string("trun._component"), verb, name}) {
    argv.push_back(a);
  }
  if (!payload.empty()) argv.push_back(payload);
  auto r = proc::RunCommand(argv, kLoaderTimeoutS);
  if (!r.ok()) return r.status();
  std::string err(Trim(r->err));
  if (r->timed_out) {
    return Status::Timeout(fmt::format("component {}: the Python loader did not finish in {} s",
                                       name, kLoaderTimeoutS));
  }
  if (r->exit_code == 2 && !err.empty()) return Status::InvalidArgument(err);
  if (r->exit_code != 0) {
    std::string hint;
    if (err.find("No module named 'trun") != std::string::npos ||
        err.find("No module named trun") != std::string::npos) {
      hint = fmt::format(
          "\n'{}' cannot import trun's package: install it for that interpreter (make "
          "install-python) or set PYTHONPATH",
          python);
    }
    return Status::Internal(fmt::format("component {}: '{} -m trun._component' exited {}{}{}{}",
                                        name, python, r->exit_code, err.empty() ? "" : ":\n", err,
                                        hint));
  }
  // What the component printed or warned went to stderr (stdout carries
  // the JSON): show it, as TorchX would, once (build imports the module
  // again after describe).
  if (verb == "build" && !r->err.empty()) std::fputs(r->err.c_str(), stderr);
  return r->out;
}

Result<json> ParseOutput(const std::string& name, const std::string& out) {
  try {
    return json::parse(out);
  } catch (const json::exception& e) {
    return Status::Internal(
        fmt::format("component {}: the Python loader printed no JSON ({})", name, e.what()));
  }
}

}  // namespace

bool IsPythonComponent(const std::string& name) {
  static const std::regex kFile(R"(.+\.py:[_A-Za-z][_A-Za-z0-9]*)");
  static const std::regex kModule(
      R"([_A-Za-z][_A-Za-z0-9]*(\.[_A-Za-z][_A-Za-z0-9]*)*:[_A-Za-z][_A-Za-z0-9]*)");
  return std::regex_match(name, kFile) || std::regex_match(name, kModule);
}

Result<Component> LoadPythonComponent(const std::string& name, const std::string& trun_path) {
  auto out = RunLoader("describe", name, trun_path, "");
  if (!out.ok()) return out.status();
  auto doc = ParseOutput(name, *out);
  if (!doc.ok()) return doc.status();
  Component c;
  c.name = name;
  c.description = doc->value("description", "");
  c.summary = c.description.substr(0, c.description.find('\n'));
  Problems p;
  for (const auto& spec : doc->value("params", json::array())) {
    json decl = spec;
    decl.erase("name");
    auto param = ReadParam(spec.value("name", ""), decl, p);
    if (param.ok()) c.params.push_back(*param);
  }
  if (!p.empty()) return Status::InvalidArgument(name + ":\n" + p.ToStatus().message());
  c.build = [name, trun_path](const ComponentArgs& a) -> Result<specs::AppDef> {
    json args = {{"values", json::object()}, {"varargs", a.varargs}};
    for (const auto& [k, v] : a.values) args["values"][k] = ValueJson(v);
    auto built = RunLoader("build", name, trun_path, args.dump());
    if (!built.ok()) return built.status();
    auto app = ParseOutput(name, *built);
    if (!app.ok()) return app.status();
    auto def = specs::AppDefFromJson(*app);
    if (!def.ok()) {
      return Status::InvalidArgument("the AppDef it returned:\n" + def.status().message());
    }
    return def;
  };
  return c;
}

}  // namespace trun::components
