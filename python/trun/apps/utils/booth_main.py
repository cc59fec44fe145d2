"""The app of the ``utils.booth`` builtin (TorchX's ``torchx.apps.utils.booth_main``):
evaluates the booth function at ``(x1, x2)`` and records the value as
``{"booth_eval": value}`` under key ``trial_idx`` of an
:class:`~trun.runtime.tracking.FsspecResultTracker` at ``tracker_base``, where
an HPO driver reads it back (``FsspecResultTracker(base)[trial_idx]``).

    python3 -m trun.apps.utils.booth_main --x1 1 --x2 3 --tracker_base /tmp/t
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from trun.runtime.tracking import FsspecResultTracker


def booth(x1: float, x2: float) -> float:
    """The booth function: 0 at its global minimum (1, 3)."""
    return (x1 + 2 * x2 - 7) ** 2 + (2 * x1 + x2 - 5) ** 2


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="evaluates the booth function at (x1, x2)")
    parser.add_argument("--x1", type=float, required=True, help="x1")
    parser.add_argument("--x2", type=float, required=True, help="x2")
    parser.add_argument("--tracker_base", type=str, default="/tmp/torchx-util-booth",
                        help="URI of output directory to use as the tracker's base dir")
    parser.add_argument("--trial_idx", type=int, default=0,
                        help="trial index (ignore if not running hpo)")
    return parser.parse_args(list(argv))


def main(argv: Sequence[str]) -> None:
    args = parse_args(argv)
    FsspecResultTracker(args.tracker_base)[args.trial_idx] = {
        "booth_eval": booth(args.x1, args.x2)}


if __name__ == "__main__":
    main(sys.argv[1:])
