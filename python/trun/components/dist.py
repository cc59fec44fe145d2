"""``torchx.components.dist``: distributed training, with trun as each node's agent."""

from __future__ import annotations

from typing import Dict, List, Optional

from trun import specs
from trun.components import builtin


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
