"""Helpers for the TorchX-half tests: an isolated state directory per test,
apps driven through the real binary, and cleanup of whatever is left."""
import json
import os
import re
import time

import pytest

from conftest import base_env, trun

HANDLE = re.compile(r"^(local|slurm)://trun/[\w.-]+$", re.M)


def use_env(monkeypatch, env):
    """This process's environment becomes `env`, for code that runs trun from
    inside the test process (trun.runner passes its environment on)."""
    for k in set(os.environ) - set(env):
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)


class Jobs:
    """Runs trun with XDG_STATE_HOME in the test's own directory."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.env = base_env(XDG_STATE_HOME=tmp / "state")
        self.env.pop("TRUNCONFIG", None)

    def trun(self, *args, timeout=120, **kw):
        kw.setdefault("cwd", self.tmp)
        return trun(*args, timeout=timeout, env=kw.pop("env", self.env), **kw)

    def submit(self, *args, **kw):
        r = self.trun("run", *args, **kw)
        assert r.returncode == 0, (r.returncode, r.err)
        m = HANDLE.search(r.out)
        assert m, r.out
        return m.group(0)

    def status(self, handle):
        r = self.trun("status", "--json", handle)
        assert r.returncode == 0, r.err
        return json.loads(r.out)

    def wait(self, handle, timeout=180, states=("SUCCEEDED", "FAILED", "CANCELLED")):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st = self.status(handle)
            if st["state"] in states:
                return st
            time.sleep(0.2)
        raise AssertionError(f"{handle} did not end: {st}\n{self.explain(handle)}")

    def explain(self, handle):
        """What there is to read about an app that did not do what a test
        waited for: trun's status and the app's whole log."""
        status = self.trun("status", handle)
        log = self.trun("log", handle)
        return (f"== trun status {handle} (exit {status.returncode})\n{status.out}{status.err}"
                f"== trun log {handle} (exit {log.returncode})\n{log.out}{log.err}")

    def wait_for_log(self, handle, pattern, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            out = self.trun("log", handle).out
            if re.search(pattern, out):
                return out
            time.sleep(0.2)
        raise AssertionError(f"no /{pattern}/ in the log of {handle}:\n{out}")

    def wait_for_stuck_stacks(self, handle, timeout=120):
        """`trun stack --json` of a 2-rank app of fixtures/stack_worker.py
        until rank 1 sleeps in the script's own function and rank 0 waits in
        all_reduce (an app still starting may answer with an error meanwhile).
        Returns {rank: (its node's document, its main thread's frames)}."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.trun("stack", "--json", handle)
            ranks = {}
            if r.returncode == 0:
                ranks = {w["rank"]: (node, w["threads"][0]["frames"] if w["threads"] else [])
                         for node in json.loads(r.out) for w in node["workers"]}
            if (sorted(ranks) == [0, 1] and ranks[1][1][:1]
                    and ranks[1][1][0]["function"] == "stuck_before_the_collective"
                    and any(f["function"] == "all_reduce" for f in ranks[0][1])):
                return ranks
            assert time.monotonic() < deadline, (r.returncode, r.out, r.err)
            time.sleep(0.5)

    def cancel_all(self):
        r = self.trun("list")
        for handle in HANDLE.findall(r.out):
            self.trun("cancel", handle, timeout=60)


@pytest.fixture
def jobs(tmp_path):
    j = Jobs(tmp_path)
    yield j
    j.cancel_all()
