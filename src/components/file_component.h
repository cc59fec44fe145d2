// Components written as files: a parameterised AppDef in YAML (or JSON),
// for what TorchX users write as a Python function.
//
//   description: Trains my model.
//   params:
//     lr:     {type: float, default: 0.01, help: learning rate}
//     nodes:  {type: int, default: 1}
//     data:   {type: str, help: where the data is}      # no default: required
//     tags:   {type: list, default: [a, b]}
//     env:    {type: dict, default: {}}
//     debug:  {type: bool, default: false}
//     h:      {type: str, default: null}                 # optional, None
//     config: {type: str, aliases: [-cn], default: x}
//     args:   {type: varargs}                             # *args
//   app:
//     name: train
//     roles:
//       - name: trainer
//         image: my/image
//         entrypoint: python3
//         args: [train.py, --lr, "${lr}", --data, "${data}", "${args}"]
//         num_replicas: ${nodes}
//
// and `trun run ./train.yaml --lr 0.1 --data /d -- --extra`. In the `app`
// template a string that is exactly "${param}" becomes the parameter's typed
// value (a number stays a number; a list or *args inside a list is spliced
// into it; None is null); inside a longer string `${param}` and `$param`
// are replaced by its text (lists comma-joined, dicts as K=V,...). Other
// placeholders, TorchX's macros (${app_id}, ${replica_id}, ${img_root},
// ${rank0_env}) among them, and `$$`, are left for the scheduler. Parameter
// types: str, int, float, bool, list, dict, varargs; names may not be those
// of the macros. A file without `params` and `app` is a plain AppDef, a
// component without arguments.
//
// Thread-safety: pure functions over the file system.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/problems.h"
#include "common/status.h"
#include "components/component.h"

namespace trun::components {

Result<Component> LoadFileComponent(const std::string& path);

// One parameter's declaration, `{type, default, help, aliases}` (or just its
// type name), as under `params:`; problems are added to `p`, each naming
// `params.NAME`. Python components declare theirs the same way
// (python_component.h).
Result<Param> ReadParam(const std::string& name, const nlohmann::json& v, Problems& p);

// A parsed argument as JSON: null, a string, a number, a bool, a list of
// strings or a mapping of strings.
nlohmann::json ValueJson(const specs::CfgValue& v);

}  // namespace trun::components
