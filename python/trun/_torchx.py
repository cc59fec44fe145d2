"""``import torchx...`` for component files written for TorchX, served by trun.

When the real torchx is not installed, :func:`install` puts a finder on
``sys.meta_path`` that answers these names with trun's modules (the same
classes and functions, so ``torchx.specs.AppDef is trun.specs.AppDef``):

    torchx                    a package holding the names below
    torchx.specs              trun.specs
    torchx.specs.api          trun.specs
    torchx.components         trun.components
    torchx.components.dist    trun.components.dist   (ddp, spmd)
    torchx.components.utils   trun.components.utils  (echo, touch, sh, python, binary, copy)
    torchx.runner             trun.runner            (get_runner, Runner)

Anything else under ``torchx`` stays an ImportError. A real torchx is never
shadowed: with one installed, install() does nothing and components get it.
The component loader (trun._component) installs the finder; user programs
may call install() themselves.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

ALIASES = {
    "torchx.specs": "trun.specs",
    "torchx.specs.api": "trun.specs",
    "torchx.components": "trun.components",
    "torchx.components.dist": "trun.components.dist",
    "torchx.components.utils": "trun.components.utils",
    "torchx.runner": "trun.runner",
}


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        if spec.name == "torchx":
            pkg = types.ModuleType("torchx", "trun's stand-in for torchx (trun._torchx)")
            pkg.__path__ = []
            pkg.IMAGE = None  # the builtins' own default image
            return pkg
        # A module of its own holding trun's objects: torchx.specs is a
        # package (torchx.specs.api), trun.specs a plain module.
        module = types.ModuleType(spec.name)
        module.__dict__.update({k: v for k, v in vars(importlib.import_module(
            ALIASES[spec.name])).items() if not k.startswith("__")})
        return module

    def exec_module(self, module):
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchx":
            return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
        if fullname in ALIASES:
            return importlib.machinery.ModuleSpec(fullname, _Loader(),
                                                  is_package=not fullname.endswith(".api"))
        return None


def install() -> bool:
    """Serves ``torchx`` from trun unless a real torchx is importable; True when it does."""
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return True
    if importlib.util.find_spec("torchx") is not None:
        return False
    sys.meta_path.append(_Finder())
    return True
