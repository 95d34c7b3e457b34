"""Shape bucketing: a variable-length stream compiles once per bucket, not once per length, and
padding never reaches the results."""

import random

import pytest
import torch

import torchport
from torchport.check.bucketing import next_power_of_two, predict_compilations
from torchport.errors import UsageError

from compile_models import MeanPool, TinyAttention


def _stream(count, low, high, batch=2, seed=0):
    generator = random.Random(seed)
    return [torch.randint(0, 32, (batch, generator.randint(low, high))) for _ in range(count)]


def _run_stream(model, compiled, batches):
    for ids in batches:
        expected = model(ids)
        got = compiled(ids)
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.fixture
def causal():
    torch.manual_seed(0)
    return TinyAttention().eval()


def test_variable_length_stream_compiles_once_per_bucket(causal):
    # "eager" as the compiler: Dynamo captures one static-shape graph per new shape, as a
    # static-shape target's compiler would, without paying for Inductor here.
    # A narrow length range keeps the unbucketed side (one trace per length) quick; the slow test
    # below runs the full 17..512 range.
    batches = _stream(100, 28, 36)
    lengths = {ids.shape[1] for ids in batches}
    buckets = {next_power_of_two(length) for length in lengths}

    compiled = torchport.compile(causal, target="cpu", compiler="eager")
    _run_stream(causal, compiled, batches)
    report = compiled.report
    # The first call only observes; a second call of the same shape compiles that exact shape
    # before any dimension is known to vary (one graph more than the buckets, at most).
    exact_first = int(batches[0].shape == batches[1].shape)
    assert report.compilations <= len(buckets) + exact_first
    assert len(buckets) == 2
    assert report.bucket_hits == 99 - report.compilations
    assert report.eager_calls == 1  # the first call observes shapes
    assert report.bucketing["1"]["padded"] is True

    unbucketed = torchport.compile(causal, target="cpu", compiler="eager", buckets=None)
    _run_stream(causal, unbucketed, batches)
    assert unbucketed.report.compilations == len(lengths) == 9


@pytest.mark.slow
def test_full_range_stream_17_to_512(causal):
    batches = _stream(100, 17, 512)
    compiled = torchport.compile(causal, target="cpu", compiler="eager")
    _run_stream(causal, compiled, batches)
    exact_first = int(batches[0].shape == batches[1].shape)
    buckets = {next_power_of_two(ids.shape[1]) for ids in batches}
    assert compiled.report.compilations <= len(buckets) + exact_first
    assert len(buckets) <= 5  # 32, 64, 128, 256, 512
    unbucketed = torchport.compile(causal, target="cpu", compiler="eager", buckets=None)
    _run_stream(causal, unbucketed, batches)
    assert unbucketed.report.compilations == len({ids.shape[1] for ids in batches}) > 50


def test_given_buckets_are_used_from_the_first_call(causal):
    compiled = torchport.compile(causal, target="cpu", compiler="eager", buckets={1: [24, 48]})
    _run_stream(causal, compiled, _stream(12, 17, 48))
    assert compiled.report.eager_calls == 0
    assert compiled.report.compilations <= 2
    compiled_lengths = {part[0][1] for signature in compiled.report.compiled_shapes for part in signature
                        if isinstance(part, tuple) and part[1] == torch.int64}
    assert compiled_lengths <= {24, 48}


def test_padding_mask_makes_non_causal_attention_safe():
    torch.manual_seed(0)
    model = TinyAttention(causal=False).eval()
    compiled = torchport.compile(model, target="cpu", compiler="eager", buckets={1: [32]})
    for length in (18, 25, 31):
        ids = torch.randint(0, 32, (2, length))
        mask = torch.ones(2, length, dtype=torch.long)
        torch.testing.assert_close(compiled(ids, mask), model(ids, mask), rtol=1e-4, atol=1e-5)
    assert compiled.report.bucketing["1"]["padded"] is True
    assert compiled.report.compilations == 1


@pytest.mark.parametrize("model", [TinyAttention(causal=False).eval(), MeanPool().eval()], ids=["unmasked", "mean"])
def test_padding_that_would_leak_is_refused_with_a_reason(model):
    compiled = torchport.compile(model, target="cpu", compiler="eager")
    lengths = (18, 26)
    for length in (20, *lengths):
        ids = torch.randint(0, 32, (2, length))
        torch.testing.assert_close(compiled(ids), model(ids), rtol=1e-4, atol=1e-5)
    decision = compiled.report.bucketing["1"]
    assert decision["padded"] is False
    assert "mixes positions" in decision["reason"]
    assert compiled.report.compilations == len(lengths)  # one per length: nothing was padded
    assert "not padded" in compiled.report.text()


def test_training_gradients_match_eager(causal):
    reference = TinyAttention().train()
    reference.load_state_dict(causal.state_dict())
    model = TinyAttention().train()
    model.load_state_dict(causal.state_dict())
    compiled = torchport.compile(model, target="cpu", compiler="eager", buckets={1: [32]})
    for length in (19, 27):
        ids = torch.randint(0, 32, (2, length))
        for network, call in ((reference, reference), (model, compiled)):
            network.zero_grad()
            torch.nn.functional.cross_entropy(call(ids).flatten(0, 1), ids.flatten()).backward()
        for (name, expected), got in zip(reference.named_parameters(), model.parameters()):
            torch.testing.assert_close(got.grad, expected.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert compiled.report.padded_calls == 2


def test_checkpoints_keep_the_original_keys(causal):
    compiled = torchport.compile(causal, target="cpu", compiler="eager")
    assert list(compiled.state_dict()) == list(causal.state_dict())
    assert compiled.causal is True  # the model's own attributes and methods stay reachable


def test_bad_buckets_say_what_is_allowed(causal):
    with pytest.raises(UsageError, match=r"buckets=.*\{dimension: \[sizes\]\}"):
        torchport.compile(causal, buckets={"seq": [64]})


def test_predicted_compilations_follow_the_same_buckets():
    shapes = [{(0,): (2, length)} for length in (17, 20, 33, 40, 100, 17)]
    prediction = predict_compilations(shapes)
    assert prediction["without_buckets"] == 5
    assert prediction["with_buckets"] == 3  # 32, 64, 128
