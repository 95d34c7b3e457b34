"""The output contract is a filter, never the judge: a healthy primary is served for inputs the
factory's example did not foresee, and only outputs the fallback disagrees with fail over."""

from __future__ import annotations

import pytest
import torch

from serve_models import FEATURES, PRIMARY, RowsDropped, make_linear, sample
from torchport.serve import Deployment


def exposition(deployment) -> str:
    return deployment.metrics.exposition()[0].decode()


def reference(rows):
    with torch.inference_mode():
        return make_linear()(torch.tensor(rows))


@pytest.mark.parametrize("rows", [sample(3)[0], [sample(3), sample(4)]], ids=["one-row-1d", "3d"])
def test_a_healthy_primary_serves_inputs_of_another_rank_than_the_example(rows):
    # nn.Linear takes any leading dimensions: a 1-D row or a 3-D stack is as valid as the 2-D example
    with Deployment(lambda: {"model": make_linear(), "example": torch.randn(2, FEATURES)}, primary=PRIMARY,
                    fallback="cpu", failure_threshold=2) as deployment:
        for _ in range(3):  # the first is confirmed against the fallback's answer, the rest pass the contract
            answer = deployment.predict({"inputs": rows})
            assert (answer.role, answer.failover) == ("primary", None)
            assert torch.allclose(torch.tensor(answer.body["outputs"]), reference(rows), atol=1e-5)
        assert deployment.breaker.state == "closed"
        assert "torchport_serve_failovers_total{" not in exposition(deployment)
        # the one fallback run is counted, with what came of it
        assert 'torchport_serve_contract_checks_total{result="learned"} 1.0' in exposition(deployment)


def test_inputs_of_more_layouts_than_are_learned_are_counted_each_time_the_fallback_judges_them(monkeypatch):
    # past the layouts the contract keeps, every request of a new layout also runs on the fallback:
    # operators see it as a steady rate of `agreed`
    from torchport.serve import runtime

    monkeypatch.setattr(runtime, "CONFIRMED_LAYOUTS", 1)
    with Deployment(lambda: {"model": make_linear(), "example": torch.randn(2, FEATURES)}, primary=PRIMARY,
                    fallback="cpu") as deployment:
        for rows in (sample(3)[0], sample(3)[0], [sample(3), sample(4)], [sample(3), sample(4)]):
            assert deployment.predict({"inputs": rows}).role == "primary"
        text = exposition(deployment)
        assert 'torchport_serve_contract_checks_total{result="learned"} 1.0' in text
        assert 'torchport_serve_contract_checks_total{result="agreed"} 2.0' in text


class WithStats(torch.nn.Module):
    """Returns logits (one row per input row) and a 2-element summary that does not follow the batch."""

    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        logits = self.model(inputs)
        return {"logits": logits, "stats": torch.stack([logits.mean(), logits.std()])}


@pytest.mark.parametrize("example_rows", [1, 2, 3])
def test_an_output_that_happens_to_match_the_example_batch_is_not_taken_for_a_batched_one(example_rows):
    with Deployment(lambda: {"model": WithStats(), "example": torch.randn(example_rows, FEATURES)}, primary=PRIMARY,
                    fallback="cpu") as deployment:
        for batch in (1, 2, 3, 5):
            rows = [sample(index)[0] for index in range(batch)]
            answer = deployment.predict({"inputs": rows})
            assert (answer.role, answer.failover) == ("primary", None), (batch, answer.failover)
            assert len(answer.body["outputs"]["stats"]) == 2 and len(answer.body["outputs"]["logits"]) == batch


@pytest.mark.parametrize("example_rows", [1, 4])
def test_a_primary_that_drops_rows_fails_over_whatever_the_example_batch(example_rows):
    model = RowsDropped()
    with Deployment(lambda: {"model": model, "example": torch.randn(example_rows, FEATURES)}, primary=PRIMARY,
                    fallback="cpu") as deployment:
        deployment.primary.model().drop = True
        rows = [sample(index)[0] for index in range(3)]
        answer = deployment.predict({"inputs": rows})
        assert (answer.role, answer.failover) == ("fallback", "bad_output")
        assert torch.allclose(torch.tensor(answer.body["outputs"]), reference(rows), atol=1e-5)


class Flattens(torch.nn.Module):
    """On the primary, for 1-D inputs only, returns the right values in the wrong shape."""

    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        outputs = self.model(inputs)
        if inputs.device.type != "cpu" and inputs.dim() == 1:
            return outputs.reshape(2, 2)
        return outputs


def test_outputs_the_fallback_disagrees_with_fail_over_even_for_an_input_of_another_rank():
    with Deployment(lambda: {"model": Flattens(), "example": torch.randn(2, FEATURES)}, primary=PRIMARY,
                    fallback="cpu", failure_threshold=100) as deployment:
        row = sample(5)[0]
        answer = deployment.predict({"inputs": row})
        assert (answer.role, answer.failover) == ("fallback", "bad_output")
        assert answer.body["outputs"] == pytest.approx(reference(row).tolist(), abs=1e-5)
        assert deployment.predict({"inputs": [row]}).role == "primary"  # 2-D inputs stay on the primary


class WrongFromTheStart(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        outputs = self.model(inputs)
        return outputs.half() if inputs.device.type != "cpu" else outputs


def test_a_lazy_fallback_still_holds_the_primary_to_a_contract_and_says_whose_it_is():
    factory = lambda: {"model": WrongFromTheStart(), "example": torch.randn(2, FEATURES)}
    with Deployment(factory, primary=PRIMARY, fallback="cpu", lazy_fallback=True,
                    failure_threshold=100) as deployment:
        assert not deployment.fallback.loaded
        status = deployment.status()["output_contract"]
        assert "primary's own outputs" in status and "lazily" in status
        # the contract learned float16 from the primary itself, so this passes unchecked...
        assert deployment.predict({"inputs": sample(1)}).role == "primary"
        # ...but an output of another rank is held against the fallback's answer, which loads for it
        answer = deployment.predict({"inputs": sample(1)[0]})
        assert (answer.role, answer.failover) == ("fallback", "bad_output") and deployment.fallback.loaded
    with Deployment(factory, primary=PRIMARY, fallback="cpu") as deployment:  # a loaded fallback catches it at start
        assert "contract" in deployment.warmup["primary"]
        assert deployment.status()["output_contract"] == "checked against the fallback's outputs on the factory's example"


class FailsItsWarmUpThenDropsRows(torch.nn.Module):
    """On the primary (a non-CPU device) the first call raises (a first compilation that fails), later
    ones answer only the first row of a batch; on the CPU always right."""

    def __init__(self):
        super().__init__()
        self.model = make_linear()
        self.calls = 0

    def forward(self, inputs):
        if inputs.device.type == "cpu":
            return self.model(inputs)
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("first compilation failed")
        return self.model(inputs)[:1]


def test_a_lazy_fallback_loads_at_start_when_the_primary_fails_its_warm_up_and_sets_the_contract():
    factory = lambda: {"model": FailsItsWarmUpThenDropsRows(), "example": torch.randn(2, FEATURES)}
    with Deployment(factory, primary=PRIMARY, fallback="cpu", lazy_fallback=True, reset_after_s=0.0,
                    recovery_successes=1) as deployment:
        assert deployment.fallback.loaded and deployment.warmup["fallback"] == "ok"
        assert deployment.status()["output_contract"] == "checked against the fallback's outputs on the factory's example"
        rows = sample(1) + sample(2) + sample(3)
        for _ in range(6):  # probes of the primary fail the contract: the breaker never closes on it
            answer = deployment.predict({"inputs": rows})
            assert torch.allclose(torch.tensor(answer.body["outputs"]), reference(rows), atol=1e-5)
            assert answer.role == "fallback"
