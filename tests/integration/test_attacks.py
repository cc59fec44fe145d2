"""Issue 25, the attack suite: every way in that a process without the job
token might try, each with the job's outcome asserted unchanged.

Each attack is marked `attack`; the run's summary line says how many were
tried (conftest.py). Sections: the store and the rendezvous (admission,
forged rounds, guessing, replays, frames, slow clients, squatters, hosts
outside the job), then the agent's other ports and what a worker can see
(the launcher's port, the health port, the token's exposure)."""
import hashlib
import json
import os
import pathlib
import pwd
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import uuid

import pytest

from conftest import PYTHON, ROOT, TRUN, base_env
from test_observability import until
from test_python_api import ssh_config, ssh_kwargs  # noqa: F401 (a fixture)

pytestmark = pytest.mark.attack

# ---------------------------------------------------------------------------
# The store and the rendezvous.

# ---------------------------------------------------------------------------
# The launcher's port, the health port, and what a worker can see.

# A small DDP training, the job every attack below runs beside: its ranks wait
# for CTL/go (so the attack happens while the job runs), train, and report
# their parameters' digest and restart count. A script for trun, and a
# function (train) for the Python launcher.
TRAIN = r'''
import hashlib, os, pathlib, sys, time


def train(ctl):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    ctl = pathlib.Path(ctl)
    (ctl / f"up.{rank}").write_text(os.environ.get("TRUN_LAUNCHER", ""))
    deadline = time.monotonic() + 240
    while not (ctl / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        torch.manual_seed(100 + rank)
        loss = model(torch.randn(16, 8)).pow(2).sum()
        opt.zero_grad(); loss.backward(); opt.step()
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                     for p in model.parameters())).hexdigest()
    return {"digest": digest, "restarts": int(os.environ["TORCHELASTIC_RESTART_COUNT"]),
            "hf": os.environ.get("HF_TOKEN", "")}


if __name__ == "__main__":
    r = train(sys.argv[1])
    # One write per line: the two ranks share trun's stdout, unbuffered.
    sys.stdout.write(f"RESULT {r['digest']} {r['restarts']}\n")
'''
MiB = 1 << 20


def _kib(pid, field):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def _job_dir(tmp_path):
    (tmp_path / "train_job.py").write_text(TRAIN)
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    return ctl


def _start_trun(tmp_path, *flags):
    ctl = _job_dir(tmp_path)
    p = subprocess.Popen([TRUN, "--standalone", "--nproc-per-node", "2", *flags,
                          str(tmp_path / "train_job.py"), str(ctl)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=base_env(), cwd=tmp_path)
    return p, ctl


def _beside(p, ctl, attack, result):
    """Once both ranks wait, attack() (its value is returned), then the job
    trains: (that value, result(p))."""
    try:
        until(lambda: (ctl / "up.0").exists() and (ctl / "up.1").exists(), "both ranks", 120)
        value = attack()
        (ctl / "go").touch()
        return value, result(p)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _trun_result(p):
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, err
    assert "restarting" not in err, err
    found = sorted(re.findall(r"RESULT ([0-9a-f]{64}) (\d+)", out))
    assert len(found) == 2 and len({d for d, _ in found}) == 1, out + err
    return found[0][0], {int(r) for _, r in found}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The digest of the training when nobody attacks it."""
    tmp = tmp_path_factory.mktemp("baseline")
    p, ctl = _start_trun(tmp)
    (ctl / "go").touch()
    digest, restarts = _trun_result(p)
    assert restarts == {0}
    return digest


def _closed_by_peer(sock, within):
    """Whether the peer closed sock within `within` seconds (what it sent
    before is read and dropped)."""
    sock.settimeout(within)
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False
    return False


def _stream(addr, head, total, chunk=MiB):
    """Sends head, then up to `total` bytes of filler: whether the peer
    closed the connection (while they were sent, or within 15 s after)."""
    with socket.create_connection(addr, timeout=30) as s:
        s.sendall(head)
        try:
            for _ in range(0, total, chunk):
                s.sendall(b"a" * chunk)
        except (BrokenPipeError, ConnectionResetError):
            return True
        except socket.timeout:
            return False  # it stopped reading but kept the connection
        return _closed_by_peer(s, 15)


def _slow(addr, data, limit=20.0):
    """Sends data one byte a second: seconds until the peer closed the
    connection (None: still open after `limit`)."""
    start = time.monotonic()
    with socket.create_connection(addr, timeout=30) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for b in data:
            if time.monotonic() - start > limit:
                return None
            try:
                s.sendall(bytes([b]))
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - start
            if _closed_by_peer(s, 1.0):
                return time.monotonic() - start
    return None


def _truncated(addr, frames):
    """Each frame on a connection of its own, which is then half-closed: the
    frames whose connection the peer did not close."""
    still_open = []
    for f in frames:
        with socket.create_connection(addr, timeout=30) as s:
            s.sendall(f)
            s.shutdown(socket.SHUT_WR)
            if not _closed_by_peer(s, 15):
                still_open.append(f[:40])
    return still_open


def _http_status(addr, path="/health"):
    with socket.create_connection(addr, timeout=30) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    return int(reply.split(b" ", 2)[1])


HEALTH_ATTACKS = {
    # A head that never ends: past its limit the server answers 431 and
    # closes, at the latest at the exchange's deadline.
    "oversized": lambda a: _stream(a, b"GET /health HTTP/1.1\r\nX-Big: ", 64 * MiB),
    "truncated": lambda a: _truncated(a, [b"GET /hea", b"GET /health HTTP/1.1\r\nHost: x",
                                          b"\x16\x03\x01\x00\xa5\x01\x00"]) == [],
    # The whole exchange has one deadline (5 s).
    "slow": lambda a: (_slow(a, b"GET /health HTTP/1.1\r\nX-Slow: " + b"a" * 100) or 99) < 15,
}


@pytest.mark.parametrize("attack", sorted(HEALTH_ATTACKS))
def test_health_port_attack_leaves_the_job_unchanged(tmp_path, trained, attack):
    """Oversized, truncated and slow requests on the agent's health port:
    each is dropped, the port still answers, the job trains the same
    parameters without a restart, and trun's RSS grows 16 MiB or less."""
    p, ctl = _start_trun(tmp_path, "--health-check-port", "0", "--health-check-addr", "127.0.0.1")
    port = None

    def health_port():
        nonlocal port
        line = p.stderr.readline()
        m = re.search(r"health check at http://[^ ]*:(\d+)/health", line)
        port = int(m.group(1)) if m else None
        return port or not line

    def strike():
        until(health_port, "the health port", 60)
        assert port, "no health port in trun's log"
        before = _kib(p.pid, "VmRSS")
        assert HEALTH_ATTACKS[attack](("127.0.0.1", port)), attack
        assert _http_status(("127.0.0.1", port)) == 200
        return _kib(p.pid, "VmHWM") - before

    grown, (digest, restarts) = _beside(p, ctl, strike, _trun_result)
    assert (digest, restarts) == (trained, {0})
    assert grown <= 16 * 1024, f"trun grew {grown} KiB"


def _hello(token="x" * 32, **fields):
    body = json.dumps({"token": token, "rank": 0, "attempt": 0, "host_index": 0, **fields})
    return struct.pack("!BQ", 1, len(body)) + body.encode()


LAUNCHER_ATTACKS = {
    # The 9-byte header that claimed 1 GiB, then bytes to fill it.
    "oversized": lambda a: _stream(a, struct.pack("!BQ", 1, 1 << 30), 64 * MiB),
    "truncated": lambda a: _truncated(a, [
        _hello()[:20],                                  # cut short
        _hello(),                                       # the wrong token
        struct.pack("!BQ", 3, 5) + b"12345",            # a RESULT first
        struct.pack("!BQ", 1, 7) + b"[1,2,3]",          # not an object
        struct.pack("!BQ", 1, 4) + b"\xff\xfe{{",       # not JSON
        _hello(token="\u00e9" * 32),                    # not ASCII
    ]) == [],
    # A hello has 10 s in all.
    "slow": lambda a: (_slow(a, _hello()) or 99) < 16,
}

LAUNCH = """
import json, sys
import trun
from train_job import train
r = trun.Launcher(hostnames={hosts!r}, workers_per_host=2, backend="gloo", agent_timeout=120,
                  {extra}).run(train, {ctl!r})
print("RESULT", json.dumps(r.by_ranks()), flush=True)
"""


def _start_launcher(tmp_path, hosts=("localhost",), extra="", **env):
    ctl = _job_dir(tmp_path)
    (tmp_path / "launch.py").write_text(LAUNCH.format(hosts=list(hosts), extra=extra,
                                                      ctl=str(ctl)))
    p = subprocess.Popen([PYTHON, str(tmp_path / "launch.py")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                         env=base_env(PYTHONPATH=str(ROOT / "python"), TRUN_BINARY=TRUN,
                                      TRUN_LOG_DIR=str(tmp_path / "logs"), **env))
    return p, ctl


def _launcher_result(p):
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, out + err
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    ranks = json.loads(line[len("RESULT "):])
    assert len(ranks) == 2 and len({r["digest"] for r in ranks}) == 1, ranks
    return ranks


@pytest.mark.parametrize("attack", sorted(LAUNCHER_ATTACKS))
def test_launcher_port_attack_leaves_the_job_unchanged(tmp_path, trained, attack):
    """Oversized, truncated and bad first frames and a slow client on the
    Python launcher's port: each connection is dropped before the launcher
    allocates for it, the job trains the same parameters without a restart,
    and the launcher's RSS grows 16 MiB or less."""
    p, ctl = _start_launcher(tmp_path)

    def strike():
        host, port = (ctl / "up.0").read_text().rsplit(":", 1)
        before = _kib(p.pid, "VmRSS")
        assert LAUNCHER_ATTACKS[attack]((host, int(port))), attack
        return _kib(p.pid, "VmHWM") - before

    grown, ranks = _beside(p, ctl, strike, _launcher_result)
    assert [(r["digest"], r["restarts"]) for r in ranks] == [(trained, 0)] * 2
    assert grown <= 16 * 1024, f"the launcher grew {grown} KiB"


def test_no_command_line_shows_a_secret_of_a_launch_over_ssh(tmp_path, trained, ssh_config):
    """The launcher's token, the job token and a copied variable (HF_TOKEN)
    on their way to an SSH host: while the job runs, no process's command
    line (what `ps` shows every user) holds one, and the remote workers get
    HF_TOKEN; the job trains the same parameters."""
    job_token, hf_token = uuid.uuid4().hex * 2, f"hf_{uuid.uuid4().hex}"
    p, ctl = _start_launcher(tmp_path, hosts=("trun-host-1",), extra=ssh_kwargs(ssh_config),
                             TRUN_JOB_TOKEN=job_token, HF_TOKEN=hf_token)

    def ps():
        shown = []
        for cmdline in pathlib.Path("/proc").glob("[0-9]*/cmdline"):
            try:
                text = cmdline.read_bytes()
            except OSError:
                continue
            shown += [cmdline.parent.name for s in (job_token, hf_token) if s.encode() in text]
        return shown

    shown, ranks = _beside(p, ctl, ps, _launcher_result)
    assert shown == []
    assert [(r["digest"], r["restarts"], r["hf"]) for r in ranks] == [(trained, 0, hf_token)] * 2


# A worker hunting for the job token (whose SHA-256 is argv[1]; tokens look
# like tok-<32 hex>): in its environment, argv and open files, and in the
# environ and cmdline of every process it can read, its agent's included.
HUNT = r'''
import hashlib, os, re, sys
want = sys.argv[1]
pattern = re.compile(rb"tok-[0-9a-f]{32}")
found, read = [], 0
def look(where, blob):
    global read
    read += 1
    found.extend(where for m in pattern.findall(blob)
                 if hashlib.sha256(m).hexdigest() == want)
look("os.environ", "\0".join(f"{k}={v}" for k, v in os.environ.items()).encode())
look("sys.argv", "\0".join(sys.argv).encode())
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
        if os.path.isfile(target):
            look(f"fd {fd} ({target})", open(target, "rb").read(1 << 20))
    except OSError:
        pass
agent_environ = "unreadable"
for pid in filter(str.isdigit, os.listdir("/proc")):
    for name in ("environ", "cmdline"):
        try:
            blob = open(f"/proc/{pid}/{name}", "rb").read()
        except OSError:
            continue
        look(f"/proc/{pid}/{name}", blob)
        if pid == str(os.getppid()) and name == "environ":
            agent_environ = "read"
sys.stdout.write(f"HUNT uid={os.getuid()} read={read} ppid_environ={agent_environ} "
                 f"found={found}\n")
'''


@pytest.mark.parametrize("start", ["cold", "warm"])
def test_a_non_root_worker_finds_the_token_nowhere(start):
    """trun and its workers as user nobody, the job token in trun's
    environment: a worker (a cold one, or one forked by the warm process)
    finds the token neither in its environment, argv or files, nor in any
    /proc/*/environ or cmdline it can read; its agent's environ is closed to
    it (the agent is not dumpable)."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to run trun as another user")
    token = f"tok-{uuid.uuid4().hex}"
    d = pathlib.Path(tempfile.mkdtemp(prefix="trun-hunt-"))
    try:
        d.chmod(0o755)
        (d / "hunt.py").write_text(HUNT)
        (d / "hunt.py").chmod(0o644)
        warm = ["--start-method", "forkserver"] if start == "warm" else []
        # The hunt needs no torch: the system's python runs it in both passes
        # (the torch 2 root's is entered with chroot, which nobody may do).
        env = base_env(PYTHON_EXEC="/usr/bin/python3", TRUN_JOB_TOKEN=token, TRUN_WARM_IMPORTS="",
                       HOME=str(d))
        r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                            TRUN, "--standalone", "--nproc-per-node", "2", *warm, "--log-dir",
                            "/dev/null", str(d / "hunt.py"),
                            hashlib.sha256(token.encode()).hexdigest()],
                           capture_output=True, text=True, timeout=120, env=env, cwd=d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    assert r.returncode == 0, r.stderr
    hunts = re.findall(r"HUNT uid=(\d+) read=(\d+) ppid_environ=(\w+) found=(\[[^]]*\])", r.stdout)
    assert len(hunts) == 2, r.stdout + r.stderr
    nobody = pwd.getpwnam("nobody").pw_uid
    for uid, read, ppid_environ, found in hunts:
        assert (int(uid), found) == (nobody, "[]"), hunts
        assert int(read) >= 6, hunts   # its own files at least: the hunt ran
        if start == "cold":
            assert ppid_environ == "unreadable", hunts
