"""A Python worker for the warm-start benchmark. Appends "start <ns>" to
$STAMP_FILE once `import torch` is done (the first line of a training
script's own work), then, unless TORCHELASTIC_RESTART_COUNT has reached
$STAMP_LAST, appends "exit <ns>" and exits 1 so that the launcher restarts
it. Without STAMP_LAST it only stamps its start."""
import os
import time

import torch  # noqa: F401


def stamp(what):
    with open(os.environ["STAMP_FILE"], "a") as f:
        f.write(f"{what} {time.time_ns()}\n")


stamp("start")
last = os.environ.get("STAMP_LAST")
if last is not None and int(os.environ["TORCHELASTIC_RESTART_COUNT"]) < int(last):
    stamp("exit")
    os._exit(1)
