"""--hang-timeout and --hang-action: a job that makes no progress is
reported, rank by rank, and can be failed (docs/cli.md, "--hang-timeout")."""
import os
import re

import pytest

from conftest import FIXTURES, free_port, read_events

SCRIPT = FIXTURES / "stack_worker.py"
SLEEP_LINE = next(i for i, line in enumerate(SCRIPT.read_text().splitlines(), 1)
                  if "SLEEP_LINE" in line)


def hang_job(agents, tmp_path, script, *args, token=()):
    """Two agents x 2 workers of a c10d job on loopback running `script`
    (its argument: the file where the sleeping rank writes when it fell
    asleep) with `--hang-timeout 5` and `args`, each with an event file;
    both, once they have exited."""
    port = free_port()
    common = ["--nnodes", 2, "--nproc-per-node", 2, "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"hang-{port}",
              "--hang-timeout", 5, "--max-restarts", 0, "--health-check-port", 0,
              "--health-check-addr", "127.0.0.1", *args]
    first = agents("first", *common, "--event-log-file", tmp_path / "first.jsonl", script,
                   tmp_path / "asleep", prefix=token)
    first.wait_for("hosting the store")
    second = agents("second", *common, "--event-log-file", tmp_path / "second.jsonl", script,
                    tmp_path / "asleep", prefix=token)
    first.wait(timeout=240)
    second.wait(timeout=60)
    return first, second


def the_report(tmp_path, first, second, odd):
    """The one agent that reported `odd` (the judge), the other, and the
    judge's one trun.group.hung event; asserts that nobody else reported."""
    judges = [a for a in (first, second) if f"error: {odd}" in a.text()]
    assert len(judges) == 1, f"first:\n{first.text()}\nsecond:\n{second.text()}"
    (judge,) = judges
    (other,) = [a for a in (first, second) if a is not judge]
    assert "on any of the job's 2 node(s)" in judge.text(), judge.text()
    assert "no progress for 5 s on any" not in other.text(), other.text()
    assert not [e for e in read_events(tmp_path / f"{other.name}.jsonl")
                if e["name"] == "trun.group.hung"]
    (report,) = [e for e in read_events(tmp_path / f"{judge.name}.jsonl")
                 if e["name"] == "trun.group.hung"]
    assert odd in report["metadata"]["summary"]
    assert report["metadata"]["idle_seconds"] == 5, report
    return judge, other, report


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"], ids=["cold", "warm"])
def test_a_hung_rank_is_named_for_the_job_at_its_own_line_and_fails_it(agents, tmp_path,
                                                                        start_method):
    # Issue 30's scenario: 2 agents x 2 workers (gloo, c10d on loopback, a
    # job token); rank 3 sleeps in a function of the script's own while
    # ranks 0-2 wait in all_reduce. Group rank 0, whose ranks 0-1 both wait,
    # makes the job's verdict from both nodes' stacks: rank 3 is on the other.
    token = ("env", f"TRUN_JOB_TOKEN=hang-{os.urandom(8).hex()}")
    first, second = hang_job(agents, tmp_path, SCRIPT, "--hang-action", "fail",
                             "--start-method", start_method, token=token)
    assert first.proc.returncode == 1, first.text()
    assert second.proc.returncode == 1, second.text()

    odd = (f"rank 3 is not where the others are: in stuck_before_the_collective at "
           f"{SCRIPT.name}:{SLEEP_LINE}")
    judge, other, report = the_report(tmp_path, first, second, odd)
    text = judge.text()
    # Rank 3's whole stack, as a traceback reads, though it runs on the
    # other node; ranks 0-2 grouped, in all_reduce, across both nodes.
    assert f'File "{SCRIPT}", line {SLEEP_LINE}, in stuck_before_the_collective' in text
    assert re.search(r"ranks 0-2: in all_reduce at \S+:\d+, called from main at "
                     rf"{SCRIPT.name}:\d+", text), text

    # Within the timeout plus 3 s of rank 3 falling asleep.
    took = report["timestamp"] / 1000 - float((tmp_path / "asleep").read_text())
    print(f"{start_method}: reported {took:.2f} s after rank 3 fell asleep")
    assert took <= 8, took
    md = report["metadata"]
    assert [g["ranks"] for g in md["groups"] if g["odd"]] == [[3]], report
    assert [g["ranks"] for g in md["groups"] if not g["odd"]] == [[0, 1, 2]], report

    # Rank 3's node failed it on the judge's verdict: the failure table's
    # root cause is rank 3, saying that it hung and where.
    hung = other.text()
    root = hung[hung.index("Root Cause"):]
    assert re.search(r"rank +: 3 \(local_rank: 1\)", root), hung
    assert "hung for 5 s: rank 3 in stuck_before_the_collective" in hung
    assert f"hung: no progress for 5 s; in stuck_before_the_collective at " \
           f"{SCRIPT.name}:{SLEEP_LINE}" in root, hung


CHECKPOINT = """\
import os, sys, time
import torch
import torch.distributed as dist


def last_rank_sleeps():
    with open(sys.argv[1], "w") as f:
        f.write(repr(time.time()))
    time.sleep(14)  # SLEEP_LINE


dist.init_process_group("gloo")
dist.barrier()
if os.environ["GROUP_RANK"] == "1":
    end = time.time() + 9
    while time.time() < end:
        pass
dist.barrier()
if dist.get_rank() == 3:
    last_rank_sleeps()
    dist.send(torch.ones(1), dst=2)
elif dist.get_rank() == 2:
    dist.recv(torch.zeros(1), src=3)
dist.destroy_process_group()
"""


def test_a_checkpoint_is_not_a_hang_and_a_judge_that_finished_still_judges(agents, tmp_path):
    # 2 agents x 2 workers, --hang-timeout 5. First node 0's ranks wait in a
    # barrier for longer than the timeout while node 1's compute without a
    # word (a checkpoint): node 0 alone looks hung, the job is not. Then
    # node 0's ranks finish (exit 0) while on node 1 rank 3 sleeps for 14 s
    # and rank 2 waits for it in recv: group rank 0, the judge, is in its
    # exit barrier, and still reports the hang, naming rank 3. Rank 3 then
    # wakes and the job succeeds (--hang-action report). Not a shorter
    # timeout: a computing rank that the machine starves below 1% of a core
    # for that long looks idle (with 3 s, seen once at a load of 25 on 2
    # cores).
    script = tmp_path / "checkpoint.py"
    script.write_text(CHECKPOINT)
    line = next(i for i, text in enumerate(CHECKPOINT.splitlines(), 1) if "SLEEP_LINE" in text)
    first, second = hang_job(agents, tmp_path, script)
    for a in (first, second):
        assert a.proc.returncode == 0, a.text()
        assert "cannot be asked" not in a.text(), a.text()
    odd = f"rank 3 is not where the others are: in last_rank_sleeps at checkpoint.py:{line}"
    judge, other, report = the_report(tmp_path, first, second, odd)
    names = [e["name"] for e in read_events(tmp_path / f"{judge.name}.jsonl")]
    assert names.index("trun.group.succeeded") < names.index("trun.group.hung"), names
    # Made after rank 3 fell asleep, the timeout later: the checkpoint was
    # not taken for a hang.
    took = report["timestamp"] / 1000 - float((tmp_path / "asleep").read_text())
    print(f"finished judge: reported {took:.2f} s after rank 3 fell asleep")
    assert took >= 4, took
    md = report["metadata"]
    assert [g["ranks"] for g in md["groups"] if g["odd"]] == [[3]], report
    assert "ranks 0-1: finished: exited 0" in md["summary"], report
    assert re.search(r"rank 2: in recv at \S+:\d+, called from <module> at checkpoint.py:\d+",
                     md["summary"]), report
