"""The launcher's port: where each worker connects back, proves the run's
token, receives the function and sends its value or exception (_wire).

Thread-safety: one accept thread per listening socket and one thread per
connection; every field a reader uses is guarded by ``lock``, and
``changed`` (on that lock) is notified at each hello and each outcome.
"""

from __future__ import annotations

import errno
import json
import secrets
import socket
import threading
import time
from typing import Any, Callable, Literal, Tuple, Union

import cloudpickle

from trun import _wire

# Until it has shown the launcher's token, a connection gets at most
# _wire.HELLO_MAX bytes and this many seconds; a worker sends its hello at once.
_HELLO_WITHIN = 10.0
# Connections awaiting their hello at once. Each has a thread; a flood of
# idle connections would otherwise cost a thread (and its memory) each for
# _HELLO_WITHIN, or stop the accept loop where no thread can start. Over
# it, the oldest awaiting its hello is closed: a worker's arrives at once,
# so it is the newest, not the oldest.
_MAX_AWAITING_HELLO = 256
# accept()'s errors that mean "no descriptor now", not "the port is closed".
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

# A worker's hello (_worker.py): who it is, as JSON.
Hello = dict[str, Any]
# How a worker's connection ended: its value (cloudpickled), its exception's
# record (_worker.py's dict), or lost without either.
Outcome = Union[Tuple[Literal["ok"], bytes], Tuple[Literal["err"], dict[str, Any]],
                Tuple[Literal["lost"], None]]
# (attempt, global rank)
Key = Tuple[int, int]


def listen(addresses: list[str]) -> list[socket.socket]:
    """Listening sockets on one port, one per address (a free port, chosen by
    the kernel for the first; tried again if another is taken there)."""
    for attempt in range(20):
        socks: list[socket.socket] = []
        a = addresses[0]
        try:
            for a in addresses:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((a, socks[0].getsockname()[1] if len(socks) > 1 else 0))
                s.listen(1024)
            return socks
        except OSError as e:
            for s in socks:
                s.close()
            if e.errno != errno.EADDRINUSE or len(socks) == 1 or attempt == 19:
                raise RuntimeError(
                    f"the launcher cannot listen on {a}, this machine's address for its hosts: "
                    f"{e.strerror}; check that the hosts' names resolve to addresses this "
                    f"machine routes to") from e
    raise AssertionError("unreachable")


class WorkerServer:
    """Serves ``payload`` to every worker that shows ``token``; keeps their
    hellos and outcomes by (attempt, rank). ``on_hello`` runs on the
    connection's thread for each authenticated hello, before the payload."""

    def __init__(self, token: str, payload: bytes, on_hello: Callable[[Hello], None]) -> None:
        self.token = token
        self.payload = payload
        self.on_hello = on_hello
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.hellos: dict[Key, Hello] = {}
        self.outcomes: dict[Key, Outcome] = {}
        # The workers' connections still open and their threads: each leaves
        # both when it ends, so that a flood of bad hellos costs nothing after.
        self.conns: set[threading.Thread] = set()
        self.socks: set[socket.socket] = set()
        # Those of socks that have not shown the token yet, oldest first.
        self.awaiting: dict[socket.socket, None] = {}
        self.stopping = False
        self.servers: list[socket.socket] = []

    def start(self, servers: list[socket.socket]) -> None:
        self.servers = servers
        for server in servers:
            threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def close(self) -> None:
        """Closes the port and every connection."""
        self.stopping = True
        for s in [*self.servers, *list(self.socks)]:
            try:
                s.close()
            except OSError:
                pass

    def join(self, deadline: float) -> None:
        """Waits, until ``deadline`` (time.monotonic()), for the connections to end."""
        for t in list(self.conns):
            t.join(max(0.0, deadline - time.monotonic()))

    def last_attempt(self) -> int:
        return max((k[0] for k in self.hellos), default=0)

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                sock, _ = server.accept()
            except OSError as e:
                # Out of descriptors (a flood of idle connections, each held
                # until its hello's deadline): the port must outlive it, so
                # wait for some to close. Anything else is the port closing.
                if e.errno in _OUT_OF_DESCRIPTORS and not self.stopping:
                    time.sleep(0.1)
                    continue
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                if len(self.awaiting) >= _MAX_AWAITING_HELLO:
                    oldest = next(iter(self.awaiting))
                    del self.awaiting[oldest]
                    try:
                        oldest.shutdown(socket.SHUT_RDWR)  # its thread's read ends
                    except OSError:
                        pass
                self.awaiting[sock] = None
            self.socks.add(sock)
            t = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            self.conns.add(t)
            try:
                t.start()
            except RuntimeError:  # no thread now: this connection goes, the port stays
                self._forget(sock, t)
                sock.close()

    def _serve(self, sock: socket.socket) -> None:
        try:
            # Authenticate before allocating: a bounded hello within a
            # deadline, the token checked before anything else is read; any
            # other first frame drops the connection.
            frame = _wire.recv_frame(sock, _wire.HELLO_MAX, time.monotonic() + _HELLO_WITHIN)
            if frame is None or frame[0] != _wire.HELLO:
                return
            hello = json.loads(frame[1])
            if not isinstance(hello, dict) or not secrets.compare_digest(
                    str(hello.get("token", "")).encode(), self.token.encode()):
                return
            with self.lock:
                self.awaiting.pop(sock, None)
            sock.settimeout(None)
            key = (hello["attempt"], hello["rank"])
            with self.changed:
                self.hellos[key] = hello
                self.changed.notify_all()
            self.on_hello(hello)
            _wire.send_frame(sock, _wire.PAYLOAD, self.payload)
            frame = _wire.recv_frame(sock)
            outcome: Outcome
            if frame is None:
                outcome = ("lost", None)
            elif frame[0] == _wire.RESULT:
                outcome = ("ok", frame[1])
            else:
                outcome = ("err", cloudpickle.loads(frame[1]))
            with self.changed:
                self.outcomes[key] = outcome
                self.changed.notify_all()
        except (OSError, ValueError, KeyError, IndexError, TypeError, RecursionError):
            # A hello nested past the parser's depth raises RecursionError:
            # like any other bad frame, it only drops its connection.
            pass
        finally:
            try:
                sock.close()
            except OSError:
                pass
            self._forget(sock, threading.current_thread())

    def _forget(self, sock: socket.socket, thread: threading.Thread) -> None:
        with self.lock:
            self.awaiting.pop(sock, None)
        self.socks.discard(sock)
        self.conns.discard(thread)
