"""--hang-timeout and --hang-action: a job that makes no progress is
reported, rank by rank, and can be failed (docs/cli.md, "--hang-timeout")."""
import json
import re

import pytest

from conftest import FIXTURES, free_port, trun

SCRIPT = FIXTURES / "stack_worker.py"
SLEEP_LINE = next(i for i, line in enumerate(SCRIPT.read_text().splitlines(), 1)
                  if "SLEEP_LINE" in line)


def events(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"], ids=["cold", "warm"])
def test_a_hung_rank_is_named_at_its_own_line_and_fails_the_job(agents, tmp_path, start_method):
    # 2 agents x 2 workers (gloo, c10d on loopback): rank 3 sleeps in a
    # function of the script's own while ranks 0-2 wait in all_reduce.
    port = free_port()
    asleep = tmp_path / "asleep"
    args = ["--nnodes", 2, "--nproc-per-node", 2, "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"hang-{port}",
            "--start-method", start_method, "--hang-timeout", 5, "--hang-action", "fail",
            "--max-restarts", 0]
    first = agents("first", *args, "--event-log-file", tmp_path / "first.jsonl", SCRIPT, asleep)
    first.wait_for("hosting the store")
    second = agents("second", *args, "--event-log-file", tmp_path / "second.jsonl", SCRIPT,
                    asleep)
    assert first.wait(timeout=240) == 1, first.text()
    assert second.wait(timeout=60) == 1, second.text()

    odd = (f"rank 3 is not where the others are: in stuck_before_the_collective at "
           f"{SCRIPT.name}:{SLEEP_LINE}")
    (hung, other) = (first, second) if f"error: {odd}" in first.text() else (second, first)
    text = hung.text()
    assert f"error: {odd}" in text, first.text() + second.text()
    # Its whole stack, as a traceback reads; rank 2 grouped, in all_reduce.
    assert f'File "{SCRIPT}", line {SLEEP_LINE}, in stuck_before_the_collective' in text
    assert re.search(r"rank 2: in all_reduce at \S+:\d+, called from main at "
                     rf"{SCRIPT.name}:\d+", text), text
    # The node whose ranks all wait reports them grouped, naming nobody.
    assert re.search(r"ranks 0-1: in all_reduce at ", other.text()) or \
        "restarting the worker group" in other.text(), other.text()

    # Within the timeout plus 3 s of rank 3 falling asleep.
    (report,) = [e for e in events(tmp_path / f"{hung.name}.jsonl")
                 if e["name"] == "trun.group.hung"]
    took = report["timestamp"] / 1000 - float(asleep.read_text())
    print(f"{start_method}: reported {took:.2f} s after rank 3 fell asleep")
    assert took <= 8, took
    md = report["metadata"]
    assert [g["ranks"] for g in md["groups"] if g["odd"]] == [[3]], report
    assert odd in md["summary"] and md["idle_seconds"] == 5

    # The failure table's root cause is rank 3, saying that it hung and where.
    root = text[text.index("Root Cause"):]
    assert re.search(r"rank +: 3 \(local_rank: 1\)", root), text
    assert "hung for 5 s: rank 3 in stuck_before_the_collective" in text
    assert f"hung: no progress for 5 s; in stuck_before_the_collective at " \
           f"{SCRIPT.name}:{SLEEP_LINE}" in root, text


@pytest.mark.once("the progress rule reads /proc and trun's pumps, whatever the torch")
def test_a_job_that_computes_quietly_is_not_reported(tmp_path):
    # Rank 0 computes without a word for longer than the timeout while rank
    # 1 waits: that is progress. Rank 0 computes until rank 1 is done, so
    # that it is busy however late rank 1 starts on a loaded machine (with
    # a fixed 8 s each, rank 0 once finished before rank 1 woke, and for
    # the last 3 s nobody was busy: rightly reported).
    script = tmp_path / "quiet.py"
    done = tmp_path / "done"
    script.write_text("import os, pathlib, sys, time\n"
                      "done = pathlib.Path(sys.argv[1])\n"
                      "if os.environ['RANK'] == '0':\n"
                      "    end = time.time() + 60\n"
                      "    while not done.exists() and time.time() < end:\n"
                      "        pass\n"
                      "else:\n"
                      "    time.sleep(8)\n"
                      "    done.write_text('')\n")
    log = tmp_path / "events.jsonl"
    r = trun("--nproc-per-node", 2, "--hang-timeout", 3, "--hang-action", "fail",
             "--event-log-file", log, script, done, timeout=120)
    assert r.returncode == 0, r.err
    assert "no progress" not in r.err, r.err
    names = [e["name"] for e in events(log)]
    assert "trun.group.succeeded" in names and "trun.group.hung" not in names, names
