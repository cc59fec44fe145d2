"""A job's start-up barrier met by torch 1.13's own TCPStore clients, for bench/run.py.

    torch_store_barrier.py PORT CLIENTS [--procs 8]    -> prints one JSON object

CLIENTS clients, a thread each, spread over --procs processes, are released
together. Each constructs torch's TCPStore client (two connections and a
listener thread, as every rank of a torch 1.13 job does), ADDs 1 to a
counter, and WAITs for a key that the client whose ADD returned CLIENTS sets.
The server behind PORT meets exactly the bytes and timing of torch's
client. The issue quotes torch's server at 0.13 / 1.3 / 7.8 s for 200 /
1,000 / 2,000 clients; this gives figures of that size for it (0.7-1.3 s at
1,000, 2.5-6.4 s at 2,000 on 2 cores), where a barrier of clients already
connected does not (30-55 ms at 1,000, store_loadgen's barrier).

Printed: seconds from the release to the last client connected, to the last
ADD answered (the server's part: the connects and the counting), and to the
last WAIT answered (the whole barrier; after the last ADD, the rest is
mostly the clients' threads waking one by one under each process's GIL).
Keys carry the process id and the time, so runs against one server do not
meet.
"""
import argparse
import json
import multiprocessing
import os
import resource
import threading
import time
from datetime import timedelta

import torch.distributed as dist


def client_process(port, total, count, tag, go, results):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    marks, stores = [], []
    start = threading.Barrier(count + 1)

    def client():
        start.wait()
        store = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=300),
                              wait_for_workers=False)
        connected = time.monotonic()
        if store.add(f"{tag}/arrived", 1) == total:
            store.set(f"{tag}/go", "1")
        added = time.monotonic()
        store.wait([f"{tag}/go"])
        marks.append((connected, added, time.monotonic()))
        stores.append(store)  # closed after the barrier, not while others wait

    threads = [threading.Thread(target=client) for _ in range(count)]
    for t in threads:
        t.start()
    results.put(None)  # ready
    go.wait()
    start.wait()
    for t in threads:
        t.join()
    results.put(marks)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("clients", type=int)
    p.add_argument("--procs", type=int, default=8)
    a = p.parse_args()
    procs = min(a.procs, a.clients)
    # Forked, as Python 3.11's default was: 3.14's forkserver would import
    # torch again in each process (a second or two of CPU each).
    mp = multiprocessing.get_context("fork")
    go, results = mp.Event(), mp.Queue()
    tag = f"barrier{os.getpid()}.{time.time_ns()}"
    counts = [a.clients // procs + (i < a.clients % procs) for i in range(procs)]
    workers = [mp.Process(target=client_process,
                                       args=(a.port, a.clients, n, tag, go, results))
               for n in counts]
    for w in workers:
        w.start()
    for _ in workers:
        results.get()
    t0 = time.monotonic()
    go.set()
    marks = [m for _ in workers for m in results.get()]
    for w in workers:
        w.join()
    if len(marks) != a.clients:
        raise SystemExit(f"torch_store_barrier: {a.clients - len(marks)} clients failed")
    last = [max(m[i] for m in marks) - t0 for i in range(3)]
    print(json.dumps({"clients": a.clients, "procs": procs, "connected_seconds": last[0],
                      "added_seconds": last[1], "seconds": last[2]}))


if __name__ == "__main__":
    main()
