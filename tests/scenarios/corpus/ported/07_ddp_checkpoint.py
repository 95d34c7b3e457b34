"""DDP checkpoint save/reload, hand-ported to CPU: gloo, map_location='cpu'."""
import json
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()
    device = torch.device("cpu")

    torch.manual_seed(5)
    model = DDP(nn.Linear(6, 3).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(3):
        x = torch.randn(4, 6, device=device) + rank
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    path_holder = [tempfile.mkdtemp() if rank == 0 else None]
    dist.broadcast_object_list(path_holder, src=0)
    ckpt = os.path.join(path_holder[0], "checkpoint.pt")
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": 3}, ckpt)
    dist.barrier()

    state = torch.load(ckpt, map_location="cpu")
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
