"""trun's Python front end: run a function on every worker of many hosts.

    import trun
    result = trun.Launcher(hostnames=["node1", "node2"], workers_per_host=2,
                           backend="gloo").run(train, lr=0.1)
    result.rank(0); result.index("node2", 1); result.results

See docs/python.md. The C++ agent ``trun`` does the supervising on each host.
"""

from trun.errors import AgentFailedError, WorkerFailedError, WorkerRaisedError
from trun.launcher import DEFAULT_ENV_VARS, Launcher, LaunchResult, launch, trun_binary
from trun.record import record
from trun.logs import (ConsoleHandler, RedirectHandler, default_handlers, file_handlers,
                       get_handler_filter)

# torchrunx's name for the default copy list.
DEFAULT_ENV_VARS_FOR_COPY = DEFAULT_ENV_VARS

__all__ = ["Launcher", "LaunchResult", "launch", "AgentFailedError", "WorkerFailedError",
           "WorkerRaisedError", "DEFAULT_ENV_VARS", "DEFAULT_ENV_VARS_FOR_COPY", "trun_binary",
           "ConsoleHandler", "RedirectHandler", "default_handlers", "file_handlers",
           "get_handler_filter", "restart_count", "record"]


def restart_count() -> int:
    """In a worker: which attempt this is (0 first; TORCHELASTIC_RESTART_COUNT)."""
    import os
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
