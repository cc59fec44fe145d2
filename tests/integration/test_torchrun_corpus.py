"""A corpus of torchrun command lines, each decided by torch's own torchrun
and by trun: the same accept/refuse decision and, where both accept, the same
job (node counts, workers, rendezvous, restarts, node rank, the worker's
command line).

torchrun decides in one interpreter (tests/fixtures/torchrun_decide.py: its
parse_args and run(), nothing launched); trun decides under TRUN_DRY_RUN=1
(docs/cli.md#dry-run). The comparison needs torch 2.x's torchrun, which has
every flag of the corpus; under torch 1.13 it is skipped. A few lines run end
to end under both generations, comparing the workers' environments.

Lines come from torchrun's documentation, torchtitan's run_train.sh, the
command lines TorchX's dist.ddp generates, the flags of issue 28, and bad
input, and the lines trun once refused where torchrun does not. Every line
is decided alike: where torchrun accepts a line and then fails as it runs,
trun accepts it too and fails at that point with the problem named
(test_lines_torchrun_accepts_but_cannot_run_*).
"""
import json
import re
import shlex
import signal
import subprocess

import pytest

from conftest import FIXTURES, PYTHON, TORCH2, base_env, free_port, trun
from test_launch import compare_envs

SCRIPT = str(FIXTURES / "dump_env.py")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")

# The second node of a 2-node SkyPilot task and of a 2-node srun step, as
# those systems set them (test_cluster_env.py, src/launch/slurm_env_test.cc).
SKYPILOT_NODE1 = {"SKYPILOT_NODE_IPS": "10.0.0.5\n10.0.0.6\n", "SKYPILOT_NODE_RANK": "1",
                  "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NUM_GPUS_PER_NODE": "0",
                  "SKYPILOT_TASK_ID": "sky-2026-11-26_corpus_1"}
SRUN_NODE1 = {"SLURM_JOB_ID": "1234", "SLURM_STEP_ID": "0", "SLURM_NNODES": "2",
              "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "2", "SLURM_NODEID": "1",
              "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_STEP_NODELIST": "node[1-2]"}

# (id, command line after `torchrun`, extra environment). {s} is a script.
CORPUS = [
    # torchrun's documentation (torch/distributed/run.py's docstring)
    ("doc-standalone", "--standalone --nnodes=1 --nproc-per-node=2 {s} --arg1 x", {}),
    ("doc-stacked", "--rdzv-backend=c10d --rdzv-endpoint=localhost:0 --nnodes=1 "
     "--nproc-per-node=2 {s}", {}),
    ("doc-fault-tolerant", "--nnodes=2 --nproc-per-node=2 --max-restarts=3 --rdzv-id=job7 "
     "--rdzv-backend=c10d --rdzv-endpoint=node1.example.com:29400 {s}", {}),
    ("doc-elastic", "--nnodes=1:4 --nproc-per-node=2 --max-restarts=3 --rdzv-id=job7 "
     "--rdzv-backend=c10d --rdzv-endpoint=node1.example.com {s}", {}),
    ("doc-underscores", "--nproc_per_node=2 {s}", {}),
    ("doc-launch-node0", "--nnodes=2 --node_rank=0 --master_addr=10.0.0.1 --master_port=29500 "
     "--nproc_per_node=2 {s}", {}),
    ("doc-launch-node1", "--nnodes=2 --node_rank=1 --master_addr=10.0.0.1 --master_port=29500 "
     "--nproc_per_node=2 {s}", {}),
    ("doc-etcd-v2", "--nnodes=2 --nproc-per-node=2 --rdzv-backend=etcd-v2 "
     "--rdzv-endpoint=localhost:2379 --rdzv-id=job7 {s}", {}),
    ("doc-bare", "{s}", {}),
    # torchtitan's run_train.sh and its multi-node variant
    ("titan-run-train", "--nproc_per_node=2 --rdzv_backend c10d --rdzv_endpoint=localhost:0 "
     "--local-ranks-filter 0 --role rank --tee 3 -m torchtitan.train "
     "--job.config_file ./train_configs/llama3_8b.toml", {}),
    ("titan-virtual-local-rank", "--nproc_per_node=2 --rdzv_backend c10d "
     "--rdzv_endpoint=localhost:0 --virtual-local-rank --local-ranks-filter 0 --role rank "
     "--tee 3 -m torchtitan.train --compile.mode jit", {}),
    ("titan-multinode", "--nnodes 2 --nproc_per_node 2 --rdzv_id 101 --rdzv_backend c10d "
     "--rdzv_endpoint 10.0.0.1:29500 -m torchtitan.train", {}),
    # TorchX dist.ddp's generated command lines
    ("torchx-ddp-1x2", "--rdzv_backend c10d --rdzv_endpoint localhost:0 --rdzv_id app-x1 "
     "--nnodes 1 --nproc_per_node 2 --tee 3 --role '' {s}", {}),
    ("torchx-ddp-2x4", "--rdzv_backend c10d --rdzv_endpoint node0:29500 --rdzv_id app-x2 "
     "--nnodes 2 --nproc_per_node 4 --tee 3 --role '' {s} --lr 0.1", {}),
    ("torchx-ddp-elastic-module", "--rdzv_backend c10d --rdzv_conf join_timeout=600,"
     "close_timeout=60 --rdzv_endpoint node0:29500 --rdzv_id app-x3 --nnodes 1:3 "
     "--nproc_per_node 2 --tee 3 --role '' -m my.module --epochs 2", {}),
    ("torchx-ddp-static", "--rdzv_backend static --rdzv_endpoint node0:29500 --rdzv_id app-x4 "
     "--nnodes 2 --nproc_per_node 1 --tee 3 --role '' --node_rank 1 --master_addr node0 "
     "--master_port 29500 {s}", {}),
    # argparse's abbreviations (issue 28)
    ("abbrev-issue", "--nnode 2 --max_restart 2 --nproc-per 4 --rdzv-backend c10d "
     "--rdzv-endpoint h:1 {s}", {}),
    ("abbrev-static", "--nnode 2 --max_restart 2 --nproc-per 4 {s}", {}),
    ("abbrev-equals", "--nproc_per=3 --max-r=1 {s}", {}),
    ("abbrev-standal", "--standal --nproc-per-n 2 {s}", {}),
    ("abbrev-event-log", "--event-log console {s}", {}),
    ("ambiguous-n", "--n 2 {s}", {}),
    ("ambiguous-nproc", "--nproc 2 {s}", {}),
    ("ambiguous-rdzv", "--rdzv c10d {s}", {}),
    ("ambiguous-max", "--max 1 {s}", {}),
    ("ambiguous-master", "--master 10.0.0.1 {s}", {}),
    ("unknown-option", "--nprocs-per-node 2 {s}", {}),
    ("given-twice", "--nnodes 2 --nnodes 1 --max-restarts 1 --max_restarts 3 {s}", {}),
    # --node-rank off static, --standalone with a range
    ("node-rank-c10d", "--node-rank 1 --rdzv-backend c10d {s}", {}),
    ("node-rank-implied-standalone", "--node-rank 1 {s}", {}),
    ("node-rank-elastic", "--nnodes 1:3 --node-rank 5 --rdzv-backend c10d "
     "--rdzv-endpoint h:29400 {s}", {}),
    ("static-range", "--nnodes 1:2 --master-addr 10.0.0.1 --master-port 29511 {s}", {}),
    ("standalone-range", "--nnodes 1:2 --standalone {s}", {}),
    ("standalone-overrides", "--standalone --rdzv-backend etcd --rdzv-id x {s}", {}),
    # --logs-specs, --numa-binding, the event handlers, PET_ variables
    ("logs-specs-default", "--logs-specs default {s}", {}),
    ("logs-specs-underscore", "--logs_specs=default {s}", {}),
    ("logs-specs-other", "--logs-specs mine {s}", {}),
    ("numa-node", "--numa-binding node {s}", {}),
    ("numa-socket", "--numa-binding=socket {s}", {}),
    ("numa-exclusive", "--numa_binding exclusive {s}", {}),
    ("numa-core-complex", "--numa-binding core-complex {s}", {}),
    ("numa-bad", "--numa-binding cache {s}", {}),
    ("event-dynamic-rendezvous", "--event-log-handler dynamic_rendezvous {s}", {}),
    ("event-console", "--event_log_handler console {s}", {}),
    ("event-unknown", "--event-log-handler kafka {s}", {}),
    ("pet-numa-ignored", "{s}", {"PET_NUMA_BINDING": "bogus"}),
    ("pet-logs-specs-ignored", "{s}", {"PET_LOGS_SPECS": "mine"}),
    ("pet-nproc", "{s}", {"PET_NPROC_PER_NODE": "3", "PET_NNODES": "1"}),
    ("pet-standalone", "{s}", {"PET_STANDALONE": "1", "PET_NPROC_PER_NODE": "2"}),
    ("kubeflow-trainer-v2", "{s}", {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2",
                                    "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "job-node-0-0.job",
                                    "PET_MASTER_PORT": "29400"}),
    # --nproc-per-node's device kinds (torch's counts in the worker interpreter)
    ("nproc-cpu", "--nproc-per-node cpu {s}", {}),
    ("nproc-gpu", "--nproc-per-node gpu {s}", {}),
    ("nproc-xpu", "--nproc-per-node xpu {s}", {}),
    ("nproc-auto", "--nproc-per-node auto {s}", {}),
    ("nproc-word", "--nproc-per-node lots {s}", {}),
    # other values, good and bad
    ("nnodes-zero", "--nnodes 0 {s}", {}),
    ("nnodes-reversed", "--nnodes 3:2 {s}", {}),
    ("nnodes-word", "--nnodes x {s}", {}),
    ("nnodes-three-parts", "--nnodes 1:2:3 {s}", {}),
    ("max-restarts-negative", "--max-restarts -1 {s}", {}),
    ("max-restarts-word", "--max-restarts x {s}", {}),
    ("monitor-interval", "--monitor-interval 0.5 --start-method fork {s}", {}),
    ("start-method-bad", "--start-method thread {s}", {}),
    ("backend-unknown", "--nnodes 2 --rdzv-backend zookeeper --rdzv-endpoint h:1 {s}", {}),
    ("local-ranks-filter-bad", "--local-ranks-filter a {s}", {}),
    ("local-ranks-filter", "--local-ranks-filter 0,1 --nproc-per-node 2 {s}", {}),
    ("local-ranks-filter-nobody", "--local-ranks-filter -1 --nproc-per-node 2 {s}", {}),
    ("redirects-tee", "-r 3 -t 1 {s}", {}),
    ("redirects-map", "-r 0:3,1:2 --nproc-per-node 2 {s}", {}),
    ("tee-bad", "-t x {s}", {}),
    ("no-python-and-module", "--no-python -m x", {}),
    ("no-python", "--no-python true a b", {}),
    ("module", "-m json.tool --help", {}),
    ("run-path", "--run-path {s} x", {}),
    ("role-and-id", "--role trainer --max-restarts 2 --rdzv-id myjob {s}", {}),
    ("static-one-node-port", "--master-port 29511 --nproc-per-node 2 {s}", {}),
    ("static-one-node-free-port", "--master-port 0 --nproc-per-node 2 {s}", {}),
    ("static-node1", "--master-addr 10.1.1.1 --master-port 29511 --nnodes 2 --node-rank 1 {s}",
     {}),
    ("static-node-rank-one-of-one", "--node-rank 1 --master-port 29511 {s}", {}),
    ("standalone-two-nodes", "--standalone --nnodes 2 {s}", {}),
    ("static-node-rank-out-of-range",
     "--master-addr 10.1.1.1 --master-port 29511 --nnodes 2 --node-rank 2 {s}", {}),
    ("signals", "--signals-to-handle SIGTERM,SIGUSR1 {s}", {}),
    ("shutdown-timeout", "--shutdown-timeout 5 {s}", {}),
    ("duplicate-filters", "--duplicate-stdout-filters a,b --tee 3 {s}", {}),
    ("prefix-template", "--log-line-prefix-template [${rank}] --tee 3 {s}", {}),
    ("rdzv-conf", "--nnodes=2:4 --rdzv-backend=c10d --rdzv-endpoint=h:29400 "
     "--rdzv-conf=join_timeout=900,last_call_timeout=60 {s}", {}),
    ("no-script", "--nproc-per-node 2", {}),
    # issue 28's review: argparse's reading of values and flags
    ("empty-log-dir", "--log-dir= {s} {s}", {}),
    ("empty-role", "--role= {s}", {}),
    ("empty-rdzv-endpoint", "--rdzv-endpoint= {s}", {}),
    ("empty-local-addr", "--local-addr= {s}", {}),
    ("tee-equals", "-t=3 {s}", {}),
    ("redirects-equals", "-r=3 {s}", {}),
    ("flag-given-a-value", "--standalone=1 {s}", {}),
    ("no-python-given-a-value", "--no-python=1 true", {}),
    ("virtual-local-rank-given-a-value", "--virtual-local-rank=0 {s}", {}),
    ("role-looks-like-an-option", "--role -x {s}", {}),
    ("rdzv-id-looks-like-an-option", "--rdzv-id -x {s}", {}),
    ("redirects-space", "-r ' 3' {s}", {}),
    ("tee-map-spaces", "-t '0:3, 1:2' --nproc-per-node 2 {s}", {}),
    ("rdzv-conf-empty-item", "--rdzv-conf 'a=1,,b=2' {s}", {}),
    ("rdzv-conf-trailing-comma", "--rdzv-conf join_timeout=5, {s}", {}),
    ("local-ranks-filter-empty", "--local-ranks-filter '' {s}", {}),
    ("max-restarts-int-max", "--max-restarts 2147483647 {s}", {}),
    ("underscored-numbers", "--nnodes 1_0:2_0 --max-restarts 1_0 --rdzv-backend c10d "
     "--rdzv-endpoint h:1 {s}", {}),
    ("signal-unknown", "--signals-to-handle SIGFOO {s}", {}),
    ("nproc-privateuse1", "--nproc-per-node npu {s}", {}),
    ("nproc-privateuse1-default-name", "--nproc-per-node privateuseone {s}", {}),
    ("pet-nnodes-empty", "{s}", {"PET_NNODES": ""}),
    ("pet-nproc-empty", "{s}", {"PET_NPROC_PER_NODE": ""}),
    ("pet-master-port-empty", "{s}", {"PET_MASTER_PORT": ""}),
    ("pet-standalone-word", "{s}", {"PET_STANDALONE": "true"}),
    ("pet-standalone-zero", "--master-port 29511 {s}", {"PET_STANDALONE": "0"}),
    ("pet-rdzv-id-empty", "--rdzv-backend c10d --rdzv-endpoint h:1 {s}", {"PET_RDZV_ID": ""}),
    ("pet-trun-only-ignored", "{s}", {"PET_HEALTH_CHECK_PORT": "abc",
                                      "PET_EVENT_LOG_FILE": "/nonexistent/x"}),
    # Lines trun once refused on purpose; torch's decision, from its run() and
    # launch_agent up to the agent's start, is now trun's. Refused by torch:
    # WorkerSpec's asserts (local_world_size > 0, monitor_interval > 0), the
    # static endpoint's port (_get_addr_and_port's ValueError), torch's
    # DefaultLogsSpecs (a --log-dir that is a file or cannot be created),
    # LaunchConfig's shutdown_timeout >= 0 and int() of its variable. Accepted
    # by torch and failing later (docs/cli.md, "Accepted, then failing"):
    # SIGKILL/SIGSTOP (OSError when the handlers are set, as the workers
    # start), SIGCHLD (the first worker exit ends the job), a
    # missing script or program, too few CUDA_VISIBLE_DEVICES entries for
    # --virtual-local-rank (ValueError as the workers start), a master port
    # or node rank no backend reads.
    ("nproc-zero", "--nproc-per-node 0 {s}", {}),
    ("nproc-negative", "--nproc-per-node -2 {s}", {}),
    ("nproc-above-4096", "--nproc-per-node 5000 {s}", {}),
    ("pet-nproc-zero", "{s}", {"PET_NPROC_PER_NODE": "0"}),
    ("master-port-negative", "--master-port -1 {s}", {}),
    ("master-port-above-65535", "--master-port 65536 --nnodes 2 {s}", {}),
    ("pet-master-port-negative", "{s}", {"PET_MASTER_PORT": "-1"}),
    ("master-port-unread-standalone", "--standalone --master-port 70000 {s}", {}),
    ("master-port-unread-c10d", "--rdzv-backend c10d --rdzv-endpoint h:1 --master-port -5 {s}",
     {}),
    ("master-port-unread-static-endpoint", "--rdzv-backend static --rdzv-endpoint "
     "10.0.0.1:29511 --nnodes 2 --node-rank 1 --master-port 99999 {s}", {}),
    # the static store's address as torch's endpoint parser takes it
    ("static-master-addr-spaced", "--nnodes 2 '--master-addr= 10.0.0.1' --master-port 29511 "
     "{s}", {}),
    ("static-master-addr-v6", "--nnodes 2 --master-addr [::1] --master-port 29511 {s}", {}),
    ("static-master-addr-v6-bare", "--nnodes 2 --master-addr ::1 --master-port 29511 {s}", {}),
    ("static-master-addr-path", "--nnodes 2 --master-addr shared/rdzv --master-port 29511 {s}",
     {}),
    ("static-master-addr-brackets", "--nnodes 2 --master-addr [] --master-port 29511 {s}", {}),
    ("static-master-addr-space-after", "--nnodes 2 '--master-addr=10.0.0.1 ' --master-port "
     "29511 {s}", {}),
    ("static-master-addr-unread", "--nnodes 1 --master-addr shared/rdzv {s}", {}),
    ("static-master-addr-user-at", "--nnodes 2 --master-addr root@10.0.0.1 --master-port 29511 "
     "{s}", {}),
    # c10d's TCP store as torch's backend reads it before opening it: the
    # endpoint's host of [\w.:-] and port of up to five digits, is_host,
    # read_timeout
    ("c10d-endpoint-user-at", "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint root@h:29400 {s}",
     {}),
    ("c10d-endpoint-user-at-one-node", "--rdzv-backend c10d --rdzv-endpoint root@h:29400 {s}",
     {}),
    ("c10d-endpoint-v6-zone", "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint "
     "[fe80::1%eth0]:29400 {s}", {}),
    ("c10d-endpoint-underscore-padded-port", "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint "
     "node_1.example-2.com:00080 {s}", {}),
    ("c10d-endpoint-port-signed", "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint h:+29400 {s}",
     {}),
    ("c10d-endpoint-port-six-digits", "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint h:029400 "
     "{s}", {}),
    ("c10d-endpoint-no-host", "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint :29400 {s}", {}),
    ("c10d-endpoint-empty-port", "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint h: {s}", {}),
    ("c10d-endpoint-three-parts", "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint a:b:c {s}",
     {}),
    ("c10d-endpoint-v6-unbracketed-port", "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint "
     "fe80::1:29500 {s}", {}),
    ("static-endpoint-v6-unbracketed-port", "--rdzv-backend static --rdzv-endpoint "
     "fe80::1:29500 --nnodes 2 --node-rank 1 {s}", {}),
    ("c10d-store-type-unknown", "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint h:1 "
     "--rdzv-conf store_type=redis {s}", {}),
    ("c10d-is-host-not-a-bool", "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint h:1 "
     "--rdzv-conf is_host=maybe {s}", {}),
    ("c10d-read-timeout-zero", "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint h:1 "
     "--rdzv-conf read_timeout=0 {s}", {}),
    ("static-endpoint-without-port", "--rdzv-backend static --rdzv-endpoint 10.0.0.1 "
     "--nnodes 2 {s}", {}),
    ("node-rank-negative-static", "--nnodes 2 --master-addr 10.1.1.1 --master-port 29511 "
     "--node-rank -1 {s}", {}),
    ("node-rank-negative-c10d", "--node-rank -3 --rdzv-backend c10d --rdzv-endpoint h:1 {s}",
     {}),
    ("node-rank-negative-one-node", "--node-rank -1 {s}", {}),
    ("monitor-interval-negative", "--monitor-interval -1 {s}", {}),
    ("monitor-interval-zero", "--monitor-interval 0 {s}", {}),
    ("monitor-interval-python-float", "--monitor-interval +1_0.5 {s}", {}),
    ("signals-sigkill", "--signals-to-handle SIGTERM,SIGKILL {s}", {}),
    ("signals-sigstop", "--signals-to-handle SIGSTOP {s}", {}),
    ("signals-sigchld", "--signals-to-handle SIGCHLD {s}", {}),
    ("run-path-and-module", "--run-path -m {s} x", {}),
    ("run-path-and-no-python", "--run-path --no-python {s} x", {}),
    ("run-path-no-python-module", "--run-path --no-python -m {s}", {}),
    ("run-path-no-python-forkserver", "--run-path --no-python --start-method forkserver {s}",
     {}),
    ("missing-script", "no_such_script.py", {}),
    ("missing-run-path-script", "--run-path no_such_script.py", {}),
    ("missing-program", "--no-python no-such-program-anywhere", {}),
    ("log-dir-a-file", "--log-dir {s} {s}", {}),
    ("log-dir-under-a-file", "--log-dir {s}/logs {s}", {}),
    ("log-dir-new", "--log-dir {d}/new/logs {s}", {}),
    ("virtual-local-rank-few-devices", "--virtual-local-rank --nproc-per-node 2 {s}",
     {"CUDA_VISIBLE_DEVICES": "0"}),
    ("shutdown-timeout-negative", "--shutdown-timeout -1 {s}", {}),
    ("shutdown-timeout-weeks", "--shutdown-timeout 2000000 {s}", {}),
    ("shutdown-timeout-env-fraction", "{s}", {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "2.5"}),
    ("shutdown-timeout-env-negative", "{s}", {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "-5"}),
    ("static-timeout-word", "--rdzv-conf timeout=soon --master-port 29511 {s}", {}),
    # c10d and etcd-v2 read no `timeout`: torch's own launcher test
    # (test/distributed/launcher/test_run.py) quotes inside the value.
    ("c10d-timeout-unread", "--nnodes=1:2 --rdzv-backend=c10d --rdzv-endpoint=localhost:0 "
     "\"--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'\" {s}", {}),
    ("one-node-timeout-unread", "--rdzv-conf timeout=soon {s}", {}),
    ("standalone-timeout-unread", "--standalone --rdzv-conf timeout=soon {s}", {}),
    ("pet-node-rank-negative", "--nnodes 2 --master-port 29511 {s}", {"PET_NODE_RANK": "-1"}),
    ("pet-monitor-interval-zero", "{s}", {"PET_MONITOR_INTERVAL": "0"}),
    ("pet-signals-sigkill", "{s}", {"PET_SIGNALS_TO_HANDLE": "SIGKILL"}),
    ("pet-run-path-and-module", "{s}", {"PET_RUN_PATH": "1", "PET_MODULE": "1"}),
    ("pet-log-dir-a-file", "{s}", {"PET_LOG_DIR": SCRIPT}),
    # ... and the clusters' variables yield to the user's rendezvous choice
    ("skypilot-static-flags", "--nnodes=2 --nproc_per_node=2 --master_port=12375 "
     "--master_addr=10.0.0.1 --node_rank=1 {s}", {**SKYPILOT_NODE1}),
    ("skypilot-one-node-per-node", "--nnodes 1 {s}", {**SKYPILOT_NODE1}),
    ("skypilot-one-node-static", "--nnodes 1 --rdzv-backend static {s}", {**SKYPILOT_NODE1}),
    ("skypilot-one-node-task", "{s}", {**SKYPILOT_NODE1, "SKYPILOT_NODE_IPS": "10.0.0.5\n",
                                        "SKYPILOT_NUM_NODES": "1", "SKYPILOT_NODE_RANK": "0",
                                        "SKYPILOT_NUM_GPUS_PER_NODE": "0"}),
    ("srun-static-flags", "--nnodes=2 --master_port=12375 --master_addr=10.0.0.1 "
     "--node_rank=1 {s}", {**SRUN_NODE1}),
    ("srun-one-node-per-node", "--nnodes 1 {s}", {**SRUN_NODE1}),
]

COMPARED = ("min_nodes", "max_nodes", "nproc_per_node", "rdzv_backend", "rdzv_endpoint",
            "max_restarts", "monitor_interval", "start_method", "role", "numa_binding")


def argv_of(line, scratch):
    """`line`'s words; {d} is a directory of the decider's own."""
    return shlex.split(line.replace("{s}", shlex.quote(SCRIPT)).replace("{d}", str(scratch)))


def test_the_corpus_is_large_and_unique():
    assert len(CORPUS) >= 60
    assert len({case[0] for case in CORPUS}) == len(CORPUS)


def corpus_env(extra):
    env = base_env(**extra)
    env.pop("OMP_NUM_THREADS", None)
    return env


@pytest.fixture(scope="module")
def torchrun_decisions(tmp_path_factory):
    if not TORCH2:
        pytest.skip("the corpus is checked against torch 2.x's torchrun (torch 1.13's lacks most "
                    "of its flags); this pass runs torch 1.13")
    scratch = tmp_path_factory.mktemp("torchrun")
    cases = [{"argv": argv_of(line, scratch), "env": {k: str(v) for k, v in env.items()}}
             for _, line, env in CORPUS]
    env = base_env()
    for k in ("TRUN_DRY_RUN",):
        env.pop(k, None)
    r = subprocess.run([PYTHON, str(FIXTURES / "torchrun_decide.py")], input=json.dumps(cases),
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    decisions = json.loads(r.stdout)
    assert len(decisions) == len(CORPUS)
    return {case[0]: d for case, d in zip(CORPUS, decisions)}


def trun_decision(line, extra, scratch):
    env = corpus_env(extra)
    env["TRUN_DRY_RUN"] = "1"
    r = trun(*argv_of(line, scratch), env=env, timeout=180)
    if r.returncode != 0:
        return {"ok": False, "why": f"exit {r.returncode}: {r.err.strip()}"}
    d = json.loads(r.out)
    d["ok"] = True
    return d


@pytest.mark.parametrize("name,line,extra", CORPUS, ids=[c[0] for c in CORPUS])
def test_trun_decides_as_torchrun(torchrun_decisions, tmp_path, name, line, extra):
    theirs = torchrun_decisions[name]
    ours = trun_decision(line, extra, tmp_path)
    assert ours["ok"] == theirs["ok"], f"trun: {ours}\ntorchrun: {theirs}"
    if not ours["ok"]:
        return
    expected = {k: theirs[k] for k in COMPARED}
    assert {k: ours[k] for k in expected} == expected
    if UUID.match(theirs["run_id"]):
        assert UUID.match(ours["run_id"]), ours["run_id"]
    else:
        assert ours["run_id"] == theirs["run_id"]
    # torch gives --node-rank to the static backend alone.
    if theirs["rdzv_backend"] == "static":
        assert ours["node_rank"] == theirs["node_rank"]
    # dynamic_rendezvous is a null handler in torch; trun's config says null.
    assert ours["event_log_handler"] == {"dynamic_rendezvous": "null"}.get(
        theirs["event_log_handler"], theirs["event_log_handler"])
    if theirs["worker_argv"] is not None:
        # The interpreter's path aside (torchrun's is sys.executable).
        assert ours["worker_argv"][1:] == theirs["worker_argv"][1:]


@pytest.mark.parametrize("flags,warning", [
    (["--standalone", "--nnodes", "2", "--rdzv-conf", "join_timeout=2"],
     "--standalone with --nnodes 2:2: no other node can reach a standalone store"),
    (["--node-rank", "1", "--master-port", "{port}", "--rdzv-conf", "timeout=2"],
     "--node-rank 1 is outside 0..0 for --nnodes 1"),
    (["--node-rank", "-1", "--master-port", "{port}", "--rdzv-conf", "timeout=2"],
     "--node-rank -1 is outside 0..0 for --nnodes 1"),
], ids=["standalone-two-nodes", "node-rank-one-of-one", "node-rank-negative"])
def test_lines_torchrun_accepts_but_cannot_run_wait_as_its_do_and_say_why(flags, warning):
    """torchrun accepts these and waits for a node that cannot come; trun
    decides the same (the corpus above), warns at once, and ends at the
    join timeout with the rendezvous named."""
    port = str(free_port())
    r = trun(*[f.replace("{port}", port) for f in flags], "--no-python", "true", timeout=60)
    assert r.returncode == 1, (r.returncode, r.err)
    assert warning in r.err, r.err
    assert "join_timeout" in r.err, r.err


@pytest.mark.once("what trun does as it starts the workers; no torch is imported")
@pytest.mark.parametrize("args,env,code,needle", [
    (["--signals-to-handle", "SIGTERM,SIGKILL", "--no-python", "true"], {}, 1,
     "--signals-to-handle: no handler can be set for SIGKILL"),
    (["--signals-to-handle", "SIGSTOP", "--no-python", "true"], {}, 1,
     "no handler can be set for SIGSTOP"),
    (["--signals-to-handle", "SIGCHLD", "--nproc-per-node", "2", "--no-python", "sh", "-c",
      "[ $LOCAL_RANK = 0 ] || exec sleep 60"], {}, 128 + signal.SIGCHLD,
     "--signals-to-handle lists SIGCHLD, which every worker exit sends"),
    (["no_such_script.py"], {}, 1, "training script 'no_such_script.py' not found"),
    (["--no-python", "no-such-program-anywhere"], {}, 3, "not found on PATH"),
], ids=["sigkill", "sigstop", "sigchld", "missing-script", "missing-program"])
def test_lines_torchrun_accepts_and_fails_as_it_starts_fail_there_and_say_why(
        args, env, code, needle):
    """torchrun accepts these (the corpus) and fails as its workers start, or
    at the first worker exit (SIGCHLD); trun fails at that point, with the
    problem named, not before it decides (--virtual-local-rank's short list:
    test_torchrun2_flags.py)."""
    r = trun(*args, env=base_env(**env), timeout=60)
    assert r.returncode == code, (r.returncode, r.err)
    assert needle in r.err, r.err


# ---- end to end: the workers' environments -------------------------------------

# Lines both generations' torchrun read (torch 1.13 has only the underscore
# spellings), with the worker count; 2.x-only lines are skipped under 1.13.
END_TO_END = [
    ("standalone", "--standalone --nnodes=1 --nproc_per_node=2", 2, False),
    ("abbreviations", "--nproc_per=2 --max_r=1 --standal", 2, False),
    ("node-rank-off-static", "--standalone --node_rank 1 --nproc_per_node 2", 2, False),
    ("event-dynamic-rendezvous",
     "--standalone --nproc_per_node 2 --event_log_handler dynamic_rendezvous", 2, True),
    ("logs-specs-default", "--standalone --nproc_per_node 2 --logs_specs default", 2, True),
]


@pytest.mark.parametrize("name,flags,n,torch2_only", END_TO_END, ids=[e[0] for e in END_TO_END])
def test_end_to_end_workers_see_what_torchrun_gives(tmp_path, name, flags, n, torch2_only):
    if torch2_only and not TORCH2:
        pytest.skip("torch 1.13's torchrun lacks this flag or value")
    diffs = [d for d in compare_envs(tmp_path, flags.split(), flags.split(), n) if d[2] != d[3]]
    # As test_launch.py's standalone comparison: torch 1.13's c10d agent lets
    # worker rank 0 host the store, trun's agent hosts it.
    expected = set() if TORCH2 else {("TORCHELASTIC_USE_AGENT_STORE", "True", "False")}
    assert {(d[1], d[2], d[3]) for d in diffs} == expected, diffs
