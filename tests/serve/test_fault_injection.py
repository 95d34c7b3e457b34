"""10,000 requests over loopback from concurrent clients while the primary throws, hangs past the
timeout, returns NaN and runs out of memory: no request is lost or answered wrongly, each failing
request is itself answered by the fallback, and the breaker opens and closes as configured."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from http_client import Client
from serve_models import MARKERS, FaultPlan, FaultyModel, sample
from torchport.compare.metrics import DEFAULT_THRESHOLDS
from torchport.serve import CLOSED, HALF_OPEN, OPEN, Deployment
from torchport.serve.server import running_server

TOTAL = 10_000
CLIENTS = 8
#: Requests of the breaker phase (the primary down, then back), sent by one client after the rest.
BREAKER_PHASE = 120
FAILURE_THRESHOLD, RECOVERY_SUCCESSES = 5, 3
TIMEOUT_S = 1.5
KINDS = sorted(MARKERS)


def fault_of(index: int) -> str | None:
    """2% of the requests carry a fault marker, the four kinds in turn."""
    return KINDS[(index // 50) % len(KINDS)] if index % 50 == 7 else None


@pytest.mark.slow
def test_ten_thousand_requests_with_injected_faults_lose_nothing():
    # The timeout is far above a healthy call (milliseconds), so that only a stall of the whole machine
    # (a busy CI host) can make five healthy calls in a row miss it and open the breaker.
    plan = FaultPlan(hang_s=TIMEOUT_S + 0.5)
    deployment = Deployment(lambda: FaultyModel(plan), primary="neuron-emulated", fallback="cpu", timeout_s=TIMEOUT_S,
                            failure_threshold=FAILURE_THRESHOLD, reset_after_s=0.2,
                            recovery_successes=RECOVERY_SUCCESSES, max_concurrency=16)
    fallback_model = deployment.fallback.model()
    rows = {}
    for index in range(64):
        rows[(index, None)] = sample(index)
        for kind in KINDS:
            rows[(index, kind)] = sample(index, MARKERS[kind])
    with torch.inference_mode():
        expected = {key: fallback_model(torch.tensor(value)).tolist() for key, value in rows.items()}
    tolerance = DEFAULT_THRESHOLDS["float32"].max_abs
    problems: list[str] = []
    answered = [0]
    # Healthy requests that the loaded machine made miss the timeout: answered by the fallback, as they
    # should be, and counted (bounded below) rather than treated as wrong.
    slow_healthy: list[int] = []
    lock = threading.Lock()

    def check(index: int, kind: str | None, response, fallback_allowed: bool = False) -> None:
        status, headers, body = response
        key = (index % 64, kind)
        with lock:
            answered[0] += 1
        if status != 200:
            problems.append(f"request {index} ({kind}): HTTP {status} {body}")
            return
        role, failover, routed = headers["x-torchport-role"], headers["x-torchport-failover"], headers["x-torchport-routed"]
        if kind is not None and (role, failover) != ("fallback", kind):
            problems.append(f"request {index} ({kind}) answered by {role} with failover {failover!r}")
        if kind is None and role != "primary" and failover == "timeout" and not fallback_allowed:
            slow_healthy.append(index)
        elif kind is None and role != "primary" and not fallback_allowed:
            problems.append(f"healthy request {index} answered by {role} (failover {failover!r}, routed {routed!r})")
        if role == "fallback" and body["outputs"] != expected[key]:
            problems.append(f"request {index} ({kind}): fallback answer differs from the fallback's own answer")
        if role == "primary" and not torch.allclose(torch.tensor(body["outputs"]), torch.tensor(expected[key]),
                                                    rtol=0, atol=tolerance):
            problems.append(f"request {index}: primary answer outside parity with the fallback's")

    def client_loop(url: str, first: int, count: int) -> None:
        client = Client(url)
        try:
            for index in range(first, first + count):
                kind = fault_of(index)
                check(index, kind, client.predict({"inputs": rows[(index % 64, kind)]}))
        except Exception as error:  # a lost request is a finding, not a crash of the test thread
            problems.append(f"client starting at {first}: {type(error).__name__}: {error}")
        finally:
            client.close()

    concurrent_total = TOTAL - BREAKER_PHASE
    per_client = concurrent_total // CLIENTS
    started = time.perf_counter()
    with running_server(deployment) as url:
        threads = [threading.Thread(target=client_loop, args=(url, number * per_client, per_client))
                   for number in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert deployment.breaker.history == [], (
            f"sporadic faults must not open the breaker; {len(slow_healthy)} healthy requests missed the "
            f"{TIMEOUT_S} s timeout in this phase; problems: {problems[:5]}")

        # The primary goes down: the first FAILURE_THRESHOLD requests fail over, then the breaker is open.
        client = Client(url)
        plan.down = True
        sent = concurrent_total
        responses = []
        for offset in range(40):
            response = client.predict({"inputs": rows[(sent % 64, None)]})
            responses.append(response)
            check(sent, None, response, fallback_allowed=True)
            sent += 1
        failovers = [response[1]["x-torchport-failover"] for response in responses]
        routed = [response[1]["x-torchport-routed"] for response in responses]
        assert failovers[:FAILURE_THRESHOLD] == ["error"] * FAILURE_THRESHOLD
        assert routed[FAILURE_THRESHOLD:] == ["breaker_open"] * (40 - FAILURE_THRESHOLD)
        assert deployment.breaker.state in (OPEN, HALF_OPEN)
        time.sleep(0.25)
        check(sent, None, client.predict({"inputs": rows[(sent % 64, None)]}), fallback_allowed=True)  # probe fails
        sent += 1
        deployment.flush()
        assert deployment.breaker.state == OPEN

        # The primary recovers: probes succeed and the breaker closes; traffic returns to the primary.
        plan.down = False
        time.sleep(0.25)
        recovery_requests = 0
        while deployment.breaker.state != CLOSED and recovery_requests < 20:
            check(sent, None, client.predict({"inputs": rows[(sent % 64, None)]}), fallback_allowed=True)
            sent += 1
            recovery_requests += 1
            deployment.flush()
        # One probe per request while half-open: RECOVERY_SUCCESSES good probes close the breaker.
        assert deployment.breaker.state == CLOSED and recovery_requests == RECOVERY_SUCCESSES
        while sent < TOTAL:
            response = client.predict({"inputs": rows[(sent % 64, None)]})
            check(sent, None, response)
            sent += 1
        client.close()
    elapsed = time.perf_counter() - started
    deployment.close()

    assert problems == [], problems[:10]
    assert answered[0] == TOTAL
    assert len(slow_healthy) <= TOTAL // 200, f"{len(slow_healthy)} healthy requests missed the timeout"
    states = [state for state, _ in deployment.breaker.history]
    assert states[0] == OPEN and states[-2:] == [HALF_OPEN, CLOSED]
    assert all(following in (OPEN, CLOSED) for state, following in zip(states, states[1:]) if state == HALF_OPEN)
    print(f"\n{TOTAL} requests in {elapsed:.1f}s ({TOTAL / elapsed:.0f}/s); healthy ones past the timeout: "
          f"{len(slow_healthy)}; breaker: {' -> '.join(states)}")
