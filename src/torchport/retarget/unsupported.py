"""CUDA-only packages no runtime can redirect, and the device-neutral path to take instead."""

from __future__ import annotations

__all__ = ["CUDA_ONLY_PACKAGES", "CudaOnlyImportError"]

#: top-level package -> what to use instead.
CUDA_ONLY_PACKAGES: dict[str, str] = {
    "triton": "torch.compile (Inductor generates kernels for the target) or plain PyTorch ops",
    "flash_attn": "torch.nn.functional.scaled_dot_product_attention",
    "xformers": "torch.nn.functional.scaled_dot_product_attention",
    "apex": "torch.amp for mixed precision and torch.optim's fused=True optimizers",
    "bitsandbytes": "torch.ao quantization, or the target vendor's quantization toolkit",
    "cupy": "torch tensors (torch.from_dlpack to interoperate) or numpy on the CPU",
    "pycuda": "torch tensors and torch.compile",
    "nvidia": "the target's own runtime libraries",
    "tensorrt": "torch.compile or the target vendor's inference compiler",
}


class CudaOnlyImportError(ImportError):
    """An ImportError (so `try: import flash_attn / except ImportError` fallbacks still work)."""

    def __init__(self, package: str, target: str, alternative: str):
        super().__init__(
            f"{package} is CUDA-only and is not installed for {target!r}; torchport cannot redirect it. "
            f"Use instead: {alternative}",
            name=package,
        )
