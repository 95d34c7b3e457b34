"""Train a small GPT the way a CUDA project does it: fp16 autocast, GradScaler, pinned loaders,
CUDA events for timing, a checkpoint saved on 'cuda' and loaded back with map_location.

Runs unchanged on any backend:  torchport run examples/train_gpt_cuda.py
"""

import argparse
import json
import os
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from gpt import GPT, synthetic_corpus

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda")
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--block-size", type=int, default=64)
parser.add_argument("--n-embd", type=int, default=128)
parser.add_argument("--n-layer", type=int, default=4)
parser.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True)
parser.add_argument("--checkpoint", default=os.path.join(os.path.dirname(__file__), "out", "ckpt.pt"))
parser.add_argument("--result", default=None, help="write final metrics as JSON here")
args = parser.parse_args()

assert torch.cuda.is_available(), "this script needs a GPU"
torch.manual_seed(0)
torch.cuda.manual_seed_all(0)
torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = True
print(f"device: {torch.cuda.get_device_name(0)}")

tokens = synthetic_corpus()
starts = torch.arange(0, len(tokens) - args.block_size - 1, args.block_size)
inputs = torch.stack([tokens[s : s + args.block_size] for s in starts])
targets = torch.stack([tokens[s + 1 : s + 1 + args.block_size] for s in starts])
loader = DataLoader(TensorDataset(inputs, targets), batch_size=args.batch_size, shuffle=True,
                    pin_memory=True, drop_last=True, generator=torch.Generator().manual_seed(0))

model = GPT(block_size=args.block_size, n_embd=args.n_embd, n_layer=args.n_layer, n_head=max(args.n_embd // 64, 1)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
scaler = torch.cuda.amp.GradScaler(enabled=args.amp)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

step, losses, step_seconds, step_cpu_seconds = 0, [], [], []
start.record()
while step < args.steps:
    for x, y in loader:
        began, began_cpu = time.perf_counter(), time.thread_time()
        x, y = x.cuda(non_blocking=True), y.to(args.device, non_blocking=True)
        with torch.cuda.amp.autocast(enabled=args.amp):
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
end.record()
torch.cuda.synchronize()
print(f"{args.steps} steps in {start.elapsed_time(end):.0f} ms, "
      f"peak memory {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")

os.makedirs(os.path.dirname(args.checkpoint), exist_ok=True)
torch.save({"model": model.state_dict(), "step": step}, args.checkpoint)
state = torch.load(args.checkpoint, map_location="cuda:0")
restored = GPT(block_size=args.block_size, n_embd=args.n_embd, n_layer=args.n_layer, n_head=max(args.n_embd // 64, 1)).to(torch.device("cuda", 0))
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
