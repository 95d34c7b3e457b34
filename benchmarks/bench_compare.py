"""Cost of a per-module parity run against the two plain forwards it compares, side by side.

    .venv/bin/python benchmarks/bench_compare.py [--targets cpu:no-fp64,cpu:bf16,neuron-emulated] [--repeats 7]

The parity run is everything `torchport compare` does for parity: copy the model for each side,
run it once plainly, run it again with every module hooked (checked to reproduce the plain output bit
for bit), copy outputs to the host, compute the metrics of every node.
The plain forwards are the same two forwards on already-placed models, without hooks. Target:
parity <= 3x the plain forwards, judged on the best of the interleaved repeats (the run least
disturbed by other load on a shared machine); the median ratio is printed next to it.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch


def small_gpt(layers: int, width: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=2048, n_positions=256, n_embd=width, n_layer=layers, n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    return GPT2LMHeadModel(config).eval()


def measure(model, inputs, reference_text: str, target_text: str, repeats: int) -> dict:
    """Median and best times of the two plain forwards and of the parity run, interleaved."""
    from torchport.compare.devices import move_to, parse_device, precision_context, prepare_model
    from torchport.compare.metrics import DEFAULT_THRESHOLDS
    from torchport.compare.parity import call_model, run_parity

    reference, target = parse_device(reference_text), parse_device(target_text)
    placed = [(spec, prepare_model(copy.deepcopy(model), spec).eval()) for spec in (reference, target)]

    def plain_forwards() -> None:
        with torch.no_grad():
            for spec, side_model in placed:
                with precision_context(spec):
                    call_model(side_model, move_to(inputs, spec.device, spec.downcasts_float64))
                spec.backend.synchronize()

    def parity_run():
        return run_parity(model, inputs, reference, target, DEFAULT_THRESHOLDS)

    plain_forwards()
    nodes = len(parity_run().nodes)
    plain_times, parity_times = [], []
    for _ in range(repeats):
        # Interleaved, so drift in machine load hits both alike.
        started = time.perf_counter()
        plain_forwards()
        plain_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        parity_run()
        parity_times.append(time.perf_counter() - started)
    return {"nodes": nodes, "plain": plain_times, "parity": parity_times}


def main() -> None:
    from torchport import backends

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default="cpu")
    parser.add_argument("--targets", default="cpu:no-fp64,cpu:bf16,neuron-emulated")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--sequence", type=int, default=128)
    options = parser.parse_args()

    model = small_gpt(options.layers, options.width)
    inputs = {"input_ids": torch.randint(0, 2048, (options.batch_size, options.sequence))}
    print(f"GPT-2 style model, {options.layers} layers x {options.width}, batch {options.batch_size} x "
          f"{options.sequence} tokens; reference {options.reference}; {options.repeats} interleaved repeats")
    print(f"{'target':<18}{'nodes':>6}{'plain median ms':>17}{'parity median ms':>18}{'ratio median':>14}"
          f"{'ratio best':>12}  target <= 3x (best of repeats)")
    for target in options.targets.split(","):
        name = target.partition(":")[0]
        try:
            usable = backends.get(name).probe().usable
        except Exception:
            usable = False
        if not usable:
            print(f"{target:<18}  skipped: backend {name!r} is not usable here")
            continue
        times = measure(model, inputs, options.reference, target, options.repeats)
        plain, parity = statistics.median(times["plain"]), statistics.median(times["parity"])
        best_ratio = min(times["parity"]) / min(times["plain"])
        verdict = "ok" if best_ratio <= 3.0 else "OVER TARGET"
        print(f"{target:<18}{times['nodes']:>6}{plain * 1000:>17.1f}{parity * 1000:>18.1f}{parity / plain:>13.2f}x"
              f"{best_ratio:>11.2f}x  {verdict}")


if __name__ == "__main__":
    main()
