"""TorchX's ``torchx.schedulers.api``: the types a Runner returns, the
``Scheduler`` base class and ``StructuredOpts``.

trun's schedulers are the binary's (``local``, ``slurm``, ``kubernetes``);
``trun.schedulers.get_scheduler_factories()`` gives a :class:`Scheduler` for
each that drives the binary. A Python subclass of :class:`Scheduler` (TorchX's
plug-in interface) is run by :class:`trun.runner.Runner` as TorchX runs it
when a scheduler factory gives one; see docs/python.md.
"""

from __future__ import annotations

import abc
import ast
import copy
import dataclasses
import inspect
import re
import textwrap
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Generic, Iterable, Iterator, TypeVar, cast

from trun.specs.api import (NONE, AppDef, AppDryRunInfo, AppState, CfgVal, Role, RoleStatus,
                            Workspace, cases, runopts)
from trun.workspace import WorkspaceMixin

_S = TypeVar("_S", bound="StructuredOpts")
# A scheduler's cfg type, as TorchX's ``Scheduler[T]`` names it (a plug-in
# writes ``class MyScheduler(Scheduler[MyOpts])``); what its methods get is
# the cfg resolved against ``run_opts``, a mapping of option to value.
T = TypeVar("T")


def _unwrap_optional(tp: Any) -> Any:
    """``X`` of ``Optional[X]`` / ``X | None``; anything else as it is."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(args) == 1 and type(None) in typing.get_args(tp):
        return args[0]
    return tp


def _is_structured(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, StructuredOpts)


def _key(f: dataclasses.Field[Any]) -> str:
    """The option's name: the field's, or its ``cfg_key`` metadata for one a
    field cannot be named (``mail-user``)."""
    return str(f.metadata.get("cfg_key", f.name))


class StructuredOpts(Mapping[str, CfgVal]):
    """Run options as a dataclass: subclass it with ``@dataclass``, one field per
    option (its type, its default; no default means required), a string literal
    under a field as its help, ``metadata={"cfg_key": "mail-user"}`` for an
    option no field can be named after. A field whose type is itself a
    StructuredOpts groups options under ``FIELD.`` (an optional group left None
    has none). The object reads as the flat mapping of option names to values,
    as ``cfg`` does; a field also answers to its camelCase name
    (``clusterName``), as in TorchX.

    Not thread-safe to mutate; reading from several threads is safe."""

    @classmethod
    def _fields(cls) -> list[tuple[dataclasses.Field[Any], Any]]:
        """Each field and its type (``Optional`` unwrapped). Annotations that
        cannot be resolved (a class local to a function, under ``from
        __future__ import annotations``) raise NameError, as in TorchX: a group
        not recognised would lose its options without a word. Reading one
        option (``opts["group.x"]``) needs no hints."""
        hints = typing.get_type_hints(cls)
        return [(f, _unwrap_optional(hints[f.name])) for f in dataclasses.fields(cls) if f.init]

    @classmethod
    def get_docstrings(cls) -> dict[str, str]:
        """Each field's help: the string literal written right under it; a
        group's fields' as ``FIELD.NAME``."""
        docs: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            if klass in (StructuredOpts, object) or not dataclasses.is_dataclass(klass):
                continue
            try:
                tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
            except (OSError, TypeError, SyntaxError):
                continue
            body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
            for node, after in zip(body, body[1:]):
                if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                        and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                        and isinstance(after.value.value, str)):
                    docs[node.target.id] = inspect.cleandoc(after.value.value)
        for f, tp in cls._fields():
            if _is_structured(tp):
                docs.update({f"{f.name}.{k}": v for k, v in tp.get_docstrings().items()})
        return docs

    @classmethod
    def as_runopts(cls) -> runopts:
        """The options as :class:`runopts`, groups flattened to ``FIELD.NAME``."""
        opts = runopts()
        docs = cls.get_docstrings()
        for f, tp in cls._fields():
            if _is_structured(tp):
                for sub, opt in tp.as_runopts():
                    opts.add(f"{f.name}.{sub}", type_=opt.opt_type, help=opt.help,
                             default=opt.default, required=opt.is_required)
                continue
            required = (f.default is dataclasses.MISSING
                        and f.default_factory is dataclasses.MISSING)
            default = (None if required else f.default if f.default is not dataclasses.MISSING
                       else f.default_factory())  # type: ignore[misc]
            opts.add(_key(f), type_=tp, help=docs.get(f.name, f.name), default=default,
                     required=required)
        return opts

    @classmethod
    def from_cfg(cls: type[_S], cfg: Mapping[str, CfgVal]) -> _S:
        """The options of a flat ``cfg``: an option by its name, else its field's
        name, else that in camelCase; ``FIELD.NAME`` keys fill groups (a group
        with none keeps its default, a required one is made from none). An
        option ``cfg`` lacks keeps its default, a key no field has is ignored."""
        kwargs: dict[str, Any] = {}
        for f, tp in cls._fields():
            if _is_structured(tp):
                prefix = f.name + "."
                group = {k[len(prefix):]: v for k, v in cfg.items() if k.startswith(prefix)}
                if group or (f.default is dataclasses.MISSING
                             and f.default_factory is dataclasses.MISSING):
                    kwargs[f.name] = tp.from_cfg(group)
                continue
            for key in (_key(f), f.name, cases.snake_to_camel(f.name)):
                if key in cfg:
                    kwargs[f.name] = cfg[key]
                    break
        return cls(**kwargs)

    def __getitem__(self, key: str) -> CfgVal:
        names = {f.name: f for f in dataclasses.fields(self) if f.init}
        if "." in key:
            head, rest = key.split(".", 1)
            head = cases.camel_to_snake(head)
            group = getattr(self, head) if head in names else None
            if isinstance(group, StructuredOpts):
                return group[rest]
            raise KeyError(key)
        # Only fields are options: not methods or other attributes.
        name = cases.camel_to_snake(key)
        if name not in names:
            name = next((f.name for f in names.values() if _key(f) == key), "")
        if not name:
            raise KeyError(key)
        value: CfgVal = getattr(self, name)
        return value

    def __iter__(self) -> Iterator[str]:
        for f, tp in self._fields():
            value = getattr(self, f.name)
            if isinstance(value, StructuredOpts):
                yield from (f"{f.name}.{k}" for k in value)
            elif not (_is_structured(tp) and value is None):
                yield _key(f)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        try:
            self[key]
        except KeyError:
            return False
        return True

    def __or__(self, other: Mapping[str, CfgVal]) -> dict[str, CfgVal]:
        """Both as one flat dict, ``other``'s values winning."""
        return {**dict(self), **dict(other)}


class Stream(str, Enum):
    """Which of a replica's streams ``log_lines`` reads."""

    STDOUT = "stdout"
    STDERR = "stderr"
    COMBINED = "combined"


@dataclass
class DescribeAppResponse:
    app_id: str = "<NOT_SET>"
    state: AppState = AppState.UNSUBMITTED
    num_restarts: int = -1
    msg: str = NONE
    structured_error_msg: str = NONE
    ui_url: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    roles_statuses: list[RoleStatus] = field(default_factory=list)
    roles: list[Role] = field(default_factory=list)


@dataclass
class ListAppResponse:
    """One app of ``Runner.list``."""

    app_id: str
    state: AppState
    app_handle: str = "<NOT_SET>"
    name: str = ""

    def __hash__(self) -> int:
        return hash((self.app_id, self.app_handle, self.state))


def filter_regex(regex: str, data: Iterable[str]) -> Iterable[str]:
    """The items of ``data`` that ``regex`` finds something in."""
    pattern = re.compile(regex)
    return (d for d in data if pattern.search(d))


def split_lines(text: str) -> list[str]:
    """``text`` cut after each ``\\n``, which each line keeps (the last may have none)."""
    return [line for line in re.split(r"(?<=\n)", text) if line]


def split_lines_iterator(chunks: Iterable[str]) -> Iterator[str]:
    """The lines of each chunk in turn (a line is not joined across chunks)."""
    for chunk in chunks:
        yield from split_lines(chunk)


def copy_app(app: AppDef) -> AppDef:
    """A deep copy of ``app`` whose roles share the original's ``overrides``
    dicts (TorchX's Runner does so: a producer in them may not deep-copy, and
    one resolved through either role serves both)."""
    overrides = [role.overrides for role in app.roles]
    for role in app.roles:
        role.overrides = {}
    try:
        copied = copy.deepcopy(app)
    finally:
        for role, o in zip(app.roles, overrides):
            role.overrides = o
    for role, o in zip(copied.roles, overrides):
        role.overrides = o
    return copied


class Scheduler(abc.ABC, Generic[T]):
    """TorchX's scheduler interface: ``backend`` is the scheduler's name,
    ``session_name`` the session its apps belong to. Subclasses implement
    ``schedule``, ``_submit_dryrun``, ``describe``, ``list`` and
    ``_cancel_existing``, and may implement ``_run_opts``, ``log_iter`` and
    ``_delete_existing`` (by default: none, not supported, cancel). Thread-safety
    is the subclass's."""

    def __init__(self, backend: str, session_name: str) -> None:
        self.backend = backend
        self.session_name = session_name

    def close(self) -> None:
        """Releases what the scheduler holds (nothing, here)."""

    def submit(self, app: AppDef, cfg: T, workspace: str | Workspace | None = None) -> str:
        """``schedule(submit_dryrun(app, cfg))``: the app's id. A ``workspace``
        (for role 0) needs a scheduler with :class:`trun.workspace.WorkspaceMixin`."""
        resolved = self.run_opts().resolve(cast(Mapping[str, CfgVal], cfg))
        if workspace:
            if not isinstance(self, WorkspaceMixin):
                raise ValueError(f"scheduler `{self.backend}` does not support workspaces "
                                 f"(trun's own build no images); pass workspace=None")
            app.roles[0].workspace = (Workspace.from_str(workspace)
                                      if isinstance(workspace, str) else workspace)
            self.build_workspaces(app.roles, resolved)
        return self.schedule(self.submit_dryrun(app, cast(T, resolved)))

    @abc.abstractmethod
    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        """Submits what ``submit_dryrun`` returned; the app's id."""

    def submit_dryrun(self, app: AppDef, cfg: T) -> AppDryRunInfo[Any]:
        """The request for ``app``, with ``cfg`` checked against ``run_opts`` and
        defaults filled in, passed through each role's ``pre_proc``; submits
        nothing. As TorchX's, it does not ``_validate`` the app: the Runner
        does, before it (the binary's schedulers check it themselves)."""
        resolved = self.run_opts().resolve(cast(Mapping[str, CfgVal], cfg))
        info = self._submit_dryrun(app, cast(T, resolved))
        for role in app.roles:
            info = role.pre_proc(self.backend, info)
        info._app = app
        info._cfg = resolved
        info._scheduler = self.backend
        return info

    @abc.abstractmethod
    def _submit_dryrun(self, app: AppDef, cfg: T) -> AppDryRunInfo[Any]:
        ...

    def run_opts(self) -> runopts:
        """The scheduler's run options, its workspace's too."""
        opts = self._run_opts()
        if isinstance(self, WorkspaceMixin):
            opts.update(self.workspace_opts())
        return opts

    def _run_opts(self) -> runopts:
        return runopts()

    @abc.abstractmethod
    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """The app's state; None when the scheduler knows no such app."""

    @abc.abstractmethod
    def list(self, cfg: Mapping[str, CfgVal] | None = None) -> list[ListAppResponse]:
        """The scheduler's apps."""

    def exists(self, app_id: str) -> bool:
        return self.describe(app_id) is not None

    @abc.abstractmethod
    def _cancel_existing(self, app_id: str) -> None:
        ...

    def cancel(self, app_id: str) -> None:
        """Stops the app; an app the scheduler does not know is left alone."""
        if self.exists(app_id):
            self._cancel_existing(app_id)

    def delete(self, app_id: str) -> None:
        """Stops the app and removes it from the scheduler."""
        if self.exists(app_id):
            self._delete_existing(app_id)

    def _delete_existing(self, app_id: str) -> None:
        """Where apps leave nothing to remove: as cancel (TorchX's default)."""
        self._cancel_existing(app_id)

    def log_iter(self, app_id: str, role_name: str, k: int = 0, regex: str | None = None,
                 since: datetime | None = None, until: datetime | None = None,
                 should_tail: bool = False, streams: Stream | None = None) -> Iterable[str]:
        """The lines of one replica's log (with their newlines)."""
        raise NotImplementedError(f"{type(self).__qualname__} does not support application "
                                  f"log iteration")

    def _pre_build_validate(self, app: AppDef, scheduler: str, cfg: T) -> None:
        """A check before a workspace is built (none here)."""

    def _validate(self, app: AppDef, scheduler: str, cfg: T) -> None:
        """Every role needs a resource: a role left at NULL_RESOURCE is refused."""
        for role in app.roles:
            if role.resource.cpu < 0 or role.resource.memMB < 0:
                raise ValueError(f"role {role.name!r} of app {app.name!r} has no resource: "
                                 f"set Role.resource (specs.Resource or a named resource)")
