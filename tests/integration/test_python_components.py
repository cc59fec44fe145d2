"""TorchX's Python side on the local scheduler: a component file written for
TorchX (`import torchx.specs`, `from torchx.components.dist import ddp`, a
docstring) run by `trun run FILE.py:FN` and by `trun.runner`, whose status,
logs, describe, list and cancel follow the apps; and every component file
and argument TorchX's linter and argument parser reject (exit 2, naming the
file, line and parameter). The loader runs on PYTHON_EXEC, so both torch
generations' interpreters load the components."""
import json
import re
import sys
import textwrap
import time

import pytest

from conftest import EXAMPLES, FIXTURES, ROOT, TRUN, free_port
from torchx_helpers import jobs, use_env  # noqa: F401 (fixture)

sys.path.insert(0, str(ROOT / "python"))
from trun import specs  # noqa: E402
from trun.runner import Runner, TrunInvalidInputError  # noqa: E402

DDP = EXAMPLES / "ddp_train.py"
COMPONENT = FIXTURES / "torchx_component.py"


@pytest.fixture
def runner(jobs, monkeypatch):
    """A Runner whose trun sees the test's state directory and environment."""
    use_env(monkeypatch, jobs.env)
    monkeypatch.chdir(jobs.tmp)
    with Runner(trun=TRUN) as r:
        yield r


def write(jobs, name, source):
    path = jobs.tmp / name
    path.write_text(textwrap.dedent(source))
    return path


@pytest.mark.once(
    "two apps of 2 x 2 through the local scheduler and the runner (in pytest's interpreter, the "
    "same in both passes) are trun's own logic, their DDP only a payload; the component loader "
    "under this generation's interpreter is the file's other tests'")
def test_ddp_2x2_through_trun_run_and_the_runner(jobs, runner):
    # Both apps at once: a TorchX component file through the command line and
    # through trun.runner, two agents of two workers each.
    cli = jobs.submit("-s", "local", f"{COMPONENT}:trainer", "--rdzv_port", free_port(),
                      "--script", DDP, "--", "--steps", 3)
    api = runner.run_component(f"{COMPONENT}:trainer",
                               ["--rdzv_port", str(free_port()), "--script", str(DDP),
                                "--", "--steps", "3"], scheduler="local")
    assert re.fullmatch(r"local://trun/ddp_train-\w+", api), api
    for handle in (cli, api):
        st = runner.wait(handle, wait_interval=0.2, timeout=180)
        assert st.state == specs.AppState.SUCCEEDED, st
        assert [r.state for r in st.roles[0].replicas] == [specs.AppState.SUCCEEDED] * 2
        assert st.roles[0].role == "ddp_train" and st.num_restarts == 0
        lines = [ln for k in (0, 1) for ln in runner.log_lines(handle, "ddp_train", k)]
        assert sum("RESULT world=4" in ln for ln in lines) == 1, lines
        assert all(ln.endswith("\n") and not ln.startswith("ddp_train/") for ln in lines)
        ranks = sorted(int(r) for ln in lines for r in re.findall(r"\]:rank (\d)/4", ln))
        assert ranks == [0, 1, 2, 3], lines
        role = runner.describe(handle).roles[0]
        assert (role.name, role.entrypoint, role.num_replicas) == ("ddp_train", "bash", 2)
        assert "--nnodes 2 --nproc_per_node 2" in role.args[1]
        assert role.env["TORCHX_JOB_ID"] == "local://trun/${app_id}"
    # The command line and the runner see the same apps.
    assert json.loads(jobs.trun("status", "--json", api).out)["state"] == "SUCCEEDED"
    listed = {a.app_handle: a for a in runner.list("local")}
    assert listed[cli].state == listed[api].state == specs.AppState.SUCCEEDED
    assert listed[api].name == "ddp_train"
    assert [ln for ln in runner.log_lines(api, "ddp_train", 0, regex="RESULT")] == \
        [ln for ln in runner.log_lines(api, "ddp_train", 0) if "RESULT" in ln]


def test_run_an_appdef_then_cancel_it_from_python(jobs, runner):
    app = specs.AppDef(name="nap", roles=[specs.Role(
        name="sleep", image="none", entrypoint="sleep", args=["600"], num_replicas=2,
        resource=specs.resource(cpu=1), retry_policy=specs.RetryPolicy.REPLICA)])
    info = runner.dryrun(app, "local", cfg={"stop_timeout": 5})
    assert info.app.roles[0].args == ["600"] and info.cfg == {"stop_timeout": 5}
    assert repr(info).startswith("app_id: nap-") and "sleep" in repr(info)
    with pytest.raises(TypeError):  # read-only, as TorchX's
        info.cfg["stop_timeout"] = 1
    handle = runner.schedule(info)
    deadline = time.time() + 30
    while runner.status(handle).state != specs.AppState.RUNNING and time.time() < deadline:
        time.sleep(0.1)
    assert runner.status(handle).state == specs.AppState.RUNNING
    runner.cancel(handle)
    st = runner.wait(handle, wait_interval=0.1)
    assert st.state == specs.AppState.CANCELLED, st
    runner.cancel(handle)  # it has ended: nothing to do, as TorchX
    runner.cancel("local://trun/nope-123")  # unknown: likewise
    assert runner.describe(handle).roles[0].retry_policy == specs.RetryPolicy.REPLICA
    # delete (`trun delete`): the app is forgotten; again, or unknown, is nothing.
    runner.delete(handle)
    assert runner.status(handle) is None and runner.describe(handle) is None
    runner.delete(handle)

    # A component's request, then the same through run_component with a dict.
    info = runner.dryrun_component(f"{COMPONENT}:sleeper", {"seconds": 7}, "local")
    assert info.app.roles[0].args == ["7"] and info.app.name == "sleeper"
    handle = runner.run_component(f"{COMPONENT}:sleeper", {"seconds": 0}, "local")
    assert runner.wait(handle, wait_interval=0.1).state == specs.AppState.SUCCEEDED
    # get_runner's component_defaults fill the parameters the arguments leave out.
    with_defaults = Runner(component_defaults={f"{COMPONENT}:sleeper": {"seconds": "3"}},
                           trun=TRUN)
    assert with_defaults.dryrun_component(f"{COMPONENT}:sleeper", [], "local") \
        .app.roles[0].args == ["3"]
    assert with_defaults.dryrun_component(f"{COMPONENT}:sleeper", ["--seconds", "4"], "local") \
        .app.roles[0].args == ["4"]
    # A role without a resource is refused, as TorchX's schedulers do.
    with pytest.raises(ValueError, match="No resource for role: r"):
        runner.dryrun(specs.AppDef(name="x", roles=[specs.Role(
            name="r", image="i", entrypoint="true")]), "local")

    # Unknown apps, malformed handles, bad input.
    assert runner.status("local://trun/nope-123") is None
    assert runner.describe("local://trun/nope-123") is None
    with pytest.raises(specs.UnknownAppException, match="no local app 'nope-123'"):
        runner.log_lines("local://trun/nope-123", "sleep")  # raised by the call itself
    with pytest.raises(specs.MalformedAppHandleException, match="SCHEDULER://SESSION/APP_ID"):
        runner.status("nope-123")
    with pytest.raises(TrunInvalidInputError, match="seconds") as e:
        runner.run_component(f"{COMPONENT}:sleeper", ["--seconds", "soon"], "local")
    assert isinstance(e.value, ValueError) and e.value.returncode == 2
    with pytest.raises(TrunInvalidInputError, match="num_replicas"):
        runner.run(specs.AppDef(name="x", roles=[specs.Role(
            name="r", image="i", entrypoint="true", num_replicas=0,
            resource=specs.resource(cpu=1))]), "local")


def test_help_module_form_and_dryrun_json(jobs):
    r = jobs.trun("run", f"{COMPONENT}:trainer", "--help")
    assert r.returncode == 0, r.err
    assert "Trains the demo model with DDP." in r.out
    assert "The app's metadata records which component built it." in r.out
    assert re.search(r"--script SCRIPT\s+the training script \(required\)", r.out), r.out
    assert re.search(r"--rdzv_port.*\s+the rendezvous port on the first node \(default: "
                     r"29500\)", r.out), r.out

    # module:function, found from the working directory; `from torchx import specs`.
    (jobs.tmp / "mycomps").mkdir()
    (jobs.tmp / "mycomps" / "__init__.py").write_text("")
    write(jobs, "mycomps/echo.py", '''
        from typing import Annotated, List, Optional
        from torchx import specs
        from torchx.components import utils

        def hello(*words: str, times: int = 1, loud: bool = False,
                  tags: Optional[List[int]] = None,
                  sep: Annotated[str, "-S"] = " ") -> specs.AppDef:
            """Says words."""
            text = sep.join(words) * times
            app = utils.echo(msg=text.upper() if loud else text)
            app.roles[0].env["TAGS"] = repr(tags)
            return app
        ''')
    r = jobs.trun("run", "--dryrun", "--json", "mycomps.echo:hello", "--times", 2, "--loud",
                  "yes", "--tags", "1,2", "-S", "_", "hi", "there")
    assert r.returncode == 0, r.err
    d = json.loads(r.out)
    role = d["app"]["roles"][0]
    assert role["entrypoint"] == "echo" and role["args"] == ["HI_THEREHI_THERE"]
    assert role["env"]["TAGS"] == "[1, 2]"
    assert d["scheduler"] == "local" and "stop_timeout" in d["cfg"] and d["text"]
    # What the C++ side read is what trun.specs makes of it again.
    assert specs.to_dict(specs.from_dict(d["app"])) == d["app"]
    info = json.loads(jobs.trun("run", "--dryrun", "--json", f"{COMPONENT}:trainer",
                                "--script", DDP).out)
    assert info["app"]["metadata"] == {"component": "trainer"}
    # .trunconfig's [component:NAME] supplies defaults, as for every component.
    (jobs.tmp / ".trunconfig").write_text("[component:mycomps.echo:hello]\ntimes = 3\n")
    r = jobs.trun("run", "--dryrun", "--json", "mycomps.echo:hello", "ho")
    assert json.loads(r.out)["app"]["roles"][0]["args"] == ["hohoho"], r.err
    r = jobs.trun("run", "--wait", "mycomps.echo:hello", "bye")
    assert r.returncode == 0, r.err


BAD_FILES = [
    ("def c(a) -> specs.AppDef: ...",
     r"comp\.py:3: parameter 'a': Missing type annotation for argument 'a' in function 'c'"),
    ("def c(a: Set[str]) -> specs.AppDef: ...",
     r"comp\.py:3: parameter 'a': Unsupported container type 'Set'"),
    ("def c(a: List[List[str]]) -> specs.AppDef: ...",
     r"comp\.py:3: parameter 'a': Non-primitive element type 'List\[str\]'"),
    ("def c(a: Dict[str]) -> specs.AppDef: ...",
     r"comp\.py:3: parameter 'a': Malformed dict type 'Dict\[str\]'"),
    ("def c(a: Dict[str, List[str]]) -> specs.AppDef: ...",
     r"comp\.py:3: parameter 'a': Non-primitive value type 'List\[str\]'"),
    ("def c(a: Dict[List[str], str]) -> specs.AppDef: ...",
     r"comp\.py:3: parameter 'a': Non-primitive key type 'List\[str\]'"),
    ("def c(a: Tuple[str]) -> specs.AppDef: ...",
     r"comp\.py:3: parameter 'a': Unsupported tuple type 'Tuple\[str\]'"),
    ("def c(a: Tuple[int, List[str]]) -> specs.AppDef: ...",
     r"comp\.py:3: parameter 'a': Non-primitive element type 'List\[str\]'"),
    ("def c(a: 'str') -> specs.AppDef: ...",
     r"comp\.py:3: parameter 'a': Unsupported argument type \"'str'\""),
    ("def c(*args) -> specs.AppDef: ...",
     r"comp\.py:3: parameter 'args': Missing type annotation"),
    ("def c(a: int,\n      **kw: str) -> specs.AppDef: ...",
     r"comp\.py:4: parameter 'kw': component fn param `kw` is a '\*\*kwargs' which is not "
     r"supported"),
    ("def c(a: int):\n    pass",
     r"comp\.py:3: Function: c missing return annotation .* Supported return annotation: AppDef"),
    ("def c(a: int) -> dict: ...",
     r"comp\.py:3: Function: c has incorrect return annotation, supported annotation: AppDef"),
    ("def d(a: int) -> specs.AppDef: ...", r"comp\.py: Function c not found \(the file defines d\)"),
    ("def c(a: int) -> specs.AppDef:\n    return (", r"comp\.py:\d: syntax error"),
    ("class c:\n    pass", r"comp\.py:3: c is a class"),
    ("import no_such_module\ndef c(a: int) -> specs.AppDef: ...",
     r"comp\.py:3: importing it raised ModuleNotFoundError: No module named 'no_such_module'"),
    ("def c(a: int = 1) -> specs.AppDef:\n    raise ValueError('a must be even')",
     r"comp\.py:4: the component c raised ValueError: a must be even"),
    ("def c(a: int = 1) -> specs.AppDef:\n    return {}", r"comp\.py: c returned dict, not an AppDef"),
    ("def c(a: int = 1) -> specs.AppDef:\n    return specs.AppDef(name='x', roles=[specs.Role("
     "name='r', image='i', entrypoint='true', num_replicas=0)])",
     r"comp\.py:c: the AppDef it returned:\n.*roles\[0\] \('r'\): num_replicas must be at "
     r"least 1, got 0"),
]


@pytest.mark.parametrize("body,expected", BAD_FILES, ids=[f"bad{i}" for i in range(len(BAD_FILES))])
def test_bad_component_files(jobs, body, expected):
    write(jobs, "comp.py", "from typing import Dict, List, Set, Tuple\n"
          "import torchx.specs as specs\n" + body + "\n")
    r = jobs.trun("run", "./comp.py:c")
    assert r.returncode == 2, (r.returncode, r.err)
    assert re.search(expected, r.err, re.S), r.err
    assert not (jobs.tmp / "state").exists() or not list((jobs.tmp / "state").rglob("app.json"))


@pytest.mark.parametrize("args,expected", [
    (["--script"], r"trainer: argument --script: expected one argument"),
    ([], r"trainer: the argument --script is required"),
    (["--script", "t.py", "--rdzv_port", "x"], r"--rdzv_port.*'x'"),
    (["--script", "t.py", "--rdzv-prot", "1"], r"unrecognized argument '--rdzv-prot' \(did you mean '--rdzv-port'\?\)"),
    (["--script", "t.py", "--env", "A"], r"--env"),
    (["--script", "t.py", "--script", "u.py"], r"--script.*(twice|more than once)"),
])
def test_bad_component_arguments(jobs, args, expected):
    r = jobs.trun("run", f"{COMPONENT}:trainer", *args)
    assert r.returncode == 2, (r.returncode, r.err)
    assert re.search(expected, r.err, re.S), r.err


def test_bad_names_and_a_real_torchx_is_never_shadowed(jobs):
    r = jobs.trun("run", "./comp.py")
    assert r.returncode == 2 and "name the function too, as in TorchX: ./comp.py:FUNCTION" in r.err
    r = jobs.trun("run", "./missing.py:fn")
    assert r.returncode == 2 and "component file './missing.py': no such file" in r.err, r.err
    r = jobs.trun("run", "no_such.module:fn")
    assert r.returncode == 2 and "component module 'no_such.module'" in r.err, r.err
    write(jobs, "lists.py", '''
        from typing import List
        import torchx.specs as specs

        def c(ports: List[int], on: List[bool] = []) -> specs.AppDef:
            return specs.AppDef(name="x")
        ''')
    r = jobs.trun("run", "./lists.py:c", "--ports", "1,x")
    assert r.returncode == 2 and "--ports: 'x' is not an int" in r.err, r.err
    r = jobs.trun("run", "./lists.py:c", "--ports", "1", "--on", "maybe")
    assert r.returncode == 2 and "--on: 'maybe' is not a bool" in r.err, r.err

    # An installed torchx wins: this one has no specs, so the import fails.
    (jobs.tmp / "fake" / "torchx").mkdir(parents=True)
    (jobs.tmp / "fake" / "torchx" / "__init__.py").write_text("REAL = True\n")
    write(jobs, "comp.py", '''
        import torchx
        import torchx.specs as specs

        def c() -> specs.AppDef:
            return specs.AppDef(name="x")
        ''')
    env = dict(jobs.env, PYTHONPATH=str(jobs.tmp / "fake"))
    r = jobs.trun("run", "./comp.py:c", env=env)
    assert r.returncode == 2, r.err
    assert "importing it raised ModuleNotFoundError: No module named 'torchx.specs'" in r.err


def test_dict_arguments(jobs):
    # dict[K, V] takes K=V,K2=V2, each key and value as its annotated type.
    write(jobs, "dicts.py", '''
        from typing import Dict, Optional
        import torchx.specs as specs

        def c(env: Dict[str, str], counts: Optional[Dict[str, int]] = None) -> specs.AppDef:
            return specs.AppDef(name="dicts", roles=[specs.Role(
                name="r", image="i", entrypoint="echo", env=env,
                args=[repr(counts), str(sum((counts or {}).values()))])])
        ''')
    r = jobs.trun("run", "--dryrun", "--json", "./dicts.py:c", "--env", "A=1,B=x y",
                  "--counts", "a=1,b=20")
    assert r.returncode == 0, r.err
    role = json.loads(r.out)["app"]["roles"][0]
    assert role["args"] == ["{'a': 1, 'b': 20}", "21"]
    assert {k: role["env"][k] for k in "AB"} == {"A": "1", "B": "x y"}
    r = jobs.trun("run", "--wait", "--log", "./dicts.py:c", "--env", "A=1", "--counts", "n=2")
    assert r.returncode == 0 and "r/0 {'n': 2} 2" in r.err, (r.out, r.err)  # --log: stderr
    r = jobs.trun("run", "./dicts.py:c", "--env", "A=1", "--counts", "a=x")
    assert r.returncode == 2 and "--counts: 'x' is not an int" in r.err, r.err


def test_what_a_component_prints_is_shown_once_and_keeps_the_json_intact(jobs):
    write(jobs, "noisy.py", '''
        import warnings
        import torchx.specs as specs

        print("importing noisy")

        def c(msg: str = "hi") -> specs.AppDef:
            print("building with", msg)
            warnings.warn("msg is deprecated")
            return specs.AppDef(name="noisy", roles=[specs.Role(
                name="r", image="i", entrypoint="echo", args=[msg])])
        ''')
    r = jobs.trun("run", "--dryrun", "--json", "./noisy.py:c", "--msg", "yo")
    assert r.returncode == 0, r.err
    assert json.loads(r.out)["app"]["roles"][0]["args"] == ["yo"]
    assert r.err.count("importing noisy") == 1 and "building with yo" in r.err, r.err
    assert "UserWarning: msg is deprecated" in r.err, r.err


@pytest.mark.once("TorchX's Python LocalScheduler drives the binary from pytest's interpreter; "
                  "no torch runs")
def test_torchx_local_scheduler_runs_apps_in_the_image_directory(jobs, monkeypatch):
    # torchx.schedulers.local_scheduler as TorchX's runner tests use it: a
    # Python scheduler under a name of the Runner's own (`local_dir`), whose
    # apps are trun's local apps started in the image directory.
    from trun.schedulers.local_scheduler import (CWDImageProvider, LocalDirectoryImageProvider,
                                                 create_scheduler)
    use_env(monkeypatch, jobs.env)
    monkeypatch.setenv("TRUN_BINARY", TRUN)
    image = jobs.tmp / "image"
    (image / "bin").mkdir(parents=True)
    script = image / "where.sh"
    script.write_text("#!/bin/sh\npwd > \"$1\"\necho \"$PATH\" >> \"$1\"\necho hello from $0\n")
    script.chmod(0o755)
    small = specs.Resource(cpu=1, gpu=0, memMB=64)

    def role(name, entrypoint, args, image=str(image)):
        return specs.Role(name=name, image=image, entrypoint=entrypoint, args=args,
                          resource=small)

    out = jobs.tmp / "where.txt"
    with Runner("sess", scheduler_factories={"local_dir": create_scheduler},
                scheduler_params={"image_provider_class": LocalDirectoryImageProvider,
                                  "extra_paths": [str(image / "bin")]}, trun=TRUN) as r:
        handle = r.run(specs.AppDef("where", roles=[role("w", "where.sh", [str(out)])]),
                       "local_dir")
        assert re.fullmatch(r"local_dir://sess/where-\w+", handle), handle
        st = r.wait(handle, wait_interval=0.1)
        assert st.state == specs.AppState.SUCCEEDED, st
        cwd, path = out.read_text().splitlines()
        # Started in the image; extra_paths first on PATH, the image last.
        assert cwd == str(image) and path.split(":")[0] == str(image / "bin") \
            and path.split(":")[-1] == str(image), path
        # The image's program found by name (through PATH), its log through trun's.
        assert list(r.log_lines(handle, "w")) == [f"hello from {script}\n"]
        # The same app is trun's: the command line follows it by its trun handle.
        app_id = specs.parse_app_handle(handle).app_id
        assert f"local://trun/{app_id}" in jobs.trun("list").out

        sleeper = specs.AppDef("sleeper", roles=[role("s", "sleep", ["600"])],
                               metadata={"k": "v"})
        running = r.run(sleeper, "local_dir")
        # As TorchX's: RUNNING once run returns, describe is what was submitted.
        assert r.status(running).state == specs.AppState.RUNNING
        described = r.describe(running)
        assert described.roles[0].env["TORCHX_JOB_ID"] == "local_dir://sess/${app_id}"
        for ro in described.roles:
            ro.env.clear()
        assert described == sleeper
        left_running = r.run(sleeper, "local_dir")
        r.cancel(running)
        assert r.status(running).state == specs.AppState.CANCELLED

        # What TorchX's local scheduler refuses, and what trun's cannot do.
        with pytest.raises(ValueError, match="does not exist or is not a directory"):
            r.dryrun(specs.AppDef("x", roles=[role("x", "true", [], "no_image")]), "local_dir")
        other = jobs.tmp / "other"
        other.mkdir()
        with pytest.raises(ValueError, match="one directory"):
            r.dryrun(specs.AppDef("x", roles=[role("a", "true", []),
                                              role("b", "true", [], str(other))]), "local_dir")
        assert r.status("local_dir://sess/unknown") is None
        with pytest.raises(specs.UnknownAppException):
            r.log_lines("local_dir://sess/unknown", "s")
    # Closing the Runner cancels what its local scheduler left running.
    left_id = specs.parse_app_handle(left_running).app_id
    st = Runner(trun=TRUN).status(f"local://trun/{left_id}")
    assert st.state == specs.AppState.CANCELLED, st
    with pytest.raises(ValueError, match="cache size must be greater than zero"):
        create_scheduler("s", cache_size=0)

    # The default provider runs in this process's directory, as local_cwd.
    monkeypatch.chdir(other)
    (other / "here.sh").write_text("#!/bin/sh\npwd > here.txt\n")
    (other / "here.sh").chmod(0o755)
    with Runner("", {"local": create_scheduler}, trun=TRUN) as r:
        handle = r.run(specs.AppDef("here", roles=[role("h", "here.sh", [], "ignored")]),
                       "local")
        assert handle.startswith("local:///")
        assert r.wait(handle, wait_interval=0.1).state == specs.AppState.SUCCEEDED
    assert (other / "here.txt").read_text().strip() == str(other)
    assert CWDImageProvider({}).fetch("anything") == str(other)


@pytest.mark.once("utils.booth's app and the Runner's local app cache run no torch")
def test_booth_end_to_end_and_the_local_schedulers_app_cache(jobs, monkeypatch):
    # utils.booth as TorchX's HPO examples run it: the component from the
    # command line and from Python, its app writing the result where
    # FsspecResultTracker (torchx.runtime.tracking) reads it.
    jobs.env["PYTHONPATH"] = str(ROOT / "python")  # the image has trun's package
    use_env(monkeypatch, jobs.env)
    monkeypatch.setenv("TRUN_BINARY", TRUN)
    monkeypatch.chdir(jobs.tmp)
    from trun.components import utils
    from trun.runner import get_runner
    from trun.runtime.tracking import FsspecResultTracker
    track = str(jobs.tmp / "track")
    cli = jobs.submit("-s", "local", "utils.booth", "--x1", 1, "--x2", 3, "--trial_idx", 7,
                      "--tracker_base", track)
    assert jobs.wait(cli)["state"] == "SUCCEEDED"
    app = utils.booth(x1=2, x2=1.5, trial_idx=8, tracker_base=track)
    assert app.roles[0].args == ["-m", "trun.apps.utils.booth_main", "--x1", "2.0", "--x2",
                                 "1.5", "--trial_idx", "8", "--tracker_base", track]
    assert (app.roles[0].resource.cpu, app.roles[0].resource.memMB) == (1, 1024)

    # get_runner's scheduler_params are TorchX's LocalScheduler's on local_cwd:
    # extra_paths go first on PATH, and cache_size bounds the apps it follows.
    bindir = jobs.tmp / "bin"
    bindir.mkdir()
    runner = get_runner(cache_size=1, extra_paths=[str(bindir)])
    info = runner.dryrun(app, "local_cwd")
    assert info.app.roles[0].env["PATH"].split(":")[0] == str(bindir)
    sleeper = specs.AppDef("nap", roles=[specs.Role(
        name="nap", image="none", entrypoint="sleep", args=["600"],
        resource=specs.resource(cpu=1))])
    napping = runner.run(sleeper, "local_cwd")
    with pytest.raises(IndexError, match=r"App cache size \(1\) exceeded"):
        runner.run(app, "local_cwd")  # the one app it follows still runs
    runner.cancel(napping)
    handle = runner.run(app, "local_cwd")  # evicts the cancelled app
    assert runner.wait(handle, wait_interval=0.1, timeout=120).state == specs.AppState.SUCCEEDED
    assert runner.status(napping).state == specs.AppState.CANCELLED  # trun still knows it
    assert runner.describe(handle).roles[0].env["PATH"].split(":")[0] == str(bindir)
    tracker = FsspecResultTracker(track)
    assert tracker[7] == {"booth_eval": 0.0} and tracker[8] == {"booth_eval": 4.25}
    for bad, match in (({"cache_size": -1}, "cache size must be greater than zero"),
                       ({"cache_size": "2"}, "cache_size must be an int"),
                       ({"extra_paths": "/bin"}, "extra_paths must be a list")):
        with pytest.raises(ValueError, match=match):
            get_runner(**bad).run(app, "local_cwd")
    # The others ignore what is not theirs, as TorchX's schedulers do.
    assert get_runner(cache_size=-1).dryrun(app, "slurm").app.name == "trun-utils-booth"
