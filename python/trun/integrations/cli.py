"""A Launcher from argparse flags: torchrunx's ``integrations.cli``.

    parser = argparse.ArgumentParser()
    add_torchrunx_argument_group(parser)
    launcher = launcher_from_args(parser.parse_args())

The flags are the Launcher's fields torchrunx has, with its names, defaults
and spellings (``--backend None`` for no process group, ``--extra-env-vars
K=V ...``).
"""

from __future__ import annotations

import argparse

from trun.launcher import DEFAULT_ENV_VARS, Launcher

__all__ = ["add_torchrunx_argument_group", "launcher_from_args"]


def add_torchrunx_argument_group(parser: argparse.ArgumentParser) -> None:
    """Adds the group "torchrunx" of the Launcher's flags to ``parser``."""
    g = parser.add_argument_group("torchrunx")
    g.add_argument("--hostnames", type=str, nargs="+", default="auto",
                   help="hosts to run on; 'auto' (default: SLURM's, else localhost) or 'slurm'")
    g.add_argument("--workers-per-host", type=str, nargs="+", default="gpu",
                   help="workers on each host: 'gpu' (default), 'cpu', N, or one N per host")
    g.add_argument("--ssh-config-file", type=str, default=None,
                   help="SSH config file (default: ssh's own, ~/.ssh/config)")
    g.add_argument("--backend", type=str, choices=["nccl", "gloo", "mpi", "ucc", "None"],
                   default="nccl", help="the workers' process group (default nccl; None: none)")
    g.add_argument("--worker-timeout", type=int, default=600,
                   help="process group timeout, seconds (default 600)")
    g.add_argument("--agent-timeout", type=int, default=60,
                   help="seconds for every host's workers to reach the launcher (default 60)")
    g.add_argument("--copy-env-vars", type=str, nargs="+", default=DEFAULT_ENV_VARS,
                   help="variables copied to the workers, fnmatch patterns")
    g.add_argument("--extra-env-vars", type=str, nargs="*", default=None,
                   help="more variables for the workers, as NAME=VALUE")
    g.add_argument("--env-file", type=str, default=None,
                   help="a file of variables the agent sources on each host")


def _one_or_list(values: str | list[str], what: tuple[str, ...]) -> str | list[str]:
    """argparse's nargs="+" value: a keyword alone stays a str."""
    if isinstance(values, str):
        return values
    return values[0] if len(values) == 1 and values[0] in what else list(values)


def launcher_from_args(args: argparse.Namespace) -> Launcher:
    """The Launcher the flags of ``add_torchrunx_argument_group`` describe.

    A bad value (a worker count that is not a number, an extra variable
    without '=') is a ValueError naming the flag.
    """
    hostnames = _one_or_list(args.hostnames, ("auto", "slurm"))
    given = _one_or_list(args.workers_per_host, ("gpu", "cpu"))
    wph: int | list[int] | str
    if isinstance(given, str) and given in ("gpu", "cpu"):
        wph = given
    else:
        try:
            counts = [int(x) for x in ([given] if isinstance(given, str) else given)]
        except ValueError:
            raise ValueError(f"--workers-per-host: expected 'gpu', 'cpu' or numbers, "
                             f"got {' '.join(args.workers_per_host)!r}") from None
        wph = counts[0] if len(counts) == 1 else counts
    extra = None
    if args.extra_env_vars is not None:
        extra = {}
        for item in args.extra_env_vars:
            name, eq, value = item.partition("=")
            if not eq:
                raise ValueError(f"--extra-env-vars: {item!r} is not NAME=VALUE")
            extra[name] = value
    return Launcher(hostnames=hostnames, workers_per_host=wph,
                    ssh_config_file=args.ssh_config_file,
                    backend=None if args.backend == "None" else args.backend,
                    worker_timeout=args.worker_timeout, agent_timeout=args.agent_timeout,
                    copy_env_vars=tuple(args.copy_env_vars), extra_env_vars=extra,
                    env_file=args.env_file)
