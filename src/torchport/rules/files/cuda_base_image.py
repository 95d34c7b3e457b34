"""TP605: Docker images built on CUDA base images."""

from __future__ import annotations

import re

from torchport.rules.base import Example, Severity, TextRule

__all__ = ["CudaBaseImage"]


class CudaBaseImage(TextRule):
    """A container built `FROM nvidia/cuda` (or a CUDA PyTorch image).

    **What it does**: finds `FROM` lines naming `nvidia/cuda`, `nvcr.io/nvidia/...` or a
    `pytorch/pytorch:*cuda*` image.

    **Why it matters**: the image carries the CUDA runtime and a CUDA build of torch; it is the
    wrong base for any other target.

    **Example**: `FROM nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04`

    **Use instead**: the target's base image (AWS Neuron DLC, Intel XPU, Ascend CANN) or a slim
    Python image with the target's torch wheel.

    **Fix safety**: no automatic fix.
    """

    code = "TP605"
    name = "cuda-base-image"
    message = "Container image built on a CUDA base image"
    fix_title = "Build from the target's base image"
    severity = Severity.ERROR
    file_kinds = ("dockerfile",)
    line_pattern = re.compile(r"^\s*FROM\s+(?:\S*nvidia/cuda\S*|nvcr\.io/nvidia/\S+|pytorch/pytorch:\S*cuda\S*)", re.I)
    VALID = (Example("FROM python:3.11-slim\n", filename="Dockerfile"),)
    INVALID = (Example("FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04\nRUN pip install torch\n", filename="Dockerfile"),)
