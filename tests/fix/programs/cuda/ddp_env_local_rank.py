"""DDP set up the common way (public ddp.py helpers: init_process_group(backend="nccl") then
torch.cuda.set_device(int(os.environ["LOCAL_RANK"])), DDP(device_ids=[local_rank]), a
DistributedSampler, .to(local_rank) batches), here with a one-process world by default."""
import json
import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def ddp_setup():
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", free_port())
    dist.init_process_group(backend="nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


def main():
    ddp_setup()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.manual_seed(103)
    data = TensorDataset(torch.randn(64, 6), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data, shuffle=False))
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1)).to(local_rank)
    model = DDP(model, device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for epoch in range(3):
        loader.sampler.set_epoch(epoch)
        for source, targets in loader:
            source, targets = source.to(local_rank), targets.to(local_rank)
            loss = nn.functional.mse_loss(model(source), targets)
            opt.zero_grad()
            loss.backward()
            opt.step()
        losses.append(loss.item())
    world = dist.get_world_size()
    dist.destroy_process_group()
    print("RESULT " + json.dumps({"losses": losses, "world": world}))


if __name__ == "__main__":
    main()
