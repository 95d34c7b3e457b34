"""The precision policy inside the compiled graph, and the real compiler (Inductor on the CPU)."""

import pytest
import torch

import torchport
from torchport.errors import UsageError

from compile_models import KeepsPositive, TinyAttention


def test_bf16_policy_runs_the_graph_in_bf16_like_hand_written_autocast():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    compiled = torchport.compile(model, target="cpu", compiler="eager", buckets=None, precision="bf16")
    x = torch.randn(5, 8)
    got = compiled(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, expected)
    assert compiled.report.precision == "bf16"


def test_fp32_policy_turns_the_programs_autocast_off():
    model = torch.nn.Linear(8, 4)
    compiled = torchport.compile(model, target="cpu", compiler="eager", buckets=None, precision="fp32")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compiled(torch.randn(3, 8)).dtype == torch.float32


def test_unknown_precision_names_the_allowed_ones():
    with pytest.raises(UsageError, match=r"Unknown precision 'half'. Allowed: None, keep, auto, bf16, fp32"):
        torchport.compile(torch.nn.Linear(2, 2), precision="half")


@pytest.mark.slow
def test_inductor_bucketed_outputs_equal_eager():
    torch.manual_seed(0)
    model = TinyAttention().eval()
    compiled = torchport.compile(model, target="cpu", buckets={1: [32]})
    assert compiled.report.compiler == "inductor"
    for length in (19, 27, 32):
        ids = torch.randint(0, 32, (2, length))
        torch.testing.assert_close(compiled(ids), model(ids), rtol=1e-4, atol=1e-5)
    assert compiled.report.compilations == 1
    assert compiled.report.bucket_hits == 2


@pytest.mark.slow
def test_inductor_with_a_host_partition():
    torch.manual_seed(0)
    model = KeepsPositive()
    compiled = torchport.compile(model, target="cpu", profile="neuron", buckets=None)
    x = torch.randn(6, 8)
    torch.testing.assert_close(compiled(x), model(x))
    assert [entry.op for entry in compiled.report.host_ops()] == ["aten::nonzero"]
    assert compiled.report.eager_calls == 0
