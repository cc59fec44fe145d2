"""--numa-binding: torch's own torch/numa/binding.py, run on the fake
machines of src/launch/testdata/numa_topologies.json (its /sys reads,
device queries and affinity pointed at them), chooses the CPUs that trun's
unit test (src/launch/numa_binding_test.cc) asserts trun chooses, and fails
where trun fails. torch 1.13 has no NUMA binding: skipped there.
"""
import json
import subprocess

import pytest

from conftest import FIXTURES, PYTHON, ROOT, TORCH2, base_env

TOPOLOGIES = ROOT / "src" / "launch" / "testdata" / "numa_topologies.json"


def cpu_list(text):
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cpus)


def build(root, m):
    def write(rel, text):
        p = root / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"{text}\n")

    write("/devices/system/node/possible", m["possible"])
    for node, cpus in m["nodes"].items():
        write(f"/devices/system/node/node{node}/cpulist", cpus)
    for c in m["cpus"]:
        base = f"/devices/system/cpu/cpu{c['cpu']}"
        write(f"{base}/topology/thread_siblings_list", c["siblings"])
        write(f"{base}/topology/physical_package_id", c["socket"])
        for i, (kind, level) in enumerate([("Data", 1), ("Instruction", 1), ("Unified", 2),
                                           ("Unified", 3)]):
            write(f"{base}/cache/index{i}/type", kind)
            write(f"{base}/cache/index{i}/level", level)
            write(f"{base}/cache/index{i}/shared_cpu_list", c["l3"] if i == 3 else c["siblings"])
    for g in m["gpus"]:
        write(f"/bus/pci/devices/{g['pci']}/numa_node", g["node"])


@pytest.mark.skipif(not TORCH2, reason="torch 1.13 has no torch.numa.binding")
def test_torch_binds_as_trun_on_the_fake_machines(tmp_path):
    doc = json.loads(TOPOLOGIES.read_text())
    for name, m in doc["machines"].items():
        build(tmp_path / name, m)
    cases = [{"root": str(tmp_path / c["machine"]),
              "pci": [g["pci"] for g in doc["machines"][c["machine"]]["gpus"]],
              "allowed": cpu_list(c["allowed"]), "mode": c["mode"], "device": c["gpu"]}
             for c in doc["cases"]]
    r = subprocess.run([PYTHON, str(FIXTURES / "torch_numa_binding.py")],
                       input=json.dumps(cases), capture_output=True, text=True, env=base_env(),
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    theirs = json.loads(r.stdout)
    assert len(theirs) == len(doc["cases"]) >= 30
    for case, got in zip(doc["cases"], theirs):
        if "error" in case:
            assert isinstance(got, dict), (case, got)
        else:
            assert got == cpu_list(case["cpus"]), (case, got)
