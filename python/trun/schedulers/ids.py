"""TorchX's ``torchx.schedulers.ids``: app names that a scheduler can use as
they are (Kubernetes' rule for names: lowercase letters and digits, starting
with a letter). The randomness is the OS's (``os.urandom``), not the
``random`` module's, so a program that seeds ``random`` never repeats an id.

The digits are TorchX's, so that an id drawn from the same 8 bytes is the
same under both: a 64-bit number written least significant digit first, the
first digit from 20 consonants (no vowel, so no word is spelt), the others
from those and nine digits (no 8).

Thread-safety: pure functions."""

from __future__ import annotations

import os

_FIRST = "bcdfghjklmnpqrstvwxz"
_REST = _FIRST + "012345679"


def random_uint64() -> int:
    """An unsigned 64-bit number from ``os.urandom``."""
    return int.from_bytes(os.urandom(8), "big")


def random_id(max_length: int | None = None) -> str:
    """A fresh id of about 12-14 characters (at most ``max_length``; ``""``
    when that is 0 or less), starting with a letter."""
    if max_length is not None and max_length <= 0:
        return ""
    value = random_uint64()
    chars: list[str] = []
    while value and (max_length is None or len(chars) < max_length):
        alphabet = _REST if chars else _FIRST
        value, digit = divmod(value, len(alphabet))
        chars.append(alphabet[digit])
    return "".join(chars)


def make_unique(name: str, string_length: int = 0) -> str:
    """``NAME-ID``: ``name`` with a fresh :func:`random_id` (of at most
    ``string_length`` characters; 0: its own length)."""
    return f"{name}-{random_id(string_length or None)}"
