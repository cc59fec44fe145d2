"""A plain `trun train.py` on each node forms the job from the environment
that Kubeflow Trainer v2 and SkyPilot set, with no rendezvous flags: two
agents on loopback, each with one node's variables, as those systems set them
(docs/cli.md#kubeflow-trainer-and-skypilot). Under Kubeflow's variables
torchrun runs the same job, and the workers' environments are compared.
"""
import json
import socket
import subprocess
import uuid

import pytest

from conftest import FIXTURES, TORCHRUN, TRUN, base_env, free_port

DUMP = FIXTURES / "dump_env.py"
# What a worker of the job sees of the job's shape; MASTER_ADDR/MASTER_PORT
# are compared where the store's address is given (Kubeflow).
SHAPE = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
         "ROLE_RANK", "ROLE_WORLD_SIZE")


def run_nodes(exe, node_envs, out_dir, timeout=180):
    """Starts one agent per node environment, all at once; waits for them."""
    out_dir.mkdir()
    procs = [subprocess.Popen([*exe, str(DUMP), str(out_dir)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for env in node_envs]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0].decode(errors="replace"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
    return {int(f.stem): json.loads(f.read_text()) for f in out_dir.glob("*.json")}


def kubeflow_env(rank, port):
    # Trainer v2's torch plugin (pkg/runtime/framework/plugins/torch/torch.go):
    # PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK from the Job completion
    # index, PET_MASTER_ADDR the first node's pod, PET_MASTER_PORT 29400 (here
    # a free port, both pods being on one host).
    return base_env(PET_NNODES=2, PET_NPROC_PER_NODE=2, PET_NODE_RANK=rank,
                    PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT=port)


def test_kubeflow_trainer_v2_variables_form_the_job_as_under_torchrun(tmp_path):
    port = free_port()
    ours = run_nodes([TRUN], [kubeflow_env(r, port) for r in (0, 1)], tmp_path / "trun")
    assert sorted(ours) == [0, 1, 2, 3]
    for rank, env in ours.items():
        assert env["WORLD_SIZE"] == "4" and env["LOCAL_WORLD_SIZE"] == "2", env
        # static: node rank is PET_NODE_RANK, the store on PET_MASTER_ADDR:PORT
        assert env["GROUP_RANK"] == str(rank // 2), env
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", str(port)), env
    port = free_port()
    theirs = run_nodes(TORCHRUN, [kubeflow_env(r, port) for r in (0, 1)], tmp_path / "torchrun")
    assert sorted(theirs) == sorted(ours)
    for rank in ours:
        assert ({k: ours[rank].get(k) for k in SHAPE} ==
                {k: theirs[rank].get(k) for k in SHAPE}), rank


def skypilot_env(rank, task_id):
    # SkyPilot's native variables in a task's `run` section
    # (docs.skypilot.co, "Environment Variables and Secrets").
    return base_env(SKYPILOT_NODE_IPS="127.0.0.1\n127.0.0.1\n", SKYPILOT_NODE_RANK=rank,
                    SKYPILOT_NUM_NODES=2, SKYPILOT_NUM_GPUS_PER_NODE=2,
                    SKYPILOT_TASK_ID=task_id)


def skypilot_task_with_a_free_port():
    """A task id whose rendezvous port (trun picks it from the id) is free
    here, found with trun's dry run."""
    for _ in range(50):
        task_id = f"sky-{uuid.uuid4().hex[:12]}_test_1"
        r = subprocess.run([TRUN, str(DUMP), "x"], env={**skypilot_env(0, task_id),
                                                        "TRUN_DRY_RUN": "1"},
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        config = json.loads(r.stdout)
        host, port = config["rdzv_endpoint"].rsplit(":", 1)
        assert (host, config["rdzv_backend"], config["run_id"]) == ("127.0.0.1", "c10d", task_id)
        assert (config["min_nodes"], config["max_nodes"], config["nproc_per_node"]) == (2, 2, 2)
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", int(port)))
            return task_id
        except OSError:
            continue
    raise AssertionError("no task id with a free port in 50 tries")


def test_skypilot_variables_form_the_job(tmp_path):
    task_id = skypilot_task_with_a_free_port()
    envs = run_nodes([TRUN], [skypilot_env(r, task_id) for r in (0, 1)], tmp_path / "trun")
    assert sorted(envs) == [0, 1, 2, 3]
    for env in envs.values():
        assert env["WORLD_SIZE"] == "4" and env["LOCAL_WORLD_SIZE"] == "2", env
        assert env["GROUP_WORLD_SIZE"] == "2" and env["TORCHELASTIC_RUN_ID"] == task_id, env
    assert sorted(e["GROUP_RANK"] for e in envs.values()) == ["0", "0", "1", "1"]


def srun_env(rank):
    # What `srun --nodes=2 --ntasks-per-node=1` gives each task (as captured
    # on tools/slurm-cluster's cluster; src/launch/slurm_env_test.cc).
    return base_env(SLURM_JOB_ID="1234", SLURM_STEP_ID="0", SLURM_NNODES="2",
                    SLURM_STEP_NUM_NODES="2", SLURM_STEP_NUM_TASKS="2", SLURM_NODEID=rank,
                    SLURM_JOB_NODELIST="node[1-2]", SLURM_STEP_NODELIST="node[1-2]")


def dry_run(flags, env):
    r = subprocess.run([TRUN, *flags, str(DUMP), "x"], env={**env, "TRUN_DRY_RUN": "1"},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def test_flags_win_over_the_cluster_variables(tmp_path):
    config, _ = dry_run(["--nnodes", "1", "--nproc-per-node", "3"], skypilot_env(1, "sky-x"))
    assert (config["max_nodes"], config["nproc_per_node"]) == (1, 3), config


@pytest.mark.parametrize("cluster_env", [skypilot_env(1, "sky-x"), srun_env(1)],
                         ids=["skypilot", "srun"])
def test_a_rendezvous_choice_of_the_users_means_the_user_drives(cluster_env):
    """The cluster fills only what the user left entirely unsaid: explicit
    static flags are torchrun's static job, and `--nnodes 1` one standalone
    job per node (issue 28's review)."""
    static, err = dry_run(["--nnodes=2", "--nproc_per_node=2", "--master_port=12375",
                           "--master_addr=10.0.0.1", "--node_rank=1"], cluster_env)
    assert (static["rdzv_backend"], static["rdzv_endpoint"], static["node_rank"],
            static["run_id"]) == ("static", "10.0.0.1:12375", 1, "none"), static
    assert "is ignored" not in err, err
    one, _ = dry_run(["--nnodes", "1"], cluster_env)
    assert (one["rdzv_backend"], one["rdzv_endpoint"], one["max_nodes"]) == \
        ("c10d", "localhost:0", 1), one
    pinned, _ = dry_run(["--nnodes", "1", "--rdzv-backend", "static"], cluster_env)
    assert (pinned["max_nodes"], pinned["rdzv_endpoint"]) == (1, "localhost:0"), pinned


def test_two_trun_in_a_one_node_skypilot_task_never_meet():
    env = base_env(SKYPILOT_NODE_IPS="127.0.0.1\n", SKYPILOT_NODE_RANK=0, SKYPILOT_NUM_NODES=1,
                   SKYPILOT_NUM_GPUS_PER_NODE=2, SKYPILOT_TASK_ID="sky-one")
    first, _ = dry_run([], env)
    second, _ = dry_run([], env)
    # As torchrun's implied standalone: a free port each and a uuid each;
    # SkyPilot's GPU count still sets the workers.
    assert first["rdzv_endpoint"] == second["rdzv_endpoint"] == "localhost:0", first
    assert first["run_id"] != second["run_id"], (first, second)
    assert first["nproc_per_node"] == 2, first
