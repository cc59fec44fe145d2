"""TorchX's ``torchx.util.entrypoints``: plug-ins that installed packages
declare as entry points (``[torchx.components]``, ``[torchx.named_resources]``
...), loaded only when used.

``metadata`` is :mod:`importlib.metadata`, looked up on each call, so that
tests patching ``torchx.util.entrypoints.metadata.entry_points`` (as TorchX's
do) see their entry points here and in :mod:`trun.plugins`. Thread-safe (no
state of its own).
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Callable

_NO_DEFAULT: Any = object()


def load(group: str, name: str, default: Any = _NO_DEFAULT) -> Any:
    """The object entry point ``name`` of ``group`` names (imported now), or
    ``default`` when there is no such entry point; without a default, a
    missing one raises KeyError."""
    eps = metadata.entry_points().select(group=group)
    if name not in eps.names:
        if default is not _NO_DEFAULT:
            return default
        raise KeyError(f"entrypoint {group}.{name} not found")
    return eps[name].load()


def _deferred(ep: metadata.EntryPoint) -> Callable[..., Any]:
    """Calls the entry point's function, importing it only then; an entry
    point naming a module imports it and returns it (arguments ignored)."""
    def call(*args: Any, **kwargs: Any) -> Any:
        if ep.attr is None:
            return ep.load()
        return ep.load()(*args, **kwargs)
    return call


def load_group(group: str) -> dict[str, Callable[..., Any]]:
    """Every entry point of ``group``, by name, each a function that imports
    and calls it when called (empty when the group has none)."""
    return {ep.name: _deferred(ep) for ep in metadata.entry_points().select(group=group)}
