"""The build step of the Python package: build the C++ agent, bundle it.

`build_py` runs cmake on the repository's build folder ($TRUN_BUILD_DIR,
default ./build) and copies its `trun` into the package as trun/bin/trun.
An up-to-date build folder makes the cmake step a no-op, so installing
after `make build` takes seconds, not the full C++ build.
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithAgent(build_py):
    def run(self):
        super().run()
        build = Path(os.environ.get("TRUN_BUILD_DIR", ROOT / "build"))
        if not (build / "build.ninja").exists():
            subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja",
                            "-DCMAKE_BUILD_TYPE=" + os.environ.get("BUILD_TYPE", "RelWithDebInfo")],
                           check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "trun",
                        "-j", os.environ.get("JOBS", str(os.cpu_count() or 1))], check=True)
        dest = Path(self.build_lib) / "trun" / "bin"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build / "trun", dest / "trun")


# setuptools' own scratch goes under the CMake build folder, not beside it.
setup(cmdclass={"build_py": BuildWithAgent}, options={"build": {"build_base": "build/python"}})
