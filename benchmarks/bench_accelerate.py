"""Accelerate: torchport's compile path against hand-written code, measured side by side in one run.

1. Training step of the small GPT: `torchport run --precision auto --compile` on the CUDA-written
   examples/train_gpt_cuda.py against the hand-ported fp32 eager twin examples/train_gpt_ported.py
   (final loss within 2%), and against the twin compiled by hand with torch.compile, with bf16
   autocast where the CPU has bf16 instructions (the same choice `--precision auto` makes), fp32
   otherwise (target >= 0.95x of it). The issue's >= 1.3x over fp32 assumes a CPU with fast bf16.
2. Inference forward of the same GPT: torchport.compile(model, precision="auto") against fp32 eager
   and against torch.compile by hand (bf16 autocast where the CPU has it; target >= 0.95x of it).
3. A fixed-shape model: torchport.compile (fp32, no padding needed) against plain torch.compile
   (target >= 0.95x).
4. The variable-length stream (100 batches, lengths 17..512) on XLA's CPU runtime in .venv-xla:
   torchport.compile with buckets against without (target >= 3x throughput), compilations included.

Ratios are speedups (higher is better). The machine is shared: by default step times are the
process's CPU time (OMP_NUM_THREADS=1, so one thread does the work), which other engineers' jobs
disturb far less than wall time; `--clock wall` measures wall time. Sides alternate; each ratio is
the geometric mean of per-round ratios, with the spread over rounds printed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
WORKLOADS = os.path.join(ROOT, "benchmarks", "workloads")
XLA_PYTHON = os.path.join(ROOT, ".venv-xla", "bin", "python")
sys.path.insert(0, EXAMPLES)
ENV = {**os.environ, "TORCHPORT_QUIET": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
WARMUP = 5  # steps before timing: the first call observes shapes, the second compiles


def _launcher(clock: str, body: str) -> list[str]:
    """`python -c` that (for the CPU clock) makes the scripts' perf_counter read process CPU time."""
    patch = "import time; time.perf_counter = time.process_time\n" if clock == "cpu" else ""
    return [sys.executable, "-c", patch + body]


def _train(command: list[str], steps: int, size: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as directory:
        result_file = os.path.join(directory, "result.json")
        subprocess.run([*command, *size, "--steps", str(steps), "--result", result_file,
                        "--checkpoint", os.path.join(directory, "ckpt.pt")],
                       check=True, cwd=EXAMPLES, env=ENV, stdout=subprocess.DEVNULL)
        with open(result_file) as handle:
            return json.load(handle)


def _ratio(slower: list[float], faster: list[float]) -> tuple[float, float, float]:
    """Geometric mean of per-round slower/faster, and the lowest and highest round."""
    ratios = [a / b for a, b in zip(slower, faster)]
    return math.exp(statistics.mean(math.log(r) for r in ratios)), min(ratios), max(ratios)


def _show(label: str, slower: list[float], faster: list[float], target: str) -> None:
    mean, low, high = _ratio(slower, faster)
    print(f"{label}: {mean:.2f}x [rounds {low:.2f}-{high:.2f}] ({target})", flush=True)


def _time(function, repeats: int, clock) -> float:
    samples = []
    for _ in range(repeats):
        started = clock()
        function()
        samples.append(clock() - started)
    return statistics.median(samples)


def _alternate(sides: dict, rounds: int, repeats: int, clock) -> dict:
    """{name: [median seconds per round]}, the sides run in turn each round."""
    times = {name: [] for name in sides}
    for _ in range(rounds):
        for name, function in sides.items():
            times[name].append(_time(function, repeats, clock))
    return times


def training(args, hand_bf16: bool) -> None:
    size = ["--n-embd", str(args.n_embd), "--n-layer", "4", "--block-size", str(args.block_size), "--batch-size", "8"]
    amp = ["--amp-dtype", "bfloat16"] if hand_bf16 else []
    sides = {
        "torchport": _launcher(args.clock, "import sys; from torchport.cli.main import main; sys.exit(main(sys.argv[1:]))")
        + ["run", "--device", "cpu", "--precision", "auto", "--compile", "train_gpt_cuda.py"],
        "fp32": _launcher(args.clock, "import runpy, sys; sys.argv = sys.argv[1:]; "
                                      "runpy.run_path('train_gpt_ported.py', run_name='__main__')")
        + ["train_gpt_ported.py"],
        "compiled by hand": _launcher(args.clock, "import runpy, sys, torch; sys.argv = sys.argv[1:]; import gpt\n"
                                                  "original = gpt.GPT.__init__\n"
                                                  "def init(self, *a, **k):\n"
                                                  "    original(self, *a, **k); self.forward = torch.compile(self.forward)\n"
                                                  "gpt.GPT.__init__ = init\n"
                                                  "runpy.run_path('train_gpt_ported.py', run_name='__main__')")
        + ["train_gpt_ported.py", *amp],
    }
    step = {name: [] for name in sides}
    loss = {}
    for _ in range(args.rounds):
        for name, command in sides.items():
            result = _train(command, args.steps, size)
            step[name].append(statistics.median(result["step_seconds"][WARMUP:]))
            loss[name] = result["losses"][-1]
    hand = "bf16 autocast + torch.compile" if hand_bf16 else "torch.compile (fp32: no fast bf16 here)"
    drift = abs(loss["torchport"] - loss["fp32"]) / loss["fp32"]
    _show("training step: torchport run --precision auto --compile vs hand-ported fp32 eager",
          step["fp32"], step["torchport"], f"target >= 1.3x with fast bf16; final loss {loss['torchport']:.4f} vs "
          f"{loss['fp32']:.4f}, {drift:.2%} apart, target <= 2%")
    _show(f"training step: torchport vs hand-written {hand}", step["compiled by hand"], step["torchport"],
          "target >= 0.95x")
    _show(f"training step: hand-written {hand} vs fp32 eager (reference)", step["fp32"], step["compiled by hand"],
          "no target")


def inference(args, hand_bf16: bool, clock) -> None:
    from gpt import GPT

    import torchport

    torch.manual_seed(0)
    model = GPT(block_size=args.block_size, n_embd=args.n_embd, n_layer=4, n_head=max(args.n_embd // 64, 1)).eval()
    ids = torch.randint(0, 256, (8, args.block_size))
    through_torchport = torchport.compile(model, target="cpu", precision="auto")
    by_hand = torch.compile(model, dynamic=False)

    def hand():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=hand_bf16):
            return by_hand(ids)

    with torch.no_grad():
        for _ in range(3):  # observe, compile, warm
            through_torchport(ids)
            hand()
        times = _alternate({"eager fp32": lambda: model(ids), "torchport": lambda: through_torchport(ids),
                            "by hand": hand}, args.rounds * 2, 10, clock)
        error = float((through_torchport(ids)[0].float() - model(ids)[0]).abs().max())
    label = "bf16 autocast + torch.compile" if hand_bf16 else "torch.compile (fp32)"
    _show("inference forward: torchport.compile(precision='auto') vs fp32 eager", times["eager fp32"],
          times["torchport"], f"target >= 2.0x with fast bf16; max |logit error| {error:.3g}")
    _show(f"inference forward: torchport vs hand-written {label}", times["by hand"], times["torchport"],
          "target >= 0.95x")


def fixed_shape(args, clock) -> None:
    import torchport

    fixed = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).eval()
    batch = torch.randn(64, 256)
    ours = torchport.compile(fixed, target="cpu", precision="keep")
    plain = torch.compile(fixed, dynamic=False)
    with torch.no_grad():
        for _ in range(3):
            ours(batch)
            plain(batch)
        times = _alternate({"plain": lambda: plain(batch), "torchport": lambda: ours(batch)}, args.rounds * 2, 200,
                           clock)
    _show("fixed shape: torchport.compile vs plain torch.compile", times["plain"], times["torchport"],
          f"target >= 0.95x; compilations {ours.report.compilations}")


def xla_stream(args) -> None:
    if not os.path.exists(XLA_PYTHON):
        print("xla stream: skipped, no .venv-xla (scripts/setup-xla-env.sh creates it)")
        return
    completed = subprocess.run(
        [XLA_PYTHON, os.path.join(WORKLOADS, "accelerate_xla_stream.py"), str(args.xla_batches), "17", "512",
         str(args.xla_unbucketed)],
        env={**ENV, "PJRT_DEVICE": "CPU"}, capture_output=True, text=True, cwd=ROOT,
    )
    line = next((line for line in completed.stdout.splitlines() if line.startswith("RESULT ")), None)
    if completed.returncode != 0 or line is None:
        print(f"xla stream: FAILED (exit {completed.returncode}): {completed.stderr[-2000:]}")
        return
    result = json.loads(line[len("RESULT "):])
    with_buckets, without = result["bucketed"], result["unbucketed"]
    print(f"xla stream (XLA:CPU, lengths 17..512, compilations included): throughput with buckets "
          f"({with_buckets['batches']} batches, {with_buckets['lengths']} lengths) vs without (its first "
          f"{without['batches']} batches, {without['lengths']} lengths): "
          f"{with_buckets['batches_per_s'] / without['batches_per_s']:.2f}x wall, "
          f"{with_buckets['batches_per_cpu_s'] / without['batches_per_cpu_s']:.2f}x CPU (target >= 3x); model "
          f"compilations {with_buckets['compilations']} vs {without['compilations']}; XLA compilations (small "
          f"slice graphs included) {with_buckets['xla_compiles']} vs {without['xla_compiles']}; max error vs CPU "
          f"{with_buckets['max_error']:.2g} / {without['max_error']:.2g}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Small by default: Inductor compilations dominate the run (a few minutes on 2 busy cores).
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--n-embd", type=int, default=128)
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                        help="cpu: the process's CPU time (default, steadier on a shared machine); wall")
    parser.add_argument("--xla-batches", type=int, default=100)
    parser.add_argument("--xla-unbucketed", type=int, default=20,
                        help="batches of the stream run without buckets (each a new length: one compile each)")
    parser.add_argument("--only", choices=["training", "inference", "fixed", "xla"], action="append",
                        help="run only these parts (repeatable)")
    args = parser.parse_args()
    torch.set_num_threads(int(ENV["OMP_NUM_THREADS"]))
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter

    from torchport.backends import resolve
    from torchport.backends.cpu import cpu_flags, has_native_bf16

    flags = cpu_flags()
    preferred = resolve("cpu").preferred_precision
    fast_bf16 = has_native_bf16()  # the cpu profile's flags (the fact --precision auto follows)
    print(f"CPU bf16 flags: avx512_bf16={'avx512_bf16' in flags} amx_bf16={'amx_bf16' in flags}; "
          f"--precision auto on cpu -> {preferred}; OMP_NUM_THREADS={ENV['OMP_NUM_THREADS']}; "
          f"clock: {'process CPU time' if args.clock == 'cpu' else 'wall'}; the machine may be shared", flush=True)
    parts = set(args.only or ["training", "inference", "fixed", "xla"])
    if "training" in parts:
        training(args, fast_bf16)
    if "inference" in parts:
        inference(args, fast_bf16, clock)
    if "fixed" in parts:
        fixed_shape(args, clock)
    if "xla" in parts:
        xla_stream(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
