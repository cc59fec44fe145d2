"""TorchX's ``torchx.schedulers`` for trun: the schedulers the trun binary has.

trun's schedulers are C++ (``trun runopts`` lists their options); Python
reaches them through :mod:`trun.runner`. ``get_scheduler_factories()``
names them, as TorchX's does, for code that lists or checks scheduler names.
"""

from __future__ import annotations

from typing import Protocol

from trun.specs.api import SCHEDULERS


class SchedulerFactory(Protocol):
    def __call__(self, session_name: str, **kwargs: object) -> object: ...


def _refuse(name: str) -> SchedulerFactory:
    def factory(session_name: str, **kwargs: object) -> object:
        raise NotImplementedError(
            f"scheduler {name}: trun's schedulers run in the trun binary and have no Python "
            f"object; submit with trun.runner.get_runner().run(app, scheduler={name!r})")
    return factory


def get_scheduler_factories(*, skip_defaults: bool = False) -> dict[str, SchedulerFactory]:
    """The schedulers by name (local first: the default). Their factories raise
    NotImplementedError: trun's schedulers are driven through the Runner."""
    return {} if skip_defaults else {name: _refuse(name) for name in SCHEDULERS}


def get_default_scheduler_name() -> str:
    return SCHEDULERS[0]
