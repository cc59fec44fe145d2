"""TorchX's ``torchx.runner`` for trun: submit and follow apps from Python.

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
never by the message. See docs/python.md ("trun.runner").
"""

from __future__ import annotations

import builtins
import json
import os
import tempfile
import time
import warnings
from typing import Any, Callable, Iterator, Mapping, Sequence

from trun import _binary, specs
from trun._binary import trun_binary
from trun.components import options_argv, word
from trun.specs.api import SCHEDULERS
from trun.schedulers import trun_scheduler_name
from trun.schedulers.api import DescribeAppResponse, ListAppResponse  # noqa: F401 (TorchX's)


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


class Runner:
    """TorchX's Runner over the trun binary (``trun`` is its path; default: the one
    ``trun.trun_binary()`` finds).

    ``name`` is TorchX's session name; trun's handles always carry trun's
    (``local://trun/ID``), so that any process finds the app. trun's
    schedulers are the binary's: ``scheduler_factories`` may only name some
    of them (the others are then unknown here), and ``scheduler_params``
    (TorchX's scheduler constructor arguments, with ``TORCHX_*`` variables)
    are kept in ``scheduler_params`` but configure nothing: trun's
    schedulers take run options (``cfg``, ``.trunconfig``) instead.
    ``component_defaults`` maps a component to defaults for its parameters
    (``{"dist.ddp": {"j": "2x2"}}``), used where the arguments leave one out."""

    def __init__(self, name: str = "", scheduler_factories: Mapping[str, Any] | None = None,
                 component_defaults: Mapping[str, Mapping[str, Any]] | None = None,
                 scheduler_params: Mapping[str, Any] | None = None, *,
                 trun: str | None = None) -> None:
        self._name = name
        self._trun = trun or trun_binary()
        if scheduler_factories is None:
            self._schedulers = list(SCHEDULERS)
        else:
            unknown = [n for n in scheduler_factories if trun_scheduler_name(n) not in SCHEDULERS]
            if unknown:
                raise ValueError(f"scheduler_factories: trun has no scheduler {unknown[0]!r} "
                                 f"(it has {', '.join(SCHEDULERS)}; plug-ins in Python "
                                 f"are not supported)")
            self._schedulers = list(scheduler_factories)
        self._component_defaults = {k: dict(v) for k, v in (component_defaults or {}).items()}
        env_params = {k[len("TORCHX_"):].lower(): v for k, v in os.environ.items()
                      if k.upper().startswith("TORCHX_")}
        self.scheduler_params: dict[str, Any] = {**env_params, **(scheduler_params or {})}

    def _scheduler(self, scheduler: str) -> str:
        if trun_scheduler_name(scheduler) not in map(trun_scheduler_name, self._schedulers):
            raise specs.UnknownSchedulerException(scheduler)
        return scheduler

    # -- plumbing --

    def _call(self, *args: str) -> str:
        r = _binary.run(args, trun=self._trun)
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
        _no_workspace(workspace)
        self._scheduler(scheduler)
        _check_app(app)
        out = self._with_app_file(app, "--dryrun", "--json", "-s", scheduler, *_cfg_flag(cfg))
        return self._dryrun_info(out, cfg)

    def dryrun_component(self, component: str,
                         component_args: Sequence[str] | Mapping[str, Any],
                         scheduler: str, cfg: Mapping[str, Any] | None = None,
                         workspace: Any = None,
                         parent_run_id: str | None = None) -> specs.AppDryRunInfo[Any]:
        """The request for a component (a builtin, a YAML file, ``FILE.py:FN``,
        ``module:FN``) with its command-line arguments."""
        _no_workspace(workspace)
        self._scheduler(scheduler)
        out = self._call("run", "--dryrun", "--json", "-s", scheduler, *_cfg_flag(cfg),
                         component, *_component_argv(component_args,
                                                     self._component_defaults.get(component)))
        info = self._dryrun_info(out, cfg)
        _check_app(info.app)
        return info

    def schedule(self, dryrun_info: specs.AppDryRunInfo[Any]) -> str:
        """Submits ``dryrun_info.app`` with its cfg; trun makes the request again
        from them, so edit the AppDef, not ``request``."""
        if dryrun_info.app is None or dryrun_info._scheduler is None:
            raise ValueError("schedule: the AppDryRunInfo comes from Runner.dryrun or "
                             "Runner.dryrun_component")
        out = self._with_app_file(dryrun_info.app, "-s", dryrun_info._scheduler,
                                  *_cfg_flag(dryrun_info.cfg))
        return out.strip().splitlines()[-1]

    def run(self, app: specs.AppDef, scheduler: str, cfg: Mapping[str, Any] | None = None,
            workspace: Any = None, parent_run_id: str | None = None) -> str:
        """Submits ``app``; returns its handle as soon as it has started."""
        return self.schedule(self.dryrun(app, scheduler, cfg, workspace))

    def run_component(self, component: str,
                      component_args: Sequence[str] | Mapping[str, Any], scheduler: str,
                      cfg: Mapping[str, Any] | None = None, workspace: Any = None,
                      parent_run_id: str | None = None) -> str:
        """``dryrun_component`` then ``schedule``, as TorchX; returns the handle."""
        return self.schedule(self.dryrun_component(component, component_args, scheduler, cfg,
                                                   workspace, parent_run_id))

    # -- following --

    def status(self, app_handle: str) -> specs.AppStatus | None:
        """The app's status; None when the scheduler knows no such app."""
        out = self._ask("status", app_handle)
        return None if out is None else _status_from_json(json.loads(out))

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
        """Stops the app and returns once it is CANCELLED; as TorchX, does nothing
        for an unknown app or one that has ended."""
        st = self.status(app_handle)
        if st is None or st.is_terminal():
            return
        try:
            self._call("cancel", app_handle)
        except TrunInvalidInputError as e:
            if not _is_unknown_app(e):  # gone since (a cancelled JobSet is deleted)
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
        if self.status(app_handle) is None:
            return
        try:
            self._call("delete", app_handle)
        except TrunInvalidInputError as e:
            if not _is_unknown_app(e):  # gone since
                raise

    def describe(self, app_handle: str) -> specs.AppDef | None:
        """The AppDef the app was submitted with; None for an unknown app."""
        out = self._ask("describe", app_handle)
        return None if out is None else specs.from_dict(json.loads(out))

    def log_lines(self, app_handle: str, role_name: str, k: int = 0,
                  regex: str | None = None, since: Any = None, until: Any = None,
                  should_tail: bool = False, streams: Any = None) -> Iterator[str]:
        """Replica ``k`` of ``role_name``'s log lines (with their newlines), as they
        come when ``should_tail``. As TorchX, the call itself raises
        UnknownAppException for an app nobody knows (and MalformedAppHandleException);
        the lines are read as they are iterated. ``since``/``until`` are not
        supported (trun's logs carry no timestamps) and must be None."""
        if since is not None or until is not None:
            raise ValueError("log_lines: since/until are not supported by trun's schedulers")
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
             cfg: Mapping[str, Any] | None = None) -> list[ListAppResponse]:
        """The apps the scheduler knows, oldest first."""
        out = self._call("list", "--json", "-s", self._scheduler(scheduler), *_cfg_flag(cfg))
        return [ListAppResponse(app_id=a["app_id"], state=specs.AppState[a["state"]],
                                app_handle=a["app_handle"], name=a["name"])
                for a in json.loads(out)]

    # (`list` is a method here, as TorchX names it: the builtin by its full name.)
    def scheduler_backends(self) -> builtins.list[str]:
        """The schedulers of the trun binary (or those ``scheduler_factories`` named),
        as ``-s`` takes them."""
        return list(self._schedulers)

    def close(self) -> None:
        """Nothing to release: every call is a trun process of its own."""

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
