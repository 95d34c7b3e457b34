"""Edges of the runtime a user meets with models and settings of their own: one bad request in a
batch, a primary failing on an input the fallback rejects too, answers that are not JSON, exact
shares, shadow gauges that never show a stale value."""

from __future__ import annotations

import asyncio
import math
import sys
import threading
import time
from fractions import Fraction

import pytest
import torch

from serve_models import (FEATURES, MARKERS, PRIMARY, FaultPlan, FaultyModel, PerturbedModel, RowsDropped, make_linear,
                          sample, settle)
from torchport.errors import UsageError
from torchport.serve import (Deployment, InvalidInput, ModelRejectedInput, PostprocessFailed, PreprocessFailed,
                             UnserializableOutput)


#: The factories' example: two rows, so the contract knows which outputs follow the batch.
EXAMPLE = torch.randn(2, FEATURES)


def exposition(deployment) -> str:
    return deployment.metrics.exposition()[0].decode()


def metric(deployment, line_start: str) -> float:
    """The value of the one exposition line starting with `line_start` (0.0 if absent)."""
    values = [float(line.rsplit(" ", 1)[1]) for line in exposition(deployment).splitlines() if line.startswith(line_start)]
    assert len(values) <= 1, values
    return values[0] if values else 0.0


class RejectsLargeValues(torch.nn.Module):
    """Raises on every device for a row holding a value above 100 (an input the model cannot take);
    `fail_on_primary` also fails every call on the primary."""

    def __init__(self, fail_on_primary: bool = False):
        super().__init__()
        self.model = make_linear()
        self.fail_on_primary = fail_on_primary

    def forward(self, inputs):
        if bool((inputs > 100).any()):
            raise ValueError("values above 100 are out of the model's range")
        if self.fail_on_primary and inputs.device.type != "cpu":
            raise RuntimeError("batched kernel failed")
        return self.model(inputs)


def batch_of_requests(deployment, rows_per_request):
    """Send one request per entry concurrently (they join one batch); (answer or error) per request."""
    results = [None] * len(rows_per_request)
    barrier = threading.Barrier(len(rows_per_request))

    def one(index):
        barrier.wait()
        try:
            results[index] = deployment.predict({"inputs": rows_per_request[index]})
        except Exception as error:
            results[index] = error

    threads = [threading.Thread(target=one, args=(index,)) for index in range(len(rows_per_request))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_one_bad_request_in_a_micro_batch_fails_alone():
    rows = [sample(0), sample(1), [[1000.0] * FEATURES], sample(3)]
    with Deployment(lambda: {"model": RejectsLargeValues(), "example": EXAMPLE}, primary=PRIMARY, fallback="cpu",
                    batch_max_size=4, batch_wait_s=0.5, failure_threshold=1) as deployment:
        results = batch_of_requests(deployment, rows)
        assert deployment.batcher.batches == 1
        assert isinstance(results[2], ModelRejectedInput) and results[2].status == 422
        for index in (0, 1, 3):
            assert results[index].role == "primary", results[index]
            expected = make_linear()(torch.tensor(rows[index]))
            assert torch.allclose(torch.tensor(results[index].body["outputs"]), expected, atol=1e-5)
        assert deployment.breaker.state == "closed"


def test_a_batch_that_fails_over_counts_every_request_it_answered():
    with Deployment(lambda: {"model": RejectsLargeValues(), "example": EXAMPLE}, primary=PRIMARY,
                    fallback="cpu", batch_max_size=3, batch_wait_s=0.5, failure_threshold=100) as deployment:
        deployment.primary.model().fail_on_primary = True  # after a healthy warm-up
        results = batch_of_requests(deployment, [sample(0), sample(1), sample(2)])
        assert [answer.failover for answer in results] == ["error"] * 3
        assert metric(deployment, 'torchport_serve_failovers_total{cause="error"}') == 3
        assert metric(deployment, 'torchport_serve_requests_total{device="cpu",outcome="failover",role="fallback"}') == 3



class OnThePrimary(torch.nn.Module):
    """make_linear's model; on the primary, `fault(rows)` runs first (raises, or takes its time). A
    deployment's copies share the function, so a fault's state (a call count, a switch) is shared."""

    def __init__(self, fault):
        super().__init__()
        self.model = make_linear()
        self.fault = fault

    def forward(self, inputs):
        if inputs.device.type != "cpu":
            self.fault(inputs.shape[0])
        return self.model(inputs)


def fixed_batch(limit: int):
    """A graph compiled for batches of at most `limit` rows (a static-shape device)."""

    def fault(rows):
        if rows > limit:
            raise RuntimeError(f"compiled for batches of at most {limit} rows, got {rows}")

    return fault




def test_micro_batches_are_capped_at_the_largest_batch_the_primary_answers_at_start(caplog):
    # requests of one row each, 8 at once: joined to 8 rows they would all fail on the primary, open
    # the breaker, and its probes (joined batches too) would keep it open for good
    with caplog.at_level("WARNING", logger="torchport.serve"):
        deployment = Deployment(lambda: {"model": OnThePrimary(fixed_batch(4)), "example": EXAMPLE}, primary=PRIMARY,
                                fallback="cpu", batch_max_size=8, batch_wait_s=0.2, failure_threshold=1)
    with deployment:
        assert deployment.batcher.max_size == 4
        batching = deployment.status()["batching"]
        assert batching["max_size"] == 4 and batching["asked"] == 8
        assert batching["primary_failed"].startswith("8 rows: RuntimeError: compiled for batches of at most 4 rows")
        assert "micro-batches capped at 4 rows (asked: 8" in caplog.text
        results = batch_of_requests(deployment, [sample(index) for index in range(8)])
        assert [answer.role for answer in results] == ["primary"] * 8 and deployment.breaker.state == "closed"
        for index, answer in enumerate(results):
            expected = make_linear()(torch.tensor(sample(index)))
            assert torch.allclose(torch.tensor(answer.body["outputs"]), expected, atol=1e-5)
    with Deployment(lambda: {"model": OnThePrimary(fixed_batch(8)), "example": EXAMPLE}, primary=PRIMARY, fallback="cpu",
                    batch_max_size=8) as deployment:  # a primary that takes the whole batch: no cap
        assert deployment.batcher.max_size == 8 and deployment.status()["batching"] == {"max_size": 8}


def bucketed(rows):
    """Graphs compiled for batches of 1, 2, 4 and 8 rows only (a bucketed XLA or Neuron model)."""
    if rows not in (1, 2, 4, 8):
        raise RuntimeError(f"no graph compiled for a batch of {rows} rows")

def test_joined_batches_run_at_a_few_sizes_a_bucketed_primary_was_checked_at():
    # 3, 5, 6 or 7 joined rows run as 4 or 8, the last row repeated: every request is the primary's
    # answer for its own rows, and no size reaches the primary that was not tried at start
    with Deployment(lambda: {"model": OnThePrimary(bucketed), "example": EXAMPLE}, primary=PRIMARY, fallback="cpu",
                    batch_max_size=8, batch_wait_s=0.3, failure_threshold=1) as deployment:
        assert deployment.batcher.sizes == (2, 4, 8) and deployment.status()["batching"] == {"max_size": 8}
        for rows in ([1, 2], [1, 1, 1, 2, 1], [2, 2, 1, 2]):  # 3, 6 and 7 rows joined
            requests = [[sample(index)[0]] * count for index, count in enumerate(rows)]
            results = batch_of_requests(deployment, requests)
            assert [answer.role for answer in results] == ["primary"] * len(rows), results
            for request, answer in zip(requests, results):
                expected = make_linear()(torch.tensor(request))
                assert torch.allclose(torch.tensor(answer.body["outputs"]), expected, atol=1e-5)
        assert deployment.breaker.state == "closed"


class MixesAtThreeRows(torch.nn.Module):
    """Rows on their own, except in a batch of exactly 3 rows (a kernel picked by the batch size)."""

    def forward(self, inputs):
        return inputs - inputs.mean(0) if inputs.shape[0] == 3 else inputs * 1.0


def test_a_model_that_mixes_rows_only_at_a_size_batches_never_run_at_gives_each_request_its_own_rows():
    with Deployment(lambda: {"model": MixesAtThreeRows(), "example": torch.randn(2, 4)}, primary=PRIMARY,
                    fallback="cpu", batch_max_size=4, batch_wait_s=0.3) as deployment:
        requests = [[[float(index), 1.0, 2.0, 3.0]] for index in range(3)]
        for request, answer in zip(requests, batch_of_requests(deployment, requests)):
            assert answer.body["outputs"] == request  # joined, they ran as 4 rows, not 3


def slow_per_row(rows):
    """40 ms a row (healthy, slower than the fallback)."""
    time.sleep(0.04 * rows)

def test_micro_batches_are_capped_below_the_size_the_primary_answers_past_the_timeout(caplog):
    with caplog.at_level("WARNING", logger="torchport.serve"):
        deployment = Deployment(lambda: {"model": OnThePrimary(slow_per_row), "example": EXAMPLE}, primary=PRIMARY, fallback="cpu",
                                timeout_s=0.25, batch_max_size=8)
    with deployment:
        batching = deployment.status()["batching"]
        assert batching["max_size"] == 4 and batching["asked"] == 8, batching
        assert batching["primary_failed"].startswith("8 rows:") and "past timeout_s (0.25 s)" in batching["primary_failed"]
        assert deployment.batcher.sizes == (2, 4) and "micro-batches capped at 4 rows" in caplog.text


def fails_once_then_out_of_memory_above_four():
    """The first call fails (a runtime still starting), then batches of more than 4 rows run out of memory."""
    calls = [0]

    def fault(rows):
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("runtime not ready")
        if rows > 4:
            raise torch.OutOfMemoryError("out of device memory")

    return fault

def test_a_primary_that_failed_its_warm_up_has_its_batch_sizes_checked_once_its_probes_take_it_back():
    # the probes use one request's own rows (not the joined batch, which this primary cannot take),
    # so the breaker closes; then the sizes are checked and batches capped at 4
    with Deployment(lambda: {"model": OnThePrimary(fails_once_then_out_of_memory_above_four()), "example": EXAMPLE}, primary=PRIMARY,
                    fallback="cpu", batch_max_size=8, batch_wait_s=0.1, reset_after_s=0.05,
                    recovery_successes=1) as deployment:
        # not joined until the primary's sizes are checked
        assert deployment.status()["batching"] == {"max_size": 1, "asked": 8, "primary_checked": False}
        assert deployment.breaker.state == "open" and deployment.batcher.max_size == 1
        deadline = time.monotonic() + 20
        while deployment.status()["batching"].get("primary_checked") is False and time.monotonic() < deadline:
            batch_of_requests(deployment, [sample(index) for index in range(8)])
            time.sleep(0.06)
        assert deployment.batcher.max_size == 4 and deployment.status()["batching"]["max_size"] == 4
        settle(deployment)
        results = batch_of_requests(deployment, [sample(index) for index in range(8)])
        assert [answer.role for answer in results] == ["primary"] * 8 and deployment.breaker.state == "closed"


def test_micro_batching_refuses_a_model_whose_input_is_not_one_tensor():
    class TwoInputs(torch.nn.Module):
        def forward(self, first, second):
            return first + second

    example = {"first": torch.randn(2, 3), "second": torch.randn(2, 3)}
    with pytest.raises(UsageError, match="one tensor.*example is a dict, so no request would ever be joined"):
        Deployment(lambda: {"model": TwoInputs(), "example": example}, primary=PRIMARY, fallback="cpu", batch_max_size=8)


class MixesAboveFourRows(torch.nn.Module):
    def forward(self, inputs):
        return inputs - inputs.mean(0) if inputs.shape[0] > 4 else inputs * 1.0


def test_a_refusal_for_rows_that_mix_names_the_batch_size_and_the_largest_size_that_agrees():
    with pytest.raises(UsageError) as refused:
        Deployment(lambda: {"model": MixesAboveFourRows(), "example": torch.randn(3, 4)}, primary=PRIMARY,
                   fallback="cpu", batch_max_size=8)
    message = str(refused.value)
    assert "in a batch of 8 rows" in message and "Lower batch_max_size (--batch-max-size) to 4" in message
    assert "Fix the example" not in message

class HangsThenRejects(torch.nn.Module):
    """The primary hangs (timeout), runs out of memory or returns NaN for the marked inputs; the
    fallback rejects every row whose first value is a marker (as out of range)."""

    def __init__(self):
        super().__init__()
        self.inner = FaultyModel(FaultPlan(hang_s=0.3))

    def forward(self, inputs):
        if inputs.device.type == "cpu" and float(inputs[0, 0]) > 1000:
            raise ValueError("value out of range")
        return self.inner(inputs)


@pytest.mark.parametrize("cause", ["timeout", "oom", "nonfinite", "error"])
def test_an_input_the_fallback_rejects_is_422_whatever_the_primary_did_and_not_charged(cause):
    with Deployment(HangsThenRejects, primary=PRIMARY, fallback="cpu", timeout_s=0.1,
                    failure_threshold=1) as deployment:
        with pytest.raises(ModelRejectedInput) as error:
            deployment.predict({"inputs": sample(1, MARKERS[cause])})
        assert error.value.status == 422 and "value out of range" in str(error.value)
        assert deployment.breaker.state == "closed"
        assert deployment.predict({"inputs": sample(2)}).role == "primary"
        settle(deployment)


def test_an_answer_that_is_not_json_is_a_counted_500_not_an_ok():
    factory = lambda: {"model": make_linear(), "postprocess": lambda outputs: {"outputs": object()}}
    with Deployment(factory, primary=PRIMARY, fallback="cpu") as deployment:
        with pytest.raises(UnserializableOutput) as error:
            deployment.predict({"inputs": sample(1)})
        assert error.value.status == 500 and "not JSON" in str(error.value)
        assert metric(deployment, 'torchport_serve_rejected_total{reason="unserializable_output"}') == 1
        assert "torchport_serve_requests_total{" not in exposition(deployment)


class CacheLike:
    """Stands for a library's cache object in a model's outputs (transformers' DynamicCache)."""


def test_the_default_postprocess_names_what_has_no_json_form():
    class WithCache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = make_linear()

        def forward(self, inputs):
            return {"logits": self.model(inputs), "past_key_values": CacheLike()}

    with Deployment(WithCache, primary=PRIMARY, fallback="cpu", failure_threshold=1) as deployment:
        with pytest.raises(Exception) as error:
            deployment.predict({"inputs": sample(1)})
        assert error.value.status == 500 and "outputs.past_key_values is a" in str(error.value)
        assert "CacheLike" in str(error.value) and deployment.breaker.state == "closed"


class ExitsOnPrimary(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        if inputs.device.type != "cpu":
            sys.exit(3)
        return self.model(inputs)


def test_sys_exit_in_the_primary_at_warm_up_starts_on_the_fallback_instead_of_ending_the_server():
    with Deployment(lambda: {"model": ExitsOnPrimary(), "example": torch.randn(2, FEATURES)}, primary=PRIMARY,
                    fallback="cpu", reset_after_s=60) as deployment:
        assert deployment.warmup["primary"].startswith("SystemExit") and deployment.breaker.state == "open"
        assert deployment.predict({"inputs": sample(1)}).routed == "breaker_open"


def test_sys_exit_in_the_preprocess_or_postprocess_ends_the_request_not_the_server():
    def preprocess(payload):
        if payload.get("stop"):
            sys.exit(2)  # a helper's argparse-style exit
        return torch.tensor(payload["inputs"])

    def postprocess(outputs):
        if float(outputs.reshape(-1)[0]) > 1e6:
            sys.exit("overflow")
        return {"outputs": outputs.tolist()}

    factory = lambda: {"model": torch.nn.Identity(), "preprocess": preprocess, "postprocess": postprocess}
    with Deployment(factory, primary=PRIMARY, fallback="cpu") as deployment:
        with pytest.raises(InvalidInput, match="SystemExit"):
            deployment.predict({"stop": True})
        with pytest.raises(PostprocessFailed, match="SystemExit"):
            deployment.predict({"inputs": [[2e6]]})
        assert deployment.predict({"inputs": [[1.0]]}).body == {"outputs": [[1.0]]}


_NARROWING = threading.Event()


class NarrowerOnThePrimary(torch.nn.Module):
    """Three logits; once _NARROWING is set, the primary's runtime drops the last one (the same rank,
    a wrong width), as a faulty kernel that starts mid-run."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, inputs):
        logits = self.linear(inputs)
        return logits[:, :2] if inputs.device.type != "cpu" and _NARROWING.is_set() else logits


def test_a_primary_answering_fewer_columns_for_an_input_shaped_as_the_example_fails_over():
    factory = lambda: {"model": NarrowerOnThePrimary(), "example": torch.randn(2, 4)}  # noqa: E731
    try:
        with Deployment(factory, primary=PRIMARY, fallback="cpu", timeout_s=5) as deployment:
            assert deployment.predict({"inputs": [[1.0, 2.0, 3.0, 4.0]]}).role == "primary"
            _NARROWING.set()
            answer = deployment.predict({"inputs": [[1.0, 2.0, 3.0, 4.0], [0.5, 0.5, 0.5, 0.5]]})
            assert (answer.role, answer.failover) == ("fallback", "bad_output")
            assert [len(row) for row in answer.body["outputs"]] == [3, 3]
            # a layout learned meanwhile (another rank of input, confirmed) does not switch the check off
            _NARROWING.clear()
            assert deployment.predict({"inputs": [[[1.0, 2.0, 3.0, 4.0]]]}).role == "primary"
            _NARROWING.set()
            answer = deployment.predict({"inputs": [[1.0, 2.0, 3.0, 4.0]]})
            assert (answer.role, answer.failover) == ("fallback", "bad_output")
    finally:
        _NARROWING.clear()


class FollowsTheValues(torch.nn.Module):
    """Outputs whose width follows the input's values (a generated length), the same on both devices."""

    def forward(self, inputs):
        return inputs.repeat(1, 1 + int(inputs[0, 0].item() > 0))


def test_an_output_shape_the_fallback_confirms_for_an_example_shaped_input_is_learned():
    factory = lambda: {"model": FollowsTheValues(), "example": -torch.ones(2, 4)}  # noqa: E731
    with Deployment(factory, primary=PRIMARY, fallback="cpu", timeout_s=5) as deployment:
        for _ in range(3):
            answer = deployment.predict({"inputs": [[1.0, 2.0, 3.0, 4.0]]})
            assert (answer.role, len(answer.body["outputs"][0])) == ("primary", 8)
        assert 'result="learned"} 1.0' in deployment.metrics.exposition()[0].decode()


class OneEntryPerRow(torch.nn.Module):
    """A detector's answer: one dict per input row, keeping the values above a threshold (how many
    follows the values); the same on both devices. Counts its calls on the host (the fallback)."""

    def __init__(self):
        super().__init__()
        self.host_calls = 0
        self.drop_one = False  # the primary answering one entry fewer than the batch has rows

    def forward(self, inputs):
        self.host_calls += inputs.device.type == "cpu"
        answer = [{"kept": row[row > 0], "scores": row.sigmoid()} for row in inputs]
        return answer[:-1] if self.drop_one and inputs.device.type != "cpu" else answer


def test_outputs_of_one_entry_per_row_and_lengths_following_the_values_are_learned_once():
    # every request of another batch size than the example's ran on the fallback too, and a length
    # that follows the values was learned per length: the accelerator served at the host's speed
    model = OneEntryPerRow()
    factory = lambda: {"model": model, "example": torch.tensor([[1.0, -1.0, 1.0, -1.0]] * 2)}  # noqa: E731
    with Deployment(factory, primary=PRIMARY, fallback="cpu", timeout_s=5) as deployment:
        fallback = deployment.fallback.model()
        started = fallback.host_calls
        generator = torch.Generator().manual_seed(0)
        for rows in [1, 3, 1, 3, 2, 1, 3, 2, 1, 1]:
            inputs = torch.randn(rows, 4, generator=generator)
            answer = deployment.predict({"inputs": inputs.tolist()})
            assert (answer.role, answer.failover, len(answer.body["outputs"])) == ("primary", None, rows)
            assert answer.body["outputs"][0]["kept"] == pytest.approx(inputs[0][inputs[0] > 0].tolist())
        # a batch of 1 and one of 3 (another structure each), and the kept values' length: a few checks
        assert fallback.host_calls - started <= 3
        assert 'result="differed"' not in deployment.metrics.exposition()[0].decode()
        # rows that keep as many values as the batch has rows, by chance: not learned again and again
        started = fallback.host_calls
        chance = [[[1.0, 1.0, 1.0, -1.0], [1.0, -1.0, -1.0, -1.0], [1.0, -1.0, -1.0, -1.0]],
                  [[1.0, -1.0, -1.0, -1.0], [1.0, 1.0, 1.0, -1.0], [1.0, -1.0, -1.0, -1.0]]]
        for index in range(10):
            assert deployment.predict({"inputs": chance[index % 2]}).role == "primary"
        assert fallback.host_calls - started <= 2
        # a primary dropping one image's entry, at every batch size seen: answered by the fallback
        deployment.primary.model().drop_one = True
        for rows in [1, 2, 3]:
            answer = deployment.predict({"inputs": torch.randn(rows, 4, generator=generator).tolist()})
            assert (answer.role, answer.failover, len(answer.body["outputs"])) == ("fallback", "bad_output", rows)


def test_a_preprocess_failing_on_its_own_is_a_500_and_one_refusing_the_request_a_400(caplog):
    def preprocess(payload):
        if payload.get("vocabulary"):
            open("/nonexistent/vocab.txt")  # the server's fault: a file its deployment lacks
        return torch.tensor(payload["inputs"])  # no "inputs": KeyError, the request's fault

    factory = lambda: {"model": torch.nn.Identity(), "preprocess": preprocess}  # noqa: E731
    with Deployment(factory, primary=PRIMARY, fallback="cpu") as deployment:
        with pytest.raises(PreprocessFailed, match="FileNotFoundError") as failed:
            deployment.predict({"vocabulary": True})
        assert failed.value.status == 500
        with pytest.raises(InvalidInput, match="KeyError") as rejected:
            deployment.predict({})
        assert rejected.value.status == 400
        exposition = deployment.metrics.exposition()[0].decode()
        assert 'reason="preprocess_error"} 1.0' in exposition and 'reason="invalid_input"} 1.0' in exposition
        # the server's own fault leaves its traceback in the log
        logged = [record for record in caplog.records if record.name == "torchport.serve" and record.exc_info]
        assert len(logged) == 1 and logged[0].exc_info[0] is FileNotFoundError


def test_a_preprocess_placing_the_request_on_a_gpu_this_machine_lacks_is_the_servers_fault(caplog):
    # written for a GPU host: every request failed as a 400 blaming the client ("Torch not compiled
    # with CUDA enabled"), nothing logged, while /readyz stayed green
    def preprocess(payload):
        if payload.get("device") not in (None, "cpu"):  # the client's error naming a device: still a 400
            raise ValueError(f"field 'device' must be 'cpu', got {payload['device']!r}")
        return torch.tensor(payload["x"], dtype=torch.float32).to("cuda")

    factory = lambda: {"model": torch.nn.Linear(4, 3), "preprocess": preprocess}  # noqa: E731
    with Deployment(factory, primary=PRIMARY, fallback="cpu") as deployment:
        with pytest.raises(InvalidInput, match="got 'cuda'"):
            deployment.predict({"x": [[1.0, 2.0, 3.0, 4.0]], "device": "cuda"})
        with pytest.raises(PreprocessFailed, match=r"places the request's tensors on 'cuda'.*\.to\('cuda'\)") as failed:
            deployment.predict({"x": [[1.0, 2.0, 3.0, 4.0]]})
        assert failed.value.status == 500
        assert 'reason="preprocess_error"} 1.0' in deployment.metrics.exposition()[0].decode()
    logged = [record for record in caplog.records if record.name == "torchport.serve" and record.exc_info]
    assert len(logged) == 1 and "'cuda'" in logged[0].getMessage()


@pytest.mark.parametrize("error", [KeyboardInterrupt, GeneratorExit])
def test_a_preprocess_raising_a_base_exception_from_a_server_thread_fails_the_request_not_the_server(error):
    def preprocess(payload):
        raise error()

    factory = lambda: {"model": torch.nn.Identity(), "preprocess": preprocess}  # noqa: E731
    with Deployment(factory, primary=PRIMARY, fallback="cpu") as deployment:
        raised = []

        def ask():
            try:
                deployment.predict({"inputs": [[1.0]]})
            except BaseException as caught:  # noqa: BLE001 - what reaches the server's handler
                raised.append(caught)

        thread = threading.Thread(target=ask)
        thread.start()
        thread.join(timeout=30)
        assert isinstance(raised[0], PreprocessFailed) and raised[0].status == 500
        assert error.__name__ in str(raised[0])


def test_an_example_the_fallback_fails_too_is_the_examples_fault_not_the_primarys():
    # a typo in the factory: 5 features for a 4-feature model
    factory = lambda: {"model": make_linear(), "example": torch.randn(2, FEATURES + 1)}
    with pytest.raises(UsageError, match="example fails on the fallback 'cpu', the reference") as error:
        Deployment(factory, primary=PRIMARY, fallback="cpu")
    assert "mat1 and mat2" in str(error.value) and "Fix the example" in str(error.value)


@pytest.mark.parametrize("timeout_s", [math.inf, 1e12, math.nan, -1.0])
def test_a_timeout_that_cannot_be_waited_is_a_usage_error(timeout_s):
    with pytest.raises(UsageError, match="timeout_s="):
        Deployment(make_linear, primary=PRIMARY, fallback="cpu", timeout_s=timeout_s)


@pytest.mark.parametrize("share", [0.1, 0.3, 0.7, 0.9, 0.05, 0.25])
def test_canary_sends_exactly_its_share_for_decimal_shares(share):
    with Deployment(make_linear, primary=PRIMARY, fallback="cpu", canary=share) as deployment:
        roles = [deployment.predict({"inputs": sample(index)}).role for index in range(100)]
        assert roles.count("primary") == round(100 * share)
        first = math.ceil(1 / Fraction(str(share)))  # the first call n with floor(n * share) == 1
        assert roles[first - 1] == "primary" and "primary" not in roles[:first - 1]


def test_shadow_at_a_tenth_raises_the_alarm_at_request_thirty():
    with Deployment(lambda: PerturbedModel(0.05), primary=PRIMARY, fallback="cpu", shadow=0.1) as deployment:
        for index in range(29):
            deployment.predict({"inputs": sample(index)})
        deployment.flush()
        assert deployment.shadow_monitor.comparisons == 2 and not deployment.shadow_monitor.alarm
        deployment.predict({"inputs": sample(29)})
        deployment.flush()
        assert deployment.shadow_monitor.alarm


class ShapeShifter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = make_linear()
        self.shift = False

    def forward(self, inputs):
        outputs = self.model(inputs)
        return outputs[:, :2] if self.shift and inputs.device.type != "cpu" else outputs


def test_shadow_gauges_show_nan_before_the_first_comparison_and_when_the_last_could_not_measure():
    model = ShapeShifter()
    with Deployment(lambda: model, primary=PRIMARY, fallback="cpu", shadow=1.0) as deployment:
        # nothing compared yet: not a cosine of 0 (the worst parity), which would fire parity alerts
        # on every replica just started
        assert math.isnan(metric(deployment, "torchport_serve_shadow_last_cosine"))
        assert math.isnan(metric(deployment, "torchport_serve_shadow_last_max_abs_error"))
        deployment.predict({"inputs": sample(1)})
        deployment.flush()
        assert metric(deployment, "torchport_serve_shadow_last_cosine") == pytest.approx(1.0, abs=1e-6)
        deployment.primary.model().shift = True
        deployment.predict({"inputs": sample(2)})  # no example, so no contract: only shadow sees it
        deployment.flush()
        assert deployment.shadow_monitor.mismatches == 1
        assert math.isnan(metric(deployment, "torchport_serve_shadow_last_cosine"))
        assert math.isnan(metric(deployment, "torchport_serve_shadow_last_max_abs_error"))


def test_a_drain_waits_for_requests_queued_behind_the_concurrency_limit():
    plan = FaultPlan(hang_s=0.3)
    with Deployment(lambda: FaultyModel(plan), primary=PRIMARY, fallback="cpu", timeout_s=5.0,
                    max_concurrency=1) as deployment:

        async def scenario():
            requests = [asyncio.ensure_future(deployment.predict_async({"inputs": sample(index, MARKERS["timeout"])}))
                        for index in range(3)]
            deadline = asyncio.get_running_loop().time() + 10
            while deployment.in_flight < 3:  # one running, two queued at the gate: all three admitted
                assert asyncio.get_running_loop().time() < deadline, "queued requests are not counted in flight"
                await asyncio.sleep(0.005)
            drained = asyncio.get_running_loop().run_in_executor(None, deployment.drain, 10.0)
            answers = await asyncio.gather(*requests, return_exceptions=True)
            return answers, await drained

        answers, drained = asyncio.run(scenario())
        assert drained is True
        assert [getattr(answer, "role", answer) for answer in answers] == ["primary"] * 3


class ExitsEverywhere(torch.nn.Module):
    """Calls sys.exit() on every device for inputs whose first value is negative."""

    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        if float(inputs.reshape(-1)[0]) < 0:
            sys.exit(3)
        return self.model(inputs)


def test_sys_exit_in_the_model_on_the_fallback_is_a_422_not_the_end_of_the_server():
    with Deployment(ExitsEverywhere, primary=PRIMARY, fallback="cpu", failure_threshold=1) as deployment:
        with pytest.raises(ModelRejectedInput):
            deployment.predict({"inputs": [[-1.0] * FEATURES]})
        assert deployment.breaker.state == "closed"
        assert deployment.predict({"inputs": [[1.0] * FEATURES]}).role == "primary"


@pytest.mark.parametrize("payload", [{"inputs": [3000000000], "dtype": "int32"}, {"inputs": [2 ** 63], "dtype": "int64"},
                                     {"inputs": [2 ** 53 + 1], "dtype": "int64"}])
def test_whole_numbers_the_dtype_would_change_are_refused(payload):
    from torchport.serve import InvalidInput
    from torchport.serve.model import default_preprocess

    with pytest.raises(InvalidInput, match="outside"):
        default_preprocess(payload)


class HashedIds(torch.nn.Module):
    """An embedding over hashed feature ids (ids modulo the table size), as recommendation models take them."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(1000, 4)

    def forward(self, ids):
        return self.table(ids % 1000).sum(1)


def hashed_ids():
    torch.manual_seed(0)
    return {"model": HashedIds(), "example": torch.tensor([[1, 2, 3], [4, 5, 6]])}


def test_integer_inputs_the_primary_would_narrow_out_of_range_are_answered_by_the_fallback():
    # the Neuron profile computes int64 as int32: 3000000001 would wrap to a different row of the table
    reference = hashed_ids()["model"].eval()
    with Deployment(hashed_ids, primary=PRIMARY, fallback="cpu", timeout_s=5) as deployment:
        wide = [[3000000001, 2, 3]]
        answer = deployment.predict({"inputs": wide, "dtype": "int64"})
        assert (answer.role, answer.routed, answer.failover) == ("fallback", "out_of_range", None)
        assert answer.body["outputs"] == reference(torch.tensor(wide)).tolist()
        narrow = deployment.predict({"inputs": [[7, 8, 9]], "dtype": "int64"})
        assert (narrow.role, narrow.routed) == ("primary", None)
        assert deployment.breaker.state == "closed"
        assert 'torchport_serve_routed_to_fallback_total{reason="out_of_range"} 1.0' in deployment.metrics.exposition()[0].decode()


def test_out_of_range_requests_are_neither_drift_nor_a_reason_to_move_their_batch():
    wide, narrow = [[3000000001, 2, 3]], [[7, 8, 9]]
    with Deployment(hashed_ids, primary=PRIMARY, fallback="cpu", timeout_s=5, shadow=1.0, batch_max_size=4,
                    batch_wait_s=0.2) as deployment:
        answers: dict = {}

        def ask(name, ids):
            answers[name] = deployment.predict({"inputs": ids, "dtype": "int64"})

        threads = [threading.Thread(target=ask, args=(name, ids)) for name, ids in
                   (("wide", wide), ("narrow", narrow), ("other", [[4, 5, 6]]))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        deployment.flush()
        assert answers["wide"].routed == "out_of_range"
        assert answers["narrow"].role == answers["other"].role == "primary"  # joined without the wide one
        monitor = deployment.shadow_monitor
        assert (monitor.comparisons, monitor.mismatches, monitor.alarm) == (2, 0, False)
        assert 'torchport_serve_shadow_skipped_total{reason="out_of_range"} 1.0' in \
            deployment.metrics.exposition()[0].decode()

    # routed before the canary share and the breaker: neither shadowed, nor a probe of the primary
    with Deployment(hashed_ids, primary=PRIMARY, fallback="cpu", timeout_s=5, shadow=1.0, canary=0.0) as deployment:
        for _ in range(3):
            assert deployment.predict({"inputs": wide, "dtype": "int64"}).routed == "out_of_range"
        deployment.flush()
        assert (deployment.shadow_monitor.mismatches, deployment.shadow_monitor.alarm) == (0, False)


class Softmax(torch.nn.Module):
    def forward(self, inputs):
        return torch.softmax(inputs.float(), dim=-1)


def test_one_dimensional_requests_are_never_joined():
    with Deployment(lambda: {"model": Softmax(), "example": torch.randn(2, 3)}, primary=PRIMARY, fallback="cpu",
                    batch_max_size=8, batch_wait_s=0.3) as deployment:
        results = batch_of_requests(deployment, [[1.0, 2.0, 3.0], [0.0, 0.0], [5.0]])
        for answer in results:
            assert sum(answer.body["outputs"]) == pytest.approx(1.0, abs=1e-5)
        assert deployment.batcher.batches == 0


class WithPrior(torch.nn.Module):
    """Logits per row and a prior that does not follow the batch."""

    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        return {"logits": self.model(inputs), "prior": torch.tensor([0.2, 0.3, 0.5])}


def test_a_micro_batch_gives_outputs_that_do_not_follow_the_batch_whole_to_every_request():
    with Deployment(lambda: {"model": WithPrior(), "example": EXAMPLE}, primary=PRIMARY, fallback="cpu",
                    batch_max_size=3, batch_wait_s=0.5) as deployment:
        rows = [sample(0), sample(1), sample(2)]
        results = batch_of_requests(deployment, rows)
        assert deployment.batcher.batches == 1
        for index, answer in enumerate(results):
            assert answer.body["outputs"]["prior"] == pytest.approx([0.2, 0.3, 0.5])
            expected = make_linear()(torch.tensor(rows[index]))
            assert torch.allclose(torch.tensor(answer.body["outputs"]["logits"]), expected, atol=1e-5)


def test_micro_batching_without_an_example_is_a_usage_error():
    with pytest.raises(UsageError, match="needs the factory's 'example'"):
        Deployment(make_linear, primary=PRIMARY, fallback="cpu", batch_max_size=4)


def test_batch_failovers_and_canary_routing_count_requests_not_batches():
    # the canary share picks request by request, before requests are joined: a batch is of requests
    # the share sent to the primary
    with Deployment(lambda: {"model": make_linear(), "example": EXAMPLE}, primary=PRIMARY, fallback="cpu",
                    canary=0.0, batch_max_size=4, batch_wait_s=0.5) as deployment:
        results = batch_of_requests(deployment, [sample(index) for index in range(4)])
        assert deployment.batcher.batches == 0 and {answer.routed for answer in results} == {"canary"}
        assert metric(deployment, 'torchport_serve_routed_to_fallback_total{reason="canary"}') == 4
    with Deployment(lambda: {"model": make_linear(), "example": EXAMPLE}, primary=PRIMARY, fallback="cpu",
                    canary=0.5, batch_max_size=4, batch_wait_s=0.2) as deployment:
        roles = [answer.role for burst in (7, 1, 7, 1) for answer in
                 batch_of_requests(deployment, [sample(index) for index in range(burst)])]
        assert roles.count("primary") == 8 and roles.count("fallback") == 8, roles
        assert metric(deployment, 'torchport_serve_routed_to_fallback_total{reason="canary"}') == 8


class RejectsNegativeOnTheFallback(torch.nn.Module):
    """The primary is down while `down`; both devices reject inputs whose first value is negative."""

    def __init__(self):
        super().__init__()
        self.model = make_linear()
        self.down = False

    def forward(self, inputs):
        if float(inputs.reshape(-1)[0]) < 0:
            raise ValueError("negative inputs are out of range")
        if self.down and inputs.device.type != "cpu":
            raise RuntimeError("primary device lost")
        return self.model(inputs)


def test_a_probe_made_with_an_input_the_fallback_rejects_does_not_reopen_the_breaker():
    with Deployment(RejectsNegativeOnTheFallback, primary=PRIMARY, fallback="cpu", failure_threshold=1,
                    reset_after_s=0.05, recovery_successes=1) as deployment:
        primary = deployment.primary.model()
        primary.down = True
        deployment.predict({"inputs": [[1.0] * FEATURES]})  # fails over: the breaker opens
        assert deployment.breaker.state == "open"
        primary.down = False
        time.sleep(0.1)
        with pytest.raises(ModelRejectedInput):
            deployment.predict({"inputs": [[-1.0] * FEATURES]})  # starts a probe with a bad input
        deployment.flush()
        assert deployment.breaker.state != "open"
        assert metric(deployment, 'torchport_serve_probes_total{result="inconclusive"}') == 1
        time.sleep(0.1)
        deployment.predict({"inputs": [[1.0] * FEATURES]})  # a good probe closes it
        deployment.flush()
        assert deployment.breaker.state == "closed"


def test_a_learned_input_layout_still_has_its_rows_checked():
    model = RowsDropped()
    with Deployment(lambda: {"model": model, "example": EXAMPLE}, primary=PRIMARY, fallback="cpu",
                    failure_threshold=100) as deployment:
        rows = [[sample(0)[0]] * 2, [sample(1)[0]] * 2]  # rank 3: a layout the example did not show
        assert deployment.predict({"inputs": rows}).role == "primary"
        deployment.primary.model().drop = True
        answer = deployment.predict({"inputs": rows})
        assert (answer.role, answer.failover) == ("fallback", "bad_output")


class DictInputs(torch.nn.Module):
    """A transformers-style model: keyword inputs, one row of outputs per sequence."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(50, 4)
        self.drop = False

    def forward(self, input_ids, attention_mask):
        pooled = (self.embedding(input_ids) * attention_mask.unsqueeze(-1)).sum(1)
        return pooled[:2] if self.drop and input_ids.device.type != "cpu" else pooled


def test_dict_inputs_have_their_batch_checked():
    example = {"input_ids": torch.randint(0, 50, (2, 5)), "attention_mask": torch.ones(2, 5, dtype=torch.long)}
    model = DictInputs()
    with Deployment(lambda: {"model": model, "example": example,
                             "preprocess": lambda payload: {"input_ids": torch.tensor(payload["ids"]),
                                                            "attention_mask": torch.ones(len(payload["ids"]), 5,
                                                                                         dtype=torch.long)}},
                    primary=PRIMARY, fallback="cpu", failure_threshold=100) as deployment:
        ids = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [11, 12, 13, 14, 15]]
        assert deployment.predict({"ids": ids}).role == "primary"
        deployment.primary.model().drop = True
        answer = deployment.predict({"ids": ids})
        assert (answer.role, answer.failover) == ("fallback", "bad_output") and len(answer.body["outputs"]) == 3


class Narrower(torch.nn.Module):
    """Computes in float64 and int64; on the primary (neuron's profile) in float32 and int32."""

    def forward(self, inputs):
        values, ids = inputs.double() * 2, inputs.round().long()
        if inputs.device.type != "cpu":
            values, ids = values.float(), ids.int()
        return values, ids


def test_shadow_accepts_the_primary_profiles_narrower_types():
    with Deployment(Narrower, primary=PRIMARY, fallback="cpu", shadow=1.0) as deployment:
        for index in range(5):
            deployment.predict({"inputs": sample(index)})
        deployment.flush()
        assert deployment.shadow_monitor.comparisons == 5 and deployment.shadow_monitor.mismatches == 0


class OffByOneIds(torch.nn.Module):
    def forward(self, inputs):
        ids = (inputs.abs() * 10000).long() + 10000
        return ids + 1 if inputs.device.type != "cpu" else ids


def test_shadow_compares_integer_outputs_exactly():
    with Deployment(OffByOneIds, primary=PRIMARY, fallback="cpu", shadow=1.0) as deployment:
        for index in range(3):
            deployment.predict({"inputs": sample(index)})
        deployment.flush()
        assert deployment.shadow_monitor.mismatches == 3 and deployment.shadow_monitor.alarm


def test_shadow_counts_a_primary_that_fails_every_input_as_mismatches():
    plan = FaultPlan()
    plan.down = True
    with Deployment(lambda: FaultyModel(plan), primary=PRIMARY, fallback="cpu", canary=0.0, shadow=1.0) as deployment:
        for index in range(3):
            assert deployment.predict({"inputs": sample(index)}).routed == "canary"
        deployment.flush()
        assert deployment.shadow_monitor.mismatches == 3 and deployment.shadow_monitor.alarm
        assert "primary failed" in deployment.shadow_monitor.last.reasons[0]


def test_shadow_counts_a_primary_that_fails_live_canary_requests_as_mismatches():
    plan = FaultPlan()
    plan.down = True
    with Deployment(lambda: FaultyModel(plan), primary=PRIMARY, fallback="cpu", canary=1.0, shadow=1.0,
                    failure_threshold=100) as deployment:
        for index in range(3):
            assert deployment.predict({"inputs": sample(index)}).failover == "error"
        deployment.flush()
        assert deployment.shadow_monitor.mismatches == 3 and deployment.shadow_monitor.alarm
        assert "primary failed" in deployment.shadow_monitor.last.reasons[0]
        assert 'torchport_serve_shadow_skipped_total{reason="primary_unavailable"}' not in exposition(deployment)


def test_a_shadow_rollout_does_not_pass_a_primary_that_failed_at_start():
    # --canary 0 --shadow S with a primary whose warm-up failed: the breaker starts open, every
    # shadowed request finds the primary unavailable, which is a mismatch, not a comparison skipped
    factory = lambda: {"model": ExitsOnPrimary(), "example": torch.randn(2, FEATURES)}
    with Deployment(factory, primary=PRIMARY, fallback="cpu", canary=0.0, shadow=1.0, reset_after_s=60) as deployment:
        for index in range(3):
            deployment.predict({"inputs": sample(index)})
        deployment.flush()
        assert deployment.shadow_monitor.mismatches == 3 and deployment.shadow_monitor.alarm
        assert "breaker is open" in deployment.shadow_monitor.last.reasons[0]


class NanConfidence(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        logits = self.model(inputs)
        confidence = float("nan") if inputs.device.type != "cpu" else float(logits.max())
        return {"logits": logits, "confidence": confidence}


def test_nan_in_a_python_number_of_the_outputs_fails_over_as_nonfinite():
    with Deployment(NanConfidence, primary=PRIMARY, fallback="cpu") as deployment:
        answer = deployment.predict({"inputs": sample(1)})
        assert (answer.role, answer.failover) == ("fallback", "nonfinite")
        assert math.isfinite(answer.body["outputs"]["confidence"])


class Float64OnNeuron(torch.nn.Module):
    """Computes in float64; on the primary (neuron's profile: float64 as float32) rounded to float32."""

    def forward(self, inputs):
        outputs = inputs.double() * math.pi + 1 / 3
        return outputs.float().double() if inputs.device.type != "cpu" else outputs


def test_shadow_judges_a_float64_output_the_profile_computes_as_float32_at_float32_limits():
    with Deployment(Float64OnNeuron, primary=PRIMARY, fallback="cpu", shadow=1.0) as deployment:
        for index in range(4):
            deployment.predict({"inputs": sample(index)})
        deployment.flush()
        assert deployment.shadow_monitor.comparisons == 4 and deployment.shadow_monitor.mismatches == 0


class ScalesInPlace(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        return self.model(inputs.mul_(2))  # as `x.div_(255)` in an image model's forward


def test_a_model_that_edits_its_input_in_place_leaves_the_request_as_it_came_for_the_other_device():
    with Deployment(ScalesInPlace, primary=PRIMARY, fallback="cpu", canary=0.0, shadow=1.0) as deployment:
        for index in range(3):
            answer = deployment.predict({"inputs": sample(index)})
            expected = make_linear()(torch.tensor(sample(index)) * 2)
            assert torch.allclose(torch.tensor(answer.body["outputs"]), expected, atol=1e-5)
        deployment.flush()
        assert deployment.shadow_monitor.comparisons == 3 and deployment.shadow_monitor.mismatches == 0


class LabelOffOnPrimary(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        logits = self.model(inputs)
        label = int(logits.argmax()) + (1 if inputs.device.type != "cpu" else 0)
        return {"logits": logits, "label": label, "name": "class"}


def test_shadow_compares_python_values_beside_the_tensors():
    with Deployment(LabelOffOnPrimary, primary=PRIMARY, fallback="cpu", shadow=1.0) as deployment:
        for index in range(3):
            deployment.predict({"inputs": sample(index)})
        deployment.flush()
        assert deployment.shadow_monitor.mismatches == 3
        assert "value ['label']" in deployment.shadow_monitor.last.reasons[0]


class NanOnTheFallbackForNegatives(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = make_linear()

    def forward(self, inputs):
        outputs = self.model(inputs)
        if inputs.device.type == "cpu" and float(inputs.reshape(-1)[0]) < 0:
            return outputs * float("nan")
        return outputs


def test_shadow_skips_an_input_the_fallback_answers_with_nan_as_it_skips_one_it_raises_on():
    with Deployment(NanOnTheFallbackForNegatives, primary=PRIMARY, fallback="cpu", shadow=1.0) as deployment:
        for _ in range(3):
            deployment.predict({"inputs": [[-1.0] + [0.5] * (FEATURES - 1)]})
        deployment.flush()
        assert deployment.shadow_monitor.mismatches == 0
        assert metric(deployment, 'torchport_serve_shadow_skipped_total{reason="failed"}') == 3


class KeepsPositiveRows(torch.nn.Module):
    """Returns only the rows whose first value is positive: how many depends on the values."""

    def forward(self, inputs):
        return inputs[inputs[:, 0] > 0] * 2


def test_a_joined_answer_whose_rows_depend_on_the_values_is_answered_request_by_request():
    example = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    with Deployment(lambda: {"model": KeepsPositiveRows(), "example": example}, primary=PRIMARY, fallback="cpu",
                    batch_max_size=2, batch_wait_s=0.5) as deployment:
        results = batch_of_requests(deployment, [[[1.0, 1.0]], [[-1.0, 1.0]]])
        assert deployment.batcher.batches == 1
        assert results[0].body["outputs"] == [[2.0, 2.0]] and results[1].body["outputs"] == []


class BatchMean(torch.nn.Module):
    def forward(self, inputs):
        return {"scores": inputs * 2, "mean": inputs.mean(0)}


class CentredOverBatch(torch.nn.Module):
    """Rows computed over the batch (cross-batch normalisation): one row per input row, each depending
    on the others."""

    def forward(self, inputs):
        return inputs - inputs.mean(0)


class CumulativeOverBatch(torch.nn.Module):
    """The first row is its own; every later one sums the rows before it."""

    def forward(self, inputs):
        return inputs.cumsum(0)


class OtherPathForLargerBatches(torch.nn.Module):
    """Rows on their own up to a batch of 2; from 3 rows on, centred over the batch."""

    def forward(self, inputs):
        return inputs - inputs.mean(0) if inputs.shape[0] >= 3 else inputs * 1.0


class BatchMaximumBeside(torch.nn.Module):
    """Per-row logits and, beside them, a Python number computed over the whole batch."""

    def forward(self, inputs):
        return {"logits": inputs * 2, "max_logit": float(inputs.max().item())}


@pytest.mark.parametrize("factory, options, fragment", [
    (lambda: {"model": BatchMean(), "example": torch.randn(3, 4)}, {}, r"\['mean'\] differed"),
    (lambda: {"model": CentredOverBatch(), "example": torch.randn(3, 4)}, {}, "tensor differed"),
    (lambda: {"model": CumulativeOverBatch(), "example": torch.randn(3, 4)}, {}, "tensor differed"),
    (lambda: {"model": BatchMaximumBeside(), "example": torch.randn(3, 4)}, {}, r"\['max_logit'\] differed"),
    (lambda: {"model": make_linear(), "example": torch.randn(1, FEATURES)}, {}, "2 or more rows"),
    # an example whose rows are all the same cannot show rows computed over the batch
    (lambda: {"model": CentredOverBatch(), "example": torch.zeros(2, 4)}, {}, "rows differ"),
    # the example has 2 rows; batches of up to 4 take the other path
    (lambda: {"model": OtherPathForLargerBatches(), "example": torch.randn(2, 4)}, {}, "tensor differed"),
    (lambda: {"model": make_linear(), "example": EXAMPLE}, {"max_concurrency": 2}, "could never fill"),
])
def test_micro_batching_is_refused_where_it_would_mix_clients_or_never_fill(factory, options, fragment):
    with pytest.raises(UsageError, match=fragment):
        Deployment(factory, primary=PRIMARY, fallback="cpu", batch_max_size=4, **options)


EXIT_WITH_CALLS_RUNNING = """
import time, torch
from torchport.serve import Deployment

class SlowThenBusy(torch.nn.Module):
    def forward(self, x):
        if SLOW and x.device.type != "cpu":  # the primary's calls, once served
            time.sleep(0.1)
            for _ in range(3000):  # still inside torch when the program ends
                x = x * 1.0 + 0.0
        return x * 2

SLOW = []
deployment = Deployment(lambda: {"model": SlowThenBusy(), "example": torch.randn(2, 4)}, primary=PRIMARY,
                        fallback="cpu", timeout_s=0.02, failure_threshold=10**6)
SLOW.append(True)
answers = [deployment.predict({"inputs": [[1.0, 2.0, 3.0, float(i)]]}) for i in range(6)]
print("answered=" + ",".join(sorted({answer.failover or "none" for answer in answers})))
deployment.close()
"""


def test_a_program_ending_while_abandoned_calls_are_inside_torch_exits_cleanly(tmp_path):
    # the calls past their timeout still run on the workers; the interpreter's exit waits for them
    # before torch's bindings are torn down (the process died of SIGSEGV/SIGABRT after right answers)
    import subprocess

    script = tmp_path / "ends.py"
    script.write_text(EXIT_WITH_CALLS_RUNNING.replace("PRIMARY", repr(PRIMARY)))
    for _ in range(3):
        result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
        assert "answered=timeout" in result.stdout


EXIT_AFTER_THREADED_CALLS = """
import threading, torch
from torchport.serve import Deployment

deployment = Deployment(lambda: torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)),
                        primary="cpu", fallback="cpu", timeout_s=1.0)

def ask():
    for _ in range(50):
        deployment.predict({"inputs": [[0.1] * 8]})

threads = [threading.Thread(target=ask) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("answered")
"""


def test_a_program_ending_after_predicts_from_many_threads_exits_cleanly(tmp_path):
    # nothing running at the end: the idle workers that ran torch code end before the interpreter
    # finalizes (it aborted with "terminate called without an active exception" in most runs)
    import subprocess

    script = tmp_path / "threaded.py"
    script.write_text(EXIT_AFTER_THREADED_CALLS)
    for _ in range(4):
        result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and "answered" in result.stdout, (result.returncode, result.stderr[-2000:])


def test_requests_of_no_rows_join_a_batch_as_they_are():
    with Deployment(lambda: {"model": make_linear(), "example": EXAMPLE}, primary=PRIMARY, fallback="cpu",
                    batch_max_size=4, batch_wait_s=0.3) as deployment:
        results = [None, None]
        barrier = threading.Barrier(2)

        def one(index):
            barrier.wait()
            results[index] = deployment.infer(torch.empty(0, FEATURES))

        threads = [threading.Thread(target=one, args=(index,)) for index in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert deployment.batcher.batches == 1
        assert [tuple(answer.outputs.shape) for answer in results] == [(0, 4), (0, 4)], results
        assert [answer.role for answer in results] == ["primary", "primary"]



def test_a_model_whose_batch_wide_scale_mixes_rows_is_refused_though_the_examples_rows_share_a_range():
    # dynamic quantization takes one input scale from the whole batch: another client's wider row
    # changes every answer, which the example's rows, of one range, cannot show on their own
    def quantized():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 4))
        example = torch.rand(4, FEATURES)
        example[:, 0], example[:, 1] = 0.0, 1.0  # every row spans [0, 1], as the batch does
        return {"model": torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8),
                "example": example}

    with pytest.raises(UsageError, match=r"tensor \(beside a row of a wider range\) differed"):
        Deployment(quantized, primary="cpu", fallback="cpu", batch_max_size=4)
    with Deployment(quantized, primary="cpu", fallback="cpu") as deployment:  # unbatched, it serves
        assert deployment.predict({"inputs": sample(1)}).role == "primary"


class TrainingBatchNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(FEATURES)

    def forward(self, inputs):
        return self.norm(inputs)


def test_micro_batching_refuses_a_model_that_cannot_take_one_row_with_a_usage_error():
    with pytest.raises(UsageError, match="raised ValueError: Expected more than 1 value per channel"):
        Deployment(lambda: {"model": TrainingBatchNorm(), "example": EXAMPLE, "eval": False}, primary=PRIMARY,
                   fallback="cpu", batch_max_size=4)


def large_batches_fail_while(broken: list):
    """Batches of more than 2 rows fail while `broken[0]` is set (memory taken by something else);
    one-row probes still pass."""

    def fault(rows):
        if broken[0] and rows > 2:
            raise torch.OutOfMemoryError("out of device memory")

    return fault

def test_a_primary_back_from_an_outage_has_its_batch_sizes_checked_again():
    broken = [False]
    with Deployment(lambda: {"model": OnThePrimary(large_batches_fail_while(broken)), "example": EXAMPLE}, primary=PRIMARY, fallback="cpu", batch_max_size=4,
                    batch_wait_s=0.1, failure_threshold=1, reset_after_s=0.05, recovery_successes=1) as deployment:
        assert deployment.batcher.max_size == 4
        broken[0] = True
        deadline = time.monotonic() + 20
        while deployment.status()["batching"].get("max_size") != 2 and time.monotonic() < deadline:
            batch_of_requests(deployment, [sample(index) for index in range(4)])
            time.sleep(0.06)
        assert deployment.status()["batching"] == {"max_size": 2, "asked": 4,
                                                   "primary_failed": deployment.status()["batching"]["primary_failed"]}
        assert deployment.batcher.max_size == 2 and deployment.breaker.state == "closed"
        results = batch_of_requests(deployment, [sample(index) for index in range(4)])
        assert [answer.role for answer in results] == ["primary"] * 4, results


def test_closing_with_shadow_comparisons_queued_still_makes_or_counts_each():
    with Deployment(lambda: {"model": make_linear(), "example": EXAMPLE}, primary=PRIMARY, fallback="cpu",
                    shadow=1.0) as deployment:
        results = batch_of_requests(deployment, [sample(index) for index in range(12)])
    assert all(answer.role == "primary" for answer in results)
    assert deployment.flush(timeout_s=20)
    made = metric(deployment, "torchport_serve_shadow_comparisons_total")
    skipped = sum(float(line.rsplit(" ", 1)[1]) for line in exposition(deployment).splitlines()
                  if line.startswith("torchport_serve_shadow_skipped_total{"))
    assert made + skipped == 12, (made, skipped)


class NegatedOnThePrimaryWhileBroken(torch.nn.Module):
    """On the primary, while `broken` is set, answers negated: finite, of the contract's shape, but
    refused by the factory's postprocess (which takes no negative score)."""

    def __init__(self):
        super().__init__()
        self.broken = [False]

    def __deepcopy__(self, memo):
        copied = NegatedOnThePrimaryWhileBroken()
        copied.broken = self.broken
        return copied

    def forward(self, inputs):
        scores = inputs.abs() + 1.0
        return -scores if inputs.device.type != "cpu" and self.broken[0] else scores


def test_probes_made_from_joined_batches_are_judged_by_the_postprocess_as_live_requests_are():
    def postprocess(outputs):
        if bool((outputs < 0).any()):
            raise ValueError("negative score")
        return {"scores": outputs.tolist()}

    model = NegatedOnThePrimaryWhileBroken()
    with Deployment(lambda: {"model": model, "example": EXAMPLE, "postprocess": postprocess}, primary=PRIMARY,
                    fallback="cpu", batch_max_size=4, batch_wait_s=0.05, failure_threshold=1, reset_after_s=0.02,
                    recovery_successes=1) as deployment:
        model.broken[0] = True
        for _ in range(15):
            results = batch_of_requests(deployment, [sample(index) for index in range(4)])
            assert all(answer.role == "fallback" for answer in results), results
            time.sleep(0.03)
        assert deployment.flush(timeout_s=10)
        assert metric(deployment, 'torchport_serve_probes_total{result="failure"}') >= 1
        assert metric(deployment, 'torchport_serve_breaker_transitions_total{to="closed"}') == 0
