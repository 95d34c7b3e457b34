"""NVIDIA CUDA (and AMD ROCm, which PyTorch exposes under the same device type)."""

from __future__ import annotations

from torchport.backends import register
from torchport.backends.base import Backend, Probe


@register
class CUDABackend(Backend):
    name = "cuda"
    aliases = ("gpu", "nvidia", "rocm", "hip")
    description = "NVIDIA GPUs through CUDA, AMD GPUs through ROCm"

    def probe(self) -> Probe:
        import torch

        if not (torch.backends.cuda.is_built() or torch.version.hip):
            return Probe(
                False,
                f"this torch build ({torch.__version__}) has no CUDA or ROCm support",
                "Install a CUDA build of torch (pip install torch --index-url "
                "https://download.pytorch.org/whl/cu128), or pick another --device.",
            )
        # device_count() asks NVML where it can and does not create a CUDA context.
        if torch.cuda.device_count() == 0:
            return Probe(False, "no GPU is visible", "Check nvidia-smi and CUDA_VISIBLE_DEVICES.")
        return Probe(True, f"{torch.cuda.device_count()} GPU(s) visible")

    def bf16_supported(self) -> bool:
        import torch

        try:
            return bool(torch.cuda.is_bf16_supported())
        except Exception:
            return False

    def capability(self) -> tuple[int, int]:
        import torch

        return tuple(torch.cuda.get_device_capability())  # type: ignore[return-value]

    def free_memory(self, index: int | None = None, total: int | None = None) -> int:
        """CUDA's own count (other processes' memory included)."""
        import torch

        return int(torch.cuda.mem_get_info(index)[0])
