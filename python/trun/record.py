"""``@trun.record``: torch's ``@record`` without torch, for scripts run by ``trun``.

An uncaught exception in the decorated function is written to
``$TORCHELASTIC_ERROR_FILE`` in torch's format, then re-raised, so the
agent's failure table shows its message and traceback (docs/cli.md).
"""

from __future__ import annotations

import functools
import json
import os
import time
import traceback
from typing import Any, Callable, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])


def write_error_file(exc: BaseException, tb: str | None = None) -> None:
    """Writes exc to $TORCHELASTIC_ERROR_FILE (if set) as torch's @record does."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    if tb is None:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    data = {"message": {"message": f"{type(exc).__name__}: {exc}",
                        "extraInfo": {"py_callstack": tb, "timestamp": str(int(time.time()))}}}
    try:
        with open(path, "w") as f:
            json.dump(data, f)
    except OSError:
        pass


def record(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SystemExit as e:
            if e.code in (None, 0):
                raise
            write_error_file(e)
            raise
        except Exception as e:
            write_error_file(e)
            raise
    return cast(F, wrapper)
