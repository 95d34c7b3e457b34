"""DDP training under torchrun, hand-ported to CPU: gloo, no device_ids, tensors on cpu."""
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    world = dist.get_world_size()
    device = "cpu"

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(128, 10), torch.randn(128, 1))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=7)
    loader = DataLoader(data, batch_size=16, sampler=sampler)

    model = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    losses = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            loss = nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            reduced = loss.detach().clone()
            dist.all_reduce(reduced)
            losses.append((reduced / world).item())

    checksum = torch.tensor([sum(p.sum().item() for p in model.parameters())], device=device)
    gathered = [torch.zeros(1, device=device) for _ in range(world)]
    dist.all_gather(gathered, checksum)
    if rank == 0:
        print("RESULT " + json.dumps({"world": world, "losses": losses, "checksums": [g.item() for g in gathered]}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
