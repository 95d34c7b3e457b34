"""Apple Silicon GPUs through Metal Performance Shaders."""

from __future__ import annotations

from torchport.backends import register
from torchport.backends.base import Backend, Probe


@register
class MPSBackend(Backend):
    name = "mps"
    aliases = ("apple", "metal")
    description = "Apple Silicon GPUs through Metal"

    def probe(self) -> Probe:
        import torch

        if not torch.backends.mps.is_built():
            return Probe(False, "this torch build has no MPS support", "Use a macOS arm64 build of torch.")
        if not torch.backends.mps.is_available():
            return Probe(False, "MPS is built but not available", "Needs macOS 12.3+ on Apple Silicon.")
        return Probe(True, "Metal device available")

    def device_count(self) -> int:
        return 1 if self.probe().usable else 0
