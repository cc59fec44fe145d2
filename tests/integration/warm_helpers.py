"""Warm start (--start-method forkserver) for tests borrowed from other
files: the worker contract they assert must hold unchanged with it on.
test_warm_launch.py and test_warm_failures.py collect those tests again
and use the `warm` fixture below, which gives every trun they start
--start-method forkserver; test_warm.py holds warm start's own tests. Three
files rather than one, as pytest-xdist keeps a file on one worker: the
borrowed tests are most of warm start's time in a pass."""
import functools
import subprocess
import types

import pytest

import test_failures
import test_launch
import test_logs
import test_signals
from conftest import TRUN, trun

WARM = ("--start-method", "forkserver")
POPEN = subprocess.Popen


def once_here(test, reason):
    """A borrowed test that runs here in the torch 1.13 pass only: a copy of
    it carries the mark, so the original, in its own file, keeps both passes."""
    @functools.wraps(test)
    def copy(*args, **kwargs):
        return test(*args, **kwargs)
    return pytest.mark.once(reason)(copy)


def warm_popen(cmd, *args, **kw):
    """subprocess.Popen, with --start-method forkserver after trun's path."""
    cmd = list(cmd)
    if cmd and cmd[0] == TRUN and "--start-method" not in cmd:
        cmd[1:1] = WARM
    return POPEN(cmd, *args, **kw)


class WarmSubprocess(types.ModuleType):
    """The subprocess module as a borrowed test module sees it: Popen is
    warm_popen, the rest is subprocess's."""
    Popen = staticmethod(warm_popen)

    def __getattr__(self, name):
        return getattr(subprocess, name)


@pytest.fixture(autouse=True)
def warm(monkeypatch):
    """Every trun the borrowed tests start gets --start-method forkserver
    (autouse in the files that import it)."""
    for mod in (test_launch, test_failures, test_logs):
        monkeypatch.setattr(mod, "trun", lambda *a, **kw: trun(*WARM, *a, **kw))
    # test_failures also starts trun itself with subprocess.Popen.
    monkeypatch.setattr(test_failures, "subprocess", WarmSubprocess("subprocess"))
    start = test_signals.start
    monkeypatch.setattr(test_signals, "start", lambda args, env=None: start([*WARM, *args], env))
