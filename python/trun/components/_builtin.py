"""The helpers of trun's builtin components (re-exported by :mod:`trun.components`,
kept in a private module so that the component finder, which searches the
package's own ``__init__`` as TorchX's does, takes none of them for a component).
Thread-safe (no state).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from trun import _binary, specs


def word(value: Any, kv: str = "=") -> str:
    """A value as trun's command line spells it: bools as true/false, lists as a,b,
    dicts as K=V,K2=V2 (``kv=":"`` for -cfg's k:v)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    if isinstance(value, dict):
        return ",".join(f"{k}{kv}{v}" for k, v in value.items())
    return str(value)


def options_argv(options: dict[str, Any]) -> list[str]:
    """``--key value`` per option that is not None."""
    argv: list[str] = []
    for key, value in options.items():
        if value is not None:
            argv += [f"--{key}", word(value)]
    return argv


def builtin(name: str, args: Sequence[str], options: dict[str, Any]) -> specs.AppDef:
    """The AppDef of trun's builtin component ``name`` for these options (None: not given)
    and ``*args``. A bad argument raises ValueError with trun's message."""
    argv = ["run", "--dryrun", "--json", "-s", "local", name, *options_argv(options)]
    if args:
        argv += ["--", *map(str, args)]
    # The call is TorchX's Python function, which reads no .torchxconfig.
    r = _binary.run(argv, no_config=True)
    if r.returncode != 0:
        lines = [ln.removeprefix("trun: error: ").removeprefix(f"{name}: ")
                 for ln in r.stderr.strip().splitlines()]
        raise ValueError(f"{name}: " + "\n".join(lines))
    app = json.loads(r.stdout)["app"]
    # `trun run` adds the handle variable to every role; the outer run will.
    for role in app["roles"]:
        role["env"].pop("TORCHX_JOB_ID", None)
    return specs.from_dict(app)
