"""Worker and agent output as Python ``logging`` records, and the default handlers.

Every line a worker writes (stdout or stderr) reaches the launcher as one
``logging.LogRecord`` of level INFO, named ``trun.<hostname>.<local_rank>``,
with extra attributes ``hostname``, ``local_rank``, ``rank`` (global) and
``stream`` ("stdout"/"stderr"); lines of the agent itself (and of SSH) have
``local_rank`` and ``rank`` None and are named ``trun.<hostname>``.

``Launcher.set_logging_handlers(factory)`` replaces the defaults with the
handlers ``factory()`` returns (as torchrunx's). The defaults are
``default_handlers(log_dir)``: every line to the caller's console, prefixed
``[host:rank]`` (agent lines ``[host]``), and, unless ``log_dir`` is "",
one file per host and local rank under ``<log_dir>/<timestamp>/``:
``<host>[<local_rank>].log`` for workers, ``<host>.log`` for the agent.
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Callable


def get_handler_filter(hostname: str, local_rank: int | None,
                       log_level: int = logging.NOTSET) -> Callable[[logging.LogRecord], bool]:
    """A filter passing only one worker's records (local_rank None: the agent's)."""
    return lambda r: (getattr(r, "hostname", None) == hostname
                      and getattr(r, "local_rank", None) == local_rank
                      and r.levelno >= log_level)


class ConsoleHandler(logging.Handler):
    """Writes each line to the caller's stdout or stderr (as the worker wrote it), prefixed."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            rank = getattr(record, "rank", None)
            host = getattr(record, "hostname", "?")
            prefix = f"[{host}:{rank}]" if rank is not None else f"[{host}]"
            out = sys.stdout if getattr(record, "stream", "stdout") == "stdout" else sys.stderr
            out.write(f"{prefix} {record.getMessage()}\n")
            out.flush()
        except Exception:  # noqa: BLE001
            self.handleError(record)


class DirectoryHandler(logging.Handler):
    """One file per host and local rank under ``directory``, opened on first use."""

    def __init__(self, directory: str | os.PathLike, level: int = logging.NOTSET):
        super().__init__(level)
        self.directory = Path(directory)
        self._files: dict[tuple[str, int | None], object] = {}
        self._lock2 = threading.Lock()
        self.setFormatter(logging.Formatter("%(asctime)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            key = (getattr(record, "hostname", "unknown"), getattr(record, "local_rank", None))
            with self._lock2:
                f = self._files.get(key)
                if f is None:
                    self.directory.mkdir(parents=True, exist_ok=True)
                    name = key[0] + (f"[{key[1]}]" if key[1] is not None else "") + ".log"
                    f = self._files[key] = open(self.directory / name, "a", buffering=1)
                f.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001
            self.handleError(record)

    def close(self) -> None:
        with self._lock2:
            for f in self._files.values():
                f.close()
            self._files.clear()
        super().close()


def run_log_dir(log_dir: str | os.PathLike) -> Path:
    """``<log_dir>/<timestamp>``: this run's own folder."""
    stamp = datetime.datetime.now().isoformat(timespec="milliseconds")
    return Path(log_dir) / stamp


def file_handlers(hostnames: list[str], workers_per_host: list[int],
                  log_dir: str | os.PathLike = "trun_logs",
                  log_level: int = logging.NOTSET) -> list[logging.Handler]:
    """torchrunx's helper: one FileHandler per agent and worker, filtered to it."""
    d = run_log_dir(log_dir)
    d.mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter("%(asctime)s %(message)s")
    handlers: list[logging.Handler] = []
    for host, n in zip(hostnames, workers_per_host):
        for lr in [None, *range(n)]:
            h = logging.FileHandler(d / (host + (f"[{lr}]" if lr is not None else "") + ".log"))
            h.addFilter(get_handler_filter(host, lr, log_level))
            h.setFormatter(fmt)
            handlers.append(h)
    return handlers


def default_handlers(log_dir: str | os.PathLike | None) -> list[logging.Handler]:
    """The console for every line, and a per-host, per-rank folder unless log_dir is ""."""
    handlers: list[logging.Handler] = [ConsoleHandler()]
    if log_dir:
        handlers.append(DirectoryHandler(run_log_dir(log_dir)))
    return handlers
