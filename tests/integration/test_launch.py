"""The one-node launcher against real torch, side by side with torchrun."""
import json
import re

import pytest

from conftest import EXAMPLES, FIXTURES, TORCH2, base_env, torchrun, trun

DDP = EXAMPLES / "ddp_train.py"


def result_line(text):
    m = re.search(r"^(?:\[default0\]:)?(RESULT .*)$", text, re.M)
    assert m, text
    return m.group(1)


def test_gloo_ddp_matches_torchrun():
    ours = trun("--standalone", "--nproc-per-node", 2, DDP, "--steps", 10)
    assert ours.returncode == 0, ours.err
    theirs = torchrun("--standalone", "--nproc_per_node", 2, "--monitor_interval", 0.1, DDP,
                      "--steps", 10)
    assert theirs.returncode == 0, theirs.err
    assert result_line(ours.out) == result_line(theirs.out)
    assert result_line(ours.out).startswith("RESULT world=2 ")


def load_envs(d, n):
    return [json.loads((d / f"{r}.json").read_text()) for r in range(n)]


# Values that differ by design between two runs of the same command.
PER_RUN = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE"}


# tools/torch2-python's sh `cd`s before it execs python, setting these in
# each process it starts (neither launcher does); a warm worker is forked, not
# started through it.
SET_BY_THE_INTERPRETER = {"OLDPWD", "PWD"} if TORCH2 else set()


def compare_envs(tmp, flags_trun, flags_torch, n):
    a, b = tmp / "trun", tmp / "torchrun"
    a.mkdir()
    b.mkdir()
    env = base_env()
    r = trun(*flags_trun, FIXTURES / "dump_env.py", a, env=env)
    assert r.returncode == 0, r.err
    t = torchrun(*flags_torch, FIXTURES / "dump_env.py", b, env=env)
    assert t.returncode == 0, t.err
    ours, theirs = load_envs(a, n), load_envs(b, n)
    for rank in range(n):
        set_by_torchrun = {k for k, v in theirs[rank].items() if env.get(k) != v}
        for key in sorted(set_by_torchrun - PER_RUN - SET_BY_THE_INTERPRETER):
            yield rank, key, ours[rank].get(key), theirs[rank][key]
        for key in ("MASTER_PORT", "TORCHELASTIC_RUN_ID"):
            assert ours[rank][key], key
        for env_ in (ours[rank], theirs[rank]):
            assert env_["TORCHELASTIC_ERROR_FILE"].endswith(f"attempt_0/{rank}/error.json")
        assert ours[rank]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
        assert ours[rank]["NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert r.err.count("Setting OMP_NUM_THREADS environment variable for each process to be 1") == 1


def test_worker_env_matches_torchrun_standalone(tmp):
    diffs = [d for d in compare_envs(tmp, ["--standalone", "--nproc-per-node", 3],
                                     ["--standalone", "--nproc_per_node", 3], 3)
             if d[2] != d[3]]
    # torch 2.x's agent hosts the store as trun's does. The one difference
    # from torch 1.13: its c10d agent lets worker rank 0 host the store;
    # trun's agent hosts it for every backend, so that a dead rank 0 takes
    # nothing down.
    expected = set() if TORCH2 else {("TORCHELASTIC_USE_AGENT_STORE", "True", "False")}
    assert {(d[1], d[2], d[3]) for d in diffs} == expected, diffs


def test_worker_env_matches_torchrun_static_one_node(tmp):
    diffs = [d for d in compare_envs(tmp, ["--nnodes", 1, "--nproc-per-node", 2],
                                     ["--nnodes", 1, "--nproc_per_node", 2], 2)
             if d[2] != d[3]]
    # torchrun 2.x runs one static node without a store address as
    # --standalone, and so does trun; torch 1.13's used 127.0.0.1:29500.
    expected = [] if TORCH2 else [(r, "MASTER_ADDR", "localhost", "127.0.0.1") for r in (0, 1)]
    assert diffs == expected


def test_omp_num_threads_kept_when_set(tmp):
    r = trun("--nproc-per-node", 2, FIXTURES / "dump_env.py", tmp,
             env=base_env(OMP_NUM_THREADS=7))
    assert r.returncode == 0, r.err
    assert "OMP_NUM_THREADS" not in r.err
    assert json.loads((tmp / "1.json").read_text())["OMP_NUM_THREADS"] == "7"


def test_static_env_values(tmp):
    r = trun("--nnodes", "1:1", "--nproc-per-node", 2, "--role", "trainer", "--max-restarts", 3,
             FIXTURES / "dump_env.py", tmp)
    assert r.returncode == 0, r.err
    e = load_envs(tmp, 2)
    assert [x["RANK"] for x in e] == ["0", "1"]
    assert e[1]["LOCAL_RANK"] == "1" and e[1]["ROLE_RANK"] == "1" and e[1]["GROUP_RANK"] == "0"
    assert e[0]["WORLD_SIZE"] == e[0]["ROLE_WORLD_SIZE"] == e[0]["LOCAL_WORLD_SIZE"] == "2"
    assert e[0]["GROUP_WORLD_SIZE"] == "1" and e[0]["ROLE_NAME"] == "trainer"
    # One static node naming no store address runs as --standalone, as in
    # torchrun 2.x: its own store on localhost, a run id of its own.
    assert e[0]["MASTER_ADDR"] == "localhost" and len(e[0]["TORCHELASTIC_RUN_ID"]) == 36
    assert e[0]["TORCHELASTIC_MAX_RESTARTS"] == "3" and e[0]["TORCHELASTIC_RESTART_COUNT"] == "0"


def test_pet_environment_and_flag_precedence(tmp):
    r = trun("--no-python", "sh", "-c", "echo $WORLD_SIZE", env=base_env(PET_NPROC_PER_NODE=3))
    assert r.returncode == 0 and r.out.split() == ["3"] * 3, r.err
    r = trun("--nproc_per_node", 2, "--no-python", "sh", "-c", "echo $WORLD_SIZE",
             env=base_env(PET_NPROC_PER_NODE=3))
    assert r.out.split() == ["2"] * 2


def test_module_entrypoint():
    r = trun("--nproc-per-node", 2, "-m", "pkg.hello", "--x", 1,
             env=base_env(PYTHONPATH=FIXTURES))
    assert r.returncode == 0, r.err
    lines = sorted(r.out.splitlines())
    assert lines == ["module rank 0 args ['--x', '1'] name __main__",
                     "module rank 1 args ['--x', '1'] name __main__"]


def test_no_python_entrypoint():
    r = trun("--no-python", "/bin/echo", "hello", "--flag")
    assert r.returncode == 0 and r.out == "hello --flag\n", r.err


# torchrun's --run-path wins over -m and --no-python.
@pytest.mark.parametrize("also", [[], ["-m"], ["--no-python", "-m"]], ids=["alone", "module",
                                                                          "no-python-module"])
def test_run_path_entrypoint(also):
    r = trun("--run-path", *also, FIXTURES / "pkg" / "hello.py", "a")
    assert r.returncode == 0, r.err
    assert r.out == "module rank 0 args ['a'] name __main__\n"


def test_restart_rendezvouses_again_on_the_agent_store(tmp):
    # Every rank rendezvouses through the agent's store; attempt 0 fails on
    # rank 1 after init_process_group, attempt 1 rendezvouses again on the
    # same store (under a new attempt prefix) and finishes.
    r = trun("--nproc-per-node", 2, "--max-restarts", 1, "--log-dir", tmp, DDP, "--steps", 3,
             "--fail-rank", 1, "--fail-attempt", 0, timeout=120)
    assert r.returncode == 0, r.err
    assert "Address already in use" not in r.err
    assert r.err.count("ValueError: boom") == 1
    assert result_line(r.out).startswith("RESULT world=2 ")
    assert sorted(p.name for p in next(tmp.iterdir()).iterdir()) == ["attempt_0", "attempt_1"]
