"""trun's store against torch 1.13's real TCPStore client and gloo rendezvous."""
import os
import signal
import socket
import struct
import subprocess
import threading
from datetime import timedelta

import pytest
import torch.distributed as dist

from conftest import EXAMPLES, TRUN, base_env, trun


def start_store(*host_args, shown="127.0.0.1"):
    p = subprocess.Popen([TRUN, "store", *host_args, "--port", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = p.stdout.readline().decode()
    assert line.startswith(f"trun store listening on {shown}:"), (line, p.stderr.read())
    p.port = int(line.rsplit(":", 1)[1])
    return p


def stop_store(p):
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0


@pytest.fixture
def store():
    p = start_store("--host", "127.0.0.1")
    yield p
    stop_store(p)


def client(port, world_size=1, timeout=10):
    return dist.TCPStore("127.0.0.1", port, world_size, False, timedelta(seconds=timeout))


def test_basic_operations(store):
    s = client(store.port)
    s.set("a", "hello")
    assert s.get("a") == b"hello"
    assert s.add("n", 5) == 5 and s.add("n", -2) == 3
    assert s.get("n") == b"3"
    assert s.compare_set("c", "", "x") == b"x"        # missing, expected empty: set
    assert s.compare_set("c", "x", "y") == b"y"       # equal: replace
    assert s.compare_set("c", "z", "w") == b"y"       # different: unchanged
    assert s.compare_set("d", "nope", "v") == b"nope"  # missing, expected given: not set
    assert s.num_keys() == 4  # init/, a, n, c
    assert s.delete_key("a") is True and s.delete_key("a") is False
    assert s.num_keys() == 3


def test_wait_completes_on_a_later_set_and_times_out(store):
    s = client(store.port)
    other = client(store.port)
    threading.Timer(0.3, lambda: other.set("late", "1")).start()
    s.wait(["late"], timedelta(seconds=10))
    assert s.get("late") == b"1"
    # Without a timeout of its own (the store's, 10 s here), woken by an ADD.
    threading.Timer(0.3, lambda: other.add("counter", 7)).start()
    s.wait(["counter"])
    assert s.get("counter") == b"7"
    # get() waits for its key, as torch's client does.
    threading.Timer(0.3, lambda: other.set("later", "2")).start()
    assert s.get("later") == b"2"
    with pytest.raises(RuntimeError, match="(?i)timeout"):
        client(store.port).wait(["never"], timedelta(seconds=0.5))


def test_prefix_store_and_binary_values(store):
    s = client(store.port)
    p = dist.PrefixStore("/worker/attempt_0", s)
    p.set("k", b"\x00\xff\n")
    assert s.get("/worker/attempt_0/k") == b"\x00\xff\n"
    assert p.add("n", 2) == 2
    p.wait(["k", "n"], timedelta(seconds=5))
    big = os.urandom(4 << 20)  # 4 MiB, under the 8 MiB value limit
    s.set("big", big)
    assert client(store.port).get("big") == big


def test_default_host_listens_on_every_address():
    p = start_store(shown=r"*")
    try:
        s = client(p.port)
        s.set("v4", "ok")
        # Over IPv6 too, where the machine has an IPv6 loopback at all.
        v6 = "/proc/net/if_inet6"
        if os.path.exists(v6) and any(line.split()[-1] == "lo" for line in open(v6)):
            s6 = dist.TCPStore("::1", p.port, 1, False, timedelta(seconds=10))
            assert s6.get("v4") == b"ok"
    finally:
        stop_store(p)


def test_many_clients_at_once(store):
    n = 64
    errors = []

    def member(i):
        try:
            s = client(store.port, timeout=30)
            s.set(f"member/{i}", str(i))
            if s.add("arrived", 1) == n:
                s.set("all_here", "1")
            s.wait(["all_here"], timedelta(seconds=30))
            assert s.get(f"member/{(i + 1) % n}") == str((i + 1) % n).encode()
        except Exception as e:  # noqa: BLE001: reported below
            errors.append(e)

    threads = [threading.Thread(target=member, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert client(store.port).get("arrived") == str(n).encode()


def test_init_process_group_over_the_store(store):
    code = ("import torch, torch.distributed as d; d.init_process_group('gloo'); "
            "t = torch.ones(1) * (d.get_rank() + 1); d.all_reduce(t); print(int(t.item()))")
    procs = [subprocess.Popen(["/usr/bin/python3", "-c", code], stdout=subprocess.PIPE,
                              env=base_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=store.port,
                                           RANK=r, WORLD_SIZE=2, TORCHELASTIC_RESTART_COUNT=0,
                                           TORCHELASTIC_USE_AGENT_STORE="True"))
             for r in range(2)]
    assert [p.communicate(timeout=120)[0] for p in procs] == [b"3\n", b"3\n"]
    # Every rank was a client, under torchelastic's attempt prefix.
    assert client(store.port).num_keys() >= 3


def test_garbage_and_absurd_lengths_are_survived(store):
    hostile = [
        b"\xff" * 64,                                        # unknown opcode
        b"\x00" + struct.pack("<Q", 1 << 60),                # SET with a 2^60-byte key
        b"\x05" + struct.pack("<Q", 1 << 62),                # WAIT for 2^62 keys
        b"\x00" + struct.pack("<Q", 3) + b"key" + struct.pack("<Q", 1 << 40),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",                # a port scanner's probe
        os.urandom(4096),
    ]
    for payload in hostile:
        with socket.create_connection(("127.0.0.1", store.port), timeout=5) as sk:
            sk.sendall(payload)
            sk.settimeout(5)
            try:
                assert sk.recv(1) in (b"", b"\x00", b"\x01")
            except (ConnectionResetError, socket.timeout):
                pass
    # A client that connects and says nothing, and one that stops mid-message.
    idle = socket.create_connection(("127.0.0.1", store.port))
    half = socket.create_connection(("127.0.0.1", store.port))
    half.sendall(b"\x00" + struct.pack("<Q", 5) + b"ab")
    s = client(store.port)
    s.set("still", "serving")
    assert s.get("still") == b"serving"
    idle.close()
    half.close()


def test_agent_store_survives_rank_0(tmp):
    # Rank 0 dies on attempt 0; the store lives in the agent, so attempt 1
    # rendezvouses on the same address and trains to the end.
    r = trun("--nproc-per-node", 2, "--max-restarts", 1, EXAMPLES / "ddp_train.py", "--steps", 3,
             "--fail-rank", 0, "--fail-attempt", 0, timeout=120)
    assert r.returncode == 0, r.err
    assert "RESULT world=2" in r.out


def test_store_bad_flags_exit_2():
    r = subprocess.run([TRUN, "store", "--port", "99999"], capture_output=True, timeout=10)
    assert r.returncode == 2 and b"--port" in r.stderr
    r = subprocess.run([TRUN, "store", "--host", "not-an-ip", "--port", "0"], capture_output=True,
                       timeout=10)
    assert r.returncode == 2 and b"not an IP address" in r.stderr
