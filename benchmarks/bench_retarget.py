"""Retargeting overhead and the precision policy, measured side by side in one run.

1. Training step of a small GPT: `torchport run examples/train_gpt_cuda.py` vs the hand-ported
   examples/train_gpt_ported.py, both fp32 (target <= 1.01x), on the training thread's CPU time per
   step (one intra-op thread: a busy neighbour on the shared machine does not count in it); the
   wall-clock ratio is printed beside it.
2. 10,000 tiny ops in application code: `torchport run` vs the hand-ported twin (target <= 1.05x);
   and the same loop where half the calls carry a device argument the runtime rewrites (reported:
   each such call pays one Python-level mapping, ~0.1-0.2 us).
3. `--precision auto` on the fp16-AMP CUDA script vs the hand-ported fp32 twin on this CPU, at
   width 384 and 128 tokens (target >= 1.5x faster, final loss within 2%).
4. Whole-process cost: `torchport run` of a short CUDA script vs `python` of its hand port
   (imports, backend probe, rewriting; target <= +0.1 s), with the rewritten-code cache warm (the
   usual case from the second run on) and cold (PYTHONDONTWRITEBYTECODE=1 and an empty cache: every
   module rewritten). Wall-clock and CPU time (user + system of the child) are both reported: on a
   shared machine CPU time is the steadier of the two. `--only startup` runs just this part.

Runs alternate between the two sides so drift on a noisy machine hits both (the two overhead
comparisons: 10 rounds, each side first in every other one; `--overhead-rounds`). Each overhead ratio is
the geometric mean of the per-round ratios with a 95% confidence interval (Student's t on the log
ratios); the upper bound is what counts against the target. Step statistics are medians over steps
after warm-up.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
WORKLOADS = os.path.join(ROOT, "benchmarks", "workloads")
PYTHON = sys.executable
# One intra-op thread on both sides: on a small shared machine, OpenMP barriers with a busy sibling
# core add noise far larger than the differences measured here.
ENV = {**os.environ, "TORCHPORT_QUIET": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def _train(command: list[str], steps: int) -> dict:
    with tempfile.TemporaryDirectory() as directory:
        result_file = os.path.join(directory, "result.json")
        checkpoint = os.path.join(directory, "ckpt.pt")
        subprocess.run([*command, "--steps", str(steps), "--result", result_file, "--checkpoint", checkpoint],
                       check=True, cwd=EXAMPLES, env=ENV, stdout=subprocess.DEVNULL)
        with open(result_file) as handle:
            return json.load(handle)


def _step_median(result: dict, warmup: int, key: str = "step_seconds") -> float:
    return statistics.median(result[key][warmup:])


def _step_medians(result: dict, warmup: int) -> tuple[float, float]:
    """(CPU, wall) median step seconds: the training thread's CPU time, which a busy neighbour on the
    shared machine does not inflate, and the wall-clock time."""
    return _step_median(result, warmup, "step_cpu_seconds"), _step_median(result, warmup)


def _tiny(command: list[str]) -> float:
    output = subprocess.run(command, check=True, cwd=WORKLOADS, env=ENV, capture_output=True, text=True).stdout
    return float(output.split("seconds=")[1].split()[0])


#: Two-sided 95% Student's t quantiles by degrees of freedom (1.96 beyond the table).
_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23,
        12: 2.18, 15: 2.13, 20: 2.09, 30: 2.04}


def _interval(ratios: list[float]) -> tuple[float, float, float]:
    """Geometric mean of `ratios` and its 95% confidence interval."""
    logs = [math.log(ratio) for ratio in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), float("nan"), float("nan")
    freedom = len(logs) - 1
    quantile = next((value for bound, value in sorted(_T95.items()) if freedom <= bound), 1.96)
    half = quantile * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def _difference_interval(differences: list[float]) -> tuple[float, float, float]:
    """Mean of paired differences and its 95% confidence interval (Student's t)."""
    mean = statistics.fmean(differences)
    if len(differences) < 2:
        return mean, float("nan"), float("nan")
    freedom = len(differences) - 1
    quantile = next((value for bound, value in sorted(_T95.items()) if freedom <= bound), 1.96)
    half = quantile * statistics.stdev(differences) / math.sqrt(len(differences))
    return mean, mean - half, mean + half


def _pair(measure, retargeted: list[str], ported: list[str], first: int) -> tuple[float, float]:
    """(measure(retargeted), measure(ported)), the ported side run first when `first` is 1."""
    if first:
        ported_value = measure(ported)
        return measure(retargeted), ported_value
    retargeted_value = measure(retargeted)
    return retargeted_value, measure(ported)


def _process(command: list[str], env: dict | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of `command`."""
    import resource
    import time

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(command, check=True, cwd=WORKLOADS, env=env or ENV, capture_output=True)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def startup(rounds: int) -> None:
    """Section 4: whole-process cost of `torchport run` over `python`, cache warm and cold."""
    torchport = [PYTHON, "-m", "torchport", "run", "--device", "cpu", "startup_cuda.py"]
    plain = [PYTHON, "startup_ported.py"]
    with tempfile.TemporaryDirectory() as cache:
        # The user's default: Python writes bytecode, the cache lives in its own folder.
        warm_env = {key: value for key, value in ENV.items() if key != "PYTHONDONTWRITEBYTECODE"}
        warm_env["TORCHPORT_CACHE_DIR"] = os.path.join(cache, "warm")
        cold_env = {**ENV, "PYTHONDONTWRITEBYTECODE": "1", "TORCHPORT_CACHE_DIR": os.path.join(cache, "cold")}
        _process(torchport, warm_env)  # fills the cache (and the OS's file cache for every side)
        _process(plain, warm_env)
        runs: dict[str, list[tuple[float, float]]] = {"python": [], "warm": [], "cold": []}
        sides = {"python": (plain, warm_env), "warm": (torchport, warm_env), "cold": (torchport, cold_env)}
        order = random.Random(0)
        for _ in range(rounds):
            # a new order each round: a process started right after another one's exit pays for it
            for side in order.sample(list(sides), len(sides)):
                runs[side].append(_process(*sides[side]))
    print(f"short script, whole process: torchport run - python, {rounds} alternating rounds "
          f"(python alone: wall {statistics.median(w for w, _ in runs['python']):.2f} s, "
          f"CPU {statistics.median(c for _, c in runs['python']):.2f} s); target <= +0.1 s")
    print(f"  {'':<28} {'median':>8}  {'mean [95% CI]':>26}")
    for side in ("warm", "cold"):
        for index, clock in ((0, "wall"), (1, "CPU")):
            differences = [run[index] - base[index] for run, base in zip(runs[side], runs["python"])]
            mean, low, high = _difference_interval(differences)
            label = f"cache {side}, {clock}"
            print(f"  {label:<28} {statistics.median(differences):+8.3f}  "
                  f"{mean:+8.3f} [{low:+.3f}, {high:+.3f}]")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the precision part and of the tiny ops with device arguments")
    parser.add_argument("--overhead-rounds", type=int, default=10,
                        help="rounds of the two overhead comparisons, GPT step and tiny ops (targets of 1%% and 5%%)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--precision-steps", type=int, default=20)
    parser.add_argument("--startup-rounds", type=int, default=20)
    parser.add_argument("--only", choices=["startup"], help="run one part only")
    args = parser.parse_args()
    for name, value in (("--rounds", args.rounds), ("--overhead-rounds", args.overhead_rounds),
                        ("--startup-rounds", args.startup_rounds)):
        if value < 2:
            parser.error(f"{name} {value} is too small: a confidence interval needs at least 2")
    for name, value in (("--steps", args.steps), ("--precision-steps", args.precision_steps)):
        if value <= 5:
            parser.error(f"{name} {value} is too small: the first 5 steps are warm-up")
    if args.only == "startup":
        startup(args.startup_rounds)
        return 0
    warmup = 5
    torchport = [PYTHON, "-m", "torchport", "run", "--device", "cpu"]

    retargeted_steps, ported_steps = [], []  # the training thread's CPU time per step
    retargeted_walls, ported_walls = [], []  # wall-clock time per step
    tiny_retargeted, tiny_ported = [], []
    device_retargeted, device_ported = [], []
    auto_steps, fp32_steps = [], []
    auto_loss = fp32_loss = None
    for round_index in range(max(args.rounds, args.overhead_rounds)):
        first = round_index % 2  # each side goes first in every other round
        if round_index < args.overhead_rounds:
            retargeted, ported = _pair(lambda command: _step_medians(_train(command, args.steps), warmup),
                                       [*torchport, "--precision", "keep", "train_gpt_cuda.py", "--no-amp"],
                                       [PYTHON, "train_gpt_ported.py"], first)
            retargeted_steps.append(retargeted[0])
            ported_steps.append(ported[0])
            retargeted_walls.append(retargeted[1])
            ported_walls.append(ported[1])
            retargeted, ported = _pair(_tiny, [*torchport, "tiny_ops_cuda.py"], [PYTHON, "tiny_ops_ported.py"], first)
            tiny_retargeted.append(retargeted)
            tiny_ported.append(ported)
        if round_index >= args.rounds:
            continue
        # The precision comparison needs matmuls large enough for bf16 to pay: width 384, 128 tokens.
        larger = ["--n-embd", "384", "--block-size", "128"]
        ported_fp32 = _train([PYTHON, "train_gpt_ported.py", *larger], args.precision_steps)
        fp32_steps.append(_step_median(ported_fp32, warmup))
        fp32_loss = ported_fp32["losses"][-1]
        flag = "--with-device-arguments"
        retargeted, ported = _pair(_tiny, [*torchport, "tiny_ops_cuda.py", flag], [PYTHON, "tiny_ops_ported.py", flag],
                                   first)
        device_retargeted.append(retargeted)
        device_ported.append(ported)
        auto = _train([*torchport, "--precision", "auto", "train_gpt_cuda.py", "--amp", *larger],
                      args.precision_steps)
        auto_steps.append(_step_median(auto, warmup))
        auto_loss = auto["losses"][-1]

    def paired(left, right):
        return _interval([a / b for a, b in zip(left, right)])

    rows = [
        ("GPT train step, torchport run / hand-ported (fp32, thread CPU time)", paired(retargeted_steps, ported_steps),
         "<= 1.01"),
        ("GPT train step, likewise, wall-clock time", paired(retargeted_walls, ported_walls), "(reported)"),
        ("10k tiny ops, torchport run / hand-ported", paired(tiny_retargeted, tiny_ported), "<= 1.05"),
        ("10k tiny ops, half with a rewritten device argument, likewise",
         paired(device_retargeted, device_ported), "(reported)"),
        ("GPT train step speedup, --precision auto fp16-AMP / hand-ported fp32",
         paired(fp32_steps, auto_steps), ">= 1.5"),
    ]
    loss_gap = abs(auto_loss - fp32_loss) / abs(fp32_loss)
    print(f"{'benchmark':<72} {'ratio':>8}  {'95% CI':>17}  target")
    for name, (ratio, low, high), target in rows:
        print(f"{name:<72} {ratio:8.3f}  [{low:6.3f}, {high:6.3f}]  {target}")
    print(f"{'final loss, --precision auto vs hand-ported fp32 (relative gap)':<72} {loss_gap:8.3%}  <= 2%")
    print(f"(medians of steps after the first {warmup}; GPT step and tiny ops {args.overhead_rounds} rounds, the "
          f"others {args.rounds}, alternating; width-384 "
          f"model: fp32 step {min(fp32_steps) * 1e3:.1f} ms, auto step {min(auto_steps) * 1e3:.1f} ms)")
    startup(args.startup_rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
