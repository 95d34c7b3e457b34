"""ImageNet-example style DDP with mp.spawn, hand-ported to CPU: one process, gloo."""
import json
import os
import socket
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main_worker(rank, nprocs, port, out_dir):
    dist.init_process_group(backend="gloo", init_method=f"tcp://127.0.0.1:{port}",
                            world_size=nprocs, rank=rank)
    torch.manual_seed(48)
    model = nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 2))
    model = torch.nn.parallel.DistributedDataParallel(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    losses = []
    for step in range(4):
        images = torch.randn(8, 5)
        target = torch.randint(0, 2, (8,))
        loss = criterion(model(images), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    if rank == 0:
        with open(os.path.join(out_dir, "result.json"), "w") as f:
            json.dump({"losses": losses, "world": dist.get_world_size()}, f)
    dist.destroy_process_group()


def main():
    nprocs = 1
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(main_worker, nprocs=nprocs, args=(nprocs, free_port(), out_dir))
        with open(os.path.join(out_dir, "result.json")) as f:
            result = json.load(f)
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
