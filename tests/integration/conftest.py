"""Shared helpers: run build/trun (and torch 1.13's torchrun) as a user would."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLES = ROOT / "examples"
PYTHON = os.environ.get("PYTHON_EXEC", "/usr/bin/python3")
TRUN = os.environ.get("TRUN", str(ROOT / "build" / "trun"))
TORCHRUN = [PYTHON, str(ROOT / "tools" / "torchrun113")]


def base_env(**extra):
    env = dict(os.environ)
    env["PYTHON_EXEC"] = PYTHON
    # Nothing of the caller's worker-facing settings may leak into a case.
    for k in list(env):
        if k.startswith("PET_") or k in ("OMP_NUM_THREADS", "TORCHELASTIC_ERROR_FILE",
                                          "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"):
            del env[k]
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run(cmd, timeout=120, env=None, **kw):
    """Runs a command to completion; output as bytes-decoded text."""
    return subprocess.run(cmd, capture_output=True, timeout=timeout, env=env or base_env(), **kw)


def trun(*args, timeout=120, env=None, **kw):
    r = run([TRUN, *map(str, args)], timeout=timeout, env=env, **kw)
    r.out = r.stdout.decode(errors="replace")
    r.err = r.stderr.decode(errors="replace")
    return r


def torchrun(*args, timeout=180, env=None):
    r = run([*TORCHRUN, *map(str, args)], timeout=timeout, env=env)
    r.out = r.stdout.decode(errors="replace")
    r.err = r.stderr.decode(errors="replace")
    return r


def worker(*actions):
    """The command line tail that runs tests/fixtures/worker.py with actions."""
    return [str(FIXTURES / "worker.py"), *actions]


def live_processes_with(token):
    """Pids of running (not zombie) processes whose argv or environment holds token."""
    found = []
    for p in pathlib.Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            if (p / "stat").read_text().split(") ")[1].startswith("Z"):
                continue
            blob = (p / "cmdline").read_bytes() + (p / "environ").read_bytes()
        except (OSError, IndexError):
            continue
        if token.encode() in blob:
            found.append(int(p.name))
    return found


@pytest.fixture
def tmp(tmp_path):
    return tmp_path


sys.path.insert(0, str(pathlib.Path(__file__).parent))
