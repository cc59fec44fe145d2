"""Frames between the launcher and its workers over one TCP connection.

A frame is a 9-byte header, kind (1 byte) and length (8 bytes, big-endian),
then the body. HELLO is JSON; PAYLOAD, RESULT and ERROR are cloudpickle
bytes. A worker sends HELLO, reads PAYLOAD, and sends one RESULT or ERROR.
HELLO carries the launcher's token and is at most HELLO_MAX bytes: the
launcher reads no more than that, within a deadline, from a connection that
has not shown the token. Later bodies have no size limit beyond memory (a
100 MB result is one frame).
"""

from __future__ import annotations

import socket
import struct
import time

HELLO, PAYLOAD, RESULT, ERROR = 1, 2, 3, 4
HELLO_MAX = 4096
_HEADER = struct.Struct("!BQ")
_CHUNK = 1 << 20


def send_frame(sock: socket.socket, kind: int, body: bytes) -> None:
    sock.sendall(_HEADER.pack(kind, len(body)))
    view = memoryview(body)
    for i in range(0, len(view), _CHUNK * 16):
        sock.sendall(view[i:i + _CHUNK * 16])


def _recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("the frame did not arrive in time")
            sock.settimeout(left)
        k = sock.recv_into(view[got:], min(n - got, _CHUNK * 4))
        if k == 0:
            return None
        got += k
    return bytes(buf)


def recv_frame(sock: socket.socket, max_length: int | None = None,
               deadline: float | None = None) -> tuple[int, bytes] | None:
    """The next frame, or None when the peer closed the connection first.

    ValueError for a body longer than max_length (nothing of it is read);
    socket.timeout when the whole frame is not in by deadline (monotonic).
    """
    head = _recv_exact(sock, _HEADER.size, deadline)
    if head is None:
        return None
    kind, length = _HEADER.unpack(head)
    if max_length is not None and length > max_length:
        raise ValueError(f"a frame of {length} bytes where at most {max_length} are expected")
    body = _recv_exact(sock, length, deadline) if length else b""
    if body is None:
        return None
    return kind, body
