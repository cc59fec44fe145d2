"""TorchX's ``torchx.specs`` for trun: AppDef, Role, Resource and friends.

The definitions live in :mod:`trun.specs.api`, as TorchX's do in
``torchx/specs/api.py``; this package re-exports them, as TorchX's does.
See docs/python.md ("trun.specs").
"""

from trun.specs.api import *  # noqa: F401,F403
from trun.specs.api import __all__ as _api_all
from trun.specs.api import (SCHEDULERS, _NamedResourcesLibrary, _mount_to_dict,  # noqa: F401
                            _role_from_dict)  # (trun.runner and the tests)
from trun.specs.builders import materialize_appdef
from trun.specs.capabilities import CapabilityKey
from trun.specs.metadata_keys import NA, TORCHX_CONTEXT_NAME, app_metadata

__all__ = list(_api_all) + ["CapabilityKey", "NA", "TORCHX_CONTEXT_NAME", "app_metadata",
                            "materialize_appdef"]
