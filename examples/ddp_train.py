"""A small, real DDP training over gloo: the job `make demo` runs through trun.

Fits a linear model to a fixed synthetic regression problem, each rank
training on its own shard, gradients averaged by DistributedDataParallel.
Deterministic: the same world size gives the same final loss, under trun or
torchrun, so the two can be compared line for line.
"""
import argparse
import hashlib
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP


def say(line: str) -> None:
    # One write per line: print() writes the text and the newline separately,
    # and lines of several workers sharing a console would interleave.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@record
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--fail-rank", type=int, default=-1,
                        help="raise ValueError('boom') on this rank at step 1")
    parser.add_argument("--fail-attempt", type=int, default=-1,
                        help="fail only on this restart attempt (default: every attempt)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    true_w = torch.arange(1.0, 9.0)
    x = torch.randn(256, 8)
    y = x @ true_w + 0.5
    shard = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(args.steps):
        attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        if step == 1 and rank == args.fail_rank and args.fail_attempt in (-1, attempt):
            raise ValueError("boom")
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[shard]).squeeze(1), y[shard])
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0 and (step % 5 == 4 or step == args.steps - 1):
            say(f"step {step + 1:3d}  mean loss {total.item() / world:.6f}")
    say(f"rank {rank}/{world} local_rank {os.environ['LOCAL_RANK']} done")
    if rank == 0:
        # The trained parameters, bit for bit, so that two launchers can be
        # compared on what the job computed, not only on a rounded loss.
        params = torch.cat([p.detach().flatten() for p in model.parameters()])
        digest = hashlib.sha256(params.numpy().tobytes()).hexdigest()[:16]
        say(f"RESULT world={world} loss={total.item() / world:.6f} params={digest}")
    # The model goes before the process group: left to the end of main(),
    # DDP's reducer would drop the group's last reference, and torch 1.13
    # joins gloo's threads there with the GIL held while one of them may
    # wait for the GIL to free a tensor (a hang after "done", seen here in
    # 3 of 90 runs).
    del model, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
