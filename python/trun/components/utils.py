"""``torchx.components.utils``: small programs, for tutorials and glue."""

from __future__ import annotations

from typing import Dict, List, Optional

from trun import specs
from trun.components import builtin


def echo(msg: str = "hello world", image: Optional[str] = None,
         num_replicas: int = 1) -> specs.AppDef:
    """
    Echos a message to stdout (calls echo)

    Args:
        msg: message to echo
        image: image to use
        num_replicas: number of replicas to run
    """
    return builtin("utils.echo", (), dict(msg=msg, image=image, num_replicas=num_replicas))


def touch(file: str, image: Optional[str] = None) -> specs.AppDef:
    """Touches a file."""
    return builtin("utils.touch", (), dict(file=file, image=image))


def sh(*args: str, image: Optional[str] = None, num_replicas: int = 1, cpu: int = 1,
       gpu: int = 0, memMB: int = 1024, h: Optional[str] = None,
       env: Optional[Dict[str, str]] = None, max_retries: int = 0,
       mounts: Optional[List[str]] = None, entrypoint: Optional[str] = None) -> specs.AppDef:
    """Runs ``sh -c "ARGS"`` (or ``entrypoint ARGS``)."""
    return builtin("utils.sh", args, dict(
        image=image, num_replicas=num_replicas, cpu=cpu, gpu=gpu, memMB=memMB, h=h, env=env,
        max_retries=max_retries, mounts=mounts, entrypoint=entrypoint))


def python(*args: str, m: Optional[str] = None, c: Optional[str] = None,
           script: Optional[str] = None, image: Optional[str] = None,
           name: Optional[str] = None, cpu: int = 1, gpu: int = 0, memMB: int = 1024,
           h: Optional[str] = None, num_replicas: int = 1,
           mounts: Optional[List[str]] = None) -> specs.AppDef:
    """Runs python3 with exactly one of a module, a command or a script."""
    return builtin("utils.python", args, dict(
        m=m, c=c, script=script, image=image, name=name, cpu=cpu, gpu=gpu, memMB=memMB, h=h,
        num_replicas=num_replicas, mounts=mounts))


def binary(*args: str, entrypoint: str, name: Optional[str] = None, num_replicas: int = 1,
           cpu: int = 1, gpu: int = 0, memMB: int = 1024,
           h: Optional[str] = None) -> specs.AppDef:
    """Runs ``entrypoint ARGS``."""
    return builtin("utils.binary", args, dict(
        entrypoint=entrypoint, name=name, num_replicas=num_replicas, cpu=cpu, gpu=gpu,
        memMB=memMB, h=h))


def booth(x1: float, x2: float, trial_idx: int = 0,
          tracker_base: str = "/tmp/torchx-util-booth",
          image: Optional[str] = None) -> specs.AppDef:
    """
    Evaluates the booth function, ``f(x1, x2) = (x1 + 2*x2 - 7)^2 + (2*x1 + x2 - 5)^2``.
    Output result is accessible via ``FsspecResultTracker(outdir)[trial_idx]``

    Args:
        x1: x1
        x2: x2
        trial_idx: ignore if not running hpo
        tracker_base: URI of the tracker's base output directory (e.g. s3://foo/bar)
        image: the image that contains the booth app
    """
    return builtin("utils.booth", (), dict(x1=x1, x2=x2, trial_idx=trial_idx,
                                           tracker_base=tracker_base, image=image))


def copy(src: str, dst: str, image: Optional[str] = None,
         mounts: Optional[List[str]] = None) -> specs.AppDef:
    """Copies ``src`` to ``dst``."""
    return builtin("utils.copy", (), dict(src=src, dst=dst, image=image, mounts=mounts))
