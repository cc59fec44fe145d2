"""--store-relay: a node's workers reach the job's store through their
agent's relay, so that the store holds one connection per node. A real
2-agent x 2-worker gloo DDP job over c10d on loopback, for the torch
generation under test. (The relay's semantics for torch's client are
test_store_torch.py's, run through `trun store --relay`.)"""
import re
import time
import urllib.request

from conftest import FIXTURES, free_port

TRAIN = FIXTURES / "relay_train.py"


def metric(agent, name):
    url = agent.wait_for(r"health check at (http://\S+)/health").group(1) + "/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return int(float(re.search(rf"^{name} (\S+)$", text, re.M).group(1)))


def test_two_nodes_train_through_one_link_each(agents, tmp_path):
    port = free_port()
    a = [agents(f"n{i}", "--nnodes", 2, "--nproc-per-node", 2, "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "job", "--store-relay", "on",
                "--health-check-port", 0, "--tee", 3, TRAIN, tmp_path)
         for i in range(2)]
    # Every rank trained, and holds its store connection until "go".
    deadline = time.time() + 180
    while len(list(tmp_path.glob("trained.*"))) < 4 and time.time() < deadline:
        assert all(x.proc.poll() is None for x in a), a[0].text() + a[1].text()
        time.sleep(0.1)
    try:
        host = next(x for x in a if "hosting the store" in x.text())
        # One link per node, the relays'; besides them the store holds only
        # the agents' own rendezvous connections (two each), where without
        # the relay the workers' own 4 (torch 1.13: 8) would come on top.
        assert metric(host, "trun_store_links") == 2
        assert metric(host, "trun_store_connections") <= 2 + 2 * 2
    finally:
        (tmp_path / "go").touch()
    assert [x.wait(timeout=180) for x in a] == [0, 0], a[0].text() + a[1].text()
    out = a[0].text() + a[1].text()
    store_port = re.search(r"store at 127\.0\.0\.1:(\d+)$", out, re.M).group(1)
    # The workers' MASTER_PORT is their node's relay, never the store.
    seen = re.findall(r"rank (\d)/4 trained, store at 127\.0\.0\.1:(\d+)", out)
    assert sorted(r for r, _ in seen) == ["0", "1", "2", "3"]
    assert store_port not in {p for _, p in seen}
    assert len({p for _, p in seen}) == 2  # one relay per node
