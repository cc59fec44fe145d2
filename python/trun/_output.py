"""Where the agents' and workers' lines go: one ``logging.LogRecord`` each,
to the run's handlers (trun.logs describes the records).

Records go to the handlers once they exist, in order, one at a time; until
then (the default handlers need each host's worker count, which its agent
decides for "gpu"/"cpu") they wait.

Thread-safety: every method may be called from any thread (the agents'
output readers, the workers' connections); one lock orders the records.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Callable

from trun.logs import default_handlers, log_dir_from_env, log_level_from_env

HandlerFactory = Callable[[], list[logging.Handler]]


class Output:
    """The run's log handlers and the records that wait for them."""

    def __init__(self, nhosts: int) -> None:
        self.nhosts = nhosts
        self.lock = threading.Lock()
        self.handlers: list[logging.Handler] | None = None
        self.pending: list[logging.LogRecord] = []
        self.worker_counts: dict[int, int] = {}
        self.default_factory: Callable[[list[int]], list[logging.Handler]] | None = None

    def prepare(self, factory: HandlerFactory | str | None, log_dir: str | os.PathLike[str] | None,
                hostnames: list[str], nprocs: list[str]) -> None:
        """Makes the handlers now, or (the defaults, with counts that each agent
        decides) as soon as every host's first worker says how many it has."""
        if factory is None:
            self.handlers = []
        elif not isinstance(factory, str):
            self.handlers = list(factory())
        else:
            where = log_dir if log_dir is not None else log_dir_from_env()
            # Checked before anything starts: a bad level is the caller's to fix.
            level = log_level_from_env() if os.fspath(where) != "" else logging.NOTSET
            self.default_factory = lambda counts: default_handlers(hostnames, counts, where,
                                                                   level)
            self.worker_counts = {i: int(c) for i, c in enumerate(nprocs) if c.isdigit()}
            self.open(when_complete=True)

    def worker_started(self, host_index: int, local_world_size: int) -> None:
        """A worker of host ``host_index`` said how many its agent started."""
        if self.handlers is None:
            with self.lock:
                self.worker_counts.setdefault(host_index, local_world_size)
            self.open(when_complete=True)

    def open(self, when_complete: bool = False) -> None:
        """The default handlers, with every host's worker count (when_complete)
        or what is known by now (0 for a host that started none); then the
        records that waited for them."""
        with self.lock:
            if self.handlers is not None:
                return
            if self.default_factory is None:   # set-up failed before the handlers' turn
                self.handlers = []
                return
            if when_complete and len(self.worker_counts) < self.nhosts:
                return
            self.handlers = list(self.default_factory(
                [self.worker_counts.get(i, 0) for i in range(self.nhosts)]))
            for rec in self.pending:
                self._dispatch(rec)
            self.pending.clear()

    def emit(self, host: str, rank: int | None, lr: int | None, stream: str | None, text: str,
             level: int = logging.INFO, logger: str | None = None) -> None:
        name = f"trun.{host}" + (f".{lr}" if lr is not None else "")
        if logger is not None and logger != "root":
            text = f"{logger}:{text}"
        rec = logging.LogRecord(name, level, "", 0, text, None, None)
        rec.hostname, rec.rank, rec.local_rank, rec.stream = host, rank, lr, stream
        if logger is not None:
            rec.worker_logger = logger
        with self.lock:
            if self.handlers is None:
                self.pending.append(rec)
            else:
                self._dispatch(rec)

    def flush(self) -> None:
        self.open()
        for h in self.handlers or []:
            h.flush()

    def close(self) -> None:
        self.open()
        for h in self.handlers or []:
            try:
                h.flush()
                h.close()
            except Exception:  # noqa: BLE001
                pass

    def _dispatch(self, rec: logging.LogRecord) -> None:
        for h in self.handlers or []:
            if rec.levelno >= h.level:
                h.handle(rec)
