"""TorchX's ``torchx.runner.api`` for trun: submit and follow apps from Python.

    from trun.runner import get_runner
    with get_runner() as runner:
        handle = runner.run_component("dist.ddp", ["-j", "2x2", "--script", "train.py"],
                                      scheduler="local")
        print(runner.wait(handle, wait_interval=1))

The Runner drives the trun binary's job subcommands (``trun run``,
``status --json``, ``describe --json``, ``log``, ``cancel``, ``list
--json``), so an app submitted here is the same app the command line sees,
with the same handles (``local://trun/ID``, ``slurm://trun/JOBID``,
``kubernetes://trun/NAMESPACE:NAME``), from any process. A failed command
raises :class:`TrunCommandError` (a :class:`ValueError` too when trun says
the input is bad, exit 2) carrying trun's message; an app the scheduler does
not know is told by the kind trun's error report names (``unknown_app``),
never by the message.

A scheduler factory that is not the binary's (a TorchX ``Scheduler``
plug-in, or :mod:`trun.schedulers.local_scheduler`'s) is run as TorchX's
Runner runs it: the Runner makes the scheduler object and calls its
``submit_dryrun``, ``schedule``, ``describe``, ``log_iter``, ... with handles
``NAME://SESSION/APP_ID``. See docs/python.md ("trun.runner").
"""

from __future__ import annotations

import builtins
import json
import os
import tempfile
import time
import warnings
from typing import Any, Callable, Iterator, Literal, Mapping, Sequence, overload

from trun import _binary, settings, specs
from trun._binary import trun_binary
from trun.components import options_argv, word
from trun.runner.config import get_config, get_configs
from trun.runner.events import log_event
from trun.schedulers import (SchedulerFactory, TrunScheduler, TrunSchedulerFactory,
                             get_scheduler_factories, trun_scheduler_name)
from trun.schedulers.api import DescribeAppResponse, ListAppResponse, Scheduler, copy_app
from trun.specs.api import SCHEDULERS, CfgVal
from trun.specs.builders import materialize_appdef
from trun.specs.finder import get_component
from trun.util.session import get_session_id_or_create_new
from trun.workspace import WorkspaceMixin

__all__ = ["DescribeAppResponse", "ListAppResponse", "Runner", "TrunCommandError",
           "TrunInvalidInputError", "get_configured_trackers", "get_runner"]


class TrunCommandError(RuntimeError):
    """A trun subcommand failed; ``returncode`` is its exit code (docs/cli.md)."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str,
                 kind: str | None = None) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        # The kind of problem trun's error report names (docs/cli.md), e.g.
        # "unknown_app"; None when it wrote none.
        self.kind = kind
        lines = [ln.removeprefix("trun: error: ") for ln in stderr.strip().splitlines()]
        super().__init__(f"`trun {' '.join(self.argv[1:3])}` failed (exit {returncode}): "
                         + ("\n".join(lines) or "no message"))


class TrunInvalidInputError(TrunCommandError, ValueError):
    """trun refused the input (exit 2): a component, its arguments, an AppDef, a run
    option, a handle; nothing was submitted."""


def _refused(outcome: _binary.Outcome) -> TrunCommandError:
    """The error of a trun command that failed."""
    cls = TrunInvalidInputError if outcome.returncode == 2 else TrunCommandError
    return cls(outcome.argv, outcome.returncode, outcome.stderr, outcome.error_kind)


def _is_unknown_app(e: TrunCommandError) -> bool:
    """Whether trun refused the command because the scheduler knows no such app."""
    return e.kind == "unknown_app"


def _cfg_word(value: Any) -> str:
    """A run option's value; a plain string with a separator in it is quoted."""
    if isinstance(value, (bool, list, tuple, dict)):
        return word(value, kv=":")
    text = str(value)
    return f"'{text}'" if any(c in text for c in ",;=") else text


def _cfg_flag(cfg: Mapping[str, Any] | None) -> list[str]:
    pairs = [f"{k}={_cfg_word(v)}" for k, v in (cfg or {}).items() if v is not None]
    return ["-cfg", ",".join(pairs)] if pairs else []


def _component_argv(component_args: Sequence[str] | Mapping[str, Any],
                    defaults: Mapping[str, Any] | None = None) -> list[str]:
    """A list is the command line; a dict is keyword arguments (``--key value``).
    ``defaults`` (get_runner's component_defaults for this component) come
    first, for the parameters the arguments leave out."""
    if isinstance(component_args, Mapping):
        given = {k for k, v in component_args.items() if v is not None}
        argv = options_argv(dict(component_args))
    else:
        argv = [str(a) for a in component_args]
        given = {a[2:].partition("=")[0] for a in argv if a.startswith("--")}
    extra = {k: v for k, v in (defaults or {}).items() if k not in given}
    return options_argv(extra) + argv


def _check_app(app: Any) -> None:
    """What TorchX's Runner and Scheduler refuse before a dry run, with their words
    (trun's own validation, in the binary, comes after)."""
    if not app.roles:
        raise ValueError(f"No roles for app: {app.name}. Did you forget to add roles to AppDef?")
    for role in app.roles:
        if role.resource == specs.NULL_RESOURCE:
            raise ValueError(f"No resource for role: {role.name} (image: {role.image}). "
                             f"Did you forget to attach resource to the role")


def _status_from_json(d: dict[str, Any]) -> specs.AppStatus:
    roles = [specs.RoleStatus(r["role"], [
        specs.ReplicaStatus(id=x["id"], state=specs.AppState(x["state"]), role=x["role"],
                            hostname=x.get("hostname", ""),
                            structured_error_msg=x.get("structured_error_msg", specs.NONE),
                            hostaddr=x.get("hostaddr") or None)
        for x in r["replicas"]]) for r in d.get("roles", [])]
    return specs.AppStatus(state=specs.AppState[d["state"]],
                           num_restarts=d.get("num_restarts", 0), msg=d.get("msg", ""),
                           structured_error_msg=d.get("structured_error_msg", specs.NONE),
                           ui_url=d.get("url"), roles=roles)


def _text_of(text: str) -> Callable[[Any], str]:
    """An AppDryRunInfo's formatter that shows trun's text of the request."""
    return lambda _: text


def tracker_config_env_var_name(name: str) -> str:
    """The variable that carries tracker ``name``'s config to the replicas."""
    return f"TORCHX_TRACKER_{name.upper()}_CONFIG"


def get_configured_trackers() -> dict[str, str | None]:
    """The trackers to tell replicas about, with their configs: the
    ``[torchx:tracker]`` names of ``.torchxconfig`` (``$TORCHX_TRACKERS``
    instead when set), each config from its ``[tracker:NAME] config`` (or
    ``$TORCHX_TRACKER_NAME_CONFIG``)."""
    names = list(get_configs(prefix="torchx", name="tracker"))
    if settings.ENV_TORCHX_TRACKERS in os.environ:
        names = os.environ[settings.ENV_TORCHX_TRACKERS].split(",")
    configured: dict[str, str | None] = {}
    for name in names:
        configured[name] = os.environ.get(tracker_config_env_var_name(name),
                                          get_config(prefix="tracker", name=name, key="config"))
    return configured


def _is_binary(factory: SchedulerFactory | None) -> bool:
    """Whether a factory stands for one of the trun binary's schedulers (None
    does, as the Runner has always taken it)."""
    return factory is None or isinstance(factory, TrunSchedulerFactory)


def _runcfg(cfg: Mapping[str, Any] | None) -> str | None:
    return json.dumps(dict(cfg)) if cfg else None


class Runner:
    """TorchX's Runner over the trun binary (``trun`` is its path; default: the one
    ``trun.trun_binary()`` finds).

    ``name`` is TorchX's session name. ``scheduler_factories`` (default:
    ``get_scheduler_factories()``, the binary's ``local``, ``slurm`` and
    ``kubernetes``) maps scheduler names to factories: a binary's factory (or
    None) is driven through the binary, whose handles always carry trun's
    session (``local://trun/ID``), so that any process finds the app; any
    other factory makes a TorchX ``Scheduler`` object the Runner calls as
    TorchX's does (handles ``NAME://SESSION/APP_ID``, known to this Runner's
    process and to what that scheduler knows). ``scheduler_params`` (TorchX's
    scheduler constructor arguments, with ``TORCHX_*`` variables) go to every
    factory on the scheduler's first use: the binary's ``local`` takes
    TorchX's LocalScheduler ``cache_size`` and ``extra_paths``
    (:class:`TrunScheduler`); the binary's options are run options (``cfg``,
    ``.trunconfig``). ``component_defaults`` maps a component to
    defaults for its parameters (``{"dist.ddp": {"j": "2x2"}}``), used where
    the arguments leave one out.

    Thread-safety: one thread at a time (the Scheduler objects it makes are
    cached unlocked)."""

    def __init__(self, name: str = "", scheduler_factories: Mapping[str, Any] | None = None,
                 component_defaults: Mapping[str, Mapping[str, Any]] | None = None,
                 scheduler_params: Mapping[str, Any] | None = None, *,
                 trun: str | None = None) -> None:
        self._name = name
        self._trun = trun or trun_binary()
        # The directory the binary runs in (trun.schedulers.local_scheduler
        # sets it: the local scheduler's replicas start there).
        self._cwd: str | None = None
        factories: dict[str, Any] = dict(get_scheduler_factories() if scheduler_factories is None
                                          else scheduler_factories)
        unknown = [n for n, f in factories.items()
                   if _is_binary(f) and trun_scheduler_name(n) not in SCHEDULERS]
        if unknown:
            raise ValueError(f"scheduler_factories: trun has no scheduler {unknown[0]!r} "
                             f"(it has {', '.join(SCHEDULERS)}); give a factory of a Python "
                             f"Scheduler for a scheduler of your own")
        self._scheduler_factories = factories
        self._scheduler_instances: dict[str, Scheduler[Any]] = {}
        # The binary's schedulers as objects, by trun's name: made on first
        # use from their factory with ``scheduler_params``, as TorchX makes
        # its schedulers, they hold the local scheduler's app cache.
        self._binary_schedulers: dict[str, TrunScheduler] = {}
        # What this Runner submitted to Python schedulers, by handle (TorchX's).
        self._apps: dict[str, specs.AppDef] = {}
        self._component_defaults = {k: dict(v) for k, v in (component_defaults or {}).items()}
        env_params = {k[len("TORCHX_"):].lower(): v for k, v in os.environ.items()
                      if k.upper().startswith("TORCHX_")}
        self.scheduler_params: dict[str, Any] = {**env_params, **(scheduler_params or {})}

    def _scheduler(self, scheduler: str) -> str:
        """``scheduler`` when it is one of the binary's this Runner has; raises
        UnknownSchedulerException for a name it does not have at all."""
        binary = [trun_scheduler_name(n) for n, f in self._scheduler_factories.items()
                  if _is_binary(f)]
        if trun_scheduler_name(scheduler) not in binary:
            raise specs.UnknownSchedulerException(scheduler)
        return scheduler

    def _binary_scheduler(self, scheduler: str) -> TrunScheduler:
        """The object of one of the binary's schedulers (made on first use from
        its factory with ``scheduler_params``, which it checks: TorchX's
        ``get_runner(cache_size=0)`` fails on the first call that uses
        ``local``)."""
        name = trun_scheduler_name(self._scheduler(scheduler))
        sched = self._binary_schedulers.get(name)
        if sched is None:
            factory = next((f for n, f in self._scheduler_factories.items()
                            if f is not None and _is_binary(f) and trun_scheduler_name(n) == name),
                           None)
            made = (TrunScheduler(name, self._name, trun=self._trun) if factory is None
                    else factory(self._name, trun=self._trun, **self.scheduler_params))
            assert isinstance(made, TrunScheduler)
            sched = self._binary_schedulers[name] = made
        return sched

    def _python_scheduler(self, scheduler: str) -> Scheduler[Any] | None:
        """The Scheduler object of a Python scheduler (made on first use, as
        TorchX); None when ``scheduler`` is not one."""
        factory = self._scheduler_factories.get(scheduler)
        if factory is None or _is_binary(factory):
            return None
        sched = self._scheduler_instances.get(scheduler)
        if sched is None:
            sched = factory(self._name, **self.scheduler_params)
            self._scheduler_instances[scheduler] = sched
        return sched

    # -- plumbing --

    def _call(self, *args: str) -> str:
        r = _binary.run(args, trun=self._trun, cwd=self._cwd)
        if r.returncode != 0:
            raise _refused(r)
        return r.stdout

    def _ask(self, command: str, app_handle: str) -> str | None:
        """``trun COMMAND --json HANDLE``; None when the scheduler knows no such app."""
        try:
            return self._call(command, "--json", self._handle(app_handle))
        except TrunInvalidInputError as e:
            if _is_unknown_app(e):
                return None
            raise

    def _handle(self, app_handle: str) -> str:
        # MalformedAppHandleException names the form.
        self._scheduler(specs.parse_app_handle(app_handle).scheduler_backend)
        return app_handle

    def _with_app_file(self, app: Any, *args: str) -> str:
        """``trun run ARGS APP.json``, with the AppDef in a file of its own."""
        with tempfile.TemporaryDirectory(prefix="trun-runner-") as d:
            path = os.path.join(d, "app.json")
            with open(path, "w") as f:
                f.write(specs.to_json(app))
            return self._call("run", *args, path)

    @staticmethod
    def _dryrun_info(out: str, cfg: Mapping[str, Any] | None) -> specs.AppDryRunInfo[Any]:
        d = json.loads(out)
        info: specs.AppDryRunInfo[Any] = specs.AppDryRunInfo(d["request"], _text_of(d["text"]))
        info._app = specs.from_dict(d["app"])
        info._cfg = dict(cfg or {})
        info._scheduler = d["scheduler"]
        return info

    # -- submitting --

    def dryrun(self, app: specs.AppDef, scheduler: str,
               cfg: Mapping[str, Any] | None = None, workspace: Any = None,
               parent_run_id: str | None = None) -> specs.AppDryRunInfo[Any]:
        """The scheduler's request for ``app``, submitting nothing."""
        sched = self._python_scheduler(scheduler)
        if sched is not None:
            return self._python_dryrun(sched, app, scheduler, cfg, workspace, parent_run_id)
        _no_workspace(workspace)
        # As a Python scheduler's submit_dryrun does (TorchX's Scheduler): each
        # role's pre_proc sees the request; schedule() makes it again from
        # the app and cfg all the same.
        info = self._binary_dryrun(app, scheduler, cfg, workspace)
        for role in app.roles:
            info = role.pre_proc(scheduler, info)
        return info

    def _binary_dryrun(self, app: specs.AppDef, scheduler: str, cfg: Mapping[str, Any] | None,
                       workspace: Any = None) -> specs.AppDryRunInfo[Any]:
        """The binary's request for ``app`` (``trun run --dryrun --json``)."""
        placed = self._binary_scheduler(scheduler)._placed_paths(app)
        _check_app(app)
        with log_event("dryrun", scheduler, runcfg=_runcfg(cfg), workspace=str(workspace)) as ctx:
            out = self._with_app_file(placed, "--dryrun", "--json", "-s", scheduler,
                                      *_cfg_flag(cfg))
            info = self._dryrun_info(out, cfg)
            ctx._torchx_event.app_id = app.name
            ctx._torchx_event.app_image = app.roles[0].image
            return info

    def _python_dryrun(self, sched: Scheduler[Any], app: specs.AppDef, scheduler: str,
                       cfg: Mapping[str, Any] | None, workspace: Any,
                       parent_run_id: str | None) -> specs.AppDryRunInfo[Any]:
        """TorchX's dryrun on a Python scheduler: a copy of ``app`` (sharing each
        role's ``overrides``) with TorchX's variables in every role's env, its
        workspaces built, validated, and the scheduler's request for it."""
        app = copy_app(app)
        if not app.roles:
            raise ValueError(f"No roles for app: {app.name}. Did you forget to add roles to "
                             f"AppDef?")
        parent_run_id = os.environ.get(settings.ENV_TORCHX_PARENT_RUN_ID, parent_run_id)
        trackers = get_configured_trackers()
        for role in app.roles:
            if not role.entrypoint:
                raise ValueError(f"No entrypoint for role: {role.name}. Did you forget to call "
                                 f"role.runs(entrypoint, args, env)?")
            if role.num_replicas <= 0:
                raise ValueError(f"Non-positive replicas for role: {role.name}. Did you forget "
                                 f"to set role.num_replicas?")
            role.env[settings.ENV_TORCHX_JOB_ID] = specs.make_app_handle(
                scheduler, self._name, specs.macros.app_id)
            role.env[settings.ENV_TORCHX_INTERNAL_SESSION_ID] = get_session_id_or_create_new()
            if parent_run_id:
                role.env[settings.ENV_TORCHX_PARENT_RUN_ID] = parent_run_id
            if trackers:
                role.env[settings.ENV_TORCHX_TRACKERS] = ",".join(trackers)
            for name, config in trackers.items():
                if config:
                    role.env[tracker_config_env_var_name(name)] = config
        cfg = cfg or {}
        with log_event("dryrun", scheduler, runcfg=_runcfg(cfg), workspace=str(workspace)) as ctx:
            resolved = sched.run_opts().resolve(cfg)
            sched._pre_build_validate(app, scheduler, resolved)
            if isinstance(sched, WorkspaceMixin):
                if workspace:
                    # TorchX: the argument wins over role 0's own workspace.
                    app.roles[0].workspace = (specs.Workspace.from_str(workspace)
                                              if isinstance(workspace, str) else workspace)
                sched.build_workspaces(app.roles, resolved)
            elif workspace:
                raise ValueError(f"scheduler `{scheduler}` does not support workspaces; "
                                 f"pass workspace=None")
            sched._validate(app, scheduler, resolved)
            info = sched.submit_dryrun(app, resolved)
            info._scheduler = scheduler
            ctx._torchx_event.app_id = app.name
            # The request's app, as TorchX: reading the role's own image would
            # resolve an override the scheduler may not have resolved.
            ctx._torchx_event.app_image = info.app.roles[0].image if info.app else None
            ctx._torchx_event.app_metadata = app.metadata
            return info

    def dryrun_component(self, component: str,
                         component_args: Sequence[str] | Mapping[str, Any],
                         scheduler: str, cfg: Mapping[str, Any] | None = None,
                         workspace: Any = None,
                         parent_run_id: str | None = None) -> specs.AppDryRunInfo[Any]:
        """The component's AppDef (a builtin, a YAML file, ``FILE.py:FN``,
        ``module:FN``, with its command-line arguments), then :meth:`dryrun`.
        The binary's schedulers have the binary make the AppDef; a Python
        scheduler has :mod:`trun.specs.finder` make it, as TorchX."""
        if self._python_scheduler(scheduler) is None:
            self._scheduler(scheduler)
            _no_workspace(workspace)
            out = self._call("run", "--dryrun", "--json", "-s", scheduler, *_cfg_flag(cfg),
                             component, *_component_argv(component_args,
                                                         self._component_defaults.get(component)))
            app = specs.from_dict(json.loads(out)["app"])
        else:
            fn = get_component(component).fn
            app = materialize_appdef(
                fn, [] if isinstance(component_args, Mapping) else list(component_args),
                self._component_defaults.get(component),
                dict(component_args) if isinstance(component_args, Mapping) else {})
        return self.dryrun(app, scheduler, cfg, workspace, parent_run_id)

    def schedule(self, dryrun_info: specs.AppDryRunInfo[Any]) -> str:
        """Submits ``dryrun_info``. trun's own schedulers make the request again from
        ``dryrun_info.app`` and its cfg, so edit the AppDef, not ``request``; a
        Python scheduler gets ``dryrun_info`` itself."""
        scheduler = dryrun_info._scheduler
        if dryrun_info.app is None or scheduler is None:
            raise ValueError("schedule: the AppDryRunInfo comes from Runner.dryrun or "
                             "Runner.dryrun_component")
        with log_event("schedule", scheduler, runcfg=_runcfg(dryrun_info.cfg)) as ctx:
            sched = self._python_scheduler(scheduler)
            if sched is None:
                ours = self._binary_scheduler(scheduler)
                ours._make_room()
                out = self._with_app_file(ours._placed_paths(dryrun_info.app), "-s", scheduler,
                                          *_cfg_flag(dryrun_info.cfg))
                handle = out.strip().splitlines()[-1]
                ours._followed(specs.parse_app_handle(handle).app_id)
            else:
                handle = specs.make_app_handle(scheduler, self._name, sched.schedule(dryrun_info))
                self._apps[handle] = dryrun_info.app
            ctx._torchx_event.app_id = specs.parse_app_handle(handle).app_id
            ctx._torchx_event.app_image = dryrun_info.app.roles[0].image
            ctx._torchx_event.app_metadata = dryrun_info.app.metadata
            return handle

    @overload
    def run(self, app: specs.AppDef, scheduler: str, cfg: Mapping[str, Any] | None = ...,
            workspace: Any = ..., parent_run_id: str | None = ..., *,
            dryrun: Literal[True]) -> specs.AppDryRunInfo[Any]: ...

    @overload
    def run(self, app: specs.AppDef, scheduler: str, cfg: Mapping[str, Any] | None = ...,
            workspace: Any = ..., parent_run_id: str | None = ..., *,
            dryrun: Literal[False] = ...) -> str: ...

    def run(self, app: specs.AppDef, scheduler: str, cfg: Mapping[str, Any] | None = None,
            workspace: Any = None, parent_run_id: str | None = None, *,
            dryrun: bool = False) -> str | specs.AppDryRunInfo[Any]:
        """Submits ``app``; returns its handle as soon as it has started (with
        ``dryrun=True``, the request instead, submitting nothing)."""
        with log_event("run", scheduler, runcfg=_runcfg(cfg), workspace=str(workspace)) as ctx:
            info = self.dryrun(app, scheduler, cfg, workspace, parent_run_id)
            if dryrun:
                return info
            handle = self.schedule(info)
            ctx._torchx_event.app_id = specs.parse_app_handle(handle).app_id
            ctx._torchx_event.app_image = app.roles[0].image
            ctx._torchx_event.app_metadata = app.metadata
            return handle

    def run_component(self, component: str,
                      component_args: Sequence[str] | Mapping[str, Any], scheduler: str,
                      cfg: Mapping[str, Any] | None = None, workspace: Any = None,
                      parent_run_id: str | None = None) -> str:
        """``dryrun_component`` then ``schedule``, as TorchX; returns the handle."""
        with log_event("run_component", scheduler, workspace=str(workspace)) as ctx:
            handle = self.schedule(self.dryrun_component(component, component_args, scheduler,
                                                         cfg, workspace, parent_run_id))
            ctx._torchx_event.app_id = specs.parse_app_handle(handle).app_id
            return handle

    # -- options --

    def scheduler_run_opts(self, scheduler: str) -> specs.runopts:
        """The scheduler's run options (``trun runopts NAME`` for the binary's)."""
        sched = self._python_scheduler(scheduler)
        if sched is None:
            sched = TrunScheduler(trun_scheduler_name(self._scheduler(scheduler)), self._name,
                                  trun=self._trun)
        return sched.run_opts()

    def cfg_from_str(self, scheduler: str, *cfg_literal: str) -> dict[str, Any]:
        """``K=V,K2=V2`` strings as the scheduler's typed run options (a later
        string's value wins)."""
        opts = self.scheduler_run_opts(scheduler)
        cfg: dict[str, Any] = {}
        for literal in cfg_literal:
            cfg.update(opts.cfg_from_str(literal))
        return cfg

    # -- following --

    def status(self, app_handle: str) -> specs.AppStatus | None:
        """The app's status; None when the scheduler knows no such app."""
        parsed = specs.parse_app_handle(app_handle)
        sched = self._python_scheduler(parsed.scheduler_backend)
        with log_event("status", parsed.scheduler_backend, parsed.app_id):
            if sched is None:
                out = self._ask("status", app_handle)
                return None if out is None else _status_from_json(json.loads(out))
            desc = sched.describe(parsed.app_id)
            if not desc:
                self._apps.pop(app_handle, None)
                return None
            return specs.AppStatus(state=desc.state, num_restarts=desc.num_restarts,
                                   msg=desc.msg, structured_error_msg=desc.structured_error_msg,
                                   ui_url=desc.ui_url, roles=list(desc.roles_statuses))

    def wait(self, app_handle: str, wait_interval: float = 10,
             timeout: float | None = None) -> specs.AppStatus | None:
        """Polls every ``wait_interval`` seconds until the app ends; its last status
        (None for an unknown app). ``timeout``: raise TimeoutError after that long."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            st = self.status(app_handle)
            if st is None or st.is_terminal():
                return st
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{app_handle} is still {st.state} after {timeout} s")
            time.sleep(wait_interval)

    def cancel(self, app_handle: str) -> None:
        """Stops the app; as TorchX, does nothing for an unknown app or one that has
        ended. The binary's schedulers return once it is CANCELLED."""
        parsed = specs.parse_app_handle(app_handle)
        sched = self._python_scheduler(parsed.scheduler_backend)
        with log_event("cancel", parsed.scheduler_backend, parsed.app_id):
            st = self.status(app_handle)
            if st is not None and not st.is_terminal():
                self._end("cancel", app_handle, sched)

    def _end(self, command: str, app_handle: str, sched: Scheduler[Any] | None) -> None:
        """``cancel`` or ``delete`` of a known app: the Python scheduler's, or
        ``trun COMMAND``, for which an app gone since (a cancelled JobSet is
        deleted) is done."""
        if sched is not None:
            app_id = specs.parse_app_handle(app_handle).app_id
            (sched.cancel if command == "cancel" else sched.delete)(app_id)
            return
        try:
            self._call(command, app_handle)
        except TrunInvalidInputError as e:
            if not _is_unknown_app(e):
                raise

    def stop(self, app_handle: str) -> None:
        """Deprecated by TorchX for :meth:`cancel` (with its warning)."""
        warnings.warn("This method will be deprecated in the future, please use `cancel` "
                      "instead.", PendingDeprecationWarning)
        self.cancel(app_handle)

    def delete(self, app_handle: str) -> None:
        """Cancels the app and removes it from its scheduler (``trun delete``); as
        TorchX, nothing for an unknown app. local: the app is forgotten; slurm
        and kubernetes: as cancel (docs/python.md)."""
        parsed = specs.parse_app_handle(app_handle)
        sched = self._python_scheduler(parsed.scheduler_backend)
        with log_event("delete", parsed.scheduler_backend, parsed.app_id):
            if self.status(app_handle) is not None:
                self._end("delete", app_handle, sched)

    def describe(self, app_handle: str) -> specs.AppDef | None:
        """The AppDef the app was submitted with; None for an unknown app. On a
        Python scheduler, as TorchX: what this Runner submitted (TorchX's
        variables in its env), else what the scheduler describes."""
        parsed = specs.parse_app_handle(app_handle)
        sched = self._python_scheduler(parsed.scheduler_backend)
        with log_event("describe", parsed.scheduler_backend, parsed.app_id):
            if sched is None:
                out = self._ask("describe", app_handle)
                return None if out is None else specs.from_dict(json.loads(out))
            app = self._apps.get(app_handle)
            if app is None:
                desc = sched.describe(parsed.app_id)
                if desc:
                    app = specs.AppDef(name=parsed.app_id, roles=desc.roles,
                                       metadata=desc.metadata)
            return app

    def log_lines(self, app_handle: str, role_name: str, k: int = 0,
                  regex: str | None = None, since: Any = None, until: Any = None,
                  should_tail: bool = False, streams: Any = None) -> Iterator[str]:
        """Replica ``k`` of ``role_name``'s log lines (with their newlines), as they
        come when ``should_tail``. As TorchX, the call itself raises
        UnknownAppException for an app nobody knows (and MalformedAppHandleException);
        the lines are read as they are iterated. ``since``/``until`` are not
        supported by the binary's schedulers (trun's logs carry no timestamps)
        and must be None there."""
        parsed = specs.parse_app_handle(app_handle)
        sched = self._python_scheduler(parsed.scheduler_backend)
        with log_event("log_lines", parsed.scheduler_backend, parsed.app_id):
            if sched is not None:
                if not self.status(app_handle):
                    raise specs.UnknownAppException(app_handle)
                return iter(sched.log_iter(parsed.app_id, role_name, k, regex, since, until,
                                           should_tail, streams=streams))
            if since is not None or until is not None:
                raise ValueError("log_lines: since/until are not supported by trun's "
                                 "schedulers")
            detail = self._unknown_detail(app_handle)
            if detail is not None:
                raise specs.UnknownAppException(app_handle, detail)
            return self._log_iter(app_handle, role_name, k, regex, should_tail, streams)

    def _unknown_detail(self, app_handle: str) -> str | None:
        """trun's message when the scheduler knows no such app, else None."""
        try:
            self._call("status", "--json", self._handle(app_handle))
        except TrunInvalidInputError as e:
            if _is_unknown_app(e):
                return str(e)
            raise
        return None

    def _log_iter(self, app_handle: str, role_name: str, k: int, regex: str | None,
                  should_tail: bool, streams: Any) -> Iterator[str]:
        args = ["log"]
        if should_tail:
            args.append("--tail")
        if regex:
            args += ["--regex", regex]
        if streams is not None:
            args += ["--streams", getattr(streams, "value", str(streams)).lower()]
        args.append(f"{app_handle}/{role_name}/{k}")
        prefix = f"{role_name}/{k} "
        lines = _binary.stream(args, trun=self._trun)
        try:
            while True:
                try:
                    line = next(lines)
                except StopIteration as end:
                    outcome: _binary.Outcome = end.value
                    break
                yield line[len(prefix):] if line.startswith(prefix) else line
        finally:
            lines.close()  # a caller that stops early stops trun
        if outcome.returncode != 0:
            if outcome.unknown_app:
                raise specs.UnknownAppException(app_handle, str(_refused(outcome)))
            raise _refused(outcome)

    def list(self, scheduler: str,
             cfg: Mapping[str, CfgVal] | None = None) -> builtins.list[ListAppResponse]:
        """The apps the scheduler knows, oldest first on the binary's schedulers."""
        sched = self._python_scheduler(scheduler)
        with log_event("list", scheduler):
            if sched is not None:
                apps = sched.list(cfg)
                for a in apps:
                    a.app_handle = specs.make_app_handle(scheduler, self._name, a.app_id)
                return apps
            out = self._call("list", "--json", "-s", self._scheduler(scheduler),
                             *_cfg_flag(cfg))
            return [ListAppResponse(app_id=a["app_id"], state=specs.AppState[a["state"]],
                                    app_handle=a["app_handle"], name=a["name"])
                    for a in json.loads(out)]

    # (`list` is a method here, as TorchX names it: the builtin by its full name.)
    def scheduler_backends(self) -> builtins.list[str]:
        """The names of this Runner's schedulers (by default the binary's, as
        ``-s`` takes them)."""
        return builtins.list(self._scheduler_factories)

    def name(self) -> str:
        return self._name

    def close(self) -> None:
        """Closes the Python schedulers this Runner made (TorchX's local scheduler
        stops the apps it started); safe to call again. The binary's need
        nothing: every call is a trun process of its own."""
        for sched in self._scheduler_instances.values():
            sched.close()

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _no_workspace(workspace: Any) -> None:
    if workspace:
        raise ValueError("workspace: trun has no workspaces (replicas run in the submitter's "
                         "directory or the slurm job_dir); pass None")


def get_runner(name: str | None = None,
               component_defaults: dict[str, dict[str, Any]] | None = None,
               **scheduler_params: Any) -> Runner:
    """A Runner of every trun scheduler, as TorchX's: the session is ``torchx``
    unless ``name`` (deprecated by TorchX, with its FutureWarning) says otherwise;
    see :class:`Runner` for ``component_defaults`` and ``scheduler_params``."""
    if name:
        warnings.warn(f"Custom session names are deprecated (detected explicitly set session "
                      f"name={name}). To prevent this warning from showing again call "
                      f"`get_runner()` without the `name` param. As an alternative, you can "
                      f"prefix the app name with the session name.", FutureWarning)
    return Runner(name or "torchx", component_defaults=component_defaults,
                  scheduler_params=scheduler_params)
