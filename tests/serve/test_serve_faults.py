"""Fault patterns beyond throw / hang / NaN / out of memory: a primary that answers in the wrong shape
or dtype, fails only for some inputs, slows down call after call, returns structured outputs, cannot
load at start-up, or whose outputs the factory's postprocess cannot take. Each request is answered
by the fallback's own answer, and each pattern shows in the metrics.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch

from serve_models import FEATURES, make_linear, sample
from torchport.errors import UsageError
from torchport.serve import CLOSED, OPEN, Deployment, PostprocessFailed

PRIMARY = "neuron-emulated"


def on_primary(tensor) -> bool:
    return tensor.device.type != "cpu"


def exposition(deployment) -> str:
    return deployment.metrics.exposition()[0].decode()


def fallback_outputs(deployment, rows):
    with torch.inference_mode():
        return deployment.fallback.model()(torch.tensor(rows))


class Misshapen(torch.nn.Module):
    """make_linear's model; on the primary it answers in another shape or dtype."""

    def __init__(self, fault: str):
        super().__init__()
        self.model = make_linear()
        self.fault = fault

    def forward(self, inputs):
        outputs = self.model(inputs)
        if not on_primary(inputs):
            return outputs
        if self.fault == "rank":
            return outputs.flatten()
        if self.fault == "batch":
            return outputs[:1]
        if self.fault == "dtype":
            return outputs.half()
        if self.fault == "structure":
            return outputs, outputs
        return outputs


@pytest.mark.parametrize("fault", ["rank", "batch", "dtype", "structure"])
def test_a_primary_answering_in_the_wrong_shape_or_dtype_fails_over(fault):
    example = torch.tensor(sample(0) + sample(1))  # two rows, so the batch dimension is known
    # The primary keeps its fault for the warm-up too: it starts with the breaker open...
    with Deployment(lambda: {"model": Misshapen(fault), "example": example}, primary=PRIMARY, fallback="cpu",
                    reset_after_s=60) as deployment:
        assert "contract" in deployment.warmup["primary"] and deployment.breaker.state == OPEN
    # ...and one that turns bad after a clean warm-up fails over on the request itself.
    model = Misshapen("none")
    with Deployment(lambda: {"model": model, "example": example}, primary=PRIMARY, fallback="cpu",
                    failure_threshold=100) as deployment:
        assert deployment.warmup == {"primary": "ok", "fallback": "ok"}
        deployment.primary.model().fault = fault
        rows = sample(3) + sample(4)
        answer = deployment.predict({"inputs": rows})
        assert (answer.role, answer.failover) == ("fallback", "bad_output")
        assert answer.body["outputs"] == fallback_outputs(deployment, rows).tolist()
        assert 'torchport_serve_failovers_total{cause="bad_output"} 1.0' in exposition(deployment)


def test_a_primary_with_a_float64_downcast_in_its_profile_keeps_the_contract():
    class Float64(torch.nn.Module):
        def forward(self, inputs):
            doubled = inputs.double() * 2
            return doubled.float() if on_primary(inputs) else doubled  # neuron computes float64 as float32

    with Deployment(lambda: {"model": Float64(), "example": torch.ones(2, 3)}, primary=PRIMARY,
                    fallback="cpu") as deployment:
        assert deployment.warmup["primary"] == "ok"
        assert deployment.predict({"inputs": [[1.0, 2.0, 3.0]]}).role == "primary"


def test_without_an_example_the_output_contract_is_reported_as_not_checked():
    with Deployment(make_linear, primary=PRIMARY, fallback="cpu") as deployment:
        assert deployment.contract is None
        assert deployment.status()["output_contract"].startswith("not checked")


class FailsOnNegative(torch.nn.Module):
    """Raises on the primary only for inputs whose first element is negative."""

    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        if on_primary(inputs) and float(inputs[0, 0]) < 0:
            raise RuntimeError("kernel not implemented for this input on the device")
        return self.model(inputs)


def test_a_primary_failing_only_for_some_inputs_fails_those_over_and_serves_the_rest():
    rows = [[[(-1.0) ** index * (1 + index)] + [0.5] * (FEATURES - 1)] for index in range(12)]
    with Deployment(FailsOnNegative, primary=PRIMARY, fallback="cpu", failure_threshold=2) as deployment:
        answers = [deployment.predict({"inputs": row}) for row in rows]
        for row, answer in zip(rows, answers):
            negative = row[0][0] < 0
            assert answer.role == ("fallback" if negative else "primary")
            assert answer.failover == ("error" if negative else None)
            assert torch.allclose(torch.tensor(answer.body["outputs"]), fallback_outputs(deployment, row), atol=1e-5)
        # Failures never came twice in a row: the breaker stays closed.
        assert deployment.breaker.state == CLOSED
        assert 'torchport_serve_failovers_total{cause="error"} 6.0' in exposition(deployment)


class Slowing(torch.nn.Module):
    """On the primary every call takes `step_s` longer than the one before."""

    def __init__(self, step_s: float):
        super().__init__()
        self.model = make_linear()
        self.step_s = step_s
        self.delay_s = 0.0

    def __deepcopy__(self, memo):
        copied = Slowing(self.step_s)
        copied.model.load_state_dict(self.model.state_dict())
        return copied

    def forward(self, inputs):
        if on_primary(inputs):
            time.sleep(self.delay_s)
            self.delay_s += self.step_s
        return self.model(inputs)


def test_a_primary_that_slows_down_call_after_call_times_out_opens_the_breaker_and_leaves_no_call_behind():
    with Deployment(lambda: Slowing(0.03), primary=PRIMARY, fallback="cpu", timeout_s=0.1, failure_threshold=3,
                    reset_after_s=60) as deployment:
        answers = [deployment.predict({"inputs": sample(index)}) for index in range(10)]
        causes = [answer.failover or answer.routed or answer.role for answer in answers]
        first_timeout = causes.index("timeout")
        assert causes[:first_timeout] == ["primary"] * first_timeout and first_timeout >= 2
        assert causes[first_timeout:first_timeout + 3] == ["timeout"] * 3
        assert set(causes[first_timeout + 3:]) == {"breaker_open"} and deployment.breaker.state == OPEN
        for index, answer in enumerate(answers):
            assert torch.allclose(torch.tensor(answer.body["outputs"]), fallback_outputs(deployment, sample(index)),
                                  atol=1e-5)
        assert 'torchport_serve_failovers_total{cause="timeout"} 3.0' in exposition(deployment)
        deadline = time.monotonic() + 5
        while deployment.status()["abandoned_calls"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert deployment.status()["abandoned_calls"] == 0
        assert "torchport_serve_abandoned_calls 0.0" in exposition(deployment)


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    hidden: tuple


class Structured(torch.nn.Module):
    """Returns a dict, a tuple or a dataclass (a ModelOutput-like record); `poison` puts NaN in one
    nested field on the primary."""

    def __init__(self, kind: str):
        super().__init__()
        self.model = make_linear()
        self.kind = kind
        self.poison = False

    def forward(self, inputs):
        logits = self.model(inputs)
        hidden = logits * 2
        if self.poison and on_primary(inputs):
            hidden = hidden.clone()
            hidden[0, 0] = float("nan")
        if self.kind == "dict":
            return {"logits": logits, "extra": {"hidden": hidden}}
        if self.kind == "tuple":
            return logits, (hidden,)
        return Output(logits, (hidden,))


@pytest.mark.parametrize("kind", ["dict", "tuple", "dataclass"])
def test_structured_outputs_are_served_and_nan_in_a_nested_field_fails_over(kind):
    model = Structured(kind)
    with Deployment(lambda: model, primary=PRIMARY, fallback="cpu", shadow=1.0) as deployment:
        answer = deployment.predict({"inputs": sample(1)})
        assert answer.role == "primary"
        expected = make_linear()(torch.tensor(sample(1)))
        flat = answer.body["outputs"]
        logits = flat[0] if kind == "tuple" else flat["logits"]  # a dataclass answers as an object of its fields
        assert torch.allclose(torch.tensor(logits), expected, atol=1e-5)
        deployment.primary.model().poison = True
        answer = deployment.predict({"inputs": sample(2)})
        assert (answer.role, answer.failover) == ("fallback", "nonfinite")
        deployment.flush()
        # the NaN the primary gave a shadowed request is a mismatch, as a shadow call's would be
        assert deployment.shadow_monitor.comparisons == 2 and deployment.shadow_monitor.mismatches == 1


class LoadPlan:
    def __init__(self):
        self.fail = True

    def __deepcopy__(self, memo):
        return self


class Unmovable(torch.nn.Module):
    """make_linear's model that cannot be moved to a non-CPU device while its plan says so."""

    def __init__(self, plan: LoadPlan):
        super().__init__()
        self.model = make_linear()
        self.plan = plan

    def to(self, *args, **kwargs):
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
        if device is not None and device.type != "cpu" and self.plan.fail:
            raise RuntimeError("device firmware not loaded")
        return super().to(*args, **kwargs)

    def forward(self, inputs):
        return self.model(inputs)


def test_a_model_that_fails_to_load_on_the_primary_serves_from_the_fallback_until_a_probe_loads_it():
    plan = LoadPlan()
    with Deployment(lambda: Unmovable(plan), primary=PRIMARY, fallback="cpu", reset_after_s=0.05,
                    recovery_successes=1) as deployment:
        assert not deployment.primary.loaded and deployment.ready and deployment.breaker.state == OPEN
        assert "device firmware not loaded" in deployment.warmup["primary"]
        assert f'torchport_serve_load_failures_total{{device="{PRIMARY}",role="primary"}} 1.0' in exposition(deployment)
        answer = deployment.predict({"inputs": sample(1)})
        assert (answer.role, answer.routed) == ("fallback", "breaker_open")
        plan.fail = False
        deadline = time.monotonic() + 10
        while deployment.breaker.state != CLOSED and time.monotonic() < deadline:
            time.sleep(0.06)
            deployment.predict({"inputs": sample(2)})
            deployment.flush()
        assert deployment.primary.loaded and deployment.predict({"inputs": sample(3)}).role == "primary"


def test_a_model_that_loads_on_neither_device_is_one_usage_error():
    class Nowhere(Unmovable):
        def to(self, *args, **kwargs):
            raise RuntimeError("no memory for the weights")

    with pytest.raises(UsageError, match="fallback 'cpu'.*no memory for the weights"):
        Deployment(lambda: Nowhere(LoadPlan()), primary=PRIMARY, fallback="cpu")


class TupleOnPrimary(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        outputs = self.model(inputs)
        return (outputs, outputs) if on_primary(inputs) else outputs


def tensor_only(outputs):
    if not isinstance(outputs, torch.Tensor):
        raise TypeError(f"expected one tensor, got {type(outputs).__name__}")
    return {"outputs": outputs.tolist()}


def test_a_postprocess_that_rejects_the_primarys_outputs_fails_over_to_the_fallback():
    with Deployment(lambda: {"model": TupleOnPrimary(), "postprocess": tensor_only}, primary=PRIMARY,
                    fallback="cpu") as deployment:
        answer = deployment.predict({"inputs": sample(1)})
        assert (answer.role, answer.failover) == ("fallback", "bad_output")
        assert answer.body["outputs"] == fallback_outputs(deployment, sample(1)).tolist()
        assert 'torchport_serve_failovers_total{cause="bad_output"} 1.0' in exposition(deployment)


def test_a_postprocess_that_keeps_rejecting_the_primarys_outputs_opens_the_breaker():
    with Deployment(lambda: {"model": TupleOnPrimary(), "postprocess": tensor_only}, primary=PRIMARY,
                    fallback="cpu", failure_threshold=3, reset_after_s=60) as deployment:
        for request in range(3):
            assert deployment.breaker.state == CLOSED, request
            assert deployment.predict({"inputs": sample(1)}).failover == "bad_output"
        assert deployment.breaker.state == OPEN
        answer = deployment.predict({"inputs": sample(1)})
        assert (answer.role, answer.routed) == ("fallback", "breaker_open")


def test_a_probe_checks_the_postprocess_too_so_the_breaker_stays_open_while_it_rejects_the_primary():
    with Deployment(lambda: {"model": TupleOnPrimary(), "postprocess": tensor_only}, primary=PRIMARY,
                    fallback="cpu", failure_threshold=1, reset_after_s=0, recovery_successes=1) as deployment:
        assert deployment.predict({"inputs": sample(1)}).failover == "bad_output"
        for _ in range(3):  # each request routed to the fallback starts a probe, which fails
            answer = deployment.predict({"inputs": sample(1)})
            assert (answer.role, answer.routed) == ("fallback", "breaker_open")
            assert deployment.flush()
            assert deployment.breaker.state == OPEN
        assert 'torchport_serve_probes_total{result="failure"}' in exposition(deployment)


class HalfSoftmaxOnPrimary(torch.nn.Module):
    """Class probabilities; on the primary computed in float16, where a tiny one rounds to 0."""

    def forward(self, inputs):
        if on_primary(inputs):
            return torch.softmax(inputs.half(), dim=-1).float()
        return torch.softmax(inputs, dim=-1)


def log_probabilities(outputs):
    return {"logprobs": outputs.log().tolist()}


def test_a_body_only_the_primarys_outputs_make_not_json_fails_over_and_is_charged_to_the_primary():
    # log(0) is -inf, which JSON cannot hold: the primary's answer, not the postprocess, is at fault
    with Deployment(lambda: {"model": HalfSoftmaxOnPrimary(), "postprocess": log_probabilities}, primary=PRIMARY,
                    fallback="cpu", failure_threshold=2, shadow=1.0) as deployment:
        ordinary = deployment.predict({"inputs": [[0.0, 1.0, 2.0, 3.0]]})
        assert ordinary.role == "primary"
        answer = deployment.predict({"inputs": [[0.0, 1.0, 2.0, 30.0]]})
        assert (answer.role, answer.failover) == ("fallback", "bad_output")
        assert answer.body == {"logprobs": [[-30.0, -29.0, -28.0, 0.0]]}
        assert answer.content == b'{"logprobs":[[-30.0,-29.0,-28.0,0.0]]}'
        assert deployment.flush()
        text = exposition(deployment)
        assert 'torchport_serve_failovers_total{cause="bad_output"} 1.0' in text
        assert 'torchport_serve_shadow_mismatches_total 1.0' in text
        assert deployment.predict({"inputs": [[0.0, 1.0, 2.0, 30.0]]}).failover == "bad_output"
        assert deployment.breaker.state == OPEN


class FailsOnceOnPrimary(torch.nn.Module):
    def __init__(self, failures: list):
        super().__init__()
        self.model, self.failures = make_linear(), failures

    def forward(self, inputs):
        if on_primary(inputs) and self.failures:
            raise RuntimeError(self.failures.pop())
        return self.model(inputs)


def test_a_probe_does_not_blame_the_primary_for_a_postprocess_that_rejects_every_device():
    def broken(outputs):
        raise KeyError("label_map")

    failures = ["device lost"]  # shared by the copies on both devices: the primary's first call fails
    with Deployment(lambda: {"model": FailsOnceOnPrimary(failures), "postprocess": broken}, primary=PRIMARY,
                    fallback="cpu", failure_threshold=1, reset_after_s=0, recovery_successes=1) as deployment:
        failures.append("device lost")  # the warm-up took the first one
        with pytest.raises(PostprocessFailed):
            deployment.predict({"inputs": sample(1)})
        assert deployment.breaker.state == OPEN  # the primary did fail
        with pytest.raises(PostprocessFailed):
            deployment.predict({"inputs": sample(1)})  # routed to the fallback; its probe runs the primary
        assert deployment.flush()
        assert deployment.breaker.state == CLOSED  # the primary answered; the postprocess is at fault


def test_a_postprocess_that_raises_on_every_device_is_a_500_counted_and_not_charged_to_the_primary():
    def broken(outputs):
        raise KeyError("label_map")

    with Deployment(lambda: {"model": make_linear(), "postprocess": broken}, primary=PRIMARY, fallback="cpu",
                    failure_threshold=1) as deployment:
        with pytest.raises(PostprocessFailed) as error:
            deployment.predict({"inputs": sample(1)})
        assert error.value.status == 500 and "label_map" in str(error.value) and "both devices" in str(error.value)
        assert deployment.breaker.state == CLOSED
        text = exposition(deployment)
        assert 'torchport_serve_rejected_total{reason="postprocess_error"} 1.0' in text
        assert "torchport_serve_failovers_total{" not in text


class SparseNaNOnPrimary(torch.nn.Module):
    """Answers with a sparse tensor; on the primary one stored value is NaN."""

    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        dense = self.model(inputs)
        if on_primary(inputs):
            dense = dense.clone()
            dense[0, 0] = float("nan")
        return dense.cpu().to_sparse()  # the emulated device has no sparse layout: built on the host


def test_a_sparse_output_with_nan_on_the_primary_fails_over_as_nonfinite():
    with Deployment(lambda: SparseNaNOnPrimary(), primary=PRIMARY, fallback="cpu") as deployment:
        answer = deployment.infer(torch.tensor(sample(1)))
        assert (answer.role, answer.failover) == ("fallback", "nonfinite")
