"""torch.backends.cudnn and torch.backends.cuda flags, mapped to their device-neutral meaning.

cudnn.deterministic -> torch.use_deterministic_algorithms(True, warn_only=True), unless the
    application turned deterministic algorithms on itself (its setting is kept)
cudnn.benchmark, cudnn.enabled -> kept on CUDA, recorded as no-ops elsewhere
cuda.matmul.allow_tf32 / cudnn.allow_tf32 -> kept on CUDA; elsewhere a no-op (TF32 is an NVIDIA
    format; mapping it to another reduced-precision matmul would change results unasked)
cuda.sdp_kernel -> the attention kernels the target has (attention.py); cuda.*_sdp_enabled() read
    what the application asked for inside such a region
"""

from __future__ import annotations

import types

import torch

from torchport.retarget import attention, standin, state

__all__ = ["FlagNamespace", "build_backends_module"]


class FlagNamespace:
    """An object whose attribute writes go through `on_set`; reads come from the real object."""

    def __init__(self, real, api: str, on_set):
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_api", api)
        object.__setattr__(self, "_on_set", on_set)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __setattr__(self, name, value):
        self._on_set(self._real, f"{self._api}.{name}", name, value)


def _set_cudnn(real, api: str, name: str, value) -> None:
    retarget = state.current()
    if retarget.type == "cuda":
        setattr(real, name, value)
        return
    setattr(real, name, value)  # harmless off CUDA; reads give back what was set, as on a GPU machine
    if name == "deterministic":
        retarget.redirected(api)
        _cudnn_deterministic(bool(value))
        return
    retarget.noop(api, f"cuDNN does not run on {retarget.backend.name}")


#: Whether deterministic algorithms are on because cudnn.deterministic turned them on.
_turned_on_by_cudnn = False


def _cudnn_deterministic(value: bool) -> None:
    """cudnn.deterministic: deterministic kernels, warning where there is none. A setting the
    application made with torch.use_deterministic_algorithms is never changed by it (on CUDA the
    two are independent: turning the cuDNN flag on does not make errors warnings, nor off turn
    the global setting off)."""
    global _turned_on_by_cudnn
    if value and not torch.are_deterministic_algorithms_enabled():
        torch.use_deterministic_algorithms(True, warn_only=True)
        _turned_on_by_cudnn = True
    elif not value and _turned_on_by_cudnn and torch.is_deterministic_algorithms_warn_only_enabled():
        torch.use_deterministic_algorithms(False)
        _turned_on_by_cudnn = False


def _set_cuda_flag(real, api: str, name: str, value) -> None:
    retarget = state.current()
    setattr(real, name, value)
    if retarget.type != "cuda":
        retarget.noop(api, f"TF32 and cuBLAS settings do not apply on {retarget.backend.name}")


def _library_choice(real, api: str, table: str):
    """`torch.backends.cuda.preferred_linalg_library("cusolver")` / `preferred_blas_library("cublaslt")`:
    a choice among CUDA's own libraries, kept on CUDA; elsewhere a reported no-op that answers what
    the choice would read (torch alone refuses it: "not compiled with cuSOLVER")."""
    chosen: list = [None]
    enum = type(real())
    # torch's own name table (ROCm's aliases included), else the enum's members
    names = getattr(torch.backends.cuda, table, None) or {name.lower(): member for name, member in enum.__members__.items()}

    def choose(backend=None):
        retarget = state.current()
        if retarget is None or retarget.type == "cuda":
            return real(backend)
        if backend is None:
            return chosen[0] if chosen[0] is not None else real()
        if isinstance(backend, str):
            value = names.get(backend.lower())
            if value is None:
                return real(backend)  # torch's own error for a name it does not know
        elif isinstance(backend, enum):
            value = backend
        else:
            return real(backend)
        retarget.noop(api, f"cuSOLVER, MAGMA and cuBLAS are CUDA's libraries: {retarget.backend.name} uses its own")
        chosen[0] = value
        return value

    choose.__name__ = real.__name__
    choose.__doc__ = real.__doc__
    return choose


def build_backends_module(real_backends) -> types.ModuleType:
    """A `torch.backends` whose cudnn and cuda members apply the mapping above; every other name,
    the properties of its class included (`torch.backends.fp32_precision`), is the real module's."""
    cuda_flags = types.ModuleType("torch.backends.cuda")
    cuda_flags.__dict__.update(real_backends.cuda.__dict__)
    cuda_flags.matmul = FlagNamespace(real_backends.cuda.matmul, "torch.backends.cuda.matmul", _set_cuda_flag)
    cuda_flags.sdp_kernel = attention.sdp_kernel
    cuda_flags.__dict__.update(attention.FLAG_READERS)
    cuda_flags.__dict__.update(attention.FLAG_SWITCHES)
    for name, table in (("preferred_linalg_library", "_LinalgBackends"), ("preferred_blas_library", "_BlasBackends")):
        if hasattr(real_backends.cuda, name):
            setattr(cuda_flags, name, _library_choice(getattr(real_backends.cuda, name), f"torch.backends.cuda.{name}",
                                                      table))
    return standin.facade_module(real_backends, {
        "cudnn": FlagNamespace(real_backends.cudnn, "torch.backends.cudnn", _set_cudnn), "cuda": cuda_flags})
