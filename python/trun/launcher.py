"""The launcher: ``trun.Launcher(...).run(func, *args)`` on many hosts at once.

How a run goes (docs/python.md has the user's view):
1. The launcher listens on a TCP port of its own, on the addresses its hosts
   reach it by (127.0.0.1 for this machine, the interface that routes to each
   other host), with a random token.
2. It starts one trun agent per host, all at once: ``localhost`` directly,
   other hosts with ``ssh -T host -- sh -c ...``; the agent's environment and
   secrets go over the shell's stdin, never a command line. Each agent gets
   trun's static rendezvous flags (``--nnodes N --node-rank i --master-addr
   host0``), so workers get torchrun's environment, and runs ``python -m
   trun._worker``.
3. Each worker connects back, sends who it is, receives the cloudpickled
   function and arguments, runs it, and sends the value or the exception.
4. Agents end when their workers are done; the launcher returns the values
   of the last attempt in rank order, or raises the first failure.

The parts: trun._run (placing the agents and waiting), trun._binary (their
command lines), trun._agents (their processes and output), trun._server
(the workers' connections), trun._output (where lines go), trun._verdict
(the values or the failure).

Lifetimes: each agent runs under a small shell that watches its stdin (the
SSH channel, or a pipe from this process). When this process closes it, on
purpose (Ctrl-C, an exception, a failure elsewhere) or by dying (kill -9),
the shell SIGTERMs its agent, which stops its workers. Workers also end when
the launcher's socket closes before they have answered.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from trun._binary import trun_binary
from trun._run import Run
from trun._verdict import LaunchResult

__all__ = ["DEFAULT_ENV_VARS", "Launcher", "LaunchResult", "launch", "trun_binary"]

DEFAULT_ENV_VARS = ("PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "PYTHON*", "CUDA*", "TORCH*",
                    "PYTORCH*", "NCCL*", "GLOO*", "USE_LIBUV", "OMP_NUM_THREADS", "HF_*")


@dataclass
class Launcher:
    """Runs a function on every worker of every host; see docs/python.md.

    Arguments keep torchrunx's names and meaning; what it lacks is added at
    the end (``max_restarts``, ``log_dir``, ``python``, ``trun_path``, ...).
    """

    hostnames: list[str] | str = "auto"
    workers_per_host: int | list[int] | str = "gpu"
    ssh_config_file: str | os.PathLike[str] | None = None
    backend: str | None = "nccl"
    worker_timeout: float = 600
    agent_timeout: float = 60
    copy_env_vars: tuple[str, ...] = DEFAULT_ENV_VARS
    extra_env_vars: dict[str, str] | None = None
    env_file: str | os.PathLike[str] | None = None
    max_restarts: int = 0
    # Elastic: the job runs once this many of hostnames have joined (trun's
    # c10d rendezvous, --nnodes MIN:MAX); None: every host is needed.
    min_hosts: int | None = None
    # None: $TRUN_LOG_DIR, else ./trun_logs; "": no files.
    log_dir: str | os.PathLike[str] | None = None
    # The interpreter workers run (on every host): default this one's path.
    python: str | None = None
    # The trun agent on every host: default trun_binary()'s path here.
    trun_path: str | None = None
    ssh_options: tuple[str, ...] = ()
    master_port: int | None = None
    # Set by set_logging_handlers, as torchrunx's.
    handler_factory: Callable[[], list[logging.Handler]] | str | None = field(
        default="auto", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._validate()

    def set_logging_handlers(
            self, handler_factory: Callable[[], list[logging.Handler]] | str | None) -> Launcher:
        """Who handles worker and agent output: ``handler_factory()``'s handlers,
        ``"auto"`` the defaults (trun.logs.default_handlers), ``None`` no handler."""
        if handler_factory is not None and handler_factory != "auto" and not callable(
                handler_factory):
            raise TypeError("handler_factory: expected a callable returning logging handlers, "
                            "'auto' or None")
        self.handler_factory = handler_factory
        return self

    # ---- checking -----------------------------------------------------------

    def _validate(self) -> None:
        h = self.hostnames
        if isinstance(h, str):
            if h not in ("auto", "slurm"):
                raise ValueError(f"hostnames: expected 'auto', 'slurm' or a list of host names, "
                                 f"got {h!r}")
        elif isinstance(h, (list, tuple)):
            if not h:
                raise ValueError("hostnames: the list is empty")
            for x in h:
                if not isinstance(x, str) or not x or any(c.isspace() for c in x):
                    raise ValueError(f"hostnames: {x!r} is not a host name")
        else:
            raise TypeError(f"hostnames: expected a list of str, 'auto' or 'slurm', "
                            f"got {type(h).__name__}")
        w = self.workers_per_host
        if isinstance(w, bool):
            raise TypeError("workers_per_host: expected int, list of int, 'gpu' or 'cpu', got bool")
        if isinstance(w, str):
            if w not in ("gpu", "cpu", "auto"):
                raise ValueError(f"workers_per_host: expected 'gpu', 'cpu', an int or a list, "
                                 f"got {w!r}")
        elif isinstance(w, int):
            if w < 1:
                raise ValueError(f"workers_per_host: must be at least 1, got {w}")
        elif isinstance(w, (list, tuple)):
            for count in w:
                if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                    raise ValueError(f"workers_per_host: {count!r} is not a positive int")
            if isinstance(h, (list, tuple)) and len(w) != len(h):
                raise ValueError(f"workers_per_host: {len(w)} counts for {len(h)} hostnames")
        else:
            raise TypeError(f"workers_per_host: expected int, list of int, 'gpu' or 'cpu', "
                            f"got {type(w).__name__}")
        if self.backend is not None and not isinstance(self.backend, str):
            raise TypeError(f"backend: expected a str or None, got {type(self.backend).__name__}")
        if self.backend is not None and self.backend not in ("nccl", "gloo", "mpi", "ucc", "xccl"):
            raise ValueError(f"backend: expected 'nccl', 'gloo', 'mpi', 'ucc' or None, "
                             f"got {self.backend!r}")
        for name in ("worker_timeout", "agent_timeout"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{name}: expected a number of seconds, got {type(v).__name__}")
            if v <= 0:
                raise ValueError(f"{name}: must be positive, got {v}")
        if isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int):
            raise TypeError(f"max_restarts: expected int, got {type(self.max_restarts).__name__}")
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts: must be >= 0, got {self.max_restarts}")
        m = self.min_hosts
        if m is not None:
            if isinstance(m, bool) or not isinstance(m, int):
                raise TypeError(f"min_hosts: expected int or None, got {type(m).__name__}")
            if m < 1 or (isinstance(h, (list, tuple)) and m > len(h)):
                raise ValueError(f"min_hosts: expected 1 to the number of hostnames, got {m}")
        if isinstance(self.copy_env_vars, str) or not all(
                isinstance(x, str) for x in self.copy_env_vars):
            raise TypeError("copy_env_vars: expected a tuple of str patterns")
        e = self.extra_env_vars
        if e is not None:
            if not isinstance(e, dict):
                raise TypeError(f"extra_env_vars: expected a dict of str to str, "
                                f"got {type(e).__name__}")
            for k, v in e.items():
                if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                    raise ValueError(f"extra_env_vars: {k!r} is not a variable name")
                if not isinstance(v, str):
                    raise TypeError(f"extra_env_vars: the value of {k} is not a str")
        if self.env_file is not None and not isinstance(self.env_file, (str, os.PathLike)):
            raise TypeError("env_file: expected a path")
        if self.ssh_config_file is not None and not isinstance(self.ssh_config_file,
                                                               (str, os.PathLike)):
            raise TypeError("ssh_config_file: expected a path")
        if self.master_port is not None and not (isinstance(self.master_port, int)
                                                 and 0 < self.master_port < 65536):
            raise ValueError(f"master_port: expected 1-65535, got {self.master_port!r}")

    # ---- running ------------------------------------------------------------

    def run(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> LaunchResult:
        """Runs ``func(*args, **kwargs)`` on every worker; the values by rank.

        Raises the first worker's exception (same type; ``.hostname``,
        ``.rank``, ``.remote_traceback``), WorkerFailedError for a worker
        that crashed, AgentFailedError for a host whose agent was lost.
        """
        if not callable(func):
            raise TypeError(f"func: expected a callable, got {type(func).__name__}")
        self._validate()
        return Run(self, func, args, kwargs).go()


def launch(func: Callable[..., Any], *args: Any, **options: Any) -> LaunchResult:
    """``Launcher(**options).run(func, *args)``; options are Launcher's fields.

    Keyword arguments that are not Launcher fields go to ``func``; torchrunx's
    ``func_args=`` / ``func_kwargs=`` are accepted too.
    """
    names = {n for n, f in Launcher.__dataclass_fields__.items() if f.init}
    opts = {k: options.pop(k) for k in list(options) if k in names}
    func_args = tuple(options.pop("func_args", None) or ()) + args
    func_kwargs = dict(options.pop("func_kwargs", None) or {}, **options)
    return Launcher(**opts).run(func, *func_args, **func_kwargs)
