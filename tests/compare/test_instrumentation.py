"""Measuring never changes the result: the building blocks people use (transformer encoder and
decoder, multi-head attention, RNN/LSTM/GRU, convolutions) run through compare under fp32, bf16 and
fp16 policies without crashing, and what the recording hooks, the operator recorder and the memory
measurement see is exactly what an uninstrumented run computes. A memory figure that cannot be
taken is reported as not measured, never as 0."""

from __future__ import annotations

import copy
import re

import pytest
import torch
from torch import nn

from compare_models import SpeechEncoder, speech_audio
from torchport.compare import compare
from torchport.compare.capture import ROOT
from torchport.compare.devices import parse_device, precision_context
from torchport.compare.parity import _run_side, call_model, seeded
from torchport.compare.performance import measure_memory
from torchport.compare.reports.markdown import render_markdown

WIDTH, SEQUENCE = 16, 6
#: The policies, as the target spelling that applies each (fp32: the model as written, no autocast).
POLICIES = {"fp32": "cpu", "bf16": "cpu:bf16", "fp16": "cpu:fp16"}


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(WIDTH, 2, 32, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)

    def forward(self, x, padding):
        # A padding mask sends the eval-mode fast path through nested tensors.
        return self.encoder(x, src_key_padding_mask=padding)


def encoder_inputs(batch_size):
    padding = torch.zeros(batch_size, SEQUENCE, dtype=torch.bool)
    padding[0, -2:] = True
    return torch.randn(batch_size, SEQUENCE, WIDTH), padding


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerDecoderLayer(WIDTH, 2, 32, dropout=0.1, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, 2)

    def forward(self, target, memory):
        mask = nn.Transformer.generate_square_subsequent_mask(target.shape[1])
        return self.decoder(target, memory, tgt_mask=mask)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(WIDTH, 2, batch_first=True)

    def forward(self, x):
        output, weights = self.attention(x, x, x, need_weights=True)
        return output, weights


class Recurrent(nn.Module):
    def __init__(self, cell: type[nn.Module]) -> None:
        super().__init__()
        self.rnn = cell(WIDTH, WIDTH, num_layers=2, batch_first=True)

    def forward(self, x):
        return self.rnn(x)  # (output, hidden) or (output, (hidden, cell))


def sequence(batch_size):
    return (torch.randn(batch_size, SEQUENCE, WIDTH),)


def pair(batch_size):
    return torch.randn(batch_size, SEQUENCE, WIDTH), torch.randn(batch_size, SEQUENCE, WIDTH)


def images(batch_size):
    return (torch.randn(batch_size, 3, 8, 8),)


BLOCKS = {
    "speech encoder": (SpeechEncoder, speech_audio),
    "transformer encoder": (Encoder, encoder_inputs),
    "transformer decoder": (Decoder, pair),
    "multi-head attention": (Attention, sequence),
    "rnn": (lambda: Recurrent(nn.RNN), sequence),
    "lstm": (lambda: Recurrent(nn.LSTM), sequence),
    "gru": (lambda: Recurrent(nn.GRU), sequence),
    "conv1d": (lambda: nn.Sequential(nn.Conv1d(WIDTH, 8, 3), nn.ReLU(), nn.Conv1d(8, 4, 3)),
               lambda batch_size: (torch.randn(batch_size, WIDTH, 12),)),
    "conv2d": (lambda: nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3)), images),
}


def _flat(value):
    from torchport.compare.tree import flatten_tensors

    return flatten_tensors(value)


def _assert_identical(instrumented, plain):
    instrumented, plain = _flat(instrumented), _flat(plain)
    assert [path for path, _ in instrumented] == [path for path, _ in plain]
    for (path, got), (_, expected) in zip(instrumented, plain):
        assert got.dtype == expected.dtype, path
        assert torch.equal(got, expected), f"{path}: instrumentation changed the numbers"


def _plain_error(model, run) -> str | None:
    """The error a block raises uninstrumented under a policy on this machine, if any (oneDNN has no
    bf16 LSTM on some CPUs; the nested-tensor fast path of a masked encoder rejects CPU autocast)."""
    try:
        run(copy.deepcopy(model))
    except RuntimeError as error:
        return str(error)
    return None


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_instrumented_runs_compute_what_a_plain_run_computes(block, policy):
    model_factory, inputs_for = BLOCKS[block]
    spec = parse_device(POLICIES[policy])
    model = seeded(0, model_factory).eval()
    inputs = seeded(0, inputs_for, 2)

    def plain_forward(runnable=model):
        with torch.no_grad(), precision_context(spec):
            return call_model(runnable, inputs)

    error = _plain_error(model, plain_forward)
    if error is not None:
        # compare surfaces the block's own error, not one of its own making, and hides none.
        with pytest.raises(RuntimeError) as raised:
            _run_side(copy.deepcopy(model), inputs, spec, "target", per_op=True)
        assert str(raised.value) == error
        return
    plain = plain_forward()
    # Module hooks and the operator recorder (a dispatch mode) together.
    records, output, notes = _run_side(copy.deepcopy(model), inputs, spec, "target", per_op=True)
    _assert_identical(output, plain)
    root = next(record for record in records if record.key == ROOT)
    _assert_identical(dict(root.outputs), dict(_flat(plain)))
    # Hooks come off only where they would change the kernels (the fused encoder layers); the
    # modules around them are still recorded, and what was left out is said.
    assert not any(note["what"].startswith("module outputs on") for note in notes), notes
    recorded = {record.key for record in records}
    for note in notes:
        if note["what"].startswith("module outputs inside"):
            assert "encoder.layers.0" in note["what"] and "fused path" in note["why"]
            assert not any(key.startswith("encoder.layers.0.") for key in recorded)
    if block == "speech encoder":
        assert {"features", "encoder", "head", ROOT} <= recorded
    # The memory measurement: its figure comes with the same numbers, or it says why it has none.
    memory = measure_memory(plain_forward, spec.backend, model, inputs)
    assert memory.peak_bytes is not None and memory.peak_bytes > 0, memory
    from torchport.compare.performance import _profiled_peak

    profiled, _, _ = _profiled_peak(plain_forward)
    _assert_identical(profiled, plain)


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_every_block_runs_through_compare_with_memory_measured(block, policy):
    model_factory, inputs_for = BLOCKS[block]
    spec = parse_device(POLICIES[policy])
    inputs = seeded(0, inputs_for, 2)

    def plain_forward(runnable):
        with torch.no_grad(), precision_context(spec):
            return call_model(runnable.eval(), inputs)

    error = _plain_error(seeded(0, model_factory), plain_forward)
    if error is not None:
        with pytest.raises(RuntimeError, match=re.escape(error)):
            compare(model_factory, inputs_for, reference="cpu", target=POLICIES[policy], batch_sizes=[2],
                    performance=False)
        return
    result = compare(model_factory, inputs_for, reference="cpu", target=POLICIES[policy], batch_sizes=[2],
                     iterations=1, warmup=1, per_op=True)
    assert result.parity.coverage.model_output_tensors >= 1
    for side in result.performance.values():
        for batch in side.batches:
            assert batch.peak_memory_bytes and batch.peak_memory_bytes > 0, batch.memory_note
            assert batch.memory_source.startswith("profiler memory events")


@pytest.mark.parametrize("block", ["transformer encoder", "transformer decoder", "lstm", "gru"])
def test_training_mode_blocks_run_through_compare_and_match_a_plain_training_step(block):
    model_factory, inputs_for = BLOCKS[block]

    def training_step(model, batch):
        output = call_model(model, batch)
        return sum(tensor.float().pow(2).mean() for _, tensor in _flat(output))

    def plain_step(runnable):
        with torch.autocast("cpu", torch.bfloat16):
            training_step(runnable.train(), inputs_for(2)).backward()

    error = _plain_error(seeded(0, model_factory), plain_step)
    options = {"reference": "cpu", "target": "cpu:bf16", "training_step": training_step, "train_steps": 2,
               "batch_factory": lambda step: inputs_for(2), "performance": False, "parity": False}
    if error is not None:
        with pytest.raises(RuntimeError, match=re.escape(error)):
            compare(model_factory, None, **options)
        return
    result = compare(model_factory, None, **options)
    assert result.training.steps == 2
    assert result.training.passed, result.training.reasons
    # The first step's reference loss is the loss of an uninstrumented step on the same weights and batch
    # (dropout included: each step runs under the same seed).
    model = seeded(0, model_factory).train()
    torch.manual_seed(0)
    batch = inputs_for(2)
    torch.manual_seed(0)
    assert float(training_step(model, batch).detach()) == result.training.reference_loss[0]


def test_speech_encoder_compares_under_bf16_with_memory_reported():
    """The reported case: Conv1d + TransformerEncoder in eval mode, bf16 target, performance phase on."""
    result = compare(SpeechEncoder, speech_audio, reference="cpu", target="cpu:bf16", batch_sizes=[1, 2],
                     iterations=2, warmup=1)
    assert result.status == "pass", result.reasons
    # The fused encoder layers on the bf16 side run unhooked: their insides are listed, not hidden.
    coverage = result.parity.coverage
    assert coverage.model_output_tensors == 1
    assert coverage.modules_compared < coverage.modules_called
    assert any(item["what"].startswith("module outputs inside encoder.layers.0") for item in coverage.not_compared)
    for side_name in ("reference", "target"):
        for batch in result.performance[side_name].batches:
            assert batch.peak_memory_bytes > 0 and batch.memory_note is None
    target = result.performance["target"]
    assert target.at(2).peak_memory_bytes > target.at(1).peak_memory_bytes
    assert "not measured" not in render_markdown(result)


def test_memory_that_cannot_be_measured_is_reported_not_measured_never_zero(monkeypatch):
    class Unavailable(torch.autograd.profiler.profile):
        def __enter__(self):
            raise RuntimeError("Profiler is already enabled on this thread")

    # A profiler that cannot start (the user's own profiler holds it, or this build lacks one).
    monkeypatch.setattr(torch.autograd.profiler, "profile", Unavailable)
    result = compare(Attention, sequence, reference="cpu", target="cpu:bf16", batch_sizes=[2], iterations=1,
                     warmup=1, max_memory_ratio=2.0, parity=False)
    batch = result.performance["target"].at(2)
    assert batch.peak_memory_bytes is None and batch.memory_source == "not measured"
    assert "profiler" in batch.memory_note
    assert batch.samples_per_second > 0  # the timing ran all the same
    # A memory gate over a figure that was not measured does not pass.
    assert result.status == "fail"
    assert any("peak memory not measured" in reason for reason in result.reasons)
    markdown = render_markdown(result)
    assert "not measured" in markdown and "0 B" not in markdown


def test_a_model_that_does_not_reproduce_itself_is_still_compared_module_by_module():
    import itertools

    calls = itertools.count()

    class Drifting(nn.Module):
        """Adds a tiny offset that changes at every call, whatever the seed (like a nondeterministic kernel)."""

        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(WIDTH, 4)

        def forward(self, x):
            return self.linear(x) + next(calls) * 1e-3

    result = compare(Drifting, sequence, reference="cpu", target="cpu:bf16", performance=False, batch_sizes=[2],
                     per_op=True)
    assert result.status == "pass", result.reasons
    coverage = result.parity.coverage
    assert coverage.modules_compared == coverage.modules_called == 2 and coverage.operators_compared > 0
    lost = [item["what"] for item in coverage.not_compared]
    assert lost == ["bit-for-bit reproducibility on reference", "bit-for-bit reproducibility on target"]
