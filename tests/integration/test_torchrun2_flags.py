"""torchrun 2.x's newer flags: --log-line-prefix-template,
--duplicate-std{out,err}-filters, --shutdown-timeout, --virtual-local-rank,
--print-completion; and the hint for a torch built without libuv.

In the torch 2.x pass, trun and torchrun run side by side where torchrun has
the flag; in the 1.13 pass (whose torchrun has none of them) trun runs alone.
"""
import json
import shutil
import signal
import socket
import subprocess
import time

import pytest

from conftest import (FIXTURES, TORCH2, TORCH_HAS_LIBUV, TORCHRUN, TRUN, base_env, free_port,
                      torchrun, trun, worker)


def run_dir(log_dir):
    (d,) = list(log_dir.iterdir())
    return d


def both(*args, env=None):
    """trun's and (torch 2.x only) torchrun's results for the same command line."""
    results = [trun(*args, env=env)]
    if TORCH2:
        results.append(torchrun(*args, env=env))
    return results


# ---- --log-line-prefix-template ----------------------------------------------


@pytest.mark.parametrize("spelling", ["--log-line-prefix-template", "--log_line_prefix_template"])
def test_prefix_template_flag_beats_the_environment(spelling):
    env = base_env(TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="env-${rank}:")
    args = ("--nproc-per-node", 2, "--tee", 1, spelling, "${role_name}/${local_rank}/${rank}:",
            *worker("print:v"))
    for r in both(*args, env=env):
        assert r.returncode == 0, r.err
        assert sorted(r.out.splitlines()) == ["default/0/0:v", "default/1/1:v"], r.out


def test_prefix_template_from_pet_and_hostname():
    env = base_env(PET_LOG_LINE_PREFIX_TEMPLATE="${hostname}|${rank}: ",
                   TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="env:")
    r = trun("--tee", 1, *worker("print:v"), env=env)
    assert r.returncode == 0, r.err
    # torch's ${hostname} is socket.gethostname(), the short name.
    assert r.out.splitlines() == [f"{socket.gethostname()}|0: v"]


def test_empty_prefix_template_falls_back_to_the_environment():
    env = base_env(TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="env-${rank}:")
    for r in both("--tee", 1, "--log-line-prefix-template", "", *worker("print:v"), env=env):
        assert r.returncode == 0, r.err
        assert r.out.splitlines() == ["env-0:v"]


# ---- --duplicate-std{out,err}-filters ------------------------------------------

FILTER_WORKER = worker("print:an apple", "print:banana", "print:or,ange juice", "print:kiwi",
                       "eprint:err: disk full", "eprint:warning: slow", "print:apple@1")


def filtered(log_dir, name):
    f = run_dir(log_dir) / "attempt_0" / name
    return sorted(f.read_text().splitlines()) if f.exists() else None


def side_by_side():
    """trun, and torchrun where it has these flags (torch 2.x)."""
    yield "trun", trun
    if TORCH2:
        yield "torchrun", torchrun


def test_duplicate_filters_write_matching_teed_lines(tmp_path):
    args = ["--nproc-per-node", 3, "--tee", 3, "--local-ranks-filter", "0,1",
            "--duplicate-stdout-filters", "apple,or,,ange", "--duplicate_stderr_filters", "err:",
            *FILTER_WORKER]
    out, err = {}, {}
    for name, launcher in side_by_side():
        d = tmp_path / name
        r = launcher("--log-dir", d, *args)
        assert r.returncode == 0, r.err
        out[name], err[name] = filtered(d, "filtered_stdout.log"), filtered(d, "filtered_stderr.log")
        # The per-rank files are complete; the filtered-out rank 2 is not in
        # filtered_*.log (torch duplicates only the streams it tails).
        assert "apple" in (run_dir(d) / "attempt_0" / "2" / "stdout.log").read_text()
    assert out["trun"] == ["[default0]:an apple", "[default0]:or,ange juice",
                           "[default1]:an apple", "[default1]:apple",
                           "[default1]:or,ange juice"]
    assert err["trun"] == ["[default0]:err: disk full", "[default1]:err: disk full"]
    if TORCH2:
        assert out["torchrun"] == out["trun"]
        assert err["torchrun"] == err["trun"]


def test_duplicate_filters_use_the_prefix_template_and_pet(tmp_path):
    env = base_env(PET_DUPLICATE_STDOUT_FILTERS="kiwi")
    r = trun("--log-dir", tmp_path, "--tee", 1, "--log-line-prefix-template", "<${rank}> ",
             *FILTER_WORKER, env=env)
    assert r.returncode == 0, r.err
    assert filtered(tmp_path, "filtered_stdout.log") == ["<0> kiwi"]
    assert filtered(tmp_path, "filtered_stderr.log") is None


def test_duplicate_filters_without_tee_leave_empty_files(tmp_path):
    args = ["--duplicate-stdout-filters", "apple", "--duplicate-stderr-filters", "err",
            *FILTER_WORKER]
    for name, launcher in side_by_side():
        d = tmp_path / name
        r = launcher("--log-dir", d, *args)
        assert r.returncode == 0, r.err
        assert filtered(d, "filtered_stdout.log") == [], name
        assert filtered(d, "filtered_stderr.log") == [], name


def test_duplicate_filters_each_attempt_has_its_own_file(tmp_path):
    r = trun("--log-dir", tmp_path, "--tee", 1, "--max-restarts", 1,
             "--duplicate-stdout-filters", "attempt",
             *worker("print:attempt-a#0", "exit:1#0", "print:attempt-b#1"))
    assert r.returncode == 0, r.err
    d = run_dir(tmp_path)
    assert (d / "attempt_0" / "filtered_stdout.log").read_text() == "[default0]:attempt-a\n"
    assert (d / "attempt_1" / "filtered_stdout.log").read_text() == "[default0]:attempt-b\n"


def test_duplicate_filters_with_dev_null_log_dir_is_a_usage_error():
    r = trun("--log-dir", "/dev/null", "--duplicate-stdout-filters", "x", *worker())
    assert r.returncode == 2
    assert "--log-dir /dev/null" in r.err and "drop the filters" in r.err


# ---- --shutdown-timeout --------------------------------------------------------


def seconds_to_stop(cmd, env):
    """Starts a launcher whose worker ignores SIGTERM, sends the launcher
    SIGTERM once the worker runs, and returns (seconds until it exited, rc)."""
    p = subprocess.Popen([*cmd, *worker("ignore:TERM", "print:ready", "sleep:120")],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.time() + 60
        while b"ready" not in p.stdout.readline():
            assert time.time() < deadline and p.poll() is None, "the worker did not start"
        start = time.time()
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=60)
        return time.time() - start, rc
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_shutdown_timeout_flag_beats_the_environment():
    env = base_env(TORCH_ELASTIC_SHUTDOWN_TIMEOUT="45")
    launchers = [[TRUN, "--shutdown-timeout", "2"], [TRUN, "--shutdown_timeout=2"]]
    if TORCH2:
        launchers.append([*TORCHRUN, "--shutdown-timeout", "2"])
    for cmd in launchers:
        took, rc = seconds_to_stop(cmd, env)
        # The grace is the flag's 2 s, not the environment's 45 s.
        assert 1.5 < took < 20, (cmd, took)
        assert rc != 0


def test_shutdown_timeout_from_pet():
    took, rc = seconds_to_stop([TRUN], base_env(PET_SHUTDOWN_TIMEOUT="1",
                                                TORCH_ELASTIC_SHUTDOWN_TIMEOUT="45"))
    assert 0.5 < took < 15 and rc == 143


@pytest.mark.parametrize("value", ["-1", "1.5", "soon"])
def test_bad_shutdown_timeout_is_a_usage_error(value):
    r = trun(f"--shutdown-timeout={value}", *worker())
    assert r.returncode == 2
    assert "--shutdown-timeout" in r.err and value in r.err


# ---- --virtual-local-rank ------------------------------------------------------


def dumped_envs(launcher, tmp_path, name, *flags, **env):
    d = tmp_path / name
    d.mkdir()
    r = launcher("--nproc-per-node", 3, *flags, "--log-dir", tmp_path / f"{name}-logs",
                 FIXTURES / "dump_env.py", d, env=base_env(**env))
    assert r.returncode == 0, r.err
    return {rank: json.loads((d / f"{rank}.json").read_text()) for rank in range(3)}


@pytest.mark.parametrize("visible", [None, "5, 7,GPU-1234"])
def test_virtual_local_rank_env(tmp_path, visible):
    extra = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    launchers = [("trun", trun)] + ([("torchrun", torchrun)] if TORCH2 else [])
    expected = ["0", "1", "2"] if visible is None else ["5", "7", "GPU-1234"]
    seen = {}
    for name, launcher in launchers:
        envs = dumped_envs(launcher, tmp_path, name, "--virtual-local-rank", **extra)
        for rank, e in envs.items():
            assert e["LOCAL_RANK"] == "0", (name, e["LOCAL_RANK"])
            assert e["CUDA_VISIBLE_DEVICES"] == expected[rank], name
            assert e["RANK"] == str(rank)
            assert e["LOCAL_WORLD_SIZE"] == "3"
        seen[name] = {r: (e["LOCAL_RANK"], e["CUDA_VISIBLE_DEVICES"]) for r, e in envs.items()}
    if TORCH2:
        assert seen["trun"] == seen["torchrun"]


def test_virtual_local_rank_off_keeps_local_rank_and_devices(tmp_path):
    envs = dumped_envs(trun, tmp_path, "off", CUDA_VISIBLE_DEVICES="3,4,5")
    assert [envs[r]["LOCAL_RANK"] for r in range(3)] == ["0", "1", "2"]
    assert {envs[r]["CUDA_VISIBLE_DEVICES"] for r in range(3)} == {"3,4,5"}
    pet = dumped_envs(trun, tmp_path, "pet", PET_VIRTUAL_LOCAL_RANK="1")
    assert [pet[r]["CUDA_VISIBLE_DEVICES"] for r in range(3)] == ["0", "1", "2"]


def test_virtual_local_rank_needs_a_device_per_worker():
    """torchrun accepts the line and its agent raises as it starts the
    workers; trun starts none and names the entries (exit 1)."""
    r = trun("--nproc-per-node", 3, "--virtual_local_rank", *worker(),
             env=base_env(CUDA_VISIBLE_DEVICES="0,1"))
    assert r.returncode == 1, r.err
    assert "CUDA_VISIBLE_DEVICES=0,1 lists only 2" in r.err
    assert "the workers are not started" in r.err


# ---- --print-completion ----------------------------------------------------------


def completion(shell):
    r = trun("--print-completion", shell)
    assert r.returncode == 0, r.err
    assert r.err == ""
    return r.out


def complete_in_bash(tmp_path, script, words):
    """COMPREPLY of trun's bash completion for the command line `words`
    (the last one being completed), in an empty directory."""
    path = tmp_path / "trun.bash"
    path.write_text(script)
    cwd = tmp_path / "empty"
    cwd.mkdir(exist_ok=True)
    words_literal = " ".join("'" + w + "'" for w in words)
    prog = (f"source {path} || exit 9\n"
            "complete -p trun || exit 8\n"
            f"COMP_WORDS=({words_literal}); COMP_CWORD={len(words) - 1}\n"
            "COMP_LINE=\"${COMP_WORDS[*]}\"; COMP_POINT=${#COMP_LINE}\n"
            "_trun trun \"${COMP_WORDS[COMP_CWORD]}\" \"${COMP_WORDS[COMP_CWORD-1]}\"\n"
            "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", prog], cwd=cwd,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "complete -o filenames -F _trun trun"
    return sorted(x for x in lines[1:] if x)


def test_bash_completion_completes(tmp_path):
    script = completion("bash")
    c = lambda *words: complete_in_bash(tmp_path, script, ["trun", *words])  # noqa: E731
    # Flags, both spellings, from the parser's table.
    assert c("--nproc") == ["--nproc-per-node", "--nproc_per_node"]
    assert c("--duplicate-") == ["--duplicate-stderr-filters", "--duplicate-stdout-filters"]
    assert c("--virtual_l") == ["--virtual_local_rank"]
    assert "--print-completion" in c("--") and "--shutdown_timeout" in c("--")
    # Subcommands, from the subcommand table (local-supervisor is internal).
    assert c("st") == ["stack", "status", "store"]
    assert c("ru") == ["run", "runopts"]
    assert "local-supervisor" not in c("")
    # Builtin components after `trun run`, also after its flags.
    assert c("run", "dist.") == ["dist.ddp", "dist.spmd", "dist.torchrun"]
    assert c("run", "-s", "local", "utils.e") == ["utils.echo"]
    assert c("run", "--sch") == ["--scheduler", "--scheduler-args", "--scheduler_args"]
    # After a flag's value, flags again; after the script, the script's own.
    assert c("--nnodes", "2", "--standal") == ["--standalone"]
    assert c("--nnodes=2", "--standal") == ["--standalone"]
    assert c("train.py", "--standal") == []
    assert c("--nnodes", "--standal") == []  # the value of --nnodes: a file


def test_bash_completion_names_every_subcommand_and_builtin(tmp_path):
    script = completion("bash")
    subcommands = complete_in_bash(tmp_path, script, ["trun", ""])
    for name in ["run", "status", "log", "cancel", "delete", "stack", "list", "describe",
                 "builtins", "runopts", "configure", "store", "version"]:
        assert name in subcommands
    r = trun("builtins")
    assert r.returncode == 0, r.err
    components = complete_in_bash(tmp_path, script, ["trun", "run", ""])
    for name in ["dist.ddp", "dist.spmd", "dist.torchrun", "utils.echo", "utils.sh",
                 "utils.python"]:
        assert name in components and name in r.out


@pytest.mark.skipif(not shutil.which("zsh"), reason="zsh is not installed")
def test_zsh_completion_loads(tmp_path):
    path = tmp_path / "_trun"
    path.write_text(completion("zsh"))
    prog = (f"autoload -Uz compinit && compinit -u -d {tmp_path}/zcompdump && source {path} "
            "&& print -r -- $_comps[trun] && whence -w _trun")
    # compinit reads every completion function Debian ships, byte by byte:
    # 1.7 s of CPU, 15-30 s on a loaded machine (the parallel pass).
    r = subprocess.run(["zsh", "-f", "-c", prog], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert r.stdout.splitlines() == ["_trun", "_trun: function"]


# compadd and _files work only inside a completion widget; stand-ins that
# print what would be offered (compadd filtered by the word's prefix, as the
# real one does) drive _trun's own logic.
ZSH_DRIVER = r"""
compadd() { local a; [[ $1 == -a ]] && for a in ${(P)2}; do
  [[ $a == ${words[CURRENT]}* ]] && print -r -- $a; done }
_files() { print -r -- "<files>" }
t() { words=(trun "$@"); CURRENT=$#words; _trun; print -- --- }
t --nproc
t st
t run dist.
t run -s local utils.e
t --nnodes 2 --standal
t train.py --standal
"""


@pytest.mark.skipif(not shutil.which("zsh"), reason="zsh is not installed")
def test_zsh_completion_completes(tmp_path):
    path = tmp_path / "_trun"
    path.write_text(completion("zsh"))
    driver = tmp_path / "driver.zsh"
    driver.write_text(ZSH_DRIVER)
    prog = (f"autoload -Uz compinit && compinit -u -d {tmp_path}/zcompdump && source {path} "
            f"&& source {driver}")
    r = subprocess.run(["zsh", "-f", "-c", prog], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    answers = [a.split("\n") for a in r.stdout.split("---\n")[:-1]]
    assert answers == [["--nproc-per-node", "--nproc_per_node", ""],
                       ["store", "status", "stack", "<files>", ""],
                       ["dist.ddp", "dist.spmd", "dist.torchrun", "<files>", ""],
                       ["utils.echo", "<files>", ""],
                       ["--standalone", ""],
                       ["<files>", ""]]


@pytest.mark.skipif(not shutil.which("tcsh"), reason="tcsh is not installed")
def test_tcsh_completion_loads(tmp_path):
    path = tmp_path / "trun.tcsh"
    path.write_text(completion("tcsh"))
    r = subprocess.run(["tcsh", "-f", "-c", f"source {path} && complete trun"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert "dist.ddp" in r.stdout and "nproc-per-node" in r.stdout and "runopts" in r.stdout


def test_print_completion_needs_no_script_and_checks_the_shell():
    for shell in ["bash", "zsh", "tcsh"]:
        assert "trun" in completion(shell)
    r = trun("--print_completion", "fish")
    assert r.returncode == 2
    assert "expected bash, zsh or tcsh, got 'fish'" in r.err


def test_new_flags_are_reported_together():
    r = trun("--shutdown-timeout", "x", "--print-completion=bash", "--nproc-per-node", "0",
             *worker())
    # --print-completion is an action: it prints whatever else is wrong.
    assert r.returncode == 0 and "_trun" in r.out
    r = trun("--shutdown-timeout", "x", "--nproc-per-node", "0", *worker())
    assert r.returncode == 2
    assert "--shutdown-timeout" in r.err and "--nproc-per-node" in r.err


# ---- --rdzv-conf timeout under c10d -------------------------------------------

def test_c10d_ignores_timeout_as_torchrun_does():
    """torch's own launcher test (test/distributed/launcher/test_run.py,
    test_launch_elastic) quotes inside --rdzv-conf; c10d reads neither
    `'join_timeout` nor `timeout`, so torchrun runs it, and so must trun."""
    def run(launcher):
        return launcher("--nnodes=1:2", "--nproc-per-node=2", "--rdzv-backend=c10d",
                        f"--rdzv-endpoint=localhost:{free_port()}",
                        "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'",
                        "--rdzv-id=torchs-own-test", "--monitor-interval=1", *worker("print:ran"))
    ours = run(trun)
    for r in [ours, *([run(torchrun)] if TORCH2 else [])]:
        assert r.returncode == 0, r.err
        assert r.out.count("ran") == 2, r.out
    assert ("trun: warning: --rdzv-conf timeout: the c10d backend does not read it and ignores "
            "it, as torchrun's does; its join timeout is join_timeout") in ours.err, ours.err


@pytest.mark.parametrize("args,problem", [
    (["--nnodes=2", "--node-rank=0", "--master-addr=shared/rdzv", "--master-port=1"],
     "--master-addr 'shared/rdzv': not a host ('/' in it: a path or a URL); give the host of "
     "node 0"),
    (["--nnodes=1:2", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:1",
      "--rdzv-conf=read_timeout=0"],
     "--rdzv-conf read_timeout=0: expected a whole number of seconds > 0"),
], ids=["master-addr-path", "read-timeout-0"])
def test_what_torchrun_refuses_trun_refuses_before_it_starts(args, problem):
    """torchrun fails these when its rendezvous handler is made (a
    ValueError: the endpoint's host, c10d's read_timeout); trun says so at
    once, as a usage error, and starts nothing."""
    ours, *theirs = both(*args, "--nproc-per-node=1", *worker("print:ran"))
    assert ours.returncode == 2 and problem in ours.err, ours.err
    assert "ran" not in ours.out
    for r in theirs:
        assert r.returncode != 0 and "ValueError" in r.err and "ran" not in r.out, r.err


# ---- a torch built without libuv ----------------------------------------------

# A worker that hosts its own store (as a script written for plain `python`
# does with init_method tcp://): under trun every env:// worker is a client
# of trun's store, which needs no libuv.
LIBUV_WORKER = """
import os, sys
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

def main():
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"
    os.environ["MASTER_PORT"] = sys.argv[1]
    dist.init_process_group("gloo")

if __name__ == "__main__":
    record(main)() if os.environ.get("WITH_RECORD") else main()
"""

needs_libuv_less_torch2 = pytest.mark.skipif(
    not TORCH2 or TORCH_HAS_LIBUV, reason="needs a torch 2.x built without libuv")


@needs_libuv_less_torch2
@pytest.mark.parametrize("how", ["record", "tee", "redirect"])
def test_libuv_failure_says_what_to_do(tmp_path, how):
    script = tmp_path / "uv.py"
    script.write_text(LIBUV_WORKER)
    agent_error = tmp_path / "agent_error.json"
    env = base_env(USE_LIBUV="1", TORCHELASTIC_ERROR_FILE=agent_error)
    flags = []
    if how == "record":
        env["WITH_RECORD"] = "1"
    else:
        flags = ["--tee" if how == "tee" else "--redirects", "2"]
    r = trun("--log-dir", tmp_path / "logs", *flags, script, free_port(), env=env)
    assert r.returncode == 1, r.err
    hint = ("this torch was built without libuv: set USE_LIBUV=0 in the environment (env:// "
            "and torchrun-style stores) or pass use_libuv=False to TCPStore")
    assert f"  hint      : {hint}" in r.err.splitlines(), r.err
    message = json.loads(agent_error.read_text())["message"]
    text = message["message"] if isinstance(message, dict) else message
    assert text.endswith("\nhint: " + hint), text
    if how == "record":
        assert "use_libuv was requested" in text
    elif how == "tee":
        assert "use_libuv was requested" in r.err


@needs_libuv_less_torch2
def test_no_hint_with_use_libuv_0(tmp_path):
    script = tmp_path / "uv.py"
    script.write_text(LIBUV_WORKER)
    r = trun("--tee", 2, script, free_port(), env=base_env(USE_LIBUV="0"))
    assert r.returncode == 0, r.err
    assert "hint" not in r.err

