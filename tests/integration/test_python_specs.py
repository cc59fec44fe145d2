"""trun.specs: TorchX's names, fields and defaults, and the one JSON schema
both sides read (Python's to_dict accepted by `trun run --dryrun --json`
unchanged); the torchx import shim; trun.runner's TorchX semantics for
unknown apps on every scheduler (a stand-in trun answers as each scheduler
does). Fast: no app is run."""
import json
import os
import re
import subprocess
import sys
import textwrap
from typing import Dict, List

import pytest

from conftest import ROOT, TRUN
from torchx_helpers import jobs, use_env  # noqa: F401 (fixture)

sys.path.insert(0, str(ROOT / "python"))
from trun import specs  # noqa: E402
from trun import runner as trun_runner  # noqa: E402
from trun.runner import Runner, TrunCommandError, TrunInvalidInputError  # noqa: E402

pytestmark = pytest.mark.once(
    "trun.specs and trun.runner run in pytest's own interpreter, the same in both passes")


def test_torchx_defaults():
    r = specs.Role(name="r", image="i")
    assert (r.min_replicas, r.entrypoint, r.args, r.env, r.num_replicas, r.max_retries) == \
        (None, specs.MISSING, [], {}, 1, 0)
    assert r.retry_policy == specs.RetryPolicy.APPLICATION and r.resource == specs.NULL_RESOURCE
    assert (r.port_map, r.metadata, r.mounts, r.workspace) == ({}, {}, [], None)
    assert r.resource is not specs.NULL_RESOURCE
    assert specs.AppDef("a") == specs.AppDef(name="a", roles=[], metadata={})
    assert specs.resource() == specs.Resource(cpu=2, gpu=0, memMB=1024)
    assert specs.resource(cpu=4, memMB=10) == specs.Resource(4, 0, 10)
    caps = specs.Resource.copy(specs.Resource(1, 0, 2, capabilities={"a": 1}), b=2)
    assert caps.capabilities == {"a": 1, "b": 2}
    assert [s.value for s in specs.AppState] == list(range(8))
    assert specs.is_terminal(specs.AppState.CANCELLED)
    assert not specs.is_terminal(specs.AppState.RUNNING)
    assert specs.ReplicaState is specs.AppState
    st = specs.AppStatus(specs.AppState.RUNNING)
    assert st.to_json()["state"] == "RUNNING" and not st.is_terminal()


def test_handles_macros_mounts():
    assert specs.parse_app_handle("local://trun/echo-bx2") == \
        specs.ParsedAppHandle("local", "trun", "echo-bx2")
    assert specs.parse_app_handle("kubernetes:///ns:job").session_name == ""
    with pytest.raises(specs.MalformedAppHandleException, match="SCHEDULER://SESSION/APP_ID"):
        specs.parse_app_handle("echo-bx2")
    role = specs.Role(name="r", image="i", args=["--id", "${app_id}-$replica_id", "$$x"],
                      env={"H": "${rank0_env}"}, metadata={"m": ["${img_root}"]},
                      entrypoint="${img_root}/bin")
    out = specs.macros.Values(img_root="/img", app_id="a1", replica_id="0",
                              rank0_env="RANK0").apply(role)
    assert out.args == ["--id", "a1-0", "$x"] and out.env == {"H": "RANK0"}
    assert out.metadata == {"m": ["/img"]} and out.entrypoint == "${img_root}/bin"
    assert role.args[1] == "${app_id}-$replica_id"
    mounts = specs.parse_mounts(["type=bind", "src=/a", "dst=/b", "readonly", "type=volume",
                                 "src=v", "target=/c", "type=device", "src=/dev/x", "perm=rw"])
    assert mounts == [specs.BindMount("/a", "/b", True), specs.VolumeMount("v", "/c"),
                      specs.DeviceMount("/dev/x", "/dev/x", "rw")]
    with pytest.raises(KeyError, match="type must be specified first"):
        specs.parse_mounts(["src=/a"])
    with pytest.raises(ValueError, match="z is not a valid permission"):
        specs.parse_mounts(["type=device", "src=/dev/x", "perm=rz"])


def test_named_resources_come_from_the_binary(monkeypatch):
    monkeypatch.setenv("TRUN_BINARY", TRUN)
    monkeypatch.setattr(specs.api, "named_resources", specs._NamedResourcesLibrary())
    assert specs.resource(h="gpu.small") == specs.Resource(8, 1, 32768)
    p4d = specs.named_resources["aws_p4d.24xlarge"]
    assert (p4d.memMB, p4d.devices) == (1132416, {"vpc.amazonaws.com/efa": 4})
    assert p4d.capabilities == {"node.kubernetes.io/instance-type": "p4d.24xlarge"}
    assert specs.named_resources["NULL"] == specs.NULL_RESOURCE
    with pytest.raises(KeyError, match="No named resource found for `gpu.smal`. "
                                       "Did you mean `gpu.small`?"):
        specs.resource(h="gpu.smal")
    with pytest.raises(KeyError, match=r"No named resource found for `gpu.tiny`. Registered "
                                       r"named resources: \[.*`trun builtins --resources`"):
        specs.resource(h="gpu.tiny")


def test_json_written_by_python_is_read_by_trun(jobs):
    app = specs.AppDef(name="full", metadata={"k": "v"}, roles=[
        specs.Role(name="a", image="img", min_replicas=1, entrypoint="echo",
                   args=["${replica_id}", "x y"], env={"E": "1,2"}, num_replicas=2,
                   max_retries=3, retry_policy=specs.RetryPolicy.ROLE,
                   resource=specs.Resource(4, 0, 512, capabilities={"c": "d"},
                                           devices={"dev": 1}, tags={"t": 1}),
                   port_map={"p": 80}, metadata={"local": {"x": [1]}},
                   workspace=specs.Workspace({"/src": "app"})),
        specs.Role(name="b", image="img", entrypoint="true",
                   overrides={"args": lambda: ["lazy"]})])
    d = specs.to_dict(app)
    (jobs.tmp / "app.json").write_text(json.dumps(d))
    r = jobs.trun("run", "--dryrun", "--json", "-s", "local", "./app.json")
    assert r.returncode == 0, r.err
    read = json.loads(r.out)["app"]
    for role in read["roles"]:
        assert role["env"].pop("TORCHX_JOB_ID") == "local://trun/${app_id}"
    assert read == d
    assert d["roles"][1]["args"] == ["lazy"]
    assert specs.to_dict(specs.from_dict(read)) == d

    # Mounts: written by Python, refused by the local scheduler's validation
    # only for what they are, never for their shape.
    d["roles"][0]["mounts"] = [specs._mount_to_dict(m) for m in specs.parse_mounts(
        ["type=bind", "src=/a", "dst=/b", "type=volume", "src=v", "dst=/c",
         "type=device", "src=/dev/null"])]
    (jobs.tmp / "app.json").write_text(json.dumps(d))
    r = jobs.trun("run", "--dryrun", "--json", "-s", "local", "./app.json")
    assert r.returncode == 0, r.err
    assert json.loads(r.out)["app"]["roles"][0]["mounts"] == d["roles"][0]["mounts"]


def test_the_torchx_alias_serves_trun_only_without_torchx(tmp_path):
    # `python -m trun.alias PROGRAM` (and `import trun.alias`) serve torchx
    # and torchrunx as trun's own module objects; a real package always wins.
    (tmp_path / "prog.py").write_text(textwrap.dedent("""\
        import sys
        import trun.alias, trun.specs, trun.specs.api
        print(trun.alias.install())
        import torchx, torchx.specs as s, torchx.specs.api as api
        from torchx import specs as s2
        from torchx.components.dist import ddp, torchrun
        from torchx.components import utils
        from torchx.runner import get_runner
        import torchrunx, trun
        print(s is trun.specs, api is trun.specs.api, s2 is s, callable(ddp) and callable(torchrun),
              torchrunx.Launcher is trun.Launcher, s.__file__ == trun.specs.__file__,
              bool(torchx.__file__), sys.argv[1:])
        import torchx.apps.utils.booth_main as booth, trun.apps.utils.booth_main
        print(booth is trun.apps.utils.booth_main)
        try:
            import torchx.tracker  # TorchX's, not served
        except ImportError as e:
            print("no", e.name)
        # pytest's importlib mode asks every finder for a test file's module
        # directly: a name under a part trun lacks is None, not an error.
        finder = next(f for f in sys.meta_path if getattr(f, "trun_alias", False))
        print(finder.find_spec("torchx.specs.test.api_test", None))
        """))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    expected = ["True", "True True True True True True True ['a', '-b']", "True",
                "no torchx.tracker", "None"]
    out = subprocess.run([sys.executable, "-m", "trun.alias", "prog.py", "a", "-b"],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.stdout.splitlines() == expected, out
    # A torchx/ folder without __init__.py (TorchX's test files copied out of
    # its checkout) is a namespace package, not a real torchx: still served.
    (tmp_path / "torchx" / "specs" / "test").mkdir(parents=True)
    (tmp_path / "torchx" / "specs" / "test" / "__init__.py").write_text("")
    out = subprocess.run([sys.executable, "-m", "trun.alias", "prog.py", "a", "-b"],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.stdout.splitlines() == expected, out
    # A real torchx (here: a package in the program's folder) is never shadowed.
    (tmp_path / "torchx" / "__init__.py").write_text("")
    out = subprocess.run([sys.executable, "-m", "trun.alias", "prog.py"],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.stdout.startswith("False\n") and "No module named 'torchx.specs.api'" in out.stderr
    usage = subprocess.run([sys.executable, "-m", "trun.alias"], capture_output=True,
                           text=True, env=env)
    assert usage.returncode == 2 and "python -m trun.alias (SCRIPT | -m MODULE)" in usage.stderr


def test_torchx_names_added():
    h = specs.parse_app_handle("kubernetes://trun/default:echo-bx2")
    assert isinstance(h, tuple) and h._fields == ("scheduler_backend", "session_name", "app_id")
    assert h[2] == "default:echo-bx2" and h[0] == h.scheduler_backend == "kubernetes"
    scheduler, session, app_id = h
    assert (scheduler, session, app_id) == ("kubernetes", "trun", "default:echo-bx2")
    assert h == ("kubernetes", "trun", "default:echo-bx2")
    assert (specs.ALL, specs.MISSING, specs.NONE, specs.UNKNOWN) == \
        ("all", "<MISSING>", "<NONE>", "<UNKNOWN>")
    assert specs.resource(memMB=8 * specs.GiB).memMB == 8192

    ok = specs.AppStatus(specs.AppState.SUCCEEDED)
    assert ok.raise_for_status() is None
    failed = specs.AppStatus(specs.AppState.FAILED, msg="boom", roles=[specs.RoleStatus("r", [
        specs.ReplicaStatus(0, specs.AppState.FAILED, "r", "node1")])])
    with pytest.raises(specs.AppStatusError, match="job did not succeed") as e:
        failed.raise_for_status()
    assert e.value.status is failed

    # RoleStatus.to_json is TorchX's asdict of each replica; AppStatus.to_json
    # is what `trun status --json` prints (hostaddr included), roles filtered.
    assert failed.roles[0].to_json() == {"role": "r", "replicas": [
        {"id": 0, "state": 5, "role": "r", "hostname": "node1",
         "structured_error_msg": specs.NONE, "hostaddr": "node1"}]}
    assert json.loads(json.dumps(failed.to_json()))["roles"][0]["replicas"][0]["state"] == 5
    assert failed.to_json(filter_roles=["other"])["roles"] == []
    assert trun_runner._status_from_json(failed.to_json()) == failed

    e = specs.InvalidRunConfigException("Required run option: partition", "partition", {})
    assert e.cfg_key == "partition" and str(e) == "Required run option: partition. Given: <EMPTY>"
    assert "Given: {'a': 1}" in str(specs.InvalidRunConfigException("bad", "a", {"a": 1}))
    assert "local, slurm, kubernetes" in str(specs.UnknownSchedulerException("k8s"))
    assert Runner(trun="/bin/false").scheduler_backends() == ["local", "slurm", "kubernetes"]


def test_workspace_from_str_as_torchx():
    empty = specs.Workspace.from_str("")
    assert empty == specs.Workspace({}) and not empty and specs.Workspace.from_str(None) == empty
    one = specs.Workspace.from_str("~/src/app")
    assert one.projects == {"~/src/app": ""} and one and one.is_unmapped_single_project()
    assert str(one) == "~/src/app"
    many = specs.Workspace.from_str("/a: app\n/b:\n")
    assert many.projects == {"/a": "app", "/b": ""} and str(many) == "/a:app;/b"
    assert hash(many) == hash(specs.Workspace({"/b": "", "/a": "app"}))
    # The same without PyYAML (a component's interpreter may lack it).
    code = ("import sys; sys.modules['yaml'] = None; sys.path.insert(0, %r)\n"
            "from trun import specs\n"
            "print([specs.Workspace.from_str(s).projects for s in ('', '/a', '/a: app\\n/b:')])"
            % str(ROOT / "python"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[{}, {'/a': ''}, {'/a': 'app', '/b': ''}]", out
    # JSON's string workspace is a path, as the C++ reader takes it.
    role = specs._role_from_dict({"name": "r", "workspace": ""})
    assert role.workspace == specs.Workspace({})
    assert specs._role_from_dict({"name": "r", "workspace": "a: b"}).workspace.projects == \
        {"a: b": ""}


def test_an_unknown_app_is_its_own_kind_of_error(jobs, tmp_path):
    # An unknown app exits 2, as any bad input; the error report trun writes
    # for a program ($TRUN_ERROR_JSON, docs/cli.md) names its kind, which is
    # what the runner reads. No kubeconfig is needed to refuse an id that is
    # not NAMESPACE:NAME.
    report = tmp_path / "error.json"
    env = {**{k: str(v) for k, v in jobs.env.items()}, "TRUN_ERROR_JSON": str(report)}
    cases = [(["status", "--json", "local://trun/nope-123"], "unknown_app", "no local app"),
             (["cancel", "local://trun/nope-123"], "unknown_app", "no local app"),
             (["log", "local://trun/nope-123/r/0"], "unknown_app", "no local app"),
             (["status", "kubernetes://trun/nocolon"], "unknown_app", "not a kubernetes app id"),
             (["status", "echo-123"], "invalid_argument", "not an app handle"),
             (["status", "k8s://trun/x"], "invalid_argument", "no scheduler 'k8s'")]
    for args, kind, needle in cases:
        if report.exists():
            report.unlink()
        r = subprocess.run([TRUN, *args], capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 2, (args, r.stderr)
        got = json.loads(report.read_text())
        assert got["kind"] == kind and got["exit_code"] == 2, (args, got)
        assert needle in got["message"] and got["message"] in r.stderr, (args, got, r.stderr)
    # Without the variable, no report is written.
    report.unlink()
    env.pop("TRUN_ERROR_JSON")
    subprocess.run([TRUN, "status", "local://trun/nope-123"], capture_output=True, env=env,
                   timeout=60)
    assert not report.exists()


FAKE_TRUN = """\
    import json, os, sys
    with open(os.environ["FAKE_CALLS"], "a") as f:
        f.write(" ".join(sys.argv[1:]) + "\\n")
    apps = json.load(open(os.environ["FAKE_APPS"]))
    cmd, target = sys.argv[1], sys.argv[-1]
    handle = "/".join(target.split("/")[:4])
    app = apps.get(handle, {"error": "no local app 'what'"})

    def refuse(message, kind):
        with open(os.environ["TRUN_ERROR_JSON"], "w") as f:
            json.dump({"kind": kind, "exit_code": 2, "message": message}, f)
        sys.stderr.write("trun: error: " + message + "\\n")
        sys.exit(2)
    if "error" in app:
        refuse(app["error"], app.get("kind", "unknown_app"))
    if cmd == "status":
        print(json.dumps({"state": app["state"], "roles": []}))
    elif cmd == "cancel" and app.get("cancel_error"):
        refuse(app["cancel_error"], app.get("cancel_kind", "unknown_app"))
    elif cmd == "log":
        print("r/0 one")
        print("r/0 two")
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A Runner over a stand-in trun answering as each scheduler does."""
    binary = tmp_path / "trun"
    binary.write_text(f"#!{sys.executable}\n" + textwrap.dedent(FAKE_TRUN))
    binary.chmod(0o755)
    monkeypatch.setenv("FAKE_CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("FAKE_APPS", str(tmp_path / "apps.json"))
    (tmp_path / "calls").write_text("")
    runner = Runner(trun=str(binary))

    def apps(d):
        (tmp_path / "apps.json").write_text(json.dumps(d))

    def calls():
        return (tmp_path / "calls").read_text().splitlines()

    runner.apps, runner.calls = apps, calls
    return runner


UNKNOWN = {
    "local://trun/gone": {"error": "no local app 'gone'; `trun list -s local` lists them"},
    "slurm://trun/12": {"error": "no SLURM job 12: neither the controller (squeue) nor sacct "
                                 "knows it; `trun list -s slurm` lists your jobs"},
    "kubernetes://trun/default:gone": {
        "error": "kubernetes app default:gone: the namespace default has no Volcano Job, "
                 "JobSet or Jobs of that name (a cancelled JobSet or Job app is deleted)"},
    "kubernetes://trun/nocolon": {
        "error": "'nocolon' is not a kubernetes app id: expected NAMESPACE:NAME"},
}


def test_runner_unknown_apps_on_every_scheduler(fake):
    fake.apps(dict(UNKNOWN, **{
        "local://trun/done": {"state": "SUCCEEDED"},
        "kubernetes://trun/default:up": {"state": "RUNNING"},
        "kubernetes://trun/default:racing": {
            "state": "RUNNING",
            "cancel_error": "DELETE /apis/batch/v1/namespaces/default/jobs/racing-0: "
                            "not found (404: jobs.batch 'racing-0' not found)"},
        "local://trun/other": {"state": "RUNNING", "cancel_error": "cancel: a refusal",
                               "cancel_kind": "invalid_argument"},
        "slurm://trun/13": {"error": "no scheduler 'slurm'", "kind": "invalid_argument"},
    }))
    for handle in UNKNOWN:
        assert fake.status(handle) is None and fake.describe(handle) is None
        assert fake.wait(handle, wait_interval=0) is None
        # cancel: nothing to do, as TorchX; no `trun cancel` at all.
        assert fake.cancel(handle) is None
        # log_lines raises when called, not when iterated.
        with pytest.raises(specs.UnknownAppException, match=re.escape(handle)):
            fake.log_lines(handle, "r")
    assert not [c for c in fake.calls() if c.split()[0] in ("cancel", "log")]

    fake.cancel("local://trun/done")  # ended: left alone
    assert not [c for c in fake.calls() if c.startswith("cancel")]
    fake.cancel("kubernetes://trun/default:up")
    fake.cancel("kubernetes://trun/default:racing")  # deleted meanwhile: done
    assert [c for c in fake.calls() if c.startswith("cancel")] == \
        ["cancel kubernetes://trun/default:up", "cancel kubernetes://trun/default:racing"]
    with pytest.raises(TrunInvalidInputError, match="a refusal"):
        fake.cancel("local://trun/other")
    # Not an unknown app: a refusal of another kind is raised.
    with pytest.raises(TrunInvalidInputError, match="no scheduler"):
        fake.status("slurm://trun/13")
    with pytest.raises(TrunCommandError):
        fake.log_lines("slurm://trun/13", "r")

    # A malformed handle raises at the call, before any trun runs.
    before = len(fake.calls())
    for call in (lambda: fake.log_lines("nope", "r"), lambda: fake.cancel("nope"),
                 lambda: fake.status("nope")):
        with pytest.raises(specs.MalformedAppHandleException):
            call()
    assert len(fake.calls()) == before

    # A known app's lines are read when iterated.
    lines = fake.log_lines("kubernetes://trun/default:up", "r", 0)
    assert not [c for c in fake.calls() if c.startswith("log")]
    assert list(lines) == ["one\n", "two\n"]
    assert [c for c in fake.calls() if c.startswith("log")] == \
        ["log kubernetes://trun/default:up/r/0"]


def test_runner_unknown_apps_with_the_real_binary(jobs, monkeypatch):
    # What the stand-in says, the binary says: no kubeconfig is needed to
    # refuse an id that is not NAMESPACE:NAME, nor for an unknown local app.
    use_env(monkeypatch, jobs.env)
    runner = Runner(trun=TRUN)
    for handle in ("local://trun/nope-123", "kubernetes://trun/nocolon"):
        assert runner.status(handle) is None and runner.describe(handle) is None
        runner.cancel(handle)
        runner.delete(handle)
        with pytest.raises(specs.UnknownAppException, match="nope-123|not a kubernetes app id"):
            runner.log_lines(handle, "r")
    # As TorchX: a scheduler the runner does not have, before anything runs.
    with pytest.raises(specs.UnknownSchedulerException, match="k8s does not exist"):
        runner.status("k8s://trun/x")
    with pytest.raises(specs.UnknownSchedulerException):
        runner.run_component("utils.echo", [], "k8s")


def test_run_options_as_torchx():
    opts = specs.runopts()
    opts.add("partition", type_=str, required=True, help="where")
    opts.add("tags", type_=List[str], default=["a"], help="labels")
    opts.add("env", type_=Dict[str, str], default=None, help="variables")
    opts.add("exclusive", type_=bool, default=False, help="whole nodes")
    with pytest.raises(ValueError, match="must not specify default"):
        opts.add("x", type_=str, default="d", required=True, help="")
    with pytest.raises(TypeError, match="must be of type"):
        opts.add("x", type_=int, default="d", help="")
    # The last `,`/`;` before a key ends a list; quotes keep separators.
    assert opts.cfg_from_str("tags=v1;v2,partition=gpu,unknown=1") == \
        {"tags": ["v1", "v2"], "partition": "gpu"}
    assert opts.cfg_from_str("env=A:1,B:2;exclusive=YES,partition='a,b=c'") == \
        {"env": {"A": "1", "B": "2"}, "exclusive": True, "partition": "a,b=c"}
    with pytest.raises(ValueError, match="not a valid bool literal"):
        opts.cfg_from_str("exclusive=maybe")
    assert opts.cfg_from_str("") == {}
    # resolve: defaults filled, camelCase keys found, required and types checked.
    assert opts.resolve({"partition": "p"}) == \
        {"partition": "p", "tags": ["a"], "env": None, "exclusive": False}
    assert opts.resolve({"partition": "p", "tags": ["t"]})["tags"] == ["t"]
    assert opts.get("partition") is opts.get("Partition") is not None
    with pytest.raises(specs.InvalidRunConfigException, match="Required run option: partition") \
            as e:
        opts.resolve({})
    assert e.value.cfg_key == "partition"
    with pytest.raises(specs.InvalidRunConfigException,
                       match=r"tags, must be of type: typing.List\[str\], but was: \[1\]"):
        opts.resolve({"partition": "p", "tags": [1]})
    assert opts.cfg_from_json_repr('{"tags": [1, 2], "nope": 1}') == {"tags": ["1", "2"]}
    merged = opts | specs.runopts()
    assert [k for k, _ in merged] == ["partition", "tags", "env", "exclusive"] and len(merged) == 4
    assert "usage:\n        partition=PARTITION,[tags=TAGS]" in repr(opts)
    assert (specs.cases.snake_to_camel("job_dir_path"), specs.cases.camel_to_snake("jobDir")) == \
        ("jobDirPath", "job_dir")
    assert (specs.get_type_name(int), specs.get_type_name(List[str])) == \
        ("int", "typing.List[str]")


def test_torchx_specs_additions(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHX_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRUN_BINARY", TRUN)
    assert specs.TORCHX_HOME("a", "b") == tmp_path / "home" / "a" / "b"
    assert (tmp_path / "home" / "a" / "b").is_dir()
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "x.py").write_text("x")
    (tmp_path / "one.txt").write_text("1")
    specs.Workspace({str(tmp_path / "proj"): "p", str(tmp_path / "one.txt"): "o.txt"}) \
        .merge_into(tmp_path / "out")
    assert (tmp_path / "out" / "p" / "x.py").read_text() == "x"
    assert (tmp_path / "out" / "o.txt").read_text() == "1"

    r = specs.Resource(1, 0, 64, tags={"torchx/named_resources.name": "gpu_4",
                                       "torchx/named_resources.is_fractional": True})
    assert (r.get_resource_name(), r.is_fractional()) == ("gpu_4", True)
    assert (specs.Resource(1, 0, 64).get_resource_name(), specs.Resource(1, 0, 64)
            .is_fractional()) == (None, False)
    key = specs.CapabilityKey("aws", "bw", int)
    key.set(r, 400)
    assert r.capabilities["aws.bw"] == 400 and key.get(r) == 400
    r.capabilities["aws.bw"] = True
    with pytest.raises(TypeError, match="capability `aws.bw` expected `int`, got `bool`"):
        key.get(r)
    assert (specs.NA, specs.app_metadata.ROLES_PREFIX) == ("<<NA>>", "torchx/roles.")
    with pytest.warns(FutureWarning, match="resource\\(h=name\\)"):
        specs.get_named_resources("NULL")

    # Lazy overrides: resolved on access, once, in place; a failure keeps the producer.
    calls = []
    role = specs.Role("r", "img", overrides={"image": lambda: calls.append(1) or "late"})
    assert (role.image, role.image, len(calls)) == ("late", "late", 1)
    assert role.overrides["image"]() == "late"

    async def entry():
        return "main.py"

    role.overrides["entrypoint"] = entry()
    assert role.entrypoint == "main.py"
    assert specs.to_dict(specs.AppDef("a", [role]))["roles"][0]["image"] == "late"

    def boom():
        raise RuntimeError("boom")

    failing = specs.Role("r", "img", overrides={"image": boom})
    with pytest.raises(RuntimeError, match="boom"):
        failing.image
    assert failing.overrides["image"] is boom
    copied = specs.macros.Values("i", "id", "0", "E").apply(
        specs.Role("r", "img", args=["${app_id}"], overrides={"entrypoint": lambda: "e"}))
    assert (copied.args, copied.entrypoint) == (["id"], "e")

    # AppState, AppStatus: TorchX's repr (YAML) and format (one line per replica,
    # a failed one with its structured error's details).
    assert repr(specs.AppState.FAILED) == "FAILED (5)"
    error = json.dumps({"message": {"message": "OOM in step 7", "errorCode": 3,
                                    "extraInfo": {"timestamp": 0}}})
    status = specs.AppStatus(specs.AppState.FAILED, roles=[specs.RoleStatus("t", [
        specs.ReplicaStatus(1, specs.AppState.SUCCEEDED, "t", "h1"),
        specs.ReplicaStatus(0, specs.AppState.FAILED, "t", "h0", structured_error_msg=error)])])
    text = status.format()
    assert text.index("*t[0]:FAILED (exitcode: 3)") < text.index(" t[1]:SUCCEEDED")
    assert "hostname: h0" in text and "error_msg: OOM in step 7" in text
    assert "timestamp: 1970-01-01" in text or "timestamp: 1969-12-31" in text
    assert repr(status).startswith("AppStatus:\n") and "state: FAILED (5)" in repr(status)
    info = specs.AppDryRunInfo({"r": 1}, str)
    with pytest.raises(TypeError):
        info.cfg["x"] = 1


def test_torchx_components_and_schedulers_additions(monkeypatch):
    from trun.components import dist
    from trun.schedulers import get_scheduler_factories
    from trun.schedulers.api import ListAppResponse, Stream, split_lines
    monkeypatch.setenv("TRUN_BINARY", TRUN)
    assert (dist.parse_nnodes("4"), dist.parse_nnodes("2x3"), dist.parse_nnodes("1:2x3")) == \
        ((1, 1, 4, "1"), (2, 2, 3, "2"), (1, 2, 3, "1:2"))
    for bad in ("1x", "x2", ":3", ":2x1", "1x2:3"):
        with pytest.raises(ValueError, match="Invalid format for -j"):
            dist.parse_nnodes(bad)
    assert dist.get_role_name(None, "pkg.train") == "train"
    # dist.torchrun (TorchX's newer name): dist.ddp's app, but with a named
    # host a bare -j counts nodes of one process per GPU.
    assert dist.torchrun("a", script="t.py", j="2x2") == dist.ddp("a", script="t.py", j="2x2")
    nodes = dist.torchrun(script="t.py", h="gpu.large", j="2").roles[0]
    assert nodes.num_replicas == 2 and nodes.resource.gpu == 4
    assert "--nnodes 2 --nproc_per_node 4" in nodes.args[1]
    with pytest.raises(ValueError, match="has no GPUs; give -j 2xNPROC"):
        dist.torchrun(script="t.py", h="cpu.small", j="2")
    from trun.components.structured_arg import StructuredJArgument, StructuredNameArgument
    name = StructuredNameArgument.parse_from
    assert (str(name("exp/", script="a/train.py")), str(name("run", m="pkg.mod"))) == \
        ("exp/train", "default-experiment/run")
    with pytest.raises(ValueError, match="Both main module and script set"):
        name("/", m="a", script="b")
    assert str(StructuredJArgument.parse_from("gpu.large", "2")) == "2x4"
    with pytest.warns(UserWarning, match="does not equal the number of GPUs"):
        StructuredJArgument.parse_from("gpu.large", "2x3")
    with pytest.raises(ValueError, match="`cpu.small` is not a GPU instance"):
        StructuredJArgument.parse_from("cpu.small", "2")
    assert list(get_scheduler_factories()) == ["local", "slurm", "kubernetes"]
    assert Stream("stderr") is Stream.STDERR and split_lines("a\nb") == ["a\n", "b"]
    assert ListAppResponse is trun_runner.ListAppResponse
    with pytest.warns(FutureWarning, match="Custom session names are deprecated"):
        assert trun_runner.get_runner("mine")._name == "mine"
    assert trun_runner.get_runner(cache_size=1)._name == "torchx"
    assert trun_runner.get_runner(cache_size=1).scheduler_params["cache_size"] == 1
    with pytest.raises(ValueError, match="trun has no scheduler 'local_docker'"):
        Runner(scheduler_factories={"local_docker": None}, trun="/bin/false")
    # local_cwd, TorchX's default scheduler, is trun's local, in Python and on the command line.
    only_cwd = Runner(scheduler_factories={"local_cwd": None})
    assert only_cwd.scheduler_backends() == ["local_cwd"]
    with pytest.raises(specs.UnknownSchedulerException):
        only_cwd.dryrun_component("utils.echo", [], scheduler="slurm")
    for r in (only_cwd, trun_runner.get_runner()):
        info = r.dryrun_component("utils.echo", ["--msg", "hi"], scheduler="local_cwd")
        assert info.app.roles[0].args == ["hi"] and info._scheduler == "local"
    opts = [subprocess.run([TRUN, "runopts", "--json", s], capture_output=True, text=True,
                           check=True).stdout for s in ("local", "local_cwd")]
    assert json.loads(opts[0]) == json.loads(opts[1]) and "local" in json.loads(opts[0])
    import io
    from trun.runner import config
    cfg: Dict[str, specs.CfgVal] = {}  # (its options are local's)
    config.load(scheduler="local_cwd", f=io.StringIO("[local_cwd]\nprepend_cwd = True\n"), cfg=cfg)
    assert cfg == {"prepend_cwd": True}


def test_component_test_case_validates_with_the_binary(monkeypatch):
    from trun.components import component_test_base, utils
    monkeypatch.setenv("TRUN_BINARY", TRUN)
    case = component_test_base.ComponentTestCase()
    case.validate(utils, "echo")
    with pytest.raises(AssertionError, match="Function nope not found"):
        case.validate(utils, "nope")


def test_builders_parse_component_arguments_as_torchx():
    from typing import Annotated, Optional
    from trun.specs import builders, file_linter

    def comp(name: str, *rest: str, n: int = 1, tags: Optional[List[int]] = None,
             env: Optional[Dict[str, str]] = None, debug: bool = False,
             cn: Annotated[str, "-cn"] = "c") -> specs.AppDef:
        """Runs it.

        Args:
            name: the job's name
            n: how many
        """
        return specs.AppDef(name, [specs.Role(name, "img", args=[str(n), *rest, cn],
                                              env=env or {})])

    args = builders.component_args_from_str(
        comp, ["--name=x", "-n", "3", "--tags", "1,2", "--env", "A=1,B=a,b", "--debug", "True",
               "-cn", "z", "--", "a", "--b"])
    assert args == builders.ComponentArgs(
        {"name": "x"}, ["a", "--b"],
        {"n": 3, "tags": [1, 2], "env": {"A": "1", "B": "a,b"}, "debug": True, "cn": "z"})
    app = builders.materialize_appdef(comp, ["--name", "y"], cmpnt_defaults={"n": "2"},
                                      config={"cn": "from-config"})
    assert app.roles[0].args == ["2", "from-config"]
    # Arguments win over config; a missing required parameter is argparse's error.
    assert builders.parse_args(comp, ["--name", "y", "-cn", "cli"], config={"cn": "cfg"}).cn \
        == "cli"
    with pytest.raises(SystemExit):
        builders.parse_args(comp, [])
    help_text = builders._create_args_parser(comp).format_help()
    assert "Runs it." in help_text and "the job's name (required)" in help_text
    assert "how many (default: 1)" in help_text
    assert file_linter.get_fn_docstring(comp)[1]["env"] == " "
    with pytest.raises(TypeError, match="must return|returns `AppDef`"):
        builders.materialize_appdef(lambda x=1: 1, [])


def test_file_linter_validates_as_torchx(tmp_path):
    from trun.specs import file_linter
    path = tmp_path / "comp.py"
    path.write_text(textwrap.dedent("""\
        import sys
        from trun import specs

        def bad(a, b: tuple[str], *rest: str) -> int:
            '''Summary.

            More.
            '''

        if sys.version_info >= (3, 8):
            def good(a: int) -> specs.AppDef:
                ...
        """))
    messages = file_linter.validate(str(path), "bad")
    assert [(m.line, m.description) for m in messages] == [
        (4, "Missing type annotation for argument 'a' in function 'bad'"),
        (4, "Unsupported tuple type 'tuple[str]': single-element tuples are valid typing but "
            "not supported for components; expected element types (tuple[T1, T2, ...]) for "
            "argument 'b: tuple[str]' in function 'bad'"),
        (4, "Function: bad has incorrect return annotation, supported annotation: AppDef")]
    assert file_linter.validate(str(path), "bad", [file_linter.ReturnTypeValidator()]) == \
        messages[2:]
    assert file_linter.validate(str(path), "bad", []) == []
    assert file_linter.validate(str(path), "good") == []  # defined under `if`
    assert [m.description for m in file_linter.validate(str(path), "nope")] == \
        ["Function nope not found"]
    path.write_text("def (")
    assert file_linter.validate(str(path), "x")[0].description == "invalid syntax"


def test_overlays_as_torchx(tmp_path):
    # trun.specs.overlays is TorchX's torchx.specs.overlays: stored in
    # metadata (accumulating, operator keys kept), applied by apply_overlay.
    from trun.specs.overlays import (DEL, JOIN, PUT, OverlaySpec, apply_overlay, get_overlay,
                                     set_overlay, validate_overlay)
    base = {"spec": {"cpu": "1"}, "tags": ["a"], "n": 1,
            "containers": [{"name": "main", "image": "v1"}], "old": True}
    apply_overlay(base, {"spec": {"mem": "1Gi"}, "tags": ["b"], "n": "HIGH", DEL("old"): None,
                         JOIN("containers", on="name"): [{"name": "main", "cpu": "2"},
                                                         {"name": "side"}]})
    assert base == {"spec": {"cpu": "1", "mem": "1Gi"}, "tags": ["a", "b"], "n": "HIGH",
                    "containers": [{"name": "main", "image": "v1", "cpu": "2"},
                                   {"name": "side"}]}
    apply_overlay(base, {PUT("tags"): ["only"], "containers": ({"name": "t"},)})
    assert base["tags"] == ["only"] and base["containers"] == [{"name": "t"}]
    with pytest.raises(TypeError, match="type mismatch for attr: `tags`"):
        apply_overlay(base, {"tags": "x"})
    with pytest.raises(TypeError, match="JOIN on `tags` needs a list of dicts"):
        apply_overlay({}, {JOIN("tags", on="name"): ["x"]})

    role = specs.Role(name="trainer", image="img", entrypoint="train.py")
    set_overlay(role, "kubernetes", "V1Pod", {"spec": {"tolerations": [{"key": "gpu"}]}})
    set_overlay(role, "kubernetes", "V1Pod", {"spec": {PUT("tolerations"): [],
                                                       "nodeSelector": {"gpu": "a100"}}})
    assert get_overlay(role, "kubernetes", "V1Pod") == {
        "spec": {PUT("tolerations"): [], "nodeSelector": {"gpu": "a100"}}}
    assert get_overlay(role, "kubernetes", "Other") == {}  # marked: no flat fallback
    with pytest.raises(ValueError, match="reserved"):
        set_overlay(role, "kubernetes", "__torchx_overlays__", {})
    flat = specs.Role(name="f", image="img", metadata={"sched": {"priority": "high"}})
    assert get_overlay(flat, "sched", "JobSpec") == {"priority": "high"}
    assert get_overlay(flat, "sched", "JobSpec", flat_fallback=False) == {}
    (tmp_path / "o.yaml").write_text("pod:\n  spec:\n    tolerations: !!python/tuple\n"
                                     "      - key: gpu\n")
    from_file = specs.Role(name="y", image="img", metadata={"k": f"file://{tmp_path}/o.yaml"})
    assert get_overlay(from_file, "k", "pod") == {"spec": {"tolerations": ({"key": "gpu"},)}}
    with pytest.raises(ValueError, match=r"`V1Pod.env`"):
        OverlaySpec("kubernetes", "V1Pod", blocklist=("env",)).set(role, {PUT("env"): []})
    with pytest.raises(ValueError, match="misplaced keys: {'retries'}. Use JobConfig."):
        validate_overlay({"retries": 1}, forbidden_keys={"retries"}, suggestion="Use JobConfig.")

    # trun's kubernetes scheduler applies the V1Pod overlay, operators included.
    app = specs.AppDef(name="train", roles=[role])
    (tmp_path / "app.json").write_text(specs.to_json(app))
    env = dict(os.environ, HOME=str(tmp_path), KUBECONFIG="", TRUNCONFIG="")
    r = subprocess.run([TRUN, "run", "-s", "kubernetes", "--dryrun", "--manifests",
                        "-cfg", "queue=default,tolerations=gpu:NoSchedule", "./app.json"],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    import yaml
    job = next(d for d in yaml.safe_load_all(r.stdout) if d and d["kind"] == "Job")
    pod = job["spec"]["tasks"][0]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpu": "a100"} and pod["tolerations"] == []
    assert "V1Pod" not in pod and "__torchx_overlays__" not in job["spec"]["tasks"][0]["template"]


def test_torchxconfig_and_scheduler_objects_as_torchx(tmp_path, monkeypatch):
    import dataclasses
    import io
    from trun import alias
    from trun.runner import config
    from trun.schedulers import get_scheduler_factories
    from trun.schedulers.api import Scheduler, StructuredOpts
    monkeypatch.setenv("TRUN_BINARY", TRUN)
    monkeypatch.delenv("TORCHXCONFIG", raising=False)
    assert alias.target("torchx.runner.config") == "trun.runner.config"
    assert alias.target("torchx.settings") == "trun.settings"

    # The binary's schedulers as TorchX's Scheduler objects, options from `trun runopts`.
    local = get_scheduler_factories()["local"](session_name="s")
    assert isinstance(local, Scheduler) and local.backend == "local"
    opts = local.run_opts()
    assert (opts.get("log_dir").opt_type, opts.get("log_dir").default) == (str, None)
    assert (opts.get("prepend_cwd").opt_type, opts.get("prepend_cwd").default) == (bool, False)
    assert opts.get("stop_timeout").default == 10.0 and "SIGKILL" in opts.get("stop_timeout").help
    kube = get_scheduler_factories()["kubernetes"]("s").run_opts()
    assert kube.get("node_selector").is_type_dict_of_str and kube.get("tolerations").is_type_list_of_str
    role = specs.Role(name="r", image="i", entrypoint="echo", args=["hi"], resource=specs.resource())
    info = local.submit_dryrun(specs.AppDef("a", roles=[role]), {"prepend_cwd": True})
    assert info._scheduler == "local" and info.app.roles[0].args == ["hi"]
    assert info.cfg["prepend_cwd"] is True and info.cfg["stop_timeout"] == 10.0
    # Each role's pre_proc sees the request once, on either path, as in TorchX.
    calls = []

    class Hooked(specs.Role):
        def pre_proc(self, scheduler, dryrun_info):
            calls.append(scheduler)
            return dryrun_info

    hooked = specs.AppDef("h", roles=[Hooked(name="r", image="i", entrypoint="echo",
                                             resource=specs.resource())])
    local.submit_dryrun(hooked, {})
    from trun.runner.api import Runner
    with Runner("s") as r:
        r.dryrun(hooked, "local")
    assert calls == ["local", "local"]
    # The binary's dry run refuses a role without a resource, in TorchX's words.
    with pytest.raises(ValueError, match=r"No resource for role: r \(image: i\)"):
        local.submit_dryrun(specs.AppDef("a", roles=[specs.Role(name="r", image="i")]), {})

    # .torchxconfig: the first file's value wins, cfg wins over files, casts as cast_to_type.
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    (home / ".torchxconfig").write_text(
        "[local]\nlog_dir = /h\n\n[component:dist.ddp]\nj = 1x2\n\n[component:]\nx = y\n")
    (cwd / ".torchxconfig").write_text(
        "[local]\nlog_dir = /c\nprepend_cwd = yes\nstop_timeout = None\nnope = 1\n\n"
        "[component:dist.ddp]\nj = 2x2\nimage = img\n")
    cfg = {"stop_timeout": 3.0}
    config.apply("local", cfg, dirs=[str(home), str(cwd)])
    assert cfg == {"stop_timeout": 3.0, "log_dir": "/h", "prepend_cwd": True}
    monkeypatch.setattr(config, "DEFAULT_CONFIG_DIRS", [str(cwd)])
    cfg = {}
    config.apply("local", cfg)
    assert cfg == {"log_dir": "/c", "prepend_cwd": True, "stop_timeout": None}
    assert config.load_sections("component", [str(home), str(cwd)]) == \
        {"dist.ddp": {"j": "1x2", "image": "img"}}
    assert config.get_config("component", "dist.ddp", "image", [str(cwd)]) == "img"
    assert config.get_configs("component", "nope", [str(cwd)]) == {}
    monkeypatch.setenv("TORCHXCONFIG", str(home / ".torchxconfig"))
    assert config.find_configs([str(cwd)]) == [str(home / ".torchxconfig")]
    monkeypatch.setenv("TORCHXCONFIG", "")
    assert config.find_configs([str(cwd)]) == []
    monkeypatch.setenv("TORCHXCONFIG", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="TORCHXCONFIG=.*missing is not a file"):
        config.find_configs()
    with pytest.raises(ValueError, match="`local_docker` is not a registered scheduler; the "
                                         "schedulers are local, slurm, kubernetes"):
        config.load("local_docker", io.StringIO(""), {})
    # A dump of every scheduler loads back as every option at its default.
    out = io.StringIO()
    config.dump(out)
    for name in ("local", "slurm", "kubernetes"):
        out.seek(0)
        cfg = {}
        config.load(name, out, cfg)
        defaults = {k: o.default for k, o in get_scheduler_factories()[name]("s").run_opts()}
        assert cfg == defaults

    # StructuredOpts: fields as options (help from the string under each), groups as FIELD.NAME.
    @dataclasses.dataclass
    class Inner(StructuredOpts):
        x: str | None = None
        """the x"""
        y: List[str] = dataclasses.field(default_factory=lambda: ["a"])

    @dataclasses.dataclass
    class Outer(StructuredOpts):
        need: int
        """needed"""
        inner: Inner = dataclasses.field(default_factory=Inner)

    ro = Outer.as_runopts()
    assert [k for k, _ in ro] == ["need", "inner.x", "inner.y"]
    assert ro.get("need").is_required and ro.get("need").help == "needed"
    assert (ro.get("inner.x").help, ro.get("inner.y").default) == ("the x", ["a"])
    o = Outer.from_cfg({"need": 3, "inner.x": "v", "other": 1})
    assert (o.need, o.inner.x, o.inner.y) == (3, "v", ["a"])
    assert dict(o) == {"need": 3, "inner.x": "v", "inner.y": ["a"]}
    assert (o | {"need": 4})["need"] == 4
    # As TorchX's: camelCase names, an option named by cfg_key, an optional
    # group left None (no options), the groups' help under FIELD.NAME.
    @dataclasses.dataclass
    class Named(StructuredOpts):
        mail_user: str | None = dataclasses.field(default=None, metadata={"cfg_key": "mail-user"})
        """who gets mail"""
        job_queue: str = "q"
        group: Inner | None = None

    n = Named.from_cfg({"mail-user": "me", "jobQueue": "big"})
    assert (n.mail_user, n.job_queue, n.group) == ("me", "big", None)
    assert list(n) == ["mail-user", "job_queue"] and len(n) == 2
    assert n["mail-user"] == "me" and n["jobQueue"] == "big" and "job_queue" in n
    assert "group.x" not in n and "from_cfg" not in n and n.get("group.x") is None
    assert [k for k, _ in Named.as_runopts()] == ["mail-user", "job_queue", "group.x", "group.y"]
    assert Named.as_runopts().get("mail-user").help == "who gets mail"
    assert Outer.get_docstrings()["inner.x"] == "the x"
    assert Named.from_cfg({"group.x": "g"}).group.x == "g"


def test_ids_and_names_as_torchx(monkeypatch):
    # TorchX's app ids: the same id from the same 8 bytes of os.urandom, a
    # letter first, unaffected by random.seed; names Kubernetes takes.
    import random

    from trun import alias
    from trun.schedulers.ids import make_unique, random_id
    from trun.util.strings import normalize_str
    assert alias.target("torchx.schedulers.ids") == "trun.schedulers.ids"
    assert alias.target("torchx.util.strings") == "trun.util.strings"
    assert (random_id(0), random_id(-1)) == ("", "")
    ids = {make_unique("job") for _ in range(50)}
    assert len(ids) == 50 and all(i.startswith("job-") and i[4].isalpha() for i in ids)
    assert all(len(random_id(6)) <= 6 for _ in range(50))
    random.seed(0)
    a = random_id()
    random.seed(0)
    assert random_id() != a
    monkeypatch.setattr("os.urandom", lambda n: bytes(range(n)))
    assert (random_id(), random_id(6), make_unique("t")) == ("fzfjxlmln9", "fzfjxl", "t-fzfjxlmln9")
    assert [normalize_str(s) for s in ("-/_a/b/CD!123!", "_-job", "!!!")] == ["abcd123", "job", ""]


def test_finder_looks_components_up_as_torchx(tmp_path, monkeypatch):
    from trun.specs import finder
    monkeypatch.setattr(finder, "_components", None)
    builtins = finder.get_components()
    assert {"dist.ddp", "dist.spmd", "utils.echo", "utils.sh"} <= set(builtins)
    echo = finder.get_component("utils.echo")
    assert (echo.name, echo.fn_name, echo.validation_errors) == ("utils.echo", "echo", [])
    assert all(not c.validation_errors for c in builtins.values())
    with pytest.raises(finder.ComponentNotFoundException, match="did you mean utils.echo"):
        finder.get_component("utils.ech")
    f = tmp_path / "comps.py"
    f.write_text(textwrap.dedent('''
        from trun import specs
        def good(name: str) -> specs.AppDef:
            """Makes an app.

            Args:
                name: its name
            """
            return specs.AppDef(name)
        def nodoc(name: str) -> specs.AppDef:
            return specs.AppDef(name)
        def bad(name) -> specs.AppDef:
            return specs.AppDef(name)
        '''))
    good = finder.get_component(f"{f}:good")
    assert (good.name, good.description, good.fn("x").name) == (f"{f}:good", "Makes an app.", "x")
    assert finder.get_component(f"{f}:nodoc").description.startswith(
        "nodoc TIP: improve this help string by adding a docstring")
    with pytest.raises(finder.ComponentValidationException, match="Missing type annotation"):
        finder.get_component(f"{f}:bad")
    with pytest.raises(finder.ComponentNotFoundException, match="Function nope not found"):
        finder.get_component(f"{f}:nope")
    [bad] = finder.CustomComponentsFinder(str(f), "bad").find(None)
    assert len(bad.validation_errors) == 1
    import trun.components as pkg
    import trun.components.dist as dist
    assert (finder.module_relname(pkg, relative_to=pkg), finder.module_relname(dist, pkg)) == \
        ("", "dist")
    with pytest.raises(ValueError):
        finder.module_relname(pkg, relative_to=dist)
    src = tmp_path / "echo_copy.py"
    src.write_text(finder.get_builtin_source("utils.echo"))
    assert finder.get_component(f"{src}:echo").validation_errors == []
    # Packages registered under torchx.components replace the builtins; `_*` adds no prefix.
    from importlib.metadata import EntryPoint, EntryPoints
    group = "torchx.components"
    monkeypatch.setattr(finder.metadata, "entry_points", lambda group: EntryPoints([
        EntryPoint("_0", "trun.components.dist", group),
        EntryPoint("u", "trun.components.utils", group)]))
    monkeypatch.setattr(finder, "_components", None)
    names = set(finder.get_components())
    assert {"ddp", "u.echo"} <= names and "dist.ddp" not in names and "echo" not in names
    # As TorchX's: a package's own __init__ and `_name` functions hold components too;
    # private modules (trun's helpers) and functions not returning an AppDef do not.
    (tmp_path / "userpkg_comps").mkdir()
    for module, body in {"__init__": "def comp_a() -> specs.AppDef:\n    return specs.AppDef('a')\n",
                         "m": "def _hidden() -> specs.AppDef:\n    return specs.AppDef('h')\n"
                              "def helper() -> int:\n    return 1\n"}.items():
        (tmp_path / "userpkg_comps" / f"{module}.py").write_text("from trun import specs\n" + body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(finder.metadata, "entry_points", lambda group: EntryPoints([
        EntryPoint("foo", "userpkg_comps", group)]))
    monkeypatch.setattr(finder, "_components", None)
    assert set(finder.get_components()) == {"foo.comp_a", "foo.m._hidden"}
    assert not [n for n in builtins if "builtin" in n or n.startswith("_")]


PLUGIN_PROGRAM = """\
import json, sys, threading
import trun.alias
from torchx import plugins, specs
from torchx.plugins import PluginType
from torchx.runtime.tracking import FsspecResultTracker
from torchx.util import entrypoints
out = {}
nr = specs.named_resources
out["lazy"] = nr._factories is None and not [m for m in sys.modules if m.startswith("torchx_plugins")]
for n in ("mygpu", "mygpu_8", "mygpu_4", "mygpu_1", "big", "ep_res", "custom_res", "gpu.small"):
    r = nr[n] if n in nr else None
    out[n] = None if r is None else [r.gpu, r.memMB, r.get_resource_name(), r.is_fractional()]
reg = plugins.registry()
out["names"] = sorted(reg.get(PluginType.NAMED_RESOURCE))
out["schedulers"] = sorted(reg.get(PluginType.SCHEDULER))
out["errors"] = sorted((e.module, e.name, e.error.split(":")[0][:40])
                       for e in reg.load_errors())
out["yaml_has_aliases"] = "aliases: [big]" in str(reg)
out["to_dict"] = [i["name"] for i in reg.to_dict()["named_resource"] if "error" not in i]
try:
    plugins.halve_mem_down_to(minGiB=1)(specs.Resource(cpu=1, gpu=0, memMB=96 * 1024))
except ValueError as e:
    out["halve"] = str(e)[:30]
out["halve_ok"] = plugins.halve_mem_down_to(minGiB=12)(specs.Resource(1, 0, 96 * 1024))
out["ep_sched"] = entrypoints.load_group("torchx.schedulers")["epsched"]("sess")
out["ep_default"] = entrypoints.load("torchx.schedulers", "nope", default=7)
from torchx.schedulers import get_scheduler_factories
from torchx.runner import get_runner
out["factories"] = list(get_scheduler_factories())
out["backends"] = get_runner().scheduler_backends()
from torchx.runtime.tracking.api import FsspecResultTracker as ApiTracker
t = FsspecResultTracker(sys.argv[1])
t["trial/1"] = {"loss": 0.5}
out["tracker"] = [ApiTracker(sys.argv[1])["trial/1"], t["none"], ApiTracker is FsspecResultTracker]
print(json.dumps(out))
"""


def test_plugins_register_and_discover_as_torchx(tmp_path):
    # A user's package registers named resources and a scheduler in the two
    # ways TorchX discovers: torchx_plugins.* modules and entry points (a real
    # dist-info on sys.path); trun.specs.named_resources serves them.
    ns = tmp_path / "site" / "torchx_plugins" / "named_resources"
    ns.mkdir(parents=True)
    (ns / "mine.py").write_text(textwrap.dedent("""\
        from torchx.plugins import register, powers_of_two_gpus
        from torchx.specs import Resource

        @register.named_resource(aliases=["big"], fractionals=powers_of_two_gpus)
        def mygpu(fractional: float = 1.0) -> Resource:
            return Resource(cpu=int(96 * fractional), gpu=int(8 * fractional),
                            memMB=int(1024 * 1024 * fractional))

        @register.scheduler()
        def misplaced(session_name: str): ...
        """))
    (ns / "broken.py").write_text("raise RuntimeError('boom')\n")
    (ns / "deep").mkdir()  # a folder without __init__.py is scanned too
    (ns / "deep" / "dup.py").write_text(textwrap.dedent("""\
        from torchx.plugins import register
        from torchx.specs import Resource

        @register.named_resource(name="mygpu")
        def other() -> Resource:
            return Resource(cpu=1, gpu=0, memMB=1)
        """))
    eps = tmp_path / "site" / "userpkg-1.0.dist-info"
    eps.mkdir()
    (eps / "METADATA").write_text("Metadata-Version: 2.1\nName: userpkg\nVersion: 1.0\n")
    (eps / "entry_points.txt").write_text(
        "[torchx.named_resources]\nep_res = userres:ep_res\n\n"
        "[torchx.schedulers]\nepsched = userres:sched\n")
    (tmp_path / "site" / "userres.py").write_text(textwrap.dedent("""\
        from torchx.specs import Resource
        NAMED_RESOURCES = {"custom_res": lambda: Resource(cpu=2, gpu=0, memMB=3)}
        def ep_res():
            return Resource(cpu=4, gpu=2, memMB=4096)
        def sched(session_name, **kwargs):
            return "scheduler for " + session_name
        """))
    (tmp_path / "prog.py").write_text(PLUGIN_PROGRAM)
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'python'}{os.pathsep}{tmp_path / 'site'}",
               TRUN_BINARY=TRUN, TORCHX_CUSTOM_NAMED_RESOURCES="userres")
    env.pop("TORCHX_PLUGINS_SOURCE", None)
    run = subprocess.run([sys.executable, "prog.py", str(tmp_path / "results")],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["lazy"] is True
    assert out["mygpu"] == [8, 1048576, "mygpu", False]
    assert out["big"] == out["mygpu"]
    assert out["mygpu_8"] == [8, 1048576, "mygpu_8", False]
    assert out["mygpu_4"] == [4, 524288, "mygpu_4", True]
    assert out["mygpu_1"] == [1, 131072, "mygpu_1", True]
    assert out["ep_res"][:2] == [2, 4096] and out["custom_res"][:2] == [0, 3]
    assert out["gpu.small"][:2] == [1, 32768]  # trun's own table still there
    assert out["names"] == ["big", "ep_res", "mygpu", "mygpu_1", "mygpu_2", "mygpu_4",
                            "mygpu_8"]
    assert out["schedulers"] == ["epsched"]
    mods = [e[0] for e in out["errors"]]
    assert "torchx_plugins.named_resources.broken" in mods  # import failure kept, not raised
    assert ["torchx_plugins.named_resources.deep.dup", "mygpu",
            "duplicate — already discovered with a DIFFERENT value, keeping first occurrence"[:40]] \
        in out["errors"]
    assert ["torchx_plugins.named_resources.mine", "misplaced",
            "is a scheduler but is under the named_re"] in out["errors"]
    assert out["yaml_has_aliases"] and out["to_dict"] == ["mygpu", "ep_res"]
    assert out["halve"].startswith("`minGiB` must be >= the odd")
    assert out["halve_ok"] == {"1.0": "96", "0.5": "48", "0.25": "24", "0.125": "12"}
    assert out["ep_sched"] == "scheduler for sess" and out["ep_default"] == 7
    # Registered scheduler plug-ins join the binary's (and a Runner makes them).
    assert out["factories"] == out["backends"] == ["local", "slurm", "kubernetes", "epsched"]
    assert out["tracker"] == [{"loss": 0.5}, {}, True]
    assert (tmp_path / "results" / "trial" / "1").is_file()
    # TORCHX_PLUGINS_SOURCE picks the channels: 2 = entry points only; bad values say so.
    env["TORCHX_PLUGINS_SOURCE"] = "2"
    run = subprocess.run([sys.executable, "prog.py", str(tmp_path / "results")],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert json.loads(run.stdout)["names"] == ["ep_res"], run.stderr
    env["TORCHX_PLUGINS_SOURCE"] = "9"
    run = subprocess.run([sys.executable, "prog.py", str(tmp_path / "results")],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert run.returncode != 0 and "TORCHX_PLUGINS_SOURCE='9' is invalid" in run.stderr


def test_named_resource_lookup_while_discovering_is_refused(tmp_path, monkeypatch):
    # A plug-in that looks a resource up while it is imported gets TorchX's
    # RuntimeError, recorded as its load error; the other lookups go on.
    from trun import plugins
    ns = tmp_path / "torchx_plugins" / "named_resources"
    ns.mkdir(parents=True)
    (ns / "early.py").write_text(textwrap.dedent("""\
        from trun.specs import named_resources
        NULL = named_resources["NULL"]
        """))
    monkeypatch.setenv("TRUN_BINARY", TRUN)
    monkeypatch.syspath_prepend(str(tmp_path))
    lib = specs.named_resources
    assert isinstance(lib, specs._NamedResourcesLibrary)
    plugins.registry().clear()
    lib.reset()
    try:
        assert lib["NULL"] == specs.NULL_RESOURCE and "gpu.small" in lib
        [err] = plugins.registry().load_errors(plugins.PluginType.NAMED_RESOURCE)
        assert err.module == "torchx_plugins.named_resources.early"
        assert "re-entrant named-resource lookup" in err.error
    finally:
        plugins.registry().clear()
        lib.reset()
        for name in [m for m in sys.modules if m.startswith("torchx_plugins")]:
            del sys.modules[name]


def test_runner_runs_python_schedulers_as_torchx(monkeypatch, tmp_path):
    # A scheduler factory that is not the binary's is a TorchX Scheduler
    # plug-in: the Runner calls it as TorchX's does (TorchX's variables in a
    # copy of the app, workspaces built, events with the session id).
    import concurrent.futures
    from unittest import mock
    from trun.runner import api as runner_api, events
    from trun.schedulers.api import DescribeAppResponse, ListAppResponse, Scheduler
    from trun.util import session
    from trun.workspace import WorkspaceMixin
    monkeypatch.setenv("TRUN_BINARY", TRUN)
    monkeypatch.delenv("TORCHX_PARENT_RUN_ID", raising=False)
    monkeypatch.setenv("TORCHX_TRACKERS", "t1")
    monkeypatch.setenv("TORCHX_TRACKER_T1_CONFIG", "s3://c")
    monkeypatch.setenv("TORCHXCONFIG", "")
    calls = []

    class Plain(Scheduler):
        def __init__(self, session_name, **kwargs):
            super().__init__("mine", session_name)
            self.kwargs, self.apps, self.closed = kwargs, {}, 0

        def _run_opts(self):
            opts = specs.runopts()
            opts.add("n", type_=int, default=1, help="a number")
            return opts

        def _submit_dryrun(self, app, cfg):
            return specs.AppDryRunInfo(app, repr)

        def schedule(self, dryrun_info):
            self.apps["a1"] = dryrun_info.request
            return "a1"

        def describe(self, app_id):
            if app_id not in self.apps:
                return None
            return DescribeAppResponse(app_id=app_id, state=specs.AppState.RUNNING,
                                       ui_url="http://ui", roles=self.apps[app_id].roles)

        def list(self, cfg=None):
            return [ListAppResponse(app_id=a, state=specs.AppState.RUNNING) for a in self.apps]

        def _cancel_existing(self, app_id):
            calls.append(("cancel", app_id))

        def log_iter(self, app_id, role_name, k=0, regex=None, since=None, until=None,
                     should_tail=False, streams=None):
            calls.append(("log", app_id, role_name, k, regex, should_tail))
            return iter(["l1\n"])

        def close(self):
            self.closed += 1

    class Mine(WorkspaceMixin[None], Plain):
        def build_workspace_and_update_role(self, role, workspace, cfg):
            role.image = f"{role.image}+{workspace}"

    made = []

    def factory(session_name, **kwargs):
        made.append(Mine(session_name, **kwargs))
        return made[-1]

    role = specs.Role(name="r", image="img", entrypoint="echo", resource=specs.resource(),
                      overrides={"args": concurrent.futures.Future()})
    app = specs.AppDef("app", roles=[role])
    with mock.patch.object(events, "record") as record:
        with Runner("s", scheduler_factories={"mine": factory, "local": None},
                    scheduler_params={"p": 1}, trun=TRUN) as r:
            assert r.scheduler_backends() == ["mine", "local"] and not made
            info = r.dryrun(app, "mine", cfg={"n": 2}, workspace="/ws", parent_run_id="p7")
            sub = info.request.roles[0]
            # As TorchX: TORCHX_* variables are scheduler parameters too.
            assert made[0].kwargs == {"p": 1, "trackers": "t1", "tracker_t1_config": "s3://c"}
            assert info._scheduler == "mine"
            assert info.cfg == {"n": 2} and sub.image == "img+/ws"
            assert sub.env == {"TORCHX_JOB_ID": "mine://s/${app_id}",
                               "TORCHX_INTERNAL_SESSION_ID": session.CURRENT_SESSION_ID,
                               "TORCHX_PARENT_RUN_ID": "p7", "TORCHX_TRACKERS": "t1",
                               "TORCHX_TRACKER_T1_CONFIG": "s3://c"}
            # The caller's app is left alone; the overrides dict is shared.
            assert role.env == {} and role.image == "img" and sub.overrides is role.overrides
            handle = r.schedule(info)
            assert handle == "mine://s/a1"
            st = r.status(handle)
            assert st.state == specs.AppState.RUNNING and st.ui_url == "http://ui"
            assert r.describe(handle) is info.app
            assert r.list("mine") == [ListAppResponse("a1", specs.AppState.RUNNING, handle)]
            assert list(r.log_lines(handle, "r", 0, "x", should_tail=True)) == ["l1\n"]
            r.cancel(handle)
            r.delete(handle)  # TorchX's default delete is cancel
            assert calls == [("log", "a1", "r", 0, "x", True), ("cancel", "a1"),
                             ("cancel", "a1")]
            assert r.status("mine://s/gone") is None and r.describe("mine://s/gone") is None
            with pytest.raises(specs.UnknownAppException):
                r.log_lines("mine://s/gone", "r")
            assert r.cfg_from_str("mine", "n=3") == {"n": 3}
            assert r.scheduler_run_opts("local").get("stop_timeout").default == 10.0
            assert isinstance(r.run(app, "mine", dryrun=True), specs.AppDryRunInfo)
            with pytest.raises(ValueError, match="Non-positive replicas"):
                r.dryrun(specs.AppDef("z", roles=[specs.Role("z", "i", entrypoint="e",
                                                             num_replicas=0)]), "mine")
            with pytest.raises(specs.UnknownSchedulerException):
                r.dryrun(app, "other")
        assert [m.closed for m in made] == [1]
    # Every call recorded one event, each with this process's session id.
    assert record.call_count > 10
    assert {c.args[0].session for c in record.call_args_list} == {session.CURRENT_SESSION_ID}
    assert {"dryrun", "schedule", "status", "cancel", "list"} <= \
        {c.args[0].api for c in record.call_args_list}
    event = events.TorchxEvent.deserialize(record.call_args_list[0].args[0].serialize())
    assert event == record.call_args_list[0].args[0]
    # Recorded as TorchX does: to the destination's own logger, `null` by default.
    events.record(event)
    assert not events._get_or_create_logger("null").propagate

    # A scheduler without workspaces refuses one; discovery is
    # trun.runner.api.get_scheduler_factories (TorchX's patch point).
    with mock.patch.object(runner_api, "get_scheduler_factories",
                           return_value={"plain": Plain}):
        with runner_api.get_runner() as r:
            assert r.scheduler_backends() == ["plain"]
            with pytest.raises(ValueError, match="does not support workspaces"):
                r.dryrun(app, "plain", workspace="/ws")
