"""Google TPU and other PJRT devices through torch_xla (lazy tensors, one compile per shape)."""

from __future__ import annotations

import os

from torchport.backends import register
from torchport.backends.base import Backend, Probe, package_installed


@register
class XLABackend(Backend):
    name = "xla"
    aliases = ("tpu", "pjrt")
    dist_backend = "xla"
    preferred_precision = "bfloat16"
    supports_grad_scaler = False
    supports_pinned_memory = False
    description = "Google TPU (or XLA on CPU/GPU) through torch_xla and PJRT"

    def probe(self) -> Probe:
        if not package_installed("torch_xla"):
            return Probe(
                False,
                "torch_xla is not installed",
                "Run scripts/setup-xla-env.sh (a separate environment with torch 2.9 + torch_xla), "
                "or pip install torch_xla on a TPU VM.",
            )
        if not os.environ.get("PJRT_DEVICE") and not os.environ.get("TPU_NAME"):
            return Probe(
                True,
                "torch_xla installed; PJRT_DEVICE unset (torch_xla will pick TPU, else CPU)",
            )
        return Probe(True, f"torch_xla installed, PJRT_DEVICE={os.environ.get('PJRT_DEVICE')}")

    def device_module(self):
        import torch_xla  # noqa: F401  (registers the xla device module)
        import torch

        return torch.get_device_module("xla")

    def device(self, index: int | None = None):
        import torch_xla.core.xla_model as xm

        return xm.xla_device() if index is None else xm.xla_device(index)

    def synchronize(self, index: int | None = None) -> None:
        import torch_xla.core.xla_model as xm

        xm.mark_step()
        xm.wait_device_ops()
