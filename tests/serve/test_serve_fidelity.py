"""Serving answers as the plain PyTorch program would: a primary that would answer wrongly is not
served, models and postprocesses run with PyTorch's own inference semantics, shadow judges the
model's outputs, and what goes wrong is said (log, /readyz) in words that name the fix."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

import pytest
import torch

from http_client import Client
from serve_models import PRIMARY, CatalogueIds
from torchport.errors import UsageError
from torchport.serve import OPEN, Deployment
from torchport.serve.server import running_server

EXAMPLE = torch.tensor([[0.1, 0.2, -0.3, 0.4], [0.5, -0.6, 0.7, 0.8]])
REQUESTS = [[[1.0, 2.0, 3.0, 4.0]], [[-1.0, 0.5, 2.0, -3.0]], [[0.3, -2.0, 1.0, 0.0]]]


def said(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "torchport.serve"]


class LargeIds(torch.nn.Module):
    """An int64 output computed past 2**31 from ordinary float inputs."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 6)

    def forward(self, inputs):
        return self.linear(inputs).argmax(-1) + 3_000_000_000


def plain(model, rows):
    """What the model answers in a plain PyTorch program: eval mode, under no_grad."""
    with torch.no_grad():
        return model.eval()(torch.tensor(rows))


def test_a_primary_that_would_hold_int64_buffers_wrapped_serves_nothing(caplog):
    caplog.set_level(logging.WARNING, "torchport.serve")
    factory = lambda: {"model": CatalogueIds(), "example": EXAMPLE}  # noqa: E731
    with Deployment(factory, primary=PRIMARY, fallback="cpu", reset_after_s=0.0) as deployment:
        status = deployment.status()
        assert status["primary"]["loaded"] is False and deployment.breaker.state == OPEN
        assert "'item_ids'" in status["warmup"]["primary"] and "7500000003" in status["warmup"]["primary"]
        for rows in REQUESTS * 3:  # the probes these start cannot take the primary back
            answer = deployment.predict({"inputs": rows})
            deployment.flush()
            assert answer.device == "cpu" and answer.body["outputs"] == plain(CatalogueIds(), rows).tolist()
        assert deployment.breaker.state != "closed"
    assert any("'item_ids'" in line and "3000000001" in line and "int32" in line for line in said(caplog))


def test_a_primary_whose_answer_to_the_example_differs_is_not_called_healthy(caplog):
    caplog.set_level(logging.WARNING, "torchport.serve")
    factory = lambda: {"model": LargeIds(), "example": EXAMPLE}  # noqa: E731
    with Deployment(factory, primary=PRIMARY, fallback="cpu", reset_after_s=0.0) as deployment:
        assert "differs from the fallback's" in deployment.warmup["primary"]
        assert deployment.breaker.state == OPEN
        for rows in REQUESTS * 3:  # probes ask the example again: still wrong, still out of service
            answer = deployment.predict({"inputs": rows})
            deployment.flush()
            assert answer.device == "cpu" and answer.body["outputs"] == plain(LargeIds(), rows).tolist()
        assert deployment.breaker.state != "closed"
        with running_server(deployment) as url:
            client = Client(url)
            _, _, ready = client.request("GET", "/readyz")
            client.close()
        assert "differs from the fallback's" in ready["warmup"]["primary"]
    assert any("failed the example at start" in line for line in said(caplog))


class ForceField(torch.nn.Module):
    """Energy E(x) and forces -dE/dx, computed with autograd inside forward (as force fields do)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def forward(self, positions):
        with torch.enable_grad():
            positions = positions.detach().requires_grad_(True)
            energy = self.net(positions).sum()
            forces = -torch.autograd.grad(energy, positions)[0]
        return {"energy": energy.detach(), "forces": forces.detach()}


@pytest.mark.parametrize("with_example", [True, False])
def test_a_model_using_autograd_inside_forward_is_served(with_example):
    example = torch.tensor([[0.0, 0.1, 0.2], [1.0, 0.5, -0.3]])
    factory = (lambda: {"model": ForceField(), "example": example}) if with_example else ForceField
    rows = [[0.0, 0.1, 0.2]]
    expected = plain(ForceField(), rows)
    with Deployment(factory, primary=PRIMARY, fallback="cpu", shadow=1.0) as deployment:
        answer = deployment.predict({"inputs": rows})
        deployment.flush()
        assert answer.role == "primary" and answer.failover is None
        assert torch.allclose(torch.tensor(answer.body["outputs"]["forces"]), expected["forces"], atol=1e-6)
        assert deployment.shadow_monitor.mismatches == 0


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, inputs):
        return self.linear(inputs)


def squashed(logits):
    """A postprocess that edits the outputs in place, as code written for a GPU does after `.cpu()`."""
    probabilities = logits.cpu().sigmoid_()
    return {"probs": probabilities.tolist()}


@pytest.mark.parametrize("canary", [1.0, 0.0])
def test_a_postprocess_that_edits_the_outputs_in_place_answers(canary):
    factory = lambda: {"model": Linear(), "example": EXAMPLE, "postprocess": squashed}  # noqa: E731
    with Deployment(factory, primary=PRIMARY, fallback="cpu", canary=canary, shadow=1.0) as deployment:
        for rows in REQUESTS:
            answer = deployment.predict({"inputs": rows})
            assert answer.failover is None
            assert answer.body == squashed(plain(Linear(), rows))
        deployment.flush()
        assert (deployment.shadow_monitor.comparisons, deployment.shadow_monitor.mismatches) == (3, 0)


class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 3)
        self.auxiliary = torch.nn.Linear(4, 2)

    def forward(self, inputs):
        return {"logits": self.linear(inputs), "hidden": self.auxiliary(inputs)}


def drop_hidden(outputs):
    outputs.pop("hidden")
    outputs["probs"] = outputs.pop("logits").softmax(-1)
    return {key: value.tolist() for key, value in outputs.items()}


@pytest.mark.parametrize("canary", [1.0, 0.0])
def test_shadow_compares_the_models_outputs_whatever_the_postprocess_does_with_them(canary):
    factory = lambda: {"model": TwoHeads(), "example": EXAMPLE, "postprocess": drop_hidden}  # noqa: E731
    with Deployment(factory, primary=PRIMARY, fallback="cpu", canary=canary, shadow=1.0) as deployment:
        answers = [deployment.predict({"inputs": [[0.1 * index, 0.2, -0.3, 0.4]]}) for index in range(6)]
        deployment.flush()
        status = deployment.status()["shadow"]
        assert (status["comparisons"], status["mismatches"], status["drift_alarm"]) == (6, 0, False), status
        assert all(set(answer.outputs) == {"logits", "hidden"} for answer in answers)  # as the model returned them


class Drifting(torch.nn.Module):
    """Off by a constant on the primary (a non-CPU device) while `drift` is set."""

    def __init__(self):
        super().__init__()
        self.linear = Linear()
        self.drift = False

    def forward(self, inputs):
        outputs = self.linear(inputs)
        return outputs + 1.0 if self.drift and inputs.device.type != "cpu" else outputs


def test_the_drift_alarm_says_why_it_rose_and_when_it_cleared(caplog):
    caplog.set_level(logging.WARNING, "torchport.serve")
    model = Drifting()
    with Deployment(lambda: model, primary=PRIMARY, fallback="cpu", shadow=1.0, shadow_alarm_after=2,
                    shadow_window=4) as deployment:
        primary_model = deployment.primary.model()
        primary_model.drift = True
        for rows in REQUESTS[:2]:
            deployment.predict({"inputs": rows})
        deployment.flush()
        status = deployment.status()["shadow"]
        assert status["drift_alarm"] and "max abs error" in status["last_mismatch"]
        raised = [line for line in said(caplog) if "drift alarm raised" in line]
        assert len(raised) == 1 and "max abs error" in raised[0] and PRIMARY in raised[0]
        primary_model.drift = False
        for rows in REQUESTS * 2:
            deployment.predict({"inputs": rows})
        deployment.flush()
        assert not deployment.status()["shadow"]["drift_alarm"]
        assert sum("drift alarm cleared" in line for line in said(caplog)) == 1


class FailsOnThePrimary(torch.nn.Module):
    def forward(self, inputs):
        if inputs.device.type != "cpu":
            raise RuntimeError("kernel 'gemm_bf16' failed on the primary")
        return inputs * 2


def test_a_failover_logs_the_primarys_error_without_flooding_the_log(caplog):
    caplog.set_level(logging.WARNING, "torchport.serve")
    with Deployment(FailsOnThePrimary, primary=PRIMARY, fallback="cpu", failure_threshold=1000) as deployment:
        answers = [deployment.predict({"inputs": [[1.0, 2.0]]}) for _ in range(20)]
    assert all(answer.failover == "error" for answer in answers)
    lines = [line for line in said(caplog) if "failed on the primary" in line]
    assert len(lines) == 1 and "RuntimeError: kernel 'gemm_bf16' failed on the primary" in lines[0], lines


def test_a_model_and_preprocess_pair_is_told_how_a_tuple_is_read():
    def model_and_preprocess():
        return Linear(), (lambda payload: torch.tensor(payload["pixels"], dtype=torch.float32) / 255.0)

    with pytest.raises(UsageError) as caught:
        Deployment(model_and_preprocess, primary=PRIMARY, fallback="cpu")
    message = str(caught.value)
    assert "read as (model, example_inputs)" in message and "'preprocess': preprocess" in message
    assert "''s" not in message


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with CUDA can place the model there")
def test_a_factory_placing_the_model_on_cuda_is_told_serve_places_it():
    def cuda_style():
        return Linear().cuda().eval()

    with pytest.raises(UsageError) as caught:
        Deployment(cuda_style, primary=PRIMARY, fallback="cpu")
    message = str(caught.value)
    assert "return it on the CPU" in message and ".cuda()" in message and "'cuda'" in message


@dataclasses.dataclass
class Settings:
    hidden: int = 3


class WithExtraState(Linear):
    def get_extra_state(self):
        return Settings()

    def set_extra_state(self, state):
        self.settings = state


def test_weights_whose_state_dict_holds_a_class_name_the_way_to_allow_it(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save(WithExtraState().state_dict(), path)
    with pytest.raises(UsageError) as caught:
        Deployment(WithExtraState, primary=PRIMARY, fallback="cpu", weights=str(path))
    message = str(caught.value)
    allow = f"torch.serialization.add_safe_globals([{Settings.__module__}.Settings])"
    assert "extra state" in message and allow in message and "Save the state dict alone" not in message
    with torch.serialization.safe_globals([Settings]):  # the advice, followed, loads the file
        with Deployment(WithExtraState, primary=PRIMARY, fallback="cpu", weights=str(path)) as deployment:
            assert deployment.predict({"inputs": REQUESTS[0]}).role == "primary"


class Sampling(torch.nn.Module):
    """A decoder that samples in eval mode (a VAE, generation by sampling): two runs of one input
    differ, on any device."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.mean = torch.nn.Linear(4, 3)

    def forward(self, inputs):
        mean = self.mean(inputs)
        return mean + 0.1 * torch.randn_like(mean)


def test_a_primary_whose_float_answers_differ_by_design_stays_in_service():
    # only integer outputs the primary would compute narrowed are held to its answer at start: a
    # sampling model's float outputs differ between any two runs, which is no fault of the primary
    with Deployment(lambda: {"model": Sampling(), "example": EXAMPLE}, primary=PRIMARY, fallback="cpu") as deployment:
        assert deployment.warmup["primary"] == "ok" and deployment.breaker.state == "closed"
        assert all(deployment.predict({"inputs": rows}).role == "primary" for rows in REQUESTS)


class SlowFirstCall(LargeIds):
    """LargeIds, whose first call (the primary's warm-up) hangs past the warm-up's limit."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, inputs):
        self.calls += 1
        if self.calls == 1 and inputs.device.type != "cpu":
            time.sleep(1.0)
        return super().forward(inputs)


def test_a_primary_that_hung_at_start_is_taken_back_only_once_it_answers_the_example_right():
    factory = lambda: {"model": SlowFirstCall(), "example": EXAMPLE}  # noqa: E731
    with Deployment(factory, primary=PRIMARY, fallback="cpu", warmup_timeout_s=0.2, reset_after_s=0.0) as deployment:
        assert deployment.breaker.state == OPEN
        time.sleep(1.0)  # the warm-up ends in the background
        for rows in REQUESTS * 3:  # probes answer these rows but not the example's ids: still out of service
            answer = deployment.predict({"inputs": rows})
            deployment.flush()
            assert answer.device == "cpu" and answer.body["outputs"] == plain(LargeIds(), rows).tolist()
        assert deployment.breaker.state != "closed"


class Prior(torch.nn.Module):
    """Answers its prior buffer as is (no copy), beside a score."""

    def __init__(self):
        super().__init__()
        self.register_buffer("prior", torch.tensor([0.0, 1.0, 2.0]))
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, inputs):
        return {"prior": self.prior, "score": self.linear(inputs)}


def test_a_postprocess_editing_an_output_that_is_the_models_own_buffer_leaves_the_model_as_it_was():
    def factory():
        def postprocess(outputs):
            return {"prior": outputs["prior"].cpu().sigmoid_().tolist()}

        return {"model": Prior(), "postprocess": postprocess}

    with Deployment(factory, primary=PRIMARY, fallback="cpu", canary=0.0) as deployment:  # the host replica
        answers = [deployment.predict({"inputs": rows}).body["prior"] for rows in REQUESTS * 2]
    expected = torch.tensor([0.0, 1.0, 2.0]).sigmoid().tolist()
    assert answers == [expected] * len(answers)


def test_held_back_failover_lines_are_counted_in_the_next_one(caplog, monkeypatch):
    from torchport.serve import runtime

    monkeypatch.setattr(runtime, "FAILURE_LOG_INTERVAL_S", 0.3)
    caplog.set_level(logging.WARNING, "torchport.serve")
    with Deployment(FailsOnThePrimary, primary=PRIMARY, fallback="cpu", failure_threshold=1000) as deployment:
        for _ in range(5):
            deployment.predict({"inputs": [[1.0, 2.0]]})
        time.sleep(0.35)
        deployment.predict({"inputs": [[1.0, 2.0]]})
    lines = [line for line in said(caplog) if "failed on the primary" in line]
    assert len(lines) == 2 and "(4 more such line(s) since the last one logged" in lines[1], lines


def test_a_factory_loading_a_gpu_checkpoint_is_told_to_load_it_on_the_cpu():
    def loads_a_gpu_checkpoint():  # torch.load's own words for a checkpoint of CUDA tensors without CUDA
        raise RuntimeError("Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. "
                           "If you are running on a CPU-only machine, please use torch.load with "
                           "map_location=torch.device('cpu') to map your storages to the CPU.")

    with pytest.raises(UsageError) as caught:
        Deployment(loads_a_gpu_checkpoint, primary=PRIMARY, fallback="cpu")
    message = str(caught.value)
    assert "map_location='cpu'" in message and "drop .cuda()" not in message


class FailsByCause(torch.nn.Module):
    """On the primary: raises on odd calls, answers NaN on even ones."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, inputs):
        if inputs.device.type == "cpu":
            return inputs * 2
        self.calls += 1
        if self.calls % 2:
            raise RuntimeError("kernel 'gemm_bf16' failed on the primary")
        return inputs * float("nan")


def test_each_failover_cause_is_logged_and_the_breaker_says_which_failure_opened_it(caplog):
    caplog.set_level(logging.WARNING, "torchport.serve")
    with Deployment(FailsByCause, primary=PRIMARY, fallback="cpu", failure_threshold=4,
                    reset_after_s=60.0) as deployment:
        causes = [deployment.predict({"inputs": [[1.0, 2.0]]}).failover for _ in range(4)]
    assert causes == ["error", "nonfinite"] * 2
    lines = said(caplog)
    assert sum("failed on the primary" in line and "(error)" in line for line in lines) == 1
    assert sum("failed on the primary" in line and "(nonfinite)" in line for line in lines) == 1
    opened = [line for line in lines if "circuit breaker open" in line]
    assert len(opened) == 1 and "after 4 failures, the last: nonfinite" in opened[0], opened


def test_requests_the_canary_sends_to_the_fallback_stay_canary_while_the_breaker_is_open():
    with Deployment(FailsOnThePrimary, primary=PRIMARY, fallback="cpu", canary=0.5, failure_threshold=1,
                    reset_after_s=60.0) as deployment:
        answers = [deployment.predict({"inputs": [[1.0, 2.0]]}) for _ in range(40)]
    assert deployment.breaker.state == OPEN
    routed = [answer.routed for answer in answers if answer.failover is None]
    # evenly spread: half of the requests were the canary share's for the fallback, breaker or not
    assert routed.count("canary") == 20 and routed.count("breaker_open") == len(routed) - 20


class IdsFromInputs(torch.nn.Module):
    """Answers ids made from an input: 5_000_000 per unit, beyond 2**31 from 430 on."""

    def forward(self, inputs):
        return inputs[:, 0].long() * 5_000_000 + inputs[:, 1].long()


def test_integer_outputs_checked_on_the_example_only_are_said_to_be_at_start(caplog):
    caplog.set_level(logging.WARNING, "torchport.serve")
    example = torch.tensor([[3.0, 1.0], [7.0, 2.0]])
    with Deployment(lambda: {"model": IdsFromInputs(), "example": example}, primary=PRIMARY,
                    fallback="cpu") as deployment:
        assert deployment.warmup["primary"] == "ok"
    warned = [line for line in said(caplog) if "would be answered wrapped" in line]
    assert len(warned) == 1 and "int64" in warned[0] and "--shadow" in warned[0], said(caplog)
    caplog.clear()  # class indices cannot reach the narrower range: nothing to say
    classifier = lambda: {"model": IdsFromInputs().eval(), "example": torch.tensor([[0.0, 3.0]])}  # noqa: E731
    with Deployment(classifier, primary=PRIMARY, fallback="cpu"):
        pass
    assert not [line for line in said(caplog) if "would be answered wrapped" in line]


def test_batch_mates_each_get_their_own_copy_of_an_output_given_whole():
    # a prior is the same for every row, so a joined batch hands it whole to each request: one caller
    # editing its answer in place must not change what its batch-mates were answered
    factory = lambda: {"model": Prior(), "example": EXAMPLE}  # noqa: E731
    with Deployment(factory, primary=PRIMARY, fallback="cpu", batch_max_size=2, batch_wait_s=1.0) as deployment:
        answers = [None, None]
        joined = threading.Barrier(2)

        def ask(index):
            answers[index] = deployment.infer(torch.zeros(1, 4) + index)
            joined.wait()
            if index == 0:
                answers[0].outputs["prior"].add_(100.0)
            joined.wait()

        threads = [threading.Thread(target=ask, args=(index,)) for index in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert deployment.batcher.batches == 1 and deployment.batcher.requests == 2  # they were joined
        assert answers[1].outputs["prior"].tolist() == [0.0, 1.0, 2.0]
