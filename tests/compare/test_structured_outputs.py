"""compare sees every output, whatever its structure: a model whose divergence shows only in a
dataclass, NamedTuple, dict, nested or ModelOutput return value fails; the same model agreeing
passes; the report states what was compared; a model whose output holds no tensor fails."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jsonschema
import pytest
import torch
from torch import nn

from torchport.compare import compare
from torchport.compare.reports.json_report import schema
from torchport.compare.reports.markdown import render_markdown


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    hidden: torch.Tensor


@dataclasses.dataclass(frozen=True)
class FrozenOutput:
    logits: torch.Tensor
    hidden: torch.Tensor
    label: str = "frozen"


class TupleOutput(NamedTuple):
    logits: torch.Tensor
    hidden: torch.Tensor


def _model_output(logits, hidden):
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=logits)


WRAPPERS = {
    "dataclass": lambda logits, hidden: Output(logits, hidden),
    "frozen dataclass": lambda logits, hidden: FrozenOutput(logits, hidden),
    "namedtuple": TupleOutput,
    "dict": lambda logits, hidden: {"logits": logits, "extra": {"hidden": hidden}},
    "nested": lambda logits, hidden: [(hidden,), {"output": Output(logits, hidden)}],
    "ModelOutput": _model_output,
}


class OffsetHead(nn.Module):
    """The model's own forward adds and removes an offset held in float64: exact on the reference,
    lost once the no-fp64 target downcasts it. No submodule sees the error: only the output does."""

    def __init__(self, wrap, offset: float) -> None:
        super().__init__()
        self.wrap = wrap
        self.linear = nn.Linear(8, 4)
        self.register_buffer("offset", torch.tensor(offset, dtype=torch.float64))

    def forward(self, x):
        hidden = self.linear(x)
        logits = ((hidden.to(self.offset.dtype) + self.offset) - self.offset).to(hidden.dtype) * 100.0
        return self.wrap(logits, hidden)


def _inputs(batch_size):
    return (torch.randn(batch_size, 8),)


def _parity(model_factory, inputs=_inputs, target="cpu:no-fp64"):
    return compare(model_factory, inputs, reference="cpu", target=target, performance=False, batch_sizes=[3])


@pytest.mark.parametrize("kind", sorted(WRAPPERS))
def test_divergence_seen_only_in_a_structured_output_fails(kind):
    result = _parity(lambda: OffsetHead(WRAPPERS[kind], 1.0e9))
    assert result.status == "fail", result.reasons
    assert result.parity.first_divergence == "(model)"
    root = result.parity.node("(model)")
    assert root.tensors >= 2 and root.elements >= 2 * 3 * 4
    assert any("max abs error" in reason for reason in root.reasons)
    assert result.parity.coverage.model_output_tensors == root.tensors


@pytest.mark.parametrize("kind", sorted(WRAPPERS))
def test_the_same_structured_output_passes_when_the_sides_agree(kind):
    # A float64 buffer of 0 is still downcast (a real change), but the output is exact either way.
    result = _parity(lambda: OffsetHead(WRAPPERS[kind], 0.0))
    assert not result.self_comparison
    assert result.status == "pass", result.reasons
    coverage = result.parity.coverage
    assert coverage.model_output_problem is None
    assert coverage.model_output_tensors == result.parity.node("(model)").tensors >= 2
    assert coverage.modules_compared == coverage.modules_called == 2


class InnerReturnsDataclass(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = OffsetHead(WRAPPERS["dataclass"], 1.0e9)
        self.classifier = nn.Linear(4, 2)

    def forward(self, x):
        return self.classifier(self.head(x).logits)


def test_a_submodule_returning_a_dataclass_is_compared_and_named_first():
    result = _parity(InnerReturnsDataclass)
    assert result.status == "fail"
    assert result.parity.first_divergence == "head"
    head = result.parity.node("head")
    assert head.tensors == 2 and head.inputs_agree is True


def test_structured_inputs_reach_the_model_on_each_side():
    @dataclasses.dataclass
    class Batch:
        features: torch.Tensor
        scale: float

    class TakesBatch(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = OffsetHead(WRAPPERS["dict"], 1.0e9)

        def forward(self, batch: Batch):
            return self.head(batch.features * batch.scale)

    result = _parity(TakesBatch, inputs=lambda batch_size: (Batch(torch.randn(batch_size, 8), 2.0),))
    assert result.status == "fail" and result.parity.first_divergence == "head"


def test_a_model_whose_output_holds_no_tensor_fails_with_a_clear_message():
    class CountsOnly(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 4)

        def forward(self, x):
            return {"positive": int((self.linear(x) > 0).sum()), "label": "counts"}

    result = compare(CountsOnly, _inputs, reference="cpu", target="cpu:bf16", performance=False, batch_sizes=[2])
    assert result.status == "fail" and result.exit_code == 1
    problem = result.parity.coverage.model_output_problem
    assert "holds no tensor" in problem and "['positive']: not a tensor (int)" in problem
    assert any(reason.startswith("parity: nothing of the model's output was compared") for reason in result.reasons)
    # The submodule was compared; the output it fed was not, and the report says so.
    assert result.parity.node("linear").passed
    markdown = render_markdown(result)
    assert "model output NOT compared" in markdown and "not a tensor (int)" in markdown
    assert "1 nodes compared" in markdown  # the linear; the model's own call compared nothing
    jsonschema.validate(result.to_dict(), schema())


def test_the_report_states_coverage_and_what_was_not_compared():
    class WithStep(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 4)

        def forward(self, x):
            return {"logits": self.linear(x), "step": 7}

    result = compare(WithStep, _inputs, reference="cpu", target="cpu:bf16", performance=False, batch_sizes=[2])
    assert result.status == "pass", result.reasons
    document = result.to_dict()
    jsonschema.validate(document, schema())
    coverage = document["parity"]["coverage"]
    assert coverage["modules_called"] == coverage["modules_compared"] == 2
    assert coverage["model_output_tensors"] == 1 and coverage["model_output_elements"] == 8
    assert coverage["elements_compared"] == 16  # the linear's output and the model's, 2 x 4 each
    assert {"what": "(model) output ['step']", "why": "not a tensor (int)"} in coverage["not_compared"]
    markdown = render_markdown(result)
    assert "2 of 2 module calls compared, 2 output tensors (16 elements)" in markdown
    assert "`(model) output ['step']`: not a tensor (int)" in markdown


def test_the_html_report_states_coverage():
    from torchport.compare.reports.html import render_html

    result = _parity(lambda: OffsetHead(WRAPPERS["frozen dataclass"], 1.0e9))
    page = render_html(result)
    assert 'id="coverage"' in page and "model output: 2 tensor(s), 24 elements" in page
    assert "(model) output .label" in page and "not a tensor (str)" in page


def test_a_training_step_may_return_a_model_output_holding_the_loss():
    from transformers.modeling_outputs import CausalLMOutput

    class Regressor(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 1)

        def forward(self, x):
            prediction = self.linear(x)
            return CausalLMOutput(loss=prediction.pow(2).mean(), logits=prediction)

    options = {"reference": "cpu", "target": "cpu:bf16", "batch_factory": lambda step: _inputs(4)[0],
               "train_steps": 2, "performance": False, "parity": False}
    result = compare(Regressor, None, training_step=lambda model, batch: model(batch), **options)
    assert result.training.passed and result.training.reference_loss[0] > 0
    from torchport.errors import UsageError

    with pytest.raises(UsageError, match="no single-element 'loss'.*Return the loss tensor"):
        compare(Regressor, None, training_step=lambda model, batch: {"logits": model(batch).logits}, **options)


def test_none_in_an_output_is_nothing_missing():
    class WithoutWeights(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x):
            return self.attention(x, x, x, need_weights=False)  # (output, None)

    result = compare(WithoutWeights, lambda batch_size: (torch.randn(batch_size, 3, 8),), reference="cpu",
                     target="cpu:bf16", performance=False, batch_sizes=[2])
    assert result.status == "pass", result.reasons
    assert result.parity.coverage.not_compared == []
