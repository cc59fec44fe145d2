"""Exceptions the launcher raises in the caller."""

from __future__ import annotations

import signal


class WorkerFailedError(RuntimeError):
    """A worker ended without returning or raising: a crash, a signal, os._exit.

    ``WorkerFailedError("message")`` as torchrunx's; the launcher raises it
    with attributes ``hostname``, ``rank`` (global), ``local_rank``,
    ``exitcode`` (negative: killed by a signal) and ``signal`` (its name),
    each None when not known.
    """

    def __init__(self, *args: object, hostname: str | None = None, rank: int | None = None,
                 local_rank: int | None = None, exitcode: int | None = None) -> None:
        super().__init__(*args)
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

    @classmethod
    def of(cls, hostname: str, rank: int | None, local_rank: int | None,
           exitcode: int | None, detail: str = "") -> WorkerFailedError:
        """The launcher's error for one worker, its message saying how it ended."""
        e = cls("", hostname=hostname, rank=rank, local_rank=local_rank, exitcode=exitcode)
        how = (f"killed by {e.signal}" if e.signal
               else f"exit code {exitcode}" if exitcode is not None else "ended without a result")
        msg = f"worker rank {rank} (host {hostname}, local rank {local_rank}) failed: {how}"
        e.args = (msg + (f"\n{detail}" if detail else ""),)
        return e


class AgentFailedError(RuntimeError):
    """The trun agent on a host could not be started, was lost, or ended unexpectedly.

    ``AgentFailedError("message")`` as torchrunx's; the launcher raises it
    with attributes ``hostname`` and ``exitcode`` (of the agent or its SSH
    client; None when it did not end, e.g. it never answered within
    ``agent_timeout``).
    """

    def __init__(self, *args: object, hostname: str | None = None,
                 exitcode: int | None = None) -> None:
        super().__init__(*args)
        self.hostname = hostname
        self.exitcode = exitcode

    @classmethod
    def of(cls, hostname: str, message: str, exitcode: int | None = None) -> AgentFailedError:
        """The launcher's error for one host's agent."""
        return cls(f"agent on host {hostname}: {message}", hostname=hostname, exitcode=exitcode)


class WorkerRaisedError(RuntimeError):
    """Stands in for a worker's exception that could not be pickled back."""

    def __init__(self, type_name: str, message: str) -> None:
        self.type_name = type_name
        super().__init__(f"{type_name}: {message}")


class RemoteTraceback(Exception):
    """The ``__cause__`` of a re-raised worker exception: its traceback text."""

    def __init__(self, tb: str) -> None:
        self.tb = tb
        super().__init__(tb)

    def __str__(self) -> str:
        return self.tb
