"""Accelerate: torchport's compile path against hand-written code, measured side by side in one run.

1. Training step of the small GPT: `torchport run --precision auto --compile` on the CUDA-written
   examples/train_gpt_cuda.py (fp16 AMP -> the target's bf16, model compiled) against the
   hand-ported fp32 eager twin examples/train_gpt_ported.py (target >= 1.3x, final loss within 2%),
   and against the twin with hand-written bf16 autocast + torch.compile (target >= 0.95x of it).
2. Inference forward of the same GPT: torchport.compile(model, precision="auto") against fp32 eager
   (target >= 2.0x on a CPU with fast bf16) and against bf16 autocast + torch.compile by hand
   (target >= 0.95x of it).
3. A fixed-shape model: torchport.compile (fp32, no padding needed) against plain torch.compile
   (target >= 0.95x).
Ratios are speedups (higher is better), medians after warm-up, sides alternated. The CPU's bf16
flags are printed: without avx512_bf16 or amx_bf16, bf16 gains little and `auto` keeps fp32.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
sys.path.insert(0, EXAMPLES)
ENV = {**os.environ, "TORCHPORT_QUIET": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
WARMUP = 3


def _train(command: list[str], steps: int, size: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as directory:
        result_file = os.path.join(directory, "result.json")
        subprocess.run([*command, *size, "--steps", str(steps), "--result", result_file,
                        "--checkpoint", os.path.join(directory, "ckpt.pt")],
                       check=True, cwd=EXAMPLES, env=ENV, stdout=subprocess.DEVNULL)
        with open(result_file) as handle:
            return json.load(handle)


def _median_step(result: dict) -> float:
    return statistics.median(result["step_seconds"][WARMUP:])


def _time(function, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _alternate(sides: dict, rounds: int, repeats: int) -> dict:
    """{name: best median seconds}, the sides run in turn each round."""
    best = {name: float("inf") for name in sides}
    for _ in range(rounds):
        for name, function in sides.items():
            best[name] = min(best[name], _time(function, repeats))
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Small by default: six Inductor compilations dominate the run (a few minutes on 2 busy cores).
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--n-embd", type=int, default=128)
    parser.add_argument("--block-size", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(int(ENV["OMP_NUM_THREADS"]))

    from gpt import GPT
    from torchport.backends import resolve
    from torchport.backends.cpu import cpu_flags

    import torchport

    flags = cpu_flags()
    preferred = resolve("cpu").preferred_precision
    print(f"CPU bf16 flags: avx512_bf16={'avx512_bf16' in flags} amx_bf16={'amx_bf16' in flags}; "
          f"--precision auto on cpu -> {preferred}; OMP_NUM_THREADS={ENV['OMP_NUM_THREADS']}")

    size = ["--n-embd", str(args.n_embd), "--n-layer", "4", "--block-size", str(args.block_size), "--batch-size", "8"]
    # 1. training step ------------------------------------------------------------------------
    torchport_run = [sys.executable, "-m", "torchport", "run", "--device", "cpu", "--precision", "auto",
                     "--compile", "train_gpt_cuda.py"]
    ported = [sys.executable, "train_gpt_ported.py"]
    compiled_by_hand = [sys.executable, "-c",
                        "import runpy, sys, torch; sys.argv = sys.argv[1:];"
                        "compile_ = torch.compile; import gpt;"
                        "original = gpt.GPT.__init__\n"
                        "def init(self, *a, **k):\n original(self, *a, **k); self.forward = compile_(self.forward)\n"
                        "gpt.GPT.__init__ = init; runpy.run_path('train_gpt_ported.py', run_name='__main__')",
                        "train_gpt_ported.py", "--amp-dtype", "bfloat16"]
    runs = {name: [] for name in ("torchport", "fp32", "bf16+compile")}
    for _ in range(max(1, args.rounds - 1)):
        runs["torchport"].append(_train(torchport_run, args.steps, size))
        runs["fp32"].append(_train(ported, args.steps, size))
        runs["bf16+compile"].append(_train(compiled_by_hand, args.steps, size))
    step = {name: min(_median_step(result) for result in results) for name, results in runs.items()}
    loss = {name: results[-1]["losses"][-1] for name, results in runs.items()}
    print(f"training step: torchport run --precision auto --compile vs hand-ported fp32 eager: "
          f"{step['fp32'] / step['torchport']:.2f}x (target >= 1.3x); final loss {loss['torchport']:.4f} vs "
          f"{loss['fp32']:.4f} ({abs(loss['torchport'] - loss['fp32']) / loss['fp32']:.1%}, target <= 2%)")
    print(f"training step: torchport vs hand-written bf16 autocast + torch.compile: "
          f"{step['bf16+compile'] / step['torchport']:.2f}x (target >= 0.95x)")

    # 2. inference forward -------------------------------------------------------------------
    torch.manual_seed(0)
    model = GPT(block_size=args.block_size, n_embd=args.n_embd, n_layer=4, n_head=max(args.n_embd // 64, 1)).eval()
    ids = torch.randint(0, 256, (8, args.block_size))
    through_torchport = torchport.compile(model, target="cpu", precision="auto")
    by_hand = torch.compile(model, dynamic=False)

    def hand_bf16():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return by_hand(ids)

    with torch.no_grad():
        for _ in range(3):  # observe, compile, warm
            through_torchport(ids)
            hand_bf16()
        best = _alternate({"eager fp32": lambda: model(ids), "torchport": lambda: through_torchport(ids),
                           "bf16+compile": hand_bf16}, args.rounds, 10)
        error = float((through_torchport(ids)[0].float() - model(ids)[0]).abs().max())
    print(f"inference forward: torchport.compile(precision='auto') vs fp32 eager: "
          f"{best['eager fp32'] / best['torchport']:.2f}x (target >= 2.0x); max |logit error| {error:.3g}")
    print(f"inference forward: torchport vs hand-written bf16 autocast + torch.compile: "
          f"{best['bf16+compile'] / best['torchport']:.2f}x (target >= 0.95x)")

    # 3. fixed shape: the wrapper's own cost ----------------------------------------------------
    fixed = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).eval()
    batch = torch.randn(64, 256)
    ours = torchport.compile(fixed, target="cpu", precision="keep")
    plain = torch.compile(fixed, dynamic=False)
    with torch.no_grad():
        for _ in range(3):
            ours(batch)
            plain(batch)
        best = _alternate({"plain": lambda: plain(batch), "torchport": lambda: ours(batch)}, args.rounds, 200)
    print(f"fixed shape: torchport.compile vs plain torch.compile: {best['plain'] / best['torchport']:.2f}x "
          f"(target >= 0.95x); compilations {ours.report.compilations}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
