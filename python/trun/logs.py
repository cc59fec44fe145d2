"""Worker and agent output as Python ``logging`` records, and the default handlers.

What reaches the launcher, one ``logging.LogRecord`` each, named
``trun.<hostname>.<local_rank>`` (the agent's: ``trun.<hostname>``), with
extra attributes ``hostname``, ``local_rank``, ``rank`` (global; None for
the agent) and ``stream`` ("stdout"/"stderr"):
- a record the function logged with ``logging``, with its own level; its
  logger's name is in ``worker_logger`` and, as torchrunx does, before the
  message (``"mylib:message"``; the root logger's messages stand alone);
- any other line a worker writes: INFO from stdout, ERROR from stderr
  (torchrunx's levels for them);
- a line of the agent itself (or of SSH): INFO.

``Launcher.set_logging_handlers(factory)`` replaces the defaults with the
handlers ``factory()`` returns, ``None`` installs none and ``"auto"`` the
defaults, as torchrunx's. The defaults are ``default_handlers(hostnames,
workers_per_host)``: every record to the caller's console, prefixed
``[host:rank]`` (agent lines ``[host]``), and, unless the log directory is
"", ``file_handlers``: one file per host and local rank, created before the
job runs, under ``<log_dir>/<timestamp>/``: ``<host>[<local_rank>].log`` for
workers, ``<host>.log`` for the agent. The directory: ``$TRUN_LOG_DIR``,
else ``$TORCHRUNX_LOG_DIR``, else ``./trun_logs``; the files' level:
``$TRUN_LOG_LEVEL``, else ``$TORCHRUNX_LOG_LEVEL``, else INFO.

Thread-safety: handlers are called from the launcher's reader threads, one
record at a time (the launcher serialises them).
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
from pathlib import Path
from typing import Callable

# The line a worker writes for each record it logs (trun._worker), read back
# by the launcher: this prefix, then the record as JSON.
RECORD_MARK = "\x1etrun-log "


def get_handler_filter(hostname: str, local_rank: int | None,
                       log_level: int = logging.NOTSET) -> Callable[[logging.LogRecord], bool]:
    """A filter passing only one worker's records (local_rank None: the agent's)."""
    return lambda r: (getattr(r, "hostname", None) == hostname
                      and getattr(r, "local_rank", None) == local_rank
                      and r.levelno >= log_level)


class RedirectHandler(logging.Handler):
    """Hands each record to the launcher's logger of the same name (torchrunx's).

    ``trun.<host>.<local_rank>`` propagates to ``trun`` and the root logger,
    so the caller's own ``logging`` configuration decides what shows.
    """

    def emit(self, record: logging.LogRecord) -> None:
        logger = logging.getLogger(record.name)
        if logger.isEnabledFor(record.levelno):
            logger.handle(record)


class ConsoleHandler(logging.Handler):
    """Writes each line to the caller's stdout or stderr (as the worker wrote it), prefixed."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            rank = getattr(record, "rank", None)
            host = getattr(record, "hostname", "?")
            prefix = f"[{host}:{rank}]" if rank is not None else f"[{host}]"
            if hasattr(record, "worker_logger"):
                prefix += f" {record.levelname}:"
            out = sys.stdout if getattr(record, "stream", "stdout") == "stdout" else sys.stderr
            out.write(f"{prefix} {record.getMessage()}\n")
            out.flush()
        except Exception:  # noqa: BLE001
            self.handleError(record)


def log_dir_from_env() -> str:
    """``$TRUN_LOG_DIR``, else ``$TORCHRUNX_LOG_DIR``, else ``trun_logs`` ("" : no files)."""
    for name in ("TRUN_LOG_DIR", "TORCHRUNX_LOG_DIR"):
        if name in os.environ:
            return os.environ[name]
    return "trun_logs"


def log_level_from_env() -> int:
    """``$TRUN_LOG_LEVEL``, else ``$TORCHRUNX_LOG_LEVEL``, else INFO: a level's name or number."""
    for name in ("TRUN_LOG_LEVEL", "TORCHRUNX_LOG_LEVEL"):
        if name in os.environ:
            return parse_level(os.environ[name], f"${name}")
    return logging.INFO


def parse_level(value: str, what: str) -> int:
    """A logging level from its name ("DEBUG") or number ("10")."""
    v = value.strip()
    if v.isdigit():
        return int(v)
    level = logging.getLevelName(v.upper())
    if not isinstance(level, int):
        raise ValueError(f"{what}: {value!r} is not a logging level; use a number or one of "
                         f"CRITICAL, ERROR, WARNING, INFO, DEBUG, NOTSET")
    return level


def run_log_dir(log_dir: str | os.PathLike[str]) -> Path:
    """``<log_dir>/<timestamp>``: this run's own folder (ISO 8601, to the millisecond)."""
    stamp = datetime.datetime.now().isoformat(timespec="milliseconds")
    return Path(log_dir) / stamp


def file_handlers(hostnames: list[str], workers_per_host: list[int],
                  log_dir: str | os.PathLike[str] = "trun_logs",
                  log_level: int = logging.NOTSET) -> list[logging.Handler]:
    """torchrunx's helper: one file per agent and worker, each created now and filtered to it."""
    if len(hostnames) != len(workers_per_host):
        raise ValueError(f"file_handlers: {len(workers_per_host)} worker counts for "
                         f"{len(hostnames)} hostnames")
    d = run_log_dir(log_dir)
    d.mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter("%(asctime)s:%(levelname)s: %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    handlers: list[logging.Handler] = []
    for host, n in zip(hostnames, workers_per_host):
        for lr in [None, *range(n)]:
            h = logging.FileHandler(d / (host + (f"[{lr}]" if lr is not None else "") + ".log"))
            h.addFilter(get_handler_filter(host, lr, log_level))
            h.setFormatter(fmt)
            handlers.append(h)
    return handlers


def default_handlers(hostnames: list[str], workers_per_host: list[int],
                     log_dir: str | os.PathLike[str] | None = None,
                     log_level: int | None = None) -> list[logging.Handler]:
    """The console for every record, and ``file_handlers`` unless the directory is "".

    ``log_dir`` None: ``log_dir_from_env()``; ``log_level`` None:
    ``log_level_from_env()`` (a bad value is a ValueError naming the variable).
    """
    handlers: list[logging.Handler] = [ConsoleHandler()]
    d = log_dir_from_env() if log_dir is None else log_dir
    if os.fspath(d) != "":
        level = log_level_from_env() if log_level is None else log_level
        handlers += file_handlers(hostnames, workers_per_host, d, level)
    return handlers
