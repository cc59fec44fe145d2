"""The :class:`register` decorator of TorchX's plug-ins, and the helpers that
derive fractional named resources (``my_gpu_8``, ``my_gpu_4``, ...) from one
factory (``torchx.plugins._registration``).

Thread-safety: decorating mutates the decorated function's module; it runs
while that module is imported (under the import lock).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, TypeVar, Union

from trun.plugins._registry import NAMED_RESOURCES_ATTR, PluginType

if TYPE_CHECKING:
    from trun.specs.api import Resource

F = TypeVar("F", bound=Callable[..., object])
Fractionals = Union[Callable[[Any], "dict[float, str]"], "dict[float, str]"]

#: Shares of a host's CPUs, memory and GPUs that a fractional resource asks for.
WHOLE = 1.0
HALF = 0.5
QUARTER = 0.25
EIGHTH = 0.125
SIXTEENTH = 0.0625


class resource_tags:
    """The ``Resource.tags`` keys that registered named resources carry (read
    them through ``Resource.get_resource_name()`` and ``is_fractional()``)."""

    RESOURCE_NAME = "torchx/named_resources.name"
    IS_FRACTIONAL = "torchx/named_resources.is_fractional"


def powers_of_two_gpus(resource: Any) -> dict[float, str]:
    """``{1.0: "8", 0.5: "4", 0.25: "2", 0.125: "1"}`` for an 8-GPU resource:
    a slice for every power of two GPUs. Raises ValueError unless ``gpu`` is a
    positive power of two."""
    gpus = resource.gpu
    if gpus <= 0:
        raise ValueError(f"resource must have gpu > 0 to generate power-of-two slices"
                         f" (got {gpus})")
    if gpus & (gpus - 1):
        raise ValueError(f"resource.gpu must be a power of two to generate slices (got {gpus})")
    out: dict[float, str] = {}
    share = WHOLE
    while int(gpus * share) > 0:
        out[share] = str(int(gpus * share))
        share /= 2
    return out


def halve_mem_down_to(*, minGiB: int) -> Callable[[Any], dict[float, str]]:
    """A ``fractionals`` function that halves the resource's memory (in GiB)
    while it stays at least ``minGiB``: ``{1.0: "64", 0.5: "32", ...}``."""
    def slices(resource: Any) -> dict[float, str]:
        mem = resource.memMB
        if mem <= 0:
            raise ValueError(f"resource must have memMB > 0 to generate memory slices"
                             f" (got {mem})")
        if mem % 1024:
            raise ValueError(f"resource.memMB must be a whole number of GiB (got {mem} MB)")
        gib = mem // 1024
        odd = gib
        while odd > 0 and odd % 2 == 0:
            odd //= 2
        if minGiB < odd:
            raise ValueError(f"`minGiB` must be >= the odd part of `memGiB` ({odd}) because"
                             f" halving {gib} GiB below {odd} produces non-integer GiB values"
                             f" (got minGiB={minGiB})")
        out: dict[float, str] = {}
        share = WHOLE
        while int(gib * share) >= minGiB:
            out[share] = str(int(gib * share))
            share /= 2
        return out
    return slices


class register:
    """Marks a function as a plug-in of kind ``type`` named ``name`` (the
    function's name by default); discovery collects it from its module under
    ``torchx_plugins.<group>``. Use :meth:`scheduler`, :meth:`tracker`,
    :meth:`named_resource`."""

    def __init__(self, type: PluginType, name: str | None = None) -> None:
        self._type = type
        self._name = name

    def __call__(self, fn: F) -> F:
        setattr(fn, "_plugin_type", self._type)
        setattr(fn, "_plugin_name", self._name or getattr(fn, "__name__"))
        return fn

    @classmethod
    def scheduler(cls, name: str | None = None) -> register:
        """A scheduler factory ``(session_name, **kwargs) -> Scheduler``."""
        return cls(PluginType.SCHEDULER, name=name)

    @classmethod
    def tracker(cls, name: str | None = None) -> register:
        """A tracker factory."""
        return cls(PluginType.TRACKER, name=name)

    @classmethod
    def named_resource(cls, name: str | None = None, aliases: list[str] | None = None,
                       fractionals: Fractionals | None = None) -> _register_named_resource:
        """A named-resource factory returning a Resource; ``aliases`` name it
        again, ``fractionals`` (``{share: suffix}`` or a function of the whole
        resource giving one) adds ``NAME_SUFFIX`` factories that call it with
        ``fractional=share``."""
        return _register_named_resource(name=name, aliases=aliases, fractionals=fractionals)


class _register_named_resource(register):
    """:meth:`register.named_resource`: also puts every name it registers in
    the module's ``NAMED_RESOURCES`` dict (and as a module attribute), and
    tags each Resource made with its name and whether it is a fraction."""

    def __init__(self, name: str | None = None, aliases: list[str] | None = None,
                 fractionals: Fractionals | None = None) -> None:
        super().__init__(PluginType.NAMED_RESOURCE, name=name)
        self._aliases = list(aliases or [])
        self._fractionals = fractionals

    def _slices(self, whole: Any) -> dict[float, str]:
        if isinstance(self._fractionals, dict):
            return self._fractionals
        return self._fractionals(whole) if self._fractionals else {}

    def __call__(self, fn: Callable[..., Resource]) -> Callable[..., Resource]:  # type: ignore[override]
        mod = sys.modules[fn.__module__]
        name = self._name or fn.__name__
        table: dict[str, Callable[..., Any]] = getattr(mod, NAMED_RESOURCES_ATTR, None) or {}
        setattr(mod, NAMED_RESOURCES_ATTR, table)

        def add(reg_name: str, factory: Callable[..., Any], attr: bool,
                base: str | None = None, alias: bool = False) -> None:
            if reg_name in table:
                raise ValueError(f"duplicate named resource `{reg_name}` in module"
                                 f" `{mod.__name__}`")
            if attr and hasattr(mod, reg_name):
                raise AttributeError(f"`{reg_name}()` already exists in `{mod.__name__}`")
            setattr(factory, "__module__", fn.__module__)
            setattr(factory, "_plugin_type", PluginType.NAMED_RESOURCE)
            setattr(factory, "_plugin_name", reg_name)
            if base is not None:
                setattr(factory, "_plugin_base_name", base)
            if alias:
                setattr(factory, "_plugin_is_alias", True)
            table[reg_name] = factory
            if attr:
                setattr(mod, reg_name, factory)

        def tagged(res_name: str, share: float | None, *args: Any, **kwargs: Any) -> Resource:
            r = fn(*args, **kwargs) if share is None else fn(share)
            r.tags[resource_tags.RESOURCE_NAME] = res_name
            r.tags[resource_tags.IS_FRACTIONAL] = share is not None and share != WHOLE
            return r

        def factory(*args: Any, **kwargs: Any) -> Resource:
            return tagged(name, None, *args, **kwargs)
        factory.__qualname__ = fn.__qualname__
        add(name, factory, attr=name != fn.__name__)

        for alias in self._aliases:
            def alias_factory(*args: Any, **kwargs: Any) -> Resource:
                return factory(*args, **kwargs)
            alias_factory.__qualname__ = alias
            add(alias, alias_factory, attr=True, base=name, alias=True)

        if self._fractionals:
            # The whole resource is made once, here, to derive its slices.
            for share, suffix in self._slices(fn()).items():
                slice_name = f"{name}_{suffix}"

                def slice_factory(_share: float = share, _name: str = slice_name) -> Resource:
                    return tagged(_name, _share)
                slice_factory.__qualname__ = slice_name
                add(slice_name, slice_factory, attr=True, base=name)
        return factory
