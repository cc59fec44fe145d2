"""TorchX's ``torchx.runner.events``: every Runner call is recorded as a
:class:`TorchxEvent` (``log_event`` around the call, ``record`` at its end).

As in TorchX, ``record`` sends an event to a destination's own logger
(``torchx-events-DESTINATION``, which does not propagate): the default,
``null``, drops it, ``console`` writes it to stderr (TorchX's Meta-internal
destinations are not carried over). A program that wants the Runner's
events patches or wraps ``record``, as TorchX's tests do.

Thread-safety: the loggers are made under a lock; ``record`` is as safe as
Python's logging; a ``log_event`` is used by one thread.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from types import TracebackType

from trun.runner.events.api import SourceType, TorchxEvent
from trun.runner.events.handlers import get_logging_handler
from trun.util.session import get_session_id_or_create_new

__all__ = ["SourceType", "TorchxEvent", "log_event", "record"]

_events_loggers: dict[str, logging.Logger] = {}
_events_loggers_lock = threading.Lock()

log = logging.getLogger(__name__)


def _get_or_create_logger(destination: str = "null") -> logging.Logger:
    """The logger of ``destination``, made once with its handler."""
    with _events_loggers_lock:
        logger = _events_loggers.get(destination)
        if logger is None:
            handler = get_logging_handler(destination)
            handler.setLevel(logging.DEBUG)
            logger = logging.getLogger(f"torchx-events-{destination}")
            # An event is handled once, by its destination, not by the root logger.
            logger.propagate = False
            logger.addHandler(handler)
            _events_loggers[destination] = logger
        return logger


def record(event: TorchxEvent, destination: str = "null") -> None:
    """Logs ``event`` as JSON to ``destination``."""
    try:
        serialized = event.serialize()
    except Exception:
        log.exception("failed to serialize event, will not record event")
    else:
        _get_or_create_logger(destination).info(serialized)


class log_event:
    """Times the block it wraps and records its event at the end, with the
    exception if one leaves the block (which it does not stop)."""

    def __init__(self, api: str, scheduler: str | None = None, app_id: str | None = None,
                 app_image: str | None = None, app_metadata: dict[str, str] | None = None,
                 runcfg: str | None = None, workspace: str | None = None) -> None:
        self._torchx_event = TorchxEvent(
            session=get_session_id_or_create_new(), scheduler=scheduler or "", api=api,
            app_id=app_id, app_image=app_image, app_metadata=app_metadata, runcfg=runcfg,
            workspace=workspace)
        self._start_cpu_ns = 0
        self._start_wall_ns = 0

    def __enter__(self) -> log_event:
        self._start_cpu_ns = time.process_time_ns()
        self._start_wall_ns = time.perf_counter_ns()
        self._torchx_event.start_epoch_time_usec = int(time.time() * 1_000_000)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        event = self._torchx_event
        event.cpu_time_usec = (time.process_time_ns() - self._start_cpu_ns) // 1000
        event.wall_time_usec = (time.perf_counter_ns() - self._start_wall_ns) // 1000
        if tb is not None:
            event.raw_exception = "".join(traceback.format_exception(exc_type, exc, tb))
            last = traceback.extract_tb(tb)[-1]
            event.exception_source_location = json.dumps(
                {"filename": last.filename, "lineno": last.lineno, "name": last.name})
        if exc_type is not None:
            event.exception_type = exc_type.__name__
        if exc is not None:
            event.exception_message = str(exc)
        record(event)
