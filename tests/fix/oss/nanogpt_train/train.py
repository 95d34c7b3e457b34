"""nanoGPT's train.py device handling (karpathy/nanoGPT, MIT), reduced to a tiny model on synthetic
tokens: the module-level config globals, the dtype chosen by torch.cuda.is_bf16_supported(), the
device type derived with 'cuda' in device, autocast as a context chosen once, pinned batches on
CUDA, torch.cuda.amp.GradScaler, the fused-AdamW test and a checkpoint reloaded with
map_location=device. Success: the loss falls and the checkpoint reloads to the same weights."""
import inspect
import json
import os
from contextlib import nullcontext

import torch
import torch.nn as nn
from torch.nn import functional as F

# -----------------------------------------------------------------------------
out_dir = 'out'
batch_size = 8
block_size = 16
max_iters = 40
learning_rate = 1e-2
device = 'cuda' # examples: 'cpu', 'cuda', 'cuda:0', 'cuda:1' etc., or try 'mps' on macbooks
dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float16' # 'float32', 'bfloat16', or 'float16', the latter will auto implement a GradScaler
# -----------------------------------------------------------------------------

torch.manual_seed(1337)
torch.backends.cuda.matmul.allow_tf32 = True # allow tf32 on matmul
torch.backends.cudnn.allow_tf32 = True # allow tf32 on cudnn
device_type = 'cuda' if 'cuda' in device else 'cpu' # for later use in torch.autocast
ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=ptdtype)

vocab = 8
data = torch.arange(4096) % vocab  # a periodic sequence a tiny model learns quickly


def get_batch():
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    if device_type == 'cuda':
        # pin arrays x,y, which allows us to move them to GPU asynchronously (non_blocking=True)
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    else:
        x, y = x.to(device), y.to(device)
    return x, y


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab, 32)
        self.head = nn.Linear(32, vocab)

    def forward(self, idx, targets):
        logits = self.head(torch.tanh(self.wte(idx)))
        return logits, F.cross_entropy(logits.view(-1, vocab), targets.view(-1))


model = TinyLM()
model.to(device)
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
fused_available = 'fused' in inspect.signature(torch.optim.AdamW).parameters
use_fused = fused_available and device_type == 'cuda'
extra_args = dict(fused=True) if use_fused else dict()
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, **extra_args)

losses = []
for it in range(max_iters):
    X, Y = get_batch()
    with ctx:
        logits, loss = model(X, Y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.item())

os.makedirs(out_dir, exist_ok=True)
torch.save({'model': model.state_dict(), 'iter_num': max_iters}, os.path.join(out_dir, 'ckpt.pt'))
checkpoint = torch.load(os.path.join(out_dir, 'ckpt.pt'), map_location=device)
reloaded = TinyLM()
reloaded.load_state_dict(checkpoint['model'])
same = all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(model.state_dict().values(), reloaded.state_dict().values()))
print("RESULT " + json.dumps({"first_loss": losses[0], "last_loss": losses[-1], "reloaded_same": same,
                              "iter_num": checkpoint['iter_num']}))
