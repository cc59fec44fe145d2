"""The watchdog and the idle agent (issue 7), side by side with torch 1.13's
torchrun. Used by bench/run.py (`--only watchdog idle`).

- watchdog: how long after its timer's deadline a worker is dead. The worker
  (bench/timer_worker.c) writes torch's FileTimerClient line for a SIGKILL
  0.2 s ahead and waits; this script watches it through a pidfd, which
  becomes readable the moment it dies. One launcher run restarts it N times.
- idle: the agent's own CPU time (all its threads, /proc/<pid>/task/*/schedstat,
  in ns) and wake-ups over a window in which its one worker only sleeps, with
  the health server and the watchdog on.
"""
import json
import os
import pathlib
import select
import statistics
import subprocess
import time


def watch_deaths(stamps, count, proc):
    """Delays (s) from each stamped deadline to that worker's death."""
    delays, seen = [], 0
    while len(delays) < count and proc.poll() is None:
        lines = stamps.read_text().splitlines() if stamps.exists() else []
        if len(lines) <= seen:
            time.sleep(0.001)
            continue
        pid, deadline = lines[seen].split()
        seen += 1
        try:
            fd = os.pidfd_open(int(pid))
        except ProcessLookupError:
            raise SystemExit(f"bench: worker {pid} was gone before it could be watched")
        select.select([fd], [], [], 30)
        delays.append(time.time() - float(deadline))
        os.close(fd)
    return delays


def watchdog_delays(cmd, env, count, tmp, name):
    stamps = tmp / f"{name}.stamps"
    env = dict(env, TORCHELASTIC_ENABLE_FILE_TIMER="1", TIMER_STAMPS=str(stamps),
               TIMER_LAST=str(count))
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        delays = watch_deaths(stamps, count, p)
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if len(delays) < count:
        raise SystemExit(f"bench: {name} ended after {len(delays)} of {count} watchdog kills")
    return delays


def bench_watchdog(a, tmp, torchrun, build_c, env_for):
    worker = build_c("timer_worker.c", tmp / "timer_worker")
    n = 5 if a.quick else 20
    env = env_for()
    events = tmp / "events.jsonl"
    ours = watchdog_delays([a.trun, "--max-restarts", str(n), "--event-log-file", str(events),
                            "--no-python", worker], env, n, tmp, "trun")
    # trun's own account: from the deadline to its kill(2).
    sent = [json.loads(line)["metadata"]["delay_ms"] for line in events.read_text().splitlines()
            if '"trun.watchdog.expired"' in line]
    nt = 3 if a.quick else 10
    theirs = watchdog_delays([*torchrun, "--max_restarts", str(nt), "--monitor_interval", "0.1",
                              "--no_python", worker], env, nt, tmp, "torchrun")
    med, tmed = statistics.median(ours), statistics.median(theirs)
    return [
        (f"watchdog: deadline -> worker dead, trun (median / p90 / max of {n})",
         spread([d * 1e3 for d in ours], 2), "<= 10 ms"),
        ("watchdog: deadline -> kill(2), trun's own event (median / p90 / max)", spread(sent, 2),
         ""),
        (f"watchdog: torchrun's FileTimerServer (median / p90 / max of {nt})",
         spread([d * 1e3 for d in theirs], 0), ""),
        ("watchdog: torchrun / trun, medians", f"{tmed / med:.0f}x", ""),
    ]


def spread(ms, digits):
    ms = sorted(ms)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    return f"{statistics.median(ms):.{digits}f} / {p90:.{digits}f} / {ms[-1]:.{digits}f} ms"


def cpu_ns_and_wakeups(pid):
    """CPU time (ns) and voluntary context switches of every thread of pid."""
    cpu = wakeups = 0
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            cpu += int((task / "schedstat").read_text().split()[0])
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    wakeups += int(line.split()[1])
        except (OSError, ValueError):
            pass
    return cpu, wakeups


def idle_cpu(cmd, env, window, settle=3.0):
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(settle)
        c0, w0 = cpu_ns_and_wakeups(p.pid)
        time.sleep(window)
        c1, w1 = cpu_ns_and_wakeups(p.pid)
    finally:
        p.kill()
        p.wait()
    return (c1 - c0) / (window * 1e9) * 100, (w1 - w0) / window


def bench_idle(a, tmp, torchrun, env_for):
    window = 5 if a.quick else 10
    sleep = str(int(window + 10))
    env = env_for(TORCHELASTIC_ENABLE_FILE_TIMER="1")
    ours, ours_wake = idle_cpu([a.trun, "--health-check-port", "0", "--health-check-addr",
                                "127.0.0.1", "--no-python", "sleep", sleep], env, window)
    theirs, theirs_wake = idle_cpu([*torchrun, "--monitor_interval", "0.1", "--no_python", "sleep",
                                    sleep], env, window, settle=5.0)
    return [
        (f"idle agent CPU over {window} s, health server + watchdog on: trun",
         f"{ours:.4f}% of a core, {ours_wake:.1f} wake-ups/s", "< 0.1%"),
        ("idle agent CPU: torchrun (watchdog on, monitor 0.1 s)",
         f"{theirs:.2f}% of a core, {theirs_wake:.0f} wake-ups/s", ""),
    ]


NOTES = """
- watchdog: trun arms one timer at the earliest deadline; torch 1.13's
  FileTimerServer reads its FIFO for up to 0.1 s at a time, sleeping 0.1 s
  when it is empty, then looks for expired timers. torch 1.13 has no
  health server at all (later versions read TORCHELASTIC_HEALTH_CHECK_PORT
  and start a stub), so its idle row has the watchdog only.
- On a loaded machine (other processes on every core) the tail is the
  scheduler's: the timer fires on time, the agent runs when a core is free.
- idle: CPU from /proc/<pid>/task/*/schedstat (ns), wake-ups from
  voluntary_ctxt_switches, of the launcher's process only (not the worker),
  after a few seconds to settle.
"""
