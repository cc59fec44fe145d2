"""Multi-node benchmarks (issue 4), side by side with torch 1.13's torchrun
c10d at --monitor_interval 0.1 where torchrun can do the same thing.

- job8: 8 agents x 1 worker running `true`, the whole job, trun vs torchrun.
- rdzv: the rendezvous of N agents (10 to 10,000), each a real trun
  Rendezvous (build/rdzv_scale: the host's in this process, the others
  spread over child processes).
- recovery: from an agent's death to the survivor's new worker's exec, for
  the ways an agent dies (kill -9: its connections close; SIGSTOP: it goes
  silent, as a host cut off does, and only the heartbeat timeout finds it)
  and for etcd (its lease expires).

Used by bench/run.py (`--only job8 rdzv recovery`).
"""
import contextlib
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job8(a, tmp, peers, env_for):
    """Wall time of a whole job of 8 agents, each started as a process."""
    def run(cmd_for, env):
        port = free_port()
        t0 = time.perf_counter()
        procs = [subprocess.Popen(cmd_for(port), env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for _ in range(8)]
        codes = [p.wait(timeout=300) for p in procs]
        dt = time.perf_counter() - t0
        if codes != [0] * 8:
            raise SystemExit(f"bench: job8 exited {codes}")
        return dt

    ours = lambda port: [a.trun, "--nnodes", "8", "--nproc-per-node", "1", "--rdzv-backend",
                         "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "j8",
                         "--no-python", "true"]
    t = statistics.median(run(ours, env_for()) for _ in range(3 if a.quick else 9))
    rows = [("8 agents x 1 worker (`true`), whole job: trun", f"{t * 1e3:.0f} ms", "")]
    for label, torchrun, extra in peers:
        theirs = lambda port: [*torchrun, "--nnodes", "8", "--nproc_per_node", "1",
                               "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
                               "--rdzv_id", "j8", "--monitor_interval", "0.1", "--no_python",
                               "true"]
        r = statistics.median(run(theirs, env_for(**extra)) for _ in range(1 if a.quick else 3))
        rows += [(f"8 agents x 1 worker: {label} c10d", f"{r:.2f} s", ""),
                 (f"8 agents x 1 worker: {label} / trun", f"{r / t:.0f}x faster", ">= 50x")]
    return rows


# Above about 9,900 agents the host's store would hold more connections than
# a process may have descriptors (20,000 here): each agent holds two, its
# main thread's and its control thread's, which connects for the first
# heartbeat. The large series keeps heartbeats out of the measured window.
QUIET_HEARTBEATS = "heartbeat_interval=30,heartbeat_timeout=90"


def rdzv(a, tmp):
    scale = str(pathlib.Path(a.trun).parent / "rdzv_scale")
    env = dict(os.environ, TRUN_LOG_LEVEL="error")

    def series(backend, endpoint, sizes, target, conf="", label=""):
        rows, prev = [], None
        for n in sizes:
            runs = []
            for _ in range(1 if a.quick else 3):
                if backend == "etcd":
                    # The last run's agents exit without leaving: etcd
                    # expires their leases (a raft commit each, 4 s on)
                    # within the next run's window unless it waits.
                    time.sleep(5)
                out = subprocess.run([scale, str(n), backend, endpoint(),
                                      str(max(1, (n + 999) // 1000)), conf], env=env,
                                     capture_output=True, text=True, timeout=600)
                if out.returncode != 0:
                    raise SystemExit(f"bench: rdzv_scale {n} {backend}: {out.stderr[-2000:]}")
                cpu = [float(w) for w in out.stderr.split() if w.replace(".", "", 1).isdigit()]
                runs.append((float(out.stdout), *cpu[-2:]))
            t, host_cpu, agents_cpu = sorted(runs)[len(runs) // 2]
            growth = f" ({t / prev[1]:.1f}x for {n / prev[0]:.1f}x the agents)" if prev else ""
            rows.append((f"rendezvous of {n} agents ({backend}{label})",
                         f"{t * 1e3:.0f} ms{growth}; CPU: host {host_cpu * 1e3:.0f} ms "
                         f"({host_cpu / n * 1e6:.0f} us/agent), agents "
                         f"{agents_cpu / n * 1e6:.0f} us/agent", target(n)))
            prev = (n, t)
        return rows

    c10d_target = lambda n: {1000: "<= 0.3 s", 10000: "<= 2 s"}.get(n, "")
    rows = series("c10d", lambda: str(free_port()),
                  (10, 100, 1000) if a.quick else (10, 100, 250, 500, 1000, 2000, 4000),
                  c10d_target)
    rows += series("c10d", lambda: str(free_port()),
                   (1000, 2000) if a.quick else (1000, 2000, 5000, 10000), c10d_target,
                   QUIET_HEARTBEATS, ", no heartbeat in the window")
    # What heartbeats cost the host: its CPU while a round runs and nothing
    # else happens, against the same without heartbeats.
    n, hold = (1000, 5) if a.quick else (2000, 10)
    held = []
    for conf in ("", QUIET_HEARTBEATS):
        out = subprocess.run([scale, str(n), "c10d", str(free_port()), str(n // 1000), conf,
                              str(hold)], env=env, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise SystemExit(f"bench: rdzv_scale {n} hold: {out.stderr[-2000:]}")
        held.append(float(out.stderr.split("CPU ")[-1].split()[0]))
    beats = n * hold  # one a second each
    rows.append((f"rendezvous: the host's CPU per heartbeat, {n} agents for {hold} s (c10d)",
                 f"{(held[0] - held[1]) / beats * 1e6:.0f} us ({held[0] * 1e3:.0f} ms, "
                 f"{held[1] * 1e3:.0f} ms without heartbeats)", ""))
    # After one agent's event: `kill` (SIGKILL; its connections close) or
    # `fail` (its workers fail with restarts left), ms to every (other)
    # agent's next round, where each would start its workers again.
    def after(event, n, conf):
        runs = []
        for _ in range(1 if a.quick or n > 1000 else 3):
            out = subprocess.run([scale, str(n), "c10d", str(free_port()),
                                  str(max(1, n // 1000)), conf, event], env=env,
                                 capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                raise SystemExit(f"bench: rdzv_scale {n} {event}: {out.stderr[-2000:]}")
            runs.append(float(out.stderr.split("next round ")[-1].split()[0]))
        return f"{statistics.median(runs) * 1e3:.0f} ms"

    sizes = ((1000, ""),) if a.quick else ((1000, ""), (10000, QUIET_HEARTBEATS))
    quiet = lambda conf: ", no heartbeat in the window" if conf else ""
    for n, conf in sizes:
        rows.append((f"rendezvous: one of {n} agents killed, to every other's next round (c10d"
                     f"{quiet(conf)})", after("kill", n, conf), "<= heartbeat_timeout + 1 s"))
    for n, conf in sizes:
        rows.append((f"rendezvous: a worker failure on one of {n} agents, to every agent's next "
                     f"round (c10d{quiet(conf)})", after("fail", n, conf),
                     "<= 1 s" if n == 1000 else ""))
    with etcd_server(tmp) as endpoint:
        if endpoint:
            rows += series("etcd", lambda: endpoint, (10, 100, 1000),
                           lambda n: "<= 2 s" if n == 1000 else "")
    return rows


@contextlib.contextmanager
def etcd_server(tmp):
    """A real etcd on loopback (tools/etcd-server) for the block; its
    endpoint, or None (with a note) where it cannot start."""
    etcd_dir = tmp / f"etcd{time.time_ns()}"
    port = free_port()
    up = subprocess.run([str(ROOT / "tools" / "etcd-server"), "up", str(etcd_dir), str(port),
                         "127.0.0.1", str(free_port())], capture_output=True, text=True)
    if up.returncode != 0:
        print(f"bench: no etcd ({up.stderr.strip()}); etcd rows skipped", file=sys.stderr)
        yield None
        return
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([str(ROOT / "tools" / "etcd-server"), "down", str(etcd_dir)])


def stamps(path):
    try:
        return [int(line.split()[1]) for line in path.read_text().splitlines()
                if line.startswith("start")]
    except FileNotFoundError:
        return []


def wait_until(cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.005)
    raise SystemExit(f"bench: recovery: timed out waiting for {what}")


def recover_once(a, tmp, stamp, rdzv_args, how, victim, env):
    """Two agents (1:2, both in round 0: it closes when the second comes),
    workers that stamp their start and hold; one agent
    dies; returns ms from its death to the survivor's new worker's start."""
    files = [tmp / f"s{i}" for i in range(2)]
    for f in files:
        f.unlink(missing_ok=True)
    procs = []
    for i, f in enumerate(files):
        procs.append(subprocess.Popen(
            [a.trun, "--nnodes", "1:2", "--nproc-per-node", "1", *rdzv_args, "--no-python",
             stamp, "--hold"], env=dict(env, STAMP_FILE=str(f)), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))
        if i == 0:
            time.sleep(0.3)  # the first one hosts (c10d) or coordinates (etcd)
    try:
        wait_until(lambda: all(len(stamps(f)) == 1 for f in files), 60, "round 0")
        dead = procs[1] if victim == "ordinary" else procs[0]
        survivor = files[0] if victim == "ordinary" else files[1]
        t0 = time.time_ns()
        dead.send_signal(signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        wait_until(lambda: len(stamps(survivor)) == 2, 60, "the survivor's new worker")
        return (stamps(survivor)[1] - t0) / 1e6
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait()


def recovery(a, tmp, build_c, env):
    stamp = build_c("stamp.c", tmp / "stamp")
    hb = "heartbeat_interval=0.2,heartbeat_timeout=1,last_call_timeout=5"
    runs = 2 if a.quick else 5
    rows = []

    def c10d():
        return ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
                "--rdzv-id", "rec", "--rdzv-conf", hb]

    for label, how, victim, target in (
            ("c10d, kill -9 of an agent", "kill", "ordinary", "<= 1 s + 100 ms"),
            ("c10d, kill -9 of the store's host (takeover)", "kill", "host", "<= 1 s + 100 ms"),
            ("c10d, SIGSTOP of an agent (silent)", "stop", "ordinary", "<= 1 s + 100 ms")):
        t = statistics.median(recover_once(a, tmp, stamp, c10d(), how, victim, env)
                              for _ in range(runs))
        rows.append((f"recovery, {label}, heartbeat_timeout 1 s", f"{t:.0f} ms", target))

    with etcd_server(tmp) as endpoint:
        if not endpoint:
            return rows
        for label, victim in (("etcd, kill -9 of an agent", "ordinary"),
                              ("etcd, kill -9 of the coordinating agent", "host")):
            def etcd_args():
                return ["--rdzv-backend", "etcd", "--rdzv-endpoint", endpoint,
                        "--rdzv-id", f"rec{time.time_ns()}", "--rdzv-conf",
                        "heartbeat_interval=0.5,heartbeat_timeout=3,last_call_timeout=5"]
            t = statistics.median(recover_once(a, tmp, stamp, etcd_args(), "kill", victim, env)
                                  for _ in range(runs))
            rows.append((f"recovery, {label}, heartbeat_timeout 3 s (a 2 s lease)",
                         f"{t:.0f} ms", "<= 3 s + 100 ms"))
    return rows


NOTES = """
- 8 agents: medians of 9 (trun) and 3 (torchrun) whole jobs, all agents
  started at once on this machine, each a process, `--nnodes 8` (the round
  closes when all 8 are there).
- rendezvous of N agents: `build/rdzv_scale N c10d PORT P [CONF]`, medians
  of 3; every agent is a real Rendezvous made from real launch flags, with
  its own loop, threads and store connections; the first hosts the store
  and the coordinator in the benchmark's process, the others run in P child
  processes of up to 1,000 agents each (a process may hold 20,000
  descriptors). All on these 2 cores, so the total work of N agents shares
  them; on N hosts each agent's share runs in parallel, and what is left is
  the host's CPU (shown per agent: the store's requests and the
  coordinator's judging). "no heartbeat in the window": heartbeat_interval
  30 s, as above about 9,900 agents the host's store would need more
  descriptors than a process may hold (two connections per agent). The etcd
  rows share the same 2 cores with etcd itself, whose every write is a raft
  commit with fsync. "One of N agents killed": that agent runs in a process
  of its own and gets SIGKILL once every agent has its round (`rdzv_scale
  ... kill`, `--nnodes N-1:N`); its connections close, the coordinator ends
  the round, and each other agent asks for the next at once (it runs no
  workers to stop); to the moment all of them have it.
  "A worker failure on one of N agents": `rdzv_scale ... fail`, every agent
  in the round with `--max-restarts 3`; one agent (not the host) does what
  an agent whose worker exited non-zero with restarts left does (Failed(),
  then Ready() once its workers are stopped: here at once, as it runs
  none); every other agent hears that the round ended and asks for the
  next at once; the coordinator counts the failure once all are back and
  closes the next round; to the moment every agent has it (each would
  start its workers then).
- recovery: median of 5; from the signal to the survivor's new worker's
  first instruction (its clock_gettime). kill -9 closes the dead agent's
  connections, so the store's host knows at once; SIGSTOP leaves them open
  (as a host cut off from the network does) and only the heartbeat timeout
  finds it. Under etcd a dead agent is known when its lease expires: etcd
  checks leases every 500 ms, so the lease is the heartbeat timeout less
  half a second (whole seconds, at least etcd's minimum of 2 s). torchrun has no figure here: its agents do not notice a dead
  peer at all until their workers' collectives fail.
"""
