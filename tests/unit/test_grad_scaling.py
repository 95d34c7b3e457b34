"""Loss scaling in plain tensor ops equals torch's GradScaler kernels (run here on the CPU, which has them)."""

import pytest
import torch

from torchport.retarget import grad_scaling


def _model(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3)).to(dtype)
    for index, param in enumerate(model.parameters()):
        param.grad = torch.randn_like(param) * 1000
        if index == 2:
            param.grad[0, 0] = float("inf") if dtype is torch.float32 else float("nan")
    return model


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("overflow", [False, True])
def test_unscale_equals_the_kernel_bit_for_bit(dtype, overflow):
    expected, actual = _model(dtype), _model(dtype)
    for param in [*expected.parameters(), *actual.parameters()]:
        if not overflow:
            param.grad = torch.nan_to_num(param.grad, nan=1.0, posinf=1.0)
    inv_scale = torch.tensor(1 / 3072.0)  # not a power of two: rounding shows
    found_expected, found_actual = torch.zeros(1), torch.zeros(1)
    torch._amp_foreach_non_finite_check_and_unscale_([p.grad for p in expected.parameters()], found_expected, inv_scale)
    optimizer = torch.optim.SGD(actual.parameters(), lr=0.1)
    found = grad_scaling.unscale_grads(optimizer, inv_scale, found_actual, allow_fp16=True)
    assert list(found) == [torch.device("cpu")] and found[torch.device("cpu")] is found_actual
    assert found_actual.item() == found_expected.item() == float(overflow)
    for want, got in zip(expected.parameters(), actual.parameters()):
        assert torch.equal(want.grad.nan_to_num(), got.grad.nan_to_num())
        assert torch.equal(want.grad.isnan(), got.grad.isnan())


def test_unscale_refuses_fp16_gradients_unless_allowed():
    optimizer = torch.optim.SGD(_model(torch.float16).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        grad_scaling.unscale_grads(optimizer, torch.tensor(0.5), torch.zeros(1), allow_fp16=False)


def test_scale_updates_equal_the_kernel_over_a_run_of_steps():
    # overflows, clean streaks reaching the growth interval, and a growth that would overflow float32
    pattern = [0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0]
    for start in (2.0**16, 3.0e38):
        want = (torch.tensor([start]), torch.zeros(1, dtype=torch.int32))
        got = (torch.tensor([start]), torch.zeros(1, dtype=torch.int32))
        for overflow in pattern:
            found = torch.tensor([float(overflow)])
            torch._amp_update_scale_(*want, found, 2.0, 0.5, 3)
            grad_scaling.update_scale(*got, found, 2.0, 0.5, 3)
            assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1]), (start, overflow)
