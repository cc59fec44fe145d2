"""TorchX's ``torchx.util.strings``.

Thread-safety: pure functions."""

from __future__ import annotations

import re


def normalize_str(data: str) -> str:
    """``data`` as a name Kubernetes takes: lowercased, every character but
    ``a-z``, ``0-9`` and ``-`` dropped, then leading ``-`` stripped."""
    return re.sub(r"[^a-z0-9-]", "", data.lower()).lstrip("-")
