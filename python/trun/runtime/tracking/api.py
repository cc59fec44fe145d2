"""TorchX's ``torchx.runtime.tracking.api``: simple results (numbers, short
strings) that one program records under a key and another reads back, kept
as a JSON file per key under a base folder or URL shared by both.

:class:`FsspecResultTracker` stores through ``fsspec`` when it is installed
(any URL it knows: ``s3://``, ``gs://``, ...), and without it in a local
folder (a path, or a ``file://`` URL); any other URL then fails with a
message naming fsspec. Thread-safety: as the store's (one file per put).
"""

from __future__ import annotations

import abc
import importlib
import json
import os
from typing import Any, Dict, Union

KeyType = Union[int, str]
ResultType = Union[int, float, str]


class ResultTracker(abc.ABC):
    """Results by key: ``tracker[key] = {"l2norm": 1.2}`` (or ``put(key,
    l2norm=1.2)``), ``tracker[key]["l2norm"]`` (or ``get(key)``), where a
    key is ``str(key)`` and an unknown key reads as ``{}``."""

    def __getitem__(self, key: KeyType) -> Dict[str, ResultType]:
        return self.get(key)

    def __setitem__(self, key: KeyType, results: Dict[str, ResultType]) -> None:
        self.put(key, **results)

    @abc.abstractmethod
    def put(self, key: KeyType, **results: ResultType) -> None:
        """Records ``results`` under ``key`` (replacing what was there)."""

    @abc.abstractmethod
    def get(self, key: KeyType) -> Dict[str, ResultType]:
        """The results recorded under ``key``; ``{}`` when none."""


class FsspecResultTracker(ResultTracker):
    """Results as ``<tracker_base>/<key>`` files of JSON."""

    def __init__(self, tracker_base: str) -> None:
        self._tracker_base = tracker_base

    def _local_path(self, key: KeyType) -> str:
        base = self._tracker_base
        if base.startswith("file://"):
            base = base[len("file://"):]
        elif "://" in base:
            raise ValueError(f"tracker base {self._tracker_base!r} is a URL, which needs the "
                             f"fsspec package: install it, or give a local folder")
        return os.path.join(base, str(key))

    def put(self, key: KeyType, **results: ResultType) -> None:
        data = json.dumps(results, indent=2).encode("utf-8")
        fsspec = _fsspec()
        if fsspec is not None:
            fsspec.get_mapper(self._tracker_base, create=True)[str(key)] = data
            return
        path = self._local_path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    def get(self, key: KeyType) -> Dict[str, ResultType]:
        fsspec = _fsspec()
        try:
            if fsspec is not None:
                data: bytes = fsspec.get_mapper(self._tracker_base)[str(key)]
            else:
                with open(self._local_path(key), "rb") as f:
                    data = f.read()
        except (KeyError, FileNotFoundError):
            return {}
        results: Dict[str, ResultType] = json.loads(data.decode("utf-8"))
        return results


def _fsspec() -> Any:
    """The fsspec module when installed, else None."""
    try:
        return importlib.import_module("fsspec")
    except ImportError:
        return None
