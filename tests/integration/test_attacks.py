"""Issue 25, the attack suite: every way in that a process without the job
token might try, each with the job's outcome asserted unchanged.

Each attack is marked `attack`; the run's summary line says how many were
tried (conftest.py). Sections: the store and the rendezvous (admission,
forged rounds, guessing, replays, frames, slow clients, squatters, hosts
outside the job), then the agent's other ports and what a worker can see
(the launcher's port, the health port, the token's exposure)."""
import hashlib
import hmac
import os
import re
import secrets
import socket
import struct
import subprocess
import threading
import time

import pytest

from conftest import FIXTURES, PYTHON, TRUN, Agent, base_env, free_port

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
STEPS = 400
MAGIC = 0x3C85F7CE
RSS_BUDGET = 16 << 20


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


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) << 10


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
    """The shared job: its port, its two agents (host first), and the most
    each agent's RSS has been seen at."""

    def __init__(self, tmp):
        self.port = free_port()
        args = ["--nnodes", 2, "--nproc-per-node", 1, "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", RUN,
                ELASTIC, "--steps", STEPS, "--step-time", 0.1]
        self.host = TokenAgent(tmp, "host", *args, "--ckpt", tmp / "c0.pt")
        self.host.wait_for("hosting the store")
        self.other = TokenAgent(tmp, "other", *args, "--ckpt", tmp / "c1.pt")
        self.agents = (self.host, self.other)
        self.host.wait_for(r"attempt 0 world 2 step 3", timeout=180)
        self.rss0 = [rss(a.proc.pid) for a in self.agents]
        self.rss_max = list(self.rss0)

    def key(self, name):
        return f"/trun/rdzv/{RUN}/{name}"

    def text(self):
        return self.host.text() + self.other.text()

    def step(self):
        return max([0] + [int(s) for s in re.findall(r"attempt 0 world 2 step (\d+)",
                                                      self.host.text())])

    def still_training(self):
        """The attack changed nothing: both agents run, the workers are in
        their first attempt and still step forward."""
        for i, a in enumerate(self.agents):
            assert a.proc.poll() is None, self.text()
            self.rss_max[i] = max(self.rss_max[i], rss(a.proc.pid))
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
    for a, r0, r1 in zip(j.agents, j.rss0, j.rss_max):
        assert r1 - r0 <= RSS_BUDGET, f"{a.name}: RSS grew {(r1 - r0) >> 10} KiB under attack"
    assert TOKEN not in out


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
        for frame in frames:
            c = Raw(job.port, v2=not frame.startswith(b"\x00"))
            c.send(frame)
            c.s.shutdown(socket.SHUT_WR)  # and nothing more comes
            assert c.closed(), frame[:16]
            c.close()
        job.still_training()


    def test_slow_clients_stall_nobody(self, job):
        # Two clients send one byte a second for about 10 s: one a worker's SET,
        # one the job token's exchange. Meanwhile the workers train on and a
        # fresh client is answered at once.
        def trickle(data):
            c = Raw(job.port)
            for i in range(len(data)):
                c.send(data[i:i + 1])
                time.sleep(1)
            c.close()

        requests = [bytes([1]) + struct.pack("<Q", 1) + b"w",           # 10 bytes
                    bytes([2]) + struct.pack("<Q", 1) + b"/"]           # 10 bytes
        threads = [threading.Thread(target=trickle, args=(r,)) for r in requests]
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
            t.join(timeout=30)
        assert job.step() > step + 10, job.host.text()
        job.still_training()


# ---------------------------------------------------------------------------
# The launcher's port, the health port, and what a worker can see.
