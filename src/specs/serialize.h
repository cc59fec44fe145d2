// AppDef in and out of JSON and YAML: one schema, two syntaxes.
//
// The schema is TorchX's dataclasses as `dataclasses.asdict` writes them
// (field names and order of torchx/specs/api.py), with two additions that
// make a round trip exact: each mount names its "type", and a workspace is
// {"projects": {...}}. Reading is forgiving where TorchX's own readers are
// (a mount may be given in its string form, "type=bind,src=/a,dst=/b"; a
// workspace as a plain path; a resource as a named resource, "gpu.small")
// and strict everywhere else: an unknown field, a value of the wrong type or
// a semantic problem (Validate in app.h) is reported with its path
// ("roles[0].num_replicas: ..."), every problem at once.
//
// YAML is read with yaml-cpp under the YAML 1.2 core schema: an unquoted
// scalar is null (~, null, empty), a bool (true/false in any of their three
// spellings), an integer, a float, or else a string; a quoted scalar is
// always a string. JSON is YAML, so one reader takes both.
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"
#include "specs/app.h"

namespace trun::specs {

nlohmann::ordered_json ToJson(const AppDef& app);
nlohmann::ordered_json ToJson(const Role& role);
nlohmann::ordered_json ToJson(const Resource& resource);

// Reads and validates an AppDef.
Result<AppDef> AppDefFromJson(const nlohmann::json& j);

// YAML (or JSON) text to a JSON value; a syntax error names its line and
// column.
Result<nlohmann::json> ParseYaml(std::string_view text);
// A JSON value as block-style YAML; strings that would read back as another
// type ("true", "1.5", "") are quoted.
std::string ToYaml(const nlohmann::ordered_json& j);

// An AppDef from YAML or JSON text, validated.
Result<AppDef> ParseAppDef(std::string_view text);
std::string AppDefToYaml(const AppDef& app);

// A file of named resources ({name: {cpu, gpu, memMB, capabilities,
// devices, tags}}), YAML or JSON.
Result<std::map<std::string, Resource>> ReadNamedResourcesFile(const std::string& path);

}  // namespace trun::specs
