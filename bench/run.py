#!/usr/bin/env python3
"""trun's benchmarks, side by side with torchrun in one run: torch 1.13's and
torch 2.x's (the root `make torch2` sets up, entered through tools/torch2-python).

    bench/run.py --trun build/trun [--only NAME ...] [--quick] [--write]

Prints a markdown table of ratios; --write also rewrites bench/RESULTS.md
(with --only, just those benches' rows). Figures to reach (issues 2 and 3)
are shown next to each result, not asserted.
"""
import argparse
import datetime
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

import multinode
import observability

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYTHON = os.environ.get("PYTHON_EXEC", "/usr/bin/python3")
TORCHRUN = [PYTHON, str(ROOT / "tools" / "torchrun113")]
TORCH2_PYTHON = str(ROOT / "tools" / "torch2-python")
# Debian's torch 2.x has no libuv: USE_LIBUV=0 is what its users must set.
TORCH2_ENV = {"USE_LIBUV": "0"}


def torch2_version():
    """torch 2.x's version in the torch2 root, or None where there is none."""
    r = subprocess.run([TORCH2_PYTHON, "-c", "import torch; print(torch.__version__)"],
                       capture_output=True, text=True)
    return r.stdout.split("+")[0].strip() if r.returncode == 0 else None


def peers():
    """(label, torchrun command, extra environment) of each torchrun measured."""
    out = [("torchrun 1.13", TORCHRUN, {})]
    v = torch2_version()
    if v:
        out.append((f"torchrun {v}", [TORCH2_PYTHON, "-m", "torch.distributed.run"], TORCH2_ENV))
    else:
        print("bench: no torch 2 root (make torch2): torchrun 2.x is not measured", file=sys.stderr)
    return out


def build_c(src, out):
    subprocess.run(["cc", "-O2", "-o", str(out), str(ROOT / "bench" / src)], check=True)
    return str(out)


def timed(cmd, env=None, stdout=subprocess.DEVNULL, timeout=300):
    t0 = time.perf_counter_ns()
    r = subprocess.run(cmd, env=env, stdout=stdout, stderr=subprocess.DEVNULL, timeout=timeout)
    dt = (time.perf_counter_ns() - t0) / 1e9
    if r.returncode != 0:
        raise SystemExit(f"bench: {' '.join(map(str, cmd))} exited {r.returncode}")
    return dt


def env_for(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    env["OMP_NUM_THREADS"] = "1"  # silences both launchers' warning
    env.update(extra)
    return env


def hyperfine_medians(cmds, runs, env):
    """Median wall time of each command, from hyperfine (-N: no shell)."""
    import json
    out = pathlib.Path(tempfile.mkstemp(suffix=".json")[1])
    subprocess.run(["hyperfine", "-N", "--warmup", "3", "--runs", str(runs), "--export-json",
                    str(out), *[" ".join(c) for c in cmds]], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = json.loads(out.read_text())["results"]
    out.unlink()
    return [r["median"] for r in results]


def bench_launch(a, tmp):
    floor = build_c("spawn_floor.c", tmp / "spawn_floor")
    trun = [a.trun, "--standalone", "--nproc-per-node", "16", "--no-python", "true"]
    base = [floor, "16", "true"]
    t, f = hyperfine_medians([trun, base], 10 if a.quick else 40, env_for())
    rows = [
        ("launch 16 x `true`: trun", f"{t * 1e3:.1f} ms", ""),
        ("launch: bare posix_spawn floor", f"{f * 1e3:.1f} ms", ""),
        ("launch: trun / floor", f"{t / f:.2f}x", "<= 1.25x"),
    ]
    for label, torchrun, extra in a.peers:
        torch = [*torchrun, "--standalone", "--nproc_per_node", "16", "--monitor_interval", "0.1",
                 "--no_python", "true"]
        r = statistics.median(timed(torch, env_for(**extra)) for _ in range(2 if a.quick else 5))
        rows += [(f"launch: {label}", f"{r * 1e3:.0f} ms", ""),
                 (f"launch: {label} / trun", f"{r / t:.0f}x faster", ">= 35x")]
    return rows


def gaps(path):
    events = [line.split() for line in path.read_text().splitlines()]
    out = []
    for (kind, ns), (kind2, ns2) in zip(events, events[1:]):
        if kind == "exit" and kind2 == "start":
            out.append((int(ns2) - int(ns)) / 1e6)
    return out


def bench_restart(a, tmp):
    stamp = build_c("stamp.c", tmp / "stamp")
    k = 10 if a.quick else 30
    f = tmp / "trun.stamps"
    timed([a.trun, "--max-restarts", str(k), "--no-python", stamp],
          env_for(STAMP_FILE=str(f), STAMP_LAST=str(k)))
    g = tmp / "floor.stamps"
    timed([stamp, "--fork", str(k)], env_for(STAMP_FILE=str(g)))
    t, fl = (statistics.median(gaps(p)) for p in (f, g))
    rows = [
        ("restart: worker exit -> replacement exec, trun", f"{t:.2f} ms", ""),
        ("restart: bare fork+exec floor", f"{fl:.2f} ms", ""),
        ("restart: trun - floor", f"{t - fl:.2f} ms", "<= 2 ms"),
    ]
    kt = 3 if a.quick else 5
    for i, (label, torchrun, extra) in enumerate(a.peers):
        h = tmp / f"torch{i}.stamps"
        timed([*torchrun, "--max_restarts", str(kt), "--monitor_interval", "0.1", "--no_python",
               stamp], env_for(STAMP_FILE=str(h), STAMP_LAST=str(kt), **extra))
        tr = statistics.median(gaps(h))
        rows += [(f"restart: {label} (monitor 0.1 s)", f"{tr:.0f} ms", ""),
                 (f"restart: {label} / trun", f"{tr / t:.0f}x", "")]
    return rows


def peak_rss_kib(cmd, env):
    """The launcher process's own VmHWM, polled from /proc until it exits."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while p.poll() is None:
        try:
            for line in open(f"/proc/{p.pid}/status"):
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.01)
    return peak


def bench_rss(a, tmp):
    t = peak_rss_kib([a.trun, "--standalone", "--nproc-per-node", "16", "--no-python", "sleep",
                      "1"], env_for())
    rows = [("peak RSS of the launcher, 16 workers: trun", f"{t / 1024:.1f} MiB", "<= 10 MiB")]
    for label, torchrun, extra in a.peers:
        r = peak_rss_kib([*torchrun, "--standalone", "--nproc_per_node", "16",
                          "--monitor_interval", "0.1", "--no_python", "sleep", "1"],
                         env_for(**extra))
        rows.append((f"peak RSS: {label}'s agent", f"{r / 1024:.0f} MiB", ""))
    return rows


def bench_logs(a, tmp):
    gen = build_c("loggen.c", tmp / "loggen")
    size = 200_000_000 if a.quick else 1_000_000_000
    env = env_for()
    straight = tmp / "straight.log"
    with open(straight, "wb") as out:
        base = timed([gen, str(size)], env, stdout=out)
    straight.unlink()
    ours = timed([a.trun, "--tee", "3", "--log-dir", str(tmp / "trun-logs"), "--no-python", gen,
                  str(size)], env)
    subprocess.run(["rm", "-rf", str(tmp / "trun-logs")])
    mb = size / 1e6
    rows = [
        (f"logs: {mb:.0f} MB of short lines straight to a file", f"{base:.2f} s", ""),
        ("logs: the same through trun --tee 3 (console to /dev/null)", f"{ours:.2f} s", ""),
        ("logs: trun / straight", f"{ours / base:.2f}x", "<= 1.2x"),
    ]
    tsize = size // 10
    for label, torchrun, extra in a.peers:
        theirs = timed([*torchrun, "--tee", "3", "--log_dir", str(tmp / "torch-logs"),
                        "--monitor_interval", "0.1", "--no_python", gen, str(tsize)],
                       env_for(**extra), timeout=1200)
        subprocess.run(["rm", "-rf", str(tmp / "torch-logs")])
        rows += [(f"logs: {label} --tee 3, {tsize / 1e6:.0f} MB (a tenth)", f"{theirs:.2f} s", ""),
                 (f"logs: {label} / trun, per byte", f"{(theirs / tsize) / (ours / size):.1f}x",
                  "")]
    return rows


class StoreServers:
    """trun's store and torch's own server (1.13's, or the one `python` has),
    each in a process of its own."""

    def __init__(self, trun, python=PYTHON):
        self.trun = subprocess.Popen([trun, "store", "--host", "127.0.0.1", "--port", "0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.torch = subprocess.Popen([python, str(ROOT / "bench" / "torch_store_server.py")],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.ports = {"trun": int(self.trun.stdout.readline().decode().rsplit(":", 1)[1]),
                      "torch": int(self.torch.stdout.readline())}
        self.pids = {"trun": self.trun.pid, "torch": self.torch.pid}

    def close(self):
        self.trun.terminate()
        self.torch.stdin.close()
        self.trun.wait(timeout=30)
        self.torch.wait(timeout=30)


def bench_store(a, tmp):
    """trun's store vs torch 1.13's own server, both driven by build/store_loadgen
    (bench/store_loadgen.cc), which speaks protocol v1 as torch 1.13's client
    writes it. The same server processes serve every row, in turn."""
    import json
    loadgen = str(pathlib.Path(a.trun).parent / "store_loadgen")

    def run(server, servers, *args):
        return run_together(server, servers, 1, *args, "--server-pid", servers.pids[server])[0]

    def run_together(server, servers, procs, *args):
        """procs load generators at once; with more than one, without
        --server-pid (each would count the others' requests against its own)."""
        cmd = [loadgen, *args, "--port", servers.ports[server], "--json"]
        ps = [subprocess.Popen(list(map(str, cmd)), stdout=subprocess.PIPE) for _ in range(procs)]
        outs = [p.communicate(timeout=900)[0] for p in ps]
        if any(p.returncode for p in ps):
            raise SystemExit(f"bench: {' '.join(map(str, cmd))} failed")
        return [json.loads(o) for o in outs]

    median = statistics.median
    rows = []
    servers = StoreServers(a.trun)  # fresh: the first run measures memory
    try:
        # 10,000 connections against trun's store: memory per idle
        # connection (on the fresh server), latency paced and saturated.
        conns, seconds = (2000, 3) if a.quick else (10000, 10)
        rate = conns  # each connection once a second
        paced = run("trun", servers, "load", "--conns", conns, "--seconds", seconds,
                    "--rate", rate)
        closed = run("trun", servers, "load", "--conns", conns, "--seconds", seconds)
        rows.append((f"store: {conns:,} idle connections, server memory each: trun",
                     f"{paced['server_kib_per_idle_conn']:.2f} KiB", ""))
        if not a.quick:
            theirs = run("torch", servers, "load", "--conns", conns, "--seconds", seconds,
                         "--rate", rate)
            rows.append((f"store: {conns:,} idle connections, server memory each: torch",
                         f"{theirs['server_kib_per_idle_conn']:.2f} KiB", ""))
            t, r = paced["open_seconds"], theirs["open_seconds"]
            rows.append((f"store: opening {conns:,} connections: trun / torch",
                         f"{t:.2f} s / {r:.2f} s = {r / t:.0f}x faster", ""))
        for name, r in ((f"paced at {rate:,} req/s", paced),
                        ("closed loop (saturated: latency is queueing)", closed)):
            lat = ", ".join(f"{op.upper()} {r[op]['p50_us'] / 1e3:.2f}/{r[op]['p99_us'] / 1e3:.2f}"
                            for op in ("set", "get", "add"))
            rows.append((f"store: {conns:,} connections {name}, p50/p99 ms: trun",
                         f"{lat} ({r['ops_per_second']:,.0f} ops/s; server waited for a CPU "
                         f"{r['server_wait_fraction'] * 100:.0f}% of the time)", ""))
        if not a.quick:
            lat = ", ".join(f"{op.upper()} {theirs[op]['p50_us'] / 1e3:.2f}/"
                            f"{theirs[op]['p99_us'] / 1e3:.2f}" for op in ("set", "get", "add"))
            rows.append((f"store: {conns:,} connections paced at {rate:,} req/s, p50/p99 ms: "
                         "torch", f"{lat} ({theirs['ops_per_second']:,.0f} ops/s; server waited for "
                         f"a CPU {theirs['server_wait_fraction'] * 100:.0f}% of the time)", ""))

        # The flat store at this machine's limit (20,000 descriptors a
        # process): 10,000 and 19,000 connections opened on fresh servers,
        # from 64 loopback source addresses as from 64 hosts (from one, the
        # client's ephemeral ports, not the server, are what gets measured:
        # store_loadgen's --source-hosts). Medians of 3; memory as above.
        if not a.quick:
            sizes = {}
            for n in (10000, 19000):
                got = []
                for _ in range(3):
                    fresh = StoreServers(a.trun)
                    try:
                        got.append(run("trun", fresh, "load", "--conns", n, "--seconds", 1,
                                       "--rate", n, "--source-hosts", 64))
                    finally:
                        fresh.close()
                sizes[n] = (median(g["open_seconds"] for g in got),
                            median(g["server_kib_per_idle_conn"] for g in got))
            (t10, _), (t19, kib19) = sizes[10000], sizes[19000]
            rows.append(("store: opening 10,000 / 19,000 connections from 64 hosts: trun",
                         f"{t10:.2f} s / {t19:.2f} s ({t19 / t10 * 10000 / 19000:.2f}x linear); "
                         f"{kib19:.2f} KiB each at 19,000", ""))

        # set+get operations per second, trun and torch in turn: the clients
        # from one load generator (which then uses a whole core, so it is
        # what gets measured), from four at once, and, last, from one with
        # each request in one write (as torch 2.x's client sends them).
        reps, seconds = (2, 1) if a.quick else (5, 2)
        for n, procs, whole in ((1, 1, False), (64, 1, False), (64, 4, False), (64, 1, True)):
            got = {"trun": [], "torch": []}
            args = ["ops", "--clients", n // procs, "--seconds", seconds]
            args += ["--whole-requests"] if whole else []
            for _ in range(reps):
                for server in got:
                    got[server].append(sum(r["ops_per_second"]
                                           for r in run_together(server, servers, procs, *args)))
            t, r = median(got["trun"]), median(got["torch"])
            how = ", each request in one write" if whole else ""
            how += f", from {procs} load generators" if procs > 1 else ""
            rows.append((f"store: set+get ops/s, {n} client(s){how}: trun / torch",
                         f"{t:,.0f} / {r:,.0f} = {t / r:.2f}x", "" if whole else ">= 1.0x"))

        # Barriers: every client ADDs, the last SETs, all WAIT. Rounds of
        # both servers in turn; medians over all rounds.
        sizes = (200, 500, 1000) if a.quick else (200, 500, 1000, 2000)
        reps = 1 if a.quick else 3
        wall = {}
        for n in sizes:
            got = {s: {"rounds": [], "cpu": [], "open": [], "startup": []}
                   for s in ("trun", "torch")}
            for _ in range(reps):
                for server, g in got.items():
                    r = run(server, servers, "barrier", "--clients", n, "--repeat", 5)
                    g["rounds"] += r["rounds_seconds"]
                    g["cpu"] += r["server_cpu_seconds"]
                    g["open"].append(r["open_seconds"])
                    # A job's start-up barrier: its ranks connect, then meet
                    # (the run's connecting, then its first round).
                    g["startup"].append(r["open_seconds"] + r["rounds_seconds"][0])
            t, r = median(got["trun"]["rounds"]), median(got["torch"]["rounds"])
            wall[n] = (t, r)
            tc, rc = median(got["trun"]["cpu"]), median(got["torch"]["cpu"])
            to, ro = median(got["trun"]["open"]), median(got["torch"]["open"])
            rows.append((f"store: barrier (ADD then WAIT), {n} clients: trun / torch",
                         f"{t * 1e3:.1f} ms / {r * 1e3:.1f} ms = {r / t:.2f}x faster",
                         "" if n != 1000 else "see notes"))
            rows.append((f"store: barrier, {n} clients, server CPU per round: trun / torch",
                         f"{tc * 1e3:.1f} ms / {rc * 1e3:.1f} ms = {rc / tc:.2f}x less", ""))
            rows.append((f"store: connecting {n} clients ({2 * n} connections): trun / torch",
                         f"{to * 1e3:.0f} ms / {ro * 1e3:.0f} ms = {ro / to:.1f}x faster", ""))
            ts, rs = median(got["trun"]["startup"]), median(got["torch"]["startup"])
            rows.append((f"store: start-up barrier (connect, ADD, WAIT), {n} clients: trun / torch",
                         f"{ts * 1e3:.0f} ms / {rs * 1e3:.0f} ms = {rs / ts:.1f}x faster", ""))
        # The start-up barrier at this machine's limit: 9,500 clients of
        # torch 1.13's two connections each, 19,000 connections from 64
        # loopback source addresses, one run per server (torch's takes
        # about 20 s to accept them: one connection per poll() over every
        # socket).
        if not a.quick:
            big = {}
            for server in ("trun", "torch"):
                r = run(server, servers, "barrier", "--clients", 9500, "--repeat", 1,
                        "--source-hosts", 64, "--timeout", 300)
                big[server] = (r["open_seconds"], r["rounds_seconds"][0])
            (to, tr), (ro, rr) = big["trun"], big["torch"]
            rows.append(("store: start-up barrier over 19,000 connections (9,500 clients of two), "
                         "connect + first round: trun / torch",
                         f"{to:.2f} + {tr:.2f} s / {ro:.1f} + {rr:.2f} s = "
                         f"{(ro + rr) / (to + tr):.0f}x faster", ""))
        lo, hi = sizes[0], sizes[-1]
        rows.append((f"store: barrier growth {lo} -> {hi} clients ({hi // lo}x): trun, torch",
                     f"{wall[hi][0] / wall[lo][0]:.1f}x, {wall[hi][1] / wall[lo][1]:.1f}x",
                     f"about {hi // lo}x (linear)"))

        # The same barrier with the clients arriving spread over 200 ms, as
        # ranks do: the wall time is the spread, the server's CPU is not.
        for n in (1000,) if a.quick else (1000, 2000):
            got = {"trun": [], "torch": []}
            for _ in range(reps):
                for server in got:
                    got[server] += run(server, servers, "barrier", "--clients", n, "--repeat", 3,
                                       "--arrival-ms", 200)["server_cpu_seconds"]
            tc, rc = median(got["trun"]), median(got["torch"])
            rows.append((f"store: barrier, {n} clients arriving over 200 ms, server CPU: "
                         "trun / torch",
                         f"{tc * 1e3:.1f} ms / {rc * 1e3:.1f} ms = {rc / tc:.2f}x less", ""))

        # The start-up barrier again, met by torch 1.13's own clients
        # (bench/torch_store_barrier.py): 64 processes, a thread per client.
        script = [PYTHON, str(ROOT / "bench" / "torch_store_barrier.py")]
        for n in (200, 1000) if a.quick else (200, 1000, 2000):
            got = {"trun": [], "torch": []}
            for _ in range(1 if a.quick else 5):
                for server in got:
                    out = subprocess.run(list(map(str, [*script, servers.ports[server], n,
                                                        "--procs", 64])),
                                         capture_output=True, timeout=900, check=True)
                    got[server].append(json.loads(out.stdout))
            t = {k: median(r[k] for r in got["trun"]) for k in ("seconds", "added_seconds")}
            r = {k: median(r[k] for r in got["torch"]) for k in ("seconds", "added_seconds")}
            rows.append((f"store: start-up barrier with torch 1.13's clients, {n} clients: "
                         "trun / torch",
                         f"{t['seconds'] * 1e3:.0f} ms / {r['seconds'] * 1e3:.0f} ms = "
                         f"{r['seconds'] / t['seconds']:.1f}x faster",
                         ">= 2x at 1000" if n == 1000 else ""))
            rows.append((f"store: the same, {n} clients, to the last ADD answered: trun / torch",
                         f"{t['added_seconds'] * 1e3:.0f} ms / {r['added_seconds'] * 1e3:.0f} ms"
                         f" = {r['added_seconds'] / t['added_seconds']:.1f}x faster", ""))
    finally:
        servers.close()
    return rows


def bench_store2(a, tmp):
    """trun's store vs torch 2.x's own server (Debian's: the legacy backend,
    as it has no libuv), driven by store_loadgen --protocol v2 and by torch
    2.x's own clients (bench/torch_store_barrier.py, under tools/torch2-python)."""
    import json
    version = torch2_version()
    if not version:
        print("bench: no torch 2 root (make torch2): store2 skipped", file=sys.stderr)
        return []
    loadgen = str(pathlib.Path(a.trun).parent / "store_loadgen")
    median = statistics.median
    rows = []
    servers = StoreServers(a.trun, TORCH2_PYTHON)
    try:
        reps, seconds = (2, 1) if a.quick else (5, 2)
        for n in (1, 64):
            got = {"trun": [], "torch": []}
            for _ in range(reps):
                for server in got:
                    out = subprocess.run(list(map(str, [
                        loadgen, "ops", "--clients", n, "--seconds", seconds, "--protocol", "v2",
                        "--whole-requests", "--port", servers.ports[server], "--json"])),
                        capture_output=True, timeout=300, check=True)
                    got[server].append(json.loads(out.stdout)["ops_per_second"])
            t, r = median(got["trun"]), median(got["torch"])
            rows.append((f"store2: set+get ops/s, {n} client(s), protocol v2: trun / torch {version}",
                         f"{t:,.0f} / {r:,.0f} = {t / r:.2f}x", ">= 1.0x"))
        script = [TORCH2_PYTHON, str(ROOT / "bench" / "torch_store_barrier.py")]
        # Up to this machine's limit: 19,000 clients of one connection each
        # (torch's server resets thousands of them there, and their clients
        # retry); one run each above 1,000.
        for n in (200, 1000) if a.quick else (200, 1000, 9500, 19000):
            got = {"trun": [], "torch": []}
            for _ in range(1 if a.quick or n > 1000 else 3):
                for server in got:
                    out = subprocess.run(list(map(str, [*script, servers.ports[server], n,
                                                        "--procs", 64])),
                                         capture_output=True, timeout=900, check=True,
                                         cwd=ROOT)
                    got[server].append(json.loads(out.stdout)["seconds"])
            t, r = median(got["trun"]), median(got["torch"])
            rows.append((f"store2: start-up barrier with torch {version}'s clients, {n} clients: "
                         f"trun / torch {version}",
                         f"{t * 1e3:.0f} ms / {r * 1e3:.0f} ms = {r / t:.1f}x faster",
                         ">= 2x at 1000" if n == 1000 else ""))
    finally:
        servers.close()
    return rows


NOTES = """
## How to read these

- relay fan-in: `build/relay_scale RANKS PROCESSES` (bench/relay_scale.cc):
  one store, RANKS/8 relays (store/relay.h, the agent's own) spread over
  PROCESSES processes, 8 connections per relay, each sending torch 2.x's
  client bytes: VALIDATE and PING, ADD of the barrier key (the rank whose
  ADD completes the count SETs the done key), WAIT on the done key, then
  rank 0 SETs a broadcast key and every rank WAITs and GETs it. Timed from
  the first connect to the last GET; the relays' own handshakes (their
  links) come before, timed apart. The store's connection count is read
  while every link is open. A process's ranks share one edge-triggered
  epoll set (one send and one recv per request, as torch's client makes)
  and keep their connections open after the GET, as a job's ranks do.
  The CPU seconds are the phase's, in the store's thread and in the
  processes of relays and ranks: on a loaded machine they, not the wall
  time, tell what the code costs.
- torchrun 2.x: Debian's python3-torch 2.14.1 from the torch2 root
  (tools/torch2-python), with USE_LIBUV=0 as its libuv-less build needs;
  its Python is 3.14 where 1.13's is 3.11, which is part of why it starts
  slower. store2: torch 2.14's own server is its legacy backend (Debian's
  build has no libuv, the default server of pip's torch); store_loadgen
  speaks protocol v2 to both servers, each request in one write as torch
  2.x's client sends them; the start-up barrier is met by torch 2.14's own
  clients (one connection each), 64 processes.

- launch: medians of hyperfine runs (`-N`, 3 warm-ups); torchrun's median of 5.
- restart: median gap between a worker's last timestamp before `_exit(1)` and
  its replacement's first, over 30 restarts; the floor is the same gap for a
  bare fork+exec. trun can beat the floor: it spawns with `clone(CLONE_VFORK)`.
- warm: `--start-method forkserver` (docs/cli.md, Warm starts) against
  cold starts and torchrun, per torch generation. The worker
  (bench/warm_worker.py) stamps the time once `import torch` is done: a
  training script's first line of its own work. "launch 8": from starting
  the launcher to the last of 8 workers' stamps, median of 2, beside the
  median wall time of one `python -c "import torch"`; CPU is user+system of
  every process of the run (wait4 of the launcher, which reaps its workers
  and the warm process), so it counts the imports. "restart": median gap
  between a worker's last stamp before `_exit(1)` and its replacement's
  stamp, over 3 restarts. A warm restart is one fork of a process with
  torch loaded (by a spare child forked ahead, which then exits so that the
  worker becomes trun's child) and no import. "one import" is a whole
  `python -c` run, interpreter start and exit included, which is why a warm
  launch of 8 can come in under 1x. The machine (2 cores) is shared with
  other builds and tests: the rows above were taken at a load average near
  1; an earlier `--quick` run at a load near 16, before the spare child,
  measured a warm restart at 83 ms (1.13) and 32 ms (2.14) and a warm
  launch of 8 at 2.06x and 0.85x one import.
- rss: the launcher's own VmHWM, polled from /proc (wait4's ru_maxrss would
  include the reaped workers).
- logs: the console copy goes to /dev/null; on 2 cores the worker and trun's
  pump run in parallel, and the disk's speed varies run to run.
- store: both servers run on this machine and are driven over loopback by
  `build/store_loadgen` (bench/store_loadgen.cc: C++, one thread, epoll),
  speaking protocol v1 as torch 1.13's client writes it: each request in two
  writes, the opcode byte and then the rest. Servers are measured in turn,
  medians over all runs; server CPU comes from /proc/PID/task/*/schedstat.
  - ops: closed loop, each client SETs its key and GETs it back; 5 runs of 2 s.
    One load generator with 64 clients keeps a whole core busy (perf stat:
    0.99 CPUs) and so measures itself as much as the server; "from 4 load
    generators" splits the same 64 clients over four processes, as 64 ranks
    would be, and sums their rates.
  - barrier: N clients, each with two connections as a torch 1.13 client
    has (the second idle), ADD 1 to a counter; the one that sees N SETs a
    key; every client WAITs for it once its ADD is answered. From the first
    ADD sent to the last WAIT answered; 3 runs of 5 rounds per server.
    "arriving over 200 ms": the ADDs spread evenly over 200 ms instead of
    sent at once; 3 runs of 3 rounds.
    "connecting": opening the 2N connections, at most 256 at once, each until
    its first answer. "start-up barrier": a job's first barrier as its ranks
    meet it, the connecting and then the first round of the same run (torch's
    server accepts one connection per poll() over every socket, so its
    connecting grows with N squared).
  - start-up barrier with torch 1.13's clients: bench/torch_store_barrier.py.
    N torch TCPStore clients (two connections and a listener thread each), a
    thread each in 64 processes, released at once: each connects, ADDs, and
    WAITs for the key the last one SETs; to the last WAIT answered, and to
    the last ADD answered (the server's part). The rest, from the last ADD
    to the last WAIT, is Python threads waking under their process's GIL,
    alike for both servers. The clients' stores are closed after the
    barrier. Medians of 5 runs; a connect whose SYN the kernel drops (the
    listen queue, at 2,000) waits 1 s, so runs swing.
  - 10,000 connections: memory is the fresh server's RSS growth divided by
    the connections, idle. Each connection sends SET, GET and ADD in turn;
    SET has no reply, so it is timed to a CHECK sent behind it. Paced: each
    connection once a second, spread evenly; closed loop: each sends its next
    request when the last is answered (latency is then queueing).
  - Reading the barrier rows: once every client is connected, on one 2-core
    machine the kernel's loopback TCP work per message is most of either
    server's CPU (82% of trun's in perf at 1,000 clients; the two make the
    same 2 sends per client and round), and the client's side costs as much
    as the server's, so the two designs show little in wall time: both grow
    10-18x from 200 to 2,000 clients across runs, torch's not consistently
    worse. The issue's 0.13 / 1.3 / 7.8 s for torch at 200 / 1,000 / 2,000
    clients are of the size of the torch-client rows (torch's clients
    connecting and meeting), not of these (30-55 ms at 1,000), so its 2x at
    1,000 is shown against them.
  - Where the servers differ: connecting (torch's server accepts one
    connection per poll() over every socket, so opening N costs N^2); server
    CPU when clients arrive spread out, and latency with 10,000 connections
    open (a poll() over every socket per wakeup); requests written whole, as
    torch 2.x's client sends them (trun reads each in one go, torch field by
    field). torch's server holds less per idle connection (a pollfd and a
    descriptor; trun's, a connection object, without a buffer while it is
    idle, and asio's state for the socket and its pending wait).
  - Other work on this machine (shared by several builds) shows as the server
    waiting for a CPU; latencies then are the machine's as much as the
    server's.
"""


def bench_watchdog(a, tmp):
    return observability.bench_watchdog(a, tmp, TORCHRUN, build_c, env_for)


def bench_idle(a, tmp):
    return observability.bench_idle(a, tmp, TORCHRUN, env_for)


def bench_job8(a, tmp):
    return multinode.job8(a, tmp, a.peers, env_for)


def bench_rdzv(a, tmp):
    return multinode.rdzv(a, tmp)


def bench_relay(a, tmp):
    """Ranks through per-node fan-in (issue 31): build/relay_scale RANKS
    PROCESSES, the agent's relays in front of one store. The everyday size;
    the 100,000-rank row is `build/relay_scale 100000 25` (RESULTS.md)."""
    scale = str(pathlib.Path(a.trun).parent / "relay_scale")
    env = dict(os.environ, TRUN_LOG_LEVEL="error")
    rows = []
    for ranks, processes in ((8000, 4),):
        out = subprocess.run([scale, str(ranks), str(processes)], env=env, capture_output=True,
                             text=True, timeout=600)
        if out.returncode != 0:
            raise SystemExit(f"bench: relay_scale {ranks}: {out.stdout}{out.stderr[-2000:]}")
        got = dict(kv.split("=") for kv in out.stdout.split()[1:])
        rows.append((f"relay fan-in: {ranks} ranks in {ranks // 8} nodes of 8, start-up barrier "
                     f"+ broadcast ({processes} processes of relays)",
                     f"{float(got['barrier_and_broadcast_s']):.2f} s (store "
                     f"{float(got['store_cpu_s']):.2f} CPU s, relays and ranks "
                     f"{float(got['relays_and_ranks_cpu_s']):.2f} CPU s), store connections "
                     f"{got['store_connections']}", ""))
    return rows


def bench_warm(a, tmp):
    """Warm starts (--start-method forkserver) against cold ones and torchrun:
    a worker's death to its replacement's line after `import torch`, and a
    launch of 8 to the last worker's line after `import torch`, beside one
    `import torch` in a fresh interpreter."""
    import resource
    script = str(ROOT / "bench" / "warm_worker.py")
    k = 2 if a.quick else 3
    launches = 1 if a.quick else 2
    rows = []

    def launch8(cmd, env):
        """(wall s to the last worker's start, CPU s of every process)."""
        times, cpus = [], []
        for i in range(launches):
            f = tmp / f"launch{len(rows)}.{i}.stamps"
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.time_ns()
            subprocess.run(cmd, env=dict(env, STAMP_FILE=str(f)), check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            starts = [int(ns) for kind, ns in (l.split() for l in f.read_text().splitlines())]
            times.append((max(starts) - t0) / 1e9)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        return statistics.median(times), statistics.median(cpus)

    def restart(cmd, env, name):
        f = tmp / f"{name}.stamps"
        subprocess.run(cmd, env=dict(env, STAMP_FILE=str(f), STAMP_LAST=str(k)), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
        return statistics.median(gaps(f))

    for label, python, extra in [("torch 1.13", PYTHON, {}),
                                 *[(p[0].replace("torchrun ", "torch "), TORCH2_PYTHON, p[2])
                                   for p in a.peers[1:]]]:
        env = env_for(PYTHON_EXEC=python, **extra)
        imports = [timed([python, "-c", "import torch"], env) for _ in range(launches)]
        one_import = statistics.median(imports)
        rows.append((f"warm, {label}: one `import torch`, fresh interpreter",
                     f"{one_import * 1e3:.0f} ms", ""))
        torchrun = next(p[1] for p in a.peers if p[0].replace("torchrun ", "torch ") == label)
        launchers = [("trun cold", [a.trun, "--nproc-per-node", "8"]),
                     ("trun warm", [a.trun, "--start-method", "forkserver",
                                    "--nproc-per-node", "8"]),
                     ("torchrun", [*torchrun, "--nproc_per_node", "8", "--monitor_interval",
                                   "0.1"])]
        # torchrun runs its workers with PYTHON_EXEC too: inside the root, its own python.
        envs = {"trun cold": env, "trun warm": env,
                "torchrun": {k: v for k, v in env.items() if k != "PYTHON_EXEC"}}
        for name, cmd in launchers:
            wall, cpu = launch8([*cmd, script], envs[name])
            rows.append((f"warm, {label}: launch 8 to the last one past `import torch`, {name}",
                         f"{wall * 1e3:.0f} ms ({wall / one_import:.2f}x one import; "
                         f"CPU {cpu:.1f} s)", "<= 1.2x" if name == "trun warm" else ""))
        for name, cmd in launchers:
            one = [c for c in cmd if c not in ("--nproc-per-node", "--nproc_per_node", "8")]
            flag = "--max_restarts" if name == "torchrun" else "--max-restarts"
            ms = restart([*one, flag, str(k), script], envs[name], f"{label}.{name}")
            rows.append((f"warm, {label}: restart, death to past `import torch`, {name}",
                         f"{ms:.0f} ms", "<= 50 ms" if name == "trun warm" else ""))
    return rows


def bench_recovery(a, tmp):
    return multinode.recovery(a, tmp, build_c, env_for())


BENCHES = {"launch": bench_launch, "restart": bench_restart, "rss": bench_rss,
           "logs": bench_logs, "store": bench_store, "store2": bench_store2, "job8": bench_job8,
           "rdzv": bench_rdzv,
           "recovery": bench_recovery, "watchdog": bench_watchdog, "idle": bench_idle,
           "warm": bench_warm, "relay": bench_relay}
# How each bench's rows start in RESULTS.md, where not with its name.
ROW_PREFIX = {"rss": "peak RSS", "job8": "8 agents", "rdzv": "rendezvous", "store": "store:",
              "idle": "idle agent", "relay": "relay fan-in"}


def write_results(a, table):
    """Rewrites bench/RESULTS.md; with --only, only those benches' rows."""
    path = ROOT / "bench" / "RESULTS.md"
    cmd = "bench/run.py " + " ".join(sys.argv[1:])
    if not a.only or not path.exists():
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                    if l.startswith("model name")), platform.processor())
        path.write_text(
            "# Benchmark results\n\n"
            f"Date: {datetime.date.today()}. Machine: {os.cpu_count()} cores, {cpu}.\n"
            f"Peers: {', '.join(p[0] for p in a.peers)} (torch 1.13.1 through tools/torchrun113, "
            "torch 2.x from the torch2 root with USE_LIBUV=0), `--monitor_interval 0.1`.\n\n"
            f"Command: `make bench` (runs `{cmd}`).\n\n" + "\n".join(table) + "\n" + NOTES +
            multinode.NOTES + observability.NOTES)
        return
    # The rows of the benches run replace theirs where they stood, and a line
    # under the command says when and how they were measured.
    prefixes = tuple(f"| {ROW_PREFIX.get(n, n)}" for n in a.only)
    stamp = f"Rows of {', '.join(a.only)}:"
    out, placed = [], False
    for line in path.read_text().split("## How to read these")[0].splitlines():
        if line.startswith(stamp):
            continue
        if line.startswith(prefixes):
            if not placed:
                out += table[2:]
            placed = True
            continue
        out.append(line)
        if line.startswith("Command:"):
            out += ["", f"{stamp} {datetime.date.today()}, `{cmd}`.", ""]
    if not placed:
        last = max(i for i, line in enumerate(out) if line.startswith("|"))
        out[last + 1:last + 1] = table[2:]
    head = re.sub(r"\n{3,}", "\n\n", "\n".join(out)).rstrip("\n")
    path.write_text(head + "\n" + NOTES + multinode.NOTES + observability.NOTES)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trun", default=str(ROOT / "build" / "trun"))
    p.add_argument("--only", action="append", choices=sorted(BENCHES))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--write", action="store_true", help="rewrite bench/RESULTS.md")
    a = p.parse_args()
    a.trun = str(pathlib.Path(a.trun).resolve())
    a.peers = peers()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in a.only or BENCHES:
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            # A folder each: benches name their files alike (trun.stamps).
            tmp = pathlib.Path(d) / name
            tmp.mkdir()
            rows += BENCHES[name](a, tmp)
    table = ["| measure | result | target |", "| --- | --- | --- |"]
    table += [f"| {m} | {r} | {t} |" for m, r, t in rows]
    print("\n".join(table))
    if a.write:
        write_results(a, table)


if __name__ == "__main__":
    main()
