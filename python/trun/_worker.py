"""The worker side: what each process the trun agent starts runs.

The agent runs ``python -u -m trun._worker`` with torchrun's environment
(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...). This connects back to the
launcher (TRUN_LAUNCHER=host:port, TRUN_TOKEN), fetches the function and its
arguments, runs it, and sends its return value or exception back.

If the launcher goes away (its socket closes before the result is sent), the
worker ends itself: a launcher killed with -9 leaves no worker computing for
nobody, even when the agent's own watch (stdin of its SSH session) misses it.
"""

from __future__ import annotations

import datetime
import io
import json
import logging
import os
import socket
import sys
import threading
import time
import traceback
from typing import Any, cast

import cloudpickle

from trun import _wire
from trun.logs import RECORD_MARK, log_level_from_env, parse_level
from trun.record import write_error_file

_done = threading.Event()


def _connect(addr: str, timeout: float) -> socket.socket:
    host, _, port = addr.rpartition(":")
    deadline = time.monotonic() + timeout
    while True:
        try:
            s = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
            s.settimeout(None)
            return s
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _keepalive(sock: socket.socket, seconds: float) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    idle = max(1, int(seconds / 3))
    for opt, val in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", idle), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, opt):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), val)


def _watch_launcher(sock: socket.socket) -> None:
    """Ends this worker when the launcher's side of the connection closes."""
    try:
        while sock.recv(1 << 16):
            pass
    except OSError:
        pass
    if not _done.is_set():
        sys.stderr.write("trun: launcher connection lost; stopping this worker\n")
        sys.stderr.flush()
        os._exit(75)


# Longest record line sent whole (the agent's pump holds at most 64 KiB of a line).
_RECORD_MAX = 60000


class _RecordLines(logging.Handler):
    """Writes each record as one line of stderr that the launcher reads back
    as a record of the same level and logger (logs.RECORD_MARK)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
            if record.exc_info:
                msg += "\n" + "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
            elif record.exc_text:
                msg += "\n" + record.exc_text
            if record.stack_info:
                msg += "\n" + record.stack_info
            line = json.dumps({"level": record.levelno, "name": record.name, "msg": msg})
            if len(line) > _RECORD_MAX:
                # The agent cuts lines past 64 KiB: such a record goes as
                # plain lines (ERROR, as any stderr line) rather than cut JSON.
                sys.stderr.write(f"{record.levelname}:{record.name}:{msg}\n")
            else:
                sys.stderr.write(RECORD_MARK + line + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            self.handleError(record)


def _forward_logging() -> None:
    """The function's ``logging`` records go to the launcher with their level
    and logger name, from $TRUN_WORKER_LOG_LEVEL, else the launcher's file
    level if that is lower than INFO, else INFO; torch's chatter (store
    barriers, reducer buckets) only from WARNING up."""
    raw = os.environ.get("TRUN_WORKER_LOG_LEVEL")
    try:
        level = (parse_level(raw, "$TRUN_WORKER_LOG_LEVEL") if raw
                 else min(logging.INFO, log_level_from_env()))
    except ValueError as e:
        sys.stderr.write(f"trun: {e}; using INFO\n")
        level = logging.INFO
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(_RecordLines())
    root.setLevel(level)
    logging.captureWarnings(True)
    logging.getLogger("torch").setLevel(max(logging.WARNING, level))


def main() -> int:
    env = os.environ
    # The agent runs `python -u`: every print would reach the agent's pipe in
    # pieces ("READY", " ", "3", "\n"). One write per line keeps lines whole
    # on their way through the agent, whatever its pump does with pieces.
    for stream in (sys.stdout, sys.stderr):
        try:
            cast(io.TextIOWrapper, stream).reconfigure(line_buffering=True, write_through=False)
        except (AttributeError, ValueError):
            pass
    agent_timeout = float(env.get("TRUN_AGENT_TIMEOUT", "60"))
    try:
        sock = _connect(env["TRUN_LAUNCHER"], agent_timeout)
    except OSError as e:
        sys.stderr.write(f"trun: rank {env.get('RANK')} cannot reach the launcher at "
                         f"{env['TRUN_LAUNCHER']}: {e}\n")
        return 76
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _keepalive(sock, agent_timeout)
    hello = {
        "token": env["TRUN_TOKEN"],
        # Which of the launcher's hosts this is (under the static rendezvous
        # also GROUP_RANK; set by the launcher so it never depends on that).
        "host_index": int(env.get("TRUN_HOST_INDEX", env["GROUP_RANK"])),
        "rank": int(env["RANK"]),
        "local_rank": int(env["LOCAL_RANK"]),
        "world_size": int(env["WORLD_SIZE"]),
        "local_world_size": int(env["LOCAL_WORLD_SIZE"]),
        "group_world_size": int(env.get("GROUP_WORLD_SIZE", "1")),
        "attempt": int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
        "pid": os.getpid(),
    }
    _wire.send_frame(sock, _wire.HELLO, json.dumps(hello).encode())
    frame = _wire.recv_frame(sock)
    if frame is None or frame[0] != _wire.PAYLOAD:
        sys.stderr.write("trun: the launcher refused this worker or went away\n")
        return 75
    threading.Thread(target=_watch_launcher, args=(sock,), daemon=True).start()

    _forward_logging()
    backend = env.get("TRUN_BACKEND", "")
    dist: Any = None
    rc = 0
    try:
        try:
            func, args, kwargs = cloudpickle.loads(frame[1])
        except Exception as e:
            raise RuntimeError(f"the function cannot be unpickled on rank {env['RANK']} "
                               f"(same Python, cloudpickle and modules on every host?): "
                               f"{type(e).__name__}: {e}") from e
        if backend:
            import torch.distributed
            dist = torch.distributed
            if backend == "nccl":
                import torch
                if torch.cuda.is_available():
                    torch.cuda.set_device(int(env["LOCAL_RANK"]))
            timeout = datetime.timedelta(seconds=float(env.get("TRUN_WORKER_TIMEOUT", "600")))
            dist.init_process_group(backend=backend, timeout=timeout)
        value = func(*args, **kwargs)
        try:
            body = cloudpickle.dumps(value)
            kind = _wire.RESULT
        except Exception as e:  # noqa: BLE001 - the caller gets it as the worker's error
            raise TypeError(f"the return value of rank {env['RANK']} cannot be pickled: {e}") from e
    except BaseException as e:  # noqa: BLE001 - everything goes back to the caller
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        write_error_file(e, tb)
        info = {"type": f"{type(e).__module__}.{type(e).__qualname__}", "message": str(e),
                "traceback": tb, "time": time.time()}
        try:
            info["exception"] = cloudpickle.dumps(e)
            cloudpickle.loads(info["exception"])
        except Exception:  # noqa: BLE001 - sent by name and message instead
            info.pop("exception", None)
        body = cloudpickle.dumps(info)
        kind = _wire.ERROR
        rc = 1
    _done.set()
    try:
        _wire.send_frame(sock, kind, body)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    if dist is not None and rc == 0:
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass
    return rc


if __name__ == "__main__":
    sys.exit(main())
