"""Issue 19, a job that lets no one in: the store serves only the hosts of
the current round, the local scheduler's files are the user's alone, and no
--rdzv-conf secret leaks into what trun publishes."""
import json
import os
import pathlib
import pwd
import re
import stat
import subprocess
import urllib.request

import pytest

from conftest import FIXTURES, PYTHON, TRUN, base_env, free_port, trun
from torchx_helpers import Jobs

ELASTIC = FIXTURES / "elastic_train.py"

# A client of torch's own TCPStore, as a process on a host outside the job
# would use it. The jobs it tries train until it is done (--hurry): a loaded
# machine can take longer to import torch in it than a fixed number of steps
# lasts, and a client that finds no store at all times out exactly as one
# that is refused at connect would look to it, so the test would prove nothing.
STRANGER = r"""
import datetime, sys
from torch.distributed import TCPStore
try:
    s = TCPStore(sys.argv[1], int(sys.argv[2]), is_master=False,
                 timeout=datetime.timedelta(seconds=5))
    s.set("stolen", "1")
    print("SERVED", s.get("stolen"))
except Exception as e:
    print("REFUSED", type(e).__name__, str(e)[:200])
"""


def stranger(hosts, tmp_path):
    """Runs STRANGER on host 3 against host 1's store, then ends the jobs'
    wait (their --hurry file)."""
    r = subprocess.run([*hosts.run(3), PYTHON, "-c", STRANGER, "10.200.0.1", "29400"],
                       capture_output=True, text=True, timeout=60, env=base_env(), cwd=tmp_path)
    (tmp_path / "hurry").touch()
    return r


def test_a_host_outside_the_round_is_refused_while_the_workers_train(agents, hosts, tmp_path):
    args = ["--nnodes", 2, "--nproc-per-node", 1, "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "10.200.0.1:29400", "--rdzv-id", "sec",
            ELASTIC, "--steps", 300, "--step-time", 0.1, "--hurry", tmp_path / "hurry"]
    h1 = agents("h1", *args, "--ckpt", tmp_path / "c1.pt", prefix=hosts.run(1))
    h1.wait_for("hosting the store")
    h2 = agents("h2", *args, "--ckpt", tmp_path / "c2.pt", prefix=hosts.run(2))
    h1.wait_for(r"attempt 0 world 2 step 3")
    r = stranger(hosts, tmp_path)
    assert "REFUSED" in r.stdout, r.stdout + r.stderr
    assert [x.wait(timeout=180) for x in (h1, h2)] == [0, 0], h1.text() + h2.text()
    # One line names the stranger and the switch that would let it in.
    assert re.search(r"store: refused \w+ from 10\.200\.0\.3: .*store_allow=any", h1.text()), \
        f"the stranger: {r.stdout}\nh1: {h1.text()}"
    assert "RESULT world=2" in h1.text() + h2.text()


@pytest.mark.timing(
    "the stranger's torch client gives up connecting after 5 s")
def test_store_allow_any_lets_a_stranger_in(agents, hosts, tmp_path):
    args = ["--nnodes", 1, "--nproc-per-node", 1, "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "10.200.0.1:29400", "--rdzv-id", "sec",
            "--rdzv-conf", "store_allow=10.200.0.3/32;10.9.0.0/16",
            ELASTIC, "--steps", 300, "--step-time", 0.1, "--hurry", tmp_path / "hurry",
            "--ckpt", tmp_path / "c.pt"]
    h1 = agents("h1", *args, prefix=hosts.run(1))
    h1.wait_for(r"attempt 0 world 1 step 3")
    r = stranger(hosts, tmp_path)
    assert "SERVED" in r.stdout, r.stdout + r.stderr + h1.text()
    assert h1.wait(timeout=180) == 0, h1.text()


def test_a_bad_store_allow_is_a_usage_error():
    r = trun("--nnodes", 2, "--rdzv-backend", "c10d", "--rdzv-endpoint",
             f"127.0.0.1:{free_port()}", "--rdzv-conf", "store_allow=10.0.0.0/40", ELASTIC)
    assert r.returncode == 2, r.err
    assert "store_allow=10.0.0.0/40" in r.err


def test_secrets_stay_out_of_metrics_health_and_events(tmp_path):
    port = free_port()
    events = tmp_path / "events.jsonl"
    script = tmp_path / "w.py"
    script.write_text("import time, urllib.request, os\n"
                      f"print(urllib.request.urlopen('http://127.0.0.1:{port}/metrics').read()"
                      ".decode())\n"
                      f"print(urllib.request.urlopen('http://127.0.0.1:{port}/health').read()"
                      ".decode())\n")
    r = trun("--nnodes", 1, "--nproc-per-node", 1, "--health-check-port", port,
             "--event-log-file", events,
             "--rdzv-conf", "key=/secret/tls-key.pem,password=hunter2-very-secret",
             script, timeout=120, env=base_env(TRUN_JOB_TOKEN="job-token-" + "7" * 22))
    assert r.returncode == 0, r.err
    everything = r.out + r.err + events.read_text()
    assert "# TYPE" in r.out  # /metrics was read
    assert "hunter2" not in everything
    assert "/secret/tls-key.pem" not in everything
    assert "7" * 22 not in everything


@pytest.fixture
def jobs(tmp_path):
    return Jobs(tmp_path)


def test_local_state_and_logs_are_private(jobs):
    old = os.umask(0o002)
    try:
        r = jobs.trun("run", "--wait", "utils.echo", "--msg", "hi")
    finally:
        os.umask(old)
    assert r.returncode == 0, r.err
    root = jobs.tmp / "state"
    for path, dirs, files in os.walk(root):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700, path
        for f in files:
            mode = stat.S_IMODE(os.stat(os.path.join(path, f)).st_mode)
            assert mode & 0o077 == 0, (os.path.join(path, f), oct(mode))


def test_another_users_app_is_refused(jobs):
    if os.geteuid() != 0:
        pytest.skip("needs root, to give an app to another user")
    handle = jobs.trun("run", "--wait", "utils.echo", "--msg", "hi").out.strip()
    app_id = handle.rsplit("/", 1)[1]
    app_dir = jobs.tmp / "state" / "trun" / "local" / app_id
    assert app_dir.is_dir(), list((jobs.tmp / "state").rglob("*"))
    nobody = pwd.getpwnam("nobody").pw_uid
    os.chown(app_dir, nobody, -1)
    for cmd in (["status", handle], ["log", handle], ["cancel", handle]):
        r = jobs.trun(*cmd)
        assert r.returncode == 5, (cmd, r.returncode, r.err)
        assert f"belongs to user nobody (uid {nobody})" in r.err, r.err
    # Nor is it listed: `trun list` shows the user's own apps only.
    mine = jobs.trun("run", "--wait", "utils.echo", "--msg", "mine").out.strip()
    listed = jobs.trun("list").out
    assert mine in listed and handle not in listed, listed


# A worker of a `trun run` job: what it can learn of the job token from its
# agent (its parent) and the app's supervisor (the agent's parent), as any
# process of the user could, and which command lines show the token it is
# given (argv[2], reversed, so that no command line holds it; "" for none).
TOKEN_PROBE = r"""
import os, pathlib, sys
def tokens_in_environ(pid):
    try:
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return []
    return [kv[15:] for kv in env if kv.startswith(b"TRUN_JOB_TOKEN=") and len(kv) > 15]
agent = os.getppid()
supervisor = int(open(f"/proc/{agent}/stat").read().rsplit(")", 1)[1].split()[1])
found = tokens_in_environ(agent) + tokens_in_environ(supervisor)
shown = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        token = sys.argv[2][::-1].encode()
        shown += bool(token) and token in open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        pass
rank = os.environ["RANK"]
pathlib.Path(sys.argv[1], rank).write_bytes(b"".join(found))
sys.stdout.write(f"PROBE rank={rank} found={len(found)} shown={shown} "
                 f"worker_env={'TRUN_JOB_TOKEN' in os.environ}\n")
"""


@pytest.mark.parametrize("given", [False, True], ids=["generated", "submitters"])
def test_trun_run_gives_each_job_a_token_no_command_line_shows(jobs, given):
    """`trun run` makes a token per job (or passes on the submitter's) in the
    replicas' environment: both agents of a 2-node dist.ddp share it, so the
    rendezvous is closed to strangers (no warning that anyone may join, and a
    wrong token would be refused), and neither `ps`, the workers, the
    environ of their agent or the app's supervisor, the logs nor trun's state
    files show it."""
    probe, seen = jobs.tmp / "probe.py", jobs.tmp / "seen"
    probe.write_text(TOKEN_PROBE)
    seen.mkdir()
    env = dict(jobs.env)
    env.pop("TRUN_JOB_TOKEN", None)
    token = ""
    if given:
        token = env["TRUN_JOB_TOKEN"] = "given-" + "5" * 26
    handle = jobs.submit("dist.ddp", "-j", "2x1", "--rdzv_port", free_port(), "--script", probe,
                         "--", seen, token[::-1], env=env)
    st = jobs.wait(handle)
    assert st["state"] == "SUCCEEDED", st
    log = jobs.trun("log", handle).out
    assert [(seen / r).read_text() for r in ("0", "1")] == ["", ""]
    assert sorted(re.findall(r"PROBE rank=\d found=(\d+) shown=(\d+) worker_env=(\w+)", log)) \
        == [("0", "0", "False")] * 2, log
    assert "can join" not in jobs.trun("log", "--streams", "stderr", handle).out
    # A generated token is 64 hex digits; the submitter's is known.
    secret = re.compile(re.escape(token) if given else r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
    for path in (jobs.tmp / "state").rglob("*"):
        assert not path.is_file() or not secret.search(path.read_text(errors="replace")), path
    for cmd in (["status", "--json", handle], ["describe", handle]):
        assert not secret.search(jobs.trun(*cmd).out), cmd


# Two roles, each printing whether it got a job token: one marked as running
# trun's agent (as dist.ddp's role is), one not.
TWO_ROLES = """\
app:
  name: tworoles
  roles:
{roles}
"""
ROLE = """\
    - name: {name}
      image: none
      entrypoint: sh
      args: ["-c", "echo {name} token=${{TRUN_JOB_TOKEN:+yes}}"]
      num_replicas: 2
      metadata: {metadata}
"""


@pytest.mark.once("the local scheduler's rule; no torch")
def test_only_the_roles_that_run_truns_agent_get_the_job_token(jobs):
    """`trun run -s local` gives the job token to the replicas of a role that
    runs trun's agent (role metadata trun.job_token, which dist.ddp sets), and
    to no other role's program, the submitter's token or a generated one."""
    comp = jobs.tmp / "tworoles.yaml"
    comp.write_text(TWO_ROLES.format(roles=ROLE.format(name="agent", metadata="{trun.job_token: true}")
                                     + ROLE.format(name="other", metadata="{}")))
    for env in (jobs.env, {**jobs.env, "TRUN_JOB_TOKEN": "given-" + "5" * 26}):
        handle = jobs.submit("./tworoles.yaml", env=env)
        assert jobs.wait(handle)["state"] == "SUCCEEDED"
        log = jobs.trun("log", handle).out
        assert sorted(re.findall(r"(agent|other) token=(\w*)", log)) == \
            [("agent", "yes")] * 2 + [("other", "")] * 2, log


def test_trun_store_serves_everyone_unless_told(hosts):
    def client(i, port):
        return subprocess.run([*hosts.run(i), PYTHON, "-c", STRANGER, "10.200.0.1", str(port)],
                              capture_output=True, text=True, timeout=60, env=base_env()).stdout

    for allow, expect3 in (([], "SERVED"), (["--allow", "10.200.0.2"], "REFUSED")):
        port = free_port()
        store = subprocess.Popen([*hosts.run(1), TRUN, "store", "--port", str(port), *allow],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert "listening" in store.stdout.readline()
            assert "SERVED" in client(2, port)
            assert expect3 in client(3, port)
        finally:
            store.terminate()
            err = store.communicate(timeout=30)[1]
        if allow:
            assert "refused a client from 10.200.0.3" in err, err


def test_job_token_lets_only_the_jobs_agents_in(tmp_path):
    token, wrong = "0123456789abcdef" * 2, "fedcba9876543210" * 2
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    port = free_port()
    args = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "tok"]
    job = ["--no-python", "true"]
    env = {**base_env(), "TRUN_JOB_TOKEN": ""}
    # The host is given the token by descriptor (`7<FILE`), the second agent
    # by file: each reads it once, at start, and keeps no descriptor to it.
    fd = os.open(token_file, os.O_RDONLY)
    try:
        host = subprocess.Popen([TRUN, *args, "--rdzv-conf", f"job_token_fd={fd}", *job],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, pass_fds=(fd,))
    finally:
        os.close(fd)
    # Every agent on the endpoint's host may host: this one first.
    first = host.stderr.readline()
    assert "hosting the store" in first, first
    try:
        held = [p.name for p in pathlib.Path(f"/proc/{host.pid}/fd").iterdir()
                if os.path.realpath(p) == str(token_file)]
        assert held == [], held
        for given, why in (({"TRUN_JOB_TOKEN": wrong}, "refused: wrong job token"),
                           ({}, "asks for the job's token and this agent has none")):
            r = subprocess.run([TRUN, *args, *job], capture_output=True, text=True, timeout=60,
                               env={**env, **given})
            assert r.returncode == 1 and why in r.stderr, (r.returncode, r.stderr)
        # A replayed proof, on a connection of its own, opens nothing.
        r = subprocess.run([PYTHON, "-c", REPLAY, str(port)], capture_output=True, text=True,
                           timeout=60, env=base_env())
        assert "REFUSED" in r.stdout, r.stdout + r.stderr
        good = subprocess.run([TRUN, *args, "--rdzv-conf", f"job_token_file={token_file}", *job],
                              capture_output=True, text=True, timeout=60, env=env)
        assert good.returncode == 0, good.stderr
        out, err = host.communicate(timeout=60)
        assert host.returncode == 0, err
    finally:
        host.kill()
    # The host says why, for each: the wrong token, none, the replayed proof.
    assert "refused: wrong job token from 127.0.0.1" in err, err
    assert "refused: no job token from 127.0.0.1" in err, err
    assert "refused: no fresh nonce on this connection (a replayed proof?) from 127.0.0.1" in err
    for text in (out, err, good.stdout, good.stderr):
        assert token not in text and wrong not in text


# Sends a proof made for another connection's nonce, then asks for trun's keys.
REPLAY = r"""
import socket, struct, sys
def send(s, op, *args):
    b = bytes([op])
    for a in args:
        a = a.encode()
        b += struct.pack("<Q", len(a)) + a
    s.sendall(b)
def read_bytes(s):
    n = struct.unpack("<Q", s.recv(8, socket.MSG_WAITALL))[0]
    return s.recv(n, socket.MSG_WAITALL).decode() if n else ""
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(bytes([0]) + struct.pack("<I", 0x3C85F7CE))
send(s, 2, "/trun/auth/proof", "00" * 32, "ab" * 32)
answer = read_bytes(s)
print("REFUSED" if answer.startswith("refused") else "ACCEPTED " + answer)
"""


def test_a_job_of_several_nodes_without_a_token_warns_on_every_agent():
    port = free_port()
    env = base_env()
    env.pop("TRUN_JOB_TOKEN", None)
    args = [TRUN, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "warn", "--no-python", "true"]
    ps = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env) for _ in range(2)]
    errs = [p.communicate(timeout=120)[1] for p in ps]
    assert [p.returncode for p in ps] == [0, 0], errs
    for err in errs:
        warned = [line for line in err.splitlines() if "has no job token" in line]
        assert len(warned) == 1 and "TRUN_JOB_TOKEN" in warned[0], err
