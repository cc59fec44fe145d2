"""One run of the launcher: where each host's agent is started and how it
reaches this process, then waiting for the agents and deciding.

The parts: _binary (the agents' command lines), _agents (their processes,
environment and output), _server (the port the workers connect back to),
_output (where their lines go), _verdict (the values, or the failure).

Thread-safety: a Run is used by the caller's thread; the server's and the
agents' threads reach it only through WorkerServer.on_hello.
"""

from __future__ import annotations

import os
import random
import secrets
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

import cloudpickle

from trun import _binary, _hosts
from trun._agents import Agent, agent_environment, stop_all
from trun._output import Output
from trun._server import Hello, WorkerServer, listen
from trun._verdict import LaunchResult, raise_failure, results
from trun.errors import AgentFailedError

if TYPE_CHECKING:
    from trun.launcher import Launcher


def _is_loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1"


def _outward_address(target: str) -> str:
    """This machine's address on the route to target (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, 9))
            return str(s.getsockname()[0])
    except OSError:
        try:
            return socket.gethostbyname(socket.getfqdn())
        except OSError:
            return "127.0.0.1"


class Run:
    def __init__(self, cfg: Launcher, func: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        self.cfg = cfg
        self.token = secrets.token_hex(16)
        # The agents' job token (trun's store/auth.h): only this run's agents
        # may join its rendezvous.
        self.job_token = os.environ.get("TRUN_JOB_TOKEN") or secrets.token_hex(32)
        self.run_id = f"trun-{secrets.token_hex(4)}"
        self.server = WorkerServer(self.token, cloudpickle.dumps((func, args, kwargs)),
                                   self._on_hello)
        self.agents: list[Agent] = []
        self.output = Output(0)
        self.elastic = False
        self.last_call = max(1, int(min(cfg.agent_timeout, 30)))

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
            return str(socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0])
        except OSError:
            return name

    def _nprocs(self, n: int) -> list[str]:
        wph = self.cfg.workers_per_host
        if isinstance(wph, (list, tuple)):
            if len(wph) != n:
                raise ValueError(f"workers_per_host: {len(wph)} counts for {n} hostnames")
            return [str(x) for x in wph]
        return [str(wph)] * n

    def _on_hello(self, hello: Hello) -> None:
        self.agents[hello["host_index"]].first_hello.set()
        self.output.worker_started(hello["host_index"], int(hello["local_world_size"]))

    # ---- the run ------------------------------------------------------------

    def go(self) -> LaunchResult:
        cfg = self.cfg
        hostnames = self._hostnames()
        n = len(hostnames)
        nprocs = self._nprocs(n)
        if cfg.min_hosts is not None and cfg.min_hosts > n:
            raise ValueError(f"min_hosts: {cfg.min_hosts} is more than the {n} hostnames")
        self.elastic = cfg.min_hosts is not None and cfg.min_hosts < n
        local = [_hosts.is_local(h) for h in hostnames]
        # `ssh -G` per host: each a process, so all at once.
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
                master_port = int(s.getsockname()[1])
        else:
            master_port = random.randint(20000, 32000)

        python = cfg.python or sys.executable
        trun = cfg.trun_path or _binary.trun_binary()  # hosts share paths, as they share `python`
        # The launcher's port listens only where its hosts reach it, never on
        # every interface.
        servers = listen(sorted(set(reach)))
        port = servers[0].getsockname()[1]
        plan = _binary.AgentPlan(trun=trun, nhosts=n, run_id=self.run_id,
                                 max_restarts=cfg.max_restarts, master=(master_addr, master_port),
                                 min_hosts=cfg.min_hosts if self.elastic else None,
                                 last_call=self.last_call)
        self.agents = [Agent(i, h) for i, h in enumerate(hostnames)]
        self.output = Output(n)
        env_file = os.fspath(cfg.env_file) if cfg.env_file is not None else ""
        try:
            self.output.prepare(cfg.handler_factory, cfg.log_dir, hostnames, nprocs)
            started = time.monotonic()
            self.server.start(servers)
            for i, a in enumerate(self.agents):
                env = agent_environment(cfg.copy_env_vars, cfg.extra_env_vars, local[i], {
                    "PYTHON_EXEC": python,
                    "TRUN_LAUNCHER": f"{reach[i]}:{port}",
                    "TRUN_TOKEN": self.token,
                    "TRUN_JOB_TOKEN": self.job_token,
                    "TRUN_HOST_INDEX": str(i),
                    "TRUN_BACKEND": cfg.backend or "",
                    "TRUN_WORKER_TIMEOUT": str(cfg.worker_timeout),
                    "TRUN_AGENT_TIMEOUT": str(cfg.agent_timeout),
                })
                # Host 0's agent hosts the store: at the launcher's EOF it
                # waits so that the others leave while the store is up.
                a.start(_binary.agent_argv(plan, i, nprocs[i]), env, env_file=env_file,
                        eof_delay="0.5" if i == 0 and n > 1 else "0",
                        ssh=None if local[i] else self._ssh(), output=self.output)
            return self._wait(started, hostnames)
        except BaseException:
            stop_all(self.agents)
            raise
        finally:
            self.server.stopping = True
            stop_all(self.agents)
            self.server.close()
            self.output.close()

    def _wait(self, started: float, hostnames: list[str]) -> LaunchResult:
        cfg = self.cfg
        failed: Agent | None = None
        dropped: list[Agent] = []
        while True:
            for a in self.agents:
                if a.returncode is None and a.poll() is not None:
                    if a.returncode != 0 and failed is None and a not in dropped:
                        live = [b for b in self.agents if b.returncode is None]
                        if (cfg.min_hosts is not None and self.elastic
                                and len(live) >= cfg.min_hosts
                                and not any(b.returncode == 0 for b in self.agents)):
                            # Elastic: the others go on without it (trun's rendezvous
                            # forms a round of those left, or restarts them).
                            dropped.append(a)
                            self.output.emit(a.hostname, None, None, "stderr",
                                             f"trun: dropped from the job ({len(live)} hosts "
                                             f"go on)" + a.tail().replace("\n", " "))
                        else:
                            failed = a
            if failed is not None or all(a.returncode is not None for a in self.agents):
                break
            late = [a for a in self.agents if not a.first_hello.is_set() and a.returncode is None]
            if self.elastic and cfg.min_hosts is not None:
                late = late if len(self.agents) - len(late) - len(dropped) < cfg.min_hosts else []
            # Elastic rounds wait last_call_timeout for more hosts before starting.
            grace = cfg.agent_timeout + (self.last_call if self.elastic else 0)
            if late and time.monotonic() - started > grace:
                stop_all(self.agents)
                # Blame a host whose agent never said a word, if there is one.
                a = min(late, key=lambda x: x.lines > 0)
                raise AgentFailedError.of(a.hostname, f"no worker connected within agent_timeout "
                                          f"({cfg.agent_timeout:g} s)" + a.tail())
            # Woken at once by a worker's news; agents' exits are polled briefly.
            with self.server.changed:
                self.server.changed.wait(0.05)
        if failed is not None:
            stop_all(self.agents)
        # Agents have ended (or been stopped): their workers' sockets close, so
        # every outcome is in once the connection threads end.
        deadline = time.monotonic() + 10
        self.server.join(deadline)
        for a in self.agents:
            a.join_readers(deadline)
        self.output.flush()
        if failed is None and not all(a in dropped for a in self.agents):
            return results(self.server, hostnames)
        raise_failure(self.server, self.agents, failed or dropped[0])
