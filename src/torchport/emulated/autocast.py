"""Autocast on the emulated device: ``torch.autocast("emulated")`` really casts.

PyTorch registers no autocast kernels for PrivateUse1, so without these the context manager is
accepted and nothing changes precision. The policy is PyTorch's CPU autocast policy (the lists in
aten/src/ATen/autocast_mode.cpp for AutocastCPU): matrix products and convolutions run in the
autocast dtype, losses and numerically sensitive ops in float32, everything else in the dtype it
receives. Using the CPU's policy makes an AMP run on the emulated device match the same run on the
CPU bit for bit.
"""

from __future__ import annotations

import torch

from torchport.emulated.state import DEVICE_TYPE as _DEVICE_TYPE

__all__ = ["install", "LOWER_PRECISION_OPS", "FLOAT32_OPS"]

#: Ops autocast runs in the autocast dtype (bfloat16 / float16).
LOWER_PRECISION_OPS = (
    "conv1d", "conv1d.padding", "conv2d", "conv2d.padding", "conv3d", "conv3d.padding",
    "bmm", "mm", "linalg_vecdot", "baddbmm", "addmm", "addbmm", "linear", "_convolution.deprecated",
    "matmul", "conv_tbc", "mkldnn_rnn_layer", "conv_transpose1d", "conv_transpose2d.input",
    "conv_transpose3d.input", "prelu", "scaled_dot_product_attention", "_native_multi_head_attention",
)

#: Ops autocast runs in float32.
FLOAT32_OPS = (
    "avg_pool3d", "binary_cross_entropy", "grid_sampler", "polar", "prod", "prod.dim_int", "quantile",
    "nanquantile", "stft", "cdist", "trace", "view_as_complex", "cholesky", "cholesky_inverse",
    "cholesky_solve", "inverse", "lu_solve", "orgqr", "ormqr", "pinverse", "max_pool3d", "max_unpool2d",
    "max_unpool3d", "adaptive_avg_pool3d", "reflection_pad1d", "reflection_pad2d", "replication_pad1d",
    "replication_pad2d", "replication_pad3d", "mse_loss", "cosine_embedding_loss", "nll_loss",
    "nll_loss2d", "hinge_embedding_loss", "poisson_nll_loss", "smooth_l1_loss", "cross_entropy_loss",
    "l1_loss", "huber_loss", "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "ctc_loss.IntList", "ctc_loss.Tensor", "kl_div", "multilabel_margin_loss",
    "binary_cross_entropy_with_logits", "fft_fft", "fft_ifft", "fft_fft2", "fft_ifft2", "fft_fftn",
    "fft_ifftn", "fft_rfft", "fft_irfft", "fft_rfft2", "fft_irfft2", "fft_rfftn", "fft_irfftn",
    "fft_hfft", "fft_ihfft", "linalg_cond", "linalg_matrix_rank", "linalg_solve", "linalg_cholesky",
    "linalg_svdvals", "linalg_eigvals", "linalg_eigvalsh", "linalg_inv", "linalg_householder_product",
    "linalg_tensorinv", "linalg_tensorsolve", "fake_quantize_per_tensor_affine", "geqrf", "_lu_with_info",
    "qr", "svd", "triangular_solve", "fractional_max_pool2d", "fractional_max_pool3d",
    "adaptive_max_pool3d", "multilabel_margin_loss_forward", "linalg_qr", "linalg_cholesky_ex", "linalg_svd",
    "linalg_eig", "linalg_eigh", "linalg_lstsq", "linalg_inv_ex",
)

_AUTOCAST_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
_libraries: list = []


def _cast(value, dtype: torch.dtype):
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and value.dtype != dtype and value.device.type == _DEVICE_TYPE:
            return value.to(dtype)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(item, dtype) for item in value)
    return value


def _kernel_for(op, lower_precision: bool):
    def kernel(*args, **kwargs):
        dtype = torch.get_autocast_dtype(_DEVICE_TYPE) if lower_precision else torch.float32
        args = tuple(_cast(value, dtype) for value in args)
        if kwargs:
            kwargs = {key: _cast(value, dtype) for key, value in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS):
            return op(*args, **kwargs)

    return kernel


def install() -> int:
    """Register the autocast kernels for the emulated device; returns how many were registered."""
    # Ops outside the two lists pass through autocast unchanged; PyTorch registers no such
    # fallthrough for PrivateUse1, so without it every op fails inside torch.autocast.
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    library = torch.library.Library("aten", "IMPL")
    _libraries.extend([fallthrough, library])
    count = 0
    for names, lower_precision in ((LOWER_PRECISION_OPS, True), (FLOAT32_OPS, False)):
        for qualified in names:
            base_name, _, overload = qualified.partition(".")
            packet = getattr(torch.ops.aten, base_name, None)
            op = getattr(packet, overload or "default", None) if packet is not None else None
            if op is None:
                continue
            library.impl(qualified, _kernel_for(op, lower_precision), "AutocastPrivateUse1")
            count += 1
    return count
