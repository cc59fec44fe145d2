"""Shared helpers: run build/trun (and torch 1.13's torchrun) as a user would."""
import json
import os
import pathlib
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLES = ROOT / "examples"
PYTHON = os.environ.get("PYTHON_EXEC", "/usr/bin/python3")
TRUN = os.environ.get("TRUN", str(ROOT / "build" / "trun"))


PROBED = "TRUN_TESTS_TORCH_PROBED"


def _probe_torch():
    """(major, minor) of PYTHON's torch, whether its TCPStore has libuv, and
    whether it sees a CUDA device and NCCL. Asked once per run: pytest-xdist's
    workers, started by the process that asked first, find the answer in
    their environment (a torch 2.x import is 3 s of CPU, four times over at
    the start of a pass)."""
    known = os.environ.get(PROBED, "").split(" ", 3)
    if len(known) == 4 and known[3] == PYTHON:
        version, uv, cuda, _ = known
    else:
        version, uv, cuda = _ask_torch().split()
        os.environ[PROBED] = f"{version} {uv} {cuda} {PYTHON}"
    return tuple(int(x) for x in version.split(".")[:2]), uv == "1", cuda == "1"


def _ask_torch():
    code = ("import datetime, torch, torch.distributed as d\n"
            "try:\n"
            "    d.TCPStore('127.0.0.1', 0, 1, True, datetime.timedelta(seconds=5), use_libuv=True)\n"
            "    uv = 1\n"
            "except (RuntimeError, TypeError):  # 1.13: no use_libuv argument at all\n"
            "    uv = 0\n"
            "cuda = int(torch.cuda.is_available() and d.is_nccl_available())\n"
            "print(torch.__version__.split('+')[0], uv, cuda)")
    r = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True)
    if r.returncode != 0:  # say why, or CI's log shows only an exit status
        raise RuntimeError(f"{PYTHON} cannot run torch (exit {r.returncode}):\n{r.stderr}")
    return r.stdout.strip()


# The suite runs once per torch generation (Makefile: integration-test), each
# time with PYTHON_EXEC naming that generation's interpreter; tests that must
# differ by generation read TORCH_VERSION.
TORCH_VERSION, TORCH_HAS_LIBUV, TORCH_HAS_CUDA_NCCL = _probe_torch()
TORCH2 = TORCH_VERSION >= (2, 0)
# torch 1.13's torchrun needs a patch on Python 3.11 (tools/torchrun113).
TORCHRUN = ([PYTHON, "-m", "torch.distributed.run"] if TORCH2
            else [PYTHON, str(ROOT / "tools" / "torchrun113")])


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "once(reason): runs in the torch 1.13 pass only (Makefile: the 2.x pass "
        "deselects it with -m 'not once'); the reason says why torch 2.x would test nothing "
        "more")
    config.addinivalue_line(
        "markers", "timing(reason): asserts how fast trun does something; runs after the "
        "parallel tests, alone (Makefile), so that it measures trun, not the other tests")
    config.addinivalue_line(
        "markers", "attack: an attack on the job token or a port (test_attacks.py); the run's "
        "summary says how many were tried")


# The files that cost a pass the most work, most first (the per-file table
# `make test` prints, scripts/slowest-files.py; measured 2026-11-27, both
# passes). pytest-xdist's --dist loadfile hands files to its workers in
# collection order and keeps a file on one worker, so a long file collected
# late runs on alone after the others are done: these start first.
HEAVY_FILES = ["test_multinode.py", "test_warm_launch.py", "test_attacks.py",
               "test_warm_failures.py", "test_slurm.py", "test_etcd.py", "test_warm.py",
               "test_python_api.py", "test_torchrun2_flags.py", "test_launch.py",
               "test_kubernetes_api.py"]


def pytest_collection_modifyitems(items):
    """Every `once` and `timing` names its reason: a test left out of a pass,
    or of the parallel run, says why. The heavy files come first (HEAVY_FILES),
    the rest in their order; every xdist worker sorts alike."""
    for item in items:
        for name in ("once", "timing"):
            for m in item.iter_markers(name):
                if not (m.args or m.kwargs.get("reason")):
                    raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{name} needs a reason")
    rank = {name: i for i, name in enumerate(HEAVY_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVY_FILES)))


def _cpu_seconds():
    """CPU this pytest process and the children it reaped have used: a
    test's trun and, through it, its workers (each reaps its own)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


_CPU_AT_SETUP = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_CPU_AT_SETUP] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each test's CPU (setup, call and teardown) as the property `cpu` of
    the JUnit XML, beside its time: scripts/slowest-files.py sums both per
    file, and the ratio says whether a pass waits or computes (issue 26).
    Daemons a test leaves to others (slurmd's job steps) are not counted."""
    if call.when == "teardown" and _CPU_AT_SETUP in item.stash:
        item.user_properties.append(("cpu", f"{_cpu_seconds() - item.stash[_CPU_AT_SETUP]:.2f}"))
    yield


def pytest_terminal_summary(terminalreporter):
    tried = [r for key in ("passed", "failed", "error")
             for r in terminalreporter.stats.get(key, [])
             if getattr(r, "when", "call") == "call" and "attack" in r.keywords]
    if tried:
        failed = sum(1 for r in tried if r.outcome != "passed")
        terminalreporter.write_line(f"attacks tried: {len(tried)}, job unchanged in "
                                    f"{len(tried) - failed}")


def pytest_report_header(config):
    return f"torch {'.'.join(map(str, TORCH_VERSION))} at {PYTHON} (libuv: {TORCH_HAS_LIBUV})"


def base_env(**extra):
    env = dict(os.environ)
    env["PYTHON_EXEC"] = PYTHON
    # Nothing of the caller's worker-facing settings may leak into a case.
    for k in list(env):
        if k.startswith("PET_") or k in ("OMP_NUM_THREADS", "TORCHELASTIC_ERROR_FILE",
                                          "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"):
            del env[k]
    # A torch 2.x built without libuv (Debian's) needs USE_LIBUV=0 in every
    # process that makes a TCPStore through env:// or torchrun's static store:
    # what docs/cli.md tells users to set. Tests of that failure unset it.
    env.pop("USE_LIBUV", None)
    env.pop(PROBED, None)
    if TORCH2 and not TORCH_HAS_LIBUV:
        env["USE_LIBUV"] = "0"
    # Tests run side by side (pytest-xdist): torch 1.13's torchrun takes its
    # fixed ports in turn (tools/torchrun113). The ports are the host's, so
    # the lock is too.
    env["TORCHRUN113_PORT_LOCK"] = "/tmp/trun-tests-torchrun113-ports.lock"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run(cmd, timeout=120, env=None, **kw):
    """Runs a command to completion; output as bytes-decoded text."""
    return subprocess.run(cmd, capture_output=True, timeout=timeout, env=env or base_env(), **kw)


def trun(*args, timeout=120, env=None, **kw):
    r = run([TRUN, *map(str, args)], timeout=timeout, env=env, **kw)
    r.out = r.stdout.decode(errors="replace")
    r.err = r.stderr.decode(errors="replace")
    return r


def torchrun(*args, timeout=180, env=None):
    env = dict(env or base_env())
    if TORCH2:
        # Inside the root, as a user of that torch runs it: sys.executable is
        # its python (torchrun 2.x names a failed job after PYTHON_EXEC when
        # that differs from sys.executable).
        env.pop("PYTHON_EXEC", None)
    cmd = [*TORCHRUN, *map(str, args)]
    try:
        r = run(cmd, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        # The peer, not trun: torch 1.13's torchrun --standalone once stayed
        # 180 s after its workers had printed their results, hosting its own
        # store (CI, 2026-11-27). A comparison needs its answer, so it runs
        # once more, and says so.
        print(f"torchrun {' '.join(map(str, args))}: no exit in {timeout} s; once more. "
              f"Its output: {e.stdout!r} {e.stderr!r}", file=sys.stderr)
        r = run(cmd, timeout=timeout, env=env)
    if r.returncode != 0 and b"errno: 98 - Address already in use" in r.stderr:
        # The peer's own port race (torch #85604): its agent picks
        # the workers' MASTER_PORT by binding port 0 and closing it, and
        # rank 0 binds it seconds later, after its imports; beside the other
        # tests' connections the kernel handed it out meanwhile (seen with
        # torch 1.13's --standalone). trun's ports cannot race so
        # (test_launch.py's restart test asserts it); the comparison needs
        # torchrun's answer, so it runs once more, and says so.
        print(f"torchrun {' '.join(map(str, args))}: its port was taken; once more. "
              f"Its output: {r.stderr!r}", file=sys.stderr)
        r = run(cmd, timeout=timeout, env=env)
    r.out = r.stdout.decode(errors="replace")
    r.err = r.stderr.decode(errors="replace")
    return r


def worker(*actions):
    """The command line tail that runs tests/fixtures/worker.py with actions."""
    return [str(FIXTURES / "worker.py"), *actions]


def read_events(path):
    """The events of a JSON-lines file (--event-log-file)."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def live_processes_with(token):
    """Pids of running (not zombie) processes whose argv or environment holds token."""
    found = []
    for p in pathlib.Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            if (p / "stat").read_text().split(") ")[1].startswith("Z"):
                continue
            blob = (p / "cmdline").read_bytes() + (p / "environ").read_bytes()
        except (OSError, IndexError):
            continue
        if token.encode() in blob:
            found.append(int(p.name))
    return found


def read_until_hangup(fd):
    """Everything a pseudo-terminal's master `fd` still holds, up to the
    other side's hang-up, as text."""
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the terminal's other side is gone
            break
        if not chunk:
            break
        out += chunk
    return out.decode(errors="replace")


def _ephemeral_low():
    try:
        return int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _worker_ports(ports):
    """This pytest-xdist worker's share of `ports`: each worker picks from
    its own, so that two tests of one pass running side by side never get
    the same port (each worker remembers only the ports it handed out)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count <= 1:
        return ports
    share = len(ports) // count
    # A worker started again in a dead one's place counts on (gw3 of 3).
    start = ports.start + int(worker[2:]) % count * share
    return range(start, start + share)


# Ports free_port() may pick: below the kernel's ephemeral range, and below
# 29400 (trun's and torch's default ports, which some tests leave as they
# are), this worker's share of them.
_PORTS = _worker_ports(range(20000, min(29000, _ephemeral_low())))
_handed_out = set()


def free_port():
    """A port nothing listens on, for a server a test starts later. Not one
    from bind(0): the kernel hands those out again to any process's next
    connect() or bind(0), so one could be taken before the test's server
    binds it (seen in CI: srun's message socket took the port given as a job's
    --rdzv_port, and its agents knocked on srun's door until the test gave
    up). Picked at random from below the ephemeral range, where neither can
    happen, and checked free on every address."""
    if not _PORTS:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    while True:
        port = random.choice(_PORTS)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port


class Agent:
    """One trun agent (or, with exe=TORCHRUN, a torchrun) in the background,
    its output in a file."""

    def __init__(self, tmp, name, *args, prefix=(), exe=(TRUN,)):
        self.name = name
        self.path = tmp / f"{name}.log"
        self.file = open(self.path, "wb")
        self.proc = subprocess.Popen([*prefix, *exe, *map(str, args)], stdout=self.file,
                                     stderr=subprocess.STDOUT, env=base_env())

    def text(self):
        return self.path.read_text(errors="replace")

    def wait_for(self, pattern, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(pattern, self.text())
            if m:
                return m
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{self.name}: no /{pattern}/ in:\n{self.text()}")

    def wait(self, timeout=120):
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.file.close()

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def agents(tmp_path):
    started = []

    def start(name, *args, prefix=(), exe=(TRUN,)):
        a = Agent(tmp_path, name, *args, prefix=prefix, exe=exe)
        started.append(a)
        return a

    yield start
    for a in started:
        if a.proc.poll() is None:
            a.proc.kill()
            a.proc.wait()


NETNS = ROOT / "tools" / "netns-hosts"


def kill_one_of_two(agents, args, hosting, victim, context=lambda: ""):
    """Two agents running tests/fixtures/elastic_train.py with `args`, the
    first started alone until its log says `hosting`; once they train
    together, kill -9 of the first ("host") or the second ("ordinary").
    Returns the survivor, its first step line in the world of 1, the seconds
    from the kill to that line, and the seconds the first round took from the
    second agent's start to its first step: the workers' start-up on this
    machine at this moment, which a test's bound on the recovery allows for
    (the side-by-side passes of `make test` make it 3 times a quiet
    machine's). Should the survivor not recover, the failure shows what the
    dead agent printed, `context()` and where the survivor's threads are."""
    first = agents("first", *args)
    first.wait_for(hosting)
    started_at = time.time()
    second = agents("second", *args)
    first.wait_for(r"attempt 0 world 2 step 1\b")
    startup = time.time() - started_at
    first.wait_for(r"attempt 0 world 2 step 5")
    dead, survivor = (second, first) if victim == "ordinary" else (first, second)
    killed_at = time.time()
    dead.kill()
    try:
        m = survivor.wait_for(r"attempt (\d+) world 1 step (\d+)")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{dead.name} (killed):\n{dead.text()}\n{context()}"
                             f"{threads_of(survivor)}") from None
    return survivor, m, time.time() - killed_at, startup


def threads_of(agent):
    """Where each thread of a live agent is (gdb's backtraces), for a test
    that found it stuck; empty where gdb is missing or the agent ended."""
    if agent.proc.poll() is not None or not shutil.which("gdb"):
        return ""
    try:
        r = subprocess.run(["gdb", "-p", str(agent.proc.pid), "-batch", "-ex",
                            "thread apply all bt"], capture_output=True, text=True, timeout=60)
    except (subprocess.TimeoutExpired, OSError) as e:
        return f"\nthe threads of {agent.name}: gdb failed: {e}"
    return f"\nthe threads of {agent.name}:\n{r.stdout}{r.stderr[-2000:]}"


@pytest.fixture
def hosts():
    """Three hosts in network namespaces (10.200.0.1, .2, .3), for root only."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("network namespaces need root and iproute2")
    env = dict(os.environ, NETNS_PREFIX=f"t{os.getpid()}")
    subprocess.run([NETNS, "down"], env=env, check=False, capture_output=True)
    subprocess.run([NETNS, "up", "3"], env=env, check=True)

    class Hosts:
        def run(self, i):
            return [NETNS, "run", str(i)]

        def cut(self, i):
            subprocess.run([NETNS, "cut", str(i)], env=env, check=True)

    os.environ["NETNS_PREFIX"] = env["NETNS_PREFIX"]
    yield Hosts()
    subprocess.run([NETNS, "down"], env=env, check=False)
    del os.environ["NETNS_PREFIX"]


@pytest.fixture
def tmp(tmp_path):
    return tmp_path


sys.path.insert(0, str(pathlib.Path(__file__).parent))
