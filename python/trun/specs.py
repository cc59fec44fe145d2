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

import copy
import json
import os
import re
import string
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum, IntEnum
from typing import Any, Callable, Dict, Generic, List, NamedTuple, Optional, TypeVar, Union

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


class _NamedResources(Mapping):
    """The named resources of the trun binary, loaded on first use."""

    def __init__(self) -> None:
        self._table: Optional[Dict[str, Resource]] = None

    def _load(self) -> Dict[str, Resource]:
        if self._table is None:
            from trun.launcher import trun_binary
            r = subprocess.run([trun_binary(), "builtins", "--resources", "--json"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise ValueError(f"named resources: {r.stderr.strip()}")
            table = {name: _resource_from_dict(d) for name, d in json.loads(r.stdout).items()}
            table.setdefault("NULL", NULL_RESOURCE)
            table.setdefault("MISSING", NULL_RESOURCE)
            self._table = table
        return self._table

    def __getitem__(self, name: str) -> Resource:
        table = self._load()
        if name not in table:
            raise KeyError(f"no named resource {name!r}; `trun builtins --resources` lists them "
                           f"(more come from the file $TRUN_NAMED_RESOURCES names)")
        return copy.deepcopy(table[name])

    def __iter__(self):
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())


named_resources: Mapping = _NamedResources()


def get_named_resources(res: str) -> Resource:
    """The named resource ``res`` (``gpu.small``, ``aws_p4d.24xlarge``, ...)."""
    return named_resources[res]


def resource(cpu: Optional[int] = None, gpu: Optional[int] = None,
             memMB: Optional[int] = None, h: Optional[str] = None) -> Resource:
    """TorchX's ``specs.resource``: the named resource ``h`` when given, else the
    numbers, where an unset (or zero) cpu is 2, gpu 0 and memMB 1024."""
    if h:
        return get_named_resources(h)
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
    # TorchX's deprecated lazy overrides; trun resolves them before
    # serializing (a callable is called, its value used).
    overrides: Dict[str, Any] = field(default_factory=dict)

    def pre_proc(self, scheduler: str, dryrun_info: "AppDryRunInfo") -> "AppDryRunInfo":
        return dryrun_info


@dataclass
class AppDef:
    name: str
    roles: List[Role] = field(default_factory=list)
    metadata: Dict[str, str] = field(default_factory=dict)


class AppState(IntEnum):
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


ReplicaState = AppState
_TERMINAL = {AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED}
_STARTED = _TERMINAL | {AppState.RUNNING}


def is_terminal(state: AppState) -> bool:
    return state in _TERMINAL


def is_started(state: AppState) -> bool:
    return state in _STARTED


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
        roles = [r for r in self.roles if not filter_roles or r.role in filter_roles]
        lines = "\n".join(f"  {r.role}: " + ", ".join(f"{x.id}:{x.state}" for x in r.replicas)
                          for r in roles)
        return (f"AppStatus:\n  State: {self.state}\n  Num Restarts: {self.num_restarts}\n"
                f"  Roles:\n{lines}\n  Msg: {self.msg}\n"
                f"  Structured Error Msg: {self.structured_error_msg}\n  UI URL: {self.ui_url}")


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
        return self._cfg

    def __repr__(self) -> str:
        return self._fmt(self.request)


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
        super().__init__(f"unknown scheduler {scheduler_backend!r}; trun has "
                         f"{', '.join(SCHEDULERS)} (Runner.scheduler_backends())")


class InvalidRunConfigException(Exception):
    """A run option is missing or of the wrong type; ``cfg_key`` names it."""

    def __init__(self, invalid_reason: str, cfg_key: str, cfg: Mapping) -> None:
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
            """A copy of ``role`` with its args, env values and metadata substituted."""
            role = copy.deepcopy(role)
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
    return v.value if isinstance(v, Enum) else str(v)


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
        return get_named_resources(d)
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
    "is_started", "is_terminal", "macros", "make_app_handle", "named_resources", "parse_app_handle",
    "parse_mounts", "resource", "to_dict", "to_json",
]
