"""The launcher's agents: one trun process per host (here, or over SSH), its
environment, the readers of its output, and stopping them all.

Thread-safety: an Agent's output fields are written by its two reader
threads only; the launcher's thread reads them after joining the readers
(the tails, the report) or as hints while they run (``lines``).
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from trun import _binary
from trun._output import Output
from trun.logs import RECORD_MARK

# Variables the agent sets for each worker: never copied from the caller.
_AGENT_OWNED = ("TORCHELASTIC_*", "PET_*", "RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK",
                "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TRUN_*")
# What an agent's environment holds that no command line, and no environment
# but the agent's own, may show.
_SECRETS = ("TRUN_TOKEN", "TRUN_JOB_TOKEN")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
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


def agent_environment(copy_env_vars: tuple[str, ...], extra_env_vars: dict[str, str] | None,
                      local: bool, launcher_vars: dict[str, str]) -> dict[str, str]:
    """The agent's whole environment: this process's (a local host) or the
    variables ``copy_env_vars`` matches (an SSH host), less those the agent
    sets itself, plus ``extra_env_vars``, the package on PYTHONPATH and
    ``launcher_vars`` (the launcher's contract with its workers)."""
    if local:
        env = dict(os.environ)
    else:
        env = {k: v for k, v in os.environ.items()
               if any(fnmatch.fnmatchcase(k, p) for p in copy_env_vars)}
    for k in list(env):
        if any(fnmatch.fnmatchcase(k, p) for p in _AGENT_OWNED):
            del env[k]
    env.update(extra_env_vars or {})
    pkg_parent = str(Path(__file__).resolve().parent.parent)
    script_dir = str(Path(sys.path[0]).resolve()) if sys.path and sys.path[0] else os.getcwd()
    pp = [pkg_parent, script_dir] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(pp))
    env.update(launcher_vars)
    env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = _PREFIX
    env.update(_binary.agent_env())
    return env


class Agent:
    """One host's agent: its process (ssh or sh), output readers, what it reported."""

    def __init__(self, index: int, hostname: str) -> None:
        self.index = index
        self.hostname = hostname
        self.proc: subprocess.Popen[bytes] | None = None
        self.readers: list[threading.Thread] = []
        self.stderr_tail: list[str] = []   # the agent's own lines (and SSH's)
        self.worker_tail: list[str] = []   # its workers' stderr lines, prefixed by rank
        self.report: _binary.FailureReport | None = None   # its failure report, if it sent one
        self.returncode: int | None = None
        self.first_hello = threading.Event()
        self.lines = 0

    def start(self, argv: list[str], env: dict[str, str], *, env_file: str, eof_delay: str,
              ssh: _binary.Ssh | None, output: Output) -> None:
        """Starts the agent ``argv`` here (``ssh`` None) or over SSH, and its readers."""
        if ssh is None:
            # Its own environment as a child's; the secrets on stdin (_binary._WRAPPER).
            cmd = _binary.agent_command(argv, env_file=env_file, eof_delay=eof_delay)
            popen_env: dict[str, str] | None = {k: v for k, v in env.items()
                                                if k not in _SECRETS}
            piped = {k: env[k] for k in _SECRETS}
            cwd: str | None = os.getcwd()
        else:
            # Nothing but the directory, the wrapper and the agent's argv on
            # the command line that `ps` shows on either host: every variable
            # goes over the channel's stdin (a name no shell can export would
            # stop the wrapper, so such a name is not copied).
            cmd = _binary.agent_command(argv, env_file=env_file, eof_delay=eof_delay,
                                        ssh=ssh, host=self.hostname)
            popen_env = None
            piped = {k: v for k, v in env.items() if _NAME_RE.fullmatch(k)}
            cwd = None
        proc = self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, env=popen_env, cwd=cwd,
                                            start_new_session=True)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        try:
            proc.stdin.write(_binary.env_lines(piped))
            proc.stdin.flush()
        except OSError:
            pass  # ssh has already ended (an unreachable host): the wait reports it
        for stream, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            t = threading.Thread(target=self._pump, args=(stream, name, output), daemon=True)
            t.start()
            self.readers.append(t)

    def _pump(self, stream: IO[bytes], name: str, output: Output) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.rstrip(b"\r\n")
            self.lines += 1
            m = _PREFIX_RE.match(line)
            logged = None
            rank: int | None = None
            lr: int | None = None
            if m:
                rank, lr = int(m.group(1)), int(m.group(2))
                text = line[m.end():].decode(errors="replace")
                logged = _logged_record(text)
                if name == "stderr":
                    shown = text if logged is None else f"{logged[1]}:{logged[2]}"
                    self.worker_tail.append(f"[rank {rank}] {shown}")
                    del self.worker_tail[:-50]
            else:
                text = line.decode(errors="replace")
                if name == "stderr":
                    report = _binary.failure_report(text)
                    if report is not None:
                        self.report = report
                        continue
                    self.stderr_tail.append(text)
                    del self.stderr_tail[:-200]
            if logged is not None:
                output.emit(self.hostname, rank, lr, name, logged[2], logged[0], logged[1])
            else:
                level = logging.ERROR if lr is not None and name == "stderr" else logging.INFO
                output.emit(self.hostname, rank, lr, name, text, level)
        stream.close()

    def join_readers(self, deadline: float) -> None:
        for t in self.readers:
            t.join(max(0.0, deadline - time.monotonic()))

    def tail(self) -> str:
        """The agent's last lines, for a message about it ("" when it said none)."""
        tail = [line for line in self.stderr_tail if line.strip()][-10:]
        return (":\n  " + "\n  ".join(tail)) if tail else ""

    def poll(self) -> int | None:
        """Its exit code once it has ended (kept in ``returncode``)."""
        if self.returncode is None and self.proc is not None and self.proc.poll() is not None:
            self.returncode = self.proc.returncode
        return self.returncode

    def close_stdin(self) -> None:
        proc = self.proc
        if proc is None or proc.stdin is None or proc.poll() is not None:
            return
        try:
            proc.stdin.write(b"stop\n")
            proc.stdin.flush()
        except OSError:
            pass
        try:
            proc.stdin.close()
        except OSError:
            pass


def stop_all(agents: list[Agent]) -> None:
    """Closes every agent's stdin (its shell SIGTERMs the agent), then waits.

    The shells need only that EOF; a local one that is still there after
    the grace is killed with its whole session (agent and workers), an SSH
    client is killed (its remote side then sees the channel close).
    """
    started = [a for a in agents if a.proc is not None]
    # Host 0's agent hosts the store: stopped first, it would leave the
    # others handling a lost store (about a second) before they exit.
    for a in started[1:]:
        a.close_stdin()
    soon = time.monotonic() + 1
    for a in started[1:]:
        assert a.proc is not None
        try:
            a.proc.wait(max(0.0, soon - time.monotonic()))
        except subprocess.TimeoutExpired:
            break
    for a in started[:1]:
        a.close_stdin()
    deadline = time.monotonic() + 5
    for a in started:
        assert a.proc is not None
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
