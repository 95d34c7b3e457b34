"""nanoGPT's device handling: a 'cuda' default, device_type derived from it, bf16 check, pinned batches."""
import json
import os
import tempfile
from contextlib import nullcontext

import torch
import torch.nn as nn

device = 'cuda'  # examples: 'cpu', 'cuda', 'cuda:0', 'cuda:1' etc., or try 'mps' on macbooks
dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float16'
torch.manual_seed(1337)
torch.backends.cuda.matmul.allow_tf32 = True  # allow tf32 on matmul
torch.backends.cudnn.allow_tf32 = True  # allow tf32 on cudnn
device_type = 'cuda' if 'cuda' in device else 'cpu'  # for later use in torch.autocast
ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=ptdtype)

data = torch.randint(0, 16, (512,))


def get_batch():
    ix = torch.randint(len(data) - 9, (4,))
    x = torch.stack([data[i:i + 8] for i in ix])
    y = torch.stack([data[i + 1:i + 9] for i in ix])
    if device_type == 'cuda':
        # pin arrays x,y, which allows us to move them to GPU asynchronously (non_blocking=True)
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    else:
        x, y = x.to(device), y.to(device)
    return x, y


model = nn.Sequential(nn.Embedding(16, 32), nn.Linear(32, 16)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
losses = []
for step in range(30):
    x, y = get_batch()
    with ctx:
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.view(-1, 16), y.view(-1))
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.item())

with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, 'ckpt.pt')
    torch.save({'model': model.state_dict(), 'iter_num': 30}, path)
    checkpoint = torch.load(path, map_location=device)
    model.load_state_dict(checkpoint['model'])
torch.cuda.synchronize()
print("RESULT " + json.dumps({"first": losses[0], "last": losses[-1], "falls": losses[-1] < losses[0],
                              "iter": checkpoint['iter_num']}))
