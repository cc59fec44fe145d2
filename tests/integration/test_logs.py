"""Log layout, redirects, tee, prefixes and filters."""
import re

from conftest import base_env, trun, worker


def run_dir(log_dir):
    (d,) = list(log_dir.iterdir())
    return d


def test_redirect_all_writes_files_and_nothing_to_console(tmp):
    r = trun("--nproc-per-node", 2, "--log-dir", tmp, "-r", 3,
             *worker("print:out-line", "eprint:err-line"))
    assert r.returncode == 0, r.err
    assert "out-line" not in r.out and "err-line" not in r.err
    d = run_dir(tmp)
    # "<run id>_<8 random characters>"; one static node without a store
    # address runs under a uuid of its own, as torchrun 2.x's does.
    assert re.fullmatch(r"[0-9a-f-]{36}_\w{8}", d.name), d.name
    for lr in (0, 1):
        assert (d / "attempt_0" / str(lr) / "stdout.log").read_text() == "out-line\n"
        assert (d / "attempt_0" / str(lr) / "stderr.log").read_text() == "err-line\n"


def test_tee_prefixes_console_and_keeps_files_raw(tmp):
    r = trun("--nproc-per-node", 2, "--log-dir", tmp, "--tee", 3,
             *worker("print:hello", "eprint:oops"))
    assert r.returncode == 0, r.err
    assert sorted(r.out.splitlines()) == ["[default0]:hello", "[default1]:hello"]
    assert "[default0]:oops" in r.err.splitlines() and "[default1]:oops" in r.err.splitlines()
    assert (run_dir(tmp) / "attempt_0" / "1" / "stdout.log").read_text() == "hello\n"


def test_tee_map_per_rank(tmp):
    r = trun("--nproc-per-node", 2, "--log-dir", tmp, "-t", "0:1,1:2",
             *worker("print:o", "eprint:e"))
    assert r.returncode == 0, r.err
    assert "[default0]:o" in r.out.splitlines() and "[default1]:o" not in r.out
    assert "[default1]:e" in r.err.splitlines() and "[default0]:e" not in r.err
    a = run_dir(tmp) / "attempt_0"
    assert (a / "0" / "stdout.log").exists() and not (a / "0" / "stderr.log").exists()
    assert (a / "1" / "stderr.log").exists() and not (a / "1" / "stdout.log").exists()


def test_local_ranks_filter(tmp):
    r = trun("--nproc-per-node", 3, "--log-dir", tmp, "--tee", 3, "--local-ranks-filter", 1,
             *worker("print:x"))
    assert r.returncode == 0, r.err
    assert r.out.splitlines() == ["[default1]:x"]
    # Files are not filtered.
    assert (run_dir(tmp) / "attempt_0" / "2" / "stdout.log").read_text() == "x\n"
    # Without tee the filter still hides the other ranks.
    r = trun("--nproc-per-node", 3, "--local-ranks-filter", "0,2", *worker("print:y@0", "print:z@2",
                                                                          "print:w@1"))
    assert sorted(r.out.splitlines()) == ["y", "z"]


def test_prefix_template():
    r = trun("--nproc-per-node", 2, "--tee", 1, *worker("print:v"),
             env=base_env(TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="${role_name}-${rank}:"))
    assert sorted(r.out.splitlines()) == ["default-0:v", "default-1:v"]


def test_partial_lines_and_raw_bytes_survive(tmp):
    r = trun("--log-dir", tmp, "--tee", 3, *worker("bytes", "partial:no-newline"))
    assert r.returncode == 0, r.err
    assert r.stdout == b"[default0]:\xff\xfe raw\n[default0]:no-newline"
    assert b"[default0]:\xfd err\n" in r.stderr
    f = run_dir(tmp) / "attempt_0" / "0" / "stdout.log"
    assert f.read_bytes() == b"\xff\xfe raw\nno-newline"


def test_crash_keeps_the_tail(tmp):
    r = trun("--log-dir", tmp, "--tee", 3, *worker("print:last words", "partial:cut", "kill:KILL"))
    assert r.returncode == 1
    assert r.out == "[default0]:last words\n[default0]:cut"
    assert (run_dir(tmp) / "attempt_0" / "0" / "stdout.log").read_text() == "last words\ncut"


def test_output_streams_before_the_worker_ends(tmp):
    # A line must reach the console while the worker still runs: no poll
    # interval, no end-of-process flush.
    import subprocess
    import time
    from conftest import TRUN
    p = subprocess.Popen([TRUN, "--tee", "3", *worker("print:early", "sleep:20")],
                         stdout=subprocess.PIPE, env=base_env())
    try:
        t0 = time.monotonic()
        line = p.stdout.readline()
        assert line == b"[default0]:early\n"
        assert time.monotonic() - t0 < 10
    finally:
        p.terminate()
        p.wait(timeout=60)


def test_log_dir_dev_null_disables_files():
    r = trun("--log-dir", "/dev/null", "-r", 3, "--no-python", "sh", "-c",
             "echo \"[$TORCHELASTIC_ERROR_FILE]\" >&2")
    assert r.returncode == 0
    assert r.err == ""
