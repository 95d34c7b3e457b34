"""DDP + AMP, hand-ported to CPU: gloo, CPU fp16 autocast, torch.amp.GradScaler('cpu')."""
import json
import os
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def is_main():
    return not dist.is_initialized() or dist.get_rank() == 0


def main():
    ddp = int(os.environ.get("RANK", -1)) != -1
    assert ddp
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend="gloo", world_size=world_size, rank=int(os.environ["RANK"]))
    torch.manual_seed(420)

    ds = TensorDataset(torch.randn(96, 7), torch.randint(0, 3, (96,)))
    sampler = DistributedSampler(ds, shuffle=True, drop_last=True)
    loader = DataLoader(ds, batch_size=8, sampler=sampler, pin_memory=False, num_workers=0)
    model = nn.Sequential(nn.Linear(7, 32), nn.GELU(), nn.Dropout(0.1), nn.Linear(32, 3))
    model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    scaler = torch.amp.GradScaler("cpu")
    accum = 2
    losses = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            sync = (i + 1) % accum == 0
            with (nullcontext() if sync else model.no_sync()):
                with torch.autocast(device_type="cpu", dtype=torch.float16):
                    loss = nn.functional.cross_entropy(model(x), y) / accum
                scaler.scale(loss).backward()
            if sync:
                scaler.step(opt)
                scaler.update()
                opt.zero_grad(set_to_none=True)
            t = loss.detach() * accum
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            losses.append(t.item())
    if is_main():
        print("RESULT " + json.dumps({"losses": losses, "scale": scaler.get_scale()}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
