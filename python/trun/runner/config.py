"""TorchX's ``torchx.runner.config``: ``.torchxconfig`` files, as TorchX reads them.

A ``.torchxconfig`` is INI: a ``[SCHEDULER]`` section holds run options
(``None`` means none), ``[PREFIX:NAME]`` sections anything else keyed by
name (``[component:dist.ddp]``: a component's argument defaults; ``[cli:run]``).
Keys keep their case. ``$TORCHXCONFIG`` names the only file read (empty:
none; a path that is no file: FileNotFoundError); otherwise ``.torchxconfig``
in each of ``dirs`` (default :data:`DEFAULT_CONFIG_DIRS`, ``$HOME`` then the
working directory), the first value found winning, and values already in
``cfg`` winning over every file.

The trun binary reads the same layout from ``.trunconfig`` (docs/cli.md);
this module is for Python code written for TorchX. Stateless, thread-safe.
"""

from __future__ import annotations

import configparser
import logging
import os
from pathlib import Path
from typing import Any, Iterable, TextIO

from trun.schedulers import get_scheduler_factories, trun_scheduler_name
from trun.schedulers.api import Scheduler
from trun.settings import ENV_TORCHXCONFIG
from trun.specs.api import CfgVal, get_type_name, runopt

logger = logging.getLogger(__name__)

CONFIG_FILE = ".torchxconfig"
CONFIG_PREFIX_DELIM = ":"
# Where find_configs looks when given no dirs (read at call time, so it can be patched).
DEFAULT_CONFIG_DIRS = [str(Path.home()), str(Path.cwd())]
# How a file writes "no value".
_NONE = "None"


def _parser() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.optionxform = lambda option: option  # type: ignore[assignment]
    return parser


def _scheduler(name: str) -> Scheduler[Any]:
    factories = get_scheduler_factories()
    name = name if name in factories else trun_scheduler_name(name)
    if name not in factories:
        raise ValueError(f"`{name}` is not a registered scheduler; the schedulers are "
                         f"{', '.join(factories)}")
    sched = factories[name](session_name="_")
    if not isinstance(sched, Scheduler):
        raise TypeError(f"the factory of scheduler `{name}` made a {type(sched).__name__}, "
                        f"not a Scheduler")
    return sched


def _placeholder(opt: runopt, max_len: int = 60) -> str:
    """What ``dump`` writes for a required option: its type and help, to fill in."""
    text = f"#FIXME:({get_type_name(opt.opt_type)}) {opt.help}"
    return text if len(text) <= max_len else text[:max_len] + "..."


def _written(opt: runopt) -> str:
    """An optional option's default as ``load`` reads it back."""
    if opt.default is None:
        return _NONE
    if isinstance(opt.default, list):
        return ",".join(opt.default) if opt.default else _NONE
    if isinstance(opt.default, dict):
        return ",".join(f"{k}:{v}" for k, v in opt.default.items()) if opt.default else _NONE
    return str(opt.default)


def dump(f: TextIO, schedulers: list[str] | None = None, required_only: bool = False) -> None:
    """Writes a ``.torchxconfig`` template to ``f``: a section per scheduler (all
    of them unless ``schedulers`` names some), optional options at their
    defaults (left out with ``required_only``), required ones as
    ``#FIXME:(type) help``. Raises ValueError for a scheduler that is not there."""
    parser = _parser()
    for name in schedulers or list(get_scheduler_factories()):
        try:
            sched = _scheduler(name)
        except ModuleNotFoundError as e:
            logger.warning("skipping scheduler `%s`: its module did not import: %s", name, e)
            continue
        parser.add_section(name)
        for opt_name, opt in sched.run_opts():
            if opt.is_required:
                parser.set(name, opt_name, _placeholder(opt))
            elif not required_only:
                parser.set(name, opt_name, _written(opt))
    parser.write(f, space_around_delimiters=True)


def load(scheduler: str, f: TextIO, cfg: dict[str, CfgVal]) -> None:
    """Adds the run options of section ``[scheduler]`` of ``f`` to ``cfg``, each
    cast as its option's ``cast_to_type`` casts it; a key ``cfg`` has keeps its
    value, a key that is not one of the scheduler's options is skipped with a
    warning (a stale file must not stop a run). Raises ValueError for a
    scheduler that is not there."""
    parser = _parser()
    parser.read_file(f)
    opts = _scheduler(scheduler).run_opts()
    if not parser.has_section(scheduler):
        return
    for key, value in parser.items(scheduler):
        if key in cfg:
            continue
        if value == _NONE:
            cfg[key] = None
            continue
        opt = opts.get(key)
        if opt is None:
            logger.warning("`%s = %s` in section [%s] is not a run option of scheduler `%s`; "
                           "remove it from the file", key, value, scheduler, scheduler)
            continue
        cfg[key] = opt.cast_to_type(value)


def apply(scheduler: str, cfg: dict[str, CfgVal], dirs: list[str] | None = None) -> None:
    """:func:`load` of each file :func:`find_configs` finds, in order."""
    for path in find_configs(dirs):
        with open(path) as f:
            load(scheduler, f, cfg)
        logger.info("loaded run options from `%s`", path)


def load_sections(prefix: str, dirs: list[str] | None = None) -> dict[str, dict[str, str]]:
    """Every ``[PREFIX:NAME]`` section of the files :func:`find_configs` finds, by
    NAME, values as written (the first file to set a key wins). Sections with
    an empty prefix or name are not read."""
    sections: dict[str, dict[str, str]] = {}
    for path in find_configs(dirs):
        parser = _parser()
        with open(path) as f:
            parser.read_file(f)
        for section in parser.sections():
            head, delim, name = section.partition(CONFIG_PREFIX_DELIM)
            if not delim or head != prefix or not name:
                continue
            values = sections.setdefault(name, {})
            for key, value in parser.items(section):
                values.setdefault(key, value)
    return sections


def get_configs(prefix: str, name: str, dirs: list[str] | None = None) -> dict[str, str]:
    """Section ``[PREFIX:NAME]`` as a dict (empty when no file has it)."""
    return load_sections(prefix, dirs).get(name, {})


def get_config(prefix: str, name: str, key: str, dirs: list[str] | None = None) -> str | None:
    """``key`` of section ``[PREFIX:NAME]``, or None."""
    return get_configs(prefix, name, dirs).get(key)


def find_configs(dirs: Iterable[str] | None = None) -> list[str]:
    """The config files to read, in order: ``$TORCHXCONFIG`` alone when it is set
    (an empty value: none), else each of ``dirs`` (default
    :data:`DEFAULT_CONFIG_DIRS`) that holds a ``.torchxconfig``."""
    env = os.environ.get(ENV_TORCHXCONFIG)
    if env is not None:
        if not env:
            return []
        if not Path(env).is_file():
            raise FileNotFoundError(f"${ENV_TORCHXCONFIG}={env} is not a file; point it at a "
                                    f".torchxconfig, or set it empty to read none")
        return [env]
    found = []
    for d in dirs or DEFAULT_CONFIG_DIRS:
        path = Path(d) / CONFIG_FILE
        if path.is_file():
            found.append(str(path))
    return found
