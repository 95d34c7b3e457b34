"""`Deployment.predict_async`, the way `torchport serve` answers (the failover of each cause and the
path without a timeout are tested for both ways in test_runtime.py): the request runs on a primary
worker, the event loop holds the primary's deadline, and every request is answered exactly once,
by the primary or, within the same request, by the fallback.

The primary is the emulated Trainium device (a real non-CPU PyTorch device), the fallback the CPU.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch

from serve_models import (MARKERS, PRIMARY, FaultPlan, FaultyModel, fallback_answer, faulty, make_linear, sample,
                          settle)
from torchport.serve import CLOSED, Deployment, Draining


def metric(deployment, line_start: str) -> float:
    """The value of the exposition line starting with `line_start` (0 when absent)."""
    for line in deployment.metrics.exposition()[0].decode().splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def answered(deployment) -> float:
    return sum(metric(deployment, f'torchport_serve_requests_total{{device="{device}",outcome="{outcome}",role="{role}"}}')
               for device, role in ((PRIMARY, "primary"), ("cpu", "fallback")) for outcome in ("ok", "failover"))


def test_a_hung_call_that_returns_late_is_dropped_not_answered_twice():
    plan = FaultPlan(hang_s=0.4)
    with faulty(plan, timeout_s=0.1) as deployment:
        answer = asyncio.run(deployment.predict_async({"inputs": sample(1, MARKERS["timeout"])}))
        assert answer.failover == "timeout"
        assert metric(deployment, "torchport_serve_abandoned_calls ") == 1.0, "the hung call still holds its worker"
        time.sleep(0.6)  # the hung call returns on its worker
        assert metric(deployment, "torchport_serve_abandoned_calls ") == 0.0
        assert answered(deployment) == 1.0, "the late primary result was counted as an answer"
        assert deployment.breaker.state == CLOSED and deployment.breaker.consecutive_failures == 1, \
            "the late primary result was counted as a success"


def test_concurrent_requests_are_each_answered_once_with_the_right_values():
    plan = FaultPlan(hang_s=0.5)
    with faulty(plan, timeout_s=0.15, failure_threshold=1000, max_concurrency=8) as deployment:
        requests = [sample(index, MARKERS[sorted(MARKERS)[index % 4]] if index % 5 == 0 else None)
                    for index in range(60)]

        async def send_all():
            return await asyncio.gather(*(deployment.predict_async({"inputs": rows}) for rows in requests))

        answers = asyncio.run(send_all())
        for rows, answer in zip(requests, answers):
            expected = fallback_answer(deployment, rows)
            assert torch.allclose(torch.tensor(answer.body["outputs"]), torch.tensor(expected), atol=1e-5)
            assert (answer.failover is not None) == (rows[0][0] in MARKERS.values())
        settle(deployment)
        assert answered(deployment) == len(requests)


def test_the_event_loop_keeps_running_while_the_primary_hangs():
    plan = FaultPlan(hang_s=0.5)
    with faulty(plan, timeout_s=0.3) as deployment:
        ticks = []

        async def ticker():
            for _ in range(20):
                ticks.append(time.perf_counter())
                await asyncio.sleep(0.01)

        async def both():
            return await asyncio.gather(deployment.predict_async({"inputs": sample(1, MARKERS["timeout"])}), ticker())

        answer, _ = asyncio.run(both())
        assert answer.failover == "timeout"
        gaps = [later - earlier for earlier, later in zip(ticks, ticks[1:])]
        assert max(gaps) < 0.2, f"the loop was blocked for {max(gaps):.2f} s"
        settle(deployment)


def test_with_every_worker_held_by_a_hung_call_a_request_fails_over_at_once():
    plan = FaultPlan(hang_s=1.5)
    # max_concurrency 1: room for 2 * 1 + 4 = 6 primary workers
    with faulty(plan, timeout_s=0.1, max_concurrency=1, failure_threshold=1000) as deployment:
        async def hang_them():
            return await asyncio.gather(*(deployment.predict_async({"inputs": sample(index, MARKERS["timeout"])})
                                          for index in range(6)))

        assert all(answer.failover == "timeout" for answer in asyncio.run(hang_them()))
        started = time.perf_counter()
        answer = asyncio.run(deployment.predict_async({"inputs": sample(9)}))
        assert (answer.role, answer.failover) == ("fallback", "timeout")
        assert time.perf_counter() - started < 0.5, "the request waited for a hung worker"
        settle(deployment)


def test_a_draining_deployment_refuses_async_requests():
    with faulty(FaultPlan()) as deployment:
        deployment.drain(timeout_s=1)
        with pytest.raises(Draining):
            asyncio.run(deployment.predict_async({"inputs": sample(1)}))


def test_the_primary_runs_on_a_primary_worker_thread():
    seen = []

    class Recording(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 4)

        def forward(self, inputs):
            seen.append(threading.current_thread().name)
            return self.linear(inputs)

    with Deployment(Recording, primary=PRIMARY, fallback="cpu", timeout_s=1.0) as deployment:
        seen.clear()
        asyncio.run(deployment.predict_async({"inputs": sample(1)}))
        assert len(seen) == 1 and seen[0].startswith("torchport-primary")


def test_infer_async_takes_tensors_and_fails_over_within_the_request():
    plan = FaultPlan(hang_s=0.6)
    with faulty(plan) as deployment:
        healthy = asyncio.run(deployment.infer_async(torch.tensor(sample(3))))
        assert healthy.role == "primary" and healthy.body is None
        rows = sample(4, MARKERS["timeout"])
        answer = asyncio.run(deployment.infer_async(torch.tensor(rows)))
        assert (answer.role, answer.failover) == ("fallback", "timeout")
        assert answer.outputs.tolist() == fallback_answer(deployment, rows)
        settle(deployment)


def test_a_caller_that_stops_waiting_does_not_stop_the_request_or_its_accounting():
    plan = FaultPlan(hang_s=0.6)
    with faulty(plan, timeout_s=0.2) as deployment:
        async def impatient():
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(deployment.predict_async({"inputs": sample(1, MARKERS["timeout"])}), 0.05)
            assert deployment.in_flight == 1, "the request stopped counting as in flight with its caller"
            await asyncio.sleep(0.35)  # past the deadline: the loop abandons the hung call, the fallback answers
            assert metric(deployment, "torchport_serve_abandoned_calls ") == 1.0

        asyncio.run(impatient())
        settle(deployment)
        assert deployment.in_flight == 0
        assert metric(deployment, 'torchport_serve_failovers_total{cause="timeout"}') == 1.0
        assert answered(deployment) == 1.0
        assert deployment.breaker.consecutive_failures == 1, "the late primary result was counted as a success"


def test_close_with_a_request_in_flight_still_answers_it_from_the_fallback():
    plan = FaultPlan(hang_s=1.0)

    def slow_preprocess(payload):
        time.sleep(0.3)  # the primary starts after close() has drained for timeout_s and stopped the pools
        return torch.tensor(payload["inputs"])

    deployment = Deployment(lambda: {"model": FaultyModel(plan), "preprocess": slow_preprocess}, primary=PRIMARY,
                            fallback="cpu", timeout_s=0.2)

    async def scenario():
        # an earlier timeout: its fallback answer started the pool that answers after a timeout
        earlier = await deployment.predict_async({"inputs": sample(2, MARKERS["timeout"])})
        assert earlier.failover == "timeout"
        request = asyncio.ensure_future(deployment.predict_async({"inputs": sample(1, MARKERS["timeout"])}))
        await asyncio.sleep(0.05)
        await asyncio.get_running_loop().run_in_executor(None, deployment.close)
        return await request

    answer = asyncio.run(scenario())
    assert (answer.role, answer.failover) == ("fallback", "timeout")
    settle(deployment)


def test_a_caller_that_stops_waiting_before_its_request_has_a_place_is_counted():
    plan = FaultPlan(hang_s=0.4)
    with faulty(plan, timeout_s=2.0, max_concurrency=1) as deployment:
        async def scenario():
            slow = asyncio.ensure_future(deployment.predict_async({"inputs": sample(1, MARKERS["timeout"])}))
            await asyncio.sleep(0.05)  # the slow one holds the only place
            queued = asyncio.ensure_future(deployment.predict_async({"inputs": sample(2)}))
            await asyncio.sleep(0.05)
            queued.cancel()
            await slow
            return queued.cancelled()

        assert asyncio.run(scenario())
        settle(deployment)
        text = deployment.metrics.exposition()[0].decode()
        assert 'torchport_serve_rejected_total{reason="cancelled"} 1.0' in text
        assert deployment.in_flight == 0


class PacedModel(torch.nn.Module):
    """make_linear's model taking 20 ms a call on every device (a healthy primary under load)."""

    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        time.sleep(0.02)
        return self.model(inputs)


@pytest.mark.parametrize("form", ["with", "async with"])
def test_leaving_a_deployment_in_an_asyncio_app_neither_stalls_the_loop_nor_fails_requests_over(form):
    # an asyncio app leaves the deployment's block with 30 requests in flight: they are answered by
    # the primary, as they would have been, and the loop stays responsive (a blocking drain on the
    # loop's own thread waited out its whole timeout while the requests it held could not finish)
    async def app():
        loop = asyncio.get_running_loop()
        stalls = []

        async def heartbeat():
            while True:
                began = loop.time()
                await asyncio.sleep(0.01)
                stalls.append(loop.time() - began - 0.01)

        beat = asyncio.create_task(heartbeat())
        deployment = Deployment(PacedModel, primary=PRIMARY, fallback="cpu", timeout_s=5.0, max_concurrency=4)
        if form == "with":
            with deployment:
                tasks = [asyncio.create_task(deployment.predict_async({"inputs": sample(index)})) for index in range(30)]
                await asyncio.sleep(0.05)
        else:
            async with deployment:
                tasks = [asyncio.create_task(deployment.predict_async({"inputs": sample(index)})) for index in range(30)]
                await asyncio.sleep(0.05)
        answers = await asyncio.gather(*tasks)
        beat.cancel()
        return deployment, answers, max(stalls)

    deployment, answers, stall = asyncio.run(app())
    assert [answer.role for answer in answers] == ["primary"] * 30 and stall < 1.0
    assert metric(deployment, 'torchport_serve_failovers_total{cause="timeout"}') == 0
    assert deployment.breaker.state == CLOSED and deployment._stopped
    with pytest.raises(Draining):
        asyncio.run(deployment.predict_async({"inputs": sample(1)}))
