"""TorchX's ``torchx.schedulers.local_scheduler`` for trun: a Python
:class:`LocalScheduler` (with TorchX's image providers and
``create_scheduler``) that runs apps on trun's own local scheduler.

TorchX's LocalScheduler starts the replicas itself, as child processes of
the Python program. trun's starts them from a detached supervisor (they
outlive the program, and ``trun status``/``log`` see them from any shell),
and starts every replica in the working directory of ``trun run``, with that
directory last on ``PATH`` (first with ``prepend_cwd``): exactly what
TorchX's image providers ask for, so this scheduler runs ``trun run`` in the
directory the provider gives (``LocalDirectoryImageProvider``: the image,
which must be a directory; ``CWDImageProvider``: this process's). What differs
from TorchX's, and why:

- the roles of one app must share one directory (trun starts every replica
  of an app in one working directory): different ones are a ValueError;
- apps are trun's (ids ``NAME-XXXX``, state and logs under trun's state
  directory): ``list`` lists them, where TorchX's raises;
- ``cache_size`` bounds the apps followed as TorchX's does, but an app
  evicted from it is forgotten by this object only: trun keeps its state
  on disk until ``delete`` (the command line still sees it);
- ``close()`` cancels the apps this object started that still run, as
  TorchX's kills its children.

Thread-safety: one thread at a time (the apps started are listed unlocked).
"""

from __future__ import annotations

import abc
import copy
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from trun.runner.api import TrunCommandError
from trun.schedulers import TrunScheduler
from trun.schedulers.api import StructuredOpts, copy_app
from trun.specs.api import AppDef, AppDryRunInfo, AppState, CfgVal, Role

__all__ = ["CWDImageProvider", "ImageProvider", "LocalDirectoryImageProvider", "LocalScheduler",
           "Opts", "create_scheduler"]

log = logging.getLogger(__name__)

# How long schedule waits for trun's supervisor to start an app's replicas
# (a loaded machine takes a second; after this the app is returned PENDING).
_START_TIMEOUT_S = 30.0


class ImageProvider(abc.ABC):
    """Where a role's image is on this host: ``fetch`` returns its root (and
    checks it), ``get_cwd`` the directory its replicas start in (None: this
    process's), ``get_entrypoint`` the program to run."""

    def fetch_role(self, role: Role) -> str:
        return self.fetch(role.image)

    @abc.abstractmethod
    def fetch(self, image: str) -> str:
        ...

    def get_cwd(self, image: str) -> str | None:
        return None

    def get_entrypoint(self, img_root: str, role: Role) -> str:
        return os.path.join(img_root, role.entrypoint)


class LocalDirectoryImageProvider(ImageProvider):
    """The image is a directory on this host; replicas start in it, and a
    relative entrypoint is found there (through ``PATH``)."""

    def __init__(self, cfg: Mapping[str, CfgVal]) -> None:
        pass

    def fetch(self, image: str) -> str:
        if not os.path.isdir(image):
            raise ValueError(f"Invalid image name: {image}, does not exist or is not a "
                             f"directory")
        return image

    def get_cwd(self, image: str) -> str | None:
        return image

    def get_entrypoint(self, img_root: str, role: Role) -> str:
        return role.entrypoint


class CWDImageProvider(ImageProvider):
    """The image is ignored: replicas start in this process's working directory
    (TorchX's ``local_cwd``, trun's ``local``)."""

    def __init__(self, cfg: Mapping[str, CfgVal]) -> None:
        pass

    def fetch(self, image: str) -> str:
        return os.getcwd()

    def get_cwd(self, image: str) -> str | None:
        return os.getcwd()

    def get_entrypoint(self, img_root: str, role: Role) -> str:
        return role.entrypoint


@dataclass
class Opts(StructuredOpts):
    """TorchX's options of the local scheduler (trun's has ``stop_timeout`` too)."""

    log_dir: str | None = None
    """Directory to write stdout/stderr log files of replicas."""

    prepend_cwd: bool = False
    """If set, prepends CWD to replica's PATH env var making binaries in CWD take precedence."""

    auto_set_cuda_visible_devices: bool = False
    """Sets CUDA_VISIBLE_DEVICES for roles that request GPUs."""


class LocalScheduler(TrunScheduler):
    """TorchX's LocalScheduler over trun's local scheduler (see the module's
    doc): ``image_provider_class(cfg)`` places each role, ``extra_paths`` go
    first on every replica's ``PATH``."""

    def __init__(self, session_name: str,
                 image_provider_class: Callable[[Mapping[str, CfgVal]], ImageProvider],
                 cache_size: int = 100, extra_paths: list[str] | None = None, *,
                 trun: str | None = None) -> None:
        super().__init__("local", session_name, trun=trun, cache_size=cache_size,
                         extra_paths=extra_paths)
        self._image_provider_class = image_provider_class

    def _validate(self, app: AppDef, scheduler: str, cfg: Mapping[str, CfgVal]) -> None:
        """As TorchX's: none (a local replica takes what the host has)."""

    def _placed(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> tuple[AppDef, str | None]:
        """``app`` as trun runs it (entrypoints from the image provider; the
        Runner of :meth:`_runner` puts ``extra_paths`` on ``PATH``) and the
        directory to run it in."""
        provider = self._image_provider_class(cfg)
        placed = copy_app(app)
        cwds: set[str | None] = set()
        for role in placed.roles:
            img_root = provider.fetch_role(role)
            cwds.add(provider.get_cwd(role.image))
            role.entrypoint = provider.get_entrypoint(img_root, role)
        if len(cwds) > 1:
            raise ValueError(f"app {app.name!r}: its roles' images are different directories "
                             f"({', '.join(sorted(str(c) for c in cwds))}); trun's local "
                             f"scheduler starts every replica of an app in one directory: "
                             f"give the roles one image directory, or submit them as apps "
                             f"of their own")
        return placed, next(iter(cwds), None)

    def _submit_dryrun(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> AppDryRunInfo[Any]:
        placed, cwd = self._placed(app, cfg)
        return self._runner(cwd).dryrun(placed, self.backend, cfg)

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        if dryrun_info.app is None:
            raise ValueError("schedule: the AppDryRunInfo comes from submit_dryrun")
        placed, cwd = self._placed(dryrun_info.app, dryrun_info.cfg)
        info = copy.copy(dryrun_info)
        info._app, info._scheduler = placed, self.backend
        runner = self._runner(cwd)
        # The Runner follows the app in this object's app cache.
        handle = runner.schedule(info)
        app_id = handle.rsplit("/", 1)[-1]
        # TorchX's returns once the replicas are processes (RUNNING); trun's
        # supervisor starts them a moment after `trun run` returns.
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            st = runner.status(handle)
            if st is None or st.state not in (AppState.UNSUBMITTED, AppState.SUBMITTED,
                                               AppState.PENDING):
                break
            time.sleep(0.05)
        return app_id

    def close(self) -> None:
        """Cancels the apps this scheduler started that still run."""
        started, self._apps = self._apps, []
        for app_id in started:
            try:
                self.cancel(app_id)
            except TrunCommandError as e:
                log.warning("could not cancel local app %s on close: %s", app_id, e)


def create_scheduler(session_name: str, cache_size: int = 100,
                     extra_paths: list[str] | None = None,
                     image_provider_class: Callable[[Mapping[str, CfgVal]], ImageProvider]
                     = CWDImageProvider, **kwargs: Any) -> LocalScheduler:
    """TorchX's factory of the ``local_cwd`` scheduler (``image_provider_class``
    picks another provider; other ``kwargs`` are TorchX's scheduler parameters,
    unused)."""
    return LocalScheduler(session_name=session_name, image_provider_class=image_provider_class,
                          cache_size=cache_size, extra_paths=extra_paths)
