"""Cost of the emulated target device against native CPU on a small GPT training step.

Prints, side by side from one run: native CPU, the emulated device, and the emulated device with
`torchport check`'s census recording. Target: emulated / CPU <= 1.5x.

    .venv/bin/python benchmarks/bench_emulated.py [--steps 20] [--target neuron]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn


class Block(nn.Module):
    """One pre-norm transformer block (attention through scaled_dot_product_attention)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm_attention = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.projection = nn.Linear(width, width)
        self.norm_mlp = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        batch, length, width = hidden.shape
        query, key, value = self.qkv(self.norm_attention(hidden)).split(width, dim=-1)
        shape = (batch, length, self.heads, width // self.heads)
        query, key, value = (part.view(shape).transpose(1, 2) for part in (query, key, value))
        attended = nn.functional.scaled_dot_product_attention(query, key, value, is_causal=True)
        hidden = hidden + self.projection(attended.transpose(1, 2).reshape(batch, length, width))
        return hidden + self.mlp(self.norm_mlp(hidden))


class SmallGPT(nn.Module):
    """A GPT small enough for a laptop CPU: 4 layers, width 256, vocabulary 2048."""

    def __init__(self, vocabulary: int = 2048, width: int = 256, layers: int = 4, heads: int = 4, context: int = 128):
        super().__init__()
        self.token_embedding = nn.Embedding(vocabulary, width)
        self.position_embedding = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocabulary, bias=False)
        self.head.weight = self.token_embedding.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        hidden = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            hidden = block(hidden)
        return self.head(self.norm(hidden))


def make_step(device: str, batch: int, length: int):
    """A closure running one training step on `device` (model, AdamW, cross-entropy)."""
    torch.manual_seed(0)
    model = SmallGPT().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 2048, (batch, length + 1)).to(device)

    def step() -> float:
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def measure(step, steps: int, warmup: int = 3) -> float:
    """Median seconds per step after warm-up."""
    for _ in range(warmup):
        step()
    durations = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        durations.append(time.perf_counter() - start)
    return statistics.median(durations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--target", default="neuron")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")
    arguments = parser.parse_args()
    if arguments.threads:
        torch.set_num_threads(arguments.threads)

    from torchport import emulated as device
    from torchport.check.census import Census

    device.activate(arguments.target)
    device.set_downcast_enabled(False)  # the cost of the device itself; downcasts are measured by check
    cpu_step = make_step("cpu", arguments.batch, arguments.length)
    emulated_step = make_step(device.DEVICE_TYPE, arguments.batch, arguments.length)
    census_step = make_step(device.DEVICE_TYPE, arguments.batch, arguments.length)
    # Interleave the measurements so machine noise hits every variant alike.
    results = {"cpu": [], "emulated": [], "emulated+census": []}
    census = Census(device.active_profile())
    for _ in range(3):
        results["cpu"].append(measure(cpu_step, arguments.steps // 3 or 1))
        results["emulated"].append(measure(emulated_step, arguments.steps // 3 or 1))
        with census.recording():
            results["emulated+census"].append(measure(census_step, arguments.steps // 3 or 1))
    cpu = statistics.median(results["cpu"])
    print(
        f"small GPT training step (4 layers, width 256, batch {arguments.batch} x {arguments.length} tokens), "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, target profile {arguments.target}"
    )
    print(f"{'variant':<18}{'ms/step':>10}{'vs cpu':>9}")
    for name, values in results.items():
        value = statistics.median(values)
        print(f"{name:<18}{value * 1000:>10.1f}{value / cpu:>8.2f}x")
    ratio = statistics.median(results["emulated"]) / cpu
    print(f"emulated/cpu = {ratio:.2f}x (target <= 1.5x): {'met' if ratio <= 1.5 else 'NOT met'}")
    census_ratio = statistics.median(results["emulated+census"]) / statistics.median(results["emulated"])
    print(f"census on top of the emulated device: {census_ratio:.2f}x")


if __name__ == "__main__":
    main()
