"""The etcd rendezvous backend against a real etcd (Debian's etcd-server),
started by the tests: the same jobs as over c10d, and what etcd changes: no
agent's death takes the rendezvous down, so the survivors simply carry on."""
import contextlib
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import EXAMPLES, FIXTURES, ROOT, free_port, kill_one_of_two, trun

DDP = EXAMPLES / "ddp_train.py"
ELASTIC = FIXTURES / "elastic_train.py"
ETCD = ROOT / "tools" / "etcd-server"


class Etcd:
    """etcd on `host`, its log in `tmp`, its data on tmpfs where there is one:
    the tests beside it write to the disk, and a commit held there past
    etcd's request timeout leaves a dead agent's lease unrevoked for as long
    (tools/etcd-server)."""

    def __init__(self, tmp, host="127.0.0.1", prefix=(), env=None):
        self.dir = tmp / "etcd"
        self.data = self.dir / "data"
        # etcd preallocates 128 MB there (its WAL and the next segment): a
        # small /dev/shm (a container's 64 MB) keeps it on the disk.
        shm = pathlib.Path("/dev/shm")
        try:
            if shutil.disk_usage(shm).free >= 512 << 20:
                self.data = pathlib.Path(tempfile.mkdtemp(prefix="trun-etcd-", dir=shm))
        except OSError:
            pass
        port, peer = (free_port(), free_port()) if host == "127.0.0.1" else (2379, 2380)
        try:
            out = subprocess.run([*prefix, ETCD, "up", self.dir, str(port), host, str(peer)],
                                 check=True, capture_output=True, text=True, timeout=60,
                                 env=dict(env or os.environ, TRUN_ETCD_DATA=str(self.data)))
        except BaseException:
            self.down()
            raise
        self.url = out.stdout.strip()
        self.endpoint = f"{host}:{port}"

    def log_tail(self, lines=60):
        try:
            log = (self.dir / "etcd.log").read_text(errors="replace").splitlines()
        except OSError as e:
            return f"etcd's log: {e}\n"
        return "etcd's log, its last lines:\n" + "\n".join(log[-lines:]) + "\n"

    @contextlib.contextmanager
    def paused(self, seconds):
        """etcd answers nothing (SIGSTOP) from the block's start until
        `seconds` later, as a stalled disk makes it."""
        pid = int((self.dir / "etcd.pid").read_text())
        os.kill(pid, signal.SIGSTOP)
        try:
            start = time.time()
            yield
            time.sleep(max(0.0, start + seconds - time.time()))
        finally:
            os.kill(pid, signal.SIGCONT)

    def down(self):
        subprocess.run([ETCD, "down", self.dir], check=False)
        shutil.rmtree(self.data, ignore_errors=True)


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    e = Etcd(tmp_path_factory.mktemp("etcd"))
    yield e
    e.down()


def on_etcd(e, nnodes, nproc=1, run_id="job", *extra, backend="etcd"):
    return ["--nnodes", nnodes, "--nproc-per-node", nproc, "--rdzv-backend", backend,
            "--rdzv-endpoint", e.endpoint, "--rdzv-id", run_id, *extra]


def elastic(e, run_id, ckpt, nnodes="1:2"):
    return [*on_etcd(e, nnodes, 1, run_id, "--rdzv-conf",
                     "last_call_timeout=0.5,heartbeat_timeout=2"),
            ELASTIC, "--steps", 40, "--step-time", 0.1, "--ckpt", ckpt]


def test_two_agents_run_one_ddp_job_of_world_4(agents, etcd):
    a = [agents(f"n{i}", *on_etcd(etcd, 2, 2, "ddp"), "--tee", 3, DDP, "--steps", 3)
         for i in range(2)]
    try:
        codes = [x.wait() for x in a]
    except subprocess.TimeoutExpired:
        raise AssertionError("an agent did not end:\n" + a[0].text() + a[1].text()) from None
    assert codes == [0, 0], a[0].text() + a[1].text()
    out = a[0].text() + a[1].text()
    assert out.count("RESULT world=4") == 1
    ranks = sorted(int(m) for m in re.findall(r"\]:rank (\d)/4 local_rank", out))
    assert ranks == [0, 1, 2, 3]
    assert out.count("coordinating job 'ddp' through etcd") == 1, out
    # The workers' store is group rank 0's agent's, on an address both reach.
    assert re.search(r"store at 127\.0\.0\.1:\d+", out), out


@pytest.mark.once(
    "the backend's second name and the job-wide budget are trun's own logic; etcd rendezvous with "
    "this generation's DDP workers, and a restart of them, is test_two_agents_run_one_ddp_job_of_"
    "world_4's and test_a_third_agent_joining_restarts_the_job_at_world_3's; a multi-node job "
    "that a worker's exception ends is test_multinode's test_the_restart_budget_is_the_jobs_not_"
    "each_agents's, in both passes")
def test_etcd_v2_name_and_restart_budget(agents, etcd, tmp_path):
    # Rank 3 fails on every attempt: one restart of the whole job, then the
    # budget of the job (not of each agent) is spent.
    # etcd-v2 is accepted as a name for the same backend, as torchrun does.
    a = [agents(f"n{i}", *on_etcd(etcd, 2, 2, "budget", backend="etcd-v2" if i else "etcd"),
                "--max-restarts", 1, "--log-dir", tmp_path / f"l{i}",
                DDP, "--steps", 3, "--fail-rank", 3) for i in range(2)]
    assert [x.wait() for x in a] == [1, 1], a[0].text() + a[1].text()
    for i in range(2):
        run_dir = next((tmp_path / f"l{i}").iterdir())
        assert sorted(p.name for p in run_dir.iterdir()) == ["attempt_0", "attempt_1"]
    out = a[0].text() + a[1].text()
    assert "restart budget of the job is spent" in out
    assert "ValueError: boom" in out


@pytest.mark.timing(
    "asserts recovery within the lease's expiry plus the workers' start-up")
@pytest.mark.parametrize("victim", ["ordinary", "coordinator"])
def test_kill_9_of_an_agent_and_the_survivor_carries_on(agents, etcd, tmp_path, victim):
    args = elastic(etcd, f"kill-{victim}", tmp_path / "ckpt.pt")
    survivor, m, recovered, startup = kill_one_of_two(agents, args, "coordinating job",
                                                      "ordinary" if victim == "ordinary" else "host",
                                                      context=etcd.log_tail)
    assert survivor.wait() == 0, survivor.text()
    out = survivor.text()
    assert "RESULT world=1 steps=40" in out
    assert int(m.group(2)) > 5, out  # resumed from the checkpoint
    # The survivor's workers may fail on their dead peer before etcd tells
    # of the loss: either way it is a membership change, and spends nothing.
    assert ("restarting the worker group: membership" in out
            or "restarting without spending a restart (0 of 0 spent)" in out), out
    if victim == "coordinator":
        assert "coordinating job" in out, out
    # The lease's expiry (2 s, found by etcd's sweep every 500 ms) and the
    # new round's last call (0.5 s), plus the workers' start-up: 10 s, or
    # twice what the first round's took if this machine is slower now.
    assert recovered < 3 + max(10, 2 * startup), (recovered, startup)


@pytest.mark.once(
    "what it tests is the rendezvous's (a node's request for its next round kept across the "
    "coordinator's loss), not torch's; the same kill with this generation's workers is "
    "test_kill_9_of_an_agent_and_the_survivor_carries_on's, in both passes")
def test_a_survivor_whose_workers_failed_before_it_lost_the_coordinator_carries_on(
        agents, etcd, tmp_path):
    # etcd stops answering for 3 s (as a disk that holds its commits makes
    # it) and the coordinator's agent dies: the survivor's workers fail on it
    # at once, and its failure cannot reach etcd. So the survivor gives the
    # coordinator up after its heartbeat timeout (2 s), its agent having
    # asked for the next round already, and once: it must still get that
    # round.
    # (The survivor's own lease expires in the pause too: it joins anew.)
    args = elastic(etcd, "paused", tmp_path / "ckpt.pt")
    first = agents("first", *args)
    first.wait_for("coordinating job")
    survivor = agents("second", *args)
    first.wait_for(r"attempt 0 world 2 step 5")
    with etcd.paused(3):
        first.kill()
    m = survivor.wait_for(r"attempt (\d+) world 1 step (\d+)")
    assert survivor.wait() == 0, survivor.text()
    out = survivor.text()
    assert "RESULT world=1 steps=40" in out, out
    assert int(m.group(2)) > 5, out  # resumed from the checkpoint
    assert "took over the coordinator" in out, out


def test_a_third_agent_joining_restarts_the_job_at_world_3(agents, etcd, tmp_path):
    ckpt = tmp_path / "ckpt.pt"
    a = agents("a", *elastic(etcd, "grow", ckpt, "2:3"))
    a.wait_for("coordinating job")
    b = agents("b", *elastic(etcd, "grow", ckpt, "2:3"))
    a.wait_for(r"attempt 0 world 2 step 3")
    c = agents("c", *elastic(etcd, "grow", ckpt, "2:3"))
    assert [x.wait() for x in (a, b, c)] == [0, 0, 0], a.text() + b.text() + c.text()
    out = a.text()
    assert "membership" in out and "joined" in out
    assert re.search(r"attempt 1 world 3 step", out), out
    assert "RESULT world=3 steps=40" in out


def test_a_rendezvous_timeout_names_the_missing_nodes(etcd):
    r = trun(*on_etcd(etcd, 2, 1, "alone"), "--rdzv-conf", "join_timeout=1", "--no-python", "true",
             timeout=30)
    assert r.returncode == 1, r.err
    assert "1 more node that never joined" in r.err, r.err


def test_no_etcd_there_is_named_with_the_fix():
    port = free_port()
    t0 = time.time()
    r = trun("--nnodes", 2, "--rdzv-backend", "etcd", "--rdzv-endpoint", f"127.0.0.1:{port}",
             "--rdzv-conf", "join_timeout=1", "--no-python", "true", timeout=30)
    assert r.returncode == 1, r.err
    assert f"cannot reach the coordinator through etcd at http://127.0.0.1:{port}" in r.err, r.err
    assert "is etcd running" in r.err
    assert time.time() - t0 < 10


@pytest.mark.parametrize("endpoint, conf, needle", [
    ("", "", "--rdzv-backend etcd needs --rdzv-endpoint HOST[:PORT]"),
    ("localhost:http", "", "'http' is not a port"),
    ("ftp://localhost:2379", "", "etcd speaks http:// or https://"),
    ("localhost", "protocol=gopher", "--rdzv-conf protocol=gopher: expected http or https"),
])
def test_bad_etcd_settings_exit_2(endpoint, conf, needle):
    args = ["--nnodes", 2, "--rdzv-backend", "etcd", "--rdzv-endpoint", endpoint]
    if conf:
        args += ["--rdzv-conf", conf]
    r = trun(*args, "--no-python", "true", timeout=30)
    assert r.returncode == 2, r.err
    assert needle in r.err, r.err


def make_certs(d):
    """A CA, a server certificate for 127.0.0.1 and a client certificate."""
    def ssl(*args):
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, cwd=d)
    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=trun-ca",
        "-keyout", "ca-key.pem", "-out", "ca.pem")
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"),
                      ("client", "extendedKeyUsage=clientAuth")):
        ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", f"{name}-key.pem", "-out", f"{name}.csr")
        (d / f"{name}.ext").write_text(ext + "\n")
        ssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem")


def test_tls_with_client_certificates(agents, tmp_path):
    certs = tmp_path / "certs"
    certs.mkdir()
    make_certs(certs)
    e = Etcd(tmp_path, env=dict(os.environ, ETCD_TLS=str(certs)))
    try:
        tls = (f"protocol=https,cacert={certs}/ca.pem,cert={certs}/client.pem,"
               f"key={certs}/client-key.pem")
        a = [agents(f"n{i}", *on_etcd(e, 2, 1, "tls", "--rdzv-conf", tls), DDP, "--steps", 2)
             for i in range(2)]
        assert [x.wait() for x in a] == [0, 0], a[0].text() + a[1].text()
        assert "RESULT world=2" in a[0].text() + a[1].text()
        # Without the client certificate etcd refuses us, and we say so.
        r = trun(*on_etcd(e, 2, 1, "tls2", "--rdzv-conf",
                          f"protocol=https,cacert={certs}/ca.pem,join_timeout=1"),
                 "--no-python", "true", timeout=30)
        assert r.returncode == 1, r.err
        assert "cannot reach the coordinator through etcd at https://127.0.0.1" in r.err, r.err
        # torch's etcd-v2 names for the same files (and its protocol in any case).
        r = trun(*on_etcd(e, 1, 1, "tls3", "--rdzv-conf",
                          f"protocol=HTTPS,ca_cert={certs}/ca.pem,ssl_cert={certs}/client.pem,"
                          f"ssl_cert_key={certs}/client-key.pem", backend="etcd-v2"),
                 "--no-python", "true", timeout=60)
        assert r.returncode == 0, r.err
    finally:
        e.down()


def ns_elastic(e, ckpt):
    return [*on_etcd(e, "1:2", 1, "ns", "--rdzv-conf",
                     "last_call_timeout=0.5,heartbeat_timeout=2"),
            ELASTIC, "--steps", 40, "--step-time", 0.1, "--ckpt", ckpt]


def test_a_host_cut_off_is_dropped_and_the_rest_carry_on(agents, hosts, tmp_path):
    # etcd on its own host (10.200.0.3); the agents on hosts 1 and 2.
    e = Etcd(tmp_path, host="10.200.0.3", prefix=hosts.run(3))
    try:
        h1 = agents("h1", *ns_elastic(e, tmp_path / "c1.pt"), prefix=hosts.run(1))
        h1.wait_for("coordinating job")
        h2 = agents("h2", *ns_elastic(e, tmp_path / "c2.pt"), prefix=hosts.run(2))
        h1.wait_for(r"attempt 0 world 2 step 3")
        assert "node 1 of 2 (10.200.0.2)" in h2.text(), h2.text()
        hosts.cut(2)
        assert h1.wait() == 0, h1.text()
        assert "its etcd lease ended" in h1.text(), h1.text()
        assert re.search(r"attempt 1 world 1 step", h1.text()), h1.text()
        # The cut-off host cannot reach etcd: its workers are stopped and it
        # says why, rather than hang.
        assert h2.wait(timeout=60) == 1, h2.text()
        assert "etcd at http://10.200.0.3:2379 does not answer from this host" in h2.text(), \
            h2.text()
    finally:
        e.down()
