"""Discovery of TorchX plug-ins (``torchx.plugins._registry``): the namespace
packages ``torchx_plugins.<group>`` and the entry points ``torchx.<group>``,
scanned once per group, with every failure kept as a :class:`RegistrationError`
instead of raised (one broken plug-in must not hide the others).

Thread-safety: a :class:`PluginRegistry` is not locked; :func:`registry` is an
``lru_cache`` (its creation is safe, discovery through it is as safe as the
plug-ins' imports). Callers that need single-flight discovery lock around it
(``trun.specs.named_resources`` does).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import logging
import os
import pkgutil
from types import ModuleType
from typing import Any, Callable, overload

from trun.util import entrypoints

logger = logging.getLogger(__name__)

#: The module attribute that ``register.named_resource`` fills, as TorchX's
#: older named-resource modules define it by hand.
NAMED_RESOURCES_ATTR = "NAMED_RESOURCES"

Factory = Callable[..., Any]


class PluginType(str, enum.Enum):
    """The kinds of plug-in; each value is the kind's entry-point group."""

    SCHEDULER = "torchx.schedulers"
    NAMED_RESOURCE = "torchx.named_resources"
    TRACKER = "torchx.tracker"


class PluginSource(enum.IntFlag):
    """The discovery channels, as a bit mask (``TORCHX_PLUGINS_SOURCE``)."""

    NONE = 0
    NAMESPACE_PKG = 1
    ENTRYPOINT = 2


@dataclasses.dataclass(frozen=True)
class RegistrationError:
    """A plug-in module that failed to import (``module``, ``error``), or a
    plug-in that was refused (``name`` and ``plugin_type`` set too)."""

    module: str
    error: str
    name: str | None = None
    plugin_type: str | None = None


def _namespace(pt: PluginType) -> str:
    return "torchx_plugins." + pt.value[len("torchx."):]


def _comparable(v: Any) -> Any:
    """A form of ``v`` that compares by value across distributions (twin enum
    or dataclass types compare by name and fields, not identity)."""
    if isinstance(v, enum.Enum):
        return ("enum", type(v).__name__, v.value)
    if v is None or type(v) in (str, int, float, bool, bytes):
        return v
    if isinstance(v, int):
        return ("enum", type(v).__name__, int(v))
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return (type(v).__name__,
                tuple((f.name, _comparable(getattr(v, f.name))) for f in dataclasses.fields(v)))
    if isinstance(v, dict):
        return tuple(sorted((repr(_comparable(k)), _comparable(x)) for k, x in v.items()))
    if isinstance(v, (set, frozenset)):
        return tuple(sorted((_comparable(x) for x in v), key=repr))
    if isinstance(v, (list, tuple)):
        return tuple(_comparable(x) for x in v)
    return repr(v)


def _resource_key(r: Any) -> Any:
    from trun.plugins._registration import resource_tags
    tags = dict(r.tags)
    if not tags.get(resource_tags.IS_FRACTIONAL, False):
        # An absent fractional tag means False (Resource.is_fractional).
        tags.pop(resource_tags.IS_FRACTIONAL, None)
    return (r.cpu, r.gpu, r.memMB, _comparable(r.capabilities), _comparable(r.devices),
            _comparable(tags))


def _same_plugin(a: Factory, b: Factory, pt: PluginType) -> bool:
    """Whether two registrations of one name are the same plug-in: the same
    object, or named-resource factories whose resources are equal (only they
    are cheap and pure enough to call during discovery)."""
    if a is b:
        return True
    if pt != PluginType.NAMED_RESOURCE:
        return False
    try:
        va, vb = a(), b()
    except Exception:
        return False
    attrs = ("cpu", "gpu", "memMB", "capabilities", "devices", "tags")
    if all(hasattr(va, x) and hasattr(vb, x) for x in attrs):
        return bool(_resource_key(va) == _resource_key(vb))
    return bool(_comparable(va) == _comparable(vb))


class PluginRegistry:
    """The plug-ins of each kind, found on first :meth:`get` and cached."""

    def __init__(self, *, plugin_sources: PluginSource = (PluginSource.NAMESPACE_PKG
                                                          | PluginSource.ENTRYPOINT)) -> None:
        self._plugin_sources = plugin_sources
        self._cache: dict[PluginType, dict[str, Factory]] = {}
        self._errors: list[RegistrationError] = []

    def _error(self, module: str, error: str, name: str | None = None,
               plugin_type: str | None = None) -> None:
        logger.warning("torchx plug-in %s%s: %s", module, f" ({name})" if name else "", error)
        self._errors.append(RegistrationError(module, error, name, plugin_type))

    def _collect(self, mod: ModuleType, fqn: str, pt: PluginType,
                 found: dict[str, Factory]) -> None:
        """Adds the decorated functions defined in ``mod`` (not imported into it)."""
        for attr in dir(mod):
            obj = getattr(mod, attr)
            actual = getattr(obj, "_plugin_type", None)
            if not callable(obj) or actual is None or getattr(obj, "__module__", None) != fqn:
                continue
            name = getattr(obj, "_plugin_name", attr)
            if actual != pt:
                kind = actual.name.lower()
                self._error(fqn, f"is a {kind} but is under the {pt.name.lower()} namespace"
                                 f" — use @register.{pt.name.lower()}() or move to"
                                 f" `{_namespace(actual)}`", name, kind)
            elif name not in found:
                found[name] = obj
            elif not _same_plugin(found[name], obj, pt):
                self._error(fqn, "duplicate — already discovered with a DIFFERENT value,"
                                 " keeping first occurrence", name, pt.name.lower())

    def _scan(self, pkg: ModuleType, namespace: str, pt: PluginType,
              found: dict[str, Factory]) -> None:
        """Imports every public module under ``pkg`` (recursively, folders
        without ``__init__.py`` included) and collects its plug-ins."""
        try:
            infos = list(pkgutil.iter_modules(pkg.__path__))
        except Exception as e:
            self._error(namespace, f"failed to scan `{namespace}`: {e}")
            return
        seen = {info.name for info in infos}
        subpackages = [(info.name, info.ispkg) for info in infos]
        # pkgutil skips folders without __init__.py: scan those holding modules.
        for root in pkg.__path__:
            if not os.path.isdir(root):
                continue
            for child in sorted(os.listdir(root)):
                path = os.path.join(root, child)
                if (child not in seen and not child.startswith("_") and os.path.isdir(path)
                        and child.isidentifier()
                        and any(f.endswith(".py") for f in os.listdir(path))):
                    seen.add(child)
                    subpackages.append((child, True))
        for name, ispkg in subpackages:
            if name.startswith("_"):
                continue
            fqn = f"{namespace}.{name}"
            try:
                mod = importlib.import_module(fqn)
            except Exception as e:
                self._error(fqn, f"{type(e).__name__}: {e}")
                continue
            self._collect(mod, fqn, pt, found)
            if ispkg and hasattr(mod, "__path__"):
                self._scan(mod, fqn, pt, found)

    def _namespace_plugins(self, pt: PluginType) -> dict[str, Factory]:
        namespace = _namespace(pt)
        try:
            pkg = importlib.import_module(namespace)
        except ModuleNotFoundError as e:
            # The namespace itself absent: no plug-ins, not an error.
            if e.name and (namespace == e.name or namespace.startswith(e.name + ".")):
                return {}
            self._error(namespace, f"{type(e).__name__}: {e}")
            return {}
        except Exception as e:
            self._error(namespace, f"{type(e).__name__}: {e}")
            return {}
        found: dict[str, Factory] = {}
        if hasattr(pkg, "__path__"):
            self._scan(pkg, namespace, pt, found)
        return found

    def _find(self, pt: PluginType) -> dict[str, Factory]:
        found = (self._namespace_plugins(pt) if PluginSource.NAMESPACE_PKG in self._plugin_sources
                 else {})
        if PluginSource.ENTRYPOINT in self._plugin_sources:
            eps = entrypoints.load_group(pt.value)
            for name in sorted(eps.keys() & found.keys()):
                self._error(getattr(found[name], "__module__", _namespace(pt)),
                            f"registered via both a `{pt.value}` entry point and the"
                            f" `{_namespace(pt)}` namespace package — the entry point wins;"
                            f" remove one of the registrations", name, pt.name.lower())
            found.update(eps)
        return found

    def get(self, plugin_type: PluginType) -> dict[str, Factory]:
        """The plug-ins of ``plugin_type`` by name (empty when none)."""
        if plugin_type not in self._cache:
            self._cache[plugin_type] = self._find(plugin_type)
        return self._cache[plugin_type]

    @overload
    def info(self) -> dict[PluginType, dict[str, Factory]]: ...

    @overload
    def info(self, plugin_type: PluginType) -> dict[str, Factory]: ...

    def info(self, plugin_type: PluginType | None = None
             ) -> dict[PluginType, dict[str, Factory]] | dict[str, Factory]:
        """A copy of one kind's plug-ins, or of every kind's (discovering them)."""
        if plugin_type is not None:
            return dict(self.get(plugin_type))
        return {pt: dict(self.get(pt)) for pt in PluginType}

    def clear(self) -> None:
        """Forgets what was found, and the :func:`registry` singleton."""
        self._cache.clear()
        self._errors.clear()
        registry.cache_clear()

    @property
    def errors(self) -> list[RegistrationError]:
        """The errors of the discovery done so far (discovers nothing)."""
        return list(self._errors)

    def load_errors(self, plugin_type: PluginType | None = None) -> list[RegistrationError]:
        """Discovers ``plugin_type`` (every kind when None), then returns its errors."""
        for pt in [plugin_type] if plugin_type is not None else list(PluginType):
            self.get(pt)
        if plugin_type is None:
            return list(self._errors)
        namespace = _namespace(plugin_type)
        return [e for e in self._errors
                if e.plugin_type == plugin_type.name.lower() or e.module == namespace
                or e.module.startswith(namespace + ".")]

    def to_dict(self) -> dict[str, Any]:
        """Every plug-in as plain data (``name``, ``module``, ``aliases``,
        ``fractionals``, ``error``), by kind, plus import ``errors``."""
        everything = self.info()
        refused: dict[str, list[RegistrationError]] = {}
        data: dict[str, Any] = {}
        for e in self._errors:
            if e.plugin_type is not None:
                refused.setdefault(e.plugin_type, []).append(e)
        for pt in PluginType:
            group = everything.get(pt, {})
            children: dict[str, dict[str, list[str]]] = {}
            for name, fn in group.items():
                base = getattr(fn, "_plugin_base_name", None)
                if base is not None:
                    key = "aliases" if getattr(fn, "_plugin_is_alias", False) else "fractionals"
                    children.setdefault(base, {}).setdefault(key, []).append(name)
            items: list[dict[str, Any]] = []
            for name, fn in group.items():
                if getattr(fn, "_plugin_base_name", None) is not None:
                    continue
                entry: dict[str, Any] = {"name": name,
                                         "module": getattr(fn, "__module__", "unknown")}
                entry.update(children.get(name) or {})
                items.append(entry)
            items += [{"name": e.name, "module": e.module, "error": e.error}
                      for e in refused.get(pt.name.lower(), [])]
            data[pt.name.lower()] = items
        data["errors"] = [{"module": e.module, "error": e.error}
                          for e in self._errors if e.plugin_type is None]
        return data

    def __str__(self) -> str:
        """:meth:`to_dict` as YAML (every free-text value double-quoted)."""
        def quoted(s: str) -> str:
            return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
        data = self.to_dict()
        lines: list[str] = []
        for pt in PluginType:
            key = pt.name.lower()
            lines.append(f"{key}:" if data[key] else f"{key}: []")
            for item in data[key]:
                lines += [f"  - name: {item['name']}", f"    module: {item['module']}"]
                for k in ("aliases", "fractionals"):
                    if k in item:
                        lines.append(f"    {k}: [{', '.join(item[k])}]")
                if "error" in item:
                    lines.append(f"    error: {quoted(item['error'])}")
        lines.append("errors:" if data["errors"] else "errors: []")
        for err in data["errors"]:
            lines += [f"  - module: {err['module']}", f"    error: {quoted(err['error'])}"]
        return "\n".join(lines)


@functools.lru_cache(maxsize=1)
def registry() -> PluginRegistry:
    """The process's registry, its channels chosen by ``TORCHX_PLUGINS_SOURCE``."""
    everything = PluginSource.NAMESPACE_PKG | PluginSource.ENTRYPOINT
    raw = os.environ.get("TORCHX_PLUGINS_SOURCE", str(int(everything)))
    try:
        value = int(raw)
        if not 0 <= value <= int(everything):
            raise ValueError(raw)
    except ValueError:
        raise ValueError(f"TORCHX_PLUGINS_SOURCE={raw!r} is invalid; expected one of 0 (none),"
                         f" 1 (namespace only), 2 (entry points only), 3 (both).") from None
    return PluginRegistry(plugin_sources=PluginSource(value))
