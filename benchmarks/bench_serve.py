"""`torchport serve`'s cost, side by side in one run.

    .venv/bin/python benchmarks/bench_serve.py [--calls 200] [--rounds 15] [--block 25] [--settle 2]
                                               [--requests 800] [--clients 4] [--skip-http]

1. In process: `Deployment.infer` (persistent-worker handoff with a timeout, finiteness check,
   breaker, metrics) against calling the model directly, with `Deployment(timeout_s=None)` (the
   primary in the caller's thread, no timeout) next to it, and, as an asyncio server calls it,
   `Deployment.infer_async` against `loop.run_in_executor(pool, model)` (each one thread hop: the
   way any server keeps model calls off its loop), on two realistic models: an MLP (width 1024,
   batch 32) and a small transformer encoder (2 layers, d_model 256, 4 heads, batch 4 x 32
   tokens), each a few milliseconds a call on one idle thread. Every side calls one model object
   (two copies of the same weights can differ in speed by where their memory landed, which is not
   the runtime's cost). The five sides take turns of
   `--block` calls in a shuffled order, so a slow spell of the shared machine hits them alike, and
   within a turn every call goes the way steady traffic goes. The first `--settle` calls of each
   turn are made but not counted: they pay for the switch between sides (the weights another
   side's copy pushed out of the caches, the other thread's core), which a deployment serving its
   traffic never pays; taking turns call by call (`--block 1 --settle 0`) measures that switch,
   and always for the same neighbours. Per round, the ratio of each side's p50 and p99 to the
   direct call's; printed: the median ratio over the rounds with a 95% bootstrap interval, and the
   ratio of the p99s pooled over every round. The breakdown printed last shows where the
   handoff's time goes: its own round trip and the caller's wait beyond the model's time on the
   worker (two thread wake-ups). Target: p99 overhead <= 5% (median over the rounds).
2. Loopback HTTP load (uvicorn + Starlette, the load generator's threads in the same process, so
   they share the cores): throughput and p99 healthy, and with faults injected in the primary
   (2% exceptions, 1% NaN, 1% out of memory, 0.5% hangs past the timeout), every failing request
   answered by the fallback. Reported, no target.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import http.client
import itertools
import json
import os
import random
import statistics
import threading
import time

import torch

WIDTH, BATCH = 1024, 32
#: The transformer: layers, model width, heads, feed-forward width; inputs batch x tokens.
LAYERS, D_MODEL, HEADS, FFN, TOKENS, SEQUENCES = 2, 256, 4, 1024, 32, 4


class Faults(torch.nn.Module):
    """The model with faults injected while `inject` is set (set on the primary's copy only)."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.inject = False
        self.calls = itertools.count(1)

    def forward(self, inputs):
        if not self.inject:
            return self.model(inputs)
        call = next(self.calls)
        if call % 50 == 0:
            raise RuntimeError("injected kernel failure")
        if call % 100 == 1:
            return self.model(inputs) * float("nan")
        if call % 100 == 2:
            raise torch.OutOfMemoryError("injected out of memory")
        if call % 200 == 3:
            time.sleep(0.3)
        return self.model(inputs)


class Shared(torch.nn.Module):
    """The model, which a deployment's copy of it (copy.deepcopy) leaves the same object."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, inputs):
        return self.model(inputs)

    def __deepcopy__(self, memo):
        return self


def make_model():
    torch.manual_seed(0)
    layers = [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU(), torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU(),
              torch.nn.Linear(WIDTH, 16)]
    return Faults(torch.nn.Sequential(*layers))


def make_transformer():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)


MODELS = {
    f"MLP width {WIDTH}, batch {BATCH}": (make_model, lambda: torch.randn(BATCH, WIDTH)),
    f"transformer encoder {LAYERS}x(d {D_MODEL}, {HEADS} heads, ffn {FFN}), {SEQUENCES}x{TOKENS} tokens":
        (make_transformer, lambda: torch.randn(SEQUENCES, TOKENS, D_MODEL)),
}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def bootstrap(values: list[float], resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The median of `values` and a 95% percentile-bootstrap interval for it."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return statistics.median(values), medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def in_process(factory, make_inputs, calls: int, rounds: int, block: int = 25, settle: int = 2,
               seed: int = 0) -> dict:
    """Per round and side, p50 and p99 over `calls` calls, the sides taking turns of `settle` calls not
    counted then `block` counted ones, in an order shuffled every turn."""
    from torchport.serve import Deployment

    inputs = make_inputs()
    # One model object for every side (the deployments' primaries and the direct call): two copies
    # of the same weights can differ in speed by where their memory landed, which is not the
    # runtime's cost.
    direct_model = Shared(factory()).eval()
    deployment = Deployment(lambda: direct_model, primary="cpu", fallback="cpu", timeout_s=5.0)
    inline = Deployment(lambda: direct_model, primary="cpu", fallback="cpu", timeout_s=None)
    assert deployment.primary.model() is inline.primary.model() is direct_model

    def direct_call():
        with torch.inference_mode():
            direct_model(inputs)

    # An asyncio server keeps model calls off its loop: the direct way is one hop to a thread, which
    # Deployment.infer_async makes too (to a primary worker, the loop holding the deadline).
    loop, pool = asyncio.new_event_loop(), concurrent.futures.ThreadPoolExecutor(1)
    sides = {"direct": direct_call, "deployed": lambda: deployment.infer(inputs), "inline": lambda: inline.infer(inputs),
             "executor": lambda: loop.run_until_complete(loop.run_in_executor(pool, direct_call)),
             "async": lambda: loop.run_until_complete(deployment.infer_async(inputs))}
    for _ in range(20):
        for function in sides.values():
            function()
    rounds_out, pooled = [], {name: [] for name in sides}
    order, shuffle = list(sides.items()), random.Random(seed).shuffle
    for _ in range(rounds):
        times = {name: [] for name in sides}
        for _ in range(max(1, calls // block)):
            shuffle(order)
            for name, function in order:
                for index in range(settle + block):
                    started = time.perf_counter()
                    function()
                    if index >= settle:
                        times[name].append(time.perf_counter() - started)
        rounds_out.append({f"{name}_{stat}": (statistics.median(values) if stat == "p50" else percentile(values, 0.99))
                           for name, values in times.items() for stat in ("p50", "p99")})
        for name, values in times.items():
            pooled[name] += values
    deployment.close()
    inline.close()
    loop.close()
    pool.shutdown()
    return {"rounds": rounds_out, "pooled": pooled,
            "parameters": sum(parameter.numel() for parameter in direct_model.parameters())}


def handoff_breakdown(calls: int) -> None:
    """Where the timeout's handoff spends its time: the round trip of an empty call, and for the MLP the
    caller's wait minus the model's own time on the worker, back to back and right after a direct call
    on the caller's thread (the way the interleaved comparison runs it)."""
    from torchport.serve.handoff import Handoff

    model, inputs = make_model().eval(), torch.randn(BATCH, WIDTH)
    handoff = Handoff(4, "bench")
    inner: list[float] = []

    def timed(argument):
        started = time.perf_counter()
        with torch.inference_mode():
            result = model(argument)
        inner.append(time.perf_counter() - started)
        return result

    def direct():
        with torch.inference_mode():
            model(inputs)

    empty = []
    for _ in range(calls):
        started = time.perf_counter()
        handoff.call(lambda argument: None, None, 5.0)
        empty.append(time.perf_counter() - started)
    rows = {}
    for label, before in (("back to back", None), ("after a direct call", direct)):
        waits = []
        inner.clear()
        for _ in range(calls):
            if before:
                before()
            started = time.perf_counter()
            handoff.call(timed, inputs, 5.0)
            waits.append(time.perf_counter() - started)
        rows[label] = [wait - own for wait, own in zip(waits, inner)]
    handoff.close()
    print(f"  where the handoff's time goes ({calls} calls): empty call round trip p50 "
          f"{statistics.median(empty) * 1e6:.0f} us, p99 {percentile(empty, 0.99) * 1e6:.0f} us; "
          "caller's wait minus the model's time on the worker:")
    for label, extra in rows.items():
        print(f"    {label:20} p50 {statistics.median(extra) * 1e6:6.0f} us, p99 {percentile(extra, 0.99) * 1e6:6.0f} us "
              "(two thread wake-ups: the worker's, then the caller's)")


def report_in_process(title: str, result: dict, calls: int, rounds: int, block: int, settle: int) -> bool:
    rows, pooled = result["rounds"], result["pooled"]
    direct_p50 = statistics.median(pooled["direct"])
    turns = "call by call" if block == 1 else f"of {block} calls"
    if settle:
        turns += f" after {settle} not counted"
    print(f"in process, {title} ({result['parameters'] / 1e6:.2f}M parameters, fp32): direct call p50 {direct_p50 * 1e3:.2f} ms, p99 "
          f"{percentile(pooled['direct'], 0.99) * 1e3:.2f} ms ({rounds} rounds x {calls} calls a side, turns {turns})")
    met = True
    for side, base, label in (("deployed", "direct", "Deployment(timeout_s=5)"),
                              ("inline", "direct", "Deployment(timeout_s=None)"),
                              ("async", "executor", "asyncio: infer_async(timeout_s=5) / run_in_executor(model)")):
        p99, low99, high99 = bootstrap([row[f"{side}_p99"] / row[f"{base}_p99"] for row in rows])
        p50, low50, high50 = bootstrap([row[f"{side}_p50"] / row[f"{base}_p50"] for row in rows])
        pooled99 = percentile(pooled[side], 0.99) / percentile(pooled[base], 0.99)
        extra_us = (statistics.median(pooled[side]) - statistics.median(pooled[base])) * 1e6
        verdict = "met" if p99 - 1 <= 0.05 else "NOT met"
        met &= p99 - 1 <= 0.05
        print(f"  {label:27} p99 overhead {p99 - 1:+.1%} [95% CI {low99 - 1:+.1%}, {high99 - 1:+.1%}] "
              f"(pooled p99 {pooled99 - 1:+.1%}; target <= +5%: {verdict}); p50 overhead {p50 - 1:+.1%} "
              f"[{low50 - 1:+.1%}, {high50 - 1:+.1%}], {extra_us:+.0f} us at p50")
    return met


def load(requests: int, clients: int, inject: bool) -> dict:
    from torchport.serve import Deployment
    from torchport.serve.server import running_server

    deployment = Deployment(make_model, primary="cpu", fallback="cpu", timeout_s=0.15, failure_threshold=1000)
    deployment.primary.model().inject = inject
    body = json.dumps({"inputs": torch.randn(1, WIDTH).tolist()}).encode()
    latencies: list[float] = []
    failures = {"http_errors": 0, "failovers": 0}
    lock = threading.Lock()

    def client(url: str, count: int) -> None:
        host, port = url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        for _ in range(count):
            started = time.perf_counter()
            connection.request("POST", "/v1/predict", body=body, headers={"content-type": "application/json"})
            response = connection.getresponse()
            response.read()
            elapsed = time.perf_counter() - started
            with lock:
                latencies.append(elapsed)
                failures["http_errors"] += response.status != 200
                failures["failovers"] += response.getheader("x-torchport-failover") != "none"
        connection.close()

    with running_server(deployment) as url:
        threads = [threading.Thread(target=client, args=(url, requests // clients)) for _ in range(clients)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
    deployment.close()
    return {"throughput": len(latencies) / wall, "p50_ms": statistics.median(latencies) * 1e3,
            "p99_ms": percentile(latencies, 0.99) * 1e3, **failures, "requests": len(latencies)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="in-process calls per side and round")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved in-process rounds")
    parser.add_argument("--requests", type=int, default=800, help="HTTP requests per load test")
    parser.add_argument("--clients", type=int, default=4, help="concurrent HTTP clients")
    parser.add_argument("--block", type=int, default=25,
                        help="in-process calls a side makes (and counts) in each turn; 1: call by call")
    parser.add_argument("--settle", type=int, default=2,
                        help="calls a side makes at the start of each turn without counting them (the switch "
                             "between sides); 0 with --block 1 measures the switch on every call")
    parser.add_argument("--skip-http", action="store_true", help="only the in-process comparison")
    args = parser.parse_args()
    for name, value, least in (("--calls", args.calls, 1), ("--rounds", args.rounds, 2), ("--block", args.block, 1),
                               ("--settle", args.settle, 0), ("--requests", args.requests, 1),
                               ("--clients", args.clients, 1)):
        if value < least:
            parser.error(f"{name} {value} is too small: it must be at least {least}")
    torch.set_num_threads(1)

    with open("/proc/loadavg") as handle:
        print(f"load average at start: {' '.join(handle.read().split()[:3])} on {len(os.sched_getaffinity(0))} "
              "cores (shared machine)")
    for title, (factory, make_inputs) in MODELS.items():
        result = in_process(factory, make_inputs, args.calls, args.rounds, args.block, args.settle)
        report_in_process(title, result, args.calls, args.rounds, args.block, args.settle)
    handoff_breakdown(args.calls)
    if args.skip_http:
        return

    healthy = load(args.requests, args.clients, inject=False)
    faulty = load(args.requests, args.clients, inject=True)
    print(f"loopback HTTP, {args.clients} clients in this process, {args.requests} requests (batch 1):")
    for name, row in (("healthy", healthy), ("faults", faulty)):
        print(f"  {name:8} {row['throughput']:7.0f} req/s  p50 {row['p50_ms']:6.2f} ms  p99 {row['p99_ms']:7.2f} ms  "
              f"failovers {row['failovers']:4d}  non-200 {row['http_errors']}")
    print(f"  with faults / healthy: throughput x{faulty['throughput'] / healthy['throughput']:.2f}, "
          f"p99 x{faulty['p99_ms'] / healthy['p99_ms']:.2f}")


if __name__ == "__main__":
    main()
