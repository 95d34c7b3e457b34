"""Cost of a per-module parity run against the two plain forwards it compares, side by side.

    .venv/bin/python benchmarks/bench_compare.py [--target cpu:fp32] [--repeats 7]

The parity run is everything `torchport compare` does for parity: copy the model for each side,
hook every module, run both forwards, copy outputs to the host, compute the metrics of every node.
The plain forwards are the same two forwards on already-placed models, without hooks. Target:
parity <= 3x the plain forwards. Medians over repeats; the machine is shared, so rerun on doubt.
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


def main() -> None:
    from torchport.compare.devices import move_to, parse_device, precision_context, prepare_model
    from torchport.compare.metrics import DEFAULT_THRESHOLDS
    from torchport.compare.parity import call_model, run_parity

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default="cpu")
    parser.add_argument("--target", default="cpu:fp32")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--sequence", type=int, default=128)
    options = parser.parse_args()

    reference, target = parse_device(options.reference), parse_device(options.target)
    model = small_gpt(options.layers, options.width)
    inputs = {"input_ids": torch.randint(0, 2048, (options.batch_size, options.sequence))}
    placed = [(spec, prepare_model(copy.deepcopy(model), spec).eval()) for spec in (reference, target)]

    def plain_forwards() -> None:
        with torch.no_grad():
            for spec, side_model in placed:
                with precision_context(spec):
                    call_model(side_model, move_to(inputs, spec.device, spec.precision == "fp32"))
                spec.backend.synchronize()

    def parity_run():
        return run_parity(model, inputs, reference, target, DEFAULT_THRESHOLDS)

    plain_forwards()
    nodes = len(parity_run().nodes)
    plain_times, parity_times = [], []
    for _ in range(options.repeats):
        # Interleaved, so drift in machine load hits both alike.
        started = time.perf_counter()
        plain_forwards()
        plain_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        parity_run()
        parity_times.append(time.perf_counter() - started)
    plain, parity = statistics.median(plain_times), statistics.median(parity_times)
    ratio = parity / plain
    print(f"model: GPT-2 style, {options.layers} layers x {options.width}, batch {options.batch_size} x "
          f"{options.sequence} tokens; {options.reference} vs {options.target}; {nodes} module nodes compared")
    print(f"two plain forwards        median {plain * 1000:8.1f} ms  (min {min(plain_times) * 1000:.1f})")
    print(f"per-module parity run     median {parity * 1000:8.1f} ms  (min {min(parity_times) * 1000:.1f})")
    print(f"ratio parity / plain      {ratio:5.2f}x   target <= 3.00x   {'ok' if ratio <= 3.0 else 'OVER TARGET'}")


if __name__ == "__main__":
    main()
