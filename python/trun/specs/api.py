"""TorchX's ``torchx.specs`` for trun: AppDef, Role, Resource and friends.

The names, fields, defaults and sentinels are TorchX's (torchx/specs/api.py),
so a component written for TorchX builds the same objects here. An AppDef
travels to the C++ side as JSON (:func:`to_dict`), the one schema trun's
``specs/serialize.h`` reads and ``trun describe --json`` prints; see
docs/python.md ("trun.specs").

Named resources are the C++ side's table (``trun builtins --resources``),
read once from the trun binary, so ``$TRUN_NAMED_RESOURCES`` works the same
in Python and on the command line.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import difflib
import importlib
import inspect
import json
import logging
import os
import pathlib
import re
import shutil
import string
import threading
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import Enum
from types import MappingProxyType
from typing import (Any, Callable, Dict, Generic, Iterator, List, NamedTuple, Optional, Tuple,
                    Type, TypeVar, Union, cast)

logger = logging.getLogger(__name__)

# The "*" scheduler backend, as TorchX (nothing in trun's JSON carries it).
ALL = "all"
# Sentinels for string fields: never set; unset optional; not recoverable.
MISSING = "<MISSING>"
NONE = "<NONE>"
UNKNOWN = "<UNKNOWN>"

# TorchX's unit for memMB: resource(memMB=8 * GiB).
GiB = 1024

# The schedulers the trun binary has (src/schedulers/scheduler.cc).
SCHEDULERS = ("local", "slurm", "kubernetes")

AppHandle = str
CfgVal = Union[str, int, float, bool, List[str], Dict[str, str], None]

# The tags a named resource carries (TorchX's plugins' resource_tags): the
# name it was registered under, and whether it is a slice of a larger one.
RESOURCE_NAME_TAG = "torchx/named_resources.name"
IS_FRACTIONAL_TAG = "torchx/named_resources.is_fractional"


def TORCHX_HOME(*subdir_paths: str) -> pathlib.Path:
    """TorchX's dot-directory (``$TORCHX_HOME``, else ``~/.torchx``) joined with
    ``subdir_paths``, created if missing."""
    home = pathlib.Path(os.environ.get("TORCHX_HOME", str(pathlib.Path.home() / ".torchx")))
    path = home.joinpath(*subdir_paths)
    path.mkdir(parents=True, exist_ok=True)
    return path


# ---- resources ----------------------------------------------------------------------

@dataclass
class Resource:
    """What one replica needs; ``capabilities`` and ``devices`` are scheduler-specific."""

    cpu: int
    gpu: int
    memMB: int
    capabilities: Dict[str, Any] = field(default_factory=dict)
    devices: Dict[str, int] = field(default_factory=dict)
    tags: Dict[str, object] = field(default_factory=dict)

    def is_fractional(self) -> bool:
        """Whether this is a registered slice of a larger resource (its tag says so)."""
        return bool(self.tags.get(IS_FRACTIONAL_TAG, False))

    def get_resource_name(self) -> Optional[str]:
        """The named resource this came from (its tag), None when not named."""
        name = self.tags.get(RESOURCE_NAME_TAG)
        return None if name is None else str(name)

    @staticmethod
    def copy(original: "Resource", **capabilities: Any) -> "Resource":
        """A copy of ``original`` with ``capabilities`` merged into its own."""
        caps = dict(original.capabilities)
        caps.update(capabilities)
        return Resource(cpu=original.cpu, gpu=original.gpu, memMB=original.memMB,
                        capabilities=caps, devices=dict(original.devices),
                        tags=dict(original.tags))


# "Resources do not matter": what a Role has unless given one.
NULL_RESOURCE = Resource(cpu=-1, gpu=-1, memMB=-1)


class _NamedResourcesLibrary(Mapping[str, "Resource"]):
    """TorchX's named resources, as trun has them: the binary's table (the
    generic and AWS ones, and those of the file ``$TRUN_NAMED_RESOURCES``
    names), then the ``NAMED_RESOURCES`` of the module
    ``$TORCHX_CUSTOM_NAMED_RESOURCES`` names, then the named-resource
    plug-ins of users' packages (:mod:`trun.plugins`), a later one winning.

    Found on first lookup, not on import, and once: concurrent first lookups
    wait for one discovery (a lock); a lookup from inside discovery (a
    plug-in module looking a resource up while it is imported) raises
    RuntimeError, which discovery records as that plug-in's load error, as
    TorchX does. Each lookup makes a fresh Resource."""

    def __init__(self) -> None:
        self._factories: Optional[Dict[str, Callable[[], Resource]]] = None
        self._lock = threading.RLock()
        self._loading = False

    def reset(self) -> None:
        """Forgets what was found, so that the next lookup discovers again."""
        with self._lock:
            self._factories = None

    def _load(self) -> Dict[str, Callable[[], Resource]]:
        factories = self._factories
        if factories is not None:
            return factories
        with self._lock:
            if self._factories is not None:
                return self._factories
            if self._loading:
                raise RuntimeError(
                    "re-entrant named-resource lookup: discovery is already in progress on "
                    "this thread. A plugin module is likely looking up a named resource at "
                    "import time; the registered set is incomplete mid-scan, so defer the "
                    "lookup into the factory body.")
            self._loading = True
            try:
                factories = {**_binary_resources(), **_custom_resources(),
                             **_plugin_resources()}
                factories["NULL"] = lambda: NULL_RESOURCE
                factories["MISSING"] = lambda: NULL_RESOURCE
                self._factories = factories
            finally:
                self._loading = False
            return factories

    def __getitem__(self, name: str) -> Resource:
        factories = self._load()
        if name not in factories:
            close = difflib.get_close_matches(name, factories.keys(), n=1)
            hint = (f"Did you mean `{close[0]}`?" if close
                    else f"Registered named resources: {list(factories)}")
            raise KeyError(f"No named resource found for `{name}`. {hint} (`trun builtins "
                           f"--resources` lists trun's own, the file $TRUN_NAMED_RESOURCES "
                           f"names adds more, and so do torchx plug-ins)")
        return factories[name]()

    def __contains__(self, name: object) -> bool:
        return name in self._load()

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())


def _binary_resources() -> Dict[str, Callable[[], Resource]]:
    """The trun binary's named resources, each a factory of a fresh copy."""
    from trun import _binary
    r = _binary.run(["builtins", "--resources", "--json"])
    if r.returncode != 0:
        raise ValueError(f"named resources: {r.stderr.strip()}")
    table = {name: _resource_from_dict(d) for name, d in json.loads(r.stdout).items()}
    return {name: _copier(res) for name, res in table.items()}


def _copier(res: Resource) -> Callable[[], Resource]:
    return lambda: copy.deepcopy(res)


def _custom_resources() -> Mapping[str, Callable[[], Resource]]:
    """The ``NAMED_RESOURCES`` of the module ``$TORCHX_CUSTOM_NAMED_RESOURCES``
    names (TorchX's older way to add some); a module that does not import
    raises, as the user named it."""
    name = os.environ.get("TORCHX_CUSTOM_NAMED_RESOURCES")
    if not name:
        return {}
    table: Mapping[str, Callable[[], Resource]] = getattr(importlib.import_module(name),
                                                         "NAMED_RESOURCES", {})
    return table


def _plugin_resources() -> Dict[str, Callable[[], Resource]]:
    """The named-resource plug-ins of users' packages. (``plugins.registry``
    is looked up on each call, so that tests may patch it.)"""
    from trun import plugins
    return dict(plugins.registry().get(plugins.PluginType.NAMED_RESOURCE))


named_resources: Mapping[str, Resource] = _NamedResourcesLibrary()


class _NamedResourceFactories(Mapping[str, Callable[[], Resource]]):
    """TorchX's ``NAMED_RESOURCES`` of a named-resource module: name to a
    function returning a fresh Resource, for the names of trun's table that
    ``belongs`` accepts (read from the binary on first use)."""

    def __init__(self, belongs: Callable[[str], bool]) -> None:
        self._belongs = belongs

    def __getitem__(self, name: str) -> Callable[[], Resource]:
        if not self._belongs(name) or name not in named_resources:
            raise KeyError(name)
        return lambda: named_resources[name]

    def __iter__(self) -> Iterator[str]:
        return (n for n in named_resources if self._belongs(n))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def get_named_resources(res: str) -> Resource:
    """The named resource ``res`` (``gpu.small``, ``aws_p4d.24xlarge``, ...);
    deprecated by TorchX for ``resource(h=res)``, with its FutureWarning."""
    warnings.warn("`get_named_resources()` is deprecated, use `resource(h=name)` instead",
                  FutureWarning, stacklevel=2)
    return named_resources[res]


def resource(cpu: Optional[int] = None, gpu: Optional[int] = None,
             memMB: Optional[int] = None, h: Optional[str] = None) -> Resource:
    """TorchX's ``specs.resource``: the named resource ``h`` when given, else the
    numbers, where an unset (or zero) cpu is 2, gpu 0 and memMB 1024."""
    if h:
        return named_resources[h]
    return Resource(cpu=cpu or 2, gpu=gpu or 0, memMB=memMB or 1024)


# ---- roles and apps -----------------------------------------------------------------

class RetryPolicy(str, Enum):
    """What a replica's failure restarts: itself, its role, or the whole app."""

    REPLICA = "REPLICA"
    APPLICATION = "APPLICATION"
    ROLE = "ROLE"

    def __str__(self) -> str:
        return self.value


class MountType(str, Enum):
    BIND = "bind"
    VOLUME = "volume"
    DEVICE = "device"


@dataclass
class BindMount:
    src_path: str
    dst_path: str
    read_only: bool = False


@dataclass
class VolumeMount:
    src: str
    dst_path: str
    read_only: bool = False


@dataclass
class DeviceMount:
    src_path: str
    dst_path: str
    permissions: str = "rwm"


@dataclass(eq=False)
class Workspace:
    """Local project folders (keys) and where they go in the image (values);
    false when it has none."""

    projects: Dict[str, str]

    def __bool__(self) -> bool:
        return bool(self.projects)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Workspace) and self.projects == other.projects

    def __hash__(self) -> int:
        return hash(frozenset(self.projects.items()))

    def is_unmapped_single_project(self) -> bool:
        return len(self.projects) == 1 and not next(iter(self.projects.values()))

    def merge_into(self, outdir: Union[str, pathlib.Path]) -> None:
        """Copies each project (a file or a folder) to ``outdir/<its target>``."""
        for src, dst in self.projects.items():
            target = pathlib.Path(outdir) / dst
            if pathlib.Path(src).is_file():
                shutil.copy2(src, target)
            else:
                shutil.copytree(src, target, dirs_exist_ok=True)

    @staticmethod
    def from_str(workspace: Optional[str]) -> "Workspace":
        """TorchX's: ``""``/None is an empty Workspace; a path is one project
        (``{path: ""}``); a YAML mapping ``path: dir`` (one per line) is
        several, a null dir being ``""``."""
        if not workspace:
            return Workspace({})
        projects = _yaml_load(workspace)
        if isinstance(projects, str):
            return Workspace({projects: ""})
        if not isinstance(projects, dict):
            raise ValueError(f"workspace {workspace!r}: expected a path or a mapping "
                             f"PATH: DIR")
        return Workspace({str(k): "" if v is None else str(v) for k, v in projects.items()})

    def __str__(self) -> str:
        if self.is_unmapped_single_project():
            return next(iter(self.projects))
        return ";".join(k if not v else f"{k}:{v}" for k, v in self.projects.items())


def _yaml_load(text: str) -> Any:
    """``yaml.safe_load`` where PyYAML is installed (TorchX's parser); else the
    two forms Workspace.from_str takes: a plain word, or ``KEY: VALUE`` lines."""
    try:
        import yaml
    except ImportError:
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        if len(lines) == 1 and not re.search(r":(\s|$)", lines[0]):
            return lines[0].strip()
        out: Dict[str, Optional[str]] = {}
        for ln in lines:
            key, sep, value = ln.partition(": ") if ": " in ln else ln.rstrip().partition(":")
            if not sep:
                raise ValueError(f"workspace: {ln!r} is not PATH: DIR")
            out[key.strip()] = value.strip() or None
        return out
    return yaml.safe_load(text)


# ---- lazy role overrides (TorchX's deprecated Role.overrides) -------------------------
#
# ``Role.overrides`` maps a field name to a producer: a callable, a coroutine
# or a future. Reading the field runs the producer once and writes its value
# back into the same dict (wrapped, so a callable value is never called
# again), which roles sharing the dict then see. Resolution is single-flight
# per dict: its re-entrant lock lives in the dict itself, under a key that
# is not an identifier, so copies of a role share it as they share the dict.

_NO_OVERRIDE = object()
_OVERRIDES_LOCK_KEY = "<overrides resolution lock>"
_lock_minting = threading.Lock()


class _OverridesLock:
    """The dict entry holding a dict's resolution lock; deep copies share it."""

    __slots__ = ("lock",)

    def __init__(self) -> None:
        # Re-entrant: a producer may read another overridden field of the role.
        self.lock = threading.RLock()

    def __deepcopy__(self, memo: Dict[int, object]) -> "_OverridesLock":
        return self


class _ResolvedOverride:
    """A produced value, written back in place of its producer; calling it
    gives the value (code that calls the raw dict entry keeps working)."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __call__(self) -> object:
        return self.value


def _resolution_lock(overrides: Dict[str, Any]) -> "threading.RLock":
    holder = overrides.get(_OVERRIDES_LOCK_KEY)
    if holder is None:
        with _lock_minting:
            holder = overrides.setdefault(_OVERRIDES_LOCK_KEY, _OverridesLock())
    lock: threading.RLock = holder.lock
    return lock


def _await_override(name: str, awaitable: Any) -> object:
    """Waits for an awaitable producer from whatever thread and loop reads it."""
    async def wait(aw: Any) -> object:
        return await aw

    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    bound = awaitable.get_loop() if hasattr(awaitable, "get_loop") else None
    if bound is not None and bound is running:
        raise RuntimeError(f"override `{name}` is bound to the event loop currently running "
                           f"in this thread; `await` it instead of reading the attribute")
    if bound is not None and bound.is_running():
        return asyncio.run_coroutine_threadsafe(wait(awaitable), bound).result()
    if running is None:
        if bound is not None:
            return bound.run_until_complete(awaitable)
        return _run_on_fresh_loop(awaitable)
    # Inside a running loop nothing may block it: wait on another thread.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        if bound is not None:
            return pool.submit(bound.run_until_complete, awaitable).result()
        return pool.submit(_run_on_fresh_loop, awaitable).result()


def _run_on_fresh_loop(awaitable: Any) -> object:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(awaitable)
    finally:
        loop.close()


@dataclass
class Role:
    """A set of alike replicas; TorchX's fields in TorchX's order."""

    name: str
    image: str
    min_replicas: Optional[int] = None
    entrypoint: str = MISSING
    args: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)
    num_replicas: int = 1
    max_retries: int = 0
    retry_policy: RetryPolicy = RetryPolicy.APPLICATION
    resource: Resource = field(default_factory=lambda: copy.deepcopy(NULL_RESOURCE))
    port_map: Dict[str, int] = field(default_factory=dict)
    metadata: Dict[str, Any] = field(default_factory=dict)
    mounts: List[Union[BindMount, VolumeMount, DeviceMount]] = field(default_factory=list)
    workspace: Optional[Workspace] = None
    # TorchX's deprecated lazy overrides, resolved when the field is read
    # (above), as TorchX does.
    overrides: Dict[str, Any] = field(default_factory=dict)

    def __getattribute__(self, attrname: str) -> Any:
        if attrname == "overrides" or attrname.startswith("__"):
            return object.__getattribute__(self, attrname)
        overrides = object.__getattribute__(self, "__dict__").get("overrides") or {}
        value = overrides.get(attrname, _NO_OVERRIDE)
        if value is _NO_OVERRIDE:
            return object.__getattribute__(self, attrname)
        if isinstance(value, _ResolvedOverride):  # no lock once resolved
            return value.value
        with _resolution_lock(overrides):
            value = overrides[attrname]
            if isinstance(value, _ResolvedOverride):
                return value.value
            # A producer that raises stays in the dict, to be tried again.
            result = _await_override(attrname, value) if inspect.isawaitable(value) \
                else value()
            overrides[attrname] = _ResolvedOverride(result)
            return result

    def pre_proc(self, scheduler: str,
                 dryrun_info: "AppDryRunInfo[Any]") -> "AppDryRunInfo[Any]":
        return dryrun_info


@dataclass
class AppDef:
    name: str
    roles: List[Role] = field(default_factory=list)
    metadata: Dict[str, str] = field(default_factory=dict)


class AppState(int, Enum):
    UNSUBMITTED = 0
    SUBMITTED = 1
    PENDING = 2
    RUNNING = 3
    SUCCEEDED = 4
    FAILED = 5
    CANCELLED = 6
    UNKNOWN = 7

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{self.name} ({self.value})"


ReplicaState = AppState
_TERMINAL_STATES = [AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED]
_STARTED_STATES = _TERMINAL_STATES + [AppState.RUNNING]


def is_terminal(state: AppState) -> bool:
    return state in _TERMINAL_STATES


def is_started(state: AppState) -> bool:
    return state in _STARTED_STATES


@dataclass
class ReplicaStatus:
    id: int
    state: AppState
    role: str
    hostname: str
    structured_error_msg: str = NONE
    hostaddr: Optional[str] = None

    def __post_init__(self) -> None:
        if self.hostaddr is None:
            self.hostaddr = self.hostname


@dataclass
class RoleStatus:
    role: str
    replicas: List[ReplicaStatus]

    def to_json(self) -> Dict[str, Any]:
        return {"role": self.role, "replicas": [asdict(r) for r in self.replicas]}


@dataclass
class AppStatus:
    state: AppState
    num_restarts: int = 0
    msg: str = ""
    structured_error_msg: str = NONE
    ui_url: Optional[str] = None
    roles: List[RoleStatus] = field(default_factory=list)

    def is_terminal(self) -> bool:
        return is_terminal(self.state)

    def __repr__(self) -> str:
        """TorchX's: YAML of the fields, the structured error parsed when it is JSON."""
        fields = asdict(self)
        error = fields.pop("structured_error_msg")
        if error != NONE:
            try:
                error = json.loads(error)
            except json.JSONDecodeError:
                pass  # written by the job: shown as it is
        fields["structured_error_msg"] = error
        fields["state"] = repr(fields["state"])
        import yaml
        return str(yaml.dump({"AppStatus": fields}))

    def raise_for_status(self) -> None:
        """Raises :class:`AppStatusError` unless the app SUCCEEDED."""
        if self.state != AppState.SUCCEEDED:
            raise AppStatusError(self, f"job did not succeed: {self}")

    def to_json(self, filter_roles: Optional[List[str]] = None) -> Dict[str, Any]:
        """What ``trun status --json`` prints (a replica's state is the enum's number)."""
        roles = [r for r in self.roles if not filter_roles or r.role in filter_roles]
        return {"state": str(self.state), "num_restarts": self.num_restarts,
                "roles": [r.to_json() for r in roles],
                "msg": self.msg, "structured_error_msg": self.structured_error_msg,
                "url": self.ui_url}

    def format(self, filter_roles: Optional[List[str]] = None) -> str:
        """TorchX's layout: each replica on a line (``*`` marks replica 0), a failed
        one with its exit code, time, host and message from its structured error."""
        roles = [r for r in self.roles if not filter_roles or r.role in filter_roles]
        replicas = "".join(_format_replica(x) for r in roles
                           for x in sorted(r.replicas, key=lambda x: x.id))
        return (f"AppStatus:\n    State: {self.state}\n    Num Restarts: {self.num_restarts}\n"
                f"    Roles: {replicas}\n    Msg: {self.msg}\n"
                f"    Structured Error Msg: {self.structured_error_msg}\n"
                f"    UI URL: {self.ui_url}\n    ")

    def _format_error_message(self, msg: str, header: str, width: int = 80) -> str:
        return _wrap_error(msg, header, width)


# An error raised through torch.distributed.rpc: RuntimeError('On WorkerInfo(...):\n...\n')
_RPC_ERROR = re.compile(r"(?P<exception_type>\w*)\('On WorkerInfo\(.+\):\n(.*\n)*'\)")
# An error whose message nests another's ("c10::Error: ...\nException raised from ...").
_NESTED_ERROR = re.compile(r"(?P<msg>.+)\nException.*")


def _wrap_error(msg: str, header: str, width: int = 80) -> str:
    """``msg`` cut at the first space past ``width`` characters per line, the first
    line led by ``header`` and the others by as many spaces."""
    if len(header) >= width:
        raise ValueError(f"header {header!r} (len {len(header)}) must be shorter than "
                         f"width {width}")
    rpc = _RPC_ERROR.search(msg)
    if rpc:
        msg = msg[rpc.start():rpc.end()]
    nested = _NESTED_ERROR.search(msg)
    if nested:
        msg = nested["msg"]
    lines, start = [], 0
    for i in range(len(msg) + 1):
        if i == len(msg) or (msg[i] == " " and i - start >= width):
            lines.append(header + msg[start:i])
            header, start = " " * len(header), i
    return "\n".join(lines)


def _format_replica(replica: ReplicaStatus) -> str:
    """One replica of AppStatus.format: its state, and for a structured error
    (torch's error file, nested, or a scheduler's flat one) the details."""
    data = str(replica.state)
    if replica.structured_error_msg != NONE:
        try:
            error = json.loads(replica.structured_error_msg)
        except json.JSONDecodeError:
            return replica.structured_error_msg
        inner = error.get("message") if isinstance(error, dict) else None
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            extra = inner.get("extraInfo")
            msg, code = inner["message"], inner.get("errorCode")
            timestamp = extra.get("timestamp") if isinstance(extra, dict) else None
        elif isinstance(inner, str):
            msg, code, timestamp = inner, error.get("errorCode"), error.get("timestamp")
        else:
            return replica.structured_error_msg
        when = "<N/A>"
        if timestamp is not None:
            try:
                when = str(datetime.fromtimestamp(int(timestamp)))
            except (TypeError, ValueError, OverflowError, OSError):
                pass
        data += (f" (exitcode: {code or '<N/A>'})\n        timestamp: {when}\n"
                 f"        hostname: {replica.hostname}\n"
                 f"    {_wrap_error(msg, '    error_msg: ')}")
    elif replica.state in (AppState.CANCELLED, AppState.FAILED):
        data += " (no reply file)"
    mark = "*" if replica.id == 0 else " "
    return f"\n {mark}{replica.role}[{replica.id}]:{data}"


class AppStatusError(Exception):
    """Raised by :meth:`AppStatus.raise_for_status`; ``status`` is the AppStatus."""

    def __init__(self, status: AppStatus, *args: object) -> None:
        super().__init__(*args)
        self.status = status


T = TypeVar("T")


class AppDryRunInfo(Generic[T]):
    """A scheduler's request for an app, as ``trun run --dryrun`` shows it;
    ``Runner.schedule`` submits it."""

    def __init__(self, request: T, fmt: Callable[[T], str]) -> None:
        self.request = request
        self._fmt = fmt
        self._app: Optional[AppDef] = None
        self._cfg: Mapping[str, CfgVal] = {}
        self._scheduler: Optional[str] = None

    @property
    def app(self) -> Optional[AppDef]:
        return self._app

    @property
    def cfg(self) -> Mapping[str, CfgVal]:
        """The run options, read-only (writing raises TypeError)."""
        return MappingProxyType(self._cfg)

    def __repr__(self) -> str:
        return self._fmt(self.request)


# ---- run options (TorchX's runopts; trun's own live in the binary: `trun runopts`) --

def get_type_name(tp: Any) -> str:
    """``str`` for a plain type, ``typing.List[str]`` (its repr) for a generic one."""
    if tp.__module__ != "typing" and hasattr(tp, "__name__"):
        return str(tp.__name__)
    return str(tp)


class cases:
    """snake_case and camelCase, for run option names."""

    @staticmethod
    def snake_to_camel(name: str) -> str:
        first, *rest = name.split("_")
        return first + "".join(part.title() for part in rest)

    @staticmethod
    def camel_to_snake(name: str) -> str:
        return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


_TRUE_WORDS = ("true", "1", "yes", "on")
_FALSE_WORDS = ("false", "0", "no", "off")


def _is_list_of_str(tp: Any) -> bool:
    return tp in (List[str], list[str])


def _is_dict_of_str(tp: Any) -> bool:
    return tp in (Dict[str, str], dict[str, str])


@dataclass
class runopt:
    """One run option: its default, type, whether it is required, and its help."""

    default: CfgVal
    opt_type: Type[CfgVal]
    is_required: bool
    help: str

    @property
    def is_type_list_of_str(self) -> bool:
        return _is_list_of_str(self.opt_type)

    @property
    def is_type_dict_of_str(self) -> bool:
        return _is_dict_of_str(self.opt_type)

    def cast_to_type(self, value: str) -> CfgVal:
        """``value`` as written on a command line, as this option's type: bools
        true/1/yes/on or false/0/no/off (any case), lists ``a,b`` or ``a;b``,
        dicts ``k:v,k2:v2``."""
        if self.opt_type is None:
            raise ValueError("runopt's opt_type cannot be `None`")
        if self.opt_type == bool:
            if value.lower() in _TRUE_WORDS:
                return True
            if value.lower() in _FALSE_WORDS:
                return False
            raise ValueError(f"`{value}` is not a valid bool literal, expected one of "
                             f"(case-insensitive): true/1/yes/on or false/0/no/off")
        items = value.replace(";", ",").split(",")
        if self.is_type_list_of_str:
            return [v for v in items if v]
        if self.is_type_dict_of_str:
            # An item without ":" is a ValueError from dict(), as TorchX's.
            return dict(cast(Tuple[str, str], tuple(item.split(":", 1))) for item in items)
        if self.opt_type not in (str, int, float):
            raise ValueError(f"run option type {get_type_name(self.opt_type)} is not one of "
                             f"str, int, float, bool, List[str], Dict[str, str]")
        return cast(Callable[[str], Union[str, int, float]], self.opt_type)(value)


def _split_cfg(text: str) -> Dict[str, str]:
    """``K=V,K2=V2`` (or ``;``) into raw values; a value may hold the separators
    (``K=a,b,K2=c``: the last one before ``K2=`` ends it) or be quoted."""
    out: Dict[str, str] = {}
    if not text.strip():
        return out
    # Words between "=" signs, quotes kept whole.
    parts = re.split(r"""=(?=(?:[^"']|"[^"]*"|'[^']*')*$)""", text)
    if len(parts) < 2:
        raise ValueError(f"run options {text!r}: expected KEY=VALUE[,KEY2=VALUE2...]")
    key = parts[0].strip()
    for i, middle in enumerate(parts[1:], start=1):
        if i == len(parts) - 1:
            value, next_key = middle, ""
        else:
            cut = max(middle.rfind(","), middle.rfind(";"))
            if cut <= 0 or cut == len(middle) - 1:
                raise ValueError(f"run options {text!r}: no `,` or `;` between "
                                 f"{middle!r} and the next KEY=")
            value, next_key = middle[:cut], middle[cut + 1:]
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key] = value
        key = next_key.strip()
    return out


class runopts:
    """A scheduler's run options: names, types, defaults and help."""

    def __init__(self) -> None:
        self._opts: Dict[str, runopt] = {}

    def __iter__(self) -> Iterator[Tuple[str, runopt]]:
        return iter(self._opts.items())

    def __len__(self) -> int:
        return len(self._opts)

    @staticmethod
    def is_type(obj: CfgVal, tp: Type[CfgVal]) -> bool:
        """isinstance, also for ``List[str]`` and ``Dict[str, str]``."""
        try:
            return isinstance(obj, tp)
        except TypeError:
            if isinstance(obj, list):
                return all(isinstance(e, str) for e in obj)
            if isinstance(obj, dict):
                return all(isinstance(k, str) and isinstance(v, str) for k, v in obj.items())
            return False

    def get(self, name: str) -> Optional[runopt]:
        """The option ``name`` (camelCase finds its snake_case), None if absent."""
        opt = self._opts.get(name)
        if opt is None and cases.camel_to_snake(name) != name:
            opt = self._opts.get(cases.camel_to_snake(name))
        return opt

    def resolve(self, cfg: Mapping[str, CfgVal]) -> Dict[str, CfgVal]:
        """``cfg`` checked (required given, types right) with defaults filled in;
        a camelCase key counts for its snake_case option. Raises
        :class:`InvalidRunConfigException` naming the option."""
        resolved: Dict[str, CfgVal] = dict(cfg)
        for key, opt in self._opts.items():
            camel = cases.snake_to_camel(key)
            if key not in resolved and camel != key and camel in resolved:
                resolved[key] = resolved.pop(camel)
            value = resolved.get(key)
            if opt.is_required and value is None:
                raise InvalidRunConfigException(
                    f"Required run option: {key}, must be provided and not `None`", key, cfg)
            if value is not None and not runopts.is_type(value, opt.opt_type):
                raise InvalidRunConfigException(
                    f"Run option: {key}, must be of type: {get_type_name(opt.opt_type)}, "
                    f"but was: {value} ({type(value).__name__})", key, cfg)
            if value is None and key not in resolved:
                resolved[key] = opt.default
        return resolved

    def cfg_from_str(self, cfg_str: str) -> Dict[str, CfgVal]:
        """``K=V,K2=V2`` with each value cast to its option's type; unknown keys
        are dropped with a warning. Defaults and required options are
        :meth:`resolve`'s business."""
        cfg: Dict[str, CfgVal] = {}
        for key, value in _split_cfg(cfg_str).items():
            opt = self.get(key)
            if opt is None:
                logger.warning("unknown run option passed to scheduler: %s=%s", key, value)
            else:
                cfg[key] = opt.cast_to_type(value)
        return cfg

    def cfg_from_json_repr(self, json_repr: str) -> Dict[str, CfgVal]:
        """A JSON object's known options, list and dict elements as strings."""
        cfg: Dict[str, CfgVal] = {}
        for key, value in json.loads(json_repr).items():
            opt = self.get(key)
            if opt is None:
                continue
            if value is not None and opt.is_type_list_of_str:
                value = [str(v) for v in value]
            elif value is not None and opt.is_type_dict_of_str:
                value = {str(k): str(v) for k, v in value.items()}
            cfg[key] = value
        return cfg

    def add(self, cfg_key: str, type_: Type[CfgVal], help: str, default: CfgVal = None,
            required: bool = False) -> None:
        if required and default is not None:
            raise ValueError(f"Required option: {cfg_key} must not specify default value. "
                             f"Given: {default}")
        if default is not None and not runopts.is_type(default, type_):
            raise TypeError(f"Option: {cfg_key}, must be of type: {type_}. "
                            f"Given: {default} ({type(default).__name__})")
        self._opts[cfg_key] = runopt(default, type_, required, help)

    def update(self, other: "runopts") -> None:
        self._opts.update(other._opts)

    def __or__(self, other: "runopts") -> "runopts":
        merged = runopts()
        merged.update(self)
        merged.update(other)
        return merged

    def __repr__(self) -> str:
        required = [(k, o) for k, o in self._opts.items() if o.is_required]
        optional = [(k, o) for k, o in self._opts.items() if not o.is_required]
        usage = ",".join(f"{k}={k.upper()}" if o.is_required else f"[{k}={k.upper()}]"
                         for k, o in required + optional)
        out = "    usage:\n        " + usage
        for title, opts in (("required", required), ("optional", optional)):
            if opts:
                out += f"\n\n    {title} arguments:"
            for k, o in opts:
                default = "" if o.is_required else f", {o.default}"
                out += (f"\n        {k}={k.upper()} ({get_type_name(o.opt_type)}{default})"
                        f"\n            {o.help}")
        return out


# ---- handles and errors -------------------------------------------------------------

class MalformedAppHandleException(Exception):
    def __init__(self, app_handle: str) -> None:
        super().__init__(f"{app_handle!r} is not of the form SCHEDULER://SESSION/APP_ID "
                         f"(e.g. local://trun/echo-bx2kq7mvf1sd)")


class UnknownAppException(Exception):
    def __init__(self, app_handle: str, detail: str = "") -> None:
        super().__init__(f"unknown app {app_handle!r}" + (f": {detail}" if detail else ""))


class UnknownSchedulerException(Exception):
    def __init__(self, scheduler_backend: str) -> None:
        super().__init__(f"Scheduler backend: {scheduler_backend} does not exist. trun has "
                         f"{', '.join(SCHEDULERS)} (Runner.scheduler_backends())")


class InvalidRunConfigException(Exception):
    """A run option is missing or of the wrong type; ``cfg_key`` names it."""

    def __init__(self, invalid_reason: str, cfg_key: str, cfg: Mapping[str, Any]) -> None:
        super().__init__(f"{invalid_reason}. Given: {str(cfg) if cfg else '<EMPTY>'}")
        self.cfg_key = cfg_key


class ParsedAppHandle(NamedTuple):
    scheduler_backend: str
    session_name: str
    app_id: str


_HANDLE = re.compile(r"(?P<scheduler_backend>.+)://(?P<session_name>.*)/(?P<app_id>.+)")


def parse_app_handle(app_handle: AppHandle) -> ParsedAppHandle:
    """``SCHEDULER://SESSION/APP_ID`` (the session may be empty) into its parts."""
    m = _HANDLE.fullmatch(app_handle)
    if not m:
        raise MalformedAppHandleException(app_handle)
    return ParsedAppHandle(m["scheduler_backend"], m["session_name"], m["app_id"])


def make_app_handle(scheduler_backend: str, session_name: str, app_id: str) -> AppHandle:
    return f"{scheduler_backend}://{session_name}/{app_id}"


# ---- macros -------------------------------------------------------------------------

class macros:
    """Placeholders a scheduler fills in per replica (``${app_id}``, ...)."""

    img_root = "${img_root}"
    app_id = "${app_id}"
    replica_id = "${replica_id}"
    rank0_env = "${rank0_env}"

    @dataclass
    class Values:
        img_root: str
        app_id: str
        replica_id: str
        rank0_env: str

        def apply(self, role: Role) -> Role:
            """A copy of ``role`` with its args, env values and metadata substituted.
            A role with lazy overrides shares its overrides dict with the copy,
            so a value resolved through either is resolved for both."""
            overrides = role.overrides
            shared = any(k != _OVERRIDES_LOCK_KEY for k in overrides)
            role.overrides = {}
            try:
                copied = copy.deepcopy(role)
            finally:
                role.overrides = overrides
            copied.overrides = overrides if shared else copy.deepcopy(overrides)
            role = copied
            role.args = [self.substitute(a) for a in role.args]
            role.env = {k: self.substitute(v) for k, v in role.env.items()}
            role.metadata = self._apply_nested(role.metadata)
            return role

        def _apply_nested(self, d: Any) -> Any:
            if isinstance(d, str):
                return self.substitute(d)
            if isinstance(d, dict):
                return {k: self._apply_nested(v) for k, v in d.items()}
            if isinstance(d, list):
                return [self._apply_nested(v) for v in d]
            return d

        def substitute(self, arg: str) -> str:
            return string.Template(arg).safe_substitute(**vars(self))


# ---- mounts -------------------------------------------------------------------------

_MOUNT_KEYS = {"type": "type", "src": "src", "source": "src", "dst": "dst",
               "destination": "dst", "target": "dst", "readonly": "readonly",
               "read_only": "readonly", "perm": "perm"}


def parse_mounts(opts: List[str]) -> List[Union[BindMount, VolumeMount, DeviceMount]]:
    """``["type=bind", "src=/a", "dst=/b", "readonly", "type=device", ...]`` into mounts;
    ``type`` comes first in each."""
    groups: List[Dict[str, str]] = []
    for opt in opts:
        key, _, val = opt.partition("=")
        if key not in _MOUNT_KEYS:
            raise KeyError(f"unknown mount option {key}, must be one of {list(_MOUNT_KEYS)}")
        key = _MOUNT_KEYS[key]
        if key == "type":
            groups.append({})
        elif not groups:
            raise KeyError("type must be specified first")
        groups[-1][key] = val
    mounts: List[Union[BindMount, VolumeMount, DeviceMount]] = []
    for g in groups:
        typ = g.get("type")
        if typ == MountType.BIND:
            mounts.append(BindMount(src_path=os.path.expanduser(g["src"]), dst_path=g["dst"],
                                    read_only="readonly" in g))
        elif typ == MountType.VOLUME:
            mounts.append(VolumeMount(src=g["src"], dst_path=g["dst"], read_only="readonly" in g))
        elif typ == MountType.DEVICE:
            perm = g.get("perm", "rwm")
            bad = [c for c in perm if c not in "rwm"]
            if bad:
                raise ValueError(f"{bad[0]} is not a valid permission flags must one of r,w,m")
            mounts.append(DeviceMount(src_path=g["src"], dst_path=g.get("dst", g["src"]),
                                      permissions=perm))
        else:
            raise ValueError(f"invalid mount type {typ!r}, must be one of "
                             f"{[t.value for t in MountType]}")
    return mounts


# ---- JSON: the schema of the C++ side (src/specs/serialize.h) -----------------------

def _resolved(role: Any, name: str) -> Any:
    """A role's field, resolving TorchX's deprecated lazy override for it."""
    value = getattr(role, name)
    override = (getattr(role, "overrides", None) or {}).get(name)
    if override is not None:
        value = override() if callable(override) else override
    return value


def _str_enum(v: Any) -> str:
    return str(v.value) if isinstance(v, Enum) else str(v)


def _resource_to_dict(r: Any) -> Dict[str, Any]:
    return {"cpu": r.cpu, "gpu": r.gpu, "memMB": r.memMB,
            "capabilities": dict(r.capabilities), "devices": dict(r.devices),
            "tags": dict(getattr(r, "tags", {}) or {})}


def _mount_to_dict(m: Any) -> Dict[str, Any]:
    if hasattr(m, "permissions"):
        return {"type": "device", "src_path": m.src_path, "dst_path": m.dst_path,
                "permissions": m.permissions}
    if hasattr(m, "src_path"):
        return {"type": "bind", "src_path": m.src_path, "dst_path": m.dst_path,
                "read_only": bool(m.read_only)}
    return {"type": "volume", "src": m.src, "dst_path": m.dst_path, "read_only": bool(m.read_only)}


def _role_to_dict(role: Any) -> Dict[str, Any]:
    ws = _resolved(role, "workspace") if hasattr(role, "workspace") else None
    return {
        "name": _resolved(role, "name"),
        "image": _resolved(role, "image"),
        "min_replicas": _resolved(role, "min_replicas"),
        "entrypoint": _resolved(role, "entrypoint"),
        "args": [str(a) for a in _resolved(role, "args")],
        "env": {str(k): str(v) for k, v in _resolved(role, "env").items()},
        "num_replicas": _resolved(role, "num_replicas"),
        "max_retries": _resolved(role, "max_retries"),
        "retry_policy": _str_enum(_resolved(role, "retry_policy")),
        "resource": _resource_to_dict(_resolved(role, "resource")),
        "port_map": dict(_resolved(role, "port_map")),
        "metadata": dict(_resolved(role, "metadata")),
        "mounts": [_mount_to_dict(m) for m in _resolved(role, "mounts")],
        "workspace": {"projects": dict(ws.projects)} if ws is not None else None,
    }


def to_dict(app: Any) -> Dict[str, Any]:
    """The AppDef as the JSON value trun's C++ side reads. Also takes a real
    ``torchx.specs.AppDef`` (fields are read by name)."""
    return {"name": app.name, "roles": [_role_to_dict(r) for r in app.roles],
            "metadata": {str(k): str(v) for k, v in app.metadata.items()}}


def to_json(app: Any) -> str:
    return json.dumps(to_dict(app))


def _resource_from_dict(d: Any) -> Resource:
    if isinstance(d, str):
        return named_resources[d]
    return Resource(cpu=d.get("cpu", -1), gpu=d.get("gpu", -1), memMB=d.get("memMB", -1),
                    capabilities=dict(d.get("capabilities") or {}),
                    devices=dict(d.get("devices") or {}), tags=dict(d.get("tags") or {}))


def _mount_from_dict(d: Any) -> Union[BindMount, VolumeMount, DeviceMount]:
    if isinstance(d, str):
        return parse_mounts(d.split(","))[0]
    typ = d.get("type", "bind")
    if typ == "volume":
        return VolumeMount(src=d["src"], dst_path=d["dst_path"],
                           read_only=d.get("read_only", False))
    if typ == "device":
        return DeviceMount(src_path=d["src_path"], dst_path=d.get("dst_path") or d["src_path"],
                           permissions=d.get("permissions", "rwm"))
    return BindMount(src_path=d["src_path"], dst_path=d["dst_path"],
                     read_only=d.get("read_only", False))


def _role_from_dict(d: Dict[str, Any]) -> Role:
    ws = d.get("workspace")
    if isinstance(ws, str):  # as the C++ reader: a path, not YAML
        ws = Workspace({ws: ""} if ws else {})
    elif ws is not None:
        ws = Workspace({k: v or "" for k, v in ws.get("projects", {}).items()})
    return Role(
        name=d["name"], image=d.get("image", ""), min_replicas=d.get("min_replicas"),
        entrypoint=d.get("entrypoint", MISSING), args=list(d.get("args") or []),
        env=dict(d.get("env") or {}), num_replicas=d.get("num_replicas", 1),
        max_retries=d.get("max_retries", 0),
        retry_policy=RetryPolicy(str(d.get("retry_policy", "APPLICATION")).upper()),
        resource=_resource_from_dict(d["resource"]) if d.get("resource") is not None
        else copy.deepcopy(NULL_RESOURCE),
        port_map=dict(d.get("port_map") or {}), metadata=dict(d.get("metadata") or {}),
        mounts=[_mount_from_dict(m) for m in d.get("mounts") or []], workspace=ws)


def from_dict(d: Dict[str, Any]) -> AppDef:
    """An AppDef from the JSON value (``trun describe --json``, ``to_dict``)."""
    return AppDef(name=d["name"], roles=[_role_from_dict(r) for r in d.get("roles") or []],
                  metadata=dict(d.get("metadata") or {}))


__all__ = [
    "ALL", "GiB", "MISSING", "NONE", "NULL_RESOURCE", "UNKNOWN", "AppDef", "AppDryRunInfo",
    "AppHandle", "AppState", "AppStatus", "AppStatusError", "BindMount", "CfgVal", "DeviceMount",
    "InvalidRunConfigException",
    "MalformedAppHandleException", "MountType", "ParsedAppHandle", "ReplicaState",
    "ReplicaStatus", "Resource", "RetryPolicy", "Role", "RoleStatus", "UnknownAppException",
    "UnknownSchedulerException", "VolumeMount", "Workspace", "from_dict", "get_named_resources",
    "TORCHX_HOME", "cases", "get_type_name", "runopt", "runopts",
    "is_started", "is_terminal", "macros", "make_app_handle", "named_resources", "parse_app_handle",
    "parse_mounts", "resource", "to_dict", "to_json",
]
