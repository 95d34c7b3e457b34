"""pytorch/examples distributed/ddp/example.py (BSD-3-Clause), reduced: each process splits the GPUs
with torch.cuda.device_count() // local_world_size, moves its model with .cuda(device_ids[0]), wraps
it as DDP(model, device_ids) with the ids passed positionally, and init_process_group(backend="nccl").
Success: one training step on the toy model and the loss it gives."""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim

from torch.nn.parallel import DistributedDataParallel as DDP


class ToyModel(nn.Module):
    def __init__(self):
        super(ToyModel, self).__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(local_world_size, local_rank):
    # setup devices for this process. For local_world_size = 2, num_gpus = 8,
    # rank 1 uses GPUs [0, 1, 2, 3] and
    # rank 2 uses GPUs [4, 5, 6, 7].
    n = torch.cuda.device_count() // local_world_size
    device_ids = list(range(local_rank * n, (local_rank + 1) * n))

    model = ToyModel().cuda(device_ids[0])
    ddp_model = DDP(model, device_ids)

    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)

    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 5).to(device_ids[0])
    loss = loss_fn(outputs, labels)
    loss.backward()
    optimizer.step()
    return loss.item()


def spmd_main(local_world_size, local_rank):
    dist.init_process_group(backend="nccl")
    loss = demo_basic(local_world_size, local_rank)
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps({"world_size": dist.get_world_size(), "loss_finite": loss == loss}))
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    parser.add_argument("--local_world_size", type=int, default=1)
    args = parser.parse_args()
    spmd_main(args.local_world_size, args.local_rank)
