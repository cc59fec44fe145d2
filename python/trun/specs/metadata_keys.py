"""TorchX's ``torchx.specs.metadata_keys``: the spellings of TorchX's metadata
keys and context variable, which tools downstream join on."""

TORCHX_CONTEXT_NAME = "TORCHX_CONTEXT_NAME"
# A metadata value that does not apply.
NA = "<<NA>>"


class app_metadata:
    """Keys of an app's metadata that schedulers stamp."""

    CONTEXT = "torchx/context"
    VERSION = "torchx/version"
    SCHEDULER = "torchx/scheduler"
    # Per role: torchx/roles.<role>... (role names hold no "." or "/").
    ROLES_PREFIX = "torchx/roles."
