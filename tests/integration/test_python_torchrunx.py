"""torchrunx's public API as trun's Python package has it, in pytest's own
interpreter: the exceptions, LaunchResult, the logging helpers (names,
signatures, environment variables, files made before the job runs),
set_logging_handlers' choices, integrations.cli, and how a worker's logging
record travels as a line and is read back. No job runs here; the launches
that check the same end to end are in test_python_api.py."""
import argparse
import json
import logging
import pickle
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "python"))
import trun  # noqa: E402
from trun import _agents, _output, _worker, logs  # noqa: E402
from trun.integrations import cli  # noqa: E402

pytestmark = pytest.mark.once("pure Python in pytest's own interpreter, the same in both passes")


def test_errors_take_a_message_as_torchrunx_s_do():
    for cls in (trun.WorkerFailedError, trun.AgentFailedError):
        e = cls("msg")
        assert str(e) == "msg" and e.hostname is None and e.exitcode is None
        assert isinstance(e, Exception)
        # Raised and caught by class, and a round trip through pickle keeps the message.
        with pytest.raises(cls, match="^msg$"):
            raise e
        assert str(pickle.loads(pickle.dumps(e))) == "msg"
    w = trun.WorkerFailedError.of("h", 3, 1, -11)
    assert (w.hostname, w.rank, w.local_rank, w.exitcode, w.signal) == ("h", 3, 1, -11, "SIGSEGV")
    assert "worker rank 3 (host h, local rank 1) failed: killed by SIGSEGV" in str(w)
    a = trun.AgentFailedError.of("h", "ended unexpectedly", 9)
    assert (a.hostname, a.exitcode, str(a)) == ("h", 9, "agent on host h: ended unexpectedly")


def test_launch_result_as_torchrunx_builds_it():
    r = trun.LaunchResult(results={"a": [1, 2], "b": [3]})
    assert (r.rank(0), r.rank(2), r.index("b", 0)) == (1, 3, 3)
    assert r.by_ranks() == [1, 2, 3] and r.hostnames == ["a", "b"]
    assert trun.LaunchResult.from_returns(["a", "b"], [[1, 2], [3]]) == r
    with pytest.raises(IndexError):
        r.rank(3)
    with pytest.raises(ValueError, match="2 lists of values for 1 hostnames"):
        trun.LaunchResult.from_returns(["a"], [[1], [2]])
    # Elastic: ranks in join order, kept beside the values.
    e = trun.LaunchResult({"a": [10, 11], "b": [20]}, rank_order=[(1, 0), (0, 0), (0, 1)])
    assert e.by_ranks() == [20, 10, 11] and e.rank(0) == 20


def test_set_logging_handlers_choices():
    la = trun.Launcher(hostnames=["localhost"], workers_per_host=1)
    assert la.handler_factory == "auto"
    assert la.set_logging_handlers(None) is la and la.handler_factory is None
    la.set_logging_handlers("auto")
    assert la.handler_factory == "auto"
    f = list
    assert la.set_logging_handlers(f).handler_factory is f
    with pytest.raises(TypeError, match="'auto' or None"):
        la.set_logging_handlers("defaults")
    with pytest.raises(TypeError):
        trun.Launcher(handler_factory=f)  # as torchrunx's: not a constructor argument


def _run_handlers(cfg, hostnames, nprocs):
    """A run's output (trun._output) with its handlers prepared as a run does."""
    output = _output.Output(len(hostnames))
    output.prepare(cfg.handler_factory, cfg.log_dir, hostnames, nprocs)
    return output


def test_handlers_none_auto_and_files_made_before_the_job(tmp_path, monkeypatch):
    monkeypatch.delenv("TRUN_LOG_DIR", raising=False)
    monkeypatch.delenv("TRUN_LOG_LEVEL", raising=False)
    monkeypatch.setenv("TORCHRUNX_LOG_DIR", str(tmp_path / "x"))
    monkeypatch.setenv("TORCHRUNX_LOG_LEVEL", "WARNING")
    cfg = trun.Launcher(hostnames=["h1", "h2"], workers_per_host=2).set_logging_handlers(None)
    assert _run_handlers(cfg, ["h1", "h2"], ["2", "2"]).handlers == []
    assert not (tmp_path / "x").exists()
    # Counts known up front: every file exists before anything is written.
    run = _run_handlers(cfg.set_logging_handlers("auto"), ["h1", "h2"], ["2", "1"])
    (stamp,) = (tmp_path / "x").iterdir()
    assert sorted(p.name for p in stamp.iterdir()) == [
        "h1.log", "h1[0].log", "h1[1].log", "h2.log", "h2[0].log"]
    files = [h for h in run.handlers if isinstance(h, logging.FileHandler)]
    assert [h.filters[0](_rec("h1", 0, logging.WARNING)) for h in files].count(True) == 1
    # TORCHRUNX_LOG_LEVEL=WARNING: an INFO record reaches no file, a WARNING one its own.
    run.emit("h1", 0, 0, "stderr", "quiet", logging.INFO)
    run.emit("h1", 0, 0, "stderr", "loud", logging.WARNING, "mylib")
    run.emit("h2", None, None, "stdout", "agent line")
    for h in run.handlers:
        h.close()
    assert (stamp / "h1[0].log").read_text().endswith(":WARNING: mylib:loud\n")
    assert (stamp / "h1[1].log").read_text() == "" and (stamp / "h2.log").read_text() == ""


def test_auto_handlers_wait_for_worker_counts_decided_by_the_agents(tmp_path, monkeypatch):
    monkeypatch.setenv("TRUN_LOG_DIR", str(tmp_path))
    monkeypatch.setenv("TRUN_LOG_LEVEL", "10")
    run = _run_handlers(trun.Launcher(hostnames=["h1", "h2"]), ["h1", "h2"], ["gpu", "gpu"])
    assert run.handlers is None and not any(tmp_path.iterdir())
    run.emit("h1", None, None, "stderr", "agent 1 starts")
    with run.lock:
        run.worker_counts.update({0: 1, 1: 3})
    run.open(when_complete=True)
    (stamp,) = tmp_path.iterdir()
    assert len(list(stamp.iterdir())) == 2 + 4
    for h in run.handlers:
        h.close()
    assert "agent 1 starts" in (stamp / "h1.log").read_text()


def test_bad_log_level_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("TRUN_LOG_LEVEL", raising=False)
    monkeypatch.setenv("TORCHRUNX_LOG_LEVEL", "LOUD")
    monkeypatch.setenv("TRUN_LOG_DIR", str(tmp_path))
    with pytest.raises(ValueError, match=r"\$TORCHRUNX_LOG_LEVEL: 'LOUD' is not a logging level"):
        _run_handlers(trun.Launcher(hostnames=["h"], workers_per_host=1), ["h"], ["1"])
    with pytest.raises(ValueError, match="TORCHRUNX_LOG_LEVEL"):
        trun.default_handlers(["h"], [1])
    monkeypatch.setenv("TRUN_LOG_LEVEL", "debug")
    assert logs.log_level_from_env() == logging.DEBUG


def test_default_handlers_signature_and_redirect(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TRUN_LOG_DIR", "")
    (console,) = trun.default_handlers(["h"], [2])
    assert isinstance(console, trun.ConsoleHandler)
    hs = trun.default_handlers(["h"], [2], log_dir=tmp_path, log_level=logging.ERROR)
    assert len(hs) == 1 + 3 and all(f.filters for f in hs[1:])
    for h in hs:
        h.close()
    r = trun.RedirectHandler()
    with caplog.at_level(logging.INFO, logger="trun.h.0"):
        r.handle(_rec("h", 0, logging.WARNING))
        logging.getLogger("trun.h.0").setLevel(logging.ERROR)
        r.handle(_rec("h", 0, logging.WARNING, "dropped"))
    assert [(x.name, x.levelname, x.getMessage()) for x in caplog.records] == [
        ("trun.h.0", "WARNING", "m")]


def _rec(host, lr, level, msg="m"):
    rec = logging.LogRecord(f"trun.{host}.{lr}", level, "", 0, msg, None, None)
    rec.hostname, rec.local_rank, rec.rank = host, lr, lr
    return rec


def test_a_worker_record_travels_as_one_line(capsys):
    h = _worker._RecordLines()
    try:
        raise KeyError("k")
    except KeyError:
        rec = logging.getLogger("mylib").makeRecord("mylib", logging.WARNING, "", 0,
                                                     "two\nlines %d", (7,), sys.exc_info())
    h.emit(rec)
    line = capsys.readouterr().err
    assert line.startswith(logs.RECORD_MARK) and line.count("\n") == 1
    level, name, msg = _agents._logged_record(line.rstrip("\n"))
    assert (level, name) == (logging.WARNING, "mylib")
    assert msg.startswith("two\nlines 7\nTraceback") and "KeyError: 'k'" in msg
    # Anything else is a plain line.
    for text in ("plain", logs.RECORD_MARK + "{not json", logs.RECORD_MARK + '{"level": 1}'):
        assert _agents._logged_record(text) is None
    assert json.loads(line[len(logs.RECORD_MARK):])["level"] == 30
    # Past what the agent passes whole: plain text, every character kept.
    h.emit(logging.getLogger("big").makeRecord("big", logging.INFO, "", 0, "x" * 70000, (), None))
    assert capsys.readouterr().err == "INFO:big:" + "x" * 70000 + "\n"


def test_integrations_cli():
    p = argparse.ArgumentParser()
    cli.add_torchrunx_argument_group(p)
    la = cli.launcher_from_args(p.parse_args([]))
    assert (la.hostnames, la.workers_per_host, la.backend) == ("auto", "gpu", "nccl")
    assert la.copy_env_vars == trun.DEFAULT_ENV_VARS_FOR_COPY and la.extra_env_vars is None
    la = cli.launcher_from_args(p.parse_args(
        ["--hostnames", "a", "b", "--workers-per-host", "2", "3", "--backend", "None",
         "--worker-timeout", "5", "--agent-timeout", "7", "--extra-env-vars", "A=1", "B=x=y",
         "--env-file", "e", "--ssh-config-file", "s", "--copy-env-vars", "X*"]))
    assert (la.hostnames, la.workers_per_host, la.backend) == (["a", "b"], [2, 3], None)
    assert (la.worker_timeout, la.agent_timeout, la.env_file, la.ssh_config_file) == (
        5, 7, "e", "s")
    assert la.extra_env_vars == {"A": "1", "B": "x=y"} and la.copy_env_vars == ("X*",)
    for argv, hostnames, wph in ((["--hostnames", "slurm", "--workers-per-host", "cpu"],
                                  "slurm", "cpu"), (["--workers-per-host", "4"], "auto", 4)):
        la = cli.launcher_from_args(p.parse_args(argv))
        assert (la.hostnames, la.workers_per_host) == (hostnames, wph)
    with pytest.raises(ValueError, match="--workers-per-host: expected 'gpu', 'cpu' or numbers"):
        cli.launcher_from_args(p.parse_args(["--workers-per-host", "two"]))
    with pytest.raises(ValueError, match="--extra-env-vars: 'A' is not NAME=VALUE"):
        cli.launcher_from_args(p.parse_args(["--extra-env-vars", "A"]))
