"""ImageNet-example style DDP: mp.spawn over torch.cuda.device_count() GPUs, tcp init, nccl, .cuda(gpu)."""
# corpus: plain=fails
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


def main_worker(gpu, ngpus_per_node, port, out_dir):
    torch.cuda.set_device(gpu)
    dist.init_process_group(backend="nccl", init_method=f"tcp://127.0.0.1:{port}",
                            world_size=ngpus_per_node, rank=gpu)
    torch.manual_seed(48)
    model = nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 2))
    model.cuda(gpu)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[gpu])
    criterion = nn.CrossEntropyLoss().cuda(gpu)
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    losses = []
    for step in range(4):
        images = torch.randn(8, 5).cuda(gpu, non_blocking=True)
        target = torch.randint(0, 2, (8,)).cuda(gpu, non_blocking=True)
        loss = criterion(model(images), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    if gpu == 0:
        with open(os.path.join(out_dir, "result.json"), "w") as f:
            json.dump({"losses": losses, "world": dist.get_world_size()}, f)
    dist.destroy_process_group()


def main():
    ngpus_per_node = torch.cuda.device_count()
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(main_worker, nprocs=ngpus_per_node, args=(ngpus_per_node, free_port(), out_dir))
        with open(os.path.join(out_dir, "result.json")) as f:
            result = json.load(f)
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
