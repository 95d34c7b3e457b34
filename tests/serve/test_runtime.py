"""Deployment in process: failover on the failing request itself, breaker, canary, shadow, drain.

The primary is the emulated Trainium device (a real non-CPU PyTorch device), the fallback the CPU.
"""

from __future__ import annotations

import re
import sys
import threading
import time

import pytest
import torch

from serve_models import (FEATURES, FORMS, MARKERS, PRIMARY, FaultPlan, FaultyModel, PerturbedModel, ask,
                          fallback_answer, faulty, make_linear, sample, settle)
from torchport.errors import UsageError
from torchport.serve import (CLOSED, HALF_OPEN, OPEN, Deployment, Draining, InvalidInput, ModelRejectedInput,
                             NoDeviceAnswered)


def test_healthy_request_is_answered_by_the_primary_device():
    with Deployment(make_linear, primary=PRIMARY, fallback="cpu") as deployment:
        answer = deployment.predict({"inputs": sample(1)})
        assert (answer.role, answer.device, answer.failover) == ("primary", PRIMARY, None)
        expected = make_linear()(torch.tensor(sample(1)))
        assert torch.allclose(torch.tensor(answer.body["outputs"]), expected, atol=1e-5)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("cause", sorted(MARKERS))
def test_each_failure_is_answered_by_the_fallback_within_the_same_request(cause, form):
    plan = FaultPlan(hang_s=1.0)
    with faulty(plan) as deployment:
        rows = sample(7, MARKERS[cause])
        started = time.perf_counter()
        answer = ask(deployment, {"inputs": rows}, form)
        elapsed = time.perf_counter() - started
        assert (answer.role, answer.device, answer.failover) == ("fallback", "cpu", cause)
        assert answer.body["outputs"] == fallback_answer(deployment, rows)
        if cause == "timeout":
            assert elapsed < 0.8, "the fallback answers at the timeout, not when the hung call returns"
        following = ask(deployment, {"inputs": sample(8)}, form)
        assert following.role == "primary" and deployment.breaker.state == CLOSED
        exposition = deployment.metrics.exposition()[0].decode()
        assert f'torchport_serve_failovers_total{{cause="{cause}"}} 1.0' in exposition
        settle(deployment)


def test_breaker_opens_after_the_threshold_probes_and_closes_on_recovery():
    plan = FaultPlan()
    with faulty(plan, failure_threshold=3, reset_after_s=0.05, recovery_successes=2) as deployment:
        plan.down = True
        answers = [deployment.predict({"inputs": sample(index)}) for index in range(5)]
        assert [answer.failover for answer in answers[:3]] == ["error"] * 3
        assert [answer.routed for answer in answers[3:]] == ["breaker_open"] * 2
        assert all(answer.role == "fallback" for answer in answers)
        assert deployment.breaker.state == OPEN
        calls_while_open = plan.primary_calls
        time.sleep(0.06)
        deployment.predict({"inputs": sample(10)})  # starts a probe, which fails: open again
        deployment.flush()
        assert plan.primary_calls == calls_while_open + 1 and deployment.breaker.state == OPEN
        plan.down = False
        deadline = time.monotonic() + 10
        while deployment.breaker.state != CLOSED and time.monotonic() < deadline:
            answer = deployment.predict({"inputs": sample(11)})
            assert answer.role == "fallback" and answer.routed == "breaker_open"
            deployment.flush()
            time.sleep(0.06)
        assert deployment.breaker.state == CLOSED
        states = [state for state, _ in deployment.breaker.history]
        assert states == [OPEN, HALF_OPEN, OPEN, HALF_OPEN, CLOSED]
        assert deployment.predict({"inputs": sample(12)}).role == "primary"


def test_canary_sends_exactly_its_share_to_the_primary():
    with Deployment(make_linear, primary=PRIMARY, fallback="cpu", canary=0.25) as deployment:
        roles = [deployment.predict({"inputs": sample(index)}).role for index in range(40)]
        assert roles.count("primary") == 10 and roles.count("fallback") == 30


def test_shadow_flags_a_perturbed_primary_within_three_requests():
    # shadow=1.0 and alarm_after=3: the alarm rises on the third mismatching request (with
    # shadow=s it rises within about 3/s requests, e.g. 60 at the default 0.05).
    with Deployment(lambda: PerturbedModel(0.05), primary=PRIMARY, fallback="cpu", shadow=1.0,
                    shadow_alarm_after=3) as deployment:
        for index in range(3):
            deployment.predict({"inputs": sample(index)})
        deployment.flush()
        monitor = deployment.shadow_monitor
        assert monitor.alarm and monitor.first_alarm_at == 3 and monitor.mismatches == 3
        assert "cosine" in " ".join(monitor.last.reasons) or "max abs" in " ".join(monitor.last.reasons)
        assert "torchport_serve_shadow_drift_alarm 1.0" in deployment.metrics.exposition()[0].decode()


def test_shadow_raises_no_alarm_for_a_faithful_primary():
    # max_background=60: every comparison is queued even when the background threads fall behind
    # (the default bound skips comparisons as 'busy' then, which is not this test's subject).
    with Deployment(lambda: PerturbedModel(0.0), primary=PRIMARY, fallback="cpu", shadow=1.0,
                    max_background=60) as deployment:
        for index in range(60):
            deployment.predict({"inputs": sample(index)})
        deployment.flush()
        monitor = deployment.shadow_monitor
        assert monitor.comparisons == 60 and monitor.mismatches == 0 and not monitor.alarm
        assert monitor.last.cosine > 0.9999


def test_shadow_of_a_canary_request_runs_the_primary():
    with Deployment(lambda: PerturbedModel(0.05), primary=PRIMARY, fallback="cpu", shadow=1.0,
                    canary=0.0) as deployment:
        answer = deployment.predict({"inputs": sample(3)})
        deployment.flush()
        assert answer.routed == "canary" and deployment.shadow_monitor.mismatches == 1


class Sleepy(torch.nn.Module):
    """make_linear's model taking 0.15 s a call on the primary (a non-CPU device)."""

    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        if inputs.device.type != "cpu":
            time.sleep(0.15)
        return self.model(inputs)


def test_more_threads_than_primary_workers_wait_their_turn_instead_of_failing_over():
    # a threaded server (Flask, gunicorn gthread) calls predict from many threads: past the primary's
    # workers (2 x max_concurrency + 4) the extra calls found none and failed over as 'timeout'
    with Deployment(Sleepy, primary=PRIMARY, fallback="cpu", timeout_s=5.0, max_concurrency=2) as deployment:
        answers = []
        threads = [threading.Thread(target=lambda: answers.append(deployment.predict({"inputs": sample(1)})))
                   for _ in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [(answer.role, answer.failover) for answer in answers] == [("primary", None)] * 12
        assert deployment.breaker.state == CLOSED
        text = deployment.metrics.exposition()[0].decode()
        assert "torchport_serve_queue_wait_seconds_count 12.0" in text


class FallbackDown(torch.nn.Module):
    """make_linear's model; while `down`, every call on the CPU (the fallback) raises, as a lost
    runtime would; an input whose first value is -1 is rejected on every device (NaN on the primary)."""

    def __init__(self):
        super().__init__()
        self.model = make_linear()
        self.down = False

    def forward(self, inputs):
        if float(inputs.reshape(-1)[0]) == -1.0:
            if inputs.device.type != "cpu":
                return self.model(inputs) * float("nan")
            raise ValueError("negative ids are not in the vocabulary")
        if self.down and inputs.device.type == "cpu":
            if self.down == "oom":
                raise torch.OutOfMemoryError("out of memory on the fallback")
            raise RuntimeError("device-side failure: fallback runtime lost")
        return self.model(inputs)


def test_a_canary_request_the_fallback_fails_is_answered_by_the_primary_not_blamed_on_the_input():
    model = FallbackDown()
    with Deployment(lambda: model, primary=PRIMARY, fallback="cpu", canary=0.0, failure_threshold=3) as deployment:
        expected = fallback_answer(deployment, sample(1))
        model.down = True  # the fallback's copy of the model
        answer = deployment.predict({"inputs": sample(1)})
        assert (answer.role, answer.device, answer.failover) == ("primary", PRIMARY, None)
        assert answer.body["outputs"][0] == pytest.approx(expected[0], rel=1e-5)
        text = deployment.metrics.exposition()[0].decode()
        assert "torchport_serve_fallback_failures_total 1.0" in text
        model.down = "oom"  # a fallback out of memory: the primary, not asked yet, answers too
        assert deployment.predict({"inputs": sample(1)}).role == "primary"
        assert "torchport_serve_fallback_failures_total 2.0" in deployment.metrics.exposition()[0].decode()
        model.down = True
        for _ in range(6):  # both devices reject it: the input's fault, whatever the threshold
            with pytest.raises(ModelRejectedInput, match="failed on it too") as rejected:
                deployment.predict({"inputs": [[-1.0] * FEATURES]})
        assert rejected.value.status == 422 and deployment.breaker.state == CLOSED


def test_shadow_on_one_device_is_reported_as_not_checked():
    with Deployment(make_linear, primary="cpu", fallback="cpu", shadow=0.5) as deployment:
        assert "self-comparison" in deployment.shadow_note
        deployment.predict({"inputs": sample(1)})
        deployment.flush()
        assert deployment.shadow_monitor.comparisons == 0
        assert deployment.status()["shadow"]["note"] == deployment.shadow_note


def test_drain_lets_in_flight_requests_finish_and_refuses_new_ones():
    plan = FaultPlan(hang_s=0.3)
    with faulty(plan, timeout_s=2.0) as deployment:
        results = []
        worker = threading.Thread(target=lambda: results.append(deployment.predict({"inputs": sample(1, MARKERS["timeout"])})))
        worker.start()
        while deployment.in_flight == 0:
            time.sleep(0.005)
        drained = []
        drainer = threading.Thread(target=lambda: drained.append(deployment.drain(timeout_s=5)))
        drainer.start()
        while not deployment.draining:
            time.sleep(0.005)
        with pytest.raises(Draining) as refused:
            deployment.predict({"inputs": sample(2)})
        assert refused.value.status == 503 and not deployment.ready
        worker.join()
        drainer.join()
        assert drained == [True] and results[0].role == "primary"


@pytest.mark.parametrize("payload, fragment", [
    ([1, 2], "expected an object with 'inputs'"),
    ({"input": [1.0]}, "expected an object with 'inputs'"),
    ({"inputs": "abc"}, "nested lists of numbers"),
    ({"inputs": [[1.0, 2.0], [3.0]]}, "rectangular"),
    ({"inputs": [[float("nan")] * FEATURES]}, "NaN or infinity"),
])
def test_bad_inputs_are_invalid_input_errors(payload, fragment):
    with Deployment(make_linear, primary=PRIMARY, fallback="cpu") as deployment:
        with pytest.raises(InvalidInput) as error:
            deployment.predict(payload)
        assert error.value.status == 400 and fragment in str(error.value)


def test_an_input_the_model_rejects_on_both_devices_is_422_and_does_not_trip_the_breaker():
    with Deployment(make_linear, primary=PRIMARY, fallback="cpu", failure_threshold=1) as deployment:
        with pytest.raises(ModelRejectedInput) as error:
            deployment.predict({"inputs": [[1.0, 2.0, 3.0]]})
        assert error.value.status == 422 and "both devices" in str(error.value)
        assert deployment.breaker.state == CLOSED


def test_lazy_fallback_loads_on_first_failover():
    plan = FaultPlan()
    with faulty(plan, lazy_fallback=True) as deployment:
        assert not deployment.fallback.loaded and deployment.ready
        answer = deployment.predict({"inputs": sample(1, MARKERS["error"])})
        assert answer.failover == "error" and deployment.fallback.loaded


class RunsCommand:
    """Pickles as a call of os.system, which torch.load(weights_only=True) blocks."""

    def __reduce__(self):
        import os

        return os.system, ("true",)


def test_weights_are_loaded_with_weights_only(tmp_path):
    trained = make_linear()
    with torch.no_grad():
        for parameter in trained.parameters():
            parameter.add_(1.0)
    path = tmp_path / "weights.pt"
    torch.save(trained.state_dict(), path)
    with Deployment(make_linear, primary=PRIMARY, fallback="cpu", weights=str(path)) as deployment:
        answer = deployment.predict({"inputs": sample(1)})
        assert torch.allclose(torch.tensor(answer.body["outputs"]), trained(torch.tensor(sample(1))), atol=1e-5)
    torch.save({"model": trained}, tmp_path / "pickled.pt")  # a pickled module, not weights
    with pytest.raises(UsageError, match="weights_only=True"):
        Deployment(make_linear, primary=PRIMARY, fallback="cpu", weights=str(tmp_path / "pickled.pt"))
    torch.save({"weight": RunsCommand()}, tmp_path / "command.pt")  # a blocked global (os.system): refused as such
    with pytest.raises(UsageError, match="holds Python objects, not only tensors") as refused:
        Deployment(make_linear, primary=PRIMARY, fallback="cpu", weights=str(tmp_path / "command.pt"))
    assert "system" in str(refused.value) and "corrupt" not in str(refused.value)
    import numpy  # a training checkpoint: a clean state dict beside a numpy value (the best scores so far)

    torch.save({"model_state_dict": trained.state_dict(), "best_scores": numpy.array([0.5])}, tmp_path / "numpy.pt")
    with pytest.raises(UsageError, match="other objects beside its state dict") as refused:
        Deployment(make_linear, primary=PRIMARY, fallback="cpu", weights=str(tmp_path / "numpy.pt"))
    assert "numpy" in str(refused.value) and "weights_only=False" not in str(refused.value)
    (tmp_path / "junk.pt").write_text("not a checkpoint")  # corrupt or another format: no advice to drop weights_only
    with pytest.raises(UsageError, match="not a readable torch checkpoint") as refused:
        Deployment(make_linear, primary=PRIMARY, fallback="cpu", weights=str(tmp_path / "junk.pt"))
    assert "False" not in str(refused.value) and "pickled model" not in str(refused.value)


def test_weights_saved_from_a_ddp_or_compiled_model_or_in_a_training_checkpoint_load(tmp_path):
    trained = make_linear()
    with torch.no_grad():
        for parameter in trained.parameters():
            parameter.add_(1.0)
    expected = trained(torch.tensor(sample(1))).tolist()
    layouts = {
        "ddp": {f"module.{key}": value for key, value in trained.state_dict().items()},
        "compiled_ddp": {f"module._orig_mod.{key}": value for key, value in trained.state_dict().items()},
        "tutorial": {"epoch": 7, "model_state_dict": trained.state_dict(), "optimizer_state_dict": {}},
    }
    for name, layout in layouts.items():
        torch.save(layout, tmp_path / f"{name}.pt")
        with Deployment(make_linear, primary=PRIMARY, fallback="cpu", weights=str(tmp_path / f"{name}.pt")) as deployment:
            outputs = deployment.predict({"inputs": sample(1)}).body["outputs"]
            assert outputs[0] == pytest.approx(expected[0], abs=1e-5), name
    # what load_state_dict itself accepts still loads: batch norm saved before num_batches_tracked,
    # with its module version, as DDP saved it
    def norm_model():
        return torch.nn.Sequential(torch.nn.Linear(FEATURES, 4), torch.nn.BatchNorm1d(4))

    old = norm_model().state_dict()
    old.pop("1.num_batches_tracked")
    old._metadata["1"]["version"] = 1
    prefixed = type(old)((f"module.{key}", value) for key, value in old.items())
    prefixed._metadata = {("module." + key if key else "module"): value for key, value in old._metadata.items()}
    torch.save(prefixed, tmp_path / "old_norm.pt")
    with Deployment(norm_model, primary=PRIMARY, fallback="cpu", weights=str(tmp_path / "old_norm.pt")) as deployment:
        assert deployment.predict({"inputs": sample(1)}).role == "primary"
    # another architecture: how many keys differ, a few of them named, not every key on one line
    other = torch.nn.Sequential(*[torch.nn.Linear(FEATURES, FEATURES) for _ in range(30)])
    torch.save(other.state_dict(), tmp_path / "other.pt")
    with pytest.raises(UsageError, match="56 key\\(s\\) the model does not have") as refused:
        Deployment(make_linear, primary=PRIMARY, fallback="cpu", weights=str(tmp_path / "other.pt"))
    assert "and 53 more" in str(refused.value) and len(str(refused.value)) < 600


def test_a_compare_case_serves_with_its_inputs_as_the_example_even_as_a_function_of_the_batch_size():
    def case():  # as `torchport compare` takes it
        return {"model": make_linear(), "inputs": lambda batch_size: torch.randn(batch_size, FEATURES),
                "unit": "samples", "units_per_sample": 1.0}

    with Deployment(case, primary=PRIMARY, fallback="cpu", batch_max_size=4) as deployment:
        assert deployment.warmup == {"primary": "ok", "fallback": "ok"} and deployment.contract is not None
        assert deployment.batcher is not None  # a 2-row example: the batch dimension is known
        assert deployment.predict({"inputs": sample(1)}).role == "primary"
    with pytest.raises(UsageError, match="both 'inputs' and 'example'"):
        Deployment(lambda: {**case(), "example": torch.randn(2, FEATURES)}, primary=PRIMARY, fallback="cpu")


@pytest.mark.parametrize("options, fragment", [
    ({"shadow": 1.5}, "shadow=1.5 is not a share"),
    ({"canary": -0.1}, "canary=-0.1 is not a share"),
    ({"timeout_s": 0}, "timeout_s=0"),
    ({"primary": "warp-drive"}, "Unknown device 'warp-drive'"),
])
def test_bad_settings_are_usage_errors(options, fragment):
    with pytest.raises(UsageError, match=fragment.replace(".", r"\.").replace("(", r"\(")):
        Deployment(make_linear, **{"primary": PRIMARY, "fallback": "cpu", **options})


def test_a_model_returned_in_training_mode_is_served_in_eval_mode_unless_the_factory_says_eval_false():
    def dropout_model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Dropout(0.5))  # as constructed: training

    request = {"inputs": [[1.0, 2.0, 3.0, 4.0]]}
    with Deployment(dropout_model, primary=PRIMARY, fallback="cpu") as deployment:
        assert "1 (Dropout)" in deployment.spec.training and deployment.spec.eval
        answers = {str(deployment.predict(request).body) for _ in range(3)}
        assert len(answers) == 1  # dropout off
    with Deployment(lambda: {"model": dropout_model(), "eval": False}, primary=PRIMARY, fallback="cpu") as deployment:
        answers = {str(deployment.predict(request).body) for _ in range(3)}
        assert len(answers) == 3  # Monte Carlo dropout, as the factory asked
    with pytest.raises(UsageError, match="returned 'no' as 'eval'"):
        Deployment(lambda: {"model": dropout_model(), "eval": "no"}, primary=PRIMARY, fallback="cpu")


def test_only_modules_that_compute_differently_in_eval_mode_are_named_as_served_in_eval_mode():
    # every freshly built module is in training mode; eval() changes nothing for these
    with Deployment(lambda: torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Dropout(0.0),
                                                torch.nn.LayerNorm(8)), primary=PRIMARY, fallback="cpu") as deployment:
        assert deployment.spec.training == ()

    class Branchy(torch.nn.Module):  # a custom module whose forward takes another path in training
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, inputs):
            return self.linear(inputs) * (0.5 if self.training else 1.0)

    with Deployment(Branchy, primary=PRIMARY, fallback="cpu") as deployment:
        assert deployment.spec.training == ("the model (Branchy)",)

    class NoisyWhileTraining(torch.nn.Module):  # reads the mode through getattr, as mixins often do
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, inputs):
            noisy = getattr(self, "training", False)
            return self.linear(inputs + 0.1 * torch.randn_like(inputs) if noisy else inputs)

    with Deployment(NoisyWhileTraining, primary=PRIMARY, fallback="cpu") as deployment:
        assert deployment.spec.training == ("the model (NoisyWhileTraining)",)


class CountingModel(torch.nn.Module):
    """make_linear's model, counting its calls on the primary (non-CPU) device."""

    def __init__(self, fail_on_primary: bool = False):
        super().__init__()
        self.model = make_linear()
        self.fail_on_primary = fail_on_primary
        self.primary_calls = []

    def __deepcopy__(self, memo):
        copied = CountingModel(self.fail_on_primary)
        copied.primary_calls = self.primary_calls  # one shared list
        return copied

    def forward(self, inputs):
        if inputs.device.type != "cpu":
            self.primary_calls.append(inputs.shape[0])
            if self.fail_on_primary:
                raise RuntimeError("batched kernel failed")
        return self.model(inputs)


def concurrent_predictions(deployment, count):
    answers = [None] * count
    barrier = threading.Barrier(count)

    def one(index):
        barrier.wait()
        answers[index] = deployment.predict({"inputs": sample(index)})

    threads = [threading.Thread(target=one, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


@pytest.mark.parametrize("fail_on_primary", [False, True])
def test_micro_batching_joins_concurrent_requests_and_splits_the_answers(fail_on_primary):
    model = CountingModel()
    # batching needs an example: its doubled run shows which outputs follow the batch
    with Deployment(lambda: {"model": model, "example": torch.randn(2, FEATURES)}, primary=PRIMARY, fallback="cpu",
                    batch_max_size=4, batch_wait_s=0.5, failure_threshold=100) as deployment:
        model.primary_calls.clear()  # the warm-up's
        deployment.primary.model().fail_on_primary = fail_on_primary  # after a healthy warm-up
        answers = concurrent_predictions(deployment, 4)
        assert model.primary_calls == [4], "four concurrent rows make one primary call"
        for index, answer in enumerate(answers):
            expected = make_linear()(torch.tensor(sample(index)))
            assert torch.allclose(torch.tensor(answer.body["outputs"]), expected, atol=1e-5)
            assert answer.role == ("fallback" if fail_on_primary else "primary")
            assert answer.failover == ("error" if fail_on_primary else None)
        assert deployment.batcher.batches == 1 and deployment.batcher.requests == 4


def test_micro_batching_is_off_by_default():
    model = CountingModel()
    with Deployment(lambda: model, primary=PRIMARY, fallback="cpu") as deployment:
        concurrent_predictions(deployment, 4)
        assert deployment.batcher is None and model.primary_calls == [1, 1, 1, 1]


class OutOfMemoryEverywhere(torch.nn.Module):
    """Each device runs out of memory, reporting it as that device does."""

    def forward(self, inputs):
        if inputs.device.type != "cpu":
            raise RuntimeError("RESOURCE_EXHAUSTED: failed to allocate 4.00GiB on the device")
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 4294967296 bytes.")


def test_out_of_memory_on_both_devices_is_503_and_charges_the_breaker():
    with Deployment(OutOfMemoryEverywhere, primary=PRIMARY, fallback="cpu", failure_threshold=1) as deployment:
        with pytest.raises(NoDeviceAnswered) as error:
            deployment.predict({"inputs": sample(1)})
        assert error.value.status == 503 and "oom" in str(error.value)
        assert deployment.breaker.state == OPEN


def test_a_factory_example_warms_both_devices_and_a_failing_primary_starts_on_the_fallback():
    plan = FaultPlan()
    example = torch.tensor(sample(1))
    with Deployment(lambda: (FaultyModel(plan), example), primary=PRIMARY, fallback="cpu") as deployment:
        assert deployment.warmup == {"primary": "ok", "fallback": "ok"} and plan.primary_calls == 1
        assert deployment.breaker.state == CLOSED
    plan.down = True
    with Deployment(lambda: {"model": FaultyModel(plan), "example": example}, primary=PRIMARY, fallback="cpu",
                    reset_after_s=60) as deployment:
        assert "primary device lost" in deployment.warmup["primary"] and deployment.breaker.state == OPEN
        answer = deployment.predict({"inputs": sample(2)})
        assert answer.routed == "breaker_open" and deployment.status()["warmup"]["fallback"] == "ok"


@pytest.mark.parametrize("payload, expected", [
    ({"inputs": [[1, 2, 3]], "dtype": "int64"}, torch.tensor([[1, 2, 3]])),
    ({"inputs": [True, False], "dtype": "bool"}, torch.tensor([True, False])),
])
def test_default_preprocess_takes_an_optional_dtype(payload, expected):
    from torchport.serve.model import default_preprocess

    assert torch.equal(default_preprocess(payload), expected)


@pytest.mark.parametrize("payload, fragment", [
    ({"inputs": [1.5], "dtype": "int64"}, "not whole numbers"),
    ({"inputs": [2], "dtype": "bool"}, "not 0 or 1"),
    ({"inputs": [1.0], "dtype": "complex64"}, "'dtype' 'complex64' is not allowed"),
    ({"inputs": [1e300]}, "beyond the range of 'float32'"),
    ({"inputs": [[1, True, 3, False]]}, "true or false where numbers belong"),
    ({"inputs": [[[0.5], [False]]], "dtype": "int64"}, "true or false where numbers belong"),
])
def test_default_preprocess_refuses_values_its_dtype_would_change(payload, fragment):
    from torchport.serve.model import default_preprocess

    with pytest.raises(InvalidInput, match=fragment):
        default_preprocess(payload)


@pytest.mark.parametrize("form", FORMS)
def test_without_a_timeout_the_primary_runs_in_the_callers_thread_and_still_fails_over(form):
    plan = FaultPlan()
    with faulty(plan, timeout_s=None) as deployment:
        assert ask(deployment, {"inputs": sample(1)}, form).role == "primary"
        for cause in ("error", "nonfinite", "oom"):
            answer = ask(deployment, {"inputs": sample(2, MARKERS[cause])}, form)
            assert (answer.role, answer.failover) == ("fallback", cause)


def test_shadow_share_flags_an_always_off_primary_at_the_stated_request():
    # shadow=0.25, alarm after 3 mismatches: every 4th request is compared, the alarm rises at request 12.
    with Deployment(lambda: PerturbedModel(0.05), primary=PRIMARY, fallback="cpu", shadow=0.25) as deployment:
        for index in range(11):
            deployment.predict({"inputs": sample(index)})
        deployment.flush()
        assert not deployment.shadow_monitor.alarm and deployment.shadow_monitor.comparisons == 2
        deployment.predict({"inputs": sample(11)})
        deployment.flush()
        assert deployment.shadow_monitor.alarm and deployment.shadow_monitor.comparisons == 3


def test_defaults_serve_on_the_auto_device_with_the_cpu_as_fallback():
    from torchport.backends import resolve

    with Deployment(make_linear) as deployment:
        assert deployment.primary.name == resolve("auto").name and deployment.fallback.name == "cpu"
        assert (deployment.timeout_s, deployment.shadow_share, deployment.canary_share) == (2.0, 0.0, 1.0)
        assert deployment.batcher is None and deployment.predict({"inputs": sample(1)}).role == "primary"


def test_a_factory_file_imports_the_modules_beside_it(tmp_path, monkeypatch):
    # the usual layout: the serving entry in one file, the model's layers in another beside it
    folder = tmp_path / "service"
    folder.mkdir()
    (folder / "layers_beside.py").write_text("import torch\ndef build():\n    return torch.nn.Linear(4, 2)\n")
    (folder / "entry.py").write_text("from layers_beside import build\ndef make():\n    return build()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with Deployment("service/entry.py:make", primary=PRIMARY, fallback="cpu") as deployment:
        assert len(deployment.predict({"inputs": [[1.0, 2.0, 3.0, 4.0]]}).body["outputs"][0]) == 2



def test_a_factory_file_that_fails_to_import_leaves_no_half_run_module(tmp_path, monkeypatch):
    # the first try fails in the file's own code; once the file is fixed, the same entry loads it
    entry = tmp_path / "entry_fixed_later.py"
    entry.write_text("import torch\nraise RuntimeError('weights missing')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    with pytest.raises(UsageError, match="weights missing"):
        Deployment("entry_fixed_later.py:make", primary=PRIMARY, fallback="cpu")
    assert "entry_fixed_later" not in sys.modules
    entry.write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 2)\n")
    with Deployment("entry_fixed_later.py:make", primary=PRIMARY, fallback="cpu") as deployment:
        assert len(deployment.predict({"inputs": [[1.0, 2.0, 3.0, 4.0]]}).body["outputs"][0]) == 2

#: Released at each test's end, so that no thread stays in a model.
_RELEASES = {"warmup": threading.Event(), "reshape": threading.Event()}


class HangsOnThePrimary(torch.nn.Module):
    """A primary whose runtime hangs on its first call (a compiler that never returns), or only on a
    batch of more than `from_rows` rows (a recompilation for a new shape), until `release` is set."""

    def __init__(self, release: str = "warmup", from_rows: int = 0):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        self.release, self.from_rows = release, from_rows

    def forward(self, inputs):
        if inputs.device.type != "cpu" and inputs.shape[0] > self.from_rows:
            _RELEASES[self.release].wait(30)
        return self.linear(inputs)


def test_a_primary_hanging_on_the_example_at_start_leaves_traffic_to_the_fallback(caplog):
    factory = lambda: {"model": HangsOnThePrimary(), "example": torch.randn(2, 4)}  # noqa: E731
    started = time.monotonic()
    try:
        with Deployment(factory, primary=PRIMARY, fallback="cpu", warmup_timeout_s=0.5, reset_after_s=60) as deployment:
            assert time.monotonic() - started < 10 and deployment.ready
            assert "no answer to the example within 0.5 s" in deployment.warmup["primary"]
            assert deployment.breaker.state == OPEN
            answer = deployment.predict({"inputs": [[1.0, 2.0, 3.0, 4.0]]})
            assert (answer.role, answer.routed) == ("fallback", "breaker_open")
            _RELEASES["warmup"].set()  # the warm-up ends (a compile finishing): the probes take it back
            deployment.breaker.reset_after_s = 0.0
            deadline = time.monotonic() + 20
            while deployment.breaker.state != "closed" and time.monotonic() < deadline:
                deployment.predict({"inputs": [[1.0, 2.0, 3.0, 4.0]]})
                time.sleep(0.05)
            assert deployment.breaker.state == "closed"
            assert deployment.status()["warmup"]["primary"].startswith("ok after probes (at start: TimeoutError")
            said = [record.getMessage() for record in caplog.records if record.name == "torchport.serve"]
            assert any("out of service" in line for line in said) and any("back in service" in line for line in said)
    finally:
        _RELEASES["warmup"].set()
    with pytest.raises(UsageError, match="warmup_timeout_s=0"):
        Deployment(make_linear, primary=PRIMARY, fallback="cpu", warmup_timeout_s=0)


def test_with_a_lazy_fallback_every_warm_up_run_of_the_primary_has_the_limit():
    factory = lambda: {"model": HangsOnThePrimary("reshape", from_rows=2), "example": torch.randn(2, 4)}  # noqa: E731
    started = time.monotonic()
    try:
        with Deployment(factory, primary=PRIMARY, fallback="cpu", lazy_fallback=True, warmup_timeout_s=0.5) as deployment:
            assert time.monotonic() - started < 10 and deployment.ready
    finally:
        _RELEASES["reshape"].set()


class FailsOnThePrimary(torch.nn.Module):
    def forward(self, inputs):
        if inputs.device.type != "cpu":
            raise RuntimeError("kernel failed on the primary")
        return inputs * 2


def test_an_outage_is_logged_once_however_many_probes_fail(caplog):
    with Deployment(FailsOnThePrimary, primary=PRIMARY, fallback="cpu", failure_threshold=1,
                    reset_after_s=0.0) as deployment:
        for _ in range(12):
            deployment.predict({"inputs": [[1.0, 2.0]]})
            deployment.flush()
        probes = re.search(r'torchport_serve_probes_total\{result="failure"\} (\S+)', deployment.metrics.exposition()[0].decode())
        assert probes and float(probes.group(1)) >= 3  # the probes ran and failed, reopening it each time
        said = [record.getMessage() for record in caplog.records if record.name == "torchport.serve"]
        assert sum("out of service" in line for line in said) == 1, said
