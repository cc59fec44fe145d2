"""TorchX's ``torchx.plugins``: how schedulers, named resources and trackers
are registered by users' packages and discovered.

A package registers a plug-in in one of two ways, both as TorchX does:

- a module under the ``torchx_plugins.<group>`` namespace package (``group``
  is ``schedulers``, ``named_resources`` or ``tracker``) whose functions carry
  the :class:`register` decorator;
- an entry point in the ``torchx.<group>`` group of its distribution's
  metadata (deprecated by TorchX, still honoured; it wins over a namespace
  plug-in of the same name).

``TORCHX_PLUGINS_SOURCE`` picks the channels (0 none, 1 namespace packages,
2 entry points, 3 both, the default). Discovery is lazy, per group, and
cached in :func:`registry`. trun uses the named resources (they join
``trun.specs.named_resources``) and the schedulers (they join
``trun.schedulers.get_scheduler_factories()``, which ``trun.runner`` runs;
the ``trun`` command line runs only the binary's). See docs/python.md.
"""

from trun.plugins._registration import (EIGHTH, HALF, QUARTER, SIXTEENTH, WHOLE,
                                        halve_mem_down_to, powers_of_two_gpus, register,
                                        resource_tags)
from trun.plugins._registry import PluginRegistry, PluginType, RegistrationError, registry

__all__ = [
    "register", "resource_tags", "powers_of_two_gpus", "halve_mem_down_to", "WHOLE", "HALF",
    "QUARTER", "EIGHTH", "SIXTEENTH", "RegistrationError", "PluginType", "PluginRegistry",
    "registry",
]
