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

Lifetimes: each agent runs under a small shell that watches its stdin (the
SSH channel, or a pipe from this process). When this process closes it, on
purpose (Ctrl-C, an exception, a failure elsewhere) or by dying (kill -9),
the shell SIGTERMs its agent, which stops its workers. Workers also end when
the launcher's socket closes before they have answered.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import logging
import os
import random
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import cloudpickle

from trun import _binary, _hosts, _wire
from trun._binary import trun_binary
from trun.errors import AgentFailedError, RemoteTraceback, WorkerFailedError, WorkerRaisedError
from trun.logs import RECORD_MARK, default_handlers, log_dir_from_env, log_level_from_env

DEFAULT_ENV_VARS = ("PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "PYTHON*", "CUDA*", "TORCH*",
                    "PYTORCH*", "NCCL*", "GLOO*", "USE_LIBUV", "OMP_NUM_THREADS", "HF_*")
# Variables the agent sets for each worker: never copied from the caller.
_AGENT_OWNED = ("TORCHELASTIC_*", "PET_*", "RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK",
                "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TRUN_*")
# What an agent's environment holds that no command line, and no environment
# but the agent's own, may show.
_SECRETS = ("TRUN_TOKEN", "TRUN_JOB_TOKEN")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Until it has shown the launcher's token, a connection gets at most
# _wire.HELLO_MAX bytes and this many seconds; a worker sends its hello at once.
_HELLO_WITHIN = 10.0
# Connections awaiting their hello at once. Each has a thread; a flood of
# idle connections would otherwise cost a thread (and its memory) each for
# _HELLO_WITHIN, or stop the accept loop where no thread can start. Over
# it, the oldest awaiting its hello is closed: a worker's arrives at once,
# so it is the newest, not the oldest.
_MAX_AWAITING_HELLO = 256
# accept()'s errors that mean "no descriptor now", not "the port is closed".
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_PREFIX = "[trun:${rank}:${local_rank}] "
_PREFIX_RE = re.compile(rb"^\[trun:(\d+):(\d+)\] ")
def _logged_record(text: str) -> tuple[int, str, str] | None:
    """(level, logger name, message) of a record a worker logged (RECORD_MARK), else None."""
    if not text.startswith(RECORD_MARK):
        return None
    try:
        r = json.loads(text[len(RECORD_MARK):])
        return int(r["level"]), str(r["name"]), str(r["msg"])
    except (ValueError, KeyError, TypeError):
        return None


def _is_loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1"


def _listen(addresses: list[str]) -> list[socket.socket]:
    """Listening sockets on one port, one per address (a free port, chosen by
    the kernel for the first; tried again if another is taken there)."""
    for attempt in range(20):
        socks: list[socket.socket] = []
        a = addresses[0]
        try:
            for a in addresses:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((a, socks[0].getsockname()[1] if len(socks) > 1 else 0))
                s.listen(1024)
            return socks
        except OSError as e:
            for s in socks:
                s.close()
            if e.errno != errno.EADDRINUSE or len(socks) == 1 or attempt == 19:
                raise RuntimeError(
                    f"the launcher cannot listen on {a}, this machine's address for its hosts: "
                    f"{e.strerror}; check that the hosts' names resolve to addresses this "
                    f"machine routes to") from e
    raise AssertionError("unreachable")


def _outward_address(target: str) -> str:
    """This machine's address on the route to target (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, 9))
            return s.getsockname()[0]
    except OSError:
        try:
            return socket.gethostbyname(socket.getfqdn())
        except OSError:
            return "127.0.0.1"


@dataclass
class LaunchResult:
    """The values the function returned: ``results[hostname][local_rank]``.

    ``LaunchResult(results={...})`` and ``LaunchResult.from_returns(hostnames,
    values)`` build one as torchrunx's do.
    """

    results: dict[str, list[Any]]
    # (index into results' hosts, local rank) of each global rank; None: host
    # order (static rendezvous, where ranks follow hostnames).
    rank_order: list[tuple[int, int]] | None = field(default=None, repr=False)

    @classmethod
    def from_returns(cls, hostnames: list[str], return_values: list[list[Any]]) -> LaunchResult:
        """One list of values per host, in ``hostnames``' order."""
        if len(hostnames) != len(return_values):
            raise ValueError(f"from_returns: {len(return_values)} lists of values for "
                             f"{len(hostnames)} hostnames")
        return cls(results=dict(zip(hostnames, return_values)))

    @property
    def hostnames(self) -> list[str]:
        return list(self.results)

    @property
    def return_values(self) -> list[list[Any]]:
        return list(self.results.values())

    def by_hostnames(self) -> dict[str, list[Any]]:
        return self.results

    def by_ranks(self) -> list[Any]:
        """Every value, by global rank."""
        values = self.return_values
        if self.rank_order is not None:
            return [values[h][lr] for h, lr in self.rank_order]
        return [v for host in values for v in host]

    def rank(self, i: int) -> Any:
        """The value of global rank ``i``."""
        return self.by_ranks()[i]

    def index(self, hostname: str, local_rank: int) -> Any:
        """The value of ``local_rank`` on ``hostname``."""
        return self.results[hostname][local_rank]


@dataclass
class Launcher:
    """Runs a function on every worker of every host; see docs/python.md.

    Arguments keep torchrunx's names and meaning; what it lacks is added at
    the end (``max_restarts``, ``log_dir``, ``python``, ``trun_path``, ...).
    """

    hostnames: list[str] | str = "auto"
    workers_per_host: int | list[int] | str = "gpu"
    ssh_config_file: str | os.PathLike | None = None
    backend: str | None = "nccl"
    worker_timeout: float = 600
    agent_timeout: float = 60
    copy_env_vars: tuple[str, ...] = DEFAULT_ENV_VARS
    extra_env_vars: dict[str, str] | None = None
    env_file: str | os.PathLike | None = None
    max_restarts: int = 0
    # Elastic: the job runs once this many of hostnames have joined (trun's
    # c10d rendezvous, --nnodes MIN:MAX); None: every host is needed.
    min_hosts: int | None = None
    # None: $TRUN_LOG_DIR, else ./trun_logs; "": no files.
    log_dir: str | os.PathLike | None = None
    # The interpreter workers run (on every host): default this one's path.
    python: str | None = None
    # The trun agent on every host: default trun_binary()'s path here.
    trun_path: str | None = None
    ssh_options: tuple[str, ...] = ()
    master_port: int | None = None
    # Set by set_logging_handlers, as torchrunx's.
    handler_factory: Callable[[], list[logging.Handler]] | str | None = field(
        default="auto", init=False, repr=False, compare=False)

    def __post_init__(self):
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
            for x in w:
                if isinstance(x, bool) or not isinstance(x, int) or x < 1:
                    raise ValueError(f"workers_per_host: {x!r} is not a positive int")
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

    def run(self, func: Callable, *args: Any, **kwargs: Any) -> LaunchResult:
        """Runs ``func(*args, **kwargs)`` on every worker; the values by rank.

        Raises the first worker's exception (same type; ``.hostname``,
        ``.rank``, ``.remote_traceback``), WorkerFailedError for a worker
        that crashed, AgentFailedError for a host whose agent was lost.
        """
        if not callable(func):
            raise TypeError(f"func: expected a callable, got {type(func).__name__}")
        self._validate()
        return _Run(self, func, args, kwargs).go()


def launch(func: Callable, *args: Any, **options: Any) -> LaunchResult:
    """``Launcher(**options).run(func, *args)``; options are Launcher's fields.

    Keyword arguments that are not Launcher fields go to ``func``; torchrunx's
    ``func_args=`` / ``func_kwargs=`` are accepted too.
    """
    names = {n for n, f in Launcher.__dataclass_fields__.items() if f.init}
    opts = {k: options.pop(k) for k in list(options) if k in names}
    func_args = tuple(options.pop("func_args", None) or ()) + args
    func_kwargs = dict(options.pop("func_kwargs", None) or {}, **options)
    return Launcher(**opts).run(func, *func_args, **func_kwargs)


# ---------------------------------------------------------------------------


class _Agent:
    """One host's agent: its process (ssh or sh), output readers, what it reported."""

    def __init__(self, index: int, hostname: str):
        self.index = index
        self.hostname = hostname
        self.proc: subprocess.Popen | None = None
        self.readers: list[threading.Thread] = []
        self.stderr_tail: list[str] = []   # the agent's own lines (and SSH's)
        self.worker_tail: list[str] = []   # its workers' stderr lines, prefixed by rank
        self.report: _binary.FailureReport | None = None   # its failure report, if it sent one
        self.returncode: int | None = None
        self.first_hello = threading.Event()
        self.lines = 0


class _Run:
    def __init__(self, cfg: Launcher, func, args, kwargs):
        self.cfg = cfg
        self.payload = cloudpickle.dumps((func, args, kwargs))
        self.token = secrets.token_hex(16)
        # The agents' job token (trun's store/auth.h): only this run's agents
        # may join its rendezvous.
        self.job_token = os.environ.get("TRUN_JOB_TOKEN") or secrets.token_hex(32)
        self.run_id = f"trun-{secrets.token_hex(4)}"
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        # (attempt, rank) -> ("ok", value) | ("err", info) ; hellos by (attempt, rank)
        self.outcomes: dict[tuple[int, int], tuple[str, Any]] = {}
        self.hellos: dict[tuple[int, int], dict] = {}
        # The workers' connections still open and their threads: each leaves
        # both when it ends, so that a flood of bad hellos costs nothing after.
        self.conns: set[threading.Thread] = set()
        self.socks: set[socket.socket] = set()
        # Those of socks that have not shown the token yet, oldest first.
        self.awaiting: dict[socket.socket, None] = {}
        self.stopping = False
        # Records go to self.handlers once they exist, in order, one at a
        # time; until then (the defaults need each host's worker count, which
        # its agent decides for "gpu"/"cpu") they wait in self.pending.
        self.log_lock = threading.Lock()
        self.handlers: list[logging.Handler] | None = None
        self.pending: list[logging.LogRecord] = []
        self.worker_counts: dict[int, int] = {}
        self.default_factory: Callable[[list[int]], list[logging.Handler]] | None = None

    # ---- set-up -------------------------------------------------------------

    def _hostnames(self) -> list[str]:
        h = self.cfg.hostnames
        if h == "slurm" or (h == "auto" and _hosts.in_slurm()):
            return _hosts.slurm_hosts()
        if h == "auto":
            return ["localhost"]
        return list(h)

    def _ssh(self) -> _binary.Ssh:
        cfg = self.cfg
        return _binary.Ssh(None if cfg.ssh_config_file is None else os.fspath(cfg.ssh_config_file),
                           cfg.agent_timeout, tuple(cfg.ssh_options))

    def _address_of(self, host: str) -> str:
        """The address SSH would connect to (its config's HostName), resolved."""
        if _hosts.is_local(host):
            return "127.0.0.1"
        name = self._ssh().hostname_of(host)
        try:
            return socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0]
        except OSError:
            return name

    def _env_for(self, local: bool, host_index: int, nhosts: int, addr: str, port: int,
                 python: str) -> dict[str, str]:
        cfg = self.cfg
        src = os.environ
        if local:
            env = dict(src)
        else:
            env = {k: v for k, v in src.items()
                   if any(fnmatch.fnmatchcase(k, p) for p in cfg.copy_env_vars)}
        for k in list(env):
            if any(fnmatch.fnmatchcase(k, p) for p in _AGENT_OWNED):
                del env[k]
        env.update(cfg.extra_env_vars or {})
        pkg_parent = str(Path(__file__).resolve().parent.parent)
        script_dir = str(Path(sys.path[0]).resolve()) if sys.path and sys.path[0] else os.getcwd()
        pp = [pkg_parent, script_dir] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(pp))
        env.update({
            "PYTHON_EXEC": python,
            "TRUN_LAUNCHER": f"{addr}:{port}",
            "TRUN_TOKEN": self.token,
            "TRUN_JOB_TOKEN": self.job_token,
            "TRUN_HOST_INDEX": str(host_index),
            "TRUN_BACKEND": cfg.backend or "",
            "TRUN_WORKER_TIMEOUT": str(cfg.worker_timeout),
            "TRUN_AGENT_TIMEOUT": str(cfg.agent_timeout),
            "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": _PREFIX,
            **_binary.agent_env(),
        })
        return env

    # ---- the run ------------------------------------------------------------

    def go(self) -> LaunchResult:
        cfg = self.cfg
        hostnames = self._hostnames()
        n = len(hostnames)
        wph = cfg.workers_per_host
        if isinstance(wph, (list, tuple)):
            if len(wph) != n:
                raise ValueError(f"workers_per_host: {len(wph)} counts for {n} hostnames")
            nprocs = [str(x) for x in wph]
        else:
            nprocs = [str(wph)] * n
        if cfg.min_hosts is not None and cfg.min_hosts > n:
            raise ValueError(f"min_hosts: {cfg.min_hosts} is more than the {n} hostnames")
        self.elastic = cfg.min_hosts is not None and cfg.min_hosts < n
        self.last_call = max(1, int(min(cfg.agent_timeout, 30)))
        local = [_hosts.is_local(h) for h in hostnames]
        # `ssh -G` per host: each a process, so all at once.
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=min(32, n)) as pool:
            addrs = list(pool.map(self._address_of, hostnames))
        all_loopback = all(_is_loopback(a) for a in addrs)
        # Where each host reaches this process: loopback from this machine,
        # else this machine's address on the route to the host.
        reach = ["127.0.0.1" if local[i] or _is_loopback(a) else _outward_address(a)
                 for i, a in enumerate(addrs)]
        my_addr = next((r for r in reach if not _is_loopback(r)), "127.0.0.1")
        master_addr = addrs[0] if not local[0] or all_loopback else my_addr
        if master_addr.startswith("127.") and not all_loopback:
            master_addr = my_addr
        if cfg.master_port:
            master_port = cfg.master_port
        elif local[0] or addrs[0].startswith("127."):
            with socket.socket() as s:
                s.bind(("", 0))
                master_port = s.getsockname()[1]
        else:
            master_port = random.randint(20000, 32000)

        python = cfg.python or sys.executable
        trun = cfg.trun_path or trun_binary()   # hosts share paths, as they share `python`
        # The launcher's port listens only where its hosts reach it, never on
        # every interface.
        servers = _listen(sorted(set(reach)))
        port = servers[0].getsockname()[1]
        plan = _binary.AgentPlan(trun=trun, nhosts=n, run_id=self.run_id,
                                 max_restarts=cfg.max_restarts, master=(master_addr, master_port),
                                 min_hosts=cfg.min_hosts if self.elastic else None,
                                 last_call=self.last_call)
        self.agents = [_Agent(i, h) for i, h in enumerate(hostnames)]
        try:
            self._prepare_handlers(hostnames, nprocs)
            started = time.monotonic()
            for server in servers:
                threading.Thread(target=self._accept, args=(server,), daemon=True).start()
            for i, (h, a) in enumerate(zip(hostnames, self.agents)):
                env = self._env_for(local[i], i, n, reach[i], port, python)
                argv = _binary.agent_argv(plan, i, nprocs[i])
                # Host 0's agent hosts the store: at the launcher's EOF it
                # waits so that the others leave while the store is up.
                eof_delay = "0.5" if i == 0 and n > 1 else "0"
                self._start(a, local[i], argv, env, eof_delay)
            return self._wait(started, hostnames)
        except BaseException:
            self._stop_all()
            raise
        finally:
            self.stopping = True
            self._stop_all()
            for server in servers:
                try:
                    server.close()
                except OSError:
                    pass
            for s in list(self.socks):
                try:
                    s.close()
                except OSError:
                    pass
            self._open_handlers()
            for h in self.handlers:
                try:
                    h.flush()
                    h.close()
                except Exception:  # noqa: BLE001
                    pass

    def _prepare_handlers(self, hostnames: list[str], nprocs: list[str]) -> None:
        """Makes the handlers now, or (the defaults, with counts that each agent
        decides) as soon as every host's first worker says how many it has."""
        factory = self.cfg.handler_factory
        if factory is None:
            self.handlers = []
        elif factory != "auto":
            self.handlers = list(factory())
        else:
            log_dir = self.cfg.log_dir if self.cfg.log_dir is not None else log_dir_from_env()
            # Checked before anything starts: a bad level is the caller's to fix.
            level = log_level_from_env() if os.fspath(log_dir) != "" else logging.NOTSET
            self.default_factory = lambda counts: default_handlers(hostnames, counts, log_dir,
                                                                   level)
            self.worker_counts = {i: int(c) for i, c in enumerate(nprocs) if c.isdigit()}
            self._open_handlers(when_complete=True)

    def _open_handlers(self, when_complete: bool = False) -> None:
        """The default handlers, with every host's worker count (when_complete)
        or what is known by now (0 for a host that started none); then the
        records that waited for them."""
        with self.log_lock:
            if self.handlers is not None:
                return
            if self.default_factory is None:   # set-up failed before the handlers' turn
                self.handlers = []
                return
            if when_complete and len(self.worker_counts) < len(self.agents):
                return
            self.handlers = list(self.default_factory(
                [self.worker_counts.get(i, 0) for i in range(len(self.agents))]))
            for rec in self.pending:
                self._dispatch(rec)
            self.pending.clear()

    def _start(self, a: _Agent, local: bool, argv: list[str], env: dict[str, str],
               eof_delay: str) -> None:
        cfg = self.cfg
        env_file = os.fspath(cfg.env_file) if cfg.env_file is not None else ""
        if local:
            # Its own environment as a child's; the secrets on stdin (_binary._WRAPPER).
            cmd = _binary.agent_command(argv, env_file=env_file, eof_delay=eof_delay)
            popen_env = {k: v for k, v in env.items() if k not in _SECRETS}
            piped = {k: env[k] for k in _SECRETS}
            cwd = os.getcwd()
        else:
            # Nothing but the directory, the wrapper and the agent's argv on
            # the command line that `ps` shows on either host: every variable
            # goes over the channel's stdin (a name no shell can export would
            # stop the wrapper, so such a name is not copied).
            cmd = _binary.agent_command(argv, env_file=env_file, eof_delay=eof_delay,
                                        ssh=self._ssh(), host=a.hostname)
            popen_env = None
            piped = {k: v for k, v in env.items() if _NAME_RE.fullmatch(k)}
            cwd = None
        a.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=popen_env, cwd=cwd,
                                  start_new_session=True)
        try:
            a.proc.stdin.write(_binary.env_lines(piped))
            a.proc.stdin.flush()
        except OSError:
            pass  # ssh has already ended (an unreachable host): _wait reports it
        for stream, name in ((a.proc.stdout, "stdout"), (a.proc.stderr, "stderr")):
            t = threading.Thread(target=self._pump, args=(a, stream, name), daemon=True)
            t.start()
            a.readers.append(t)

    def _pump(self, a: _Agent, stream, name: str) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.rstrip(b"\r\n")
            a.lines += 1
            m = _PREFIX_RE.match(line)
            logged = None
            if m:
                rank, lr = int(m.group(1)), int(m.group(2))
                text = line[m.end():].decode(errors="replace")
                logged = _logged_record(text)
                if name == "stderr":
                    shown = text if logged is None else f"{logged[1]}:{logged[2]}"
                    a.worker_tail.append(f"[rank {rank}] {shown}")
                    del a.worker_tail[:-50]
            else:
                rank = lr = None
                text = line.decode(errors="replace")
                if name == "stderr":
                    report = _binary.failure_report(text)
                    if report is not None:
                        a.report = report
                        continue
                    a.stderr_tail.append(text)
                    del a.stderr_tail[:-200]
            if logged is not None:
                self._emit(a.hostname, rank, lr, name, logged[2], logged[0], logged[1])
            else:
                level = logging.ERROR if lr is not None and name == "stderr" else logging.INFO
                self._emit(a.hostname, rank, lr, name, text, level)
        stream.close()

    def _emit(self, host, rank, lr, stream, text, level=logging.INFO, logger=None) -> None:
        name = f"trun.{host}" + (f".{lr}" if lr is not None else "")
        if logger is not None and logger != "root":
            text = f"{logger}:{text}"
        rec = logging.LogRecord(name, level, "", 0, text, None, None)
        rec.hostname, rec.rank, rec.local_rank, rec.stream = host, rank, lr, stream
        if logger is not None:
            rec.worker_logger = logger
        with self.log_lock:
            if self.handlers is None:
                self.pending.append(rec)
            else:
                self._dispatch(rec)

    def _dispatch(self, rec: logging.LogRecord) -> None:
        for h in self.handlers:
            if rec.levelno >= h.level:
                h.handle(rec)

    # ---- the workers' connections -------------------------------------------

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                sock, _ = server.accept()
            except OSError as e:
                # Out of descriptors (a flood of idle connections, each held
                # until its hello's deadline): the port must outlive it, so
                # wait for some to close. Anything else is the port closing.
                if e.errno in _OUT_OF_DESCRIPTORS and not self.stopping:
                    time.sleep(0.1)
                    continue
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                if len(self.awaiting) >= _MAX_AWAITING_HELLO:
                    oldest = next(iter(self.awaiting))
                    del self.awaiting[oldest]
                    try:
                        oldest.shutdown(socket.SHUT_RDWR)  # its thread's read ends
                    except OSError:
                        pass
                self.awaiting[sock] = None
            self.socks.add(sock)
            t = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            self.conns.add(t)
            try:
                t.start()
            except RuntimeError:  # no thread now: this connection goes, the port stays
                self._forget(sock, t)
                sock.close()

    def _serve(self, sock: socket.socket) -> None:
        try:
            # Authenticate before allocating: a bounded hello within a
            # deadline, the token checked before anything else is read; any
            # other first frame drops the connection.
            frame = _wire.recv_frame(sock, _wire.HELLO_MAX, time.monotonic() + _HELLO_WITHIN)
            if frame is None or frame[0] != _wire.HELLO:
                return
            hello = json.loads(frame[1])
            if not isinstance(hello, dict) or not secrets.compare_digest(
                    str(hello.get("token", "")).encode(), self.token.encode()):
                return
            with self.lock:
                self.awaiting.pop(sock, None)
            sock.settimeout(None)
            key = (hello["attempt"], hello["rank"])
            with self.changed:
                self.hellos[key] = hello
                self.agents[hello["host_index"]].first_hello.set()
                self.changed.notify_all()
            if self.handlers is None:
                with self.log_lock:
                    self.worker_counts.setdefault(hello["host_index"],
                                                  int(hello["local_world_size"]))
                self._open_handlers(when_complete=True)
            _wire.send_frame(sock, _wire.PAYLOAD, self.payload)
            frame = _wire.recv_frame(sock)
            if frame is None:
                outcome = ("lost", None)
            elif frame[0] == _wire.RESULT:
                outcome = ("ok", frame[1])
            else:
                outcome = ("err", cloudpickle.loads(frame[1]))
            with self.changed:
                self.outcomes[key] = outcome
                self.changed.notify_all()
        except (OSError, ValueError, KeyError, IndexError, TypeError, RecursionError):
            # A hello nested past the parser's depth raises RecursionError:
            # like any other bad frame, it only drops its connection.
            pass
        finally:
            try:
                sock.close()
            except OSError:
                pass
            self._forget(sock, threading.current_thread())

    def _forget(self, sock: socket.socket, thread: threading.Thread) -> None:
        with self.lock:
            self.awaiting.pop(sock, None)
        self.socks.discard(sock)
        self.conns.discard(thread)

    # ---- waiting and deciding -------------------------------------------------

    def _wait(self, started: float, hostnames: list[str]) -> LaunchResult:
        cfg = self.cfg
        failed: _Agent | None = None
        dropped: list[_Agent] = []
        while True:
            for a in self.agents:
                if a.returncode is None and a.proc.poll() is not None:
                    a.returncode = a.proc.returncode
                    if a.returncode != 0 and failed is None and a not in dropped:
                        live = [b for b in self.agents if b.returncode is None]
                        if self.elastic and len(live) >= cfg.min_hosts and not any(
                                b.returncode == 0 for b in self.agents):
                            # Elastic: the others go on without it (trun's rendezvous
                            # forms a round of those left, or restarts them).
                            dropped.append(a)
                            self._emit(a.hostname, None, None, "stderr",
                                       f"trun: dropped from the job ({len(live)} hosts go on)"
                                       + self._tail(a).replace("\n", " "))
                        else:
                            failed = a
            if failed is not None or all(a.returncode is not None for a in self.agents):
                break
            late = [a for a in self.agents if not a.first_hello.is_set() and a.returncode is None]
            if self.elastic:
                late = late if len(self.agents) - len(late) - len(dropped) < cfg.min_hosts else []
            # Elastic rounds wait last_call_timeout for more hosts before starting.
            grace = cfg.agent_timeout + (self.last_call if self.elastic else 0)
            if late and time.monotonic() - started > grace:
                self._stop_all()
                # Blame a host whose agent never said a word, if there is one.
                a = min(late, key=lambda x: x.lines > 0)
                raise AgentFailedError.of(a.hostname, f"no worker connected within agent_timeout "
                                          f"({cfg.agent_timeout:g} s)" + self._tail(a))
            # Woken at once by a worker's news; agents' exits are polled briefly.
            with self.changed:
                self.changed.wait(0.05)
        if failed is not None:
            self._stop_all()
        # Agents have ended (or been stopped): their workers' sockets close, so
        # every outcome is in once the connection threads end.
        deadline = time.monotonic() + 10
        for t in list(self.conns):
            t.join(max(0.0, deadline - time.monotonic()))
        for a in self.agents:
            for t in a.readers:
                t.join(max(0.0, deadline - time.monotonic()))
        self._open_handlers()
        for h in self.handlers:
            h.flush()
        if failed is None and not all(a in dropped for a in self.agents):
            return self._results(hostnames)
        failed = failed or dropped[0]
        self._raise_failure(failed)

    def _last_attempt(self) -> int:
        return max((k[0] for k in self.hellos), default=0)

    def _results(self, hostnames: list[str]) -> LaunchResult:
        attempt = self._last_attempt()
        hellos = {r: h for (a, r), h in self.hellos.items() if a == attempt}
        if not hellos:
            raise AgentFailedError.of(hostnames[0], "the agents ended without starting any worker")
        world = next(iter(hellos.values()))["world_size"]
        values: list[list[Any]] = [[] for _ in hostnames]
        order: list[tuple[int, int]] = []
        for rank in range(world):
            outcome = self.outcomes.get((attempt, rank))
            h = hellos.get(rank)
            if outcome is None or outcome[0] != "ok":
                host = hostnames[h["host_index"]] if h else "?"
                if outcome and outcome[0] == "err":
                    self._reraise(outcome[1], host, h)
                raise WorkerFailedError.of(host, rank, h["local_rank"] if h else None, None,
                                           "it exited without sending a result")
            values[h["host_index"]].append((h["local_rank"], cloudpickle.loads(outcome[1])))
            order.append((h["host_index"], h["local_rank"]))
        # Hosts that took part (all of them unless elastic), in hostnames' order.
        kept = [i for i, vs in enumerate(values) if vs]
        where = {old: new for new, old in enumerate(kept)}
        rank_order = [(where[hi], lr) for hi, lr in order]
        if rank_order == [(hi, lr) for hi in range(len(kept))
                          for lr in range(len(values[kept[hi]]))]:
            rank_order = None
        return LaunchResult({hostnames[i]: [v for _, v in sorted(values[i], key=lambda x: x[0])]
                             for i in kept}, rank_order)

    def _raise_failure(self, failed: _Agent):
        attempt = self._last_attempt()
        errors = [(info["time"], rank, info) for (a, rank), (kind, info) in self.outcomes.items()
                  if a == attempt and kind == "err"]
        if errors:
            _, rank, info = min(errors, key=lambda e: (e[0], e[1]))
            h = self.hellos[(attempt, rank)]
            self._reraise(info, self.agents[h["host_index"]].hostname, h)
        # A crash: the agent's failure report names the rank and the exit code.
        # The failed agent's report wins, unless its root cause is a worker
        # that agent stopped (then another's says why).
        reports = [a for a in [failed] + self.agents if a.report is not None]
        if reports:
            a = next((x for x in reports if x.report and not x.report.root_cause.stopped),
                     reports[0])
            assert a.report is not None
            root = a.report.root_cause
            code = root.exitcode
            if not a.first_hello.is_set():
                # Its workers died before reaching us: the environment, not the function.
                tail = [x for x in a.worker_tail if x.strip()][-10:]
                raise AgentFailedError.of(a.hostname, f"its workers failed before reaching the "
                                          f"launcher (exit code {code})" +
                                          (":\n  " + "\n  ".join(tail) if tail else ""), code)
            raise WorkerFailedError.of(a.hostname, root.rank, root.local_rank, code)
        rc = failed.returncode
        if rc == 255 and not failed.first_hello.is_set():
            raise AgentFailedError.of(failed.hostname,
                                      "cannot reach it over SSH" + self._tail(failed), rc)
        lost = [k for k, (kind, _) in self.outcomes.items() if k[0] == attempt and kind == "lost"]
        if lost and rc in (0, 1):
            h = self.hellos[lost[0]]
            raise WorkerFailedError.of(self.agents[h["host_index"]].hostname, lost[0][1],
                                       h["local_rank"], None, "it ended without a result")
        if rc == 255 and not _hosts.is_local(failed.hostname):
            raise AgentFailedError.of(failed.hostname, "its SSH connection was lost" +
                                      self._tail(failed), rc)
        sig = -rc if rc < 0 else rc - 128 if rc > 128 else 0   # a shell reports 128+N
        how = (f"killed by {signal.Signals(sig).name}" if sig in signal.valid_signals() and sig
               else f"exit code {rc}")
        raise AgentFailedError.of(failed.hostname,
                                  f"ended unexpectedly ({how})" + self._tail(failed), rc)

    @staticmethod
    def _tail(a: _Agent) -> str:
        tail = [line for line in a.stderr_tail if line.strip()][-10:]
        return (":\n  " + "\n  ".join(tail)) if tail else ""

    def _reraise(self, info: dict, host: str, hello: dict | None):
        exc = None
        if "exception" in info:
            try:
                exc = cloudpickle.loads(info["exception"])
            except Exception:  # noqa: BLE001
                exc = None
        if not isinstance(exc, BaseException):
            exc = WorkerRaisedError(info["type"], info["message"])
        rank = hello["rank"] if hello else None
        exc.hostname = host
        exc.rank = rank
        exc.local_rank = hello["local_rank"] if hello else None
        exc.remote_traceback = info["traceback"]
        note = f"raised by worker rank {rank} on host {host}; its traceback:\n{info['traceback']}"
        if hasattr(exc, "add_note"):
            exc.add_note(note)
        raise exc from RemoteTraceback(info["traceback"])

    # ---- stopping ------------------------------------------------------------

    def _stop_all(self) -> None:
        """Closes every agent's stdin (its shell SIGTERMs the agent), then waits.

        The shells need only that EOF; a local one that is still there after
        the grace is killed with its whole session (agent and workers), an SSH
        client is killed (its remote side then sees the channel close).
        """
        agents = [a for a in getattr(self, "agents", []) if a.proc is not None]

        def close(group):
            for a in group:
                if a.proc.poll() is None:
                    try:
                        a.proc.stdin.write(b"stop\n")
                        a.proc.stdin.flush()
                    except OSError:
                        pass
                    try:
                        a.proc.stdin.close()
                    except OSError:
                        pass
        # Host 0's agent hosts the store: stopped first, it would leave the
        # others handling a lost store (about a second) before they exit.
        close(agents[1:])
        soon = time.monotonic() + 1
        for a in agents[1:]:
            try:
                a.proc.wait(max(0.0, soon - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
        close(agents[:1])
        deadline = time.monotonic() + 5
        for a in agents:
            try:
                a.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(a.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                a.proc.wait()
            if a.returncode is None:
                a.returncode = a.proc.returncode
