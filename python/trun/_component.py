"""The Python component loader that ``trun run FILE.py:FN`` runs (not for users).

    python -m trun._component describe SPEC        -> the parameters, as JSON
    python -m trun._component build SPEC ARGS_JSON -> the AppDef, as JSON

SPEC is ``path/to/file.py:fn`` or ``dotted.module:fn``. ``describe`` first
lints the function's source with TorchX's rules (torchx/specs/file_linter.py:
every parameter annotated with a primitive, ``Optional[T]``, ``list[T]``,
``tuple[T, ...]`` or ``dict[K, V]``; the return annotated ``AppDef``; no
``**kwargs``), then declares each parameter in the format of YAML component
files, with its help from the Google-style docstring. The C++ side parses the
command line (one parser for every component) and calls ``build`` with the
typed values. Every problem is printed on stderr as ``FILE:LINE: ...`` with
exit 2. See src/components/python_component.h and docs/python.md.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import traceback
import types
import typing
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

SUPPORTED = "int, float, str, bool, Optional[T], list[T], tuple[T, ...] or dict[K, V] of those"


class ComponentError(Exception):
    """A problem with the component or its arguments: exit 2, the message on stderr."""


# ---- where the function is ----------------------------------------------------------

def _split(spec: str) -> Tuple[str, str]:
    where, _, fn = spec.rpartition(":")
    if not where or not fn.isidentifier():
        raise ComponentError(f"component {spec!r}: expected FILE.py:FUNCTION or MODULE:FUNCTION")
    return where, fn


def _source_path(where: str) -> Tuple[str, Optional[str]]:
    """(the file that defines the component, the module name or None for a file)."""
    if where.endswith(".py"):
        if not os.path.isfile(where):
            raise ComponentError(f"component file {where!r}: no such file")
        return where, None
    try:
        found = importlib.util.find_spec(where)
    except (ImportError, ValueError) as e:
        raise ComponentError(f"component module {where!r}: {e}") from None
    if found is None or not found.origin or not found.origin.endswith(".py"):
        raise ComponentError(f"component module {where!r}: not found on the Python path "
                             f"({sys.executable}); run trun from the directory that holds it, "
                             f"or add it to PYTHONPATH")
    return found.origin, where


# ---- TorchX's linter, on the source -------------------------------------------------

def _is_primitive(node: ast.expr) -> bool:
    return isinstance(node, ast.Name)


def _optional_inner(node: ast.expr) -> Optional[ast.expr]:
    if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "Optional":
        return node.slice
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        if isinstance(node.right, ast.Constant) and node.right.value is None:
            return node.left
        if isinstance(node.left, ast.Constant) and node.left.value is None:
            return node.right
    return None


def _arg_problem(arg: ast.arg) -> Optional[str]:
    """What TorchX's ArgTypeValidator says about one parameter, or None."""
    t = arg.annotation
    if t is None:
        return "Missing type annotation"
    if isinstance(t, ast.Subscript) and getattr(t.value, "id", None) == "Annotated":
        if isinstance(t.slice, ast.Tuple) and t.slice.elts:
            t = t.slice.elts[0]
    t = _optional_inner(t) or t
    if _is_primitive(t):
        return None
    if isinstance(t, ast.Subscript):
        container = getattr(t.value, "id", None) or ast.unparse(t.value)
        inner = t.slice
        if container in ("Dict", "dict"):
            if not isinstance(inner, ast.Tuple) or len(inner.elts) != 2:
                return (f"Malformed dict type {ast.unparse(t)!r}, expected exactly two type "
                        f"parameters (dict[K, V])")
            k, v = inner.elts
            if not _is_primitive(k):
                return f"Non-primitive key type {ast.unparse(k)!r}"
            if not _is_primitive(v):
                return f"Non-primitive value type {ast.unparse(v)!r}"
            return None
        if container in ("List", "list"):
            return None if _is_primitive(inner) else \
                f"Non-primitive element type {ast.unparse(inner)!r}"
        if container in ("Tuple", "tuple"):
            if not isinstance(inner, ast.Tuple):
                return (f"Unsupported tuple type {ast.unparse(t)!r}: single-element tuples are "
                        f"valid typing but not supported for components; expected element "
                        f"types (tuple[T1, T2, ...])")
            for e in inner.elts:
                if not _is_primitive(e) and not (isinstance(e, ast.Constant) and e.value is ...):
                    return f"Non-primitive element type {ast.unparse(e)!r}"
            return None
        return f"Unsupported container type {container!r}"
    return f"Unsupported argument type {ast.unparse(t)!r}"


def _module_level_defs(body: List[ast.stmt]) -> List[Any]:
    """The functions and classes a module defines, also under `if`, `try` and
    `with` (``if sys.version_info >= ...: def f``), not inside other definitions."""
    out: List[Any] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.append(node)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for part in ("body", "orelse", "finalbody"):
                out += _module_level_defs(getattr(node, part, []))
            for handler in getattr(node, "handlers", []):
                out += _module_level_defs(handler.body)
    return out


class Finding(NamedTuple):
    """One linter finding: what it is about (``syntax``, ``missing``: no such
    function, ``class``, ``param``, ``return``), its line (0: the file),
    TorchX's description, what trun adds on how to fix it, and the parameter."""

    kind: str
    line: int
    description: str
    fix: str = ""
    param: str = ""


def findings(source: str, fn_name: str, check_args: bool = True,
             check_return: bool = True) -> List[Finding]:
    """TorchX's linter findings for ``fn_name`` in ``source`` (its file linter's
    checks: argument types, the return annotation)."""
    try:
        module = ast.parse(source)
    except SyntaxError as e:
        return [Finding("syntax", e.lineno or 0, e.msg)]
    defs = _module_level_defs(module.body)
    fn = next((n for n in defs if n.name == fn_name), None)
    if fn is None:
        defined = [n.name for n in defs if isinstance(n, ast.FunctionDef)]
        return [Finding("missing", 0, f"Function {fn_name} not found",
                        f" (the file defines {', '.join(defined)})" if defined else "")]
    if isinstance(fn, ast.ClassDef):
        return [Finding("class", fn.lineno, f"{fn_name} is a class; trun runs component "
                                            f"functions (def {fn_name}(...) -> specs.AppDef)")]
    found = []
    a = fn.args
    for arg in a.posonlyargs + a.args + ([a.vararg] if a.vararg else []) + a.kwonlyargs:
        problem = _arg_problem(arg) if check_args else None
        if problem:
            found.append(Finding("param", arg.lineno, f"{problem} for argument "
                                                      f"{ast.unparse(arg)!r} in function "
                                                      f"{fn_name!r}",
                                 f"; annotate it with {SUPPORTED}", arg.arg))
    if a.kwarg and check_args:
        found.append(Finding("param", a.kwarg.lineno, f"component fn param `{a.kwarg.arg}` is "
                                                      f"a '**kwargs' which is not supported; "
                                                      f"consider changing the type to a dict "
                                                      f"or explicitly declare the params",
                             param=a.kwarg.arg))
    ret = fn.returns
    name = ret.attr if isinstance(ret, ast.Attribute) else ret.id if isinstance(ret, ast.Name) \
        else ret.value if isinstance(ret, ast.Constant) else None
    if check_return and not name:
        found.append(Finding("return", fn.lineno, f"Function: {fn_name} missing return "
                                                  f"annotation or has unknown annotations. "
                                                  f"Supported return annotation: AppDef",
                             " (write `-> specs.AppDef`)"))
    elif check_return and name != "AppDef":
        found.append(Finding("return", fn.lineno, f"Function: {fn_name} has incorrect return "
                                                  f"annotation, supported annotation: AppDef",
                             f" (not {name})"))
    return found


def lint(path: str, source: str, fn_name: str) -> List[str]:
    """The findings as trun reports them: ``FILE:LINE: ...`` and how to fix it."""
    out = []
    for f in findings(source, fn_name):
        where = path if f.kind == "missing" else f"{path}:{f.line}"
        what = {"syntax": "syntax error: ",
                "param": f"parameter {f.param!r}: "}.get(f.kind, "")
        out.append(f"{where}: {what}{f.description}{f.fix}")
    return out


# ---- loading ------------------------------------------------------------------------

def _raised(what: str, path: str) -> ComponentError:
    """The current exception as a ComponentError, with the traceback's frames in user code."""
    etype, e, tb = sys.exc_info()
    here = os.path.abspath(__file__)
    frames = [f for f in traceback.extract_tb(tb)
              if f.filename != here and not f.filename.startswith("<frozen")]
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else path
    text = "".join(traceback.format_list(frames)).rstrip()
    kind = etype.__name__ if etype is not None else "an exception"
    return ComponentError(f"{where}: {what} raised {kind}: {e}"
                          + (f"\nTraceback (most recent call last):\n{text}" if text else ""))


def load(spec: str, check: bool = True) -> Tuple[Callable[..., Any], str]:
    """The component function and the file that defines it, linted first
    unless ``check`` is false (trun.specs.finder reports the findings itself)."""
    where, fn_name = _split(spec)
    path, module_name = _source_path(where)
    with open(path, encoding="utf-8") as f:
        source = f.read()
    problems = lint(path, source, fn_name) if check else []
    if problems:
        raise ComponentError("\n".join(problems))
    from trun import alias
    alias.install()
    try:
        if module_name is None:
            # As a script would see it: its folder first on the path, so that
            # helpers beside the file import.
            sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
            mod_spec = importlib.util.spec_from_file_location(
                os.path.splitext(os.path.basename(path))[0], path)
            if mod_spec is None or mod_spec.loader is None:
                raise ComponentError(f"{path}: not a Python file Python can load")
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[module.__name__] = module
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except Exception:
        raise _raised("importing it", path) from None
    return getattr(module, fn_name), path


# ---- the docstring ------------------------------------------------------------------

_ARGS_HEADERS = {"args", "arguments", "parameters", "params", "keyword args",
                 "keyword arguments", "other parameters"}
_OTHER_HEADERS = {"returns", "return", "raises", "yields", "yield", "example", "examples",
                  "note", "notes", "see also", "attributes", "todo", "warning", "warnings",
                  "references"}
_ARG_LINE = re.compile(r"\*{0,2}(\w+)\s*(\([^)]*\))?\s*:\s*(.*)")


def parse_docstring(fn: Callable[..., Any]) -> Tuple[str, Dict[str, str]]:
    """(description, {param: help}) from a Google-style docstring; TorchX's
    placeholder description when there is none."""
    default = (f"{fn.__name__} TIP: improve this help string by adding a docstring\nto your "
               f"component (see: https://meta-pytorch.org/torchx/latest/"
               f"component_best_practices.html)")
    doc = inspect.getdoc(fn)
    if not doc:
        return default, {}
    desc: List[str] = []
    helps: Dict[str, str] = {}
    section, current, indent = None, None, None
    for line in doc.splitlines():
        stripped = line.strip()
        header = stripped[:-1].lower() if stripped.endswith(":") and line == stripped else None
        if header in _ARGS_HEADERS:
            section, current, indent = "args", None, None
            continue
        if header in _OTHER_HEADERS:
            section = "other"
            continue
        if section is None:
            desc.append(line)
        elif section == "args" and stripped:
            here = len(line) - len(line.lstrip())
            indent = here if indent is None else indent
            m = _ARG_LINE.fullmatch(stripped)
            if here <= indent and m:
                current = m.group(1)
                helps[current] = m.group(3).strip()
            elif current:
                helps[current] = (helps[current] + " " + stripped).strip()
    return "\n".join(desc).strip() or default, helps


# ---- parameters ---------------------------------------------------------------------

def _unwrap(tp: Any) -> Tuple[Any, List[str]]:
    """(the type under Annotated and Optional, the aliases Annotated declares)."""
    aliases: List[str] = []
    if typing.get_origin(tp) is typing.Annotated:
        tp, *meta = typing.get_args(tp)
        aliases = [m for m in meta if isinstance(m, str) and m.startswith("-")]
    union_types = (typing.Union,) + ((types.UnionType,) if hasattr(types, "UnionType") else ())
    if typing.get_origin(tp) in union_types:
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) == 1:
            tp = rest[0]
    return tp, aliases


def _kind(tp: Any) -> str:
    origin = typing.get_origin(tp) or tp
    if origin in (list, tuple, List, Tuple):
        return "list"
    if origin in (dict, Dict):
        return "dict"
    return {bool: "bool", int: "int", float: "float"}.get(tp, "str")


def _hints(fn: Callable[..., Any]) -> Dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        return dict(getattr(fn, "__annotations__", {}))


def _default_json(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [str(x) for x in value]
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    return str(value)


def describe(fn: Callable[..., Any]) -> Dict[str, Any]:
    """The parameters in the declaration format of YAML component files."""
    description, helps = parse_docstring(fn)
    hints = _hints(fn)
    params = []
    for p in inspect.signature(fn).parameters.values():
        tp, aliases = _unwrap(hints.get(p.name, str))
        decl: Dict[str, Any] = {"name": p.name, "help": helps.get(p.name, " "),
                                "type": "varargs" if p.kind is p.VAR_POSITIONAL else _kind(tp)}
        if aliases:
            decl["aliases"] = aliases
        if p.default is not p.empty:
            decl["default"] = _default_json(p.default)
        params.append(decl)
    return {"description": description, "params": params}


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _scalar(name: str, text: Any, tp: Any) -> Any:
    """One list element or dict key/value, as its annotated type."""
    if tp is bool:
        word = str(text).lower()
        if word not in _TRUE | _FALSE:
            raise ComponentError(f"--{name}: {text!r} is not a bool (true/false, 1/0, yes/no, "
                                 f"on/off)")
        return word in _TRUE
    if tp in (int, float):
        try:
            return tp(text)
        except ValueError:
            raise ComponentError(f"--{name}: {text!r} is not {'an int' if tp is int else 'a float'}")
    return text


def _decode(name: str, value: Any, tp: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp) or tp
    args = typing.get_args(tp)
    if origin in (list, List):
        return [_scalar(name, x, args[0] if args else str) for x in value]
    if origin in (tuple, Tuple):
        if len(args) == 2 and args[1] is ...:
            args = (args[0],) * len(value)
        return tuple(_scalar(name, x, args[i] if i < len(args) else str)
                     for i, x in enumerate(value))
    if origin in (dict, Dict):
        kt, vt = args if len(args) == 2 else (str, str)
        return {_scalar(name, k, kt): _scalar(name, v, vt) for k, v in value.items()}
    if tp is float:
        return float(value)
    return value


def build(fn: Callable[..., Any], path: str, payload: Dict[str, Any]) -> Dict[str, Any]:
    """Calls the component with the parsed values; the AppDef as JSON."""
    from trun import specs
    hints = _hints(fn)
    values = payload.get("values", {})
    positional: List[Any] = []
    keywords: Dict[str, Any] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            positional.extend(payload.get("varargs", []))
            continue
        value = _decode(p.name, values.get(p.name), _unwrap(hints.get(p.name, str))[0])
        if p.kind is p.KEYWORD_ONLY:
            keywords[p.name] = value
        else:
            positional.append(value)
    try:
        app = fn(*positional, **keywords)
    except Exception:
        raise _raised(f"the component {fn.__name__}", path) from None
    if not (hasattr(app, "roles") and hasattr(app, "name")):
        raise ComponentError(f"{path}: {fn.__name__} returned {type(app).__name__}, not an "
                             f"AppDef")
    return specs.to_dict(app)


def main(argv: List[str]) -> int:
    # stdout carries the JSON alone: what the component prints goes to
    # stderr, which trun shows.
    out_stream, sys.stdout = sys.stdout, sys.stderr
    try:
        if len(argv) < 2 or argv[0] not in ("describe", "build"):
            raise ComponentError("usage: python -m trun._component describe|build SPEC [ARGS_JSON]")
        fn, path = load(argv[1])
        if argv[0] == "describe":
            out = describe(fn)
        else:
            out = build(fn, path, json.loads(argv[2]) if len(argv) > 2 else {})
    except ComponentError as e:
        print(str(e), file=sys.stderr)
        return 2
    finally:
        sys.stdout = out_stream
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
