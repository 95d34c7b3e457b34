"""The hand-ported twin of train_gpt_cuda.py: the same training, written device-neutrally.

This is what an engineer would write by hand to leave CUDA; torchport's benchmarks and tests
compare `torchport run train_gpt_cuda.py` against it.
"""

import argparse
import json
import os
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from gpt import GPT, synthetic_corpus

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--block-size", type=int, default=64)
parser.add_argument("--n-embd", type=int, default=128)
parser.add_argument("--n-layer", type=int, default=4)
parser.add_argument("--amp-dtype", choices=["none", "float16", "bfloat16"], default="none")
parser.add_argument("--checkpoint", default=os.path.join(os.path.dirname(__file__), "out", "ckpt-ported.pt"))
parser.add_argument("--result", default=None)
args = parser.parse_args()

accelerator = torch.accelerator.current_accelerator()
device = accelerator if accelerator is not None else torch.device("cpu")
torch.manual_seed(0)

tokens = synthetic_corpus()
starts = torch.arange(0, len(tokens) - args.block_size - 1, args.block_size)
inputs = torch.stack([tokens[s : s + args.block_size] for s in starts])
targets = torch.stack([tokens[s + 1 : s + 1 + args.block_size] for s in starts])
loader = DataLoader(TensorDataset(inputs, targets), batch_size=args.batch_size, shuffle=True,
                    pin_memory=accelerator is not None, drop_last=True,
                    generator=torch.Generator().manual_seed(0))

model = GPT(block_size=args.block_size, n_embd=args.n_embd, n_layer=args.n_layer, n_head=max(args.n_embd // 64, 1)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
amp_dtype = None if args.amp_dtype == "none" else getattr(torch, args.amp_dtype)
scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype is torch.float16)

step, losses, step_seconds, step_cpu_seconds = 0, [], [], []
while step < args.steps:
    for x, y in loader:
        began, began_cpu = time.perf_counter(), time.thread_time()
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
        step_seconds.append(time.perf_counter() - began)
        step_cpu_seconds.append(time.thread_time() - began_cpu)  # this thread's CPU time
        step += 1
        if step % 10 == 0:
            print(f"step {step:4d}  loss {losses[-1]:.4f}")
        if step >= args.steps:
            break

os.makedirs(os.path.dirname(args.checkpoint), exist_ok=True)
torch.save({"model": model.state_dict(), "step": step}, args.checkpoint)
state = torch.load(args.checkpoint, map_location=device)
restored = GPT(block_size=args.block_size, n_embd=args.n_embd, n_layer=args.n_layer, n_head=max(args.n_embd // 64, 1)).to(device)
restored.load_state_dict(state["model"])
restored.eval()
with torch.no_grad():
    _, reloaded_loss = restored(x, y)
print(f"final loss {losses[-1]:.4f}; reloaded checkpoint loss {reloaded_loss.item():.4f}")
if args.result:
    with open(args.result, "w") as handle:
        json.dump({"losses": losses, "reloaded_loss": reloaded_loss.item(), "step_seconds": step_seconds,
                   "step_cpu_seconds": step_cpu_seconds},
                  handle)
