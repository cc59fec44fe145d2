"""Drives a TCPStore server with torch 1.13's own client; run by store_bench.py.

    store_clients.py ops PORT CLIENTS SECONDS   -> prints total set+get ops/s
    store_clients.py barrier PORT CLIENTS       -> prints seconds for ADD-then-WAIT of all
    store_clients.py serve                      -> hosts torch's own TCPStore, prints its port
"""
import resource
import socket
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist


def connect(port):
    return dist.TCPStore("127.0.0.1", port, 1, False, timedelta(seconds=120))


def ops(port, n, seconds):
    stores = [connect(port) for _ in range(n)]
    counts = [0] * n
    start = threading.Barrier(n + 1)
    stop = time.monotonic() + 1e9

    def run(i):
        s, key, done = stores[i], f"k{i}", 0
        start.wait()
        while time.monotonic() < stop:
            s.set(key, "v" * 32)
            s.get(key)
            done += 2
        counts[i] = done

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    stop = time.monotonic() + seconds
    start.wait()
    for t in threads:
        t.join()
    print(sum(counts) / seconds)


def barrier(port, n):
    stores = [connect(port) for _ in range(n)]
    ready = threading.Barrier(n + 1)

    def run(s):
        ready.wait()
        if s.add("arrived", 1) == n:
            s.set("go", "1")
        s.wait(["go"])

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    ready.wait()
    for t in threads:
        t.join()
    print(time.perf_counter() - t0)


def serve():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, 1, True, timedelta(seconds=600),
                          wait_for_workers=False)
    print(port, flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin
    del store


if __name__ == "__main__":
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    mode = sys.argv[1]
    if mode == "serve":
        serve()
    elif mode == "ops":
        ops(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    else:
        barrier(int(sys.argv[2]), int(sys.argv[3]))
