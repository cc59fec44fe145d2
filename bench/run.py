#!/usr/bin/env python3
"""trun's benchmarks, side by side with torch 1.13's torchrun in one run.

    bench/run.py --trun build/trun [--only NAME ...] [--quick] [--write]

Prints a markdown table of ratios; --write also rewrites bench/RESULTS.md.
Figures to reach (issue 2) are shown next to each result, not asserted.
"""
import argparse
import datetime
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import multinode

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYTHON = os.environ.get("PYTHON_EXEC", "/usr/bin/python3")
TORCHRUN = [PYTHON, str(ROOT / "tools" / "torchrun113")]


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
    torch = [*TORCHRUN, "--standalone", "--nproc_per_node", "16", "--monitor_interval", "0.1",
             "--no_python", "true"]
    env = env_for()
    t, f = hyperfine_medians([trun, base], 10 if a.quick else 40, env)
    r = statistics.median(timed(torch, env) for _ in range(2 if a.quick else 5))
    return [
        ("launch 16 x `true`: trun", f"{t * 1e3:.1f} ms", ""),
        ("launch: bare posix_spawn floor", f"{f * 1e3:.1f} ms", ""),
        ("launch: torchrun", f"{r * 1e3:.0f} ms", ""),
        ("launch: trun / floor", f"{t / f:.2f}x", "<= 1.25x"),
        ("launch: torchrun / trun", f"{r / t:.0f}x faster", ">= 35x"),
    ]


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
    h = tmp / "torch.stamps"
    kt = 3 if a.quick else 5
    timed([*TORCHRUN, "--max_restarts", str(kt), "--monitor_interval", "0.1", "--no_python", stamp],
          env_for(STAMP_FILE=str(h), STAMP_LAST=str(kt)))
    t, fl, tr = (statistics.median(gaps(p)) for p in (f, g, h))
    return [
        ("restart: worker exit -> replacement exec, trun", f"{t:.2f} ms", ""),
        ("restart: bare fork+exec floor", f"{fl:.2f} ms", ""),
        ("restart: trun - floor", f"{t - fl:.2f} ms", "<= 2 ms"),
        ("restart: torchrun (monitor 0.1 s)", f"{tr:.0f} ms", ""),
        ("restart: torchrun / trun", f"{tr / t:.0f}x", ""),
    ]


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
    env = env_for()
    t = peak_rss_kib([a.trun, "--standalone", "--nproc-per-node", "16", "--no-python", "sleep",
                      "1"], env)
    r = peak_rss_kib([*TORCHRUN, "--standalone", "--nproc_per_node", "16", "--monitor_interval",
                      "0.1", "--no_python", "sleep", "1"], env)
    return [
        ("peak RSS of the launcher, 16 workers: trun", f"{t / 1024:.1f} MiB", "<= 10 MiB"),
        ("peak RSS: torchrun's agent", f"{r / 1024:.0f} MiB", ""),
    ]


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
    tsize = size // 10
    theirs = timed([*TORCHRUN, "--tee", "3", "--log_dir", str(tmp / "torch-logs"),
                    "--monitor_interval", "0.1", "--no_python", gen, str(tsize)], env,
                   timeout=1200)
    subprocess.run(["rm", "-rf", str(tmp / "torch-logs")])
    mb = size / 1e6
    return [
        (f"logs: {mb:.0f} MB of short lines straight to a file", f"{base:.2f} s", ""),
        (f"logs: the same through trun --tee 3 (console to /dev/null)", f"{ours:.2f} s", ""),
        ("logs: trun / straight", f"{ours / base:.2f}x", "<= 1.2x"),
        (f"logs: torchrun --tee 3, {tsize / 1e6:.0f} MB (a tenth)", f"{theirs:.2f} s",
         ""),
        ("logs: torchrun / trun, per byte", f"{(theirs / tsize) / (ours / size):.1f}x", ""),
    ]


def bench_store(a, tmp):
    """trun's store vs torch 1.13's own server, both driven by torch's client."""
    clients = [PYTHON, str(ROOT / "bench" / "store_clients.py")]
    ours = subprocess.Popen([a.trun, "store", "--host", "127.0.0.1", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    our_port = int(ours.stdout.readline().decode().rsplit(":", 1)[1])
    theirs = subprocess.Popen([*clients, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    their_port = int(theirs.stdout.readline())

    def measure(*args):
        out = subprocess.run([*clients, *map(str, args)], capture_output=True, timeout=600,
                             check=True).stdout
        return float(out)

    rows = []
    seconds = 1 if a.quick else 3
    try:
        for n in (1, 64):
            t, r = measure("ops", our_port, n, seconds), measure("ops", their_port, n, seconds)
            rows.append((f"store: set+get ops/s, {n} client(s): trun / torch",
                         f"{t:,.0f} / {r:,.0f} = {t / r:.2f}x", ">= 1.0x"))
        for n in (200, 500, 1000) if a.quick else (200, 500, 1000, 2000):
            t, r = measure("barrier", our_port, n), measure("barrier", their_port, n)
            rows.append((f"store: barrier (ADD then WAIT), {n} clients: trun / torch",
                         f"{t * 1e3:.0f} ms / {r * 1e3:.0f} ms = {r / t:.1f}x faster",
                         ">= 2x at 1000"))
    finally:
        ours.terminate()
        theirs.stdin.close()
        ours.wait(timeout=30)
        theirs.wait(timeout=30)
    return rows


NOTES = """
## How to read these

- launch: medians of hyperfine runs (`-N`, 3 warm-ups); torchrun's median of 5.
- restart: median gap between a worker's last timestamp before `_exit(1)` and
  its replacement's first, over 30 restarts; the floor is the same gap for a
  bare fork+exec. trun can beat the floor: it spawns with `clone(CLONE_VFORK)`.
- rss: the launcher's own VmHWM, polled from /proc (wait4's ru_maxrss would
  include the reaped workers).
- logs: the console copy goes to /dev/null; on 2 cores the worker and trun's
  pump run in parallel, and the disk's speed varies run to run.
- store: both servers are driven by torch 1.13's Python client, threads in one
  process. The barrier rows are bound by that client (a thread per client,
  two connections each, the GIL), so they swing by 2-5x between runs and do
  not yet measure the servers; a C++ load generator is the open work.
"""


def bench_job8(a, tmp):
    return multinode.job8(a, tmp, TORCHRUN, env_for())


def bench_rdzv(a, tmp):
    return multinode.rdzv(a, tmp)


def bench_recovery(a, tmp):
    return multinode.recovery(a, tmp, build_c, env_for())


BENCHES = {"launch": bench_launch, "restart": bench_restart, "rss": bench_rss,
           "logs": bench_logs, "store": bench_store, "job8": bench_job8, "rdzv": bench_rdzv,
           "recovery": bench_recovery}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trun", default=str(ROOT / "build" / "trun"))
    p.add_argument("--only", action="append", choices=sorted(BENCHES))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--write", action="store_true", help="rewrite bench/RESULTS.md")
    a = p.parse_args()
    a.trun = str(pathlib.Path(a.trun).resolve())
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in a.only or BENCHES:
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            rows += BENCHES[name](a, pathlib.Path(d))
    table = ["| measure | result | target |", "| --- | --- | --- |"]
    table += [f"| {m} | {r} | {t} |" for m, r, t in rows]
    print("\n".join(table))
    if a.write:
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                    if l.startswith("model name")), platform.processor())
        cmd = "bench/run.py " + " ".join(sys.argv[1:])
        (ROOT / "bench" / "RESULTS.md").write_text(
            "# Benchmark results\n\n"
            f"Date: {datetime.date.today()}. Machine: {os.cpu_count()} cores, {cpu}.\n"
            f"Peer: torch 1.13.1's torchrun (tools/torchrun113), `--monitor_interval 0.1`.\n\n"
            f"Command: `make bench` (runs `{cmd}`).\n\n" + "\n".join(table) + "\n" + NOTES +
            multinode.NOTES)


if __name__ == "__main__":
    main()
