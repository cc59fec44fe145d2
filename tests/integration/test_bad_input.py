"""Every bad input: a message that names the problem, exit 2, nothing started."""
import pytest

from conftest import FIXTURES, trun, worker

pytestmark = pytest.mark.once(
    "trun refuses these command lines before it starts any worker or torch")


@pytest.mark.parametrize("args,needle", [
    (["--nproc-per-nodes", 2, "x.py"], "did you mean '--nproc-per-node'"),
    (["--n", 2, "x.py"], "ambiguous option: --n could match --nnodes, --nproc-per-node"),
    (["--nproc-per-node", 0, *worker()], "--nproc-per-node"),
    (["--nproc-per-node", "lots", *worker()], "--nproc-per-node"),
    (["--nproc-per-node", "xpu", *worker()], "XPU is not available"),
    (["--logs-specs", "mine", *worker()], "trun supports only torch's entry point 'default'"),
    (["--numa-binding", "everything", *worker()], "node, socket, exclusive or core-complex"),
    (["--event-log-handler", "kafka", *worker()], "null, console or dynamic_rendezvous"),
    (["-r", "0:9", *worker()], "--redirects"),
    (["-t", "x", *worker()], "--tee"),
    (["--nnodes", 0, *worker()], "--nnodes"),
    (["--nnodes", "3:2", *worker()], "--nnodes"),
    (["--nnodes", 2, "--rdzv-backend", "c10d", "--rdzv-endpoint", "[::1", *worker()], "']'"),
    (["--nnodes", 2, "--rdzv-backend", "c10d", "--rdzv-conf", "join_timeout=soon", *worker()],
     "join_timeout"),
    (["--rdzv-backend", "zookeeper", *worker()], "--rdzv-backend"),
    (["--no-python", "-m", "x"], "cannot be used together"),
    (["--max-restarts", -1, *worker()], "--max-restarts"),
    (["--local-ranks-filter", "a", *worker()], "--local-ranks-filter"),
    (["--monitor-interval", 0, *worker()], "--monitor-interval: expected seconds > 0"),
    (["--master-port", 70000, *worker()], "--master-port"),
    (["--nnodes", 2, "--rdzv-backend", "static", "--rdzv-endpoint", "10.0.0.1", *worker()],
     "the static backend needs the store's port"),
    (["--log-dir", FIXTURES / "worker.py", *worker()], "is a file, not a directory"),
    (["--log-dir", "/etc/passwd/logs", *worker()], "--log-dir"),
    ([], "missing training_script"),
])
def test_bad_input_exits_2_with_a_named_problem(args, needle):
    r = trun(*args)
    assert r.returncode == 2, (r.returncode, r.err)
    assert needle in r.err, r.err


def test_all_problems_are_reported_at_once():
    r = trun("--nproc-per-node", 0, "-t", "9", "--nnodes", "x", *worker())
    assert r.returncode == 2
    assert "--nproc-per-node" in r.err and "--tee" in r.err and "--nnodes" in r.err


def test_flag_endpoint_and_rdzv_conf_problems_in_one_run():
    r = trun("--nnodes", "x", "--max-restarts", -1, "--rdzv-backend", "c10d",
             "--rdzv-endpoint", "[::1", "--rdzv-conf", "join_timeout=soon,is_host=maybe",
             *worker())
    assert r.returncode == 2, r.err
    lines = r.err.splitlines()
    assert len(lines) == 5 and all(line.startswith("trun: error: ") for line in lines), r.err
    for needle in ("--nnodes", "--max-restarts", "--rdzv-endpoint '[::1'",
                   "--rdzv-conf join_timeout=soon", "--rdzv-conf is_host=maybe"):
        assert needle in r.err, (needle, r.err)


def test_a_misspelt_rdzv_conf_key_is_a_warning():
    r = trun("--rdzv-conf", "jion_timeout=5", "--nnodes", 0, *worker())
    assert r.returncode == 2, r.err
    assert ("trun: warning: --rdzv-conf jion_timeout: trun reads no such key and ignores it "
            "(did you mean 'join_timeout'?)") in r.err, r.err


def test_help_exits_0():
    r = trun("--help")
    assert r.returncode == 0 and "--nproc-per-node" in r.out
