"""TorchX's ``torchx.specs.finder``: looking components up by name.

A component is a function that returns an AppDef. Names are those of
``trun run``: ``dist.ddp`` (a builtin: a function of a module of
``trun.components``, named by its module relative to the package), or
``PATH.py:FUNCTION`` (a component file). Packages registered under the
entry-point group ``torchx.components`` replace the builtins, as in TorchX:
``NAME = package`` finds ``NAME.module.function``, a name that starts with
``_`` (``_``, ``_1``) finds ``module.function``.

Lookups are cached in the module (``_components``; set it to None to look
again). Not thread-safe: call it from one thread, or after a first
``get_components()``.
"""

from __future__ import annotations

import abc
import difflib
import importlib
import inspect
import os
import pkgutil
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any, Callable, Sequence

from trun.specs.api import AppDef
from trun.specs.file_linter import ComponentFunctionValidator, get_fn_docstring, validate

_BUILTINS = "trun.components"
_GROUP = "torchx.components"
_components: dict[str, _Component] | None = None


class ComponentValidationException(Exception):
    """The component was found, but its function breaks the component rules."""


class ComponentNotFoundException(Exception):
    """No component has that name."""


@dataclass
class _Component:
    """A component found: its name, its docstring's description, its function,
    and what the linter found wrong with it (empty: nothing)."""

    name: str
    description: str
    fn_name: str
    fn: Callable[..., AppDef]
    validation_errors: list[str] = field(default_factory=list)


def module_relname(module: ModuleType, relative_to: ModuleType) -> str:
    """``module``'s dotted name below ``relative_to``'s (``""`` for the same
    module); ValueError when it is not below it."""
    name, base = module.__name__, relative_to.__name__
    if name == base:
        return ""
    if not name.startswith(base + "."):
        raise ValueError(f"module {name} is not inside {base}")
    return name[len(base) + 1:]


def _description(fn: Callable[..., Any]) -> str:
    if not inspect.getdoc(fn):
        return (f"{fn.__name__} TIP: improve this help string by adding a docstring\n"
                f"to your component (see: https://meta-pytorch.org/torchx/latest/"
                f"component_best_practices.html)")
    return get_fn_docstring(fn)[0]


def _component(name: str, path: str, fn: Callable[..., AppDef],
               validators: Sequence[ComponentFunctionValidator] | None) -> _Component:
    errors = [m.description for m in validate(path, fn.__name__, validators)]
    return _Component(name, _description(fn), fn.__name__, fn, errors)


def _returns_appdef(fn: Callable[..., Any]) -> bool:
    ret = inspect.signature(fn).return_annotation
    if isinstance(ret, str):
        return ret.rsplit(".", 1)[-1] == "AppDef"
    return ret is AppDef


class ComponentsFinder(abc.ABC):
    @abc.abstractmethod
    def find(self, validators: Sequence[ComponentFunctionValidator] | None
             ) -> list[_Component]:
        """The components found, each with its validation errors."""


class ModuleComponentsFinder(ComponentsFinder):
    """The components of a module and, for a package, of its ``__init__`` and
    every module below it (private ones, ``_name``, and ``*_test`` left out):
    the functions it defines whose return annotation is AppDef (``_name`` ones
    too, as in TorchX), named ``GROUP.RELATIVE_MODULE.FUNCTION`` (empty parts
    left out)."""

    def __init__(self, module: str | ModuleType, group: str) -> None:
        self.base = importlib.import_module(module) if isinstance(module, str) else module
        self.group = group

    def _modules(self) -> list[ModuleType]:
        path = getattr(self.base, "__path__", None)
        if path is None:
            return [self.base]
        prefix = self.base.__name__ + "."

        def private(name: str) -> bool:
            return any(p.startswith("_") for p in name[len(prefix):].split("."))
        return [self.base] + [importlib.import_module(info.name)
                              for info in pkgutil.walk_packages(path, prefix)
                              if not info.name.endswith("_test") and not private(info.name)]

    def find(self, validators: Sequence[ComponentFunctionValidator] | None
             ) -> list[_Component]:
        found = []
        for module in self._modules():
            path = module.__file__
            if path is None:
                continue
            rel = module_relname(module, self.base)
            for fn_name, fn in inspect.getmembers(module, inspect.isfunction):
                if fn.__module__ != module.__name__ or not _returns_appdef(fn):
                    continue
                name = ".".join(p for p in (self.group, rel, fn_name) if p)
                found.append(_component(name, path, fn, validators))
        return found


class CustomComponentsFinder(ComponentsFinder):
    """The component ``function`` of the file ``filepath``, named ``FILE:FUNCTION``."""

    def __init__(self, filepath: str, function_name: str) -> None:
        self._filepath = filepath
        self._function_name = function_name

    def find(self, validators: Sequence[ComponentFunctionValidator] | None
             ) -> list[_Component]:
        from trun import _component
        spec = f"{self._filepath}:{self._function_name}"
        if not os.path.isfile(self._filepath):
            raise ComponentNotFoundException(
                f"{self._filepath}: no such component file; give PATH.py:FUNCTION of a "
                f"file that exists")
        with open(self._filepath, encoding="utf-8") as f:
            found = _component.findings(f.read(), self._function_name, False, False)
        if any(f.kind == "missing" for f in found):
            raise ComponentNotFoundException(f"{spec}: {found[0].description}{found[0].fix}")
        errors = [m.description for m in validate(self._filepath, self._function_name,
                                                  validators)]
        if any(f.kind == "syntax" for f in found):
            raise ComponentValidationException(f"{spec}: " + "; ".join(errors))
        try:
            fn, _ = _component.load(spec, check=False)
        except _component.ComponentError as e:
            raise ComponentValidationException(str(e)) from None
        return [_Component(spec, _description(fn), self._function_name, fn, errors)]


def _load_components(validators: Sequence[ComponentFunctionValidator] | None
                     ) -> dict[str, _Component]:
    global _components
    if _components is None:
        finders = [ModuleComponentsFinder(ep.value,
                                          "" if ep.name.startswith("_") else ep.name)
                   for ep in metadata.entry_points(group=_GROUP)]
        found: dict[str, _Component] = {}
        for finder in finders or [ModuleComponentsFinder(_BUILTINS, "")]:
            found.update((c.name, c) for c in finder.find(validators))
        _components = found
    return _components


def get_components(validators: Sequence[ComponentFunctionValidator] | None = None
                   ) -> dict[str, _Component]:
    """Every builtin (or registered) component by name."""
    return dict(_load_components(validators))


def get_component(name: str, validators: Sequence[ComponentFunctionValidator] | None = None
                  ) -> _Component:
    """The component ``name`` (``dist.ddp``, ``PATH.py:FUNCTION``). Raises
    ComponentNotFoundException when there is none, ComponentValidationException
    when its function breaks the component rules."""
    if ":" in name:
        path, _, fn_name = name.rpartition(":")
        component = CustomComponentsFinder(path, fn_name).find(validators)[0]
    else:
        components = _load_components(validators)
        if name not in components:
            close = difflib.get_close_matches(name, list(components), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ComponentNotFoundException(
                f"no component {name}; {hint}`trun builtins` lists the builtins, and a "
                f"component file is named PATH.py:FUNCTION")
        component = components[name]
    if component.validation_errors:
        raise ComponentValidationException(
            f"component {name} is not valid: " + "; ".join(component.validation_errors))
    return component


def get_builtin_source(name: str) -> str:
    """The source of the file that defines builtin ``name`` (a component file:
    save it and run ``FILE:FUNCTION``)."""
    return inspect.getsource(inspect.getmodule(get_component(name).fn) or ModuleType(name))
