"""Signals reach the workers; nothing outlives trun, not even after kill -9."""
import os
import signal
import subprocess
import time
import uuid

import pytest

from conftest import TRUN, base_env, live_processes_with, worker


def start(args, env=None):
    return subprocess.Popen([TRUN, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env or base_env())


def wait_ready(p, n):
    """Reads n "ready" lines from trun's stdout; on anything else, shows trun's stderr."""
    for _ in range(n):
        line = p.stdout.readline()
        if line != b"ready\n":
            p.kill()
            raise AssertionError(f"got {line!r}; trun's stderr: {p.stderr.read().decode()}")


def process_tree(root):
    """Each process below root (and root) with its state, kernel wait
    channel and command line: what a test that waited in vain shows."""
    lines, todo = [], [root]
    while todo:
        pid = todo.pop()
        proc = f"/proc/{pid}"
        try:
            state = open(f"{proc}/stat").read().rsplit(") ", 1)[1].split()[0]
            wchan = open(f"{proc}/wchan").read()
            argv = open(f"{proc}/cmdline", "rb").read().replace(b"\0", b" ").decode()[:160]
            threads = os.listdir(f"{proc}/task")
            for t in threads:
                with open(f"{proc}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError as e:
            lines.append(f"{pid}: {e}")
            continue
        lines.append(f"{pid} {state} {wchan or '-'} threads={len(threads)} {argv}")
    return "\n".join(lines)


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130),
                                      (signal.SIGHUP, 129)])
def test_signal_is_forwarded_and_trun_exits_128_plus(tmp, sig, code):
    p = start(["--nproc-per-node", 2, *worker(f"marker:{tmp}", "print:ready", "sleep:60")])
    try:
        wait_ready(p, 2)
        p.send_signal(sig)
        try:
            assert p.wait(timeout=30) == code
        except subprocess.TimeoutExpired:
            raise AssertionError(f"trun did not end; markers {sorted(os.listdir(tmp))}\n"
                                 f"{process_tree(p.pid)}") from None
    finally:
        p.kill()
    name = signal.Signals(sig).name
    assert sorted(f.name for f in tmp.iterdir()) == [f"0.{name}", f"1.{name}"]


def test_stubborn_workers_are_killed_after_the_grace_period():
    p = start(["--no-python", "sh", "-c", "trap '' TERM; echo ready; sleep 60 & wait"],
              env=base_env(TORCH_ELASTIC_SHUTDOWN_TIMEOUT="1"))
    wait_ready(p, 1)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 143
    assert time.monotonic() - t0 < 10


def test_signals_to_handle_narrows_the_set(tmp):
    p = start(["--signals-to-handle", "SIGUSR1", *worker(f"marker:{tmp}", "print:ready",
                                                         "sleep:60")])
    wait_ready(p, 1)
    p.send_signal(signal.SIGUSR1)
    assert p.wait(timeout=30) == 128 + signal.SIGUSR1


def test_kill_9_of_trun_leaves_no_worker_and_no_grandchild():
    token = f"TRUN_ORPHAN_TEST={uuid.uuid4()}"
    env = base_env(TRUN_ORPHAN_TOKEN=token)
    p = start(["--nproc-per-node", 2, *worker("grandchild", "print:ready", "sleep:300")], env=env)
    wait_ready(p, 2)
    # trun, its sentinel, 2 workers, 2 grandchildren.
    assert wait_for(lambda: len(live_processes_with(token)) >= 6), live_processes_with(token)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    assert wait_for(lambda: live_processes_with(token) == [], timeout=5), \
        live_processes_with(token)


def test_clean_exit_leaves_no_grandchild():
    token = f"TRUN_ORPHAN_TEST={uuid.uuid4()}"
    env = base_env(TRUN_ORPHAN_TOKEN=token)
    r = subprocess.run([TRUN, "--no-python", "sh", "-c", "(setsid sleep 300 &); echo done"],
                       capture_output=True, env=env, timeout=60)
    assert r.returncode == 0 and r.stdout == b"done\n"
    assert wait_for(lambda: live_processes_with(token) == [], timeout=5), \
        live_processes_with(token)
