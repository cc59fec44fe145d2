"""--nproc-per-node gpu|xpu|auto count what torch counts in the worker
interpreter, and --numa-binding binds each worker (and its threads) to the
CPUs torch would choose.

A stand-in interpreter answers trun's device question with chosen counts and
PCI addresses (here real PCI devices of this machine, so that /sys has their
NUMA node), and runs everything else with the real Python. The real
interpreter is asked too: its torch's counts, and no CUDA device to bind to.
"""
import json
import os
import pathlib
import subprocess

import pytest

from conftest import FIXTURES, PYTHON, TORCH2, base_env, torchrun, trun

STAND_IN = """#!/usr/bin/python3
# A worker interpreter whose torch sees FAKE_CUDA CUDA devices (as many as
# CUDA_VISIBLE_DEVICES lists, when set) at FAKE_PCI, and FAKE_XPU XPUs.
import os, sys
if sys.argv[1:2] == ["-c"] and "accelerator" in sys.argv[2]:
    cuda = int(os.environ.get("FAKE_CUDA", "0"))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        cuda = min(cuda, len([d for d in visible.split(",") if d.strip()]))
    xpu = int(os.environ.get("FAKE_XPU", "0"))
    print("cuda", int(cuda > 0), cuda)
    print("xpu", int(xpu > 0), xpu)
    print("accelerator", int(cuda + xpu > 0), cuda or xpu)
    if sys.argv[-1] == "pci":
        for addr in os.environ.get("FAKE_PCI", "").split(",")[:cuda]:
            print("pci", addr)
    sys.exit(0)
real = os.environ["REAL_PYTHON"]
os.execv(real, [real, *sys.argv[1:]])
"""

# Each worker writes its local rank's CPU affinity, and a thread's it starts.
AFFINITY_WORKER = """import json, os, sys, threading
seen = {}
t = threading.Thread(target=lambda: seen.update(thread=sorted(os.sched_getaffinity(0))))
t.start(); t.join()
seen["main"] = sorted(os.sched_getaffinity(0))
with open(os.path.join(sys.argv[1], os.environ["LOCAL_RANK"] + ".json"), "w") as f:
    json.dump(seen, f)
"""


@pytest.fixture
def stand_in(tmp_path):
    p = tmp_path / "python-stand-in"
    p.write_text(STAND_IN)
    p.chmod(0o755)
    return p


def env_with(stand_in, **extra):
    return base_env(PYTHON_EXEC=stand_in, REAL_PYTHON=PYTHON, **extra)


def decision(*args, env):
    r = trun(*args, FIXTURES / "dump_env.py", "x", env={**env, "TRUN_DRY_RUN": "1"})
    return r, (json.loads(r.out) if r.returncode == 0 else None)


def test_gpu_counts_the_interpreters_cuda_devices(stand_in):
    _, d = decision("--nproc-per-node", "gpu", env=env_with(stand_in, FAKE_CUDA=4))
    assert d["nproc_per_node"] == 4
    # torch's count honours CUDA_VISIBLE_DEVICES; trun asks with its own.
    _, d = decision("--nproc-per-node", "gpu",
                    env=env_with(stand_in, FAKE_CUDA=4, CUDA_VISIBLE_DEVICES="1,3"))
    assert d["nproc_per_node"] == 2
    r, _ = decision("--nproc-per-node", "gpu", env=env_with(stand_in, FAKE_CUDA=0))
    assert r.returncode == 2 and "CUDA is not available" in r.err, r.err


def test_xpu_and_auto(stand_in):
    _, d = decision("--nproc-per-node", "xpu", env=env_with(stand_in, FAKE_XPU=2))
    assert d["nproc_per_node"] == 2
    r, _ = decision("--nproc-per-node", "xpu", env=env_with(stand_in))
    assert r.returncode == 2 and "XPU is not available" in r.err, r.err
    _, d = decision("--nproc-per-node", "auto", env=env_with(stand_in, FAKE_CUDA=3))
    assert d["nproc_per_node"] == 3
    _, d = decision("--nproc-per-node", "auto", env=env_with(stand_in))
    assert d["nproc_per_node"] == os.cpu_count()  # no accelerator: the CPUs, as torch


def test_gpu_count_runs_that_many_workers(stand_in, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    r = trun("--nproc-per-node", "gpu", FIXTURES / "dump_env.py", out,
             env=env_with(stand_in, FAKE_CUDA=2))
    assert r.returncode == 0, r.err
    envs = [json.loads(f.read_text()) for f in out.glob("*.json")]
    assert sorted(e["LOCAL_RANK"] for e in envs) == ["0", "1"]
    assert {e["LOCAL_WORLD_SIZE"] for e in envs} == {"2"}


def test_the_real_interpreter_counts_as_torchrun():
    code = ("import os, torch\n"
            "acc = getattr(torch, 'accelerator', None)\n"
            "n = (acc.device_count() if acc.is_available() else 0) if acc else "
            "torch.cuda.device_count()\n"
            "print(torch.cuda.is_available(), n or os.cpu_count())")
    cuda, auto = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True,
                                env=base_env(), check=True).stdout.split()
    _, d = decision("--nproc-per-node", "auto", env=base_env())
    assert d["nproc_per_node"] == int(auto)
    r, d = decision("--nproc-per-node", "gpu", env=base_env())
    assert (r.returncode == 0) == (cuda == "True"), r.err


def numa_node_of(pci):
    node = int(pathlib.Path(f"/sys/bus/pci/devices/{pci}/numa_node").read_text())
    return max(node, 0)


def cpus_of_node(node):
    text = pathlib.Path(f"/sys/devices/system/node/node{node}/cpulist").read_text().strip()
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus & os.sched_getaffinity(0)


def two_pci_devices_on_one_node():
    devices = sorted(os.listdir("/sys/bus/pci/devices"))
    by_node = {}
    for d in devices:
        by_node.setdefault(numa_node_of(d), []).append(d)
    node, found = max(by_node.items(), key=lambda kv: len(kv[1]))
    if len(found) < 2 or not pathlib.Path(f"/sys/devices/system/node/node{node}").exists():
        pytest.skip("this machine has no NUMA node with two PCI devices in /sys")
    return node, found[:2]


def affinities(stand_in, tmp_path, mode, pci):
    out = tmp_path / f"out-{mode}"
    out.mkdir()
    script = tmp_path / "affinity_worker.py"
    script.write_text(AFFINITY_WORKER)
    r = trun("--nproc-per-node", len(pci), "--numa-binding", mode, script, out,
             env=env_with(stand_in, FAKE_CUDA=len(pci), FAKE_PCI=",".join(pci)))
    return r, {int(f.stem): json.loads(f.read_text()) for f in out.glob("*.json")}


def test_numa_node_binds_each_worker_and_its_threads(stand_in, tmp_path):
    node, pci = two_pci_devices_on_one_node()
    r, seen = affinities(stand_in, tmp_path, "node", pci)
    assert r.returncode == 0, r.err
    expected = sorted(cpus_of_node(node))
    assert seen == {0: {"main": expected, "thread": expected},
                    1: {"main": expected, "thread": expected}}


def test_numa_exclusive_splits_the_nodes_cores(stand_in, tmp_path):
    node, pci = two_pci_devices_on_one_node()
    cores = set()
    for cpu in cpus_of_node(node):
        siblings = pathlib.Path(
            f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text()
        cores.add(siblings.strip())
    r, seen = affinities(stand_in, tmp_path, "exclusive", pci)
    if len(cores) < 2:
        # torch: fewer physical cores than GPUs on the node is an error.
        assert r.returncode == 1 and "physical core" in r.err, r.err
        return
    assert r.returncode == 0, r.err
    a, b = set(seen[0]["main"]), set(seen[1]["main"])
    assert a and b and not (a & b) and (a | b) <= cpus_of_node(node), seen
    assert seen[0]["thread"] == seen[0]["main"] and seen[1]["thread"] == seen[1]["main"]


def test_numa_binding_without_a_cuda_device_fails_as_torchrun(tmp_path):
    # The real interpreter: on a machine without CUDA, nothing to bind to.
    args = ("--numa-binding", "node", FIXTURES / "dump_env.py", tmp_path)
    r = trun(*args)
    cuda = subprocess.run([PYTHON, "-c", "import torch; print(torch.cuda.is_available())"],
                          capture_output=True, text=True, env=base_env()).stdout.strip()
    if cuda == "True":
        pytest.skip("this machine has CUDA")
    assert r.returncode == 1, r.err
    assert "--numa-binding node: no accelerator available for NUMA binding" in r.err, r.err
    assert not list(tmp_path.glob("*.json"))
    if TORCH2:
        t = torchrun(*args)
        assert t.returncode != 0 and not list(tmp_path.glob("*.json")), t.err
