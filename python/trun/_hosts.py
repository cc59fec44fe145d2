"""Host lists: SLURM's compressed node lists, and which hosts need SSH."""

from __future__ import annotations

import os
import re
import socket


def expand_nodelist(spec: str) -> list[str]:
    """Expands a SLURM node list: "a[1-3,7],b-[01-02]" -> a1 a2 a3 a7 b-01 b-02."""
    hosts: list[str] = []
    for item in _split_top(spec):
        parts = re.findall(r"([^\[\]]*)(?:\[([^\]]*)\])?", item)
        names = [""]
        for text, ranges in parts:
            if not text and not ranges:
                continue
            names = [n + text for n in names]
            if ranges:
                values = []
                for r in ranges.split(","):
                    if "-" in r:
                        lo, hi = r.split("-", 1)
                        width = len(lo)
                        values += [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
                    else:
                        values.append(r)
                names = [n + v for n in names for v in values]
        hosts += names
    return hosts


def _split_top(spec: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in spec:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


def in_slurm() -> bool:
    return "SLURM_JOB_ID" in os.environ


def slurm_hosts() -> list[str]:
    spec = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not spec:
        raise RuntimeError("hostnames='slurm': not inside a SLURM allocation "
                           "(SLURM_JOB_NODELIST is not set)")
    return expand_nodelist(spec)


def is_local(host: str) -> bool:
    """Hosts run without SSH: localhost and this machine's own names.

    An SSH alias that happens to point at 127.0.0.1 still goes through SSH:
    the user asked for that host by its SSH name.
    """
    return host in ("localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn())
