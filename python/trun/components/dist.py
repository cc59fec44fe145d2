"""``torchx.components.dist``: distributed training, with trun as each node's agent."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from trun import specs
from trun.components import builtin

# What `debug=True` adds to every replica's environment (TorchX's, and the
# builtin's: `trun run dist.ddp --debug true`).
_TORCH_DEBUG_FLAGS: Dict[str, str] = {
    "CUDA_LAUNCH_BLOCKING": "1",
    "NCCL_DESYNC_DEBUG": "1",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    "TORCH_SHOW_CPP_STACKTRACES": "1",
}


def parse_nnodes(j: str) -> Tuple[int, int, int, str]:
    """``-j`` as TorchX reads it: ``[[MIN:]MAXx]NPROC`` into (min nodes, max nodes,
    processes per node, the nodes as written); ``"4"`` is one node of 4."""
    m = re.fullmatch(r"(?:(\d+)(?::(\d+))?x)?(\d+)", j)
    if m is None:
        raise ValueError(f"Invalid format for -j, usage example: 1:2x4 or 1x4 or 4. Given: {j}")
    low, high, nproc = m.group(1) or "1", m.group(2), m.group(3)
    return int(low), int(high or low), int(nproc), f"{low}:{high}" if high else low


def get_role_name(script: Optional[str], m: Optional[str]) -> str:
    """The role's name: the script's file name without extension, else the
    module's last part."""
    if script:
        return Path(script).stem
    if m:
        return m.rpartition(".")[2]
    raise ValueError("failed to compute role_name")


def ddp(*script_args: str, script: Optional[str] = None, m: Optional[str] = None,
        image: Optional[str] = None, name: str = "/", h: Optional[str] = None, cpu: int = 2,
        gpu: int = 0, memMB: int = 1024, j: str = "1x2", env: Optional[Dict[str, str]] = None,
        metadata: Optional[Dict[str, str]] = None, max_retries: int = 0, rdzv_port: int = 29500,
        rdzv_backend: str = "c10d", rdzv_conf: Optional[str] = None,
        mounts: Optional[List[str]] = None, debug: bool = False, tee: int = 3) -> specs.AppDef:
    """Distributed data parallel: ``-j [MIN:]MAXxNPROC`` nodes of trun agents running
    ``script`` (or module ``m``) with ``script_args``. See ``trun run dist.ddp --help``."""
    return builtin("dist.ddp", script_args, dict(
        script=script, m=m, image=image, name=name, h=h, cpu=cpu, gpu=gpu, memMB=memMB, j=j,
        env=env, metadata=metadata, max_retries=max_retries, rdzv_port=rdzv_port,
        rdzv_backend=rdzv_backend, rdzv_conf=rdzv_conf, mounts=mounts, debug=debug, tee=tee))


def spmd(*args: str, script: Optional[str] = None, m: Optional[str] = None,
         image: Optional[str] = None, name: str = "/", h: str = "gpu.small", j: str = "1x1",
         env: Optional[Dict[str, str]] = None, metadata: Optional[Dict[str, str]] = None,
         max_retries: int = 0, mounts: Optional[List[str]] = None,
         debug: bool = False) -> specs.AppDef:
    """``ddp`` on the named resource ``h``, one process per GPU of it for ``-j N``."""
    return builtin("dist.spmd", args, dict(
        script=script, m=m, image=image, name=name, h=h, j=j, env=env, metadata=metadata,
        max_retries=max_retries, mounts=mounts, debug=debug))


def torchrun(*script_args: str, script: Optional[str] = None, m: Optional[str] = None,
             image: Optional[str] = None, name: str = "/", h: Optional[str] = None,
             cpu: int = 2, gpu: int = 0, memMB: int = 1024, j: str = "1x2",
             env: Optional[Dict[str, str]] = None, metadata: Optional[Dict[str, str]] = None,
             max_retries: int = 0, rdzv_port: int = 29500, rdzv_backend: str = "c10d",
             rdzv_conf: Optional[str] = None, mounts: Optional[List[str]] = None,
             debug: bool = False, tee: int = 3) -> specs.AppDef:
    """TorchX's newer ``dist.torchrun``: ``ddp``'s arguments and defaults, except that
    with a named host ``h`` a bare ``j`` (``"2"``, ``"1:4"``) counts nodes, each running
    one process per GPU of the host. See ``trun run dist.torchrun --help``."""
    return builtin("dist.torchrun", script_args, dict(
        script=script, m=m, image=image, name=name, h=h, cpu=cpu, gpu=gpu, memMB=memMB, j=j,
        env=env, metadata=metadata, max_retries=max_retries, rdzv_port=rdzv_port,
        rdzv_backend=rdzv_backend, rdzv_conf=rdzv_conf, mounts=mounts, debug=debug, tee=tee))
