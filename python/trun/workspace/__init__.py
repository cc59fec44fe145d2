"""TorchX's ``torchx.workspace``: the :class:`WorkspaceMixin` a Python
scheduler plug-in inherits to build a role's workspace into its image before
submission (the Runner calls ``build_workspaces`` in ``dryrun``).

trun's own schedulers build no images (replicas run in the submitter's
directory or the slurm ``job_dir``), so this serves Python schedulers given
to :class:`trun.runner.Runner` (docs/python.md). TorchX's ``walk_workspace``
(fsspec) and its deprecated ``PkgInfo``/``WorkspaceBuilder`` are not carried
over.
"""

from trun.workspace.api import TORCHX_IGNORE, WorkspaceMixin

__all__ = ["TORCHX_IGNORE", "WorkspaceMixin"]
