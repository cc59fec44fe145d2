"""TorchX's ``torchx.util.session``: one id per process, put on every runner
event and in every submitted role's environment (``TORCHX_INTERNAL_SESSION_ID``),
so that the apps one program submitted can be told apart from others'.

Thread-safety: the id is made once; two threads racing the first call may
each make one, and the last written wins, as in TorchX.
"""

from __future__ import annotations

import os
import uuid

from trun import settings

TORCHX_INTERNAL_SESSION_ID: str = settings.ENV_TORCHX_INTERNAL_SESSION_ID

CURRENT_SESSION_ID: str | None = None


def get_session_id_or_create_new() -> str:
    """This process's session id: ``$TORCHX_INTERNAL_SESSION_ID`` when set (a
    program started by a TorchX job keeps its parent's), else a new uuid4."""
    global CURRENT_SESSION_ID
    if CURRENT_SESSION_ID:
        return CURRENT_SESSION_ID
    CURRENT_SESSION_ID = os.getenv(settings.ENV_TORCHX_INTERNAL_SESSION_ID) or str(uuid.uuid4())
    return CURRENT_SESSION_ID


def get_torchx_session_id() -> str | None:
    """The session id if one was made, else None (never makes one)."""
    return CURRENT_SESSION_ID
