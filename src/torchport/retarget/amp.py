"""Autocast and GradScaler written for CUDA, run on the target under a precision policy.

Policies (`--precision`):
  keep  the dtype the code asked for (fp16 stays fp16), GradScaler on (in plain tensor ops where the
        target has no GradScaler kernels: retarget/grad_scaling.py);
  auto  fp16 becomes the target's preferred reduced precision (bf16 on AMX/AVX512-BF16 CPUs and on
        Neuron); where the target has no fast reduced precision, autocast is off; GradScaler is off
        wherever fp16 was replaced, since bf16 and fp32 do not underflow like fp16; a region around
        a model the application holds in fp16 itself stays fp16 (_FollowModel);
  bf16  every autocast region runs in bf16, GradScaler off;
  fp32  autocast off, GradScaler off.
Code that never asked for autocast is never cast. Every decision is recorded in the report.
"""

from __future__ import annotations

import collections
import functools
import threading
import warnings
from typing import Any

import torch
from torch.amp.grad_scaler import _refresh_per_optimizer_state

from torchport.retarget import autocast_lists, grad_scaling, state
from torchport.retarget.standin import StandIn, copy_keeping_class, reduce_as_genuine
from torchport.retarget.traced import constant_in_compiled_code

__all__ = ["autocast", "cuda_amp_autocast", "cuda_amp_grad_scaler", "GradScaler", "custom_fwd", "custom_bwd",
           "cuda_amp_custom_fwd", "cuda_amp_custom_bwd", "effective_dtype", "target_grad_scaler",
           "scaling_in_plain_ops", "set_autocast_enabled", "set_autocast_dtype", "set_autocast_gpu_dtype"]

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
_real_autocast = torch.autocast
_real_grad_scaler = torch.amp.GradScaler
_real_cuda_autocast = torch.cuda.amp.autocast
_real_cuda_grad_scaler = torch.cuda.amp.GradScaler


def _deprecated(genuine) -> str:
    """torch's own deprecation message of a torch.cuda.amp name (typing_extensions.deprecated keeps it)."""
    return getattr(genuine, "__deprecated__", None) or f"`{genuine.__module__}.{genuine.__qualname__}` is deprecated."


def _warn_deprecated(genuine, stacklevel: int = 3) -> None:
    """The FutureWarning torch raises for a deprecated CUDA form, at the application's line: the
    stand-ins call the device-neutral forms, which do not warn."""
    warnings.warn(_deprecated(genuine), FutureWarning, stacklevel=stacklevel)


def effective_dtype(requested: torch.dtype | None) -> torch.dtype | None:
    """The dtype autocast runs in for a CUDA autocast that asked for `requested` (None: off)."""
    retarget = state.current()
    requested = requested or torch.float16  # CUDA's autocast default
    policy = retarget.precision
    if policy == "keep":
        return requested
    if policy == "fp32":
        return None
    if policy == "bf16":
        return torch.bfloat16
    # auto
    if requested is torch.float16:
        preferred = _DTYPES[retarget.backend.preferred_precision]
        return None if preferred is torch.float32 else preferred
    return requested


def _describe(dtype: torch.dtype | None) -> str:
    return "autocast off (fp32)" if dtype is None else f"autocast {str(dtype).replace('torch.', '')}"


def _target_autocast(device_type: str, dtype, enabled: bool):
    """The (device_type, dtype, enabled, follows_model) a CUDA autocast runs with on the target;
    `follows_model`: the region is one whose float16 the auto policy replaced (see _FollowModel)."""
    retarget = state.current()
    if device_type != "cuda":
        return device_type, dtype, enabled, False
    if not enabled:
        return retarget.type, None, False, False
    dtype = dtype or _cuda_dtype.dtype  # torch.set_autocast_dtype("cuda", ...) before: CUDA's default then
    if not retarget.visible():  # CUDA_VISIBLE_DEVICES hid every device: torch's own warning and answer
        warnings.warn("CUDA is not available or torch_xla is imported. Disabling autocast.", stacklevel=3)
        return retarget.type, None, False, False
    autocast_lists.arm()  # CUDA's op lists in the target's autocast (traced regions too)
    effective = effective_dtype(dtype)
    requested = str(dtype or torch.float16).replace("torch.", "")
    if effective is torch.float32 and retarget.type != "cuda":
        # `autocast("cuda", dtype=torch.float32)` (nanoGPT's --dtype=float32): CUDA's autocast takes it,
        # the others' have no float32 mode (torch warns and turns them off): off, said as it is
        retarget.decide(f"cuda autocast {requested}", f"autocast off on {retarget.backend.name}, whose autocast has "
                                                      "no float32 mode: float32 tensors compute as under CUDA's float32 "
                                                      "autocast, float16 and bfloat16 ones are not cast up to float32 as "
                                                      "there")
        retarget.redirected("autocast('cuda')")
        return retarget.type, None, False, False
    retarget.decide(f"cuda autocast {requested}", f"{_describe(effective)} on {retarget.backend.name}")
    retarget.redirected("autocast('cuda')")
    if effective is None:
        return retarget.type, None, False, False
    if effective is torch.bfloat16 and (dtype or torch.float16) is torch.float16:
        retarget.fp16_ran_as_bf16 = True
    follows = (retarget.precision == "auto" and (dtype or torch.float16) is torch.float16
               and effective is not torch.float16
               and retarget.backend.profile().dtype_rule("float16").status == "native")
    return retarget.type, effective, enabled, follows


class _FollowModel:
    """fp16 autocast regions that the auto policy runs in the target's preferred precision, around a
    model the application holds in float16 itself (`.half()`, `torch_dtype=torch.float16`): such a
    region stays float16, as written.

    The policy replaces CUDA's float16 to compute float32 data in the target's reduced precision; a
    model already in float16 has no float32 data to lower, and casting its float16 weights to bfloat16
    would mix the two in the region's float32 layers (normalisations), which the CPU refuses. Each
    module with floating-point parameters of its own that runs in such a region (in the thread that
    entered it, while the region's autocast is on) is asked: the first holding float16 ones sets the
    region's dtype to float16, as a nested autocast would set it (restored with the region on exit),
    and from then on the GradScalers the policy turned off scale again (`GradScaler.scale`): float16
    gradients underflow without them. What runs before that module is computed in the lowered dtype.

    The question is asked by one forward pre-hook for every module, registered at the first such
    region and kept (so that code torch.compile traced with it stays valid: the hook does nothing in
    traced code), doing nothing outside these regions; the regions each thread is in are its own.
    torch warns about global hooks whenever a `torch.compile(module)` is called, which a GPU machine
    does not do for this program: that warning is filtered (`prepare`, at activation).
    """

    def __init__(self, device_type: str, lowered: torch.dtype):
        self.device_type = device_type
        self.lowered = lowered
        self.decided = False

    @staticmethod
    def ask(module, args):
        """The forward pre-hook."""
        if torch.compiler.is_compiling():
            return None
        regions = _OPEN.regions
        if not regions:
            return None
        region = regions[-1]
        if region.decided:
            return None
        for parameter in module._parameters.values():
            if parameter is not None and parameter.is_floating_point():
                break
        else:
            return None
        if (parameter.dtype is not torch.float16 or not torch.is_autocast_enabled(region.device_type)
                or torch.get_autocast_dtype(region.device_type) is not region.lowered):
            return None
        region.decided = True
        torch.set_autocast_dtype(region.device_type, torch.float16)
        _FP16_KEPT.append(type(module).__name__)
        retarget = state.current()
        retarget.decide("cuda autocast float16 around a float16 model",
                        f"autocast float16 on {retarget.backend.name}: the application holds a model in float16 "
                        f"itself (its {type(module).__name__} has float16 parameters), so the region stays as "
                        "written from there (torch.compile'd code cannot ask: a compiled call of such a model "
                        f"before this, if any, ran in {str(region.lowered).removeprefix('torch.')})")
        return None


class _OpenRegions(threading.local):
    def __init__(self):
        self.regions: list[_FollowModel] = []


_OPEN = _OpenRegions()
_HOOK_LOCK = threading.Lock()
_HOOK: list = []
_COMPILED_MODULE_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks on modules"
#: modules whose float16 parameters kept an fp16 region fp16 (compiled regions stay fp16 from then on)
_FP16_KEPT: list[str] = []


def _enter_following(autocast_region) -> None:
    """On entering a region whose float16 the policy replaced: watch for a float16 model."""
    if autocast_region.__dict__.get("_torchport_follows"):
        if not _HOOK:
            with _HOOK_LOCK:
                if not _HOOK:
                    _HOOK.append(torch.nn.modules.module.register_module_forward_pre_hook(_FollowModel.ask))
        _OPEN.regions.append(_FollowModel(autocast_region.device, autocast_region.fast_dtype))


def prepare(retarget) -> None:
    """At activation, where the policy may run fp16 regions in another precision (`_FollowModel`):
    torch's warning about global hooks is filtered now, before the application warns anything (a
    filter added later makes Python forget which warnings it has shown once per line, so the
    application's would show again)."""
    lowered = effective_dtype(torch.float16)
    if retarget.precision == "auto" and lowered not in (None, torch.float16):
        warnings.filterwarnings("ignore", message=_COMPILED_MODULE_WARNING, category=UserWarning)


def _exit_following(autocast_region) -> None:
    if autocast_region.__dict__.get("_torchport_follows") and _OPEN.regions:
        _OPEN.regions.pop()


def _entering(region):
    """`__enter__` of the autocast stand-ins: the genuine one, then the watch for a float16 model; a
    CUDA region runs with CUDA's op lists (`autocast_lists`)."""
    entered = _real_autocast.__enter__(region)
    _enter_following(region)
    return entered


def _exiting(region, *exc_info):
    """`__exit__` of the autocast stand-ins."""
    _exit_following(region)
    return _real_autocast.__exit__(region, *exc_info)


@constant_in_compiled_code
def _compiled_region(device_type: str, dtype, enabled: bool):
    """The (device_type, dtype, enabled) of a CUDA autocast in code torch.compile traces: computed (and
    recorded) once, at trace time; the compiled code holds the genuine autocast with them. A region
    that would follow a float16 model stays float16 once the program has run one (`_FollowModel`
    cannot ask the modules of traced code)."""
    device_type, dtype, enabled, follows = _target_autocast(device_type, dtype, enabled)
    if follows and _FP16_KEPT:
        dtype = torch.float16
    return device_type, dtype, enabled


class autocast(_real_autocast, metaclass=StandIn, genuine=_real_autocast):  # noqa: N801 - mirrors torch
    """`torch.autocast` / `torch.amp.autocast` as seen by the application: 'cuda' is the target.

    A subclass of the genuine class: context manager, decorator, isinstance and subclassing as in
    PyTorch. In a function torch.compile traces, the stand-in itself gives the genuine autocast for
    the target, which the compiler puts in the graph as it does on a GPU machine (`_compiled_region`).
    """

    def __new__(cls, device_type: str = "cuda", dtype=None, enabled: bool = True, cache_enabled=None):
        if cls is autocast and torch.compiler.is_compiling():
            device_type, dtype, enabled = _compiled_region(device_type, dtype, enabled)
            return _real_autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
        return super().__new__(cls)

    def __init__(self, device_type: str = "cuda", dtype=None, enabled: bool = True, cache_enabled=None):
        device_type, dtype, enabled, follows = _target_autocast(device_type, dtype, enabled)
        super().__init__(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
        self._torchport_follows = follows

    __enter__ = _entering
    __exit__ = _exiting

    __reduce_ex__ = reduce_as_genuine


with warnings.catch_warnings():  # torch.cuda.amp's classes warn when subclassed; the user's code warns as on CUDA
    warnings.simplefilter("ignore", FutureWarning)

    class cuda_amp_autocast(_real_cuda_autocast, metaclass=StandIn, genuine=_real_cuda_autocast):  # noqa: N801
        """`torch.cuda.amp.autocast(...)` (deprecated upstream; same behaviour as autocast('cuda')); the
        genuine autocast in code torch.compile traces, as `autocast`."""

        def __new__(cls, enabled: bool = True, dtype=torch.float16, cache_enabled: bool = True):
            if cls is cuda_amp_autocast and torch.compiler.is_compiling():
                device_type, dtype, enabled = _compiled_region("cuda", dtype, enabled)
                return _real_autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
            return super().__new__(cls)

        def __init__(self, enabled: bool = True, dtype=torch.float16, cache_enabled: bool = True):
            if type(self) is cuda_amp_autocast:  # torch warns for the class itself, not for subclasses
                _warn_deprecated(_real_cuda_autocast)
            device_type, dtype, enabled, follows = _target_autocast("cuda", dtype, enabled)
            _real_autocast.__init__(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
            self._torchport_follows = follows

        __enter__ = _entering
        __exit__ = _exiting

        __reduce_ex__ = reduce_as_genuine


def scaling_in_plain_ops(target: str) -> str:
    """What a GradScaler kept on a target without GradScaler kernels does, said wherever one is."""
    return (f"kept on {target}, which has no GradScaler kernels: gradients are unscaled and checked for "
            "inf/NaN, and the scale updated, in plain tensor ops (the same values), so an overflowing step "
            "is skipped as on CUDA")


def _scaler_settings(device: str, enabled: bool) -> tuple[str, bool, bool]:
    """The device, `enabled`, and whether the scaler works in plain tensor ops (the target has no
    GradScaler kernels), of a GradScaler made for `device`."""
    retarget = state.current()
    if device != "cuda":
        return device, enabled, False
    retarget.redirected("GradScaler('cuda')")
    device = retarget.type
    if enabled and not retarget.visible():  # CUDA_VISIBLE_DEVICES hid every device: as torch does
        warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.", stacklevel=3)
        enabled = False
    if enabled:
        # The application's scaler stays on whatever the policy made of fp16: scaling by a power of
        # two changes no bf16 or fp32 value (their exponent range is fp32's), so the program keeps
        # the scaler a GPU runs, its scale(), get_scale(), skipped steps and state_dict() alike.
        lowered = effective_dtype(torch.float16)
        runs = "off (fp32)" if lowered is None else f"as {str(lowered).removeprefix('torch.')}"  # None: autocast off
        why = "" if lowered is torch.float16 else (
            f" (fp16 autocast runs {runs}: scaling by a power of two changes none of its values, and the scaler "
            "still skips a step with inf/NaN gradients, as on CUDA)")
        if not retarget.backend.supports_grad_scaler:
            retarget.decide("GradScaler", scaling_in_plain_ops(retarget.backend.name) + why)
            return device, True, True
        retarget.decide("GradScaler", f"kept on {retarget.backend.name}{why}")
    return device, enabled, False


class GradScaler(_real_grad_scaler, metaclass=StandIn, genuine=_real_grad_scaler):
    """`torch.amp.GradScaler` as seen by the application: the target's, enabled as the application asked
    (in plain tensor ops where the target has no GradScaler kernels)."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        device, enabled, self._torchport_neutral = _scaler_settings(device, enabled)
        super().__init__(device, init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)

    def _unscale_grads_(self, optimizer, inv_scale, found_inf, allow_fp16):
        if not getattr(self, "_torchport_neutral", False):
            return super()._unscale_grads_(optimizer, inv_scale, found_inf, allow_fp16)
        return grad_scaling.unscale_grads(optimizer, inv_scale, found_inf, allow_fp16)

    def update(self, new_scale=None) -> None:
        if not (getattr(self, "_torchport_neutral", False) and self._enabled and new_scale is None):
            return super().update(new_scale)
        scale, growth_tracker = self._check_scale_growth_tracker("update")
        found_infs = [found_inf.to(device=scale.device, non_blocking=True)
                      for optimizer_state in self._per_optimizer_states.values()
                      for found_inf in optimizer_state["found_inf_per_device"].values()]
        if not found_infs:
            raise AssertionError("No inf checks were recorded prior to update.")
        grad_scaling.update_scale(scale, growth_tracker, sum(found_infs[1:], found_infs[0]),
                                  self._growth_factor, self._backoff_factor, self._growth_interval)
        self._per_optimizer_states = collections.defaultdict(_refresh_per_optimizer_state)

    __reduce_ex__ = reduce_as_genuine
    # a copy in the process stays what it was (one scaling in plain tensor ops where the target has
    # no GradScaler kernels)
    __copy__ = copy_keeping_class
    __deepcopy__ = copy_keeping_class


def target_grad_scaler(**settings) -> GradScaler:
    """An enabled GradScaler on the target (with GradScaler's `settings`: init_scale, ...), for a
    library torchport hands one (Lightning's 16-mixed, Accelerate's where the target has no GradScaler
    kernels): in plain tensor ops where the target has no GradScaler kernels."""
    retarget = state.current()
    scaler = GradScaler(retarget.type, **settings)
    scaler._torchport_neutral = not retarget.backend.supports_grad_scaler
    return scaler


with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)

    class cuda_amp_grad_scaler(_real_cuda_grad_scaler, GradScaler, metaclass=StandIn,  # noqa: N801
                               genuine=_real_cuda_grad_scaler):
        """`torch.cuda.amp.GradScaler(...)`, whose positional arguments start at init_scale."""

        def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                     growth_interval: int = 2000, enabled: bool = True):
            _warn_deprecated(_real_cuda_grad_scaler.__init__)  # torch's __init__ warns, subclasses too
            GradScaler.__init__(self, "cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)

        __reduce_ex__ = reduce_as_genuine


def custom_fwd(function=None, *, cast_inputs=None, device_type: str = "cuda"):
    """`torch.cuda.amp.custom_fwd` / `torch.amp.custom_fwd(device_type='cuda')` on the target."""
    retarget = state.current()
    device_type = retarget.type if device_type == "cuda" else device_type
    if function is None:
        return functools.partial(torch.amp.custom_fwd, device_type=device_type, cast_inputs=cast_inputs)
    return torch.amp.custom_fwd(function, device_type=device_type, cast_inputs=cast_inputs)


def custom_bwd(function=None, *, device_type: str = "cuda"):
    retarget = state.current()
    device_type = retarget.type if device_type == "cuda" else device_type
    if function is None:
        return functools.partial(torch.amp.custom_bwd, device_type=device_type)
    return torch.amp.custom_bwd(function, device_type=device_type)


def _autocast_type(device_type) -> str:
    """The device type whose autocast state answers a question asked about `device_type` (None: CUDA,
    as torch's argument-less forms mean)."""
    if device_type is None or device_type == "cuda":
        return state.current().type
    return device_type


def is_autocast_enabled(device_type=None) -> bool:
    """`torch.is_autocast_enabled()` / `("cuda")` inside a CUDA autocast: the target's autocast state."""
    return torch.is_autocast_enabled(_autocast_type(device_type))


def get_autocast_dtype(device_type: str):
    """`torch.get_autocast_dtype("cuda")`: the dtype the target's autocast runs with; outside a region,
    the dtype a CUDA autocast without one would run with here (CUDA's float16 under the precision
    policy), not the target's own default (the CPU's is bfloat16)."""
    kind = _autocast_type(device_type)
    if kind != device_type and not torch.is_autocast_enabled(kind):
        return effective_dtype(_cuda_dtype.dtype) or _cuda_dtype.dtype or torch.float16
    return torch.get_autocast_dtype(kind)


class _CudaDtype(threading.local):
    """The dtype the application set for CUDA's autocast on this thread, as torch keeps it per thread
    (`torch.set_autocast_dtype("cuda", ...)`, `set_autocast_gpu_dtype`); None: CUDA's own float16."""

    def __init__(self):
        self.dtype = None


_cuda_dtype = _CudaDtype()


def set_autocast_dtype(device_type: str, dtype) -> None:
    """`torch.set_autocast_dtype("cuda", torch.bfloat16)`: CUDA's default autocast dtype (a region
    without one, `set_autocast_enabled`) as the application asked, run under the precision policy."""
    if device_type != "cuda":
        return torch.set_autocast_dtype(device_type, dtype)
    _cuda_dtype.dtype = dtype
    retarget = state.current()
    effective = effective_dtype(dtype)
    # the target's own default is left alone (the CPU target's autocast("cpu") keeps bfloat16) unless
    # its autocast is on, CUDA's dtype then being the one it runs in
    if torch.is_autocast_enabled(retarget.type) and effective is not None and effective is not torch.float32:
        torch.set_autocast_dtype(retarget.type, effective)
    return None


def set_autocast_gpu_dtype(dtype) -> None:
    """`torch.set_autocast_gpu_dtype(dtype)` (deprecated CUDA form), with torch's warning."""
    warnings.warn("torch.set_autocast_gpu_dtype(dtype) is deprecated. Please use torch.set_autocast_dtype('cuda', "
                  "dtype) instead.", DeprecationWarning, stacklevel=2)
    set_autocast_dtype("cuda", dtype)


def set_autocast_enabled(device_type=None, enabled=None) -> None:
    """`torch.set_autocast_enabled(True)` (CUDA's, the one-argument form) or `("cuda", True)`: the
    target's autocast switched on outside any region, in the dtype CUDA's would run with here
    (`set_autocast_dtype`, under the precision policy), reported as a region is."""
    if enabled is None and isinstance(device_type, bool):
        device_type, enabled = "cuda", device_type
    if device_type != "cuda":
        return torch.set_autocast_enabled(device_type, enabled)
    if not enabled:
        return torch.set_autocast_enabled(state.current().type, False)
    target, dtype, enabled, _ = _target_autocast("cuda", None, True)
    if enabled and dtype is not None:
        torch.set_autocast_dtype(target, dtype)
    return torch.set_autocast_enabled(target, bool(enabled))


def cuda_amp_custom_fwd(fwd=None, *, cast_inputs=None):
    """`torch.cuda.amp.custom_fwd` (deprecated upstream): torch.amp.custom_fwd for the target."""
    _warn_deprecated(torch.cuda.amp.custom_fwd)
    return custom_fwd(fwd, cast_inputs=cast_inputs)


def cuda_amp_custom_bwd(bwd=None):
    """`torch.cuda.amp.custom_bwd` (deprecated upstream): torch.amp.custom_bwd for the target."""
    _warn_deprecated(torch.cuda.amp.custom_bwd)
    return custom_bwd(bwd)


def get_autocast_gpu_dtype():
    """`torch.get_autocast_gpu_dtype()` (deprecated CUDA form): the target's autocast dtype, with
    torch's DeprecationWarning at the application's line."""
    warnings.warn("torch.get_autocast_gpu_dtype() is deprecated. Please use torch.get_autocast_dtype('cuda') "
                  "instead.", DeprecationWarning, stacklevel=2)
    return get_autocast_dtype("cuda")
