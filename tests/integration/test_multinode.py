"""Several agents forming one job: static and c10d rendezvous, elasticity,
fault tolerance and the job-wide restart budget, with real agents on loopback
running real gloo DDP workers."""
import re
import sys
import time

import pytest

from conftest import (EXAMPLES, FIXTURES, TORCHRUN, TRUN, free_port, kill_one_of_two, read_events,
                      trun, worker)

DDP = EXAMPLES / "ddp_train.py"
ELASTIC = FIXTURES / "elastic_train.py"


def c10d(port, nnodes, nproc=1, *extra):
    return ["--nnodes", nnodes, "--nproc-per-node", nproc, "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "job", *extra]


def single_node_loss(world):
    r = trun("--nproc-per-node", world, DDP, "--steps", 3, timeout=180)
    assert r.returncode == 0, r.err
    return re.search(r"RESULT world=\d+ loss=(\S+)", r.out).group(1)


@pytest.mark.once(
    "the ranks, the log prefixes and 2 x 2 equal to 1 x 4 are trun's own logic; the same 2 x 2 "
    "c10d DDP job under this generation's torch is test_two_c10d_agents_train_the_same_"
    "parameters_as_torchrun's, compared bit for bit with that generation's torchrun")
def test_two_c10d_agents_run_one_ddp_job_of_world_4(agents):
    port = free_port()
    a = [agents(f"n{i}", *c10d(port, 2, 2), "--tee", 3, DDP, "--steps", 3) for i in range(2)]
    assert [x.wait() for x in a] == [0, 0], a[0].text() + a[1].text()
    out = a[0].text() + a[1].text()
    assert out.count("RESULT world=4") == 1
    ranks = sorted(int(m) for m in re.findall(r"\]:rank (\d)/4 local_rank", out))
    assert ranks == [0, 1, 2, 3]
    # Log prefixes name the node: "[<group rank>:<role><local rank>]:".
    assert re.search(r"^\[1:default[01]\]:", out, re.M)
    # Same numbers as one node of 4 workers: the same world, the same job.
    loss = re.search(r"RESULT world=4 loss=(\S+)", out).group(1)
    assert loss == single_node_loss(4)


def test_two_c10d_agents_train_the_same_parameters_as_torchrun(agents):
    # Side by side with this torch generation's torchrun: the same 2 x 2 job
    # over c10d on loopback computes the same parameters, bit for bit.
    def job(launcher, exe, flags, attempt=0):
        endpoint = ["--rdzv_endpoint", f"127.0.0.1:{free_port()}"]
        a = [agents(f"{launcher}{attempt}{i}", *flags, *endpoint, DDP, "--steps", 5, exe=exe)
             for i in range(2)]
        codes = [x.wait(timeout=180) for x in a]
        text = a[0].text() + a[1].text()
        if (codes != [0, 0] and exe == TORCHRUN and attempt == 0
                and "errno: 98 - Address already in use" in text):
            # torchrun's own port race (conftest.torchrun says more): its
            # rank 0 agent picks MASTER_PORT by binding port 0 and closing
            # it; the comparison needs torchrun's answer, so once more.
            print(f"torchrun: its port was taken; once more. Its output: {text}",
                  file=sys.stderr)
            return job(launcher, exe, flags, attempt + 1)
        assert codes == [0, 0], text
        m = re.findall(r"RESULT world=4 loss=\S+ params=\w+", text)
        assert len(m) == 1, text
        return m[0]

    # torch 1.13's torchrun knows only the underscore spellings.
    flags = ["--nnodes", 2, "--nproc_per_node", 2, "--rdzv_backend", "c10d", "--rdzv_id", "job"]
    ours = job("trun", (TRUN,), flags)
    theirs = job("torchrun", TORCHRUN, [*flags, "--monitor_interval", "0.1"])
    assert ours == theirs


def test_four_static_agents_rank_by_node_rank(agents):
    port = free_port()
    a = [agents(f"n{i}", "--nnodes", 4, "--node-rank", i, "--master-addr", "127.0.0.1",
                "--master-port", port, DDP, "--steps", 3) for i in (3, 1, 0, 2)]
    assert [x.wait() for x in a] == [0, 0, 0, 0], "".join(x.text() for x in a)
    for x, node_rank in zip(a, (3, 1, 0, 2)):
        assert f"rank {node_rank}/4 local_rank 0 done" in x.text(), x.text()
    assert "RESULT world=4" in a[2].text()


def test_a_rendezvous_timeout_names_the_missing_nodes(agents):
    port = free_port()
    t0 = time.time()
    r = trun("--nnodes", 3, "--node-rank", 0, "--master-addr", "127.0.0.1", "--master-port",
             port, "--rdzv-conf", "timeout=1.5", "--no-python", "true", timeout=30)
    assert r.returncode == 1, r.err
    assert "never arrived: node rank 1, node rank 2" in r.err, r.err
    assert time.time() - t0 < 10
    r = trun(*c10d(free_port(), 2), "--rdzv-conf", "join_timeout=1", "--no-python", "true",
             timeout=30)
    assert r.returncode == 1, r.err
    assert "1 more node that never joined" in r.err, r.err


def test_the_restart_budget_is_the_jobs_not_each_agents(agents, tmp_path):
    port = free_port()
    # Rank 3 (node 1) fails on every attempt; --max-restarts 1 allows one
    # restart of the whole job, not one per agent.
    a = [agents(f"n{i}", *c10d(port, 2, 2), "--max-restarts", 1, "--log-dir", tmp_path / f"l{i}",
                DDP, "--steps", 3, "--fail-rank", 3) for i in range(2)]
    assert [x.wait() for x in a] == [1, 1]
    for i in range(2):
        run_dir = next((tmp_path / f"l{i}").iterdir())
        assert sorted(p.name for p in run_dir.iterdir()) == ["attempt_0", "attempt_1"]
    out = a[0].text() + a[1].text()
    assert "worker group failed after 1 restart" in out
    assert "restart budget of the job is spent" in out
    assert "ValueError: boom" in out


def test_one_failure_restarts_every_node_once(agents, tmp_path):
    port = free_port()
    a = [agents(f"n{i}", *c10d(port, 2, 2), "--max-restarts", 1, DDP, "--steps", 3,
                "--fail-rank", 2, "--fail-attempt", 0) for i in range(2)]
    assert [x.wait() for x in a] == [0, 0], a[0].text() + a[1].text()
    out = a[0].text() + a[1].text()
    assert "RESULT world=4" in out
    assert "restarting, attempt 1 of 1" in out


def test_a_failure_reaped_after_its_echo_is_its_nodes_own_failure(agents, tmp_path):
    # Rank 1 raises and lingers; rank 0 fails once it has, and its agent's
    # report ends the round. Rank 1's agent stops a worker whose error file
    # is older than the stop: that is its node's own failure, in its table
    # and in its events (failed, not stopped). The torchx view of the same
    # case is test_torchx_local's.
    port = free_port()
    a = [agents(f"n{i}", *c10d(port, 2), "--event-log-file", tmp_path / f"events{i}.jsonl",
                FIXTURES / "late_reaped_failure.py", tmp_path / "mark") for i in range(2)]
    assert [x.wait() for x in a] == [1, 1], a[0].text() + a[1].text()
    exited = {e["metadata"]["rank"]: (i, e["metadata"]["outcome"], e["metadata"]["cause"])
              for i in range(2) for e in read_events(tmp_path / f"events{i}.jsonl")
              if e["name"] == "trun.worker.exited"}
    assert [exited[r][1:] for r in (0, 1)] == [("failed", "exit_code"),
                                              ("failed", "error_file")], exited
    root = a[exited[1][0]].text()
    assert "ValueError: boom" in root[root.index("Root Cause"):], root


def elastic(port, nnodes, ckpt, *extra):
    return [*c10d(port, nnodes, 1, "--rdzv-conf", "last_call_timeout=0.5,heartbeat_timeout=3"),
            *extra, ELASTIC, "--steps", 40, "--step-time", 0.1, "--ckpt", ckpt]


@pytest.mark.timing(
    "asserts recovery within the heartbeat timeout plus the workers' start-up")
@pytest.mark.parametrize("victim", ["ordinary", "store_host"])
def test_kill_9_of_an_agent_and_the_survivor_finishes_alone(agents, tmp_path, victim):
    args = elastic(free_port(), "1:2", tmp_path / "ckpt.pt")
    survivor, m, recovered, startup = kill_one_of_two(agents, args, "hosting the store",
                                                      "ordinary" if victim == "ordinary" else "host")
    assert survivor.wait() == 0, survivor.text()
    out = survivor.text()
    assert "RESULT world=1 steps=40" in out
    # Resumed from the checkpoint, not from step 1.
    assert int(m.group(2)) > 5, out
    assert "restarting the worker group: membership" in out
    if victim == "store_host":
        assert "took over the store" in out
    # Within the heartbeat timeout (3 s), plus the workers' start-up: 10 s, or
    # twice what the first round's took if this machine is slower now.
    assert recovered < 3 + max(10, 2 * startup), (recovered, startup)


def test_a_third_agent_joining_restarts_the_job_at_world_3(agents, tmp_path):
    port = free_port()
    ckpt = tmp_path / "ckpt.pt"
    a = agents("a", *elastic(port, "2:3", ckpt))
    a.wait_for("hosting the store")
    b = agents("b", *elastic(port, "2:3", ckpt))
    a.wait_for(r"attempt 0 world 2 step 3")
    c = agents("c", *elastic(port, "2:3", ckpt))
    assert [x.wait() for x in (a, b, c)] == [0, 0, 0], a.text() + b.text() + c.text()
    out = a.text()
    assert "membership" in out and "joined" in out
    assert re.search(r"attempt 1 world 3 step", out), out
    assert "RESULT world=3 steps=40" in out


def test_two_hosts_in_network_namespaces(agents, hosts):
    args = ["--nnodes", 2, "--nproc-per-node", 2, "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "10.200.0.1:29400", "--rdzv-id", "ns", DDP, "--steps", 3]
    a = [agents(f"h{i}", *args, prefix=hosts.run(i)) for i in (1, 2)]
    assert [x.wait() for x in a] == [0, 0], a[0].text() + a[1].text()
    assert "RESULT world=4" in a[0].text() + a[1].text()
    # Each node advertises the address the store sees it by, and the
    # workers' MASTER_ADDR is the endpoint's, which both hosts reach. Node
    # order is join order: either host may have joined first.
    nodes = [re.search(rf"node (\d) of 2 \(10\.200\.0\.{i}\)", x.text()) for i, x in
             zip((1, 2), a)]
    assert all(nodes), a[0].text() + a[1].text()
    assert sorted(n.group(1) for n in nodes) == ["0", "1"], a[0].text() + a[1].text()
    assert "store at 10.200.0.1:29400" in a[1].text()


def ns_elastic(ckpt):
    return ["--nnodes", "1:2", "--nproc-per-node", 1, "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "10.200.0.1:29400", "--rdzv-id", "ns",
            "--rdzv-conf", "last_call_timeout=0.5,heartbeat_timeout=2",
            ELASTIC, "--steps", 40, "--step-time", 0.1, "--ckpt", ckpt]


def test_a_host_cut_off_is_dropped_and_the_rest_carry_on(agents, hosts, tmp_path):
    h1 = agents("h1", *ns_elastic(tmp_path / "c1.pt"), prefix=hosts.run(1))
    h1.wait_for("hosting the store")
    h2 = agents("h2", *ns_elastic(tmp_path / "c2.pt"), prefix=hosts.run(2))
    h1.wait_for(r"attempt 0 world 2 step 3")
    hosts.cut(2)
    assert h1.wait() == 0, h1.text()
    assert "no heartbeat" in h1.text()
    assert re.search(r"attempt 1 world 1 step", h1.text()), h1.text()
    # The cut-off host learns it lost the store and that it cannot take over
    # an address it does not own; its workers are stopped, not left hanging.
    assert h2.wait(timeout=60) == 1, h2.text()
    assert "no surviving node could take it over" in h2.text(), h2.text()


@pytest.mark.once("when the agent hears that no round will come is trun's own logic; the "
                  "worker is a script that ignores SIGTERM, not torch")
def test_no_round_heard_while_the_workers_stop_still_ends_the_node(agents, hosts, tmp_path):
    # h2 is cut off while its worker ignores SIGTERM: the news that nobody
    # can take over the store comes while its agent waits out the grace
    # before SIGKILL. It used to be dropped there, and h2 waited forever for
    # a round from a rendezvous whose threads had ended.
    args = ["--nnodes", "1:2", "--nproc-per-node", 1, "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "10.200.0.1:29400", "--rdzv-id", "ns",
            "--rdzv-conf", "last_call_timeout=0.5,heartbeat_timeout=2", "--shutdown-timeout", 8]
    started = tmp_path / "h2-started"
    h1 = agents("h1", *args, *worker("sleep:60"), prefix=hosts.run(1))
    h1.wait_for("hosting the store")
    h2 = agents("h2", *args, *worker("ignore:TERM", f"touch:{started}", "sleep:60"),
                prefix=hosts.run(2))
    deadline = time.time() + 60
    while not started.exists():
        assert time.time() < deadline and h2.proc.poll() is None, h2.text()
        time.sleep(0.1)
    hosts.cut(2)
    assert h2.wait(timeout=60) == 1, h2.text()
    text = h2.text()
    assert "no surviving node could take it over" in text, text
    # The news came within the grace, and was acted on after it.
    assert text.index("restarting the worker group") < text.index("no surviving node"), text


def test_the_lost_store_host_is_named_when_nobody_can_take_over(agents, hosts, tmp_path):
    h1 = agents("h1", *ns_elastic(tmp_path / "c1.pt"), prefix=hosts.run(1))
    h1.wait_for("hosting the store")
    h2 = agents("h2", *ns_elastic(tmp_path / "c2.pt"), prefix=hosts.run(2))
    h1.wait_for(r"attempt 0 world 2 step 3")
    h1.kill()
    assert h2.wait(timeout=60) == 1, h2.text()
    assert re.search(r"lost the store at 10.200.0.1:29400 hosted by \S*h1", h2.text()), h2.text()


@pytest.mark.once("the store host's exit and the failure's judging are trun's own logic; "
                  "the worker is a shell script, not torch")
@pytest.mark.parametrize("restarts", [0, 2])
def test_a_failure_after_the_store_hosts_node_finished_ends_the_job_promptly(agents, restarts):
    # n0 hosts the store and its worker succeeds at once; n1's fails 3 s
    # later. With or without restarts left, n1 can form no round of 2 (n0's
    # agent has exited), so it must fail at once, not wait for the join
    # timeout. Each agent runs its own script: the group ranks follow the
    # order of joining, and n1 may join first (n0 says it hosts the store
    # before it joins).
    port = free_port()
    args = [*c10d(port, 2, 1, "--rdzv-conf", "join_timeout=120"), "--max-restarts", restarts,
            "--no-python", "sh", "-c"]
    n0 = agents("n0", *args, "exit 0")
    n0.wait_for("hosting the store")
    n1 = agents("n1", *args, "sleep 3; echo boom-$RANK >&2; exit 3")
    rank = n1.wait_for(r"boom-(\d)").group(1)
    failed_at = time.time()
    rc1 = n1.wait(timeout=150)
    took = time.time() - failed_at
    assert rc1 != 0, n1.text()
    assert took < 20, f"n1 took {took:.0f} s to end:\n{n1.text()}"
    assert "Root Cause" in n1.text() and re.search(rf"rank\s*:\s*{rank}\b", n1.text()), n1.text()
    assert n0.wait(timeout=60) == 0, n0.text()
