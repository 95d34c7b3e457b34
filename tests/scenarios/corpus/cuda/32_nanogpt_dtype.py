"""nanoGPT-style precision setup: bf16 if torch.cuda.is_bf16_supported(), autocast ctx, GradScaler(enabled=fp16)."""
# corpus: plain=fails
import json
from contextlib import nullcontext

import torch
import torch.nn as nn
from torch.nn import functional as F

device = "cuda"
dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float16"
seed = 1337
torch.manual_seed(seed)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)


class Block(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.ln = nn.LayerNorm(n_embd)
        self.attn = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        q, k, v = self.attn(self.ln(x)).split(x.size(-1), dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.proj(y)


vocab, n_embd, block = 64, 32, 16
model = nn.Sequential(nn.Embedding(vocab, n_embd), Block(n_embd), Block(n_embd), nn.Linear(n_embd, vocab)).to(device)
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
data = torch.randint(0, vocab, (400,))


def get_batch(i):
    ix = torch.arange(4) * 37 + i
    x = torch.stack([data[j:j + block] for j in ix])
    y = torch.stack([data[j + 1:j + 1 + block] for j in ix])
    if device_type == "cuda":
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    else:
        x, y = x.to(device), y.to(device)
    return x, y


losses = []
for it in range(6):
    X, Y = get_batch(it)
    with ctx:
        logits = model(X)
        loss = F.cross_entropy(logits.view(-1, vocab), Y.view(-1))
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.item())
print("RESULT " + json.dumps({"dtype": dtype, "losses": losses}))
