"""TorchX's ``torchx.specs.named_resources_generic``: ``gpu.small`` ... ``cpu.xlarge``.

The sizes are trun's table (``trun builtins --resources``), read from the
binary on first use; ``NAMED_RESOURCES[name]()`` is a fresh Resource.
"""

from trun.specs.api import GiB, _NamedResourceFactories  # noqa: F401 (TorchX's GiB)

NAMED_RESOURCES = _NamedResourceFactories(
    lambda name: name.split(".")[0] in ("gpu", "cpu"))
