"""The Python package as a user runs it: a script run with PYTHON that imports trun.

Hosts other than localhost are reached through a real sshd on loopback
(tools/sshd-loopback: trun-host-1..8 are all 127.0.0.1). In the torch 2.x
pass the launcher runs inside the torch 2 root (PYTHON is tools/torch2-python)
and reaches sshd with the root's ssh client; the SSH session runs on this
machine, so the workers' interpreter there is tools/torch2-python again
(Launcher(python=...)).
"""
import json
import os
import pathlib
import re
import signal
import subprocess
import textwrap
import time
import uuid

import pytest

from conftest import PYTHON, ROOT, TORCH2, TRUN, base_env, free_port, live_processes_with

SSHD = ROOT / "tools" / "sshd-loopback"
# The interpreter workers run on SSH hosts (the session runs outside the root).
REMOTE_PYTHON = str(ROOT / "tools" / "torch2-python") if TORCH2 else PYTHON


def env_for(tmp, **extra):
    return base_env(PYTHONPATH=str(ROOT / "python"), TRUN_BINARY=TRUN,
                    TRUN_LOG_DIR=str(tmp / "logs"), **extra)


def script(tmp, body, name="launch.py"):
    path = tmp / name
    path.write_text("import os, sys, time\nimport trun\n" + textwrap.dedent(body))
    return path


def run_script(tmp, body, timeout=240, **extra):
    p = subprocess.run([PYTHON, str(script(tmp, body))], capture_output=True, text=True,
                       timeout=timeout, env=env_for(tmp, **extra), cwd=tmp)
    p.all = p.stdout + p.stderr
    return p


@pytest.fixture(scope="module")
def ssh_config(tmp_path_factory):
    if not (SSHD.exists() and os.geteuid() == 0):
        pytest.skip("sshd on loopback needs root")
    d = tmp_path_factory.mktemp("sshd")
    port = free_port()
    up = subprocess.run([str(SSHD), "up", str(d), str(port)], capture_output=True, text=True,
                        timeout=180)
    if up.returncode != 0:
        pytest.fail(f"sshd-loopback: {up.stderr}")
    cfg = pathlib.Path(up.stdout.strip().splitlines()[-1])
    # One more host that nothing answers: TEST-NET-1 is never routed.
    extra = d / "ssh_config_unreachable"
    extra.write_text(cfg.read_text() + "Host trun-unreachable\n  HostName 192.0.2.1\n"
                     "  BatchMode yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n")
    yield cfg
    subprocess.run([str(SSHD), "down", str(d)], check=False)


def ssh_kwargs(cfg):
    return (f"ssh_config_file={str(cfg)!r}, python={REMOTE_PYTHON!r}, trun_path={TRUN!r}")


DDP_FUNC = """
def train(steps):
    import hashlib, socket, torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rank = dist.get_rank()
    for _ in range(steps):
        torch.manual_seed(100 + rank)
        loss = model(torch.randn(16, 8)).pow(2).sum()
        opt.zero_grad(); loss.backward(); opt.step()
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                     for p in model.parameters())).hexdigest()
    print(f"rank {rank} of {dist.get_world_size()} digest {digest[:12]}", flush=True)
    return {"rank": rank, "env_rank": int(os.environ["RANK"]),
            "local_rank": int(os.environ["LOCAL_RANK"]),
            "world": dist.get_world_size(), "digest": digest}
"""


def test_two_ssh_hosts_gloo_ddp_digest_from_every_rank(tmp, ssh_config):
    p = run_script(tmp, DDP_FUNC + f"""
r = trun.Launcher(hostnames=["trun-host-1", "trun-host-2"], workers_per_host=2,
                  backend="gloo", {ssh_kwargs(ssh_config)}).run(train, 3)
print("RESULT", sorted(r.results), [v["rank"] for v in r.by_ranks()],
      [v["env_rank"] for v in r.by_ranks()], len({{v["digest"] for v in r.by_ranks()}}),
      r.index("trun-host-2", 1)["rank"], r.rank(2)["local_rank"], r.rank(0)["world"])
""")
    assert p.returncode == 0, p.all
    assert "RESULT ['trun-host-1', 'trun-host-2'] [0, 1, 2, 3] [0, 1, 2, 3] 1 3 0 4" in p.stdout
    # Every worker's line reached the caller, prefixed by host and rank ...
    for host, rank in (("trun-host-1", 0), ("trun-host-1", 1), ("trun-host-2", 2),
                       ("trun-host-2", 3)):
        assert re.search(rf"^\[{host}:{rank}\] rank {rank} of 4 digest ", p.stdout, re.M), p.all
    # ... and its own file under the log directory.
    files = sorted(f.name for f in (tmp / "logs").glob("*/*.log"))
    assert {"trun-host-1[0].log", "trun-host-1[1].log", "trun-host-2[0].log",
            "trun-host-2[1].log"} <= set(files), files
    one = next((tmp / "logs").glob("*/trun-host-2[[]1].log")).read_text()
    assert "rank 3 of 4 digest" in one


SECRETS_FUNC = """
def secrets_seen(job_token, hf_token):
    def environ(pid):
        try:
            return open(f"/proc/{pid}/environ", "rb").read()
        except OSError:
            return b""
    secrets = {"launcher": os.environ["TRUN_TOKEN"], "job": job_token, "hf": hf_token}
    shown = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
        except OSError:
            continue
        shown |= {name for name, s in secrets.items() if s in cmd}
    # The agent is this worker's parent, the shell that runs it its grandparent.
    agent = os.getppid()
    shell = int(open(f"/proc/{agent}/stat").read().rsplit(")", 1)[1].split()[1])
    # The shell's memory, as a process of the user may read it where ptrace
    # is allowed (no Yama here): its writable mappings, the heap included.
    in_shell = set()
    with open(f"/proc/{shell}/maps") as maps, open(f"/proc/{shell}/mem", "rb") as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if perms.startswith("rw"):
                lo, hi = (int(x, 16) for x in span.split("-"))
                mem.seek(lo)
                data = mem.read(hi - lo)
                in_shell |= {name for name, s in secrets.items() if s.encode() in data}
    return {"shown": sorted(shown), "worker_env": "TRUN_JOB_TOKEN" in os.environ,
            "agent_env": job_token.encode() in environ(agent),
            "shell_env": job_token.encode() in environ(shell),
            "shell_mem": sorted(in_shell), "hf": os.environ.get("HF_TOKEN") == hf_token}
"""


def test_secrets_reach_the_agents_but_no_command_line(tmp, ssh_config):
    """The launcher's token, the agents' job token and every copied variable
    (HF_TOKEN here) travel on the SSH channel's stdin: no process on the
    (shared) host shows them in `ps`; the remote workers get HF_TOKEN; the job
    token reaches the agents (their static rendezvous needs it) but neither
    the workers' environment nor the agent's or its shell's /proc environ,
    and no secret is in the memory of the shell that outlives the agent's
    start (/proc/PID/mem, which ptrace rules open to the user here)."""
    job_token, hf_token = uuid.uuid4().hex * 2, f"hf_{uuid.uuid4().hex}"
    p = run_script(tmp, SECRETS_FUNC + f"""
import json
r = trun.Launcher(hostnames=["trun-host-1", "trun-host-2"], workers_per_host=1,
                  backend=None, {ssh_kwargs(ssh_config)}).run(secrets_seen, {job_token!r},
                                                              {hf_token!r})
print("RESULT", json.dumps(r.by_ranks()))
""", TRUN_JOB_TOKEN=job_token, HF_TOKEN=hf_token)
    assert p.returncode == 0, p.all
    line = next(x for x in p.stdout.splitlines() if x.startswith("RESULT "))
    ranks = json.loads(line[len("RESULT "):])
    assert ranks == [{"shown": [], "worker_env": False, "agent_env": False, "shell_env": False,
                      "shell_mem": [], "hf": True}] * 2, ranks
    for secret in (job_token, hf_token):
        assert secret not in p.stdout.replace(line, "") and secret not in p.stderr
        for log in (tmp / "logs").rglob("*"):
            assert not log.is_file() or secret not in log.read_text(errors="replace"), log


def test_exception_in_rank_1_is_raised_in_the_caller(tmp):
    p = run_script(tmp, """
class Custom(ValueError):
    pass

def f():
    if int(os.environ["RANK"]) == 1:
        raise Custom("boom from rank one")
    time.sleep(60)   # rank 0 is stopped when rank 1 fails

t = time.time()
try:
    trun.launch(f, hostnames=["localhost"], workers_per_host=2, backend=None)
except ValueError as e:
    print("CAUGHT", type(e).__name__, e, e.hostname, e.rank, e.local_rank)
    print("TB", "in f" in e.remote_traceback, "Custom" in e.remote_traceback)
    print("SECONDS", round(time.time() - t, 1))
""")
    assert p.returncode == 0, p.all
    assert "CAUGHT Custom boom from rank one localhost 1 1" in p.stdout, p.all
    assert "TB True True" in p.stdout
    assert float(re.search(r"SECONDS (\S+)", p.stdout).group(1)) < 30


def test_segfaulting_worker_raises_worker_failed_error(tmp):
    p = run_script(tmp, """
def f():
    if int(os.environ["RANK"]) == 1:
        import ctypes
        ctypes.string_at(0)
    time.sleep(60)
    return 1

try:
    trun.launch(f, hostnames=["localhost"], workers_per_host=2, backend=None)
except trun.WorkerFailedError as e:
    print("CAUGHT", e.hostname, e.rank, e.local_rank, e.exitcode, e.signal)
""")
    assert p.returncode == 0, p.all
    assert "CAUGHT localhost 1 1 -11 SIGSEGV" in p.stdout, p.all


def test_restarts_run_the_function_again_with_the_attempt_number(tmp):
    p = run_script(tmp, """
def f():
    attempt = trun.restart_count()
    print("attempt", attempt, "rank", os.environ["RANK"], flush=True)
    if attempt < 2 and os.environ["RANK"] == "0":
        raise RuntimeError(f"fails on attempt {attempt}")
    return (attempt, int(os.environ["RANK"]))

r = trun.launch(f, hostnames=["localhost"], workers_per_host=2, backend="gloo", max_restarts=2)
print("RESULT", r.by_ranks())
try:
    trun.launch(f, hostnames=["localhost"], workers_per_host=2, backend=None, max_restarts=1)
except RuntimeError as e:
    print("EXHAUSTED", e)
""")
    assert p.returncode == 0, p.all
    assert "RESULT [(2, 0), (2, 1)]" in p.stdout, p.all
    assert "EXHAUSTED fails on attempt 1" in p.stdout, p.all


def test_large_results_logs_and_kwargs(tmp):
    p = run_script(tmp, """
import hashlib, logging
def f(n, *, tag):
    print(f"hello {tag} from", os.environ["RANK"], flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    logging.getLogger("mylib").warning("warned %s", os.environ["RANK"])
    logging.getLogger("mylib").debug("not forwarded")
    return bytes([int(os.environ["RANK"])]) * n

r = trun.launch(f, 100 * 2**20, tag="big", hostnames=["localhost"], workers_per_host=2,
                backend=None, log_dir=sys.argv[0] + ".logs")
print("SIZES", [len(v) for v in r.results["localhost"]], [v[-1] for v in r.by_ranks()])

# torchrunx's variables; the files' level WARNING: INFO lines reach no file,
# yet every file is there.
del os.environ["TRUN_LOG_DIR"]
os.environ.update(TORCHRUNX_LOG_DIR=sys.argv[0] + ".trx", TORCHRUNX_LOG_LEVEL="WARNING")
trun.Launcher(hostnames=["localhost"], workers_per_host=2, backend=None).run(f, 1, tag="trx")

seen = []
class Keep(logging.Handler):
    def emit(self, rec):
        seen.append((rec.hostname, rec.local_rank, rec.rank, rec.getMessage()))
        if rec.local_rank == 0:
            seen0.add((rec.levelname, rec.name, rec.getMessage(),
                       getattr(rec, "worker_logger", None)))
seen0 = set()
r = trun.Launcher(hostnames=["localhost"], workers_per_host=2, backend=None, log_dir="")
r.set_logging_handlers(lambda: [Keep()])
r.run(f, 3, tag="quiet")
print("HANDLED", sorted(x for x in seen if x[1] is not None and "hello" in x[3]))
print("RANK0", sorted(seen0))
""")
    assert p.returncode == 0, p.all
    assert ("RANK0 [('ERROR', 'trun.localhost.0', 'to stderr', None), "
            "('INFO', 'trun.localhost.0', 'hello quiet from 0', None), "
            "('WARNING', 'trun.localhost.0', 'mylib:warned 0', 'mylib')]") in p.stdout, p.all
    assert re.search(r"^\[localhost:1\] WARNING: mylib:warned 1$", p.stderr, re.M), p.all
    (trx,) = (tmp / "launch.py.trx").iterdir()
    logs = {f.name: f.read_text() for f in trx.iterdir()}
    assert sorted(logs) == ["localhost.log", "localhost[0].log", "localhost[1].log"], logs
    assert logs["localhost.log"] == "", logs
    assert ":WARNING: mylib:warned 1\n" in logs["localhost[1].log"], logs
    assert "hello" not in logs["localhost[1].log"], logs
    assert "SIZES [104857600, 104857600] [0, 1]" in p.stdout, p.all
    assert re.search(r"^\[localhost:1\] hello big from 1$", p.stdout, re.M), p.all
    assert re.search(r"^\[localhost:0\] to stderr$", p.stderr, re.M), p.all
    files = {f.name: f for f in (tmp / "launch.py.logs").glob("*/*")}
    assert {"localhost[0].log", "localhost[1].log"} <= set(files), files
    assert "hello big from 1" in files["localhost[1].log"].read_text()
    assert ("HANDLED [('localhost', 0, 0, 'hello quiet from 0'), "
            "('localhost', 1, 1, 'hello quiet from 1')]") in p.stdout
    # log_dir="" wrote nothing, and the default (TRUN_LOG_DIR here) was not used.
    assert not (tmp / "logs").exists()


def test_bad_arguments_name_the_field(tmp):
    p = run_script(tmp, """
cases = [dict(workers_per_host=0), dict(workers_per_host="many"), dict(hostnames=5),
         dict(hostnames=[]), dict(backend="tcp"), dict(max_restarts=-1),
         dict(max_restarts="2"), dict(agent_timeout=0), dict(extra_env_vars={"1X": "a"}),
         dict(extra_env_vars=["A=1"]), dict(hostnames=["a", "b"], workers_per_host=[1]),
         dict(worker_timeout="soon")]
for kw in cases:
    try:
        trun.Launcher(**kw)
        print("ACCEPTED", kw)
    except (ValueError, TypeError) as e:
        print(type(e).__name__, str(e).split(":")[0])
try:
    trun.Launcher(hostnames=["localhost"], workers_per_host=1).run("not callable")
except TypeError as e:
    print(type(e).__name__, str(e).split(":")[0])
""")
    assert p.returncode == 0, p.all
    assert "ACCEPTED" not in p.stdout
    assert p.stdout.split("\n")[:13] == [
        "ValueError workers_per_host", "ValueError workers_per_host", "TypeError hostnames",
        "ValueError hostnames", "ValueError backend", "ValueError max_restarts",
        "TypeError max_restarts", "ValueError agent_timeout", "ValueError extra_env_vars",
        "TypeError extra_env_vars", "ValueError workers_per_host", "TypeError worker_timeout",
        "TypeError func"], p.stdout


def test_unreachable_host_is_named_within_the_ssh_timeout(tmp, ssh_config):
    cfg = ssh_config.parent / "ssh_config_unreachable"
    p = run_script(tmp, f"""
t = time.time()
try:
    trun.launch(lambda: 1, hostnames=["trun-host-1", "trun-unreachable"], workers_per_host=1,
                backend=None, agent_timeout=5, ssh_config_file={str(cfg)!r},
                python={REMOTE_PYTHON!r}, trun_path={TRUN!r})
except trun.AgentFailedError as e:
    print("CAUGHT", e.hostname, "|", e)
print("SECONDS", round(time.time() - t, 1))
""", timeout=120)
    assert p.returncode == 0, p.all
    assert "CAUGHT trun-unreachable | agent on host trun-unreachable" in p.stdout, p.all
    assert float(re.search(r"SECONDS (\S+)", p.stdout).group(1)) < 20, p.stdout


def _wait_ready(proc, n, timeout=180):
    """Reads proc's stdout until n 'READY' lines; returns the text read."""
    out, deadline = "", time.time() + timeout
    while out.count("READY") < n:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"launcher ended early:\n{out}{proc.stderr.read()}")
        out += line
        assert time.time() < deadline, out
    return out


def _gone_within(token, seconds):
    """Seconds until no process holds token, or None if some still do after `seconds`."""
    start = time.time()
    while time.time() - start < seconds:
        if not live_processes_with(token):
            return time.time() - start
        time.sleep(0.02)
    return None


SLEEPER = """
def f():
    print("READY", os.environ["RANK"], flush=True)
    time.sleep(300)
"""


@pytest.mark.timing(
    "asserts how soon nothing is left running")
@pytest.mark.parametrize("how", ["kill9", "ctrl-c"])
def test_launcher_gone_leaves_nothing_running(tmp, ssh_config, how):
    token = f"TORCH_TRUN_TEST_{uuid.uuid4().hex}"
    # localhost and two SSH hosts. In the torch 2 pass localhost runs inside
    # the root and SSH sessions outside it; tools/torch2-python works in both.
    path = script(tmp, SLEEPER + f"""
try:
    trun.launch(f, hostnames=["localhost", "trun-host-1", "trun-host-2"], workers_per_host=2,
                backend="gloo", agent_timeout=30, {ssh_kwargs(ssh_config)})
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
    sys.exit(130)
""")
    # The token is in the launcher's environment, so in every agent's, every
    # worker's and every SSH client's (TORCH* is copied to SSH hosts).
    env = env_for(tmp, **{token: "1"})
    # Ctrl-C reaches a launcher that a terminal started, with SIGINT at its
    # default, whatever this test inherited (a shell's background job ignores it).
    proc = subprocess.Popen([PYTHON, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_ready(proc, 6)
        assert len(live_processes_with(token)) >= 6
        if how == "kill9":
            proc.kill()
        else:
            proc.send_signal(signal.SIGINT)
        took = _gone_within(token, 30)
        leftover = live_processes_with(token)
        print(f"{how}: every agent, worker and ssh client gone {took} s after the signal")
        assert took is not None, f"still running: {leftover}"
        assert took < (2 if how == "kill9" else 1) * 5, took  # goal 2 s / 1 s; slack for load
        if how == "ctrl-c":
            assert proc.wait(10) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pid in live_processes_with(token):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def test_python_m_trun_is_the_cli(tmp):
    p = subprocess.run([PYTHON, "-m", "trun", "--version"], capture_output=True, text=True,
                       env=env_for(tmp), timeout=60)
    assert p.returncode == 0, p.stderr
    assert "trun" in p.stdout


def _ppid(pid):
    return int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_lost_agent_raises_agent_failed_error(tmp, ssh_config):
    token = f"TORCH_TRUN_TEST_{uuid.uuid4().hex}"
    path = script(tmp, SLEEPER + f"""
t = time.time()
try:
    trun.launch(f, hostnames=["trun-host-1", "trun-host-2"], workers_per_host=1,
                backend=None, {ssh_kwargs(ssh_config)})
except trun.AgentFailedError as e:
    print("CAUGHT", e.hostname, e.exitcode, "|", e, flush=True)
""")
    proc = subprocess.Popen([PYTHON, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env_for(tmp, **{token: "1"}), cwd=tmp)
    try:
        _wait_ready(proc, 2)
        # The agent of the second host (node rank 1), found by its command line.
        agent = [pid for pid in live_processes_with(token)
                 if b"--node-rank\x001\x00" in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
                 and pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().startswith(TRUN.encode())]
        # (trun's orphan sentinel is a fork of it, with the same command line)
        agent = [pid for pid in agent if _ppid(pid) not in agent]
        assert len(agent) == 1, agent
        os.kill(agent[0], signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
        assert "CAUGHT trun-host-2 137 | agent on host trun-host-2: " in out, out + err
        assert _gone_within(token, 30) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_slurm_node_lists_expand(tmp):
    p = run_script(tmp, """
from trun._hosts import expand_nodelist
print(expand_nodelist("gpu[1-3,07],cpu-[01-02],login"))
os.environ.update(SLURM_JOB_ID="7", SLURM_JOB_NODELIST="localhost")
r = trun.launch(lambda: os.environ["GROUP_RANK"], workers_per_host=1, backend=None)
print("AUTO", r.results)
""")
    assert p.returncode == 0, p.all
    assert "['gpu1', 'gpu2', 'gpu3', 'gpu07', 'cpu-01', 'cpu-02', 'login']" in p.stdout
    assert "AUTO {'localhost': ['0']}" in p.stdout


def test_min_hosts_goes_on_without_an_unreachable_host(tmp, ssh_config):
    cfg = ssh_config.parent / "ssh_config_unreachable"
    p = run_script(tmp, f"""
def f():
    import torch, torch.distributed as dist
    t = torch.ones(1)
    dist.all_reduce(t)
    return (dist.get_rank(), int(t.item()))

r = trun.launch(f, hostnames=["trun-host-1", "trun-unreachable", "trun-host-2"],
                workers_per_host=2, backend="gloo", min_hosts=2, agent_timeout=10,
                ssh_config_file={str(cfg)!r}, python={REMOTE_PYTHON!r}, trun_path={TRUN!r})
print("RESULT", sorted(r.results), r.by_ranks(), [r.rank(i)[0] for i in range(4)])
""", timeout=180)
    assert p.returncode == 0, p.all
    assert "RESULT ['trun-host-1', 'trun-host-2'] [(0, 4), (1, 4), (2, 4), (3, 4)] [0, 1, 2, 3]" \
        in p.stdout, p.all
    assert "[trun-unreachable] trun: dropped from the job (2 hosts go on)" in p.stderr, p.all


def test_record_decorator_fills_the_agents_failure_table(tmp):
    (tmp / "train.py").write_text(textwrap.dedent("""
        import trun

        @trun.record
        def main():
            raise ValueError("recorded failure")

        main()
    """))
    p = subprocess.run([TRUN, "--nproc-per-node", "1", str(tmp / "train.py")], capture_output=True,
                       text=True, timeout=120, env=env_for(tmp), cwd=tmp)
    assert p.returncode == 1, p.stderr
    assert "ValueError: recorded failure" in p.stderr
    assert re.search(r"traceback : Traceback", p.stderr), p.stderr
