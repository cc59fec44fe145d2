"""TorchX's ``torchx.specs.overlays``: scheduler request fields that an AppDef
or Role cannot express, stored in its ``metadata`` and merged into the
scheduler's request.

``set_overlay(target, namespace, kind, overlay)`` stores (and accumulates) an
overlay under ``target.metadata[namespace][kind]``, marking the namespace as
nested; ``get_overlay`` reads it back (a string in ``metadata[namespace]`` is
a JSON or YAML file to read; an unmarked namespace dict is TorchX's older
flat form, one overlay for every kind); ``apply_overlay(base, overlay)``
merges one into a request dict: dicts merge key by key, lists are appended,
anything else is replaced, and the keys ``PUT(f)``, ``JOIN(f, on=k)``,
``DEL(f)`` replace, merge list items by ``k``, or remove field ``f``.
``validate_overlay`` and ``OverlaySpec`` are the checks for scheduler
authors. The operator keys and the marker are TorchX's strings, since
overlays are stored in metadata that TorchX and trun both read.

trun's kubernetes scheduler reads ``metadata["kubernetes"]`` of each role
(docs/python.md, "What is still different from TorchX").

Pure functions over the dicts they are given; not safe to call on one
target or dict from several threads at once.
"""

from __future__ import annotations

import copy
import importlib
import json
import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set, Tuple, Union

from trun.specs.api import AppDef, Role

__all__ = ["PUT", "JOIN", "DEL", "apply_overlay", "set_overlay", "get_overlay",
           "validate_overlay", "OverlaySpec"]

# Named as TorchX's module, so that logging set-ups and tests written for
# TorchX's overlays see its records.
logger = logging.getLogger("torchx.specs.overlays")

_FORMAT_KEY = "__torchx_overlays__"
_PUT = "__put__:"
_JOIN = "__join__:"
_DEL = "__del__:"

Overlay = Dict[str, Any]


def PUT(key: str) -> str:
    """The overlay key that replaces field ``key`` whole (no merge, no append)."""
    return _PUT + key


def JOIN(key: str, *, on: str) -> str:
    """The overlay key that merges the list ``key`` item by item: an item whose
    ``on`` field matches a base item's updates that item's fields; others are
    appended."""
    return f"{_JOIN}{key}:{on}"


def DEL(key: str) -> str:
    """The overlay key that removes field ``key`` (its value is ignored)."""
    return _DEL + key


def _field(key: str) -> str:
    """The field an overlay key is about, with any operator taken off."""
    for prefix in (_PUT, _DEL):
        if key.startswith(prefix):
            return key[len(prefix):]
    if key.startswith(_JOIN):
        return key[len(_JOIN):].split(":", 1)[0]
    return key


def _drop_field(base: Overlay, field: str, keep: Optional[str] = None) -> None:
    """Removes every key of ``base`` about ``field`` except ``keep``."""
    for key in [k for k in base if k != keep and _field(k) == field]:
        del base[key]


def _join(base: Overlay, key: str, items: object, field: str) -> None:
    _drop_field(base, field, keep=field)
    on = key[len(_JOIN):].partition(":")[2]
    if not on:
        raise ValueError(f"malformed JOIN key `{key}`: write it as JOIN(field, on=key)")
    if not isinstance(items, list):
        raise TypeError(f"JOIN on `{field}` needs a list of dicts, got {type(items).__name__}")
    if any(not isinstance(item, dict) for item in items):
        raise TypeError(f"JOIN on `{field}` needs a list of dicts; the overlay has other items")
    if field not in base:
        base[field] = copy.deepcopy(items)
        return
    target = base[field]
    if not isinstance(target, list):
        raise TypeError(f"JOIN on `{field}` needs the base's `{field}` to be a list, "
                        f"got {type(target).__name__}")
    if any(not isinstance(item, dict) for item in target):
        raise TypeError(f"JOIN on `{field}` needs the base's `{field}` to be a list of dicts")
    # Matched against the base as it was: items appended here are not matched
    # again, so two new items with one key both land.
    by_key = {item[on]: item for item in target if on in item}
    for item in items:
        match = by_key.get(item[on]) if on in item else None
        if match is None:
            target.append(copy.deepcopy(item))
            continue
        for name, value in item.items():
            if name != on:
                match[name] = copy.deepcopy(value)


def _merge(base: Overlay, key: str, value: object, resolve: bool) -> None:
    if key not in base:
        if isinstance(value, tuple):
            base[key] = list(value)
        else:
            base[key] = copy.deepcopy(value)
        return
    current = base[key]
    if isinstance(current, dict) and isinstance(value, dict):
        apply_overlay(current, value, _resolve=resolve)
    elif isinstance(current, list) and isinstance(value, tuple):
        base[key] = list(value)  # TorchX's older spelling of PUT (YAML's !!python/tuple)
    elif isinstance(current, list) and isinstance(value, list):
        current.extend(copy.deepcopy(value))
    elif isinstance(current, (dict, list)) or isinstance(value, (dict, list)):
        if type(current) is not type(value):
            raise TypeError(f"type mismatch for attr: `{key}`. {type(current).__qualname__} "
                            f"!= {type(value).__qualname__}")
    else:
        # Scalars of different types replace each other: an enum may be an
        # int in a request and its name in an overlay.
        base[key] = value


def apply_overlay(base: Overlay, overlay: Overlay, *, _resolve: bool = True) -> None:
    """Merges ``overlay`` into ``base`` in place: dicts recursively, lists
    appended, other values replaced; ``PUT``, ``JOIN`` and ``DEL`` keys do
    what they say. ``_resolve=False`` (TorchX's internal switch, used by
    ``set_overlay``) keeps operator keys as keys, a later one for a field
    replacing an earlier one."""
    for key, value in overlay.items():
        field = _field(key)
        if _resolve and key.startswith(_DEL):
            _drop_field(base, field)
        elif _resolve and key.startswith(_PUT):
            _drop_field(base, field)
            base[field] = copy.deepcopy(value)
        elif _resolve and key.startswith(_JOIN):
            _join(base, key, value, field)
        else:
            _drop_field(base, field, keep=key)
            _merge(base, key, value, _resolve)


def _load_overlay_file(uri: str) -> Overlay:
    """The overlay in a JSON or YAML file: a path, ``file://PATH``, or any
    other URI fsspec opens (when it is installed)."""
    if "://" not in uri or uri.startswith("file://"):
        path = uri[len("file://"):] if uri.startswith("file://") else uri
        with open(path) as f:
            text = f.read()
    else:
        try:
            fsspec = importlib.import_module("fsspec")
        except ImportError as e:
            raise ValueError(f"overlay file `{uri}`: reading this URI needs fsspec "
                             "(pip install fsspec); paths and file:// URIs need nothing") from e
        with fsspec.open(uri, "r") as f:
            text = f.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = _yaml(uri, text)
    if not isinstance(data, dict):
        raise ValueError(f"overlay file `{uri}` must contain a dict, got {type(data).__name__}")
    return data


def _yaml(uri: str, text: str) -> object:
    try:
        import yaml
    except ImportError as e:
        raise ValueError(f"overlay file `{uri}` is not JSON, and reading YAML needs PyYAML "
                         "(pip install pyyaml, or Debian's python3-yaml)") from e

    class Loader(yaml.SafeLoader):
        """YAML's safe loader that also reads ``!!python/tuple`` (TorchX's older
        spelling of PUT for a list)."""

    def sequence_as_tuple(loader: yaml.SafeLoader, node: yaml.Node) -> Tuple[Any, ...]:
        if not isinstance(node, yaml.SequenceNode):
            raise ValueError(f"overlay file `{uri}`: !!python/tuple must tag a list")
        return tuple(loader.construct_sequence(node))

    Loader.add_constructor("tag:yaml.org,2002:python/tuple", sequence_as_tuple)
    return yaml.load(text, Loader=Loader)


def _check_kind(kind: str) -> None:
    if kind == _FORMAT_KEY:
        raise ValueError(f"overlay kind `{kind}` is reserved (it marks a namespace of "
                         "overlays); name the kind after the scheduler's type, e.g. V1Pod")


def set_overlay(target: Union[AppDef, Role], namespace: str, kind: str,
                overlay: Overlay) -> None:
    """Adds ``overlay`` to ``target.metadata[namespace][kind]`` (merged into
    what earlier calls stored, operator keys kept for ``apply_overlay``)."""
    _check_kind(kind)
    metadata: Dict[str, Any] = target.metadata
    space = metadata.get(namespace)
    if not isinstance(space, dict):
        if namespace in metadata:
            logger.warning("replacing the %s in metadata[%r] with overlays",
                           type(space).__name__, namespace)
        space = metadata[namespace] = {}
    space[_FORMAT_KEY] = True
    stored = space.get(kind)
    if not isinstance(stored, dict):
        stored = space[kind] = {}
    apply_overlay(stored, overlay, _resolve=False)


def get_overlay(target: Union[AppDef, Role], namespace: str, kind: str, *,
                flat_fallback: bool = True) -> Overlay:
    """The overlay stored for ``kind`` in ``target.metadata[namespace]``, or
    ``{}``. A namespace that is a string names a file to read. A namespace
    dict that ``set_overlay`` did not write, without ``kind``, is TorchX's
    older flat form and returned whole (with a warning) unless
    ``flat_fallback`` is False or it holds several dicts (then it is nested)."""
    _check_kind(kind)
    if namespace not in target.metadata:
        return {}
    space = target.metadata[namespace]
    if isinstance(space, str):
        space = _load_overlay_file(space)
    if not isinstance(space, dict):
        return {}
    found = space.get(kind)
    if isinstance(found, dict):
        return found
    kinds = [k for k in space if k != _FORMAT_KEY]
    if space.get(_FORMAT_KEY):
        # A scheduler asking for a kind nobody set is normal: debug only.
        if kinds:
            logger.debug("no overlay of kind `%s` in namespace `%s` (it has %s)",
                         kind, namespace, kinds)
        return {}
    nested = len(space) > 1 and all(isinstance(v, dict) for v in space.values())
    if not flat_fallback or not space or nested:
        return {}
    logger.warning("no overlay of kind `%s` in namespace `%s` (it has %s): reading "
                   "metadata[%r] as one flat overlay; store it with set_overlay(target, "
                   "%r, %r, overlay) instead", kind, namespace, kinds, namespace, namespace, kind)
    return space


def validate_overlay(overlay: Overlay, *, blocklist: Optional[List[str]] = None,
                     forbidden_keys: Optional[Set[str]] = None,
                     overlay_name: str = "overlay", suggestion: str = "") -> None:
    """Raises ``ValueError`` when ``overlay`` sets a field of ``blocklist``
    (set on the Role or AppDef instead) or of ``forbidden_keys`` (another
    kind's), operator keys counting as their field."""
    fields = [_field(k) for k in overlay]
    blocked = [f for f in fields if blocklist and f in blocklist]
    if blocked:
        names = ", ".join(f"`{overlay_name}.{f}`" for f in blocked)
        raise ValueError(f"disallowed overlay attributes {names}: set them on the role's "
                         "attributes instead")
    misplaced = set(fields) & (forbidden_keys or set())
    if misplaced:
        raise ValueError(f"{overlay_name} overlay contains misplaced keys: {misplaced}."
                         + (f" {suggestion}" if suggestion else ""))


@dataclass(frozen=True)
class OverlaySpec:
    """One scheduler's overlay kind: its namespace, kind and the fields that
    must be set on the Role or AppDef instead (checked by ``set`` and ``get``)."""

    namespace: str
    kind: str
    blocklist: Tuple[str, ...] = ()

    def set(self, target: Union[AppDef, Role], overlay: Overlay) -> None:
        validate_overlay(overlay, blocklist=list(self.blocklist), overlay_name=self.kind)
        set_overlay(target, self.namespace, self.kind, overlay)

    def get(self, target: Union[AppDef, Role]) -> Overlay:
        overlay = get_overlay(target, self.namespace, self.kind, flat_fallback=False)
        validate_overlay(overlay, blocklist=list(self.blocklist), overlay_name=self.kind)
        return overlay
