"""TorchX's ``torchx.workspace.api``: :class:`WorkspaceMixin`.

Thread-safety: ``build_workspaces`` mutates the roles it is given; one call
at a time per list of roles.
"""

from __future__ import annotations

import logging
import tempfile
from typing import Generic, Mapping, TypeVar

from trun.specs.api import AppDef, CfgVal, Role, runopts

logger = logging.getLogger(__name__)

TORCHX_IGNORE = ".torchxignore"

T = TypeVar("T")


class WorkspaceMixin(Generic[T]):
    """Mixed into a Scheduler (before it in the bases) that builds workspaces:
    ``build_workspaces`` builds each role that has a ``workspace`` and points
    its ``image`` (and maybe ``env``) at the result. Implement
    ``caching_build_workspace_and_update_role`` (or the older
    ``build_workspace_and_update_role``)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)

    def workspace_opts(self) -> runopts:
        """Run options of the workspace build (joined to the scheduler's)."""
        return runopts()

    def build_workspaces(self, roles: list[Role], cfg: Mapping[str, CfgVal]) -> None:
        """Builds the workspace of every role that has one, updating the role in
        place; a build shared by several roles may be cached for this call."""
        build_cache: dict[object, object] = {}
        for i, role in enumerate(roles):
            if role.workspace:
                old_image = role.image
                self.caching_build_workspace_and_update_role(role, cfg, build_cache)
                if old_image != role.image:
                    logger.info("role[%d]=%s updated with new image to include workspace "
                                "changes", i, role.name)

    def caching_build_workspace_and_update_role(self, role: Role, cfg: Mapping[str, CfgVal],
                                                build_cache: dict[object, object]) -> None:
        """By default, ``build_workspace_and_update_role`` with the workspace's
        one folder, or with its projects copied into a temporary folder first."""
        workspace = role.workspace
        if not workspace:
            return
        if workspace.is_unmapped_single_project():
            self.build_workspace_and_update_role(role, str(workspace), cfg)
        else:
            with tempfile.TemporaryDirectory(suffix="torchx_workspace_") as outdir:
                workspace.merge_into(outdir)
                self.build_workspace_and_update_role(role, outdir, cfg)

    def build_workspace_and_update_role(self, role: Role, workspace: str,
                                        cfg: Mapping[str, CfgVal]) -> None:
        """Builds ``workspace`` (a folder) and points ``role`` at the result."""
        raise NotImplementedError("implement `caching_build_workspace_and_update_role`")

    def dryrun_push_images(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> T:
        """What ``push_images`` would push, with ``app``'s images renamed to it."""
        raise NotImplementedError("dryrun_push is not implemented")

    def push_images(self, images_to_push: T) -> None:
        """Pushes what ``dryrun_push_images`` returned."""
        raise NotImplementedError("push is not implemented")
