// Components written in Python, as TorchX users write them: a typed
// function with a Google-style docstring that returns an AppDef.
//
//   trun run ./my_component.py:trainer --lr 0.1     a function in a file
//   trun run my_pkg.components:trainer --lr 0.1     a function in a module
//
// A C++ binary cannot call a Python function, so trun asks an interpreter:
// `$PYTHON_EXEC` (default `python3` on PATH, the interpreter trun's workers
// run) with `-m trun._component`, twice. `describe` loads the function,
// lints it with TorchX's rules (every parameter annotated with a supported
// type, the return annotated AppDef; problems name the file, line and
// parameter) and prints its parameters in the declaration format of YAML
// component files (file_component.h); trun parses the command line with
// the same parser as every other component. `build` gets the parsed values
// as JSON, calls the function and prints the AppDef's JSON (the schema of
// specs/serialize.h), which is read and validated as a YAML component's is.
//
// The interpreter gets trun's Python package on PYTHONPATH when it sits
// beside this binary (a source tree's python/, or the installed package that
// bundles the binary as trun/bin/trun), and TRUN_BINARY naming this binary,
// so `torchx.components.dist.ddp` inside a component builds the same
// command as `trun run dist.ddp`. Neither reaches the app's replicas.
//
// Thread-safety: pure functions, apart from running the interpreter.
#pragma once

#include <string>

#include "common/status.h"
#include "components/component.h"

namespace trun::components {

// "PATH.py:FN" or "dotted.module:FN".
bool IsPythonComponent(const std::string& name);

// Loads and lints the function; a problem is InvalidArgument naming the
// file, line and parameter; an interpreter that cannot be run is IOError.
Result<Component> LoadPythonComponent(const std::string& name, const std::string& trun_path);

}  // namespace trun::components
