"""TorchX's ``torchx.specs.file_linter`` helpers for component help.

trun lints component files in its loader (``trun._component``, run by the
binary, with TorchX's rules and messages); these are the pieces a
component's ``--help`` is built from, for :mod:`trun.specs.builders`.
"""

import argparse
import inspect
from typing import Callable, Dict, Tuple

from trun._component import parse_docstring


class TorchXArgumentHelpFormatter(argparse.RawDescriptionHelpFormatter,
                                  argparse.ArgumentDefaultsHelpFormatter,
                                  argparse.MetavarTypeHelpFormatter):
    """Each argument's help ends ``(required)`` or ``(default: VALUE)``."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help = action.help or ""
        if action.default is argparse.SUPPRESS:  # --help
            return help
        return help + (" (required)" if action.required else f" (default: {action.default})")


def get_fn_docstring(fn: Callable[..., object]) -> Tuple[str, Dict[str, str]]:
    """(description, {parameter: help}) from the Google-style docstring; a
    parameter it does not describe gets ``" "`` (argparse drops empty help)."""
    description, helps = parse_docstring(fn)
    args = {name: " " for name in inspect.signature(fn).parameters}
    args.update(helps)
    return description, args
