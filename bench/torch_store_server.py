"""Hosts torch 1.13's own TCPStore server, for bench/run.py and the tests.

    torch_store_server.py     -> prints the port, serves until stdin closes

The server is torch's (TCPStore(is_master=True)), a thread of this process;
its pid is this process's. The open-file limit is raised to the hard limit
first, as `trun store` does for itself, so that thousands of clients can
connect (torch does not raise it).
"""
import resource
import socket
import sys
from datetime import timedelta

import torch.distributed as dist


def main():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, 1, True, timedelta(seconds=600),
                          wait_for_workers=False)
    print(port, flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin
    del store


if __name__ == "__main__":
    main()
