"""The trun binary: where it is, every command line that names it, and what it
reports back as JSON.

The package runs trun two ways, and builds both command lines here only:

- a subcommand whose output it reads (``trun run --dryrun --json``,
  ``status --json``, ``log``, ``builtins --resources --json``, ...):
  :func:`run` and :func:`stream`. Each sets ``$TRUN_ERROR_JSON``, so a refused
  command says what kind of problem it was (``unknown_app``,
  ``invalid_argument``, ...) without its message being read;
- the agent the launcher starts on each host, directly or ``ssh -T HOST --
  sh -c ...``: :func:`agent_argv` and :func:`agent_command`. The agent runs
  with ``TRUN_FAILURE_JSON=-``, so a failed worker group's failures and root
  cause come back as one JSON line on its stderr (:func:`failure_report`).

docs/cli.md ("Reports for programs that run trun") has both formats.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generator, Mapping, Sequence

# What starts the failure report's line on the agent's stderr
# (failure::kFailureReportMark in src/failure/failure.h).
FAILURE_REPORT_MARK = "trun-failure-json: "

# The shell each agent runs under. Its arguments: the env file ("" for none),
# host 0's delay at EOF (below), then the agent's argv. A subshell of it reads
# variables from stdin, one NAME=VALUE a line (backslashes and newlines
# escaped as printf %b reads them), up to an empty line, exports them, sources
# the env file, and execs the agent: an SSH host gets its whole environment
# this way, every host the secrets, so none is on a command line (`ps`), nor
# in a shell's /proc/PID/environ (the block execve gave it, readable by the
# workers' user), nor in any shell's memory once the agent runs: the one
# shell that read them became the agent (which hides them in turn), and the
# shell that stays never read them (/proc/PID/mem is open to the user's
# processes where ptrace is). That shell waits for the subshell's USR1 (it
# has read its lines, or failed), then watches stdin (fd 3), SIGTERMs the
# agent on "stop" or at EOF, and exits with the agent's status. It must not
# read stdin before: both would take bytes of the same lines. A background
# job's stdin is /dev/null unless redirected, hence fd 3; its USR1 may come
# before `wait` starts, when the trap runs and the `sleep 1` ends the wait.
# "stop" is the launcher stopping the job; EOF without it is the launcher
# gone (kill -9), when every host learns at once: host 0, whose agent hosts
# the store, then waits its delay so the others leave while the store is up
# (a lost store holds an agent about a second longer).
_WRAPPER = ('exec 3<&0; _t_f=$1; _t_d=$2; shift 2; _t_r=; trap _t_r=1 USR1; '
            '( trap "kill -USR1 $$" EXIT; '
            r'while IFS= read -r _t_l <&3 || exit 97; [ -n "$_t_l" ]; do '
            r'_t_k=${_t_l%%=*}; _t_v=${_t_l#*=}; '
            r'case $_t_v in *\\*) _t_v=$(printf "%bx" "$_t_v"); _t_v=${_t_v%x};; esac; '
            r'export "$_t_k=$_t_v"; done; '
            '[ -z "$_t_f" ] || . "$_t_f" || exit 97; '
            'trap - EXIT; kill -USR1 $$; exec "$@" </dev/null 3<&-; ) & p=$!; '
            'while [ -z "$_t_r" ] && kill -0 $p 2>/dev/null; do sleep 1 & wait $!; kill $! 2>/dev/null; done; '
            '{ l=; while read -r l <&3; do [ "$l" = stop ] && break; done; '
            '[ "$l" = stop ] || sleep "$_t_d"; kill -TERM $p 2>/dev/null; } & w=$!; '
            'wait $p; rc=$?; kill $w 2>/dev/null; exit $rc')


def _bundled_trun() -> str | None:
    p = Path(__file__).resolve().parent / "bin" / "trun"
    return str(p) if p.is_file() and os.access(p, os.X_OK) else None


def trun_binary() -> str:
    """The agent this machine runs: $TRUN_BINARY, the one bundled in the package, or PATH's."""
    found = os.environ.get("TRUN_BINARY") or _bundled_trun() or shutil.which("trun")
    if not found:
        raise RuntimeError("no trun binary: install the package with its binary "
                           "(make install-python) or set TRUN_BINARY")
    return found


# ---- subcommands -------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """How a trun subcommand ended: its exit code, its output, and the kind of
    problem its error report named (None when it succeeded or wrote none)."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    error_kind: str | None

    @property
    def unknown_app(self) -> bool:
        """Whether trun refused it because the scheduler knows no such app."""
        return self.error_kind == "unknown_app"


def _error_kind(path: str) -> str | None:
    try:
        with open(path) as f:
            kind = json.load(f).get("kind")
    except (OSError, ValueError, AttributeError):
        return None
    return kind if isinstance(kind, str) else None


def _env(error_file: str, no_config: bool) -> dict[str, str]:
    env = dict(os.environ, TRUN_ERROR_JSON=error_file)
    if no_config:
        # TorchX's Python functions read no .torchxconfig: nor does trun then.
        env["TRUNCONFIG"] = ""
    return env


def run(args: Sequence[str], *, trun: str | None = None, no_config: bool = False,
        cwd: str | None = None) -> Outcome:
    """``trun ARGS`` (run in ``cwd``, default this process's), its output read whole."""
    binary = trun or trun_binary()
    # A relative path names the binary from here, not from cwd.
    argv = [os.path.abspath(binary) if cwd and os.sep in binary else binary, *args]
    with tempfile.TemporaryDirectory(prefix="trun-call-") as d:
        error_file = os.path.join(d, "error.json")
        r = subprocess.run(argv, capture_output=True, text=True, env=_env(error_file, no_config),
                           cwd=cwd)
        kind = _error_kind(error_file) if r.returncode != 0 else None
    return Outcome(argv, r.returncode, r.stdout, r.stderr, kind)


def stream(args: Sequence[str], *, trun: str | None = None) -> Generator[str, None, Outcome]:
    """``trun ARGS``, its stdout's lines (with their newlines) as they come; the
    generator's value is the Outcome (its stdout empty). Closing the generator
    early stops trun."""
    argv = [trun or trun_binary(), *args]
    with tempfile.TemporaryDirectory(prefix="trun-call-") as d:
        error_file = os.path.join(d, "error.json")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=_env(error_file, False))
        assert proc.stdout is not None and proc.stderr is not None
        try:
            yield from proc.stdout
            err = proc.stderr.read()
        finally:
            proc.stdout.close()
            if proc.poll() is None:
                proc.terminate()
            proc.wait()
            proc.stderr.close()
        kind = _error_kind(error_file) if proc.returncode != 0 else None
    return Outcome(argv, proc.returncode, "", err, kind)


# ---- the launcher's agents -----------------------------------------------------


@dataclass(frozen=True)
class AgentPlan:
    """What the launcher's agents share: the rendezvous and the restarts."""

    trun: str
    nhosts: int
    run_id: str
    max_restarts: int
    master: tuple[str, int]
    # Elastic: the job runs once min_hosts have joined (trun's c10d
    # rendezvous, waiting last_call seconds for more); None: every host.
    min_hosts: int | None
    last_call: int


def agent_argv(plan: AgentPlan, host_index: int, nproc: str) -> list[str]:
    """The agent's command line on host ``host_index``: trun's static rendezvous
    (or c10d when elastic), the workers running ``python -m trun._worker``."""
    argv = [plan.trun]
    if plan.min_hosts is not None:
        # Node ranks follow join order here; results are placed by TRUN_HOST_INDEX.
        argv += ["--nnodes", f"{plan.min_hosts}:{plan.nhosts}", "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", f"{plan.master[0]}:{plan.master[1]}",
                 "--rdzv-conf", f"last_call_timeout={plan.last_call}"]
    elif plan.nhosts > 1:
        argv += ["--nnodes", str(plan.nhosts), "--node-rank", str(host_index),
                 "--rdzv-backend", "static", "--master-addr", plan.master[0],
                 "--master-port", str(plan.master[1])]
    argv += ["--nproc-per-node", nproc, "--max-restarts", str(plan.max_restarts),
             "--tee", "3", "--log-dir", "/dev/null", "--rdzv-id", plan.run_id,
             "-m", "trun._worker"]
    return argv


def agent_env() -> dict[str, str]:
    """What the agent's environment adds for the launcher: its failure report
    as a line on stderr."""
    return {"TRUN_FAILURE_JSON": "-"}


@dataclass(frozen=True)
class Ssh:
    """How the launcher reaches other hosts."""

    config_file: str | None
    agent_timeout: float
    options: tuple[str, ...]

    def base(self) -> list[str]:
        cmd = ["ssh"]
        if self.config_file is not None:
            cmd += ["-F", self.config_file]
        timeout = max(1, int(min(self.agent_timeout, 30)))
        alive = max(1, int(self.agent_timeout / 3))
        cmd += ["-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={timeout}",
                "-o", f"ServerAliveInterval={alive}", "-o", "ServerAliveCountMax=3",
                *self.options]
        return cmd

    def hostname_of(self, host: str) -> str:
        """The name SSH would connect to for ``host`` (its config's HostName)."""
        try:
            out = subprocess.run([*self.base(), "-G", host], capture_output=True, text=True,
                                 timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            return host
        for line in out.splitlines():
            if line.startswith("hostname "):
                return line.split(None, 1)[1].strip()
        return host


def agent_command(argv: Sequence[str], *, env_file: str, eof_delay: str,
                  ssh: Ssh | None = None, host: str = "") -> list[str]:
    """The command that runs the agent ``argv`` under _WRAPPER: here, or on
    ``host`` over ``ssh`` in this directory (its home when it has none). Only
    the directory, the wrapper and the agent's argv are on a command line;
    every variable goes over stdin."""
    wrapper = ["/bin/sh", "-c", _WRAPPER, "trun-agent", env_file, eof_delay, *argv]
    if ssh is None:
        return wrapper
    remote = (f"cd {shlex.quote(os.getcwd())} 2>/dev/null || cd; exec "
              + " ".join(shlex.quote(x) for x in wrapper))
    return [*ssh.base(), host, "--", remote]


def env_lines(env: Mapping[str, str]) -> bytes:
    """env as the agent's shell reads it from stdin (_WRAPPER): NAME=VALUE
    lines, backslashes and newlines escaped, an empty line last."""
    def escaped(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n")
    return ("".join(f"{k}={escaped(v)}\n" for k, v in sorted(env.items())) + "\n").encode()


# ---- the agent's failure report --------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """One worker's failure as the agent reported it."""

    rank: int
    local_rank: int
    exitcode: int
    signal: str | None
    host: str
    error_file: str | None
    stopped: bool


@dataclass(frozen=True)
class FailureReport:
    """A failed worker group, as its agent judged it (the root-cause rule is
    the binary's, src/failure/failure.h)."""

    failures: list[Failure]
    root_cause: Failure


def failure_report(line: str) -> FailureReport | None:
    """The report a line of the agent's stderr carries, else None."""
    if not line.startswith(FAILURE_REPORT_MARK):
        return None
    try:
        d: Any = json.loads(line[len(FAILURE_REPORT_MARK):])
        failures = [Failure(rank=int(f["rank"]), local_rank=int(f["local_rank"]),
                            exitcode=int(f["exitcode"]), signal=f["signal"], host=str(f["host"]),
                            error_file=f["error_file"], stopped=bool(f["stopped"]))
                    for f in d["failures"]]
        return FailureReport(failures, failures[int(d["root_cause"])])
    except (ValueError, KeyError, TypeError, IndexError):
        return None
