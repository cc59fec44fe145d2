"""trun's store against torch's real TCPStore client and gloo rendezvous, for the
torch generation under test: the checks run under PYTHON (torch 1.13's python3,
or a torch 2.x root's), in tests/fixtures/store_checks.py, so that what they
assert is what that torch's client does."""
import json
import os
import select
import signal
import socket
import struct
import subprocess
import tempfile

import pytest

from conftest import (EXAMPLES, FIXTURES, PYTHON, TORCH2, TORCH_HAS_LIBUV, TORCH_VERSION, TRUN,
                      base_env, trun)

CHECKS = str(FIXTURES / "store_checks.py")
V2_HELLO = b"\x00" + struct.pack("<I", 0x3C85F7CE)  # VALIDATE, as every 2.x client starts


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
    return p.stderr.read().decode(errors="replace")


# Every check that uses this fixture runs twice: against the store itself,
# and through a relay in front of it (`trun store --relay`: one connection
# to the store for every client, as `--store-relay on` gives a node's
# workers), whose semantics must be the store's for torch's own client.
@pytest.fixture(params=["direct", "relay"])
def store(request):
    p = start_store("--host", "127.0.0.1", *(["--relay"] if request.param == "relay" else []))
    yield p
    # No torch client may have been dropped for breaking the protocol, as
    # torch 2.14's LIST_KEYS once was ("unknown v2 opcode 17").
    err = stop_store(p)
    assert "dropped client" not in err, err


class Checker:
    """store_checks.py --serve under PYTHON: one interpreter, so one import of
    torch, for this file's checks. One whose check failed or did not answer
    is ended, and the next check gets a fresh one."""

    def __init__(self):
        self.proc = None

    def run(self, name, port, args, timeout):
        if self.proc is None:
            self.err = tempfile.TemporaryFile()
            self.proc = subprocess.Popen([PYTHON, CHECKS, "--serve"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.err, text=True,
                                         env=base_env())
        try:
            self.proc.stdin.write(json.dumps([name, port, *map(str, args)]) + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            line = self.proc.stdout.readline() if ready else ""
        except OSError:  # it had exited: the pipe is broken
            ready, line = True, ""
        try:
            answer = json.loads(line) if line else {"ok": False, "traceback": (
                f"no answer within {timeout} s" if not ready else
                f"the checker exited ({self.proc.wait()})")}
        except ValueError:
            answer = {"ok": False, "traceback": f"an answer that is no JSON: {line!r}"}
        if not answer["ok"]:
            self.close()
            self.err.seek(0)
            answer["traceback"] += "\nits stderr:\n" + self.err.read().decode(errors="replace")
        return answer

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


CHECKER = Checker()


@pytest.fixture(scope="module", autouse=True)
def checker():
    yield
    CHECKER.close()


def torch_check(name, port, *args, timeout=120):
    """Runs store_checks.py's check `name` under PYTHON; its assertions hold or it fails."""
    answer = CHECKER.run(name, port, args, timeout)
    assert answer["ok"], f"{name} under torch {TORCH_VERSION}:\n{answer['traceback']}"
    assert answer["said"].startswith(f"{name}: ok")


def test_basic_operations(store):
    torch_check("basic_operations", store.port)


def test_wait_completes_on_a_later_set_and_times_out(store):
    torch_check("wait_completes_and_times_out", store.port)


def test_prefix_store_and_binary_values(store):
    torch_check("prefix_store_and_binary_values", store.port)


def test_default_host_listens_on_every_address():
    p = start_store(shown=r"*")
    try:
        torch_check("set_and_get_at", p.port, "127.0.0.1")
        # Over IPv6 too, where the machine has an IPv6 loopback at all.
        v6 = "/proc/net/if_inet6"
        if os.path.exists(v6) and any(line.split()[-1] == "lo" for line in open(v6)):
            torch_check("set_and_get_at", p.port, "::1")
    finally:
        stop_store(p)


def test_many_clients_at_once(store):
    torch_check("many_clients_at_once", store.port, 64)


def test_init_process_group_over_the_store(store):
    code = ("import torch, torch.distributed as d; d.init_process_group('gloo'); "
            "t = torch.ones(1) * (d.get_rank() + 1); d.all_reduce(t); print(int(t.item()))")
    procs = [subprocess.Popen([PYTHON, "-c", code], stdout=subprocess.PIPE,
                              env=base_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=store.port,
                                           RANK=r, WORLD_SIZE=2, TORCHELASTIC_RESTART_COUNT=0,
                                           TORCHELASTIC_USE_AGENT_STORE="True"))
             for r in range(2)]
    assert [p.communicate(timeout=120)[0] for p in procs] == [b"3\n", b"3\n"]
    # Every rank was a client, under torchelastic's attempt prefix.
    torch_check("num_keys_at_least", store.port, 3)


# What only torch 2.x's client sends: run in 2.x passes, and in a 1.13 pass
# reported as skipped with the reason.
needs_torch2 = pytest.mark.skipif(not TORCH2, reason=f"torch {TORCH_VERSION}'s client has no such call")


@needs_torch2
def test_list_keys(store):
    torch_check("list_keys_v2", store.port)


@needs_torch2
def test_multi_get_multi_set_append_check(store):
    torch_check("multi_get_multi_set_append_check_v2", store.port)


@needs_torch2
def test_wait_timeout_is_cancelled(store):
    torch_check("wait_timeout_is_cancelled_v2", store.port)


@needs_torch2
def test_barrier(store):
    torch_check("barrier_v2", store.port, 8)


@needs_torch2
def test_queues(store):
    # Without libuv (Debian's build) the client refuses queues itself, and the
    # check asserts that refusal; trun's own client covers the queue bytes.
    torch_check("queues_v2", store.port, int(TORCH_HAS_LIBUV))


def test_garbage_and_absurd_lengths_are_survived():
    store = start_store("--host", "127.0.0.1")  # not the fixture: drops are expected here
    hostile = [
        b"\xff" * 64,                                        # unknown opcode
        b"\x00" + struct.pack("<Q", 1 << 60),                # SET with a 2^60-byte key
        b"\x05" + struct.pack("<Q", 1 << 62),                # WAIT for 2^62 keys
        b"\x00" + struct.pack("<Q", 3) + b"key" + struct.pack("<Q", 1 << 40),
        V2_HELLO + b"\x13",                                  # v2 opcode 19, past BARRIER
        V2_HELLO + b"\x12" + struct.pack("<Q", 1 << 50),     # BARRIER with a 2^50-byte key
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
    torch_check("set_and_get_at", store.port, "127.0.0.1")
    idle.close()
    half.close()
    assert "dropped client" in stop_store(store)


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
