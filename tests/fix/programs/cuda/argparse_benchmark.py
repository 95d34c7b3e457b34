"""An inference benchmark: argparse device default, .cuda(), cudnn.benchmark, synchronize, memory stats."""
import argparse
import json
import time

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda", help="device to benchmark on")
parser.add_argument("--iters", type=int, default=5)
args = parser.parse_args([])

torch.manual_seed(0)
torch.backends.cudnn.benchmark = True
model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
model = model.cuda().eval()
images = torch.randn(2, 3, 16, 16).cuda(non_blocking=True)
torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    for _ in range(2):
        model(images)  # warm-up
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.iters):
        out = model(images.to(args.device))
    torch.cuda.synchronize()
elapsed = time.perf_counter() - start
peak = torch.cuda.max_memory_allocated() / 2**20
print("RESULT " + json.dumps({"checksum": out.sum().item(), "timed": elapsed > 0, "peak_sane": peak >= 0}))
