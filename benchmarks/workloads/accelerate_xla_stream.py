"""Variable-length stream on XLA's CPU runtime: torchport.compile with and without shape buckets.

Run with the xla environment and PJRT_DEVICE=CPU (bench_accelerate.py does):
    PJRT_DEVICE=CPU .venv-xla/bin/python benchmarks/workloads/accelerate_xla_stream.py [BATCHES LOW HIGH PREFIX]

A stream of BATCHES batches (sequence lengths drawn from LOW..HIGH) runs through a small causal
transformer layer on the xla device, compilations included (that is the cost buckets save), the
logits read back to the host after each batch: all of it with buckets, its first PREFIX batches
without (nearly every batch there is a new length, so each compiles, as in the rest of the stream;
the whole stream would take tens of minutes on a busy 2-core machine). Prints one JSON line: per side
batches, seconds (wall and process CPU), throughput, compilations, and the largest difference from
the CPU model.
"""

from __future__ import annotations

import json
import random
import sys
import time

import torch
import torch.nn.functional as F
import torch_xla  # noqa: F401 - registers the xla device
import torch_xla.debug.metrics as metrics

import torchport


class CausalLayer(torch.nn.Module):
    def __init__(self, vocab: int = 64, width: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Embedding(vocab, width)
        self.norm1 = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.norm2 = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, ids):
        x = self.embed(ids)
        batch, length, width = x.shape
        q, k, v = (part.view(batch, length, self.heads, width // self.heads).transpose(1, 2)
                   for part in self.qkv(self.norm1(x)).chunk(3, dim=-1))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        x = x + self.mlp(self.norm2(x))
        return self.head(x)


def xla_compiles() -> int:
    data = metrics.metric_data("CompileTime")
    return int(data[0]) if data else 0


def run(compiled, batches, device) -> tuple[float, float, list]:
    outputs = []
    wall, cpu = time.perf_counter(), time.process_time()
    for ids in batches:
        outputs.append(compiled(ids.to(device)).cpu())
    return time.perf_counter() - wall, time.process_time() - cpu, outputs


def main() -> None:
    count, low, high, prefix = (int(value) for value in sys.argv[1:5]) if len(sys.argv) >= 5 else (100, 17, 512, 20)
    torch.manual_seed(0)
    model_cpu = CausalLayer().eval()
    device = torch.device("xla")
    model = CausalLayer().eval()
    model.load_state_dict(model_cpu.state_dict())
    model = model.to(device)
    generator = random.Random(0)
    batches = [torch.randint(0, 64, (4, generator.randint(low, high))) for _ in range(count)]
    result = {"batches": count, "lengths": len({ids.shape[1] for ids in batches}), "range": [low, high]}
    with torch.no_grad():
        for name, buckets, stream in (("bucketed", "auto", batches), ("unbucketed", None, batches[:prefix])):
            compiled = torchport.compile(model, target="xla", buckets=buckets)
            before = xla_compiles()
            wall, cpu, outputs = run(compiled, stream, device)
            result[name] = {
                "batches": len(stream), "lengths": len({ids.shape[1] for ids in stream}),
                "wall_s": wall, "cpu_s": cpu, "batches_per_s": len(stream) / wall,
                "batches_per_cpu_s": len(stream) / cpu, "xla_compiles": xla_compiles() - before,
                "compilations": compiled.report.compilations, "bucket_hits": compiled.report.bucket_hits,
                "max_error": max(float((got - model_cpu(ids)).abs().max()) for got, ids in zip(outputs, stream)),
            }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
