"""DDP(model, [rank]) with device_ids passed positionally, in a one-process group."""
import json
import os
import socket

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
model = torch.nn.Linear(2, 2).cuda()
ddp_model = DDP(model, [0])
assert ddp_model(torch.ones(1, 2).cuda()).shape == (1, 2)
dist.destroy_process_group()
print("RESULT " + json.dumps({"ran": True}))
