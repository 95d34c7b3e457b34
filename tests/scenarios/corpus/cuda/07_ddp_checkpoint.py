"""DDP: rank 0 saves a checkpoint, all ranks reload it with map_location={'cuda:0': f'cuda:{rank}'}."""
# corpus: plain=fails launcher=torchrun
import json
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl")
    rank = dist.get_rank()
    device = torch.device(f"cuda:{local_rank}")

    torch.manual_seed(5)
    model = DDP(nn.Linear(6, 3).cuda(), device_ids=[local_rank], output_device=local_rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(3):
        x = torch.randn(4, 6, device=device) + rank
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    # every rank agrees on one directory
    path_holder = [tempfile.mkdtemp() if rank == 0 else None]
    dist.broadcast_object_list(path_holder, src=0)
    ckpt = os.path.join(path_holder[0], "checkpoint.pt")
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": 3}, ckpt)
    dist.barrier()

    map_location = {"cuda:%d" % 0: "cuda:%d" % local_rank}
    state = torch.load(ckpt, map_location=map_location)
    fresh = nn.Linear(6, 3).to(device)
    fresh.load_state_dict(state["model"])
    probe = torch.ones(2, 6, device=device)
    out = fresh(probe)
    flag = torch.tensor([float(torch.equal(out, model.module(probe)))], device=device)
    dist.all_reduce(flag)
    if rank == 0:
        print("RESULT " + json.dumps({"step": state["step"], "out": out.flatten().tolist(), "agree": flag.item()}))
    dist.barrier()
    if rank == 0:
        os.remove(ckpt)
        os.rmdir(path_holder[0])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
