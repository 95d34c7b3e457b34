"""The parity metrics on tensors whose answers are known by hand."""

import math

import pytest
import torch

from torchport.compare.metrics import (
    DEFAULT_THRESHOLDS,
    Workspace,
    judge,
    merge_thresholds,
    parse_threshold_overrides,
    tensor_metrics,
    threshold_for,
)
from torchport.errors import UsageError


def test_known_values():
    reference = torch.tensor([1.0, 2.0, 4.0, 0.0])
    target = torch.tensor([1.0, 2.002, 4.0, 0.0])
    metrics = tensor_metrics(reference, target)
    assert metrics.max_abs == pytest.approx(0.002, rel=1e-4)
    assert metrics.max_rel == pytest.approx(0.001, rel=1e-3)
    assert metrics.rmse == pytest.approx(0.002 / 2, rel=1e-3)
    assert metrics.euclidean == pytest.approx(0.002, rel=1e-3)
    expected_cosine = float(torch.nn.functional.cosine_similarity(reference.double(), target.double(), dim=0))
    assert metrics.cosine == pytest.approx(expected_cosine, abs=1e-7)
    assert metrics.within_0_5_percent == 1.0
    assert metrics.within_0_1_percent in (0.75, 1.0)  # 2.002 sits on the 0.1% boundary
    assert metrics.reference_max_abs_value == 4.0
    assert judge(metrics, DEFAULT_THRESHOLDS["float32"]) == []  # 0.002 <= 0.001 * max(1, 4)


def test_scaled_max_abs_limit_and_cosine_rule():
    reference = torch.full((100,), 10.0)
    metrics = tensor_metrics(reference, reference + 0.005)
    assert judge(metrics, DEFAULT_THRESHOLDS["float32"]) == []  # 0.005 <= 0.001 * 10
    metrics = tensor_metrics(reference, reference + 0.02)
    assert any("max abs error" in reason for reason in judge(metrics, DEFAULT_THRESHOLDS["float32"]))
    orthogonal = tensor_metrics(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]))
    assert orthogonal.cosine == pytest.approx(0.0, abs=1e-6)  # float32 norms: about 1e-7 of rounding
    assert any("cosine" in reason for reason in judge(orthogonal, DEFAULT_THRESHOLDS["float32"]))


def test_rounding_noise_about_zero_is_judged_by_max_abs_alone():
    # one score per row summed in another order: 7e-9 against 0, -2e-9 against 3e-9; their cosine
    # (0, -1) is rounding noise, far inside float32's max abs limit of 1e-3
    for reference, target in ((torch.tensor([0.0]), torch.tensor([7.45e-9])),
                              (torch.tensor([3e-9, 0.0]), torch.tensor([-2e-9, 0.0]))):
        metrics = tensor_metrics(reference, target)
        assert metrics.cosine <= 0.0
        assert judge(metrics, DEFAULT_THRESHOLDS["float32"]) == []
    # above the limit the direction counts: the same flip at 0.01 is a mismatch
    flipped = tensor_metrics(torch.tensor([0.01, 0.0]), torch.tensor([-0.01, 0.0]))
    assert any("cosine" in reason for reason in judge(flipped, DEFAULT_THRESHOLDS["float32"]))
    # small values above the noise floor keep the cosine rule: gradients, zeroed or negated embeddings
    small = torch.randn(4096) * 1e-4
    for wrong in (torch.zeros_like(small), -small, small[torch.randperm(small.numel())]):
        assert any("cosine" in reason for reason in judge(tensor_metrics(small, wrong), DEFAULT_THRESHOLDS["float32"]))
    embedding = torch.nn.functional.normalize(torch.randn(2048), dim=0)  # values about 0.02, under bf16's 0.125
    assert judge(tensor_metrics(embedding, torch.zeros(2048)), DEFAULT_THRESHOLDS["bfloat16"])
    # and small values far off in absolute terms still fail the max abs rule
    off = tensor_metrics(torch.tensor([0.0005]), torch.tensor([0.5]))
    assert any("max abs error" in reason for reason in judge(off, DEFAULT_THRESHOLDS["float32"]))


def test_identical_and_empty_tensors():
    value = torch.randn(3, 5)
    metrics = tensor_metrics(value, value.clone())
    assert (metrics.cosine, metrics.max_abs, metrics.within_0_1_percent) == (1.0, 0.0, 1.0)
    empty = tensor_metrics(torch.empty(0), torch.empty(0))
    assert empty.max_abs == 0.0 and not empty.issues


def test_nan_and_inf_on_one_side_only():
    reference = torch.tensor([1.0, 2.0, 3.0, math.inf])
    target = torch.tensor([1.0, math.nan, 3.0, math.inf])
    metrics = tensor_metrics(reference, target)
    assert metrics.nan_one_sided == 1 and metrics.inf_one_sided == 0
    assert metrics.max_abs == 0.0  # the finite elements agree
    assert any("NaN on one side only" in issue for issue in metrics.issues)
    inf_metrics = tensor_metrics(torch.tensor([1.0, 2.0]), torch.tensor([1.0, -math.inf]))
    assert inf_metrics.inf_one_sided == 1


def test_shape_and_dtype_mismatch():
    metrics = tensor_metrics(torch.zeros(2, 3), torch.zeros(3, 2))
    assert metrics.issues == ["shape mismatch: [2, 3] vs [3, 2]"] and metrics.cosine is None
    metrics = tensor_metrics(torch.ones(4, dtype=torch.float64), torch.ones(4, dtype=torch.float32))
    assert metrics.issues == ["dtype mismatch: float64 vs float32"]
    explained = tensor_metrics(torch.ones(4), torch.ones(4, dtype=torch.bfloat16), dtype_allowed="bfloat16")
    assert explained.issues == [] and explained.max_abs == 0.0


def test_integer_and_bool_tensors():
    metrics = tensor_metrics(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]))
    assert metrics.max_abs == 1.0
    same = tensor_metrics(torch.tensor([True, False]), torch.tensor([True, False]))
    assert same.max_abs == 0.0 and same.reference_max_abs_value == 1.0


def test_bf16_target_against_fp32_reference():
    reference = torch.randn(1000)
    metrics = tensor_metrics(reference, reference.to(torch.bfloat16), dtype_allowed="bfloat16", workspace=Workspace())
    assert 0.0 < metrics.max_rel <= 2 ** -8 * 1.01  # round-to-nearest bf16: half an ulp of 8 bits
    assert metrics.within_0_5_percent == 1.0 and metrics.cosine > 0.9999


def test_threshold_selection_and_overrides():
    assert threshold_for(["torch.float32", "torch.bfloat16"])[0] == "bfloat16"
    assert threshold_for(["float64", "float64"])[0] == "float64"
    assert threshold_for(["int64"])[0] == "float32"
    overrides = parse_threshold_overrides(["fp32.max_abs=1e-5", "bfloat16.cosine_min=0.999"])
    table = merge_thresholds(overrides)
    assert table["float32"].max_abs == 1e-5 and table["float32"].cosine_min == 0.99
    assert table["bfloat16"].cosine_min == 0.999
    with pytest.raises(UsageError, match="unknown dtype 'int8'"):
        merge_thresholds({"int8": {"max_abs": 1}})
    with pytest.raises(UsageError, match="Allowed: cosine_min, max_abs"):
        merge_thresholds({"float32": {"ulp": 1}})
    with pytest.raises(UsageError, match="not DTYPE.LIMIT=NUMBER"):
        parse_threshold_overrides(["float32.max_abs=small"])


def test_a_reason_shows_the_error_and_its_limit_apart():
    # an error just over its limit read "max abs error 0.00129 > 0.00129" in a drift alarm
    limits = DEFAULT_THRESHOLDS["float64"]
    reference = torch.tensor([0.25, 0.5], dtype=torch.float64)
    actual = reference + torch.tensor([limits.max_abs * 1.001, 0.0], dtype=torch.float64)
    (reason,) = [reason for reason in judge(tensor_metrics(actual, reference), limits)
                 if reason.startswith("max abs error")]
    shown, limit = reason.removeprefix("max abs error ").split(" > ")
    assert shown != limit and float(shown) > float(limit)
