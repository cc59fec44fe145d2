"""Start-up cost of trun's Python launcher on 1, 2 and 8 SSH hosts, against SSH itself.

    python3 bench/python_api.py [--trun build/trun] [--runs 5] [--write]

Hosts are trun-host-1..8 of tools/sshd-loopback (a real sshd on 127.0.0.1).
For each host count, one worker per host running a no-op function that
returns time.time() at its first line:
  first line  time from .run() to the last worker's first line (every worker started)
  total       time of the whole .run() (start, run, results back, agents gone)
  ssh floor   `ssh host python3 -c pass` to every host at once (the fan-out's floor)
  kill -9     with 2 sleeping workers per host, from kill -9 of the launcher until no
              process it started (agents, workers, ssh clients) is left (median of 3)
Medians of --runs runs. --write appends the table to bench/RESULTS.md.
"""
import argparse
import datetime
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import trun  # noqa: E402


def first_line():
    import time
    return time.time()


SLEEPER = """
import os, sys, time, trun
def f():
    print("READY", flush=True)
    time.sleep(600)
trun.launch(f, hostnames=sys.argv[2].split(","), workers_per_host=2, backend=None,
            ssh_config_file=sys.argv[1], log_dir="")
"""


def holders(token):
    """Live processes whose environment holds token."""
    found = []
    for p in pathlib.Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if (p / "stat").read_text().split(") ")[1].startswith("Z"):
                continue
            if token.encode() in (p / "environ").read_bytes():
                found.append(int(p.name))
        except (OSError, IndexError):
            continue
    return found


def kill9_cleanup(cfg, hosts):
    """Seconds from kill -9 of a launcher (2 workers per host) until nothing it started runs."""
    import signal
    import uuid
    token = f"TORCH_BENCH_{uuid.uuid4().hex}"
    env = dict(os.environ, **{token: "1"}, PYTHONPATH=str(ROOT / "python"))
    p = subprocess.Popen([sys.executable, "-c", SLEEPER, cfg, ",".join(hosts)], env=env,
                         stdout=subprocess.PIPE, text=True)
    ready = 0
    while ready < 2 * len(hosts):
        line = p.stdout.readline()
        if not line:
            raise SystemExit("the launcher ended early")
        ready += "READY" in line
    p.send_signal(signal.SIGKILL)
    t0 = time.time()
    while holders(token) and time.time() - t0 < 60:
        time.sleep(0.01)
    took = time.time() - t0
    p.wait()
    for pid in holders(token):
        os.kill(pid, signal.SIGKILL)
    return took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trun", default=str(ROOT / "build" / "trun"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--hosts", default="1,2,8")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    os.environ["TRUN_BINARY"] = os.path.abspath(a.trun)
    d = tempfile.mkdtemp()
    cfg = subprocess.run([str(ROOT / "tools" / "sshd-loopback"), "up", d, "2298"],
                         capture_output=True, text=True, check=True).stdout.strip()
    rows = []
    try:
        for n in map(int, a.hosts.split(",")):
            hosts = [f"trun-host-{i}" for i in range(1, n + 1)]
            firsts, totals, floors = [], [], []
            for _ in range(a.runs):
                t0 = time.time()
                procs = [subprocess.Popen(["ssh", "-F", cfg, h, sys.executable, "-c", "pass"])
                         for h in hosts]
                for p in procs:
                    p.wait()
                floors.append(time.time() - t0)
                launcher = trun.Launcher(hostnames=hosts, workers_per_host=1, backend=None,
                                         ssh_config_file=cfg, log_dir="")
                launcher.set_logging_handlers(lambda: [])
                t0 = time.time()
                r = launcher.run(first_line)
                totals.append(time.time() - t0)
                firsts.append(max(r.by_ranks()) - t0)
            kills = [kill9_cleanup(cfg, hosts) for _ in range(3)]
            rows.append((n, statistics.median(firsts), statistics.median(totals),
                         statistics.median(floors), statistics.median(kills)))
            print(f"{n} hosts: first line {rows[-1][1]:.3f} s, total {rows[-1][2]:.3f} s, "
                  f"ssh floor {rows[-1][3]:.3f} s, kill -9 cleanup {rows[-1][4]:.3f} s", flush=True)
    finally:
        subprocess.run([str(ROOT / "tools" / "sshd-loopback"), "down", d], check=False)
    table = ["| hosts | .run() to every worker's first line | .run() total (no-op) "
             "| `ssh host python3 -c pass` to every host at once | kill -9 of the launcher "
             "to nothing left (2 workers/host) |", "| --- | --- | --- | --- | --- |"]
    table += [f"| {n} | {f:.3f} s | {t:.3f} s | {s:.3f} s | {k:.3f} s |"
              for n, f, t, s, k in rows]
    print("\n".join(table))
    if a.write:
        with open(ROOT / "bench" / "RESULTS.md", "a") as f:
            f.write(f"\n## Python launcher start-up (bench/python_api.py)\n\n"
                    f"`python3 bench/python_api.py --runs {a.runs} --write`, "
                    f"{datetime.date.today().isoformat()}, this 2-core machine (shared), "
                    f"hosts trun-host-1..8 of tools/sshd-loopback (sshd on 127.0.0.1), "
                    f"one worker per host, backend=None, medians of {a.runs} runs (kill -9: of 3, "
                    f"2 workers per host). The SSH column is the floor: starting a Python on "
                    f"every host at once.\n\n"
                    + "\n".join(table) + "\n")


if __name__ == "__main__":
    main()
