"""TorchX's ``torchx.settings``: the names of the environment variables TorchX's
API reads, for code that refers to them by constant.

Of these, trun's Python side reads ``TORCHXCONFIG`` (:mod:`trun.runner.config`)
and the ``TORCHX_*`` scheduler parameters of ``get_runner``; the trun binary
reads its own ``TRUN*`` names (docs/cli.md).
"""

ENV_TORCHX_TRACKERS = "TORCHX_TRACKERS"
ENV_TORCHX_PARENT_RUN_ID = "TORCHX_PARENT_RUN_ID"
ENV_TORCHX_JOB_ID = "TORCHX_JOB_ID"
ENV_TORCHXCONFIG = "TORCHXCONFIG"
ENV_TORCHX_INTERNAL_SESSION_ID = "TORCHX_INTERNAL_SESSION_ID"
ENV_TORCHX_IMAGE = "TORCHX_IMAGE"
