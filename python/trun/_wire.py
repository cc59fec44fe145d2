"""Frames between the launcher and its workers over one TCP connection.

A frame is a 9-byte header, kind (1 byte) and length (8 bytes, big-endian),
then the body. HELLO is JSON; PAYLOAD, RESULT and ERROR are cloudpickle
bytes. A worker sends HELLO, reads PAYLOAD, and sends one RESULT or ERROR.
Bodies have no size limit beyond memory (a 100 MB result is one frame).
"""

from __future__ import annotations

import struct

HELLO, PAYLOAD, RESULT, ERROR = 1, 2, 3, 4
_HEADER = struct.Struct("!BQ")
_CHUNK = 1 << 20


def send_frame(sock, kind: int, body: bytes) -> None:
    sock.sendall(_HEADER.pack(kind, len(body)))
    view = memoryview(body)
    for i in range(0, len(view), _CHUNK * 16):
        sock.sendall(view[i:i + _CHUNK * 16])


def _recv_exact(sock, n: int) -> bytes | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, _CHUNK * 4))
        if k == 0:
            return None
        got += k
    return bytes(buf)


def recv_frame(sock) -> tuple[int, bytes] | None:
    """The next frame, or None when the peer closed the connection first."""
    head = _recv_exact(sock, _HEADER.size)
    if head is None:
        return None
    kind, length = _HEADER.unpack(head)
    body = _recv_exact(sock, length) if length else b""
    if body is None:
        return None
    return kind, body
