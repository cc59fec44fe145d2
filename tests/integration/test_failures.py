"""Worker failures: siblings stopped at once, torchrun's table, error files, restarts."""
import json
import os
import re
import signal
import subprocess
import time

from conftest import EXAMPLES, TORCH2, TRUN, base_env, read_until_hangup, torchrun, trun, worker


def test_first_failure_stops_siblings_and_prints_the_table():
    t0 = time.monotonic()
    r = trun("--nproc-per-node", 3, "--failure-lines", 2,
             *worker("print:p1@1", "print:p2@1", "print:p3@1", "eprint:e1@1", "exit:3@1",
                     "sleep:300"), timeout=150)
    elapsed = time.monotonic() - t0
    assert r.returncode == 1, r.err
    # The failed rank's last words (2 lines of each stream), then the table,
    # which stays last.
    words = re.search(r"^trun: error: last lines of rank 1 \(local_rank 1, pid \d+\):\n"
                      r"  stdout \| p2\n  stdout \| p3\n  stderr \| e1\n", r.err, re.M)
    assert words, r.err
    assert words.end() <= r.err.index("Root Cause"), r.err
    assert r.err.rstrip("\n").endswith("=" * 60), r.err[-300:]
    # Through trun's pipe, each line reached the console whole.
    assert re.findall(r"^p\d$", r.out, re.M) == ["p1", "p2", "p3"], r.out
    assert elapsed < 120, elapsed  # the siblings' 300 s sleep was cut short
    assert re.search(r"^=+$", r.err, re.M)
    assert re.search(r"worker\.py FAILED$", r.err, re.M)
    assert "Root Cause (first observed failure):" in r.err
    assert "  rank      : 1 (local_rank: 1)" in r.err
    assert re.search(r"  exitcode  : 3 \(pid: \d+\) $", r.err, re.M)
    # The siblings trun stopped are listed, as torchrun 2.x lists them.
    assert len(re.findall(r"  exitcode  : -15 \(pid: \d+\)  \(SIGTERM\)$", r.err, re.M)) == 2
    assert "error_file: <N/A>" in r.err


def test_record_traceback_reaches_the_table_and_agent_error_file(tmp):
    agent_file, report_file = tmp / "agent_error.json", tmp / "report.json"
    r = trun("--nproc-per-node", 2, "--log-dir", tmp / "logs", EXAMPLES / "ddp_train.py",
             "--steps", 3, "--fail-rank", 1, env=base_env(TORCHELASTIC_ERROR_FILE=agent_file,
                                                          TRUN_FAILURE_JSON=report_file))
    assert r.returncode == 1
    table = r.err[r.err.index("Root Cause"):]
    assert "ValueError: boom" in table and "Traceback (most recent call last)" in table
    # The last words, before the table, end in the traceback's last line.
    words = r.err[r.err.index("last lines of rank 1"):r.err.index("Root Cause")]
    # (torch 2.x prefixes a failed rank's traceback lines with "[rank1]: ".)
    assert re.search(r"^  stderr \| (\[rank1\]: )?ValueError: boom$", words, re.M), words
    error_file = re.search(r"error_file: (\S+)", table).group(1)
    assert error_file.endswith("attempt_0/1/error.json")
    worker_record = json.loads(open(error_file).read())
    assert worker_record["message"]["message"] == "ValueError: boom"
    ours = json.loads(agent_file.read_text())
    assert ours["message"]["errorCode"] == 1
    assert ours["message"]["message"] == "ValueError: boom"
    assert "py_callstack" in ours["message"]["extraInfo"]
    # The failure report (docs/cli.md) says the same for a program, as JSON.
    report = json.loads(report_file.read_text())
    root = report["failures"][report["root_cause"]]
    assert (root["rank"], root["local_rank"], root["exitcode"], root["signal"]) == (1, 1, 1, None)
    assert root["error_file"] == error_file and not root["stopped"], report
    assert report["name"].endswith("ddp_train.py") and report["restarts"] == 0, report
    assert "trun-failure-json" not in r.err


def test_a_terminal_gets_the_workers_straight_and_no_last_words():
    """On a terminal the workers write to it themselves, as under torchrun
    (isatty, colours and progress bars stay theirs); trun saw nothing of it
    to repeat."""
    import pty
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(TRUN, [TRUN, "--nproc-per-node", "1", "--no-python", "sh", "-c",
                         "test -t 1 && test -t 2 && echo on-a-tty; exit 3"], base_env())
    text = read_until_hangup(fd)
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 1, text
    assert "on-a-tty" in text and "Root Cause" in text, text
    assert "last lines of rank" not in text, text


def test_signal_death_is_named(tmp):
    agent_file = tmp / "agent_error.json"
    r = trun(*worker("kill:KILL"), env=base_env(TORCHELASTIC_ERROR_FILE=agent_file,
                                                TRUN_FAILURE_JSON="-"))
    assert r.returncode == 1
    assert re.search(r"exitcode  : -9 \(pid: (\d+)\)", r.err)
    pid = re.search(r"exitcode  : -9 \(pid: (\d+)\)", r.err).group(1)
    assert f"Signal 9 (SIGKILL) received by PID {pid}" in r.err
    ours = json.loads(agent_file.read_text())
    assert ours["message"]["errorCode"] == -9
    # TRUN_FAILURE_JSON=-: the report is one marked line on stderr.
    (line,) = re.findall(r"^trun-failure-json: (.*)$", r.err, re.M)
    report = json.loads(line)
    root = report["failures"][report["root_cause"]]
    assert (root["exitcode"], root["signal"], str(root["pid"])) == (-9, "SIGKILL", pid), report


def test_restart_succeeds_on_a_later_attempt(tmp):
    r = trun("--nproc-per-node", 2, "--max-restarts", 2, "--log-dir", tmp, "--tee", 1,
             *worker("print:attempt", "exit:5@0#0"))
    assert r.returncode == 0, r.err
    (run_dir,) = list(tmp.iterdir())
    assert sorted(p.name for p in run_dir.iterdir()) == ["attempt_0", "attempt_1"]
    assert "restarting, attempt 1 of 2" in r.err


def test_restart_count_counts_up(tmp):
    r = trun("--max-restarts", 2, "--no-python", "sh", "-c",
             f"echo $TORCHELASTIC_RESTART_COUNT >> {tmp}/count; "
             "[ $TORCHELASTIC_RESTART_COUNT = 2 ]")
    assert r.returncode == 0, r.err
    assert (tmp / "count").read_text().split() == ["0", "1", "2"]


def test_restarts_run_out():
    r = trun("--max-restarts", 1, *worker("exit:2"))
    assert r.returncode == 1
    assert r.err.count("failed (exitcode: 2)") == 2
    assert "worker group failed after 1 restart" in r.err


def test_a_signal_after_a_failure_still_writes_the_root_cause(tmp):
    # A scheduler that stops trun after a worker failed (the local scheduler
    # stops the other replicas of a failed job) must still learn the cause.
    # Rank 1 fails only once rank 0 ignores SIGTERM: else, on a loaded
    # machine, the stop could kill rank 0 before it set that up, and trun
    # would end (exit 1) before the test's signals came.
    agent_file = tmp / "agent_error.json"
    ready = tmp / "ignoring"
    p = subprocess.Popen([TRUN, "--nproc-per-node", "2",
                          *worker("ignore:TERM@0", f"touch:{ready}@0", f"await:{ready}@1",
                                  "exit:3@1", "sleep:60")],
                         stderr=subprocess.PIPE, env=base_env(TORCHELASTIC_ERROR_FILE=agent_file))
    seen = b""
    while b"failed (exitcode: 3)" not in seen:
        line = p.stderr.readline()
        assert line, seen
        seen += line
    p.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    p.send_signal(signal.SIGTERM)  # the second one kills the worker that ignores the first
    assert p.wait(timeout=60) == 143
    p.stderr.close()
    ours = json.loads(agent_file.read_text())
    assert ours["message"]["errorCode"] == 3


def failure_table(err):
    """The failure table from its first rule on, without what differs between
    two runs of the same job: times, pids, log folders."""
    table = err[err.index("=" * 60):]
    table = re.sub(r"time      : \S+", "time      : T", table)
    table = re.sub(r"(pid: |PID )\d+", r"\1P", table)
    return re.sub(r"error_file: \S*/(attempt_\d+/\d+/error\.json)", r"error_file: \1", table)


def test_failure_table_matches_torchrun(tmp):
    # Side by side with this torch generation's torchrun: the same failing
    # script (rank 1 raises under @record, rank 0 is stopped) prints the same
    # table, traceback included.
    args = worker("raise@1", "sleep:60")
    ours = trun("--nproc_per_node", 2, "--log_dir", tmp / "a", *args)
    theirs = torchrun("--nproc_per_node", 2, "--monitor_interval", 0.1, "--log_dir", tmp / "b",
                      *args)
    assert ours.returncode == theirs.returncode == 1
    assert "ValueError: boom" in ours.err
    table = failure_table(ours.err)
    if not TORCH2:
        # trun's table is torchrun 2.x's: torch 1.13's lists no stopped
        # sibling and names no signal after an exit code.
        table = re.sub(r"Failures:\n.*?\n(-+\n)", r"Failures:\n  <NO_OTHER_FAILURES>\n\1",
                       table, flags=re.S)
        table = re.sub(r"(exitcode  : .*\(pid: P\)) $", r"\1", table, flags=re.M)
    else:
        assert "  exitcode  : -15 (pid: P)  (SIGTERM)\n" in table
    assert table == failure_table(theirs.err)


def test_restarts_match_torchrun(tmp):
    # A rank fails attempt 0 and both pass attempt 1: the same restart
    # counts seen by the workers and the same log layout as torchrun's.
    # Rank 1 fails attempt 0 once rank 0 has counted it (else either
    # launcher may stop rank 0 first); rank 0 passes.
    script = ("c=$TORCHELASTIC_RESTART_COUNT; echo $c >> {d}/count.$LOCAL_RANK; echo out; "
              "if [ $LOCAL_RANK = 1 ] && [ $c = 0 ]; then "
              "until [ -s {d}/count.0 ]; do sleep 0.01; done; exit 1; fi")

    def job(launch, d, *extra):
        d.mkdir()
        r = launch("--nproc_per_node", 2, "--max_restarts", 2, "--log_dir", d / "logs",
                   "--redirects", 3, *extra, "--no_python", "sh", "-c", script.format(d=d))
        assert r.returncode == 0, r.err
        (run_dir,) = (d / "logs").iterdir()
        layout = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))
        return [(d / f"count.{i}").read_text().split() for i in range(2)], layout

    ours = job(trun, tmp / "a")
    assert ours[0] == [["0", "1"], ["0", "1"]]
    assert "attempt_1/1/stdout.log" in ours[1]
    assert ours == job(torchrun, tmp / "b", "--monitor_interval", 0.1)
