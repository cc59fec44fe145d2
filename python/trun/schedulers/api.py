"""TorchX's ``torchx.schedulers.api`` types, for code that reads what a Runner returns.

trun's schedulers are the binary's (``local``, ``slurm``, ``kubernetes``), so
TorchX's ``Scheduler`` base class and ``StructuredOpts`` (for writing
scheduler plug-ins in Python) are not here; see docs/python.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable, Iterator

from trun.specs.api import NONE, AppState, Role, RoleStatus


class Stream(str, Enum):
    """Which of a replica's streams ``log_lines`` reads."""

    STDOUT = "stdout"
    STDERR = "stderr"
    COMBINED = "combined"


@dataclass
class DescribeAppResponse:
    app_id: str = "<NOT_SET>"
    state: AppState = AppState.UNSUBMITTED
    num_restarts: int = -1
    msg: str = NONE
    structured_error_msg: str = NONE
    ui_url: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    roles_statuses: list[RoleStatus] = field(default_factory=list)
    roles: list[Role] = field(default_factory=list)


@dataclass
class ListAppResponse:
    """One app of ``Runner.list``."""

    app_id: str
    state: AppState
    app_handle: str = "<NOT_SET>"
    name: str = ""

    def __hash__(self) -> int:
        return hash((self.app_id, self.app_handle, self.state))


def filter_regex(regex: str, data: Iterable[str]) -> Iterable[str]:
    """The items of ``data`` that ``regex`` finds something in."""
    pattern = re.compile(regex)
    return (d for d in data if pattern.search(d))


def split_lines(text: str) -> list[str]:
    """``text`` cut after each ``\\n``, which each line keeps (the last may have none)."""
    return [line for line in re.split(r"(?<=\n)", text) if line]


def split_lines_iterator(chunks: Iterable[str]) -> Iterator[str]:
    """The lines of each chunk in turn (a line is not joined across chunks)."""
    for chunk in chunks:
        yield from split_lines(chunk)
