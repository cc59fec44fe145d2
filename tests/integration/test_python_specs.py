"""trun.specs: TorchX's names, fields and defaults, and the one JSON schema
both sides read (Python's to_dict accepted by `trun run --dryrun --json`
unchanged); the torchx import shim. Fast: no app is run."""
import json
import subprocess
import sys

import pytest

from conftest import ROOT, TRUN
from torchx_helpers import jobs  # noqa: F401 (fixture)

sys.path.insert(0, str(ROOT / "python"))
from trun import specs  # noqa: E402


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
    monkeypatch.setattr(specs, "named_resources", specs._NamedResources())
    assert specs.resource(h="gpu.small") == specs.Resource(8, 1, 32768)
    p4d = specs.named_resources["aws_p4d.24xlarge"]
    assert (p4d.memMB, p4d.devices) == (1132416, {"vpc.amazonaws.com/efa": 4})
    assert p4d.capabilities == {"node.kubernetes.io/instance-type": "p4d.24xlarge"}
    assert specs.named_resources["NULL"] == specs.NULL_RESOURCE
    with pytest.raises(KeyError, match="no named resource 'gpu.tiny'"):
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


def test_the_torchx_shim_is_installed_only_without_torchx(tmp_path):
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from trun import _torchx, specs\n"
            "print(_torchx.install())\n"
            "import torchx.specs as s, torchx.specs.api as api\n"
            "from torchx import specs as s2\n"
            "from torchx.components.dist import ddp\n"
            "from torchx.components import utils\n"
            "from torchx.runner import get_runner\n"
            "print(s.AppDef is specs.AppDef is api.AppDef is s2.AppDef, callable(ddp))\n"
            "try:\n    import torchx.schedulers\nexcept ImportError as e:\n    print('no', e.name)\n"
            % str(ROOT / "python"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split("\n")[:3] == ["True", "True True", "no torchx.schedulers"], out
    (tmp_path / "torchx").mkdir()
    (tmp_path / "torchx" / "__init__.py").write_text("")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.stdout.startswith("False\n") and "No module named 'torchx.specs'" in out.stderr
