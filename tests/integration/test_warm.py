"""Warm starts (--start-method forkserver): a worker forked from one warm
Python process sees what a cold `python -u script.py` would. The existing
worker-contract tests, run again with warm start on, are
test_warm_launch.py's and test_warm_failures.py's."""
import json
import os
import pathlib
import select
import signal
import subprocess
import time

import pytest

import test_logs
from conftest import FIXTURES, TRUN, base_env, trun
from warm_helpers import WARM, warm_popen

PROBE = FIXTURES / "warm_probe.py"


def test_output_streams_before_the_worker_ends(tmp, monkeypatch):
    # test_logs's, whose trun is started by a subprocess.Popen it imports
    # inside the test.
    monkeypatch.setattr(subprocess, "Popen", warm_popen)
    test_logs.test_output_streams_before_the_worker_ends(tmp)


def probe(warm, out, *args, cwd=None, env=None, **kw):
    out.mkdir()
    r = trun(*(WARM if warm else ()), "--nproc-per-node", 2, PROBE, *args, cwd=cwd,
             env=dict(env, TRUN_PROBE_DIR=str(out)), **kw)
    return r, [json.loads((out / f"{rank}.json").read_text()) for rank in range(2)]


# What differs between any two runs of one command.
PER_RUN = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE"}


def test_a_warm_worker_sees_what_a_cold_one_sees(tmp):
    env = base_env(TRUN_PROBE_VALUE="a b\tc=d")
    (tmp / "sub").mkdir()
    cold_run, cold = probe(False, tmp / "cold", "exit:0", cwd=tmp / "sub", env=env)
    warm_run, warm = probe(True, tmp / "warm", "exit:0", cwd=tmp / "sub", env=env)
    assert cold_run.returncode == warm_run.returncode == 0, warm_run.err
    assert len(cold) == len(warm) == 2
    for c, w in zip(cold, warm):
        # tools/torch2-python's `cd` in sh sets OLDPWD and PWD before it
        # execs a cold worker's python; a warm worker gets trun's values.
        for k in PER_RUN | {"TRUN_PROBE_DIR", "OLDPWD", "PWD"}:
            c["env"].pop(k, None), w["env"].pop(k, None)
        assert w == c
    assert warm[0]["parent_is_trun"] and warm[0]["leads_group"] and warm[0]["pdeathsig"] == 9
    assert warm[1]["env"]["RANK"] == "1" and warm[0]["env"]["TRUN_PROBE_VALUE"] == "a b\tc=d"


def test_signals_as_cold_when_trun_starts_with_them_ignored(tmp):
    """trun started by `nohup` or as a shell's background job ignores SIGHUP
    or SIGINT; the workers it starts get the default action of the signals
    it handles. The warm process starts before trun handles them, so it is
    told to reset them too: warm workers get what cold ones get."""
    def ignoring():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    env = base_env()
    runs = [probe(warm, tmp / name, "exit:0", env=env, preexec_fn=ignoring)
            for warm, name in ((False, "cold"), (True, "warm"))]
    (cold_run, cold), (warm_run, warm) = runs
    assert cold_run.returncode == warm_run.returncode == 0, warm_run.err
    for c, w in zip(cold, warm):
        assert w["handlers"] == c["handlers"], (w["handlers"], c["handlers"])
        assert c["handlers"]["SIGINT"] == "<built-in function default_int_handler>", c


@pytest.mark.parametrize("action,code,err", [
    ("exit:7", 7, None),
    ("sysexit:bye", 1, "bye\n"),
    ("raise", 1, "ValueError: probe failed\n"),
    ("kill:TERM", -15, None),
])
def test_exit_codes_and_tracebacks_as_cold(action, code, err):
    # Nothing preloaded: what is compared does not depend on torch, and each
    # case saves an import.
    env = base_env(TRUN_WARM_IMPORTS="")
    runs = [trun(*flags, PROBE, action, env=env) for flags in ((), WARM)]
    for r in runs:
        assert r.returncode == 1
        assert f"failed (exitcode: {code}) local_rank: 0" in r.err
    if err:
        # The same console output, without any frame of the warm process.
        cold, warm = (r.err[r.err.index("Traceback") if "Traceback" in r.err else
                            r.err.index(err):r.err.index(err) + len(err)] for r in runs)
        assert warm == cold
        assert "trun-warm" not in runs[1].err and "runpy" not in runs[1].err


def test_the_end_of_a_worker_as_cold(tmp):
    # A warm worker ends with _exit once Python is finalized, skipping the
    # C++ destructors of what the warm process loaded (docs/cli.md, "Warm
    # starts"): what C's exit() would have flushed (a FILE that is never
    # closed), Python's atexit functions and the finalizers of what the
    # script left behind still come out, in a cold worker's order, and the
    # worker's status is its own.
    script = tmp / "w.py"
    script.write_text(
        "import atexit, ctypes, sys\n"
        "libc = ctypes.CDLL(None)\n"
        "libc.fopen.restype = ctypes.c_void_p\n"
        "libc.fputs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]\n"
        "libc.fputs(b'buffered by C', libc.fopen(sys.argv[1].encode(), b'w'))\n"
        "class Last:\n"
        "    def __del__(self):\n"
        "        print('finalized', flush=True)\n"
        "last = Last()\n"
        "atexit.register(print, 'atexit', flush=True)\n"
        "print('python', flush=True)\n"
        "sys.exit(7)\n")
    env = base_env(TRUN_WARM_IMPORTS="ctypes")
    for name, flags in (("cold", ()), ("warm", WARM)):
        r = trun(*flags, script, tmp / f"{name}.c", env=env)
        assert r.returncode == 1, r.err
        assert "failed (exitcode: 7) local_rank: 0" in r.err, r.err
        assert r.out == "python\natexit\nfinalized\n", (name, r.out)
        assert (tmp / f"{name}.c").read_text() == "buffered by C", name


def test_no_python_is_refused():
    r = trun(*WARM, "--no-python", "true")
    assert r.returncode == 2
    assert "--start-method forkserver" in r.err and "--no-python" in r.err


def test_an_import_that_fails_fails_the_job_with_the_reason():
    r = trun(*WARM, PROBE, env=base_env(TRUN_WARM_IMPORTS="torch, no_such_module_xyz"))
    assert r.returncode != 0
    assert "cannot import no_such_module_xyz: ModuleNotFoundError" in r.err


def children_of(pid):
    kids = []
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        kids += [int(x) for x in (task / "children").read_text().split()]
    return kids


def cmdline(pid):
    return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()


def test_the_warm_process_killed_mid_job_is_replaced(tmp):
    # Attempt 0's worker waits until the test has killed the warm process,
    # then fails; the restart forks its replacement from a new warm process.
    script = tmp / "w.py"
    script.write_text(
        "import os, time\n"
        "attempt = os.environ['TORCHELASTIC_RESTART_COUNT']\n"
        "print('ready', os.getpid(), flush=True)\n"
        f"while attempt == '0' and not os.path.exists('{tmp}/go'):\n"
        "    time.sleep(0.02)\n"
        "print('attempt', attempt, flush=True)\n"
        "raise SystemExit(3 if attempt == '0' else 0)\n")
    p = subprocess.Popen([TRUN, *WARM, "--max-restarts", "1", script], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=base_env())
    try:
        ready = p.stdout.readline().split()
        assert ready[0] == b"ready", p.stderr.read()
        worker_pid = int(ready[1])
        (warm,) = [c for c in children_of(p.pid)
                   if c != worker_pid and b"fileno=0" in cmdline(c)]
        os.kill(warm, signal.SIGKILL)
        time.sleep(0.2)
        (tmp / "go").touch()
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 0, err.decode()
    assert b"attempt 0" in out and b"attempt 1" in out, out
    assert f"warm process (pid {warm}) was killed by SIGKILL".encode() in err


CHECKPOINT = FIXTURES / "warm_checkpoint.py"


def test_a_restart_resumes_from_the_checkpoint_with_the_same_result(tmp):
    # tests/fixtures/elastic_train.py cannot fail on purpose, hence
    # warm_checkpoint.py: 6 DDP steps over gloo, rank 0 checkpointing model
    # and optimizer after each; on attempt 0 rank 1 fails once the
    # checkpoint of step 3 is on disk, and attempt 1 resumes from it. The
    # final parameters (momentum included) match a cold run that never
    # failed only when the restart resumed from exactly that checkpoint.
    def digest(out):
        (line,) = [x for x in out.splitlines() if x.startswith("RESULT ")]
        assert line.startswith("RESULT steps=6 digest="), line
        return line

    cold = trun("--nproc-per-node", 2, CHECKPOINT, "--ckpt", tmp / "cold.pt", timeout=300)
    assert cold.returncode == 0, cold.err
    assert "attempt 0 start 0" in cold.out.splitlines() and "attempt 1" not in cold.out
    r = trun(*WARM, "--nproc-per-node", 2, "--max-restarts", 1, CHECKPOINT,
             "--ckpt", tmp / "warm.pt", "--fail-after", 3, timeout=300)
    assert r.returncode == 0, r.err
    assert "failed (exitcode: 3) local_rank: 1" in r.err
    assert "restarting, attempt 1 of 1" in r.err
    lines = r.out.splitlines()
    assert lines[:lines.index("attempt 0 step 3") + 1] == [
        "attempt 0 start 0", "attempt 0 step 1", "attempt 0 step 2", "attempt 0 step 3"], lines
    assert lines[lines.index("attempt 1 start 3"):-1] == [
        "attempt 1 start 3", "attempt 1 step 4", "attempt 1 step 5", "attempt 1 step 6"], lines
    assert digest(r.out) == digest(cold.out)


def read_lines(p, n, prefix, timeout=120):
    """The next n lines starting with prefix on p's (unbuffered) stdout,
    others skipped, split; fails with trun's stderr when trun ends first or time runs out."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        if not select.select([p.stdout], [], [], max(0, deadline - time.monotonic()))[0]:
            p.kill()
            raise AssertionError(f"no {prefix!r} line in time; got {got}")
        line = p.stdout.readline()
        if not line:
            raise AssertionError(f"trun ended: {p.wait()}; stderr: {p.stderr.read().decode()}")
        if line.startswith(prefix.encode()):
            got.append(line.decode().split())
    return got


def start_time(pid):
    """The process's start time in clock ticks (/proc/PID/stat, field 22)."""
    return int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19])


def test_a_restart_reuses_the_warm_process(tmp):
    # The warm process is the one child of trun, besides the workers, that
    # runs the warm bootstrap (`python3 -u -c "...socket(fileno=0)..."`,
    # which forked workers also show in /proc/PID/cmdline). Seen from here
    # during attempt 0 and again during attempt 1, it is the same process
    # (pid and start time): the restart forked its workers from the warm
    # process trun started with, and started no new one.
    script = tmp / "w.py"
    script.write_text(
        "import os, sys, time\n"
        "attempt, rank = os.environ['TORCHELASTIC_RESTART_COUNT'], os.environ['LOCAL_RANK']\n"
        "os.write(1, f'ready {attempt} {rank} {os.getpid()}\\n'.encode())\n"
        f"while not os.path.exists(f'{tmp}/go{{attempt}}'):\n"
        "    time.sleep(0.02)\n"
        "if attempt == '0':\n"
        "    if rank == '1':\n"
        "        sys.exit(3)\n"
        "    time.sleep(120)\n")
    # Unbuffered, so that select() sees every line not read yet.
    p = subprocess.Popen([TRUN, *WARM, "--nproc-per-node", "2", "--max-restarts", "1", script],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base_env(),
                         bufsize=0)
    try:
        warm = []
        for attempt in ("0", "1"):
            ready = read_lines(p, 2, f"ready {attempt} ")
            workers = {int(x[3]) for x in ready}
            assert all(b"fileno=0" in cmdline(w) for w in workers)  # forked, not exec'd
            (server,) = [c for c in children_of(p.pid)
                         if c not in workers and b"fileno=0" in cmdline(c)]
            warm.append((server, start_time(server)))
            (tmp / f"go{attempt}").touch()
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 0, err.decode()
    assert b"restarting, attempt 1 of 1" in err
    assert warm[0] == warm[1], warm
    assert b"warm process" not in err, err.decode()


@pytest.mark.once("whether trun's loop runs while the warm process imports is trun's own logic, "
                  "whatever module it imports")
def test_the_agent_answers_while_the_warm_process_imports(tmp):
    # Issue 30: the agent used to wait for the warm process's imports in its
    # first worker start, its loop blocked, so /health, signals and the
    # rendezvous store it hosts went silent (torch 2.x's import took 20-37 s
    # on a loaded machine, and the other nodes took the host for lost).
    from test_observability import Agent
    (tmp / "slow_import.py").write_text("import time\ntime.sleep(8)\n")
    script = tmp / "w.py"
    script.write_text("print('ran', flush=True)\n")
    a = Agent(*WARM, "--health-check-port", 0, "--health-check-addr", "127.0.0.1", script,
              env=base_env(TRUN_WARM_IMPORTS="slow_import", PYTHONPATH=str(tmp)))
    try:
        answers = []  # (seconds the answer took, the group's state)
        while a.p.poll() is None:
            asked = time.monotonic()
            try:
                _, body = a.health()
            except OSError:
                break  # trun has ended
            answers.append((time.monotonic() - asked, body["state"]))
            time.sleep(0.2)
        assert a.wait() == 0, "".join(a.err)
    finally:
        a.kill()
    waiting = [took for took, state in answers if state == "INIT"]
    # 8 s of imports: many answers meanwhile, each far quicker than the
    # imports (a blocked loop answers only once they are done).
    assert len(waiting) >= 5, answers
    assert max(took for took, _ in answers) < 4, answers
