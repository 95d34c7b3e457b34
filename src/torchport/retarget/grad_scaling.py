"""Loss scaling in plain tensor ops, for targets without GradScaler kernels.

`torch.amp.GradScaler` does its two pieces of device work with fused kernels
(`_amp_foreach_non_finite_check_and_unscale_`, `_amp_update_scale_`) that a target may not have
(the profile fact `capabilities.grad_scaler`). Both are small: multiply each gradient by the inverse
scale and note whether any value is inf/NaN; then back the scale off after an overflow, or grow it
after `growth_interval` clean steps. Done here with ops every target has (`isfinite`, `mul_`,
`where`), so fp16 training skips an overflowing step there as it does on CUDA, instead of applying it.
The results equal the kernels' bit for bit (a multiply by the same float32 inverse scale).
"""

from __future__ import annotations

import torch

__all__ = ["unscale_grads", "update_scale"]


def _gradients(optimizer: torch.optim.Optimizer, allow_fp16: bool) -> dict[torch.device, list[torch.Tensor]]:
    """The optimizer's gradients to unscale, by device (as the kernel's caller gathers them)."""
    grads: dict[torch.device, list[torch.Tensor]] = {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.grad is None:
                continue
            if not allow_fp16 and param.grad.dtype == torch.float16:
                raise ValueError("Attempting to unscale FP16 gradients.")
            if param.grad.is_sparse:
                if param.grad.dtype is torch.float16:
                    param.grad = param.grad.coalesce()
                grad = param.grad._values()
            else:
                grad = param.grad
            grads.setdefault(grad.device, []).append(grad)
    return grads


def unscale_grads(optimizer: torch.optim.Optimizer, inv_scale: torch.Tensor, found_inf: torch.Tensor,
                  allow_fp16: bool) -> dict[torch.device, torch.Tensor]:
    """`GradScaler._unscale_grads_`: unscale in place; per device, 1.0 where a gradient held inf/NaN."""
    found: dict[torch.device, torch.Tensor] = {}
    with torch.no_grad():
        for device, grads in _gradients(optimizer, allow_fp16).items():
            here = found_inf if found_inf.device == device else found_inf.to(device, copy=True)
            scale = inv_scale if inv_scale.device == device else inv_scale.to(device)
            bad = torch.stack([torch.isfinite(grad).all().logical_not() for grad in grads]).any()
            here.copy_(torch.where(bad, torch.ones_like(here), here))
            for grad in grads:  # in float32 at least, rounded once, as the kernel computes
                if grad.dtype in (torch.float16, torch.bfloat16):
                    grad.copy_(grad.float().mul_(scale))
                else:
                    grad.mul_(scale)
            found[device] = here
    return found


def update_scale(scale: torch.Tensor, growth_tracker: torch.Tensor, found_inf: torch.Tensor,
                 growth_factor: float, backoff_factor: float, growth_interval: int) -> None:
    """`torch._amp_update_scale_`: back off after an overflow, grow after `growth_interval` clean steps."""
    overflow = found_inf > 0
    successful = growth_tracker + 1
    grow = overflow.logical_not() & (successful == growth_interval)
    grown = scale * growth_factor
    scale.copy_(torch.where(overflow, scale * backoff_factor,
                            torch.where(grow & torch.isfinite(grown), grown, scale)))
    growth_tracker.copy_(torch.where(overflow | grow, torch.zeros_like(successful), successful))
