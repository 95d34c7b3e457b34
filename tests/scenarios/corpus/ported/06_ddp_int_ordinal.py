"""DDP with AMP, hand-ported to CPU: gloo, model on cpu, no device_ids, CPU fp16 autocast + scaler."""
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def setup():
    dist.init_process_group(backend="gloo", init_method="env://")
    rank = int(os.environ["RANK"])
    return rank


def main():
    rank = setup()
    world = dist.get_world_size()
    torch.manual_seed(42)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("cpu")
    ddp_model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu")

    g = torch.Generator().manual_seed(100 + rank)
    losses = []
    for step in range(5):
        x = torch.randn(12, 8, generator=g)
        target = torch.randint(0, 4, (12,), generator=g)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.cross_entropy(ddp_model(x), target)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        t = torch.tensor([loss.item()], device="cpu")
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        losses.append(t.item())

    params = torch.cat([p.detach().flatten() for p in ddp_model.module.parameters()])
    total = params.clone()
    dist.all_reduce(total)
    same = torch.allclose(total / world, params)
    if rank == 0:
        print("RESULT " + json.dumps({"losses": losses, "replicas_equal": bool(same), "psum": params.sum().item()}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
