"""`trun run -s slurm` and the job subcommands against a real SLURM cluster
(munged, slurmctld, four slurmd nodes on loopback: tools/slurm-cluster),
started once for this module and stopped after it, also when a test fails.
Also trun started by srun inside an allocation, and every way submitting
can go wrong."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import (EXAMPLES, FIXTURES, ROOT, TRUN, base_env, free_port, live_processes_with,
                      run)
from torchx_helpers import Jobs, use_env

pytestmark = pytest.mark.once(
    "the subject is the slurm scheduler (sbatch, squeue, sacct, requeue); DDP is only its payload")

DDP = EXAMPLES / "ddp_train.py"
TOOL = ROOT / "tools" / "slurm-cluster"
HANDLE = re.compile(r"^slurm://trun/(\d+)$", re.M)

if os.geteuid() != 0:
    pytest.skip("the SLURM daemons of tools/slurm-cluster need root", allow_module_level=True)


class Cluster(Jobs):
    """The cluster; trun run in the job directory `work`, with its state
    under work/state."""

    def __init__(self, root):
        self.root = root
        (root / "work").mkdir()
        super().__init__(root / "work")
        self.work = self.tmp
        self.records = self.tmp / "state" / "trun" / "slurm"
        self.conf = root / "cluster" / "slurm.conf"
        self.env["SLURM_CONF"] = str(self.conf)

    def slurm(self, *cmd, timeout=60):
        r = run(list(map(str, cmd)), env=self.env, timeout=timeout)
        r.out = r.stdout.decode(errors="replace")
        r.err = r.stderr.decode(errors="replace")
        return r

    def submit(self, *args, **kw):
        return super().submit("-s", "slurm", *args, **kw)

    def jobs(self):
        """squeue's view: (job id, name, state) of every job."""
        r = self.slurm("squeue", "-h", "--states=all", "-o", "%i %j %T")
        assert r.returncode == 0, r.err
        return [tuple(line.split()) for line in r.out.splitlines()]

    def job_ids(self):
        """The ids of every job the controller holds (states change meanwhile)."""
        return {j[0] for j in self.jobs()}

    def explain(self, handle):
        """trun's view of the app, then the controller's and every daemon's
        lines about its job."""
        job_id = handle.rsplit("/", 1)[1]
        show = self.slurm("scontrol", "show", "job", job_id)
        logs = "".join(
            f"== {log.name}, its lines about job {job_id}\n"
            + "".join(ln for ln in log.read_text(errors="replace").splitlines(True)
                      if re.search(rf"(JobId=|[Jj]ob |\[){job_id}\b", ln))
            for log in sorted((self.conf.parent / "log").glob("*.log")))
        return (f"{super().explain(handle)}== scontrol show job {job_id}\n{show.out}{show.err}"
                f"{logs}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm")
    # Clients give up on a stopped controller after ~3 s instead of ~10.
    env = base_env(SLURM_MSG_TIMEOUT=3)
    try:
        r = run([str(TOOL), "up", str(root / "cluster"), "4"], env=env, timeout=120)
        assert r.returncode == 0, r.stderr.decode()
        yield Cluster(root)
    finally:
        run([str(TOOL), "down", str(root / "cluster")], env=env, timeout=120)


def test_ddp_2x2_succeeds_with_world_4_on_two_nodes(cluster):
    handle = cluster.submit("dist.ddp", "-j", "2x2", "--rdzv_port", free_port(),
                            "--script", DDP, "--", "--steps", 5)
    job_id = handle.rsplit("/", 1)[1]
    st = cluster.wait(handle)
    assert st["state"] == "SUCCEEDED", st
    replicas = st["roles"][0]["replicas"]
    assert [r["state"] for r in replicas] == [4, 4]
    assert sorted(r["hostname"] for r in replicas) == ["node1", "node2"], replicas
    assert st["url"] == f"file://{cluster.work}"

    # One homogeneous job of two nodes, one task each, a log file per replica.
    assert (job_id, "ddp_train", "COMPLETED") in cluster.jobs()
    for k in (0, 1):
        for ext in ("out", "err"):
            assert (cluster.work / f"slurm-{job_id}-ddp_train-{k}.{ext}").exists()
    log = cluster.trun("log", handle).out
    assert log.count("RESULT world=4") == 1, log
    ranks = sorted(int(r) for r in re.findall(r"\]:rank (\d)/4 local_rank", log))
    assert ranks == [0, 1, 2, 3], log
    assert "round 0: node 0 of 2" in log and "round 0: node 1 of 2" in log, log
    assert all(re.match(r"ddp_train/[01] ", line) for line in log.splitlines()), log
    stdout = cluster.trun("log", "--streams", "stdout", f"{handle}/ddp_train/0").out
    assert stdout and "round 0" not in stdout
    assert "RESULT" in cluster.trun("log", "--regex", "RESULT", handle).out

    text = cluster.trun("status", handle).out
    assert "State: SUCCEEDED" in text and f"Msg: SLURM job {job_id}: COMPLETED" in text
    described = cluster.trun("describe", handle).out
    assert "--nnodes 2 --nproc_per_node 2" in described


# A worker looking for the job token (argv[1], reversed, so that no command
# line holds it) in every process's environment and command line, as any
# process of the user on the node could, and for the file that brought it.
TOKEN_PROBE = r"""
import os, pathlib, sys
token = sys.argv[1][::-1].encode()
found = set()
for pid in filter(str.isdigit, os.listdir("/proc")):
    for what in ("environ", "cmdline"):
        try:
            if token in open(f"/proc/{pid}/{what}", "rb").read():
                found.add(what)
        except OSError:
            pass
files = len(list(pathlib.Path.cwd().glob(".trun-job-token-*")))
print(f"PROBE rank={os.environ['RANK']} found={sorted(found)} files={files} "
      f"worker_env={'TRUN_JOB_TOKEN' in os.environ}", flush=True)
"""


def test_the_job_token_reaches_the_agents_in_no_environment(cluster):
    """The submitter's token reaches both agents of a 2-node dist.ddp (no
    warning that anyone may join) but no environment of the job: not the
    batch script's shell, srun or the tasks' (they read it from stdin and
    become the agent), and the file that brought it is gone once read."""
    probe = cluster.work / "token_probe.py"
    probe.write_text(TOKEN_PROBE)
    token = "slurm-token-" + "7" * 20
    handle = cluster.submit("dist.ddp", "-j", "2x1", "--rdzv_port", free_port(),
                            "--script", probe, "--", token[::-1],
                            env={**cluster.env, "TRUN_JOB_TOKEN": token})
    st = cluster.wait(handle)
    assert st["state"] == "SUCCEEDED", st
    log = cluster.trun("log", handle).out
    assert sorted(re.findall(r"PROBE rank=\d found=(\S+) files=(\d+) worker_env=(\w+)", log)) \
        == [("[]", "0", "False")] * 2, log
    assert "can join" not in cluster.trun("log", "--streams", "stderr", handle).out
    assert not list(cluster.work.glob(".trun-job-token-*"))


def test_a_failing_job_ends_failed_with_the_root_cause(cluster):
    r = cluster.trun("run", "-s", "slurm", "--wait", "dist.ddp", "-j", "2x1",
                     "--rdzv_port", free_port(), "--script", DDP, "--", "--steps", 5,
                     "--fail-rank", 1)
    assert r.returncode == 1, (r.out, r.err)
    handle = HANDLE.search(r.out).group(0)
    assert "State: FAILED" in r.err
    st = cluster.status(handle)
    assert st["state"] == "FAILED"
    assert "ValueError: boom" in st["structured_error_msg"], st
    assert "NonZeroExitCode" in st["msg"], st
    # The failed one, and the other: stopped with it (CANCELLED), or, when its
    # worker's gloo saw the peer gone before the stop reached its agent,
    # failed on its own (its error file is then a later one).
    states = sorted(r["state"] for r in st["roles"][0]["replicas"])
    assert states[0] == 5 and states[1] in (5, 6), st
    text = cluster.trun("status", handle).out
    assert "error_msg: ValueError: boom" in text, text


def test_a_retried_job_is_requeued_then_succeeds(cluster):
    r = cluster.trun("run", "-s", "slurm", "--wait", "utils.sh", "--max_retries", 1, "--",
                     "sh", "-c",
                     'echo "attempt ${SLURM_RESTART_COUNT:-0}"; test "${SLURM_RESTART_COUNT:-0}" -ge 1',
                     timeout=180)
    assert r.returncode == 0, (r.out, r.err)
    handle = HANDLE.search(r.out).group(0)
    assert re.search(r"PENDING \(restarts: 1\)", r.err), r.err
    st = cluster.status(handle)
    assert st["state"] == "SUCCEEDED" and st["num_restarts"] == 1, st
    # Both attempts' output is kept.
    log = cluster.trun("log", handle).out
    assert "sh/0 attempt 0" in log and "sh/0 attempt 1" in log, log


def test_cancel_reaches_cancelled_and_stops_every_process(cluster):
    token = f"trun-slurm-cancel-{os.getpid()}"
    handle = cluster.submit("utils.sh", "--num_replicas", 2, "--env", f"TOKEN={token}", "--",
                            "sleep", 300)
    cluster.wait(handle, states=("RUNNING",))
    deadline = time.time() + 30
    while len(live_processes_with(token)) < 2 and time.time() < deadline:
        time.sleep(0.2)
    assert len(live_processes_with(token)) >= 2
    r = cluster.trun("cancel", handle)
    assert r.returncode == 0, r.err
    assert f"{handle}: CANCELLED" in r.err
    assert cluster.status(handle)["state"] == "CANCELLED"
    deadline = time.time() + 30
    while live_processes_with(token) and time.time() < deadline:
        time.sleep(0.2)
    assert not live_processes_with(token)
    # A second cancel of an ended app is fine and changes nothing.
    assert cluster.trun("cancel", handle).returncode == 0


def test_a_torchx_python_component_through_trun_run_and_the_runner(cluster, monkeypatch):
    """TorchX's Python side on SLURM: the component file of
    test_python_components.py as two 2x2 DDP jobs, one by `trun run`, one by
    trun.runner, and a third app cancelled from Python."""
    sys.path.insert(0, str(ROOT / "python"))
    from trun import specs
    from trun.runner import Runner

    component = FIXTURES / "torchx_component.py"
    args = ["--script", str(DDP), "--", "--steps", "3"]
    cli = cluster.submit(f"{component}:trainer", "--rdzv_port", free_port(), *args)
    use_env(monkeypatch, cluster.env)
    monkeypatch.chdir(cluster.work)
    runner = Runner(trun=TRUN)
    api = runner.run_component(f"{component}:trainer", ["--rdzv_port", str(free_port()), *args],
                               scheduler="slurm")
    nap = runner.run_component(f"{component}:sleeper", {"seconds": 300}, scheduler="slurm")
    assert HANDLE.fullmatch(api) and HANDLE.fullmatch(nap), (api, nap)
    for handle in (cli, api):
        try:
            st = runner.wait(handle, wait_interval=0.5, timeout=180)
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{cluster.explain(handle)}") from None
        assert st.state == specs.AppState.SUCCEEDED, st
        assert len({r.hostname for r in st.roles[0].replicas}) == 2, st
        lines = [ln for k in (0, 1) for ln in runner.log_lines(handle, "ddp_train", k)]
        assert sum("RESULT world=4" in ln for ln in lines) == 1, lines
        assert runner.describe(handle).roles[0].num_replicas == 2
    assert {cli, api, nap} <= {a.app_handle for a in runner.list("slurm")}
    deadline = time.time() + 60
    while runner.status(nap).state != specs.AppState.RUNNING and time.time() < deadline:
        time.sleep(0.2)
    runner.cancel(nap)
    assert runner.status(nap).state == specs.AppState.CANCELLED


def test_two_roles_are_a_heterogeneous_job(cluster):
    (cluster.work / "pair.yaml").write_text("""
name: pair
roles:
  - name: trainer
    image: none
    entrypoint: sh
    args: ["-c", "echo trainer ${replica_id} of job $TORCHX_JOB_ID sees rank0 $${${rank0_env}} LIST=$LIST token=$${TRUN_JOB_TOKEN:+yes}"]
    env: {LIST: "a,b,c"}
    num_replicas: 2
    resource: {cpu: 1, gpu: 0, memMB: 100}
    metadata: {trun.job_token: true}
  - name: reader
    image: none
    entrypoint: sh
    args: ["-c", "echo reader on $SLURMD_NODENAME token=$${TRUN_JOB_TOKEN:+yes}"]
    resource: {cpu: 1, gpu: 0, memMB: 100}
""")
    # The trainer's components stand for trun's agents (role metadata
    # trun.job_token): they read the job token from srun's stdin; the
    # reader's get no stdin and no token.
    dry = cluster.trun("run", "-s", "slurm", "--dryrun", "./pair.yaml")
    assert dry.returncode == 0, dry.err
    assert dry.out.count("#SBATCH hetjob") == 2, dry.out
    handle = cluster.submit("./pair.yaml")
    job_id = handle.rsplit("/", 1)[1]
    st = cluster.wait(handle)
    assert st["state"] == "SUCCEEDED", st
    assert [(r["role"], len(r["replicas"])) for r in st["roles"]] == [("trainer", 2), ("reader", 1)]
    components = [j for j in cluster.jobs() if j[0].startswith(f"{job_id}+")]
    assert sorted(j[1] for j in components) == ["reader-0", "trainer-0", "trainer-1"], components
    first_host = st["roles"][0]["replicas"][0]["hostname"]
    log = cluster.trun("log", f"{handle}/trainer").out
    for k in (0, 1):
        assert (f"trainer/{k} trainer {k} of job slurm://trun/{job_id} sees rank0 {first_host} "
                "LIST=a,b,c token=yes") in log, log
    assert re.search(r"^reader/0 reader on node\d token=$", cluster.trun("log", handle).out, re.M)


def test_log_tail_follows_the_replicas_until_the_job_ends(cluster):
    handle = cluster.submit("utils.sh", "--num_replicas", 2, "--", "sh", "-c",
                            'for i in 1 2 3; do echo "line $i"; echo "err $i" >&2; sleep 1; done')
    r = cluster.trun("log", "--tail", handle)
    assert r.returncode == 0, r.err
    for k in (0, 1):
        for i in (1, 2, 3):
            assert f"sh/{k} line {i}" in r.out and f"sh/{k} err {i}" in r.out, r.out
    assert cluster.status(handle)["state"] == "SUCCEEDED"
    # --streams picks one file of each replica.
    out = cluster.trun("log", "--streams", "stderr", f"{handle}/sh/1").out
    assert out.splitlines() == ["sh/1 err 1", "sh/1 err 2", "sh/1 err 3"], out
    # run --log follows every replica as the app runs, then exits as --wait.
    r = cluster.trun("run", "-s", "slurm", "--log", "utils.echo", "--msg", "followed")
    assert r.returncode == 0, r.err
    assert "echo/0 followed" in r.err, r.err


def test_trun_stack_reads_every_node_by_a_step_in_the_allocation(cluster):
    """A 2-node app whose last rank sleeps in a function of its script's own
    while rank 0 waits in all_reduce: `trun stack` runs one srun step over
    both nodes and shows each rank where it is; a node that does not answer
    is named (exit 1) with the other printed; no srun is exit 3, an ended
    app exit 2."""
    script = FIXTURES / "stack_worker.py"
    sleep_line = next(i for i, line in enumerate(script.read_text().splitlines(), 1)
                      if "SLEEP_LINE" in line)
    handle = cluster.submit("dist.ddp", "-j", "2x1", "--rdzv_port", free_port(),
                            "--script", script)
    ranks = cluster.wait_for_stuck_stacks(handle)
    top = ranks[1][1][0]
    assert (top["file"], top["line"]) == (str(script), sleep_line)
    # One document per node, named as SLURM names it, numbered as the replicas.
    nodes = {rank: node for rank, (node, _) in ranks.items()}
    assert sorted(n["node_rank"] for n in nodes.values()) == [0, 1], nodes
    assert {n["hostname"] for n in nodes.values()} == \
        {r["hostname"] for r in cluster.status(handle)["roles"][0]["replicas"]}
    t0 = time.monotonic()
    text = cluster.trun("stack", handle).out
    print(f"trun stack of a 2-node SLURM app took {time.monotonic() - t0:.3f} s")
    assert "rank 0 (local_rank 0, host node" in text and "rank 1 (local_rank 0, host node" in text
    assert f'line {sleep_line}, in stuck_before_the_collective' in text, text

    # The node of rank 1 does not answer (its slurmd stopped): named, rank 0 shown.
    slow = nodes[1]["hostname"]
    pid = int((cluster.root / "cluster" / f"slurmd.{slow}.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        r = cluster.trun("stack", handle, env=dict(cluster.env, TRUN_SLURM_TIMEOUT="3"))
    finally:
        os.kill(pid, signal.SIGCONT)
    assert r.returncode == 1, (r.returncode, r.err)
    assert f"node {slow} of SLURM job" in r.err and "no answer within 3 s" in r.err, r.err
    assert "rank 0 (local_rank 0" in r.out and "rank 1 (" not in r.out, r.out

    # SLURM's commands without srun.
    bin_dir = cluster.root / "no-srun"
    bin_dir.mkdir()
    for tool in ("squeue", "scontrol", "sacct"):
        real = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True,
                              text=True).stdout.strip()
        (bin_dir / tool).symlink_to(real)
    r = cluster.trun("stack", handle, env=dict(cluster.env, PATH=str(bin_dir)))
    assert r.returncode == 3 and "srun is not on PATH" in r.err, (r.returncode, r.err)

    assert cluster.trun("cancel", handle).returncode == 0
    r = cluster.trun("stack", handle)
    assert r.returncode == 2 and "is CANCELLED: it has no stacks to show" in r.err, r.err


def test_squeue_without_json_falls_back_to_scontrol(cluster):
    """Clusters whose squeue cannot print JSON (Slurm before 21.08, or no
    openapi plugins): the same answers from `scontrol -o show job`."""
    bin_dir = cluster.root / "old-squeue"
    bin_dir.mkdir()
    real = subprocess.run(["sh", "-c", "command -v squeue"], capture_output=True,
                          text=True).stdout.strip()
    (bin_dir / "squeue").write_text(
        "#!/bin/sh\ncase \"$*\" in *--json*) echo \"squeue: unrecognized option '--json'\" >&2;"
        f" exit 1;; esac\nexec {real} \"$@\"\n")
    (bin_dir / "squeue").chmod(0o755)
    env = dict(cluster.env, PATH=f"{bin_dir}:{cluster.env['PATH']}")
    handle = cluster.submit("utils.sh", "--num_replicas", 2, "--", "sleep", 30, env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        r = cluster.trun("status", "--json", handle, env=env)
        assert r.returncode == 0, r.err
        st = json.loads(r.out)
        if st["state"] == "RUNNING":
            break
        time.sleep(0.3)
    assert st["state"] == "RUNNING", st
    hosts = {r["hostname"] for r in st["roles"][0]["replicas"]}
    assert len(hosts) == 2 and all(re.fullmatch(r"node\d", h) for h in hosts), st
    listed = cluster.trun("list", "-s", "slurm", env=env).out
    assert re.search(rf"^{re.escape(handle)}\s+sh\s+RUNNING$", listed, re.M), listed
    r = cluster.trun("cancel", handle, env=env)
    assert r.returncode == 0 and "CANCELLED" in r.err, r.err


def test_list_shows_this_users_jobs_with_their_app_names(cluster):
    handle = cluster.submit("utils.echo", "--msg", "listed")
    cluster.wait(handle)
    r = cluster.trun("list", "-s", "slurm")
    assert r.returncode == 0, r.err
    assert re.search(rf"^{re.escape(handle)}\s+echo\s+SUCCEEDED$", r.out, re.M), r.out
    assert r.out.splitlines()[0].split() == ["APP", "HANDLE", "APP", "NAME", "APP", "STATUS"]


def test_dryrun_prints_the_exact_script_and_submits_nothing(cluster):
    before = cluster.job_ids()
    r = cluster.trun("run", "-s", "slurm", "--dryrun", "-cfg",
                     "partition=debug,time=10,comment=dry run,nomem=true,job_dir=runs/a",
                     "dist.ddp", "-j", "2x2", "--script", DDP)
    assert r.returncode == 0, r.err
    request = r.out.split("=== SCHEDULER REQUEST ===\n", 1)[1]
    command, script = request.split("\n", 1)
    m = re.match(r"sbatch --parsable '--comment=dry run' --chdir=(\S+) (\S+/sbatch\.sh)$", command)
    assert m, command
    assert m.group(1) == str(cluster.work / "runs" / "a")
    assert ("#SBATCH --job-name=ddp_train --requeue --open-mode=append --nodes=2 "
            "--ntasks-per-node=1 --cpus-per-task=2 --partition=debug --time=10\n") in script
    assert "--mem" not in script
    body = script.split("#----------------\n")[-1]
    assert body.startswith("#!/bin/bash\n")
    # The script is what sbatch would get: bash reads it, and submitting it
    # by hand runs the app.
    assert run(["bash", "-n", "-c", body]).returncode == 0
    assert cluster.job_ids() == before
    assert not (cluster.work / "runs").exists()
    assert not list(cluster.records.glob("submit-*"))


def test_srun_inside_an_allocation_needs_no_flags(cluster):
    # salloc takes two nodes and runs srun there, one trun per node: the
    # agents find each other from SLURM's environment alone.
    r = cluster.slurm("salloc", "-N", 2, "srun", "--ntasks-per-node=1", TRUN,
                      "--nproc-per-node", 2, "--tee", 3, DDP, "--steps", 3, timeout=180)
    assert r.returncode == 0, (r.out, r.err)
    assert r.out.count("RESULT world=4") == 1, r.out
    assert "node 0 of 2" in r.err and "node 1 of 2" in r.err, r.err
    job_id = re.search(r"Granted job allocation (\d+)", r.err).group(1)
    assert f"store at node1:{15000 + int(job_id) % 10000}" in r.err, r.err

    # The same from a batch script: srun inside sbatch.
    script = cluster.work / "inside.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --nodes=2\n"
                      f"srun --ntasks-per-node=1 {TRUN} --nproc-per-node 1 --tee 3 {DDP} --steps 3\n")
    r = cluster.slurm("sbatch", "--parsable", "--wait", f"--chdir={cluster.work}", script,
                      timeout=180)
    assert r.returncode == 0, (r.out, r.err)
    out = (cluster.work / f"slurm-{r.out.strip()}.out").read_text()
    assert "RESULT world=2" in out, out

    # A one-node step: torchrun's implied standalone (a store of its own on
    # a free port), not the allocation's rendezvous (issue 28).
    r = cluster.slurm("salloc", "-N", 1, "srun", TRUN, "--nproc-per-node", 2, "--tee", 3, DDP,
                      "--steps", 3, timeout=180)
    assert r.returncode == 0, (r.out, r.err)
    assert r.out.count("RESULT world=2") == 1, r.out

    # Several tasks per node would be several agents per node: named, exit 2.
    r = cluster.slurm("salloc", "-N", 1, "-n", 2, "srun", TRUN, "--nproc-per-node", 1, DDP,
                      timeout=120)
    assert r.returncode != 0
    assert "run one task per node (srun --ntasks-per-node=1" in r.err, r.err


@pytest.mark.parametrize("extra,code,needle", [
    (["-cfg", "partition=nope"], 2, "-cfg partition=nope: SLURM has no such partition"),
    (["-cfg", "time=forever"], 2, "sbatch refused the job"),
    (["-cfg", "nomem=maybe"], 2, "nomem: expected true/1/yes/on"),
    (["-cfg", "partiton=debug"], 2, "did you mean 'partition'"),
    (["-cfg", "job_dir=/proc/trun-no"], 2, "-cfg job_dir: cannot create /proc/trun-no"),
])
def test_bad_run_options_are_refused_and_submit_nothing(cluster, extra, code, needle):
    before = cluster.job_ids()
    r = cluster.trun("run", "-s", "slurm", *extra, "utils.echo")
    assert r.returncode == code, (r.returncode, r.err)
    assert needle in r.err, r.err
    assert cluster.job_ids() == before
    assert not list(cluster.records.glob("submit-*"))


def test_a_bad_partition_names_the_partitions(cluster):
    r = cluster.trun("run", "-s", "slurm", "-cfg", "partition=gpu", "utils.echo")
    assert r.returncode == 2
    assert "The partitions are debug*" in r.err, r.err


def test_more_nodes_than_the_cluster_has_is_refused(cluster):
    r = cluster.trun("run", "-s", "slurm", "dist.ddp", "-j", "9x1", "--script", DDP)
    assert r.returncode == 2, r.err
    assert "sbatch refused the job" in r.err and "nothing was submitted" in r.err, r.err


def test_no_sbatch_on_path(cluster):
    env = dict(cluster.env, PATH="/nonexistent")
    r = cluster.trun("run", "-s", "slurm", "utils.echo", env=env)
    assert r.returncode == 3, r.err
    assert "sbatch is not on PATH" in r.err and "apt-get install slurm-client" in r.err, r.err
    r = cluster.trun("status", "slurm://trun/1", env=env)
    assert r.returncode == 3 and "squeue is not on PATH" in r.err, r.err


def test_the_controller_down(cluster):
    # A configuration whose controller port nobody listens on.
    down = cluster.root / "down.conf"
    down.write_text(re.sub(r"SlurmctldPort=\d+", f"SlurmctldPort={free_port()}",
                           cluster.conf.read_text()))
    env = dict(cluster.env, SLURM_CONF=str(down))
    before = cluster.job_ids()
    r = cluster.trun("run", "-s", "slurm", "utils.echo", env=env)
    assert r.returncode == 4, (r.returncode, r.err)
    assert "the SLURM controller cannot be reached" in r.err, r.err
    assert "nothing was submitted" in r.err and "scontrol ping" in r.err, r.err
    assert cluster.job_ids() == before
    r = cluster.trun("list", "-s", "slurm", env=env)
    assert r.returncode == 4 and "cannot be reached" in r.err, r.err
    r = cluster.trun("status", "slurm://trun/99999", env=env)
    assert r.returncode == 4 and "cannot be reached" in r.err, r.err
    # A job that has ended is in the job-completion file, which needs no
    # controller.
    handle = cluster.submit("utils.echo", "--msg", "ended")
    cluster.wait(handle)
    deadline = time.time() + 30
    while time.time() < deadline:
        r = cluster.trun("status", "--json", handle, env=env)
        if r.returncode == 0:
            break
        time.sleep(0.3)
    assert r.returncode == 0, r.err
    assert json.loads(r.out)["state"] == "SUCCEEDED"


def test_an_unknown_job(cluster):
    r = cluster.trun("status", "slurm://trun/99999")
    assert r.returncode == 2 and "no SLURM job 99999" in r.err, r.err
    r = cluster.trun("status", "slurm://trun/abc")
    assert r.returncode == 2 and "'abc' is not a SLURM job id" in r.err, r.err
    r = cluster.trun("log", "slurm://trun/99999")
    assert r.returncode == 2, r.err


def test_a_cut_off_sbatch_is_never_submitted_twice(cluster):
    """The controller stops answering while sbatch waits: trun gives up on
    sbatch, cannot tell whether the job arrived, and says so (exit 1). The
    controller then wakes and creates the job from the request it had
    received; `trun list` finds it by its script and adopts it. One job."""
    pid = int((cluster.root / "cluster" / "slurmctld.pid").read_text())
    before = cluster.job_ids()
    env = dict(cluster.env, TRUN_SLURM_TIMEOUT="2")
    os.kill(pid, signal.SIGSTOP)
    try:
        r = cluster.trun("run", "-s", "slurm", "utils.echo", "--msg", "once", env=env)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert r.returncode == 1, (r.returncode, r.err)
    assert "sbatch did not answer within 2 s" in r.err, r.err
    assert "check there before running again" in r.err, r.err
    deadline = time.time() + 30
    new = []
    while not new and time.time() < deadline:
        new = [j for j in cluster.jobs() if j[0] not in before]
        time.sleep(0.2)
    assert len(new) == 1, new
    listed = cluster.trun("list", "-s", "slurm").out
    handle = f"slurm://trun/{new[0][0]}"
    assert re.search(rf"^{re.escape(handle)}\s+echo\s", listed, re.M), listed
    assert cluster.wait(handle)["state"] == "SUCCEEDED"
    assert [j for j in cluster.jobs() if j[0] not in before] == [(new[0][0], "echo", "COMPLETED")]
    assert not list(cluster.records.glob("submit-*"))


def test_a_job_the_controller_forgot_is_read_from_sacct(cluster):
    """Last: restarting the controller from a clean state forgets every job;
    status falls back to the job-completion file (`sacct -c`)."""
    handle = cluster.submit("utils.echo", "--msg", "remembered")
    assert cluster.wait(handle)["state"] == "SUCCEEDED"
    env = base_env(SLURM_MSG_TIMEOUT=3)
    assert run([str(TOOL), "down", str(cluster.root / "cluster")], env=env).returncode == 0
    assert run([str(TOOL), "up", str(cluster.root / "cluster"), "4"], env=env).returncode == 0
    assert cluster.slurm("squeue", "-h", "-j", handle.rsplit("/", 1)[1]).returncode != 0
    st = cluster.status(handle)
    assert st["state"] == "SUCCEEDED", st
    assert st["roles"][0]["role"] == "echo"
    assert "echo/0 remembered" in cluster.trun("log", handle).out
