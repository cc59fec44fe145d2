"""TorchX's ``torchx.specs.file_linter``: lint a component function, and its help.

The checks are those of trun's loader (``trun._component.findings``, what
``trun run FILE:fn`` reports), given here as TorchX's ``LinterMessage``s
with TorchX's descriptions; the help pieces are what
:mod:`trun.specs.builders` builds ``--help`` from.
"""

import argparse
import inspect
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from trun._component import findings, parse_docstring


@dataclass
class LinterMessage:
    name: str
    description: str
    line: int
    char: int
    severity: str = "error"


class ComponentFunctionValidator:
    """A group of TorchX's checks; ``validate`` runs the groups it is given."""


class ArgTypeValidator(ComponentFunctionValidator):
    """Every parameter annotated with a type a component may take."""


class ReturnTypeValidator(ComponentFunctionValidator):
    """The return annotation is ``supported_return_type`` (trun: AppDef)."""

    def __init__(self, supported_return_type: str = "AppDef") -> None:
        self.supported_return_type = supported_return_type


def read_conf_file(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def validate(path: str, component_function: str,
             validators: Optional[Sequence[ComponentFunctionValidator]] = None
             ) -> List[LinterMessage]:
    """The problems of ``component_function`` in the file ``path``: a syntax
    error, a missing function, and what ``validators`` check (default: the
    parameters' types and the return annotation; ``[]``: nothing)."""
    if validators is None:
        validators = [ArgTypeValidator(), ReturnTypeValidator()]
    found = findings(read_conf_file(path), component_function,
                     check_args=any(isinstance(v, ArgTypeValidator) for v in validators),
                     check_return=any(isinstance(v, ReturnTypeValidator) for v in validators))
    return [LinterMessage("TorchXValidator" if f.kind in ("syntax", "missing")
                          else "TorchxFunctionValidator", f.description, f.line, 0)
            for f in found]


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
    """(description, {parameter: help}) from the Google-style docstring: the
    summary, and on the next line the rest of the description; a parameter it
    does not describe gets ``" "`` (argparse drops empty help)."""
    description, helps = parse_docstring(fn)
    summary, _, rest = description.partition("\n\n")
    description = summary + ("\n" + rest.strip() if rest.strip() else "")
    args = {name: " " for name in inspect.signature(fn).parameters}
    args.update(helps)
    return description, args
