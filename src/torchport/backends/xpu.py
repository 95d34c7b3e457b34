"""Intel GPUs through upstream torch.xpu."""

from __future__ import annotations

from torchport.backends import register
from torchport.backends.base import Backend, Probe


@register
class XPUBackend(Backend):
    name = "xpu"
    aliases = ("intel", "intel-gpu")
    description = "Intel GPUs through torch.xpu"

    def probe(self) -> Probe:
        import torch

        xpu = getattr(torch, "xpu", None)
        if xpu is None or not xpu._is_compiled():
            return Probe(
                False,
                "this torch build has no XPU support",
                "Install an XPU build of torch (pip install torch --index-url "
                "https://download.pytorch.org/whl/xpu).",
            )
        if xpu.device_count() == 0:
            return Probe(False, "no Intel GPU is visible", "Check the Intel GPU driver (xpu-smi).")
        return Probe(True, f"{xpu.device_count()} Intel GPU(s) visible")
