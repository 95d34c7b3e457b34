"""nanoGPT's train.py DDP setup (karpathy/nanoGPT, MIT), reduced: the backend is a module-level
config global (backend = 'nccl', overridable from the command line) that init_process_group reads
later; under torchrun each rank takes device f'cuda:{ddp_local_rank}' and calls
torch.cuda.set_device(device). Success: one all_reduce across the group gives the world size."""
import json
import os

import torch
import torch.distributed as dist
from torch.distributed import init_process_group, destroy_process_group

# DDP settings
backend = 'nccl' # 'nccl', 'gloo', etc.
# system
device = 'cuda' # examples: 'cpu', 'cuda', 'cuda:0', 'cuda:1' etc., or try 'mps' on macbooks

ddp = int(os.environ.get('RANK', -1)) != -1 # is this a ddp run?
if ddp:
    init_process_group(backend=backend)
    ddp_rank = int(os.environ['RANK'])
    ddp_local_rank = int(os.environ['LOCAL_RANK'])
    ddp_world_size = int(os.environ['WORLD_SIZE'])
    device = f'cuda:{ddp_local_rank}'
    torch.cuda.set_device(device)
    total = torch.ones(1, device=device)
    dist.all_reduce(total)
    if ddp_rank == 0:
        print("RESULT " + json.dumps({"world_size": ddp_world_size, "all_reduce": total.item()}))
    destroy_process_group()
