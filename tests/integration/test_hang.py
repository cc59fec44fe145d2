"""--hang-timeout and --hang-action: a job that makes no progress is
reported, rank by rank, and can be failed (docs/cli.md, "--hang-timeout")."""
import json
import os
import re

import pytest

from conftest import FIXTURES, free_port, trun

SCRIPT = FIXTURES / "stack_worker.py"
SLEEP_LINE = next(i for i, line in enumerate(SCRIPT.read_text().splitlines(), 1)
                  if "SLEEP_LINE" in line)


def events(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"], ids=["cold", "warm"])
def test_a_hung_rank_alone_on_its_node_is_named_for_the_job_and_fails_it(agents, tmp_path,
                                                                          start_method):
    # 2 agents x 1 worker (gloo, c10d on loopback, a job token): rank 1
    # sleeps in a function of the script's own while rank 0 waits in
    # all_reduce. Each node alone has one stack and names nobody; the job's
    # verdict, made by group rank 0 from both nodes, names rank 1.
    port = free_port()
    asleep = tmp_path / "asleep"
    token = ("env", f"TRUN_JOB_TOKEN=hang-{os.urandom(8).hex()}")
    args = ["--nnodes", 2, "--nproc-per-node", 1, "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"hang-{port}",
            "--start-method", start_method, "--hang-timeout", 5, "--hang-action", "fail",
            "--max-restarts", 0, "--health-check-port", 0, "--health-check-addr", "127.0.0.1"]
    first = agents("first", *args, "--event-log-file", tmp_path / "first.jsonl", SCRIPT, asleep,
                   prefix=token)
    first.wait_for("hosting the store")
    second = agents("second", *args, "--event-log-file", tmp_path / "second.jsonl", SCRIPT,
                    asleep, prefix=token)
    assert first.wait(timeout=240) == 1, first.text()
    assert second.wait(timeout=60) == 1, second.text()

    odd = (f"rank 1 is not where the others are: in stuck_before_the_collective at "
           f"{SCRIPT.name}:{SLEEP_LINE}")
    judges = [a for a in (first, second) if f"error: {odd}" in a.text()]
    assert len(judges) == 1, f"first:\n{first.text()}\nsecond:\n{second.text()}"
    (judge,) = judges
    (other,) = [a for a in (first, second) if a is not judge]
    text = judge.text()
    assert "on any of the job's 2 node(s)" in text, text
    # Rank 1's whole stack, as a traceback reads, though it runs on the
    # other node; rank 0 grouped, in all_reduce.
    assert f'File "{SCRIPT}", line {SLEEP_LINE}, in stuck_before_the_collective' in text
    assert re.search(r"rank 0: in all_reduce at \S+:\d+, called from main at "
                     rf"{SCRIPT.name}:\d+", text), text
    # One report, by the judge only.
    assert "no progress for 5 s on any" not in other.text(), other.text()

    # Within the timeout plus 3 s of rank 1 falling asleep.
    (report,) = [e for e in events(tmp_path / f"{judge.name}.jsonl")
                 if e["name"] == "trun.group.hung"]
    took = report["timestamp"] / 1000 - float(asleep.read_text())
    print(f"{start_method}: reported {took:.2f} s after rank 1 fell asleep")
    assert took <= 8, took
    md = report["metadata"]
    assert [g["ranks"] for g in md["groups"] if g["odd"]] == [[1]], report
    assert odd in md["summary"] and md["idle_seconds"] == 5
    assert not [e for e in events(tmp_path / f"{other.name}.jsonl")
                if e["name"] == "trun.group.hung"]

    # Rank 1's node failed it on the judge's verdict: the failure table's
    # root cause is rank 1, saying that it hung and where.
    hung = other.text()
    root = hung[hung.index("Root Cause"):]
    assert re.search(r"rank +: 1 \(local_rank: 0\)", root), hung
    assert "hung for 5 s: rank 1 in stuck_before_the_collective" in hung
    assert f"hung: no progress for 5 s; in stuck_before_the_collective at " \
           f"{SCRIPT.name}:{SLEEP_LINE}" in root, hung


@pytest.mark.once("the progress rule reads /proc and trun's pumps, whatever the torch")
def test_a_node_that_waits_while_another_computes_is_not_reported(agents, tmp_path):
    # 2 agents x 2 workers: node 0's ranks wait in a barrier for longer than
    # the timeout while node 1's compute without a word (a checkpoint).
    # Node 0 alone looks hung; the job is not, and nobody reports or fails.
    script = tmp_path / "checkpoint.py"
    script.write_text("import os, time\n"
                      "import torch.distributed as dist\n"
                      "dist.init_process_group('gloo')\n"
                      "dist.barrier()\n"
                      "if os.environ['GROUP_RANK'] == '1':\n"
                      "    end = time.time() + 9\n"
                      "    while time.time() < end:\n"
                      "        pass\n"
                      "dist.barrier()\n"
                      "dist.destroy_process_group()\n")
    port = free_port()
    args = ["--nnodes", 2, "--nproc-per-node", 2, "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"quiet-{port}",
            "--hang-timeout", 3, "--hang-action", "fail", "--max-restarts", 0,
            "--health-check-port", 0, "--health-check-addr", "127.0.0.1"]
    first = agents("first", *args, "--event-log-file", tmp_path / "first.jsonl", script)
    first.wait_for("hosting the store")
    second = agents("second", *args, "--event-log-file", tmp_path / "second.jsonl", script)
    assert first.wait(timeout=240) == 0, first.text()
    assert second.wait(timeout=60) == 0, second.text()
    for a in (first, second):
        assert "no progress" not in a.text() and "cannot be asked" not in a.text(), a.text()
        names = [e["name"] for e in events(tmp_path / f"{a.name}.jsonl")]
        assert "trun.group.succeeded" in names and "trun.group.hung" not in names, names
