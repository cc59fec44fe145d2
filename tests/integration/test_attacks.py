"""Issue 25, the attack suite: every way in that a process without the job
token might try, each with the job's outcome asserted unchanged.

Each attack is marked `attack`; the run's summary line says how many were
tried (conftest.py). Sections: the store and the rendezvous (admission,
forged rounds, guessing, replays, frames, slow clients, squatters, hosts
outside the job), then the agent's other ports and what a worker can see
(the launcher's port, the health port, the token's exposure)."""
import hashlib
import hmac
import json
import os
import pathlib
import pwd
import re
import secrets
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import uuid

import pytest

from conftest import FIXTURES, PYTHON, ROOT, TRUN, Agent, base_env, free_port, trun
from test_observability import until
from test_python_api import ssh_config, ssh_kwargs  # noqa: F401 (a fixture)

pytestmark = pytest.mark.attack

# ---------------------------------------------------------------------------
# The store and the rendezvous.
#
# Most attacks share one token-protected job (two c10d agents on loopback
# training tests/fixtures/elastic_train.py): each checks that its connection
# was refused or closed and that the job still trains in its first attempt;
# the job's outcome (exit 0, one RESULT line, no restart, each agent's RSS
# grown 16 MiB or less) is checked once, when the module is done with it.

ELASTIC = FIXTURES / "elastic_train.py"
TOKEN = "attack-token-" + "5a" * 16
RUN = "atk"
STEPS = 600
MAGIC = 0x3C85F7CE
RSS_BUDGET = 16 << 20
FILES = 4096


def b(s):
    s = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(s)) + s


def i64(n):
    return struct.pack("<q", n)


def keys(*ks):
    return struct.pack("<Q", len(ks)) + b"".join(b(k) for k in ks)


def proof(nonce):
    return hmac.new(TOKEN.encode(), b"trun-job-token-v1\n" + nonce.encode(),
                    hashlib.sha256).hexdigest()


class Raw:
    """A raw TCPStore client (docs/store-protocol.md), for the bytes no
    torch client sends. v2 unless told: VALIDATE first."""

    def __init__(self, port, host="127.0.0.1", v2=True, timeout=10):
        self.s = socket.create_connection((host, port), timeout=timeout)
        if v2:
            self.s.sendall(b"\x00" + struct.pack("<I", MAGIC))

    def send(self, data):
        self.s.sendall(data)

    def read(self, n):
        data = b""
        while len(data) < n:
            got = self.s.recv(n - len(data))
            if not got:
                raise ConnectionError("closed")
            data += got
        return data

    def read_bytes(self):
        return self.read(struct.unpack("<Q", self.read(8))[0]).decode(errors="replace")

    def compare_set(self, key, expected, desired):
        self.send(bytes([2]) + b(key) + b(expected) + b(desired))
        return self.read_bytes()

    def closed(self, timeout=10):
        """Whether the store closes the connection within `timeout` without
        a byte of answer."""
        self.s.settimeout(timeout)
        try:
            return self.s.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self):
        self.s.close()


def status_bytes(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(rf"{field}:\s+(\d+) kB", f.read()).group(1)) << 10


def reset_peak(pid):
    """Starts VmHWM (the peak RSS) again from the RSS now, so that the peak
    read later is that of what happened since, not of start-up: a burst
    between two samples cannot hide. Returns the RSS now."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # the peak then includes start-up: it overstates, never hides
    return status_bytes(pid, "VmRSS")


class TokenAgent(Agent):
    """An agent whose environment holds the job token (and PET_* none)."""

    def __init__(self, tmp, name, *args, token=TOKEN, prefix=()):
        self.name = name
        self.path = tmp / f"{name}.log"
        self.file = open(self.path, "wb")
        self.proc = subprocess.Popen([*prefix, TRUN, *map(str, args)], stdout=self.file,
                                     stderr=subprocess.STDOUT,
                                     env=base_env(TRUN_JOB_TOKEN=token))


class Job:
    """The shared job: its port, its two agents (host first), and each
    agent's RSS when the current attack began: still_training() checks the
    peak since then (VmHWM), then starts the next attack's."""

    def __init__(self, tmp):
        self.port = free_port()
        self.hurry = tmp / "hurry"
        args = ["--nnodes", 2, "--nproc-per-node", 1, "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", RUN,
                ELASTIC, "--steps", STEPS, "--step-time", 0.1, "--hurry", self.hurry]
        # An open-file limit of 4,096, as many hosts have: the store's cap on
        # connections (that less an eighth) is within a flood's reach.
        limit = ("prlimit", f"--nofile={FILES}:{FILES}")
        self.host = TokenAgent(tmp, "host", *args, "--ckpt", tmp / "c0.pt", prefix=limit)
        self.host.wait_for("hosting the store")
        self.other = TokenAgent(tmp, "other", *args, "--ckpt", tmp / "c1.pt", prefix=limit)
        self.agents = (self.host, self.other)
        self.host.wait_for(r"attempt 0 world 2 step 3", timeout=180)
        self.rss0 = [reset_peak(a.proc.pid) for a in self.agents]
        self.grown = [0, 0]  # the most an attack's peak grew over its start
        self.ckpts = [tmp / "c0.pt", tmp / "c1.pt"]

    def key(self, name):
        return f"/trun/rdzv/{RUN}/{name}"

    def text(self):
        return self.host.text() + self.other.text()

    def step(self):
        return max([0] + [int(s) for s in re.findall(r"attempt 0 world 2 step (\d+)",
                                                      self.host.text())])

    def still_training(self, rss_budget=RSS_BUDGET):
        """The attack changed nothing: both agents run, the workers are in
        their first attempt and still step forward, and neither agent's
        peak RSS grew more than `rss_budget` during the attack."""
        grown = []
        for i, a in enumerate(self.agents):
            assert a.proc.poll() is None, self.text()
            grown.append(status_bytes(a.proc.pid, "VmHWM") - self.rss0[i])
            self.grown[i] = max(self.grown[i], grown[i])
            # The next attack's peak starts now, whether or not this one's
            # check below passes: a failed check must not fail the next.
            self.rss0[i] = reset_peak(a.proc.pid)
        for a, g in zip(self.agents, grown):
            assert g <= rss_budget, f"{a.name}: peak RSS grew {g >> 10} KiB under attack"
        assert "restarting the worker group" not in self.text(), self.text()
        before = self.step()
        assert before < STEPS, "the shared job ended before the attacks did: raise STEPS"
        self.host.wait_for(rf"attempt 0 world 2 step {before + 1}\b", timeout=60)

    def refusals(self, what):
        return self.host.text().count(what)


def test_a_squatter_on_the_endpoints_port_is_named(tmp_path):
    # torch's own TCPStore server holds the port the job's agents expect
    # their store on: each agent stops, naming the cause, within seconds.
    port = free_port()
    squatter = subprocess.Popen(
        [PYTHON, "-c", "import datetime, sys, time\n"
         "from torch.distributed import TCPStore\n"
         "s = TCPStore('127.0.0.1', int(sys.argv[1]), is_master=True, wait_for_workers=False,"
         " timeout=datetime.timedelta(seconds=300))\n"
         "print('listening', flush=True)\n"
         "time.sleep(300)\n", str(port)],
        stdout=subprocess.PIPE, text=True, env=base_env())
    try:
        assert squatter.stdout.readline().strip() == "listening"
        args = ["--nnodes", 2, "--nproc-per-node", 1, "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "sq",
                ELASTIC, "--steps", 3, "--ckpt", tmp_path / "c.pt"]
        a = [TokenAgent(tmp_path, f"a{i}", *args) for i in range(2)]
        t0 = time.time()
        codes = [x.wait(timeout=90) for x in a]
        took = time.time() - t0
    finally:
        squatter.kill()
        squatter.wait()
    out = a[0].text() + a[1].text()
    assert all(c != 0 for c in codes), out
    for x in a:
        assert re.search(rf"the store at 127\.0\.0\.1:{port} does not know the job token.*"
                         r"another process holds the port\?", x.text()), x.text()
    assert took < 60, (took, out)
    assert "RESULT" not in out and TOKEN not in out


def test_a_one_node_c10d_job_given_no_token_makes_its_own(tmp_path):
    # Found by review: a job of one node at a c10d endpoint had no token, so
    # any local process could list its round and end it with BARRIER, past
    # --max-restarts 0. With nobody to share a token with, the agent makes
    # one: both requests are closed and the job runs on unchanged.
    port = free_port()
    agent = Agent(tmp_path, "solo", "--nnodes", 1, "--nproc-per-node", 1, "--rdzv-backend",
                  "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "solo",
                  "--max-restarts", 0, ELASTIC, "--steps", 30, "--step-time", 0.1,
                  "--ckpt", tmp_path / "c.pt")
    try:
        agent.wait_for(r"attempt 0 world 1 step 3", timeout=120)
        listing = Raw(port)
        listing.send(bytes([17]))  # LIST_KEYS: trun's keys left out
        count = struct.unpack("<Q", listing.read(8))[0]
        names = [listing.read_bytes() for _ in range(count)]
        listing.close()
        assert not any(n.startswith("/trun/") for n in names), names
        forger = Raw(port)
        forger.send(bytes([18]) + b("/trun/rdzv/solo/end/0") + i64(1))  # BARRIER
        assert forger.closed()
        forger.close()
        assert agent.wait(timeout=120) == 0, agent.text()
    finally:
        if agent.proc.poll() is None:
            agent.proc.kill()
    out = agent.text()
    assert "RESULT world=1 steps=30" in out and "restarting the worker group" not in out, out


@pytest.mark.once(
    "the outsider's requests are raw bytes, the same in both passes, judged by trun's store; "
    "the job's workers are only its payload (a stranger's torch client, of each generation, "
    "is test_security's)")
def test_a_host_outside_the_job_gets_nothing_and_named_addresses_grant_nothing(hosts, tmp_path):
    # h2 has a second address and names it (--local-addr): the store serves
    # h2's workers by the address its agent's proven connection came from,
    # not by the one it names. h3 runs no agent: its unproven requests on
    # trun's keys are closed and the workers' keys refused.
    subprocess.run(["ip", "-n", f"{os.environ['NETNS_PREFIX']}-h2", "addr", "add",
                    "10.200.0.12/24", "dev", "v0"], check=True)
    args = ["--nnodes", 2, "--nproc-per-node", 1, "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "10.200.0.1:29400", "--rdzv-id", RUN]
    train = [ELASTIC, "--steps", 40, "--step-time", 0.1, "--ckpt"]
    h1 = TokenAgent(tmp_path, "h1", *args, *train, tmp_path / "c1.pt", prefix=hosts.run(1))
    h2 = None
    try:
        h1.wait_for("hosting the store")
        h2 = TokenAgent(tmp_path, "h2", *args, "--local-addr", "10.200.0.12",
                        *train, tmp_path / "c2.pt", prefix=hosts.run(2))
        h1.wait_for(r"attempt 0 world 2 step 3", timeout=180)
        r = subprocess.run([*hosts.run(3), PYTHON, "-c", OUTSIDER, "10.200.0.1", "29400", RUN],
                           capture_output=True, text=True, timeout=120, env=base_env())
        assert r.stdout.split() == ["closed"] * 4 + ["refused"], r.stdout + r.stderr
        codes = [x.wait(timeout=180) for x in (h1, h2)]
    finally:
        for x in (h1, h2):
            if x is not None and x.proc.poll() is None:
                x.proc.kill()
    out = h1.text() + h2.text()
    assert codes == [0, 0], out
    assert "RESULT world=2 steps=40" in out and "restarting the worker group" not in out, out
    assert re.search(r"store: refused \w+ from 10\.200\.0\.3", h1.text()), h1.text()


# Opens argv[3] connections to argv[1]:argv[2] (as many as it can), prints
# how many, and holds them, silent, until its stdin closes.
FLOOD = r"""
import resource, socket, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held, error = [], ""
for _ in range(int(sys.argv[3])):
    try:
        held.append(socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10))
    except OSError as e:
        error = repr(e)
        break
print(len(held), error, flush=True)
sys.stdin.read()
"""


# From a host outside the job: BARRIER on the round's end, a join, WAIT and
# LIST_KEYS-free reads of trun's keys (each closed), then a worker's key
# (refused: not a host of the round).
OUTSIDER = r"""
import socket, struct, sys
host, port, run = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def b(s):
    s = s.encode()
    return struct.pack("<Q", len(s)) + s
def attempt(request):
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(b"\x00" + struct.pack("<I", 0x3C85F7CE) + request)
    try:
        got = s.recv(64)
    except ConnectionResetError:
        got = b""
    except socket.timeout:
        got = b"?"
    return "closed" if got == b"" else "answered"
k = "/trun/rdzv/%s/" % run
print(attempt(bytes([18]) + b(k + "end/0") + struct.pack("<q", 1)))
print(attempt(bytes([4]) + b(k + "seq") + struct.pack("<q", 1)))
print(attempt(bytes([6]) + struct.pack("<Q", 1) + b(k + "round/0")))
print(attempt(bytes([3]) + b(k + "round/0")))
print("refused" if attempt(bytes([3]) + b("/default_pg/0//cpu//0")) == "closed" else "served")
"""

# Every keyed request of both generations, on one of trun's keys: opcode and
# the bytes after it.
def keyed_v2(k):
    return {"SET": (1, b(k) + b("x")), "COMPARE_SET": (2, b(k) + b("") + b("x")),
            "GET": (3, b(k)), "ADD": (4, b(k) + i64(1)), "CHECK": (5, keys(k)),
            "WAIT": (6, keys(k)), "DELETE_KEY": (8, b(k)), "APPEND": (9, b(k) + b("x")),
            "MULTI_GET": (10, keys("/w", k)), "MULTI_SET": (11, i64(1) + b(k) + b("x")),
            "QUEUE_PUSH": (14, b(k) + b("x")), "QUEUE_POP": (15, b(k)),
            "QUEUE_LEN": (16, b(k)), "BARRIER": (18, b(k) + i64(2))}


def keyed_v1(k):
    return {"SET": (0, b(k) + b("x")), "COMPARE_SET": (1, b(k) + b("") + b("x")),
            "GET": (2, b(k)), "ADD": (3, b(k) + i64(1)), "CHECK": (4, keys(k)),
            "WAIT": (5, keys(k)), "WATCH_KEY": (7, b(k)), "DELETE_KEY": (8, b(k)),
            "APPEND": (9, b(k) + b("x")), "MULTI_GET": (10, keys("/w", k)),
            "MULTI_SET": (11, i64(1) + b(k) + b("x"))}


@pytest.fixture(scope="class")
def job(tmp_path_factory):
    j = Job(tmp_path_factory.mktemp("attacked"))
    yield j
    # The attacks are over: the job's last steps need not be waited out.
    j.hurry.touch()
    try:
        codes = [a.wait(timeout=300) for a in j.agents]
    finally:
        for a in j.agents:
            if a.proc.poll() is None:
                a.proc.kill()
    out = j.text()
    assert codes == [0, 0], out
    assert out.count(f"RESULT world=2 steps={STEPS}") == 1, out
    assert "restarting the worker group" not in out, out
    assert not re.search(r"attempt [1-9]", out), out
    assert TOKEN not in out
    # The same parameters as a training nobody attacked: rank 0's last
    # checkpoint against the same steps in one process (both ranks see the
    # same data, so DDP's averaged gradients are one rank's).
    ckpt = [c for c in j.ckpts if c.exists()]
    assert len(ckpt) == 1, ckpt
    r = subprocess.run([PYTHON, "-c", SAME_PARAMETERS, str(ckpt[0]), str(STEPS)],
                       capture_output=True, text=True, timeout=120, env=base_env())
    assert r.stdout.strip() == "same", r.stdout + r.stderr


# elastic_train.py's training, STEPS steps in one process, against its
# checkpoint (argv[1]): "same", or what differs.
SAME_PARAMETERS = r"""
import sys, torch
state, steps = torch.load(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 8)
y = x.sum(1, keepdim=True)
for _ in range(steps):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
want = model.state_dict()
same = state["step"] == steps and all(torch.allclose(want[k], v, atol=1e-6)
                                      for k, v in state["model"].items())
print("same" if same else f"different: step {state['step']} {dict(state['model'])} {dict(want)}")
"""


@pytest.mark.once(
    "each attack is raw bytes of both generations' protocols (keyed_v1, keyed_v2), the same in "
    "both passes, judged by trun's store; the job's workers are only its payload (torch's own "
    "clients against the token are test_security's, in both passes)")
class TestOneTokenJobUnderAttack:
    """The attacks that share one job (the class-scoped fixture `job`)."""

    def test_every_opcode_on_truns_keys_without_the_token_is_closed(self, job):
        survived = []
        targets = [job.key(n) for n in ("end/0", "seq", "node/1", "round/0", "hb/1")] + ["/trun/x"]
        for gen, table in (("v2", keyed_v2), ("v1", keyed_v1)):
            for i, (name, (op, args)) in enumerate(table(targets[0]).items()):
                k = targets[i % len(targets)]
                c = Raw(job.port, v2=gen == "v2")
                c.send(bytes([op]) + table(k)[name][1])
                if not c.closed():
                    survived.append(f"{gen} {name} {k}")
                c.close()
        assert not survived, survived
        # The host said why, naming the client and the fix.
        assert re.search(r"store: refused \w+ from 127\.0\.0\.1: trun's keys need the job "
                         r"token.*TRUN_JOB_TOKEN", job.host.text()), job.host.text()
        # Refusals are logged at most once a minute per source and reason: not
        # one line per try.
        assert job.refusals("from 127.0.0.1: trun's keys need the job token") <= 2, job.host.text()
        job.still_training()


    def test_keyless_requests_show_nothing_of_trun(self, job):
        c = Raw(job.port)
        c.send(bytes([17]))  # LIST_KEYS
        n = struct.unpack("<q", c.read(8))[0]
        listed = [c.read_bytes() for _ in range(n)]
        assert not [k for k in listed if k.startswith("/trun/")], listed
        assert RUN not in " ".join(listed)
        c.send(bytes([7]))  # GETNUMKEYS: trun's keys are not counted either
        assert struct.unpack("<q", c.read(8))[0] == n
        c.send(bytes([13]) + struct.pack("<I", 77))  # PING
        assert struct.unpack("<I", c.read(4))[0] == 77
        c.send(bytes([12]))  # CANCEL_WAIT
        assert c.read(1) == b"\x01"
        c.close()
        job.still_training()


    def test_a_forged_round_end_or_join_changes_nothing(self, job):
        forged = [bytes([18]) + b(job.key("end/0")) + i64(1),   # BARRIER ends the round
                  bytes([1]) + b(job.key("end/0")) + b("membership: forged"),
                  bytes([2]) + b(job.key("end/0")) + b("") + b("forged"),
                  bytes([4]) + b(job.key("seq")) + i64(1),       # a join: its number
                  bytes([1]) + b(job.key("node/99")) +
                  b('{"id":"intruder","addr":"10.9.9.9","nproc":1}'),
                  bytes([11]) + i64(1) + b(job.key("ready/1")) + b("9")]
        for request in forged:
            c = Raw(job.port)
            c.send(request)
            assert c.closed(), request
            c.close()
        job.still_training()
        assert "intruder" not in job.text()


    def test_guessing_on_one_connection_costs_it(self, job):
        c = Raw(job.port)
        nonce = c.compare_set("/trun/auth/nonce", "", "")
        assert re.fullmatch("[0-9a-f]{64}", nonce), nonce
        answer = c.compare_set("/trun/auth/proof", nonce, "00" * 32 + " " + "11" * 32)
        assert answer == "refused: wrong job token"
        assert c.closed()  # a second guess needs a new connection
        c.close()
        assert job.refusals("refused: wrong job token from 127.0.0.1") >= 1, job.host.text()
        job.still_training()


    def test_guessing_on_many_connections_is_logged_once_a_minute(self, job):
        before = job.refusals("refused: wrong job token from 127.0.0.1")
        for i in range(40):
            c = Raw(job.port)
            nonce = c.compare_set("/trun/auth/nonce", "", "")
            guess = hashlib.sha256(str(i).encode()).hexdigest()
            assert c.compare_set("/trun/auth/proof", nonce, guess + " " + "22" * 32) == \
                "refused: wrong job token"
            assert c.closed()
            c.close()
        # Forty refusals, at most one more line (the minute may have turned).
        assert job.refusals("refused: wrong job token from 127.0.0.1") - before <= 1, \
            job.host.text()
        job.still_training()


    def test_a_replayed_proof_opens_nothing(self, job):
        # A proof seen on the wire (here made with the token, as an agent would)
        # is good once, on its own connection.
        a = Raw(job.port)
        nonce = a.compare_set("/trun/auth/nonce", "", "")
        seen = proof(nonce) + " " + secrets.token_hex(32)
        assert a.compare_set("/trun/auth/proof", nonce, seen).startswith("ok ")
        for replay_on in (Raw(job.port), a):
            answer = replay_on.compare_set("/trun/auth/proof", nonce, seen)
            assert answer.startswith("refused: no fresh nonce"), answer
            assert replay_on.closed()
            replay_on.close()
        job.still_training()


    def test_oversized_and_truncated_frames_cost_nothing(self, job):
        frames = [bytes([1]) + struct.pack("<Q", 1 << 40),              # a 1 TiB key
                  bytes([1]) + b("/w") + struct.pack("<Q", 1 << 40),    # a 1 TiB value
                  bytes([10]) + struct.pack("<Q", 1 << 31),             # 2^31 keys
                  bytes([11]) + i64(-1),                                # a negative count
                  bytes([2]) + b(job.key("end/0"))[:5],                 # cut in a length
                  bytes([1]) + b("/w" * 2000)[:1000],                   # cut in a key
                  bytes([0]) + b"\xce\xf7",                              # cut in VALIDATE
                  bytes([0xFF]) * 64]                                   # no such opcode
        before = job.host.text().count("store: dropped client")
        for _ in range(3):
            for frame in frames:
                c = Raw(job.port, v2=not frame.startswith(b"\x00"))
                c.send(frame)
                c.s.shutdown(socket.SHUT_WR)  # and nothing more comes
                assert c.closed(), frame[:16]
                c.close()
        job.still_training()
        # Each way of breaking the protocol is logged at most once a minute
        # per source, however often it is tried: a loop costs no log space.
        assert job.host.text().count("store: dropped client") - before <= len(frames), \
            job.host.text()


    def test_slow_clients_stall_nobody(self, job):
        # Two clients send one byte a second: one a worker's SET, one the job
        # token's exchange. Meanwhile the workers train on and a fresh client
        # is answered at once; the store closes each at the rate floor for an
        # unfinished request (64 KiB in 10 s), within about 10 s.
        closed_after = {}

        def trickle(name, data):
            c = Raw(job.port)
            start = time.monotonic()
            try:
                for i in range(len(data)):
                    c.send(data[i:i + 1])
                    if c.closed(timeout=1):
                        break
            except OSError:
                pass
            closed_after[name] = time.monotonic() - start
            c.close()

        requests = {"SET": bytes([1]) + b("/w") + struct.pack("<Q", 100) + b"v" * 100,
                    "auth": bytes([2]) + b("/trun/auth/nonce") + struct.pack("<Q", 100)}
        threads = [threading.Thread(target=trickle, args=r) for r in requests.items()]
        step = job.step()
        for t in threads:
            t.start()
        time.sleep(3)
        fresh = Raw(job.port)
        t0 = time.time()
        fresh.send(bytes([13]) + struct.pack("<I", 5))
        assert struct.unpack("<I", fresh.read(4))[0] == 5
        assert time.time() - t0 < 5
        fresh.close()
        for t in threads:
            t.join(timeout=60)
        assert sorted(closed_after) == ["SET", "auth"], closed_after
        assert all(t < 20 for t in closed_after.values()), closed_after
        assert job.step() > step + 10, job.host.text()
        assert job.refusals("the floor for a request that is not whole") >= 1, job.host.text()
        job.still_training()

    def test_unfinished_large_sets_hold_bounded_memory(self, job):
        # 40 clients of both generations each start a 4 MiB SET of a worker's
        # key and never finish it: 160 MiB the store would hold. It holds at
        # most its budget of unfinished requests (64 MiB), closing the one
        # that waited longest for a byte, and closes the rest at the rate
        # floor, within about 10 s. One on trun's key is closed before its
        # value is read.
        on_trun = Raw(job.port)
        on_trun.send(bytes([1]) + b(job.key("end/0")) + struct.pack("<Q", 4 << 20))
        assert on_trun.closed(timeout=5)
        on_trun.close()
        dropped = job.host.text().count("store: dropped client")
        t0 = time.monotonic()
        conns = []
        for i in range(40):
            v2 = i % 2 == 0
            c = Raw(job.port, v2=v2, timeout=30)
            head = bytes([1 if v2 else 0]) + b(f"/atk/partial/{i}") + struct.pack("<Q", 4 << 20)
            try:
                c.send(head + b"v" * ((4 << 20) - 1))
            except OSError:
                pass  # closed while it sent: the budget was full
            conns.append(c)
        still_open, deadline = conns, time.monotonic() + 40
        while still_open and time.monotonic() < deadline:
            still_open = [c for c in still_open if not c.closed(timeout=0.1)]
        took = time.monotonic() - t0
        for c in conns:
            c.close()
        assert not still_open, f"{len(still_open)} unfinished SETs open after {took:.0f} s"
        assert took < 30, took
        log = job.host.text()
        assert job.refusals("more than the store's budget of 67108864 bytes") >= 1, log
        assert job.refusals("the floor for a request that is not whole") >= 1, log
        # Closing 40 clients cost a line per reason, not one each.
        assert log.count("store: dropped client") - dropped <= 2, log
        job.still_training(rss_budget=(64 << 20) + RSS_BUDGET)

    def test_unread_replies_of_a_large_value_cost_the_job_nothing(self, job):
        # A worker's 8 MiB key, asked for 7 times on each of 25 new
        # connections a second for 4 s, none of which reads. The store
        # handles a client's next request only once its replies drain, so
        # each holds one reply, and the replies left unread are held to
        # their budget (256 MiB; over twice it, the connection that holds
        # the most closes at once). Before, every GET was a copy of the
        # value, made at once: the agent held 4-6 GB, and its store's loop,
        # busy copying, kept its own agent from the round.
        size = 8 << 20
        setter = Raw(job.port)
        setter.send(bytes([1]) + b("/atk/big") + struct.pack("<Q", size) + b"v" * size)
        setter.send(bytes([13]) + struct.pack("<I", 1))  # PING: the SET is stored
        assert struct.unpack("<I", setter.read(4))[0] == 1
        setter.close()
        gets = (bytes([3]) + b("/atk/big")) * 7
        step = job.step()
        hogs, slowest = [], 0.0
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            for _ in range(25):
                c = Raw(job.port)
                c.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                try:
                    c.send(gets)
                except OSError:
                    pass  # closed already: over the budget
                hogs.append(c)
            fresh = Raw(job.port)
            t0 = time.monotonic()
            fresh.send(bytes([13]) + struct.pack("<I", 7))
            assert struct.unpack("<I", fresh.read(4))[0] == 7
            slowest = max(slowest, time.monotonic() - t0)
            fresh.close()
            time.sleep(max(0.0, 1 - (time.monotonic() - t0)))
        for c in hogs:
            c.close()
        job.still_training(rss_budget=(2 * 256 + 64 << 20) + RSS_BUDGET)
        # Its own agent gives a store up after 5 s without an answer.
        assert slowest < 5, f"a PING took {slowest:.1f} s under the flood"
        assert job.step() > step + 10, job.host.text()
        assert job.refusals("replies queued for clients that do not read them") >= 1, \
            job.host.text()

    def test_a_flood_of_idle_connections_starves_no_agent(self, job):
        # 5,000 idle connections: more than the store's cap (the agent's
        # open-file limit, 4,096, less a reserve for its own work). The
        # oldest silent ones give way, so a new agent connection still
        # proves the token and is served, the workers train on, and memory
        # grows by about a connection's worth each, no more.
        flood = subprocess.Popen([PYTHON, "-c", FLOOD, "127.0.0.1", str(job.port), "5000"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env=base_env())
        try:
            opened = flood.stdout.readline()
            assert opened.split()[:1] == ["5000"], opened
            agent = Raw(job.port)
            nonce = agent.compare_set("/trun/auth/nonce", "", "")
            answer = agent.compare_set("/trun/auth/proof", nonce,
                                       proof(nonce) + " " + secrets.token_hex(32))
            assert answer.startswith("ok "), answer
            agent.send(bytes([13]) + struct.pack("<I", 9))
            assert struct.unpack("<I", agent.read(4))[0] == 9
            agent.close()
            assert job.refusals("the oldest that sent nothing gives way") >= 1, job.host.text()
            job.still_training(rss_budget=RSS_BUDGET + 2048 * 5000)
        finally:
            flood.kill()
            flood.wait()
        job.still_training()


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


@pytest.mark.once(
    "raw HTTP against trun's health server, the same in both passes; the job's workers are "
    "only its payload")
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
        before = reset_peak(p.pid) >> 10
        assert HEALTH_ATTACKS[attack](("127.0.0.1", port)), attack
        assert _http_status(("127.0.0.1", port)) == 200
        return (status_bytes(p.pid, "VmHWM") >> 10) - before

    grown, (digest, restarts) = _beside(p, ctl, strike, _trun_result)
    assert (digest, restarts) == (trained, {0})
    assert grown <= 16 * 1024, f"trun grew {grown} KiB"


def _stacks_reply(port, target):
    """Status, X-Trun-Nonce and body of one GET on the agent's health port."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    nonce = re.search(rb"(?im)^x-trun-nonce: *([0-9a-f]+)", head)
    return int(head.split(b" ", 2)[1]), nonce and nonce.group(1).decode(), body.decode()


def _stacks_proof(nonce, port, token=TOKEN):
    """The proof of GET /stacks for an agent reached at 127.0.0.1:port."""
    msg = f"trun-job-token-v1\nhttp\n{nonce}\n127.0.0.1:{port}".encode()
    return hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()


def _ask_from(source, port):
    """A nonce request to the agent from `source`, another loopback address."""
    with socket.socket() as s:
        s.settimeout(30)
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /stacks HTTP/1.1\r\nHost: x\r\n\r\n")
        while s.recv(65536):
            pass


class _Listener:
    """A loopback listener that serves each client on a thread of its own
    (`_serve_one`), counting them."""

    def __init__(self, port=0):
        self.sock = socket.create_server(("127.0.0.1", port))
        self.port = self.sock.getsockname()[1]
        self.visits = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.visits += 1
            threading.Thread(target=self._serve_one, args=(c,), daemon=True).start()

    def close(self):
        self.sock.close()


class _Relay(_Listener):
    """A listener that a user was pointed at instead of the agent: it passes
    every byte on to the agent and back, and keeps what the agent sent."""

    def __init__(self, target_port):
        self.target = target_port
        self.replies = b""
        super().__init__()

    def _serve_one(self, c):
        with c, socket.create_connection(("127.0.0.1", self.target), timeout=10) as up:
            c.settimeout(10)
            request = b""
            while b"\r\n\r\n" not in request and (chunk := c.recv(65536)):
                request += chunk
            up.sendall(request)
            while chunk := up.recv(65536):
                self.replies += chunk
                c.sendall(chunk)


def test_stacks_without_the_token_show_nothing_and_hostile_proofs_open_nothing(tmp_path):
    """GET /stacks of a job with a token: no proof, a wrong, replayed,
    made-up, oversized or cross-protocol one (the store's proof), or one
    made for another address is 401 with no worker in it; a flood of nonce
    requests from many addresses costs the agent 16 MiB or less and makes
    no honest nonce stale; a good proof opens, once; a listener that
    passes `trun stack`'s exchange on to the agent gets nothing. The hang
    watch's ?scope=hang is behind the same proof."""
    a = TokenAgent(tmp_path, "stacks", "--standalone", "--nproc-per-node", 1,
                   "--health-check-port", 0, "--health-check-addr", "127.0.0.1",
                   "--no-python", "sleep", "600")
    relay = None
    try:
        port = int(a.wait_for(r"health check at http://[^ ]*:(\d+)/health").group(1))
        status, nonce, body = _stacks_reply(port, "/stacks")
        assert status == 401 and nonce and '"pid"' not in body
        made_up = secrets.token_hex(48)  # a nonce's length: only its MAC is wrong
        for target in [
            f"/stacks?nonce={nonce}&proof={_stacks_proof(nonce, port, token='guess')}",
            f"/stacks?nonce={made_up}&proof={_stacks_proof(made_up, port)}",
            f"/stacks?nonce={'a' * 7000}&proof={'b' * 64}",
            "/stacks?nonce=&proof=&&&==&nonce",
            "/stacks?nonce=%00&proof=%0d%0a",
            f"/stacks?nonce={nonce}&proof={proof(nonce)}",  # the store's proof
            # Proved for the address a listener in between was reached at.
            f"/stacks?nonce={nonce}&agent=127.0.0.1:{port + 1}&proof="
            f"{_stacks_proof(nonce, port + 1)}",
        ]:
            status, _, body = _stacks_reply(port, target)
            assert status in (401, 431), (target[:80], status)
            assert '"pid"' not in body and '"workers"' not in body
        assert "a forwarded port or another listener" in body, body

        before = reset_peak(a.proc.pid) >> 10
        for i in range(300):
            _ask_from(f"127.0.{i // 200}.{2 + i % 200}", port)
        grown = (status_bytes(a.proc.pid, "VmHWM") >> 10) - before
        assert grown <= 16 * 1024, f"trun grew {grown} KiB"
        # The first nonce, asked for before the flood, still opens.
        good = f"/stacks?nonce={nonce}&agent=127.0.0.1:{port}&proof={_stacks_proof(nonce, port)}"
        status, _, body = _stacks_reply(port, good)
        assert status == 200 and json.loads(body)["workers"][0]["rank"] == 0
        assert _stacks_reply(port, good)[0] == 401  # replayed

        relay = _Relay(port)
        r = trun("stack", "--health", f"127.0.0.1:{relay.port}",
                 env=base_env(TRUN_JOB_TOKEN=TOKEN), timeout=60)
        assert r.returncode != 0 and "a forwarded port or another listener" in r.err, r.err
        assert b'"workers"' not in relay.replies
        r = trun("stack", "--health", f"127.0.0.1:{port}", env=base_env(TRUN_JOB_TOKEN=TOKEN),
                 timeout=60)
        assert r.returncode == 0 and "rank 0" in r.out, r.err
        # The hang watch's question (scope=hang) asks the same proof first.
        status, nonce, body = _stacks_reply(port, "/stacks?scope=hang")
        assert status == 401 and nonce and "quiet_seconds" not in body
        status, _, body = _stacks_reply(
            port, f"/stacks?scope=hang&nonce={nonce}&proof={_stacks_proof(nonce, port, 'guess')}")
        assert status == 401 and "quiet_seconds" not in body
        status, _, body = _stacks_reply(
            port, f"/stacks?scope=hang&nonce={nonce}&proof={_stacks_proof(nonce, port)}")
        assert status == 200 and json.loads(body)["quiet_seconds"] is None, body  # not watched
        assert a.proc.poll() is None, a.text()
    finally:
        if relay:
            relay.close()
        a.proc.kill()
        a.proc.wait()


class _Peer(_Listener):
    """A listener standing in for a node's health server: it counts who
    comes and, with `endless`, answers each with a 200 whose body never
    ends (sent until the client stops reading)."""

    def __init__(self, port, endless=False):
        self.endless = endless
        super().__init__(port)

    def _serve_one(self, c):
        with c:
            try:
                c.settimeout(10)
                c.recv(65536)
                if not self.endless:
                    return
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n[")
                chunk = b" " * MiB
                for _ in range(1024):
                    c.sendall(chunk)
            except OSError:
                pass


def test_job_wide_stacks_ask_only_the_rounds_peers_for_a_caller_with_the_token(tmp_path):
    """GET /stacks?scope=job (issue 30): without a proof it is 401 and no
    peer hears of it; an address in the request is never asked; a peer that
    answers without end is read up to a bound, named in the answer, and
    costs the agent 16 MiB or less.

    The second agent's health server listens on 127.0.0.2; the first asks
    it at the address it took part in the round from, 127.0.0.1, where this
    test listens on the same port in its place."""
    peer = _Peer(0, endless=True)
    decoy = _Peer(0)
    port = free_port()
    common = ["--nnodes", 2, "--nproc-per-node", 1, "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"atk-{uuid.uuid4().hex[:8]}"]
    host = TokenAgent(tmp_path, "host", *common, "--health-check-port", 0,
                      "--health-check-addr", "127.0.0.1", "--no-python", "sleep", "600")
    other = None
    try:
        host.wait_for("hosting the store")
        other = TokenAgent(tmp_path, "other", *common, "--health-check-port", peer.port,
                           "--health-check-addr", "127.0.0.2", "--no-python", "sleep", "600")
        for a in (host, other):
            a.wait_for(r"round 0: node \d of 2")
        hport = int(host.wait_for(r"health check at http://[^ ]*:(\d+)/health").group(1))

        status, nonce, body = _stacks_reply(hport, "/stacks?scope=job")
        assert status == 401 and nonce and '"workers"' not in body
        for target in [f"/stacks?scope=job&nonce={nonce}&proof="
                       f"{_stacks_proof(nonce, hport, 'guess')}",
                       f"/stacks?scope=job&nonce={nonce}&proof={_stacks_proof(nonce, hport + 1)}",
                       "/stacks?scope=job&nonce=&proof="]:
            status, _, body = _stacks_reply(hport, target)
            assert status == 401 and '"workers"' not in body, target
        time.sleep(1)
        assert peer.visits == 0  # nobody without the token made the agent ask

        before = reset_peak(host.proc.pid)
        _, nonce, _ = _stacks_reply(hport, "/stacks?scope=job")
        t0 = time.monotonic()
        status, _, body = _stacks_reply(
            hport, f"/stacks?scope=job&peer=127.0.0.1:{decoy.port}&address=127.0.0.1:"
                   f"{decoy.port}&host=127.0.0.1&port={decoy.port}"
                   f"&nonce={nonce}&proof={_stacks_proof(nonce, hport)}")
        took = time.monotonic() - t0
        grown = status_bytes(host.proc.pid, "VmHWM") - before
        assert status == 200, body
        nodes = json.loads(body)
        assert [n["node_rank"] for n in nodes] == [0, 1]  # in node-rank order
        mine = next(n for n in nodes if n["hostname"])
        theirs = next(n for n in nodes if not n["hostname"])
        assert mine["workers"] and mine["workers"][0]["rank"] in (0, 1)
        assert theirs["address"] == f"127.0.0.1:{peer.port}" and theirs["workers"] == []
        assert "larger than" in theirs["error"], theirs
        assert peer.visits >= 1 and decoy.visits == 0
        assert took < 5, took
        assert grown <= 16 << 20, f"the agent grew {grown >> 10} KiB"

        # trun stack names the node it could not see, prints the rest, and
        # exits 1 as for any node that gave no answer.
        r = trun("stack", "--health", f"127.0.0.1:{hport}", env=base_env(TRUN_JOB_TOKEN=TOKEN),
                 timeout=30)
        assert r.returncode == 1 and "rank " in r.out, r.err
        assert f"127.0.0.1:{peer.port}" in r.err and "larger than" in r.err, r.err
        assert host.proc.poll() is None and other.proc.poll() is None
    finally:
        for a in (host, other):
            if a:
                a.proc.kill()
                a.proc.wait()
        peer.close()
        decoy.close()


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
        struct.pack("!BQ", 1, 4000) + b"[" * 2000 + b"]" * 2000,  # nested past the parser
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
    assert "RecursionError" not in err, err  # a nested hello is a bad frame, no more
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
        before = reset_peak(p.pid) >> 10
        assert LAUNCHER_ATTACKS[attack]((host, int(port))), attack
        return (status_bytes(p.pid, "VmHWM") >> 10) - before

    grown, ranks = _beside(p, ctl, strike, _launcher_result)
    assert [(r["digest"], r["restarts"]) for r in ranks] == [(trained, 0)] * 2
    assert grown <= 16 * 1024, f"the launcher grew {grown} KiB"


def test_a_flood_of_idle_connections_on_the_launchers_port(tmp_path, trained):
    """3,000 idle connections on the Python launcher's port while the job
    runs: the launcher keeps at most 256 awaiting their hello (a thread
    each), closing the oldest; the job trains the same parameters without
    a restart and the launcher's peak RSS grows 16 MiB or less."""
    p, ctl = _start_launcher(tmp_path)
    flood = None

    def strike():
        nonlocal flood
        host, port = (ctl / "up.0").read_text().rsplit(":", 1)
        before = reset_peak(p.pid) >> 10
        flood = subprocess.Popen([PYTHON, "-c", FLOOD, host, port, "3000"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env=base_env())
        opened = flood.stdout.readline()
        assert opened.split()[:1] == ["3000"], opened
        time.sleep(1)  # the last connections' threads start
        return (status_bytes(p.pid, "VmHWM") >> 10) - before

    try:
        grown, ranks = _beside(p, ctl, strike, _launcher_result)
    finally:
        if flood is not None:
            flood.kill()
            flood.wait()
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
