"""TorchX's ``torchx.runner`` for trun: submit and follow apps from Python.

    from trun.runner import get_runner
    with get_runner() as runner:
        handle = runner.run_component("dist.ddp", ["-j", "2x2", "--script", "train.py"],
                                      scheduler="local")
        print(runner.wait(handle, wait_interval=1))

The Runner lives in :mod:`trun.runner.api` (as TorchX's in
``torchx.runner.api``, where tests patch ``get_scheduler_factories`` and
``get_configured_trackers``); its events in :mod:`trun.runner.events`. See
docs/python.md ("trun.runner").
"""

from trun.runner.api import (DescribeAppResponse, ListAppResponse, Runner, TrunCommandError,
                             TrunInvalidInputError, _status_from_json, get_runner)

__all__ = ["DescribeAppResponse", "ListAppResponse", "Runner", "TrunCommandError",
           "TrunInvalidInputError", "_status_from_json", "get_runner"]
