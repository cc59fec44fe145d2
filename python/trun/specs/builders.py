"""TorchX's ``torchx.specs.builders``: a component function's command line in Python.

``trun run FILE.py:fn ARGS`` parses component arguments in the binary; this
module gives Python code TorchX's functions for the same job (an argparse
parser per component, the decoded arguments, the AppDef), with TorchX's
rules: each parameter is ``--name`` (and ``-x`` for a one-letter name, or
the aliases an ``Annotated[T, "-x"]`` names); int, float and str are parsed
by argparse, bool is ``true`` (any case) or not, ``list[T]`` is ``a,b``,
``dict[K, V]`` is ``k=v,k2=v2``; ``*args`` takes the rest (a leading ``--``
dropped). Precedence: arguments, then ``config``, then ``cmpnt_defaults``,
then the declared defaults.
"""

import argparse
import inspect
import types
import typing
from typing import Any, Callable, Dict, List, NamedTuple, Optional

from trun.specs.api import (AppDef, BindMount, DeviceMount, VolumeMount, _split_cfg,
                            make_app_handle, parse_mounts)
from trun.specs.file_linter import TorchXArgumentHelpFormatter, get_fn_docstring

_PRIMITIVES = (int, str, float)


class ComponentArgs(NamedTuple):
    """A component function's arguments, decoded."""

    positional_args: Dict[str, Any]
    var_args: List[str]
    kwargs: Dict[str, Any]


def _strip_annotated(tp: Any) -> Any:
    return typing.get_args(tp)[0] if typing.get_origin(tp) is typing.Annotated else tp


def _strip_optional(tp: Any) -> Any:
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 2 \
            and args[1] is type(None):
        return args[0]
    return tp


def _decode(value: Any, annotation: Any) -> Any:
    """A value argparse gave (a string unless int/float/str) as ``annotation``."""
    if value is None:
        return None
    tp = _strip_annotated(_strip_optional(annotation))
    if tp is bool:
        return bool(value) and str(value).lower() == "true"
    if tp in _PRIMITIVES or not isinstance(value, str):
        return value
    if not value:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is dict and len(args) == 2:
        return {args[0](k): args[1](v) for k, v in _split_cfg(value).items()}
    if origin is list and len(args) == 1:
        if args[0] not in _PRIMITIVES:
            raise ValueError("List types support only primitives: int, str, float")
        return [args[0](v.strip()) for v in value.split(",")]
    raise ValueError(f"unsupported argument annotation `{annotation}`, expected dict or list")


class _Remainder(argparse.Action):
    """``*args``: the words left; none given keeps a value already there."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: Optional[str] = None) -> None:
        if not values and getattr(namespace, self.dest, None) is not self.default:
            return
        setattr(namespace, self.dest, values or (self.default or "").split())


def _create_args_parser(cmpnt_fn: Callable[..., AppDef],
                        cmpnt_defaults: Optional[Dict[str, str]] = None,
                        config: Optional[Dict[str, Any]] = None) -> argparse.ArgumentParser:
    """The argparse parser of ``cmpnt_fn``'s parameters (``--help`` only: ``-h``
    stays free for a parameter ``h``)."""
    description, helps = get_fn_docstring(cmpnt_fn)
    parser = argparse.ArgumentParser(prog=f"trun run <run args...> {cmpnt_fn.__name__} ",
                                     description=description, add_help=False,
                                     formatter_class=TorchXArgumentHelpFormatter)
    parser.add_argument("--help", action="help", default=argparse.SUPPRESS,
                        help="show this help message and exit")
    for name, p in inspect.signature(cmpnt_fn).parameters.items():
        tp = _strip_annotated(p.annotation)
        kw: Dict[str, Any] = {"help": helps.get(name, " "),
                              "type": tp if tp in _PRIMITIVES else str}
        if p.default is not inspect.Parameter.empty:
            kw["default"] = str(p.default) if isinstance(p.default, bool) else p.default
        if cmpnt_defaults and name in cmpnt_defaults:
            kw["default"] = cmpnt_defaults[name]
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            parser.add_argument(name, nargs=argparse.REMAINDER, action=_Remainder, **kw)
            continue
        flags = [f"--{name}"]
        aliases = [m for m in getattr(p.annotation, "__metadata__", ())
                   if isinstance(m, str) and m.startswith("-")]
        if aliases:
            flags = aliases + flags
        elif len(name) == 1:
            flags.insert(0, f"-{name}")
        if "default" not in kw and not (config and name in config):
            kw["required"] = True
        parser.add_argument(*flags, **kw)
    return parser


def parse_args(cmpnt_fn: Callable[..., AppDef], cmpnt_args: List[str],
               cmpnt_defaults: Optional[Dict[str, Any]] = None,
               config: Optional[Dict[str, Any]] = None) -> argparse.Namespace:
    """The parsed (not yet decoded) arguments; ``config`` fills what the
    arguments do not set."""
    parser = _create_args_parser(cmpnt_fn, cmpnt_defaults, config)
    parsed = parser.parse_args(cmpnt_args)
    if config:
        # Parsing onto a namespace of markers tells which were given: argparse
        # fills in defaults only where the namespace has nothing.
        unset = object()
        probe = argparse.Namespace(**dict.fromkeys(inspect.signature(cmpnt_fn).parameters,
                                                   unset))
        parser.parse_args(cmpnt_args, namespace=probe)
        for key, value in config.items():
            if key in parsed and getattr(probe, key, unset) is unset:
                setattr(parsed, key, value)
    return parsed


def component_args_from_str(cmpnt_fn: Callable[..., AppDef], cmpnt_args: List[str],
                            cmpnt_args_defaults: Optional[Dict[str, Any]] = None,
                            config: Optional[Dict[str, Any]] = None) -> ComponentArgs:
    """``cmpnt_args`` (``--k v`` or ``--k=v``) decoded to the parameters' types,
    split as the function takes them."""
    parsed = parse_args(cmpnt_fn, cmpnt_args, cmpnt_args_defaults, config)
    positional: Dict[str, Any] = {}
    var_args: List[str] = []
    kwargs: Dict[str, Any] = {}
    for name, p in inspect.signature(cmpnt_fn).parameters.items():
        value = getattr(parsed, name)
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            raise TypeError(f"component fn param `{name}` is a '**kwargs' which is not "
                            f"supported; consider changing the type to a dict or explicitly "
                            f"declare the params")
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            var_args = list(value)
            continue
        if _strip_optional(p.annotation) is not type(value):
            value = _decode(value, p.annotation)
        (kwargs if p.kind is inspect.Parameter.KEYWORD_ONLY else positional)[name] = value
    if var_args and var_args[0] == "--":
        var_args = var_args[1:]
    return ComponentArgs(positional, var_args, kwargs)


def materialize_appdef(cmpnt_fn: Callable[..., AppDef], cmpnt_args: List[str],
                       cmpnt_defaults: Optional[Dict[str, Any]] = None,
                       config: Optional[Dict[str, Any]] = None) -> AppDef:
    """Calls ``cmpnt_fn`` with ``cmpnt_args`` parsed and decoded; its AppDef."""
    args = component_args_from_str(cmpnt_fn, cmpnt_args, cmpnt_defaults, config)
    app = cmpnt_fn(*args.positional_args.values(), *args.var_args, **args.kwargs)
    if not isinstance(app, AppDef):
        raise TypeError(f"Expected a component that returns `AppDef`, but got `{type(app)}`")
    return app


__all__ = ["BindMount", "ComponentArgs", "DeviceMount", "VolumeMount", "component_args_from_str",
           "make_app_handle", "materialize_appdef", "parse_args", "parse_mounts"]
