"""A function on 2 hosts x 2 workers with trun's Python API; every rank's value comes back.

    python3 examples/python_demo.py [SSH_CONFIG]   (make demo passes sshd-loopback's)
"""
import sys

import trun


def train(steps):
    import hashlib
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        loss = model(torch.randn(32, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {dist.get_rank()}: final loss {loss.item():.4f}")
    weights = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    return hashlib.sha256(weights).hexdigest()[:16]


if __name__ == "__main__":
    result = trun.Launcher(hostnames=["trun-host-1", "trun-host-2"], workers_per_host=2,
                           backend="gloo", ssh_config_file=sys.argv[1] if sys.argv[1:] else None,
                           ).run(train, 20)
    for host, digests in result.results.items():
        print(f"{host}: model digests by local rank {digests}")
    print("every rank holds the same model:", len(set(result.by_ranks())) == 1)
