"""TorchX's ``torchx.schedulers`` for trun: the schedulers the trun binary has.

trun's schedulers are C++ (``trun runopts`` lists their options).
``get_scheduler_factories()`` makes, for each, a :class:`Scheduler` that
drives the binary through :class:`trun.runner.Runner`, so code written
against TorchX's scheduler objects (``run_opts()``, ``submit_dryrun``,
``describe``, ``.torchxconfig`` loading) works unchanged; the scheduler
plug-ins registered through :mod:`trun.plugins` join them. Thread-safety: as
the Runner's (each call runs the binary on its own).
"""

from __future__ import annotations

import copy
import json
import os
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol

from trun import _binary
from trun.plugins import PluginType, registry
from trun.schedulers.api import (DescribeAppResponse, ListAppResponse, Scheduler, Stream,
                                  copy_app)
from trun.specs.api import (SCHEDULERS, AppDef, AppDryRunInfo, CfgVal, make_app_handle,
                            runopts)

if TYPE_CHECKING:
    from trun.runner.api import Runner

__all__ = ["Scheduler", "SchedulerFactory", "TrunScheduler", "TrunSchedulerFactory",
           "get_default_scheduler_name",
           "get_scheduler_factories"]


class SchedulerFactory(Protocol):
    def __call__(self, session_name: str, **kwargs: object) -> Scheduler[Any]: ...


_TYPES: dict[str, Any] = {"str": str, "int": int, "float": float, "bool": bool,
                          "list[str]": list[str], "dict[str, str]": dict[str, str]}


def parse_runopts(options: list[dict[str, Any]]) -> runopts:
    """One scheduler's options as ``trun runopts --json`` lists them, as :class:`runopts`."""
    opts = runopts()
    for o in options:
        tp = _TYPES.get(o["type"])
        if tp is None:
            raise ValueError(f"trun runopts gave option {o['name']!r} of unknown type "
                             f"{o['type']!r}; is TRUN_BINARY a trun of another version?")
        opts.add(o["name"], type_=tp, help=o["help"], default=o["default"],
                 required=o["required"])
    return opts


class TrunScheduler(Scheduler[Mapping[str, CfgVal]]):
    """One of the trun binary's schedulers as TorchX's Scheduler object. Apps are
    named by id within trun's session (handles ``BACKEND://trun/ID``) whatever
    ``session_name`` says, as with the Runner.

    ``local`` takes TorchX's LocalScheduler parameters: ``cache_size`` (a
    positive int, default 100) bounds the apps this object follows, as
    TorchX's app cache: submitting one more evicts the oldest that has ended
    (trun keeps its state: the command line still sees it), and when every
    one still runs raises IndexError; ``extra_paths`` go first on every
    replica's ``PATH``. The other schedulers take neither (TorchX's ignore
    what they do not know)."""

    def __init__(self, backend: str, session_name: str, *, trun: str | None = None,
                 cache_size: int | None = None, extra_paths: list[str] | None = None) -> None:
        if backend not in SCHEDULERS:
            raise ValueError(f"trun has no scheduler {backend!r} (it has "
                             f"{', '.join(SCHEDULERS)})")
        super().__init__(backend, session_name)
        if backend != "local" and (cache_size is not None or extra_paths):
            raise ValueError(f"cache_size and extra_paths are the local scheduler's; trun's "
                             f"{backend} takes neither")
        if backend == "local" and cache_size is None:
            cache_size = 100
        if cache_size is not None and (isinstance(cache_size, bool)
                                       or not isinstance(cache_size, int)):
            raise ValueError(f"cache_size must be an int, not {cache_size!r}")
        if cache_size is not None and cache_size <= 0:
            raise ValueError("cache size must be greater than zero")
        if extra_paths is not None and (isinstance(extra_paths, str) or not all(
                isinstance(p, str) for p in extra_paths)):
            raise ValueError(f"extra_paths must be a list of directories, not {extra_paths!r}")
        self._trun = trun
        self._opts: runopts | None = None
        self._cache_size = cache_size
        self._extra_paths = list(extra_paths or [])
        # The ids of the apps this object submitted and follows, oldest first.
        self._apps: list[str] = []

    def _runner(self, cwd: str | None = None) -> Runner:
        """A Runner of this scheduler alone (this object, its app cache
        included), running trun in ``cwd`` (the local scheduler's replicas
        start there; default: this process's directory)."""
        from trun.runner.api import Runner  # trun.runner imports this package
        runner = Runner(self.session_name, scheduler_factories={self.backend: None},
                        trun=self._trun)
        runner._cwd = cwd
        runner._binary_schedulers[self.backend] = self
        return runner

    def _placed_paths(self, app: AppDef) -> AppDef:
        """``app`` with ``extra_paths`` first on each role's ``PATH`` (a copy;
        ``app`` itself when there are none). A role whose ``PATH`` starts with
        them already is left as it is, so that the app of a dry run (which
        has them) is not given them twice when it is submitted."""
        if not self._extra_paths:
            return app
        placed = copy_app(app)
        prefix = join_path(*self._extra_paths)
        for role in placed.roles:
            path = role.env.get("PATH")
            if path != prefix and not (path or "").startswith(prefix + os.pathsep):
                role.env["PATH"] = join_path(prefix, path)
        return placed

    def _make_room(self) -> None:
        """TorchX's app cache: with ``cache_size`` apps followed, forgets the
        oldest that has ended (or that trun no longer knows); IndexError when
        all of them still run."""
        if self._cache_size is None or len(self._apps) < self._cache_size:
            return
        runner = self._runner()
        for app_id in self._apps:
            status = runner.status(self._handle(app_id))
            if status is None or status.is_terminal():
                self._apps.remove(app_id)
                return
        raise IndexError(f"App cache size ({self._cache_size}) exceeded. Increase the cache "
                         f"size")

    def _followed(self, app_id: str) -> None:
        self._apps.append(app_id)

    def _handle(self, app_id: str) -> str:
        return make_app_handle(self.backend, "trun", app_id)

    def _run_opts(self) -> runopts:
        if self._opts is None:
            r = _binary.run(["runopts", "--json", self.backend], trun=self._trun,
                            no_config=True)
            if r.returncode != 0:
                raise RuntimeError(f"`trun runopts --json {self.backend}` failed "
                                   f"(exit {r.returncode}): {r.stderr.strip()}")
            self._opts = parse_runopts(json.loads(r.stdout)[self.backend])
        return self._opts

    def _submit_dryrun(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> AppDryRunInfo[Any]:
        # Not Runner.dryrun, which runs the roles' pre_proc: submit_dryrun does.
        return self._runner()._binary_dryrun(app, self.backend, cfg)

    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        # A Runner names the request by its own name for this scheduler
        # (``local_dir``, say); the binary knows it by trun's.
        ours = copy.copy(dryrun_info)
        ours._scheduler = self.backend
        handle = self._runner().schedule(ours)
        return handle.rsplit("/", 1)[-1]

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        runner = self._runner()
        status = runner.status(self._handle(app_id))
        if status is None:
            return None
        app = runner.describe(self._handle(app_id))
        return DescribeAppResponse(app_id=app_id, state=status.state,
                                   num_restarts=status.num_restarts, msg=status.msg,
                                   structured_error_msg=status.structured_error_msg,
                                   ui_url=status.ui_url, roles_statuses=list(status.roles),
                                   roles=list(app.roles) if app else [])

    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> list[ListAppResponse]:
        return self._runner().list(self.backend, cfg)

    def _cancel_existing(self, app_id: str) -> None:
        self._runner().cancel(self._handle(app_id))

    def _delete_existing(self, app_id: str) -> None:
        self._runner().delete(self._handle(app_id))

    def log_iter(self, app_id: str, role_name: str, k: int = 0, regex: str | None = None,
                 since: datetime | None = None, until: datetime | None = None,
                 should_tail: bool = False, streams: Stream | None = None) -> Iterable[str]:
        return self._runner().log_lines(self._handle(app_id), role_name, k, regex, since,
                                        until, should_tail, streams)


class TrunSchedulerFactory:
    """The factory of one of the binary's schedulers; a Runner given one submits
    through the binary directly (handles ``BACKEND://trun/ID``)."""

    def __init__(self, backend: str) -> None:
        self.backend = backend

    def __call__(self, session_name: str, **kwargs: Any) -> Scheduler[Any]:
        """The scheduler, with TorchX's constructor parameters of ``local``
        (``cache_size``, ``extra_paths``) when it is that one, and ``trun``
        (the binary); other parameters are ignored, as TorchX's factories
        ignore what they do not take (a Runner hands every factory all of its
        ``scheduler_params``)."""
        params = {k: kwargs[k] for k in ("cache_size", "extra_paths")
                  if self.backend == "local" and k in kwargs}
        return TrunScheduler(self.backend, session_name, trun=kwargs.get("trun"), **params)


def get_scheduler_factories(*, skip_defaults: bool = False) -> dict[str, SchedulerFactory]:
    """The schedulers by name: the binary's (local first: the default), each a
    :class:`TrunSchedulerFactory` (none with ``skip_defaults``), then the
    scheduler plug-ins registered through :mod:`trun.plugins` (one named as
    a binary's takes its place, as TorchX's plug-ins replace its defaults)."""
    factories: dict[str, SchedulerFactory] = {} if skip_defaults else {
        name: TrunSchedulerFactory(name) for name in SCHEDULERS}
    factories.update(registry().get(PluginType.SCHEDULER))
    return factories


def join_path(*paths: str | None) -> str:
    """``PATH`` entries joined, empty ones and stray separators left out."""
    return os.pathsep.join(p.strip(os.pathsep) for p in paths if p and p.strip(os.pathsep))


def trun_scheduler_name(name: str) -> str:
    """trun's name of scheduler ``name``: TorchX's default, ``local_cwd``, is
    trun's ``local`` (the binary takes either; handles say ``local``)."""
    return "local" if name == "local_cwd" else name


def get_default_scheduler_name() -> str:
    return SCHEDULERS[0]
