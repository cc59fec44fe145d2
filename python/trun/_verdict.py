"""What a run ended with: the workers' values as a LaunchResult, or the
exception that says which worker or host failed and how.

A worker's exception arrives over its connection (_server); a crash is the
agent's failure report (_binary.FailureReport, the binary's root-cause
rule); the rest is the agent's exit.

Thread-safety: called on the launcher's thread once the agents have ended
and their connections and readers are joined.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any, NoReturn

import cloudpickle

from trun import _hosts
from trun._agents import Agent
from trun._server import Hello, WorkerServer
from trun.errors import AgentFailedError, RemoteTraceback, WorkerFailedError, WorkerRaisedError


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


def results(server: WorkerServer, hostnames: list[str]) -> LaunchResult:
    """The last attempt's values, or the exception of a worker without one."""
    attempt = server.last_attempt()
    hellos = {r: h for (a, r), h in server.hellos.items() if a == attempt}
    if not hellos:
        raise AgentFailedError.of(hostnames[0], "the agents ended without starting any worker")
    world = next(iter(hellos.values()))["world_size"]
    values: list[list[tuple[int, Any]]] = [[] for _ in hostnames]
    order: list[tuple[int, int]] = []
    for rank in range(world):
        outcome = server.outcomes.get((attempt, rank))
        h = hellos.get(rank)
        if h is None or outcome is None or outcome[0] != "ok":
            host = hostnames[h["host_index"]] if h else "?"
            if outcome is not None and outcome[0] == "err":
                reraise(outcome[1], host, h)
            raise WorkerFailedError.of(host, rank, h["local_rank"] if h else None, None,
                                       "it exited without sending a result")
        values[h["host_index"]].append((h["local_rank"], cloudpickle.loads(outcome[1])))
        order.append((h["host_index"], h["local_rank"]))
    # Hosts that took part (all of them unless elastic), in hostnames' order.
    kept = [i for i, vs in enumerate(values) if vs]
    where = {old: new for new, old in enumerate(kept)}
    rank_order: list[tuple[int, int]] | None = [(where[hi], lr) for hi, lr in order]
    if rank_order == [(hi, lr) for hi in range(len(kept))
                      for lr in range(len(values[kept[hi]]))]:
        rank_order = None
    return LaunchResult({hostnames[i]: [v for _, v in sorted(values[i], key=lambda x: x[0])]
                         for i in kept}, rank_order)


def raise_failure(server: WorkerServer, agents: list[Agent], failed: Agent) -> NoReturn:
    """The exception for a run whose agent ``failed`` ended first without success."""
    attempt = server.last_attempt()
    errors = [(outcome[1]["time"], rank, outcome[1])
              for (a, rank), outcome in server.outcomes.items()
              if a == attempt and outcome[0] == "err"]
    if errors:
        _, rank, info = min(errors, key=lambda e: (e[0], e[1]))
        h = server.hellos[(attempt, rank)]
        reraise(info, agents[h["host_index"]].hostname, h)
    # A crash: the agent's failure report names the rank and the exit code.
    # The failed agent's report wins, unless its root cause is a worker
    # that agent stopped (then another's says why).
    reports = [a for a in [failed, *agents] if a.report is not None]
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
    assert rc is not None
    if rc == 255 and not failed.first_hello.is_set():
        raise AgentFailedError.of(failed.hostname, "cannot reach it over SSH" + failed.tail(), rc)
    lost = [k for k, outcome in server.outcomes.items() if k[0] == attempt and outcome[0] == "lost"]
    if lost and rc in (0, 1):
        h = server.hellos[lost[0]]
        raise WorkerFailedError.of(agents[h["host_index"]].hostname, lost[0][1],
                                   h["local_rank"], None, "it ended without a result")
    if rc == 255 and not _hosts.is_local(failed.hostname):
        raise AgentFailedError.of(failed.hostname, "its SSH connection was lost" + failed.tail(),
                                  rc)
    sig = -rc if rc < 0 else rc - 128 if rc > 128 else 0   # a shell reports 128+N
    how = (f"killed by {signal.Signals(sig).name}" if sig in signal.valid_signals() and sig
           else f"exit code {rc}")
    raise AgentFailedError.of(failed.hostname, f"ended unexpectedly ({how})" + failed.tail(), rc)


def reraise(info: dict[str, Any], host: str, hello: Hello | None) -> NoReturn:
    """Raises a worker's exception here: the same type, with where it came from."""
    exc: Any = None
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
