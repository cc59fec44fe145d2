"""TorchX's ``torchx.runner.events.handlers``: where events can go."""

from __future__ import annotations

import logging

_log_handlers: dict[str, logging.Handler] = {
    "console": logging.StreamHandler(),
    "null": logging.NullHandler(),
}


def get_logging_handler(destination: str = "null") -> logging.Handler:
    """The handler of ``destination`` (``null``, the default, drops events;
    ``console`` writes them to stderr); another name is a KeyError."""
    return _log_handlers[destination]
