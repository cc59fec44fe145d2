"""TorchX's ``torchx.components.component_test_base``: unit tests for components.

    from trun.components.component_test_base import ComponentTestCase
    from my_pkg import components

    class MyComponentTest(ComponentTestCase):
        def test_trainer(self):
            self.validate(components, "trainer")      # `trun run FILE:trainer --help` works
            status = self.run_component(components.trainer, {"script": "t.py"})

``validate`` asks the trun binary, so the component is checked by the same
linter and parser that ``trun run`` uses.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import unittest
from types import ModuleType
from typing import Any, Callable

from trun import _binary
from trun.runner import get_runner
from trun.specs import AppDef, AppStatus


class ComponentTestCase(unittest.TestCase):
    def setUp(self) -> None:
        self.test_dir = tempfile.mkdtemp("trun_component_test")
        self.old_cwd = os.getcwd()

    def tearDown(self) -> None:
        shutil.rmtree(self.test_dir, ignore_errors=True)
        os.chdir(self.old_cwd)

    def validate(self, module: ModuleType, function_name: str) -> None:
        """Fails the test unless ``trun run MODULE_FILE:FUNCTION --help`` succeeds:
        the component lints (annotations, return type, docstring) and its
        parameters parse."""
        path = getattr(module, "__file__", None)
        self.assertTrue(path, f"module {module.__name__} has no __file__")
        assert path is not None
        r = _binary.run(["run", f"{os.path.abspath(path)}:{function_name}", "--help"],
                        no_config=True)
        self.assertEqual(r.returncode, 0, f"{path}:{function_name} does not validate:\n"
                         f"{r.stderr}")

    def run_component(self, component: Callable[..., AppDef],
                      args: dict[str, Any] | None = None,
                      scheduler_params: dict[str, Any] | None = None,
                      scheduler: str = "local", interval: float = 0.1,
                      timeout: float = 1) -> AppStatus | None:
        """Runs ``component(**args)`` on ``scheduler`` and polls its status every
        ``interval`` seconds for at most ``timeout`` seconds; the last status."""
        app = component(**(args or {}))
        runner = get_runner(None, None, **(scheduler_params or {}))
        handle = runner.run(app, scheduler)
        waited = 0.0
        status = runner.status(handle)
        while (status is None or not status.is_terminal()) and waited < timeout:
            time.sleep(interval)
            waited += interval
            status = runner.status(handle)
        return status
