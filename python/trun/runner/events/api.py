"""TorchX's ``torchx.runner.events.api``: the record of one runner call."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from enum import Enum


class SourceType(str, Enum):
    UNKNOWN = "<unknown>"
    INTERNAL = "INTERNAL"
    EXTERNAL = "EXTERNAL"


@dataclass
class TorchxEvent:
    """One runner call (``api``) in ``session``: the scheduler, the app, the
    cfg as JSON, how long it took and, if it raised, the exception."""

    session: str
    scheduler: str
    api: str
    app_id: str | None = None
    app_image: str | None = None
    app_metadata: dict[str, str] | None = None
    runcfg: str | None = None
    raw_exception: str | None = None
    source: SourceType = SourceType.UNKNOWN
    cpu_time_usec: int | None = None
    wall_time_usec: int | None = None
    start_epoch_time_usec: int | None = None
    workspace: str | None = None
    exception_type: str | None = None
    exception_message: str | None = None
    exception_source_location: str | None = None

    def __str__(self) -> str:
        return self.serialize()

    @staticmethod
    def deserialize(data: str | TorchxEvent) -> TorchxEvent:
        if isinstance(data, TorchxEvent):
            return data
        if not isinstance(data, str):
            raise TypeError(f"expected a serialized TorchxEvent (str) or a TorchxEvent, "
                            f"got {type(data).__name__}")
        fields = json.loads(data)
        if "source" in fields:
            try:
                fields["source"] = SourceType(fields["source"])
            except ValueError:
                fields.pop("source")
        return TorchxEvent(**fields)

    def serialize(self) -> str:
        return json.dumps(asdict(self))
