"""`trun run -s local`: a gloo DDP job of two trun agents x two workers
(world 4) rendezvousing over loopback, asked about from other processes;
failures with their root cause, retries, cancel, a job that outlives its
terminal, component files and .trunconfig."""
import json
import os
import pty
import re
import select
import signal
import time

import pytest

from conftest import (EXAMPLES, FIXTURES, TRUN, free_port, live_processes_with,
                      read_until_hangup)
from torchx_helpers import jobs  # noqa: F401 (fixture)

pytestmark = pytest.mark.once(
    "the subject is the local scheduler and its supervisor; DDP is only its payload")

DDP = EXAMPLES / "ddp_train.py"
ELASTIC = FIXTURES / "elastic_train.py"


def test_ddp_2x2_asked_about_from_other_processes(jobs):
    t0 = time.time()
    handle = jobs.submit("-s", "local", "dist.ddp", "-j", "2x2", "--rdzv_port", free_port(),
                         "--script", DDP, "--", "--steps", 3)
    # `run` returns once the app is started, long before DDP is done.
    assert jobs.status(handle)["state"] in ("PENDING", "RUNNING")
    assert time.time() - t0 < 30
    st = jobs.wait(handle)
    assert st["state"] == "SUCCEEDED", st
    assert st["num_restarts"] == 0
    assert [r["state"] for r in st["roles"][0]["replicas"]] == [4, 4]
    app_id = handle.rsplit("/", 1)[1]
    assert st["url"] == f"file://{jobs.tmp}/state/trun/local/{app_id}"

    log = jobs.trun("log", handle).out
    assert log.count("RESULT world=4") == 1, log
    ranks = sorted(int(r) for r in re.findall(r"\]:rank (\d)/4 local_rank", log))
    assert ranks == [0, 1, 2, 3], log
    assert all(re.match(r"ddp_train/[01] ", line) for line in log.splitlines()), log
    one = jobs.trun("log", f"{handle}/ddp_train/1").out
    assert one and all(line.startswith("ddp_train/1 ") for line in one.splitlines())
    matched = jobs.trun("log", "--regex", "RESULT", handle).out.splitlines()
    assert len(matched) == 1 and "RESULT world=4" in matched[0]
    stderr = jobs.trun("log", "--streams", "stderr", f"{handle}/ddp_train").out
    assert "round 0: node" in stderr and "RESULT" not in stderr

    listed = jobs.trun("list", "-s", "local").out
    assert re.search(rf"^{re.escape(handle)}\s+ddp_train\s+SUCCEEDED$", listed, re.M), listed
    text = jobs.trun("status", handle).out
    assert "State: SUCCEEDED" in text and "*ddp_train[0]:SUCCEEDED" in text
    described = jobs.trun("describe", handle).out
    assert "entrypoint: bash" in described and "--nnodes 2 --nproc_per_node 2" in described


def test_a_failure_is_the_status_root_cause(jobs):
    r = jobs.trun("run", "--log", "dist.ddp", "-j", "2x2", "--rdzv_port", free_port(),
                  "--script", DDP, "--", "--steps", 3, "--fail-rank", 3)
    assert r.returncode == 1, r.err
    handle = r.out.strip()
    # --log streams the replicas' lines, prefixed, then the final status.
    assert re.search(r"^ddp_train/[01] .*ValueError: boom", r.err, re.M), r.err
    assert "State: FAILED" in r.err
    st = jobs.status(handle)
    assert st["state"] == "FAILED"
    assert "ValueError: boom" in st["structured_error_msg"]
    assert '"errorCode":1' in st["structured_error_msg"]
    # The agent whose worker raised failed; the other one either failed on
    # its own (the job's rendezvous ended) or was stopped (CANCELLED).
    states = sorted(r["state"] for r in st["roles"][0]["replicas"])
    assert states[0] == 5 and states[1] in (5, 6), st
    # The message names the replica whose error file is the root cause: it
    # exited 1, or, when the other replica's agent ended first and the
    # supervisor stopped the job, it was stopped after writing the file.
    root = [r for r in st["roles"][0]["replicas"] if "ValueError" in r["structured_error_msg"]]
    assert len(root) == 1, st
    assert re.search(rf"replica ddp_train/{root[0]['id']} (exited with 1|was killed by SIGTERM)",
                     st["msg"]), st
    text = jobs.trun("status", handle).out
    assert "FAILED (exitcode: 1)" in text and "error_msg: ValueError: boom" in text


def test_a_failure_reaped_after_its_echo_stopped_it_is_still_the_root_cause(jobs):
    # Rank 0's agent reports its failure first; rank 1's agent stops a
    # worker that had failed before (its error file is older than the stop).
    # That agent reports it as its own failure, and the app's root cause is
    # rank 1's, the earlier one.
    r = jobs.trun("run", "--wait", "dist.ddp", "-j", "2x1", "--rdzv_port", free_port(),
                  "--script", FIXTURES / "late_reaped_failure.py", "--", jobs.tmp / "mark")
    assert r.returncode == 1, r.err
    handle = r.out.strip().splitlines()[0]
    st = jobs.status(handle)
    assert st["state"] == "FAILED", st
    assert "ValueError: boom" in st["structured_error_msg"], st
    # Each agent's error file names its own worker's failure (a replica's
    # index is not its rank: either may run rank 1).
    mine = [r["structured_error_msg"] for r in st["roles"][0]["replicas"]]
    assert sorted(next(e for e in ("RuntimeError: the peer's", "ValueError: boom") if e in m)
                  for m in mine) == ["RuntimeError: the peer's", "ValueError: boom"], st


def test_cancel_from_another_process_stops_every_process(jobs):
    handle = jobs.submit("-cfg", "stop_timeout=5", "dist.ddp", "-j", "2x1", "--rdzv_port",
                         free_port(), "--script", ELASTIC, "--", "--steps", 1000, "--step-time",
                         0.2, "--ckpt", jobs.tmp / "ckpt.pt")
    jobs.wait_for_log(handle, r"step 2\b")
    app_id = handle.rsplit("/", 1)[1]
    assert live_processes_with(app_id)
    r = jobs.trun("cancel", handle)
    assert r.returncode == 0, r.err
    st = jobs.status(handle)
    assert st["state"] == "CANCELLED"
    assert [r["state"] for r in st["roles"][0]["replicas"]] == [6, 6]
    deadline = time.time() + 10
    while live_processes_with(app_id) and time.time() < deadline:
        time.sleep(0.1)
    assert live_processes_with(app_id) == []
    assert "CANCELLED" in jobs.trun("list").out
    # Cancelling an app that has ended changes nothing.
    assert jobs.trun("cancel", handle).returncode == 0
    assert jobs.status(handle)["state"] == "CANCELLED"


def test_nothing_of_an_app_outlives_it(jobs):
    # The replica leaves a process in a session of its own behind.
    r = jobs.trun("run", "--wait", "utils.sh", "--", "sh", "-c", "setsid sleep 300 & echo left")
    assert r.returncode == 0, r.err
    app_id = r.out.splitlines()[0].rsplit("/", 1)[1]
    deadline = time.time() + 10
    while live_processes_with(app_id) and time.time() < deadline:
        time.sleep(0.1)
    assert live_processes_with(app_id) == []


def test_max_retries_restart_the_app(jobs):
    script = "test -e marker || { touch marker; echo failing; exit 3; }; echo done"
    r = jobs.trun("run", "--wait", "utils.sh", "--max_retries", 1, "--", "sh", "-c", script)
    assert r.returncode == 0, r.err
    handle = r.out.splitlines()[0]
    # Not a terminal: one plain line per change.
    assert f"{handle} SUCCEEDED (restarts: 1)" in r.err, r.err
    assert f"{handle}  sh: 0 pending, 0 running, 1 succeeded, 0 failed" in r.err
    st = jobs.status(handle)
    assert st["num_restarts"] == 1
    assert jobs.trun("log", handle).out.splitlines() == ["sh/0 failing", "sh/0 done"]


COMPONENT = """\
description: Two replicas; replica 1 fails once.
params:
  marker: {type: str, help: the file that says replica 1 failed already}
  policy: {type: str, default: REPLICA}
  retries: {type: int, default: 1}
app:
  name: flaky
  roles:
    - name: worker
      image: none
      entrypoint: sh
      args:
        - -c
        - >-
          echo start ${replica_id};
          if [ ${replica_id} = 1 ] && [ ! -e ${marker} ]; then touch ${marker}; exit 4; fi;
          sleep 1; echo ok ${replica_id}
      num_replicas: 2
      max_retries: ${retries}
      retry_policy: ${policy}
"""


def test_component_files_and_retry_policies(jobs):
    comp = jobs.tmp / "flaky.yaml"
    comp.write_text(COMPONENT)
    help_text = jobs.trun("run", "./flaky.yaml", "--help").out
    assert "--marker MARKER" in help_text and "(required)" in help_text
    starts = {}
    for policy in ("REPLICA", "APPLICATION"):
        r = jobs.trun("run", "--wait", "./flaky.yaml", "--marker", f"m-{policy}", "--policy",
                      policy)
        assert r.returncode == 0, r.err
        handle = r.out.strip()
        assert jobs.status(handle)["num_restarts"] == 1
        log = jobs.trun("log", f"{handle}/worker/0").out
        starts[policy] = log.count("start 0")
        assert "worker/0 ok 0" in log
        assert "worker/1 ok 1" in jobs.trun("log", f"{handle}/worker/1").out
    # REPLICA restarts only the failed replica; APPLICATION restarts both.
    assert starts == {"REPLICA": 1, "APPLICATION": 2}
    r = jobs.trun("run", "--wait", "./flaky.yaml", "--marker", "m-none", "--retries", 0)
    assert r.returncode == 1
    assert "replica worker/1 exited with 4" in r.err


def run_on_a_terminal(jobs, *args, until):
    """Starts `trun run --wait ARGS` on a new pseudo-terminal (its own
    session, the terminal its controlling one) and reads its output until
    `until` (a string, or a tuple of strings: all of them) appears. Returns
    (pid, master fd, text so far)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(jobs.tmp)
        # As a shell on a terminal starts it, whatever this test inherited
        # (a suite run under nohup ignores SIGHUP).
        for sig in (signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        os.execve(TRUN, ["trun", "run", "--wait", *map(str, args)], jobs.env)
    seen = b""
    deadline = time.time() + 60
    wanted = [u.encode() for u in ((until,) if isinstance(until, str) else until)]
    while time.time() < deadline and not all(u in seen for u in wanted):
        ready, _, _ = select.select([fd], [], [], 1)
        if ready:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
    return pid, fd, seen.decode(errors="replace")


def test_the_app_outlives_the_terminal_that_started_it(jobs):
    # On a terminal the lines are redrawn in place (cursor up, "\x1b[F") at
    # every look, the first of which may already see the role running.
    pid, fd, text = run_on_a_terminal(jobs, "utils.sh", "--", "sh", "-c", "sleep 3; echo survived",
                                      until=("sh: 0 pending, 1 running", "\x1b[F"))
    handle = re.search(r"local://trun/[\w.-]+", text).group(0)
    assert "\x1b[F" in text and "sh: 0 pending, 1 running" in text, text
    os.close(fd)  # the terminal goes away: SIGHUP for its session
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGHUP
    st = jobs.wait(handle)
    assert st["state"] == "SUCCEEDED", st
    assert jobs.trun("log", handle).out == "sh/0 survived\n"


def test_ctrl_c_stops_waiting_not_the_app(jobs):
    pid, fd, text = run_on_a_terminal(jobs, "utils.sh", "--", "sh", "-c", "sleep 2; echo on",
                                      until="sh: 0 pending, 1 running")
    handle = re.search(r"local://trun/[\w.-]+", text).group(0)
    os.write(fd, b"\x03")
    _, status = os.waitpid(pid, 0)
    note = read_until_hangup(fd)
    os.close(fd)
    assert os.WEXITSTATUS(status) == 130
    assert f"stopped waiting; {handle} keeps running" in note, note
    assert jobs.wait(handle)["state"] == "SUCCEEDED"


def test_trunconfig_supplies_component_scheduler_and_options(jobs):
    cfg = jobs.tmp / "my.trunconfig"
    cfg.write_text("[cli:run]\ncomponent = utils.echo\nscheduler = local\n\n"
                   "[component:utils.echo]\nmsg = from config\n\n[local]\nstop_timeout = 3\n")
    env = dict(jobs.env, TRUNCONFIG=str(cfg))
    r = jobs.trun("run", "--wait", env=env)
    assert r.returncode == 0, r.err
    assert jobs.trun("log", r.out.strip()).out == "echo/0 from config\n"
    # The component's arguments follow "--" when its name comes from the file.
    dry = jobs.trun("run", "--dryrun", "--", "--msg", "from the command line", env=env)
    assert dry.returncode == 0, dry.err
    assert "- from the command line" in dry.out and "stop_timeout_s: 3.0" in dry.out
    # The project's .trunconfig is read from the working directory.
    (jobs.tmp / ".trunconfig").write_text("[component:utils.echo]\nmsg = from the project\n")
    r = jobs.trun("run", "--wait", "utils.echo")
    assert jobs.trun("log", r.out.strip()).out == "echo/0 from the project\n"


def test_dryrun_builtins_runopts_configure(jobs):
    r = jobs.trun("run", "--dryrun", "dist.ddp", "-j", "2x2", "--script", "train.py")
    assert r.returncode == 0, r.err
    assert r.out.startswith("=== APPLICATION ===\nname: train\n")
    assert "=== SCHEDULER REQUEST ===" in r.out
    assert re.search(r"/trun --rdzv_backend c10d --rdzv_endpoint "
                     r"\$\{TORCHX_RANK0_HOST:=localhost\}:29500 --rdzv_id 'train-\w+' "
                     r"--nnodes 2 --nproc_per_node 2 --tee 3 --role '' train.py", r.out), r.out
    assert not (jobs.tmp / "state").exists()  # nothing submitted
    assert "--script SCRIPT" in jobs.trun("run", "dist.ddp", "--help").out
    builtins = jobs.trun("builtins").out
    assert builtins.startswith("Found 10 builtin components:")
    for name in ("dist.ddp", "dist.spmd", "dist.torchrun", "utils.echo", "utils.touch", "utils.sh",
                 "utils.python", "utils.binary", "utils.copy", "utils.booth"):
        assert name in builtins
    resources = jobs.trun("builtins", "--resources").out
    assert re.search(r"^aws_p4d.24xlarge +96 +8 +1132416 +vpc.amazonaws.com/efa=4$", resources,
                     re.M), resources
    runopts = jobs.trun("runopts", "local").out
    assert "stop_timeout=STOP_TIMEOUT (float, 10.0)" in runopts
    assert jobs.trun("configure").returncode == 0
    assert (jobs.tmp / ".trunconfig").read_text() == "[local]\n\n[slurm]\n\n[kubernetes]\n"
    again = jobs.trun("configure", "--all")
    assert again.returncode == 2 and "exists" in again.err
    assert jobs.trun("configure", "--all", "--force").returncode == 0
    assert "stop_timeout = 10.0" in (jobs.tmp / ".trunconfig").read_text()


def test_utils_components_run(jobs):
    src = jobs.tmp / "src.txt"
    src.write_text("payload")
    for args in (["utils.touch", "--file", "touched"],
                 ["utils.copy", "--src", src, "--dst", "copied.txt"],
                 ["utils.python", "-c", "import sys; print(sys.argv[1:])", "--", "a", "b"],
                 ["utils.binary", "--entrypoint", "echo", "bin"]):
        r = jobs.trun("run", "--wait", *args)
        assert r.returncode == 0, (args, r.err)
    # TorchX's `run --stdin`: the run's arguments as one JSON object.
    r = jobs.trun("run", "--stdin", input=json.dumps({
        "component_name": "utils.sh", "scheduler": "local", "wait": True,
        "scheduler_args": {"stop_timeout": 5}, "component_args": {"num_replicas": 2},
        "component_args_str": ["touch", "from_stdin_${replica_id}"]}).encode())
    assert r.returncode == 0, r.err
    assert (jobs.tmp / "touched").exists()
    assert (jobs.tmp / "copied.txt").read_text() == "payload"
    assert (jobs.tmp / "from_stdin_0").exists() and (jobs.tmp / "from_stdin_1").exists()
    logs = jobs.trun("list").out
    assert logs.count("SUCCEEDED") == 5


def test_trun_stack_of_a_running_warm_app_shows_every_rank(jobs):
    """One replica (a trun agent) of two warm workers: their RANK is set
    after the fork, where /proc/PID/environ does not show it, so the ranks
    come from the agent's table; the warm process itself is no rank. The
    last rank sleeps in a function of its script's own while rank 0 waits
    in all_reduce."""
    script = FIXTURES / "stack_worker.py"
    sleep_line = next(i for i, line in enumerate(script.read_text().splitlines(), 1)
                      if "SLEEP_LINE" in line)
    handle = jobs.submit("-s", "local", "dist.ddp", "-j", "1x2", "--rdzv_port", free_port(),
                         "--env", "PET_START_METHOD=forkserver", "--script", script)
    ranks = jobs.wait_for_stuck_stacks(handle)
    top = ranks[1][1][0]
    assert (top["file"], top["line"]) == (str(script), sleep_line)
    (node,) = json.loads(jobs.trun("stack", "--json", handle).out)
    assert [(w["rank"], w["local_rank"]) for w in node["workers"]] == [(0, 0), (1, 1)], node
    t0 = time.monotonic()
    text = jobs.trun("stack", handle).out
    print(f"trun stack of a local app of 2 ranks took {time.monotonic() - t0:.3f} s")
    assert text.index("rank 0 (local_rank 0, host ") < text.index("rank 1 (local_rank 1, host ")
    assert "rank 0 (local_rank 0, host " in text and "rank 1 (local_rank 1, host " in text
    assert f'line {sleep_line}, in stuck_before_the_collective' in text
    jobs.trun("cancel", handle)
    r = jobs.trun("stack", handle)
    assert r.returncode != 0 and "CANCELLED" in r.err
