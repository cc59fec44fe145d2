"""TorchX's ``torchx.runtime.tracking``: simple results that one program
records under a key and another reads back. The classes live in
:mod:`.api`, as TorchX's do (``from torchx.runtime.tracking.api import
FsspecResultTracker`` and the shorter import both work)."""

from trun.runtime.tracking.api import FsspecResultTracker, KeyType, ResultTracker, ResultType

__all__ = ["FsspecResultTracker", "KeyType", "ResultTracker", "ResultType"]
