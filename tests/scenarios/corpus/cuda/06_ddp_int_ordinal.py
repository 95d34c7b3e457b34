"""DDP with integer ordinals: model.to(rank), device_ids=[rank], output_device=rank, AMP, env:// init."""
# corpus: plain=fails launcher=torchrun
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def setup():
    dist.init_process_group(backend="nccl", init_method="env://")
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank % torch.cuda.device_count())
    return rank


def main():
    rank = setup()
    world = dist.get_world_size()
    torch.manual_seed(42)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(rank)
    ddp_model = DistributedDataParallel(model, device_ids=[rank], output_device=rank)
    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=1e-2)
    scaler = torch.cuda.amp.GradScaler()

    g = torch.Generator().manual_seed(100 + rank)
    losses = []
    for step in range(5):
        x = torch.randn(12, 8, generator=g).to(rank)
        target = torch.randint(0, 4, (12,), generator=g).cuda(rank)
        with torch.cuda.amp.autocast():
            loss = nn.functional.cross_entropy(ddp_model(x), target)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        t = torch.tensor([loss.item()], device=torch.device("cuda", rank))
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
