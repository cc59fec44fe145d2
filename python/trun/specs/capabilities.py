"""TorchX's ``torchx.specs.capabilities``: typed keys into ``Resource.capabilities``.

A value is stored under the plain key ``"<namespace>.<name>"``, the same
JSON trun's C++ side reads, so typed and untyped readers agree.
"""

from dataclasses import dataclass
from typing import Generic, Optional, Type, TypeVar

from trun.specs.api import Resource

V = TypeVar("V")


@dataclass(frozen=True)
class CapabilityKey(Generic[V]):
    """``CapabilityKey("aws", "network_bandwidth_gbps", int)``: ``set`` stores
    a value, ``get`` reads it back and raises TypeError, naming the key, when
    the stored value is not of ``type`` (a bool is not an int here)."""

    namespace: str
    name: str
    type: Type[V]

    @property
    def key(self) -> str:
        return f"{self.namespace}.{self.name}"

    def set(self, resource: Resource, value: V) -> None:
        resource.capabilities[self.key] = value

    def get(self, resource: Resource, default: Optional[V] = None) -> Optional[V]:
        if self.key not in resource.capabilities:
            return default
        value = resource.capabilities[self.key]
        bool_for_int = self.type is int and isinstance(value, bool)
        if bool_for_int or not isinstance(value, self.type):
            raise TypeError(f"capability `{self.key}` expected `{self.type.__name__}`, "
                            f"got `{type(value).__name__}`: {value!r}")
        return value
