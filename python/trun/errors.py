"""Exceptions the launcher raises in the caller."""

from __future__ import annotations

import signal


class WorkerFailedError(RuntimeError):
    """A worker ended without returning or raising: a crash, a signal, os._exit.

    Attributes: ``hostname``, ``rank`` (global), ``local_rank``, ``exitcode``
    (negative: killed by a signal) and ``signal`` (its name, or None).
    """

    def __init__(self, hostname: str, rank: int | None, local_rank: int | None,
                 exitcode: int | None, detail: str = ""):
        self.hostname = hostname
        self.rank = rank
        self.local_rank = local_rank
        self.exitcode = exitcode
        self.signal = None
        if exitcode is not None and exitcode < 0:
            try:
                self.signal = signal.Signals(-exitcode).name
            except ValueError:
                self.signal = f"signal {-exitcode}"
        how = (f"killed by {self.signal}" if self.signal
               else f"exit code {exitcode}" if exitcode is not None else "ended without a result")
        msg = f"worker rank {rank} (host {hostname}, local rank {local_rank}) failed: {how}"
        if detail:
            msg += f"\n{detail}"
        super().__init__(msg)


class AgentFailedError(RuntimeError):
    """The trun agent on a host could not be started, was lost, or ended unexpectedly.

    Attributes: ``hostname``, ``exitcode`` (of the agent or its SSH client; None
    when it did not end, e.g. it never answered within ``agent_timeout``).
    """

    def __init__(self, hostname: str, message: str, exitcode: int | None = None):
        self.hostname = hostname
        self.exitcode = exitcode
        super().__init__(f"agent on host {hostname}: {message}")


class WorkerRaisedError(RuntimeError):
    """Stands in for a worker's exception that could not be pickled back."""

    def __init__(self, type_name: str, message: str):
        self.type_name = type_name
        super().__init__(f"{type_name}: {message}")


class RemoteTraceback(Exception):
    """The ``__cause__`` of a re-raised worker exception: its traceback text."""

    def __init__(self, tb: str):
        self.tb = tb
        super().__init__(tb)

    def __str__(self):
        return self.tb
