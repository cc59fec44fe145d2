"""Every bad input of the job subcommands: a message that names the problem
(and the fix), exit 2, and nothing submitted."""
import pytest

from torchx_helpers import jobs  # noqa: F401 (fixture)

pytestmark = pytest.mark.once(
    "bad input to trun run is refused before any interpreter or torch runs")

BAD_SPEC = "name: x\nroles:\n  - name: r\n    entrypoint: e\n    num_replicas: two\n    nmu: 1\n"


@pytest.mark.parametrize("args,needle", [
    (["run"], "missing the component"),
    (["run", "dist.dpp"], "no component 'dist.dpp' (did you mean 'dist.ddp'?)"),
    (["run", "utils.echo", "--mgs", "x"], "unrecognized argument '--mgs' (did you mean '--msg'?)"),
    (["run", "utils.echo", "--num_replicas", "many"], "invalid int value: 'many'"),
    (["run", "utils.echo", "--msg", "a", "--msg", "b"], "--msg is given more than once"),
    (["run", "utils.echo", "extra"], "unrecognized arguments: extra"),
    (["run", "utils.touch"], "the argument --file is required"),
    (["run", "dist.ddp", "-j", "2y2", "--script", "x.py"], "-j: expected [MIN:]MAXxNPROC"),
    (["run", "dist.ddp", "-j", "3:2x1", "--script", "x.py"], "1 <= MIN <= MAX"),
    (["run", "dist.ddp", "--script", "x.py", "-m", "x"], "exactly one of --script and -m"),
    (["run", "dist.ddp", "--script", "x.py", "--debug", "maybe"], "invalid bool"),
    (["run", "dist.ddp", "--script", "x.py", "-h", "gpu.smal"], "did you mean 'gpu.small'"),
    (["run", "dist.ddp", "--script", "x.py", "--mounts", "type=nfs"], "invalid mount type 'nfs'"),
    (["run", "dist.spmd", "-j", "2", "-h", "cpu.small", "--script", "x.py"], "has no GPUs"),
    (["run", "-s", "kubernetes", "utils.echo"], "the volcano workload needs a Volcano queue"),
    (["run", "-s", "locl", "utils.echo"], "no scheduler 'locl' (did you mean 'local'?)"),
    (["run", "-cfg", "stop_timout=1", "utils.echo"], "did you mean 'stop_timeout'"),
    (["run", "-cfg", "stop_timeout=soon", "utils.echo"], "stop_timeout: expected a number"),
    (["run", "-cfg", "prepend_cwd=perhaps", "utils.echo"], "prepend_cwd: expected true/1/yes/on"),
    (["run", "-cfg", "novalue", "utils.echo"], "does not have at least one key=value pair"),
    (["run", "-cfg", "a=1", "-cfg", "b=2", "utils.echo"], "is given more than once"),
    (["run", "--wiat", "utils.echo"], "unknown option '--wiat' (did you mean '--wait'?)"),
    (["run", "utils.binary", "--entrypoint", "no-such-program-anywhere"],
     "'no-such-program-anywhere' is not a program on PATH"),
    (["run", "./missing.yaml"], "no such file"),
    (["run", "bad.yaml"], "roles[0].num_replicas: expected an integer"),
    (["status"], "missing the app handle"),
    (["status", "echo-123"], "not an app handle"),
    (["status", "local://trun/nope-123"], "no local app 'nope-123'"),
    (["status", "--jsn", "local://trun/x"], "unknown option '--jsn' (did you mean '--json'?)"),
    (["status", "kubernetes://trun/123"], "'123' is not a kubernetes app id"),
    (["describe", "local://trun/nope-123"], "no local app"),
    (["log", "local://trun/x/role/a"], "is not of the form"),
    (["log", "--streams", "both", "local://trun/x"], "--streams: expected stdout, stderr"),
    (["log", "local://trun/nope-123"], "no local app"),
    (["cancel"], "missing the app handle"),
    (["cancel", "local://trun/nope-1", "local://trun/nope-2"], "unexpected arguments"),
    (["cancel", "local://trun/nope-123"], "no local app"),
    (["delete"], "delete: missing the app handle"),
    (["delete", "local://trun/nope-123"], "no local app 'nope-123'"),
    (["list", "extra"], "unexpected argument 'extra'"),
    (["runopts", "nope"], "no scheduler 'nope'"),
    (["builtins", "--print", "utils.ech"], "did you mean 'utils.echo'"),
    (["stauts"], "'stauts' is neither a trun subcommand nor a file (did you mean 'trun status'?)"),
    (["buitlins"], "did you mean 'trun builtins'"),
])
def test_bad_input_exits_2_and_starts_nothing(jobs, args, needle):
    (jobs.tmp / "bad.yaml").write_text(BAD_SPEC)
    r = jobs.trun(*args)
    assert r.returncode == 2, (r.returncode, r.out, r.err)
    assert needle in r.err, r.err
    assert r.err.startswith("trun: error: ")
    assert not (jobs.tmp / "state" / "trun" / "local").exists() or not any(
        (jobs.tmp / "state" / "trun" / "local").iterdir())


def test_a_spec_reports_every_problem_at_once(jobs):
    (jobs.tmp / "bad.yaml").write_text(BAD_SPEC + "  - name: r\n    image: i\n")
    r = jobs.trun("run", "bad.yaml")
    assert r.returncode == 2
    for needle in ("roles[0].num_replicas: expected an integer, got a string",
                   "roles[0]: unknown field 'nmu'"):
        assert needle in r.err, r.err
    (jobs.tmp / "bad.yaml").write_text("name: x\nroles:\n  - {name: r}\n  - {name: r}\n")
    r = jobs.trun("run", "bad.yaml")
    assert r.returncode == 2
    assert "roles[0] ('r'): no entrypoint" in r.err
    assert "roles[1] ('r'): another role has the same name" in r.err


def test_config_file_problems(jobs):
    env = dict(jobs.env, TRUNCONFIG=str(jobs.tmp / "missing"))
    r = jobs.trun("run", "utils.echo", env=env)
    assert r.returncode == 2 and "TRUNCONFIG=" in r.err and "does not exist" in r.err
    (jobs.tmp / ".trunconfig").write_text("[local]\nstop_timeout = soon\n")
    r = jobs.trun("run", "utils.echo")
    assert r.returncode == 2 and ".trunconfig: [local] stop_timeout: expected a number" in r.err
    (jobs.tmp / ".trunconfig").write_text("[component:utils.echo]\nmgs = hi\n")
    r = jobs.trun("run", "utils.echo")
    assert r.returncode == 2 and "sets 'mgs', which is not an argument" in r.err
    (jobs.tmp / ".trunconfig").write_text("key = value\n")
    r = jobs.trun("list")
    assert r.returncode == 2 and ".trunconfig, line 1: a key before any [section]" in r.err
    (jobs.tmp / ".trunconfig").write_text("[local]\nunknown_option = 1\n")
    r = jobs.trun("run", "--dryrun", "utils.echo")
    assert r.returncode == 0 and "is not a run option of the local scheduler; ignored" in r.err


def test_help_exits_0(jobs):
    for cmd in ("run", "status", "log", "cancel", "delete", "list", "describe", "builtins",
                "runopts", "configure"):
        r = jobs.trun(cmd, "--help")
        assert r.returncode == 0 and r.out.startswith(f"usage: trun {cmd}"), (cmd, r.out)
    r = jobs.trun("run", "utils.echo", "--help")
    assert r.returncode == 0 and "--msg MSG" in r.out and "(default: hello world)" in r.out
