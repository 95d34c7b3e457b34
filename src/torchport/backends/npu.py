"""Huawei Ascend NPUs through torch_npu."""

from __future__ import annotations

from torchport.backends import register
from torchport.backends.base import Backend, Probe, package_installed


@register
class NPUBackend(Backend):
    name = "npu"
    aliases = ("ascend", "huawei")
    description = "Huawei Ascend NPUs through torch_npu"

    def probe(self) -> Probe:
        if not package_installed("torch_npu"):
            return Probe(
                False,
                "torch_npu is not installed",
                "Install torch_npu matching your torch version and the CANN toolkit.",
            )
        return Probe(True, "torch_npu installed")

    def device_module(self):
        import torch_npu  # noqa: F401  (registers torch.npu)
        import torch

        return torch.get_device_module("npu")
