"""Explicit fallback: ops the target's profile lacks run on the host, the placement report says so,
and strict=True fails naming them."""

import pytest
import torch

import torchport
from torchport.compile import CompileFallbackError, backend_report

from compile_models import KeepsPositive


@pytest.fixture
def model():
    torch.manual_seed(0)
    return KeepsPositive()


def test_an_op_the_profile_lacks_runs_on_the_host_and_is_named(model):
    # The neuron profile's op support rehearsed on the CPU device ("eager" keeps the test quick).
    compiled = torchport.compile(model, target="cpu", profile="neuron", compiler="eager", buckets=None)
    x = torch.randn(6, 8)
    torch.testing.assert_close(compiled(x), model(x))
    host = {entry.op: entry.reason for entry in compiled.report.host_ops()}
    assert list(host) == ["aten::nonzero"]
    assert "unsupported on neuron" in host["aten::nonzero"]
    assert "data-dependent output shape" in host["aten::nonzero"]
    placed_on_target = {entry.op for entry in compiled.report.placement.values() if entry.where == "target"}
    assert {"aten::addmm", "aten::relu"} <= placed_on_target
    text = compiled.report.text()
    assert "host   aten::nonzero" in text
    # Target partitions before and after the host op: each compiled once for this shape.
    assert compiled.report.compilations == 2


def test_the_host_fallback_keeps_gradients(model):
    compiled = torchport.compile(model, target="cpu", profile="neuron", compiler="eager", buckets=None)
    x = torch.randn(6, 8)
    compiled(x).sum().backward()
    got = model.linear.weight.grad.clone()
    model.zero_grad()
    model(x).sum().backward()
    torch.testing.assert_close(got, model.linear.weight.grad)


def test_strict_fails_naming_the_op(model):
    compiled = torchport.compile(model, target="cpu", profile="neuron", compiler="eager", buckets=None, strict=True)
    with pytest.raises(CompileFallbackError, match=r"aten::nonzero \(unsupported on neuron"):
        compiled(torch.randn(6, 8))


def test_the_cpu_profile_places_everything_on_the_target(model):
    compiled = torchport.compile(model, target="cpu", compiler="eager", buckets=None, strict=True)
    compiled(torch.randn(6, 8))
    assert compiled.report.host_ops() == []
    assert compiled.report.compilations == 1


def test_torch_compile_backend_name_is_registered(model):
    compiled = torch.compile(model, backend="torchport", dynamic=False,
                             options={"target": "cpu", "profile": "neuron", "strict": True})
    # Dynamo wraps a backend's error; torchport.compile unwraps it (test above).
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True), \
            pytest.raises(torch._dynamo.exc.BackendCompilerFailed,
                          match=r"CompileFallbackError: strict compile for 'cpu' with the 'neuron' profile.*aten::nonzero"):
        compiled(torch.randn(6, 8))


def test_unknown_backend_option_is_a_usage_error(model):
    from torchport.errors import UsageError

    compiled = torch.compile(model, backend="torchport", options={"targett": "cpu"})
    with pytest.raises(UsageError, match=r"Unknown torchport compile option\(s\) \['targett'\]"):
        try:
            compiled(torch.randn(6, 8))
        except torch._dynamo.exc.BackendCompilerFailed as error:
            raise error.inner_exception from None


def test_backend_report_accumulates(model):
    before = backend_report("cpu").compilations
    plain = torch.nn.Linear(4, 4)
    compiled = torch.compile(plain, backend="torchport", options={"target": "cpu"})
    torch.testing.assert_close(compiled(torch.ones(2, 4)), plain(torch.ones(2, 4)))
    assert backend_report("cpu").compilations == before + 1
