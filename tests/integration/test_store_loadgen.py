"""A short run of every mode of the store's load generator (bench/store_loadgen.cc),
and of the torch-client barrier (bench/torch_store_barrier.py), against trun's
store and against the own server of the torch under test (PYTHON's: 1.13, or
2.x, which the generator must speak protocol v2 to), so that `make bench`'s
tools cannot rot: the long runs live in bench/run.py."""
import json
import pathlib
import subprocess

import pytest

from conftest import PYTHON, ROOT, TORCH2, TRUN
from test_store_torch import start_store, stop_store

LOADGEN = str(pathlib.Path(TRUN).parent / "store_loadgen")
# torch 2.x's server drops a client that does not VALIDATE first (v2).
TORCH_PROTOCOL = ["--protocol", "v2" if TORCH2 else "v1"]


def loadgen(*args, port, pid):
    r = subprocess.run([LOADGEN, *map(str, args), "--port", str(port), "--server-pid", str(pid),
                        "--json"], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


@pytest.fixture
def store():
    p = start_store("--host", "127.0.0.1")
    yield p
    stop_store(p)


@pytest.fixture
def torch_store():
    p = subprocess.Popen([PYTHON, str(ROOT / "bench" / "torch_store_server.py")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    p.port = int(p.stdout.readline())
    yield p
    p.stdin.close()
    assert p.wait(timeout=30) == 0


def check_load(r, conns):
    assert r["conns"] == conns
    for op in ("set", "get", "add"):
        assert r[op]["count"] > 0 and 0 < r[op]["p50_us"] <= r[op]["p99_us"], r
    assert r["server_cpu_us_per_op"] > 0


def test_every_mode_against_trun(store):
    r = loadgen("load", "--conns", 500, "--seconds", 1, "--warmup", 0.2, "--rate", 1000,
                port=store.port, pid=store.pid)
    check_load(r, 500)
    # An idle connection costs the store a few hundred bytes to 2 KiB; a
    # buffer per connection grown or kept by mistake shows up here.
    assert 0 < r["server_kib_per_idle_conn"] < 8, r
    r = loadgen("load", "--conns", 64, "--seconds", 0.5, "--warmup", 0, port=store.port,
                pid=store.pid)  # closed loop
    check_load(r, 64)
    r = loadgen("barrier", "--clients", 100, "--repeat", 2, port=store.port, pid=store.pid)
    assert len(r["rounds_seconds"]) == 2 and r["median_seconds"] > 0
    assert all(0 < g <= t for g, t in zip(r["final_count_seconds"], r["rounds_seconds"]))
    r = loadgen("ops", "--clients", 4, "--seconds", 0.5, "--whole-requests", port=store.port,
                pid=store.pid)
    assert r["ops_per_second"] > 0
    r = loadgen("ops", "--clients", 4, "--seconds", 0.5, "--protocol", "v2", port=store.port,
                pid=store.pid)
    assert r["ops_per_second"] > 0


def test_torch_servers_answers_check_out(torch_store):
    # The same bytes against torch's own server: every reply is checked by
    # the generator (GET returns what was SET, ADD counts, WAIT wakes).
    r = loadgen("load", "--conns", 50, "--seconds", 0.5, "--warmup", 0, "--rate", 200,
                *TORCH_PROTOCOL, port=torch_store.port, pid=torch_store.pid)
    check_load(r, 50)
    r = loadgen("barrier", "--clients", 50, "--repeat", 1, *TORCH_PROTOCOL, port=torch_store.port,
                pid=torch_store.pid)
    assert r["median_server_cpu_seconds"] > 0


def torch_barrier(port, clients, procs):
    r = subprocess.run([PYTHON, str(ROOT / "bench" / "torch_store_barrier.py"), str(port),
                        str(clients), "--procs", str(procs)], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    r = json.loads(r.stdout)
    assert r["clients"] == clients and r["procs"] == procs
    assert 0 < r["connected_seconds"] <= r["added_seconds"] <= r["seconds"], r


def test_torch_client_barrier(store, torch_store):
    # Twice against each server: the second run's keys must not meet the first's.
    for port in (store.port, torch_store.port, store.port, torch_store.port):
        torch_barrier(port, 30, 3)


def test_errors_are_named():
    r = subprocess.run([LOADGEN, "barrier", "--port", "1", "--clients", "1"],
                       capture_output=True, timeout=30)
    assert r.returncode == 1
    assert b"cannot connect to 127.0.0.1:1 (connection 0): Connection refused" in r.stderr, r.stderr
    r = subprocess.run([LOADGEN, "load", "--conns", "0", "--port", "1"], capture_output=True,
                       timeout=30)
    assert r.returncode == 2
