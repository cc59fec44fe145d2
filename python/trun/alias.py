"""``import torchx`` and ``import torchrunx`` served by trun, for programs written for them.

Opt in per program, in one of two ways (docs/python.md, "Running TorchX and
torchrunx programs unchanged"):

    python -m trun.alias train.py ARGS         # or: python -m trun.alias -m pytest ...
    import trun.alias                           # first thing in the program

Either puts a finder on ``sys.meta_path`` that answers for ``torchx`` and
``torchrunx`` only after asking every other finder for the top-level package:
a real torchx or torchrunx anywhere on ``sys.path`` is always the one
imported, and trun's answer is used only when there is none. (It stands
first, so that ``torchx.specs.api`` is trun's ``trun.specs.api`` and not a
second copy found through the served package's folder.)
The names resolve to trun's own module objects, not copies, so
``torchx.specs.api.AppDef is trun.specs.api.AppDef`` and ``mock.patch`` of a
``torchx...`` name patches what trun's code calls:

    torchx                     trun/_torchx_root.py, loaded as torchx (IMAGE, __version__)
    torchx.specs[.*]           trun.specs[.*]       (api, named_resources_aws, ...)
    torchx.components[.*]      trun.components[.*]  (dist, utils)
    torchx.runner[.*]          trun.runner[.*]      (api, config, events)
    torchx.settings            trun.settings
    torchx.schedulers[.*]      trun.schedulers[.*]  (api, ids, local_scheduler)
    torchx.plugins[.*]         trun.plugins[.*]     (register, registry, ...)
    torchx.util.entrypoints    trun.util.entrypoints
    torchx.util.session        trun.util.session
    torchx.util.strings        trun.util.strings    (normalize_str)
    torchx.workspace[.api]     trun.workspace[.api] (WorkspaceMixin)
    torchx.runtime.tracking[.api] trun.runtime.tracking[.api] (FsspecResultTracker)
    torchx.apps[.*]            trun.apps[.*]        (utils.booth_main)
    torchrunx[.*]              trun[.*]             (Launcher, launch, ...)

Any other ``torchx`` name (TorchX's other scheduler plug-ins, its docker
workspace) stays an ImportError.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Sequence

# The parts of torchx that trun serves (the first name under torchx.); under
# torchrunx every name is trun's.
_TORCHX_PARTS = {"specs", "components", "runner", "schedulers", "settings", "plugins", "util",
                 "runtime", "workspace", "apps"}
_ROOTS = {"torchx": "trun._torchx_root", "torchrunx": "trun"}
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def target(fullname: str) -> str | None:
    """The trun module that serves ``fullname``, or None when trun serves none."""
    root, _, rest = fullname.partition(".")
    if root not in _ROOTS:
        return None
    if not rest:
        return _ROOTS[root]
    if root == "torchx":
        if rest.partition(".")[0] not in _TORCHX_PARTS:
            return None
        return "trun." + rest
    return "trun." + rest


class _Loader(importlib.abc.Loader):
    """Loads an alias as the trun module itself (one object under two names)."""

    def __init__(self, module_name: str) -> None:
        self._module_name = module_name
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(self._module_name)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # The import system stamps the alias's spec on the module; trun's
        # own name keeps its own (reload, pickling by module name).
        module.__spec__ = self._spec


class _Finder(importlib.abc.MetaPathFinder):
    # Marks trun's finder whichever copy of this module made it (`python -m
    # trun.alias` runs one as __main__, and the program may import another).
    trun_alias = True

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target_module: types.ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        root = fullname.partition(".")[0]
        if root not in _ROOTS or _real(root):
            return None
        if fullname == "torchx":
            # A module of its own named torchx, so that `from torchx import
            # specs` looks for torchx.specs (a module keeps its name).
            spec = importlib.util.spec_from_file_location(
                "torchx", os.path.join(_PACKAGE_DIR, "_torchx_root.py"))
            # A package whose path is empty: its submodules come from here only.
            assert spec is not None
            spec.submodule_search_locations = []
            return spec
        name = target(fullname)
        if name is None:
            return None
        try:
            module_spec = importlib.util.find_spec(name)
        except ImportError:
            # A name under one trun does not have (torchx.specs.test.x, as
            # pytest's importlib mode asks for a test file's module): not ours.
            return None
        if module_spec is None:
            return None
        return importlib.machinery.ModuleSpec(
            fullname, _Loader(name),
            is_package=module_spec.submodule_search_locations is not None
            or fullname in _ROOTS)


def install() -> bool:
    """Serves ``torchx`` and ``torchrunx`` from trun where no real package is
    importable; True when torchx is trun's. Idempotent."""
    if not any(getattr(f, "trun_alias", False) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    return not _real("torchx")


def _real(name: str) -> bool:
    """Whether a finder other than trun's finds the top-level package ``name``
    (or it is imported already, and not from trun)."""
    module = sys.modules.get(name)
    if module is not None:
        return not (getattr(module, "__file__", None) or "").startswith(_PACKAGE_DIR)
    return any(_is_package(f.find_spec(name, None)) for f in sys.meta_path
               if not getattr(f, "trun_alias", False) and hasattr(f, "find_spec"))


def _is_package(spec: importlib.machinery.ModuleSpec | None) -> bool:
    """Whether ``spec`` is a module or a regular package. A namespace package
    (a folder without ``__init__.py``, such as ``torchx/`` holding TorchX's
    test files copied out of its checkout) is not a real torchx: with one on
    ``sys.path``, trun still serves the name."""
    return spec is not None and not (spec.origin is None and spec.loader is None
                                      and spec.submodule_search_locations is not None)


def _main(argv: list[str]) -> int:
    import runpy
    usage = "usage: python -m trun.alias (SCRIPT | -m MODULE) [ARGS...]"
    if not argv or argv[0] in ("-h", "--help"):
        print(usage + "\nRuns a program with `import torchx` and `import torchrunx` served "
              "by trun (never shadowing real ones).", file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    install()
    if argv[0] == "-m":
        if len(argv) < 2:
            print(f"trun.alias: -m needs a module name\n{usage}", file=sys.stderr)
            return 2
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
else:
    install()
