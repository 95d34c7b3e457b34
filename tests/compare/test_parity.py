"""Parity layer by layer: agreement between two devices passes, a downcast fp64 buffer or a perturbed
layer fails with that layer named first, a bf16 policy shows bounded error, a device against itself
(or a policy that changes nothing on this model) is a self-comparison."""

import math

import pytest
import torch

import compare_models as models
from compare_devices import EMULATED, requires_emulated
from torchport.compare import compare
from torchport.errors import UsageError


def parity_only(model_factory, reference, target, **options):
    return compare(model_factory, models.stack_inputs, reference=reference, target=target,
                   performance=False, batch_sizes=[4], **options)


@requires_emulated
def test_agreeing_model_passes_against_another_device_with_every_module_compared():
    result = parity_only(models.agreeing_model, "cpu", EMULATED)
    assert not result.self_comparison
    assert result.status == "pass" and result.exit_code == 0, result.reasons
    names = [node.name for node in result.parity.nodes]
    assert {"embed", "first.linear", "first.norm", "second", "head", "(model)"} <= set(names)
    assert result.parity.first_divergence is None
    root = result.parity.node("(model)")
    assert root.metrics["cosine"] == pytest.approx(1.0)
    assert root.metrics["max_abs"] < 1e-5
    assert root.metrics["within_0_1_percent"] == 1.0


def test_same_device_same_precision_is_a_self_comparison_not_a_pass():
    result = parity_only(models.agreeing_model, "cpu", "host")
    assert result.self_comparison
    assert result.status == "self-comparison"
    assert not result.passed and result.exit_code == 1
    assert any("self-comparison" in reason for reason in result.reasons)


@pytest.mark.parametrize("target", ["cpu:no-fp64", "cpu:fp32"])
def test_a_policy_that_changes_nothing_on_this_model_is_a_self_comparison(target):
    """cpu:no-fp64 only downcasts float64 tensors: on an fp32 model it is the CPU run twice."""
    result = parity_only(models.agreeing_model, "cpu", target)
    assert result.target == "cpu:no-fp64"
    assert result.self_comparison and result.status == "self-comparison"
    assert not result.passed and result.exit_code == 1
    assert result.side_effects["target"].downcast_tensors == 0 and not result.side_effects["target"].autocast
    assert any("ran the same computation" in reason for reason in result.reasons)


def test_a_self_comparison_is_reported_however_the_sides_are_spelled():
    result = parity_only(models.agreeing_model, "cpu:fp32", "host:no-fp64")
    assert result.status == "self-comparison" and result.exit_code == 1


def test_fp64_buffer_downcast_fails_and_names_that_layer_first():
    result = parity_only(models.fp64_model, "cpu", "cpu:fp32")
    # The policy really changed something here: the float64 buffer became float32.
    assert not result.self_comparison and result.side_effects["target"].downcast_tensors == 1
    assert result.status == "fail" and result.exit_code == 1
    assert result.parity.first_divergence == "middle"
    middle = result.parity.node("middle")
    assert middle.inputs_agree is True
    assert any("max abs error" in reason for reason in middle.reasons)
    # Modules before the fp64 layer agree; the ones after inherit its error but are not blamed.
    assert result.parity.node("first").passed
    assert not result.parity.node("second").passed
    assert not result.parity.node("second").first_divergence


@requires_emulated
def test_perturbed_layer_fails_and_is_named_first_among_all_failures():
    result = parity_only(models.perturbed_model, "cpu", EMULATED)
    assert result.status == "fail"
    assert result.parity.first_divergence == "middle"
    failing = [node.name for node in result.parity.failed_nodes]
    assert failing[0] == "middle"
    assert "(model)" in failing
    assert result.parity.node("embed").passed


def test_bf16_policy_shows_bounded_error_that_passes_bf16_thresholds():
    result = parity_only(models.agreeing_model, "cpu", "cpu:bf16")
    assert result.side_effects["target"].autocast and not result.self_comparison
    root = result.parity.node("(model)")
    assert root.judged_as == "bfloat16"
    assert 0.0 < root.metrics["max_abs"] < 0.125 * 8
    assert root.metrics["cosine"] > 0.99
    assert root.metrics["within_0_5_percent"] < 1.0  # bf16 really ran
    assert result.status == "pass", result.reasons


def test_bf16_error_fails_fp32_thresholds_when_overridden_strict():
    result = parity_only(models.agreeing_model, "cpu", "cpu:bf16",
                         thresholds={"bfloat16": {"max_abs": 1e-6, "cosine_min": 0.999999999}})
    assert result.status == "fail"
    assert result.parity.first_divergence is not None


def test_fp64_reference_against_fp32_target_judges_by_fp32():
    model = models.agreeing_model().double()
    result = compare(model, lambda batch: (torch.randn(batch, 16, dtype=torch.float64),), reference="cpu",
                     target="cpu:fp32", performance=False, batch_sizes=[2])
    assert result.side_effects["target"].downcast_tensors > 0 and not result.self_comparison
    root = result.parity.node("(model)")
    assert root.judged_as == "float32"
    assert 0.0 < root.metrics["max_abs"] < 1e-5
    assert result.status == "pass", result.reasons


@requires_emulated
def test_per_op_mode_compares_operators_inside_modules():
    result = parity_only(models.perturbed_model, "cpu", EMULATED, per_op=True)
    operators = [node for node in result.parity.nodes if node.kind == "op"]
    assert any(node.name.startswith("first.linear/") for node in operators)
    # The perturbation's operators run on the target only: listed as unmatched, not compared.
    assert any(name.startswith("middle/") for name in result.parity.unmatched)
    assert all(node.passed for node in operators if node.name.startswith("first"))
    assert result.parity.first_divergence == "middle"


@requires_emulated
def test_nan_on_target_only_is_flagged():
    class NanOnTarget(torch.nn.Module):
        def forward(self, x):
            from torchport.compare import current_side

            if current_side() == "target":
                x = x.clone()
                x[0, 0] = math.nan
            return x

    result = parity_only(lambda: models.Stack(middle=NanOnTarget()), "cpu", EMULATED)
    assert result.status == "fail"
    middle = result.parity.node("middle")
    assert middle.metrics["nan_one_sided"] == 1
    assert any("NaN on one side only" in reason for reason in middle.reasons)
    assert result.parity.first_divergence == "middle"


def test_model_factory_must_return_a_module():
    with pytest.raises(UsageError, match="not a torch.nn.Module"):
        compare(lambda: "not a model", models.stack_inputs, reference="cpu", target="cpu:bf16", performance=False)


def test_unknown_precision_and_device_index_are_usage_errors():
    with pytest.raises(UsageError, match="Unknown precision policy 'fp8'"):
        parity_only(models.agreeing_model, "cpu", "cpu:fp8")
    with pytest.raises(UsageError, match="device index"):
        parity_only(models.agreeing_model, "cpu", "cpu:1")


@requires_emulated
def test_in_place_activation_is_still_compared_correctly():
    """ReLU(inplace=True) changes a recorded output later in the forward; the run detects and copies."""
    def model_factory():
        return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(inplace=True), models.Perturbed(),
                                   torch.nn.Linear(16, 4))

    from torchport.compare.devices import parse_device
    from torchport.compare.parity import _run_side

    torch.manual_seed(0)
    records, _, notes = _run_side(model_factory(), (torch.randn(8, 16),), parse_device("cpu"), "reference", False)
    assert notes == []
    linear_output = next(record for record in records if record.key == "0").outputs[0][1]
    assert (linear_output < 0).any()  # recorded before the in-place ReLU, not after
    result = parity_only(model_factory, "cpu", EMULATED)
    assert result.status == "fail"
    linear = result.parity.node("0")
    assert linear.passed and linear.metrics["within_0_1_percent"] == 1.0
    assert result.parity.first_divergence == "2"
    assert result.parity.node("1").passed
