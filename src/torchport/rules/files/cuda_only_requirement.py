"""TP602: dependencies on CUDA-only packages (requirements files, pyproject.toml)."""

from __future__ import annotations

import re

from torchport.rules.base import Example, Severity, TextRule

__all__ = ["CudaOnlyRequirement", "CUDA_ONLY_PACKAGES"]

#: Distribution names that only install or only work with NVIDIA CUDA.
CUDA_ONLY_PACKAGES = (
    r"flash[-_]attn", r"xformers", r"apex", r"bitsandbytes", r"cupy(?:-cuda\d+x?)?", r"pycuda", r"triton",
    r"pynvml", r"nvidia-ml-py3?", r"nvidia-[a-z0-9-]+-cu\d+", r"onnxruntime-gpu", r"tensorrt", r"cuda-python",
)


class CudaOnlyRequirement(TextRule):
    """A dependency that installs or runs only with CUDA.

    **What it does**: in `requirements*.txt`, `constraints*.txt` and `pyproject.toml`, finds
    CUDA-only distributions (flash-attn, xformers, apex, bitsandbytes, cupy-cuda*, pycuda, triton,
    pynvml, nvidia-*-cu12, onnxruntime-gpu, tensorrt), `+cuXXX` torch builds and CUDA wheel
    indexes (`download.pytorch.org/whl/cu121`).

    **Why it matters**: the environment cannot even be installed on the target, or installs a
    CUDA build of torch.

    **Example**: `flash-attn==2.6.3` in requirements.txt

    **Use instead**: move CUDA-only packages to an optional extra (`[cuda]`) and use the upstream
    PyTorch equivalent by default; take torch from the target's wheel index.

    **Fix safety**: no automatic fix.
    """

    code = "TP602"
    name = "cuda-only-requirement"
    message = "Dependency on a CUDA-only package"
    fix_title = "Move it to an optional [cuda] extra and depend on the upstream equivalent"
    severity = Severity.ERROR
    file_kinds = ("requirements", "pyproject")
    line_pattern = re.compile(
        r"""(?:^|["'\s])(?:""" + "|".join(CUDA_ONLY_PACKAGES) + r""")(?=\s*(?:[<>=!~;\[,"']|$))"""
        r"""|torch[^\s"',]*\+cu\d+|download\.pytorch\.org/whl/cu\d+""",
        re.IGNORECASE,
    )
    VALID = (
        Example("torch>=2.4\nnumpy\n", filename="requirements.txt"),
        Example('[project]\ndependencies = ["torch>=2.4", "apex-utils"]\n', filename="pyproject.toml"),
    )
    INVALID = (
        Example("torch\nflash-attn==2.6.3\n", filename="requirements.txt"),
        Example("--extra-index-url https://download.pytorch.org/whl/cu121\ntorch\n", filename="requirements-gpu.txt"),
        Example('[project]\ndependencies = ["torch", "bitsandbytes>=0.43"]\n', filename="pyproject.toml"),
    )
