"""Helpers that rewritten application code calls (bound to the name `__tp__` in its globals).

Each takes a site id (assigned by the rewriter, so no frame inspection on hot paths) and maps only
values that mean CUDA: a 'cuda' string, a CUDA torch.device, or an integer ordinal. Anything else
passes through untouched, so code that is already device-neutral is unaffected.

Values map where they leave the application: `call` maps a device keyword only when the callee
belongs to torch or to an installed distribution that depends on torch (`destination.py`), so
`train(device=local_rank)` in the application keeps its integer and a sound library's
`play(x, device=2)` gets 2, while `torch.ones(2, device=0)` and `pipeline(device=0)` get the target.
"""

from __future__ import annotations

import functools
import types
from functools import partial as _partial

import torch

from torchport.retarget import cuda_api, destination, frameworks, profiler
from torchport.retarget.compiler import module_compile
from torchport.retarget.destination import leaves_application
from torchport.retarget.traced import constant_in_compiled_code

from torchport.retarget.report import Site
from torchport.retarget.state import Retarget

__all__ = [
    "bind",
    "bind_facades",
    "register_site",
    "call",
    "framework_call",
    "subprocess_call",
    "facade",
    "from_import",
    "cuda_only_import_failed",
    "cuda_only_imported",
    "map_device",
    "to",
    "cuda",
    "pin_memory",
    "record_stream",
    "is_cuda",
    "get_device",
    "module_compile",
    "tensor_type",
    "output_device",
    "map_location",
    "device_ids",
    "device_map",
    "max_memory",
    "pin_flag",
    "fused_flag",
    "capturable_flag",
    "activities",
    "use_device",
]

SITES: list[Site] = []
#: Hits per site id, parallel to SITES (a list increment is the cheapest count there is).
HITS: list[int] = []
_rt: Retarget | None = None
_Tensor = torch.Tensor
_Module = torch.nn.Module
_device_type = torch.device
_PackedSequence = torch.nn.utils.rnn.PackedSequence
#: what `.cuda()` / `.to()` move: their unbound forms and references are the called ones
_MOVABLE = (_Tensor, _Module, _PackedSequence)
_Storages = (torch.UntypedStorage, torch.TypedStorage)


def bind(retarget: Retarget | None) -> None:
    global _rt
    _rt = retarget
    destination.forget()
    if retarget is not None:
        retarget.recorder.site_table = (SITES, HITS)


#: id(real torch module) -> the facade the application sees; module name -> facade.
_facades_by_id: dict[int, object] = {}
_facades_by_name: dict[str, object] = {}
#: id(real torch function or class) -> the stand-in a facade holds in its place, so that every way
#: to the same object (`torch.cuda.amp.GradScaler`, `from torch.cuda.amp.grad_scaler import
#: GradScaler`, `torch.cuda.random.get_rng_state_all`) gives the application the one answer.
_standins_by_id: dict[int, object] = {}
#: real modules (by id) holding none of those objects: they need no facade.
_plain_modules: set[int] = set()


def bind_facades(by_name: dict[str, object]) -> None:
    """Install the facades (module name -> facade module) that rewritten import sites bind."""
    import importlib

    _facades_by_name.clear()
    _facades_by_name.update(by_name)
    _facades_by_id.clear()
    _standins_by_id.clear()
    _plain_modules.clear()
    for name, module in by_name.items():
        real = importlib.import_module(name)
        _facades_by_id[id(real)] = module
        for attribute, standin in vars(module).items():
            original = real.__dict__.get(attribute)
            if original is not None and original is not standin and not attribute.startswith("__") \
                    and isinstance(original, (types.FunctionType, types.BuiltinFunctionType, type)):
                _standins_by_id[id(original)] = standin
    # Submodules a facade holds (`torch.cuda.amp.autocast_mode`, `torch.serialization`) are their
    # facades where they hold a replaced object, so that reading through them gives the stand-in too.
    pending = list(by_name.values())
    while pending:
        namespace = vars(pending.pop())
        for attribute, value in list(namespace.items()):
            if type(value) is types.ModuleType and value.__name__.startswith("torch.") \
                    and not attribute.startswith(("__", "_torchport")):
                found = facade(value)
                if found is not value:
                    namespace[attribute] = found
                    pending.append(found)


def facade(value):
    """The facade of a real torch module (what `import torch.cuda as c` binds); anything else unchanged.

    A torch submodule without a facade of its own that holds objects a facade replaces (e.g.
    `torch.cuda.random`, `torch.cuda.amp.grad_scaler`) gets one made on first use."""
    found = _facades_by_id.get(id(value))
    if found is not None:
        return found
    if type(value) is types.ModuleType and id(value) not in _plain_modules \
            and value.__name__.startswith("torch.") and _standins_by_id:
        return _submodule_facade(value)
    return value


def _submodule_facade(real: types.ModuleType):
    overrides = {attribute: _standins_by_id[id(value)] for attribute, value in list(vars(real).items())
                 if id(value) in _standins_by_id and not attribute.startswith("__")}
    if not overrides:
        _plain_modules.add(id(real))
        return real
    from torchport.retarget.standin import facade_module

    module = facade_module(real, overrides)
    _facades_by_id[id(real)] = module
    return module


def from_import(module_name: str, attribute: str, value):
    """`from torch.cuda.amp import GradScaler`: the name as the facade of `module_name` has it; from a
    module without a facade, the stand-in of the object imported, if a facade replaces it."""
    module = _facades_by_name.get(module_name)
    if module is None:
        return _standins_by_id.get(id(value)) or facade(value)
    return getattr(module, attribute, value)


def cuda_only_import_failed(package: str, statement: str, error: ImportError):
    """A failed import of a CUDA-only package: reported, raised as an ImportError naming the alternative."""
    from torchport.retarget.unsupported import CudaOnlyImportError, cuda_only_packages

    alternative = cuda_only_packages()[package]
    _rt.unsupported(statement, alternative, raise_error=False)
    raise CudaOnlyImportError(package, _rt.backend.name, alternative) from error


def cuda_only_imported(package: str, statement: str) -> None:
    """A CUDA-only package that imported: reported as unsupported on a target other than CUDA."""
    from torchport.retarget.unsupported import cuda_only_packages

    if _rt.type != "cuda":
        _rt.unsupported(statement, cuda_only_packages()[package], raise_error=False)


def register_site(filename: str, lineno: int, api: str) -> int:
    SITES.append(Site(filename, lineno, api))
    HITS.append(0)
    return len(SITES) - 1


@constant_in_compiled_code
def _hit(site: int) -> None:
    """Count a use of a rewritten site. In code torch.compile traces, counted once, at trace time: a
    count the compiled code read and wrote would be a value its guards check, changed by every call
    (a recompilation each time)."""
    HITS[site] += 1


@constant_in_compiled_code
def _target_string(value: str) -> str:
    """The target's string for a CUDA one; in a function torch.compile traces, answered at trace time
    and held as a constant (the device's own code, which answers it, is not the program's, and the
    cache of answers is not a value of the program to guard on)."""
    return _rt.map_string(value)


@constant_in_compiled_code
def _target_device(ordinal: int | None):
    """The target device for CUDA ordinal `ordinal` (None: the current one); a constant in compiled code."""
    return _rt.device(ordinal)


def map_device(value, site: int | None = None):
    """'cuda', 'cuda:N', torch.device('cuda', N) or an int ordinal -> the target; else unchanged."""
    value_type = value.__class__
    if value_type is str:
        mapped = _target_string(value)
        if site is not None and mapped != value:
            _hit(site)
        return mapped
    if value_type is _device_type:
        if value.type != "cuda":
            return value
        if site is not None:
            _hit(site)
        return _target_device(value.index)
    if value_type is int:
        if site is not None:
            _hit(site)
        return _target_device(value)
    return value


#: keywords whose meaning depends on the callee: frameworks choosing the device or precision, the profiler
_SPECIAL_KEYWORDS = frozenset(("accelerator", "fp16", "bf16", "tf32", "torch_compile", "mixed_precision", "use_cuda"))


def call(function, site: int, *args, **kwargs):
    """`function(*args, **kwargs)` with its device keywords mapped when it leaves the application."""
    __tracebackhide__ = True  # pytest shows the application's frames around this one, not it
    if (function is _as_tensor or function is _asarray) and _rt.type == "cpu" and args \
            and _crossing(kwargs.get("device")) is _TO_DEVICE and not isinstance(args[0], _UNSHARED_DATA):
        # the host's memory sent to the device is a copy on a GPU machine (see _transferred)
        kwargs["device"] = map_device(kwargs["device"], site)
        made = function(*args, **kwargs)
        if not _shares_memory(args[0], made):
            return made
        if isinstance(args[0], _Tensor):  # a tensor sent to the device, as `.to(device)` sends it
            return _transferred(made, made, to_device=True)
        return made.detach().clone().requires_grad_(made.requires_grad)  # an array's memory: a new leaf
    if kwargs and (where := leaves_application(function if function is not _partial or not args else args[0])):
        asked = ("fused" in kwargs or "capturable" in kwargs) and [flag for flag in _OPTIMIZER_FLAGS
                                                                    if kwargs.get(flag) is True]
        for keyword, value in kwargs.items():
            helper = KEYWORD_HELPERS.get(keyword)
            if helper is not None and value is not None and value is not False:
                kwargs[keyword] = helper(site, value)
        if asked and where is True and isinstance(function, type) and issubclass(function, _Optimizer):
            adapted = [flag for flag in asked if kwargs[flag] is False]
            if adapted:
                return _saved_as_asked(function(*args, **kwargs), adapted)
        if not _SPECIAL_KEYWORDS.isdisjoint(kwargs):  # one set operation on the common path
            if "use_cuda" in kwargs:
                profiler.use_cuda(_rt, SITES[site], function, kwargs)
            # a framework choosing the device or precision itself (Lightning, transformers, Accelerate)
            after = frameworks.framework_keywords(function, kwargs, site)
            if after is not None:  # the object the framework builds is given what the target needs
                return after(function(*args, **kwargs) if where is True else where(function, site, args, kwargs))
        if where is not True:  # a library taking only some device types (destination._ADAPTERS)
            return where(function, site, args, kwargs)
    elif kwargs and not _SPECIAL_KEYWORDS.isdisjoint(kwargs) and isinstance(function, type):
        # the application's own subclass of a framework's class (`class MyArgs(TrainingArguments)`):
        # the values reach the framework through the class it derives from
        after = frameworks.framework_keywords(function, kwargs, site)
        if after is not None:
            return after(function(*args, **kwargs))
    return function(*args, **kwargs)


def framework_call(function, site: int, *args, **kwargs):
    """`Trainer(...)` / `Fabric(...)`: a framework class choosing the device from its own defaults is
    given the target where it leaves the application, as `call` does for what the application wrote."""
    __tracebackhide__ = True
    if leaves_application(function):
        args = frameworks.framework_defaults(function, args, kwargs, site)
        return frameworks.framework_built(function, call(function, site, *args, **kwargs))
    return call(function, site, *args, **kwargs)


def subprocess_call(function, site: int, *args, **kwargs):
    """`subprocess.run([sys.executable, "train.py", ...])` and kin in the application: a Python child of
    this interpreter is started under `torchport run` with this process's settings, as the children
    of torchrun and multiprocessing are (on a GPU machine it would run on the GPU too)."""
    __tracebackhide__ = True
    from torchport.retarget import children

    if function not in children.FUNCTIONS:
        return function(*args, **kwargs)
    if args:
        args = (children.command(args[0], SITES[site]), *args[1:])
    elif "args" in kwargs:
        kwargs["args"] = children.command(kwargs["args"], SITES[site])
    return function(*args, **kwargs)


def to1(site: int, obj, first):
    """`obj.to(first)`, the common form, with a CUDA device mapped. Where the target is the host (the
    CPU), a tensor sent to a CUDA device the application named, or to the host it wrote as "cpu", is a
    copy as on a GPU machine, where torch would give the tensor itself (see `_transferred`)."""
    first_type = first.__class__
    if first_type is str:
        mapped = _target_string(first)
        if mapped != first:
            _hit(site)
        elif first == "cpu" or first.startswith("cpu:"):
            moved = obj.to(first)
            return _transferred(obj, moved, to_device=False) if moved is obj else moved
        else:
            return obj.to(first)
    elif first_type is _device_type:
        if first.type == "cuda":
            _hit(site)
            mapped = _target_device(first.index)
        elif _rt.cuda_ordinal(first) is not False:  # a device the application made from a CUDA name
            _hit(site)
            mapped = first
        else:
            return obj.to(first)
    elif first_type is int:
        _hit(site)
        mapped = _target_device(first)
    elif _rt.type == "cpu" and isinstance(first, _Tensor) and isinstance(obj, _Tensor):
        # `x.to(logits)`: to the other tensor's device and dtype; the application's tensors are CUDA's
        # (`logits.is_cuda`), so it is a transfer to the device, a copy as `x.to("cuda")` is
        moved = obj.to(first)
        return _transferred(obj, moved, to_device=True) if moved is obj else moved
    else:  # a dtype, another object's own argument
        return obj.to(first)
    moved = obj.to(mapped)
    return _transferred(obj, moved, to_device=True) if moved is obj else moved


def to(site: int, obj, *args, **kwargs):
    """`obj.to(*args, **kwargs)` (unpacked arguments the rewriter cannot see, a device keyword, the host
    written as a literal) with a CUDA device mapped; the unbound spelling `torch.Tensor.to(t, "cuda")`
    is the bound one. A tensor on the target sent to the host is a copy where the target is the host
    (see `cpu`)."""
    if isinstance(obj, type) and args and isinstance(args[0], obj) and issubclass(obj, _MOVABLE):
        if issubclass(obj, _Module):  # `nn.Module.to(self, device)` in an override: that class's own
            cls, obj, args = obj, args[0], args[1:]
            if args and args[0].__class__ in _DEVICE_VALUE_TYPES:
                args = (map_device(args[0], site), *args[1:])
            if "device" in kwargs:
                kwargs["device"] = map_device(kwargs["device"], site)
            return cls.to(obj, *args, **kwargs)
        obj, args = args[0], args[1:]
    if _rt.type == "cpu" and args and isinstance(args[0], _Tensor) and isinstance(obj, _Tensor):
        moved = obj.to(*args, **kwargs)  # `x.to(other, non_blocking=True)`: to a CUDA tensor (see `to1`)
        return _transferred(obj, moved, to_device=True) if moved is obj else moved
    if _rt.type == "cpu" and (crossing := _crossing(args[0] if args else kwargs.get("device"))):
        mapped = (map_device(args[0], site), *args[1:]) if args else args
        if "device" in kwargs:
            kwargs["device"] = map_device(kwargs["device"], site)
        moved = obj.to(*mapped, **kwargs)
        return _transferred(obj, moved, to_device=crossing is _TO_DEVICE) if moved is obj else moved
    if args:
        first = args[0]
        first_type = first.__class__
        if first_type is str or first_type is _device_type or first_type is int:
            if kwargs or len(args) > 1:
                args = (map_device(first, site), *args[1:])
            else:
                return obj.to(map_device(first, site))
    if "device" in kwargs:
        kwargs["device"] = map_device(kwargs["device"], site)
    return obj.to(*args, **kwargs)


def cuda(site: int, obj, *args, **kwargs):
    """`obj.cuda(device)` -> `obj.to(target)` for tensors, modules and packed sequences. A module whose
    class (in the application) overrides `cuda()` runs its override, whose own `.cuda()` calls come
    back here (`super().cuda(device)` moves the module); the unbound spelling
    `torch.nn.Module.cuda(model, 0)` is the bound one. Any other object's `cuda` gets the arguments
    as written."""
    if isinstance(obj, type) and issubclass(obj, (_Tensor, _Module)) and args and isinstance(args[0], obj):
        if not issubclass(obj, _Module):
            return cuda(site, *args, **kwargs)  # `torch.Tensor.cuda(t[, device])`
        if obj.cuda is not _Module.cuda:  # `Net.cuda(model)`: that class's own override
            return obj.cuda(*args, **kwargs)
        obj, args = _SuperModule(args[0]), args[1:]  # `nn.Module.cuda(self)` in an override: torch's own
    if isinstance(obj, super) and isinstance(obj.__self__, _Module):
        method = obj.cuda
        if getattr(method, "__func__", None) is not _Module.cuda:
            return method(*args, **kwargs)
        obj = _SuperModule(obj.__self__)
    if isinstance(obj, (_Tensor, _Module, _PackedSequence, _SuperModule)):
        _hit(site)
        device, non_blocking, options = _cuda_arguments(*args, **kwargs)
        target = _rt.device(None) if device is None else map_device(device)
        if isinstance(target, str):
            target = torch.device(target)
        if isinstance(obj, _SuperModule):  # the base class's cuda(): the module's parameters and buffers
            return _Module.to(obj.module, target)
        if isinstance(obj, _Module):
            override = type(obj).cuda
            if override is not _Module.cuda and _rt.in_scope(getattr(getattr(override, "__code__", None),
                                                                     "co_filename", "")):
                return obj.cuda(*args, **kwargs)
            return obj.to(target)
        moved = obj.to(target, non_blocking=non_blocking, **options)
        return _transferred(obj, moved, to_device=True) if moved is obj else moved
    if isinstance(obj, _Storages):
        _hit(site)
        device = _cuda_arguments(*args, **kwargs)[0]
        target = _rt.device(None) if device is None else map_device(device)
        if torch.device(target).type != "cpu":
            return obj.to(device=target)
        moved = obj.cpu()  # a storage sent to a GPU is a copy in its memory (a mapped file's pages too)
        return moved.clone() if moved is obj or moved.data_ptr() == obj.data_ptr() else moved
    return obj.cuda(*args, **kwargs)


def cpu(site: int, obj, *args, **kwargs):
    """`x.cpu()`. The application's tensors are the target's (its CUDA tensors, `x.is_cuda`), and on a
    GPU machine `.cpu()` of one is a copy on the host: a snapshot (`best = {k: v.cpu() for k, v in
    model.state_dict().items()}`) keeps its values while training goes on, and an edit of
    `x.cpu().numpy()` leaves `x` as it was. Where the target is the host (the CPU), torch would hand
    back the tensor itself; it is copied instead. Elsewhere, and for modules and other objects, this
    is their own `cpu()`; the unbound spelling `torch.Tensor.cpu(t)` is the bound one."""
    if isinstance(obj, type) and args and isinstance(args[0], obj) and issubclass(obj, _MOVABLE):
        moved = obj.cpu(*args, **kwargs)  # `nn.Module.cpu(self)` in an override: that class's own
        obj = args[0]
    else:
        moved = obj.cpu(*args, **kwargs)
    return _transferred(obj, moved, to_device=False) if moved is obj else moved


_bfloat16 = torch.bfloat16
_float16 = torch.float16


def numpy(site: int, obj, *args, **kwargs):
    """`x.numpy()`. NumPy has no bfloat16: where the precision policy ran the application's float16
    autocast regions in bfloat16, a bfloat16 tensor (what such a region gives where CUDA gives
    float16: logits for a metric) becomes the float16 array the program gets on a GPU machine, and
    the report says so once; anything else is its own `numpy()` (a bfloat16 tensor the application
    made while no region was lowered raises as there)."""
    if _rt is not None and _rt.fp16_ran_as_bf16 and isinstance(obj, _Tensor) and obj.dtype is _bfloat16:
        _rt.decide("x.numpy() of bfloat16 results", "float16 arrays, as the float16 the application's autocast "
                                                   "asked for gives on CUDA (NumPy has no bfloat16; the precision "
                                                   "policy ran the region in bfloat16)", kind="adapted")
        return obj.to(_float16).numpy(*args, **kwargs)
    return obj.numpy(*args, **kwargs)


def to_host(site: int, obj, *args, **kwargs):
    """`x.to("cpu")` / `x.to(torch.device("cpu"))` with the host written out at the call: a copy where
    the target is the host, as `cpu` is."""
    moved = to(site, obj, *args, **kwargs)
    return _transferred(obj, moved, to_device=False) if moved is obj else moved


#: the classes of the values `.to(value)` reads as a device
_DEVICE_VALUE_TYPES = (str, _device_type, int)
_as_tensor = torch.as_tensor
_asarray = torch.asarray
#: data that `torch.as_tensor` always copies (it shares the memory of tensors and arrays)
_UNSHARED_DATA = (list, tuple, int, float, bool, complex)
#: what `.cpu()`, `.cuda()` and `.to(device)` copy on a GPU machine: tensors and packed sequences (a
#: module moves its parameters in place there too).
_HOST_COPIED = (_Tensor, _PackedSequence)
_Uninitialized = torch.nn.parameter.UninitializedTensorMixin
_uint8 = torch.uint8


def _on_the_device(obj) -> bool:
    """Whether `obj`, sent to the device on the CPU target, is taken to be there already (itself, not a
    copy): a Parameter, whose module is on the device once the model moved there (`lin.weight =
    lin.weight.cuda()`, `emb.weight.to(device)[0].zero_()` as on a GPU), and any other tensor being
    trained (a leaf that requires grad: `x_adv = x.detach().requires_grad_().to(device)` keeps its
    `.grad`, and an optimizer takes it)."""
    return isinstance(obj, _Tensor) and obj.requires_grad and obj.is_leaf or isinstance(obj, torch.nn.Parameter)


_TO_DEVICE, _TO_HOST = "device", "host"


def _crossing(value) -> str | None:
    """Which side of a GPU machine's host-device line `value`, a `.to()` destination as the
    application wrote it on the CPU target, names: the device (a 'cuda' string, an ordinal, a device
    the application made from a CUDA name), the host (written as "cpu"), or None (a host device object
    not made from a CUDA name, `x.device`: where the tensor already is, no copy, as in a hand port)."""
    value_type = value.__class__
    if value_type is str:
        if value == "cpu" or value.startswith("cpu:"):
            return _TO_HOST
        return _TO_DEVICE if _target_string(value) != value else None
    if value_type is _device_type:
        return _TO_DEVICE if value.type == "cuda" or (
            value.type == "cpu" and _rt.cuda_ordinal(value) is not False) else None
    return _TO_DEVICE if value_type is int else None


def names_cuda_device(value) -> bool:
    """Whether `value`, a device as the application wrote it on the CPU target, names its CUDA device
    (a 'cuda' string, an ordinal, a device made from a CUDA name)."""
    return _crossing(value) is _TO_DEVICE


def _shares_memory(data, made) -> bool:
    """Whether the tensor `made` from `data` (a tensor, an array) uses `data`'s memory."""
    if isinstance(data, _Tensor):
        return made.untyped_storage().data_ptr() == data.untyped_storage().data_ptr()
    interface = getattr(data, "__array_interface__", None)
    return interface is not None and made.data_ptr() == interface["data"][0]


def _transferred(obj, moved, to_device: bool):
    """What a GPU machine's host-device transfer of `obj` gives, `moved` being torch's answer (`obj`
    itself when it is already there): where the target is the host, a copy of a tensor or packed
    sequence, except a tensor being trained sent to the device (`_on_the_device`). On a GPU the
    application's `.cpu()` snapshot of the best weights keeps them while training goes on, an edit of
    `x.cpu().numpy()` leaves `x` as it was, and `torch.as_tensor(obs, device="cuda")` or
    `.to("cuda")` of a slice of a host dataset or of an environment's reused buffer does not follow
    later writes to the host memory (replay buffers, in-place normalisation)."""
    if moved is not obj or _rt.type != "cpu" or not isinstance(obj, _HOST_COPIED) or (to_device and _on_the_device(obj)):
        return moved
    if isinstance(obj, _PackedSequence):
        return obj._replace(data=obj.data.clone())
    if isinstance(obj, _Uninitialized):  # a lazy module's parameter has no data to copy yet
        return obj
    if obj.dtype is _uint8 and cuda_api.carries_state(obj):  # a host tensor on a GPU too: itself
        return obj  # (`torch.cuda.get_rng_state().cpu()` keeps the state it carries)
    return obj.clone()


def _cuda_arguments(device=None, non_blocking: bool = False, **options):
    """(device, non_blocking, the other options) of a torch `.cuda(...)` call."""
    return device, non_blocking, options


def method_reference(site: int, receiver, name: str):
    """`receiver.cuda` / `receiver.to` read without being called: `map(torch.Tensor.cuda, batch)`,
    `partial(torch.Tensor.to, device="cuda")`, `move = model.cuda`. A torch class gives a function
    of the instance, an instance its bound form, both calling what the called form calls (so the
    reference moves to the target as the call does); anything else gives its own attribute."""
    if isinstance(receiver, type):
        if not issubclass(receiver, _MOVABLE):
            return getattr(receiver, name)
        key = (site, name)
        method = _METHOD_REFERENCES.get(key)
        if method is None:
            method = _METHOD_REFERENCES[key] = _unbound(site, name, getattr(receiver, name))
        return method
    attribute = getattr(receiver, name)
    if isinstance(receiver, _MOVABLE) and getattr(attribute, "__self__", None) is receiver:
        return functools.partial(_METHOD_HELPERS[name], site, receiver)
    return attribute  # not the method (a module's own flag `self.cpu = False`)


def _unbound(site: int, name: str, genuine):
    helper = _METHOD_HELPERS[name]

    @functools.wraps(genuine)
    def method(obj, *args, **kwargs):
        return helper(site, obj, *args, **kwargs)

    return method


_METHOD_REFERENCES: dict[tuple[int, str], object] = {}


class _SuperModule:
    """`super().cuda()` reaching torch.nn.Module's own cuda() for `module`."""

    __slots__ = ("module",)

    def __init__(self, module):
        self.module = module


def pin_memory(site: int, obj, *args, **kwargs):
    """`tensor.pin_memory()` / `storage.pin_memory()`: kept where the target pins host memory (a
    storage pinned through a tensor over it, as the target pins tensors), skipped where it cannot."""
    if isinstance(obj, (_Tensor, _Storages)) and not _rt.backend.supports_pinned_memory:
        _rt.noop(f"{'Tensor' if isinstance(obj, _Tensor) else 'Storage'}.pin_memory",
                 f"{_rt.backend.name} has no pinned host memory", SITES[site])
        return obj
    if isinstance(obj, torch.UntypedStorage) and obj.device.type == "cpu" and not args and not kwargs:
        whole = torch.empty(0, dtype=torch.uint8).set_(obj, 0, (obj.nbytes(),))
        return whole.pin_memory().untyped_storage()
    return obj.pin_memory(*args, **kwargs)


def record_stream(site: int, obj, stream):
    """`tensor.record_stream(s)` with torchport's stand-in streams on targets without streams."""
    real = getattr(stream, "_torchport_real", stream)
    if real is None:
        _rt.noop("Tensor.record_stream", "the target has no streams", SITES[site])
        return None
    return obj.record_stream(real)


def generator_set_state(site: int, obj, *args, **kwargs):
    """`g.set_state(state)`: for a torch.Generator, a CUDA generator state the application holds
    (`torch.cuda.get_rng_state()`'s, a GPU checkpoint's) set as `torch.cuda.set_rng_state` sets it
    (`cuda_api.generator_set_state`); anything else's own `set_state`."""
    if isinstance(obj, torch.Generator) and len(args) == 1 and not kwargs and cuda_api.cuda_shaped(args[0]):
        _hit(site)
        return cuda_api.generator_set_state(obj, args[0])
    return obj.set_state(*args, **kwargs)


def generator_get_state(site: int, obj, *args, **kwargs):
    """`g.get_state()`: for a generator standing for CUDA's, the 16-byte state a CUDA generator gives
    (`cuda_api.generator_get_state`); anything else's own `get_state`."""
    if _rt is not None and isinstance(obj, torch.Generator) and not args and not kwargs:
        return cuda_api.generator_get_state(obj)
    return obj.get_state(*args, **kwargs)


def tensor_type(site: int, obj, *args, **kwargs):
    """`x.type()` / `x.type(torch.cuda.FloatTensor)` as on CUDA: the target's tensors are CUDA's."""
    if not isinstance(obj, _Tensor):
        return obj.type(*args, **kwargs)
    if not args and "dtype" not in kwargs:
        name = obj.type()
        if not _rt.holds(obj.device) or _rt.type == "cuda":
            return name
        _hit(site)
        return ("torch.cuda.sparse." if obj.is_sparse else "torch.cuda.") + name.rsplit(".", 1)[-1]
    wanted = args[0] if args else kwargs["dtype"]
    if not isinstance(wanted, str):
        module = getattr(wanted, "__module__", None)
        wanted = f"{module}.{wanted.__name__}" if module in ("torch.cuda", "torch.cuda.sparse") else None
    dtype = cuda_api.LEGACY_TENSOR_TYPES.get(wanted)
    if dtype is None:
        return obj.type(*args, **kwargs)
    _hit(site)
    moved = obj.to(device=_rt.device(), dtype=dtype, non_blocking=kwargs.get("non_blocking", False))
    return _transferred(obj, moved, to_device=True) if moved is obj else moved


def is_cuda(site: int, obj):
    """`x.is_cuda`: true when x lives on the target (what 'cuda' means here). For other objects that
    answer it from where their data lives (a PackedSequence, a storage), the same rule applies to
    their `device`, or their `data` tensor's."""
    if isinstance(obj, _Tensor):
        _hit(site)
        return _rt.holds(obj.device)
    value = obj.is_cuda
    if value is False:
        device = getattr(obj, "device", None)
        if device is None and isinstance(getattr(obj, "data", None), _Tensor):
            device = obj.data.device
        if device.__class__ is _device_type and _rt.holds(device):
            _hit(site)
            return True
    return value


def attribute_or(site: int, helper: str, obj, *default):
    """`getattr(x, "is_cuda"[, default])` (a literal name the rewriter maps as `x.is_cuda`): the same
    answer as the attribute read, or `default` where the attribute is missing."""
    try:
        return globals()[helper](site, obj)
    except AttributeError:
        if default:
            return default[0]
        raise


def device_type(site: int, obj):
    """`d.type` in the application: 'cuda' for a torch.device standing for CUDA, as on a GPU machine
    (`device.type == "cuda"` branches, `enabled=device.type == "cuda"`): a device of the target's
    type; on the CPU target, where every host device has that type, only the devices the
    application made from CUDA names (one object per ordinal: `Retarget.cuda_ordinal`)."""
    if obj.__class__ is _device_type:
        if _rt.stands_for_cuda(obj):
            _hit(site)
            return "cuda"
        if obj.type == "cpu" and _rt.type == "cpu" and site not in _rt.cpu_type_reads:
            _note_cpu_type_read(site)
        return obj.type
    return obj.type


#: The report's topic for the reads of a host device's `.type` on the CPU target.
CPU_TYPE_READ = "device.type on the CPU target"
#: How many of those sites the note names.
CPU_TYPE_SITES_NAMED = 3


def _note_cpu_type_read(site: int) -> None:
    """Say where the application read a host device's type on the CPU target: for the device of a
    tensor a GPU machine holds on the GPU, `x.device.type` reads 'cuda' there and 'cpu' here
    (YOLOv5's AMP check, `half = device.type != "cpu"`), so a branch on it takes the host path, as in
    a hand port. The note names the first sites and counts the others (a read of a device that is the
    host's on a GPU machine too, a loader's batch, reads 'cpu' in both)."""
    if torch.compiler.is_compiling():
        return
    reads = _rt.cpu_type_reads
    reads[site] = None
    named = ", ".join(SITES[index].location() for index in list(reads)[:CPU_TYPE_SITES_NAMED])
    more = f" and {len(reads) - CPU_TYPE_SITES_NAMED} more site(s)" if len(reads) > CPU_TYPE_SITES_NAMED else ""
    text = (f"`.type` of a device read 'cpu' at {named}{more}: on the CPU target the target's tensors are host "
            "tensors, so where the device is a tensor's that a GPU machine holds on the GPU, `x.device.type` "
            "reads 'cpu' here and 'cuda' there, and a branch on it (an AMP or half-precision check) takes the host "
            "path; --device cuda-emulated keeps the two apart and runs the GPU path")
    _rt.recorder.decisions.pop(CPU_TYPE_READ, None)
    _rt.decide(CPU_TYPE_READ, text, kind="note")


def shown(site: int, value):
    """A value `str()` or an f-string shows in the application: for a torch.device standing for CUDA
    (`device_type` answers "cuda" for it), the text a GPU machine shows, "cuda" or "cuda:N", so that
    `"cuda" in str(device)`, `str(device) == "cuda"` and `f"{device}"` read as there; anything else
    unchanged (the caller formats it as before)."""
    if value.__class__ is _device_type:
        text = _device_text(value)
        if text is not None:
            _hit(site)
            return text
    return value


@constant_in_compiled_code
def _device_text(device):
    """"cuda" / "cuda:N" for a device standing for CUDA (see `device_type` and `device_index`), else None."""
    if device.type == "cuda":
        return None
    ordinal = _rt.cuda_ordinal(device)
    if ordinal is False:
        if not _rt.accelerator or device.type != _rt.type:
            return None
        ordinal = None if device.index is None else _rt.ordinal_of(device.index)
    return "cuda" if ordinal is None else f"cuda:{ordinal}"


def device_index(site: int, obj):
    """`d.index` in the application: for a torch.device made from a CUDA name, the ordinal it named
    (`torch.device(f"cuda:{local_rank}").index` is the local rank, as on a GPU machine, where the
    target's device may have no index (the CPU) or another one); for another device of an
    accelerator target (a tensor's), the CUDA ordinal it stands for; else the device's own."""
    if obj.__class__ is _device_type:
        ordinal = _rt.cuda_ordinal(obj)
        if ordinal is not False:
            _hit(site)
            return ordinal
        if _rt.accelerator and obj.type == _rt.type and obj.index is not None:
            _hit(site)
            return _rt.ordinal_of(obj.index)
    return obj.index


def get_device(site: int, obj, *args, **kwargs):
    """`x.get_device()`: the CUDA ordinal of a tensor on the target, as on a GPU machine (on the CPU
    target torch answers -1, which `torch.zeros(n, device=x.get_device())` cannot take)."""
    if isinstance(obj, _Tensor) and not args and not kwargs and _rt.holds(obj.device):
        _hit(site)
        return _rt.ordinal_of(obj.device.index)
    return obj.get_device(*args, **kwargs)


def output_device(site: int, value):
    """DDP's `output_device=`: the target device, or None on the CPU (where DDP wants None)."""
    if value is None:
        return None
    _hit(site)
    if not _rt.accelerator:
        return None
    return map_device(value)


def map_location(site: int, value):
    """`map_location=`: strings, devices, dicts of them, and callables returning them. A dict or a
    callable is asked with the saved locations as the application knows them (`application_location`)."""
    value_type = value.__class__
    if not _rt.backend.loads_to_device:
        return _through_the_host(site, value)
    if value_type in (str, int, _device_type):
        return map_device(value, site)
    if isinstance(value, dict):
        # torch restores a location the dict does not list where it was saved: on a GPU machine
        # 'cuda:0' stays 'cuda:0', so here it is mapped too (`{'cuda:1': 'cuda:0'}`, a GPU checkpoint)
        table = {key: map_device(item, site) for key, item in value.items()}
        return lambda storage, location: restore_location(
            storage, table.get(application_location(location), location), site)
    if callable(value):
        inner = value

        def mapped(storage, location):
            result = inner(storage, application_location(location))
            if result is None:  # where it was saved, as torch restores it: CUDA's on the target
                return restore_location(storage, location, site)
            if result.__class__ in (str, int, _device_type):
                target = map_device(result, site)
                if isinstance(result, str) or isinstance(target, str):
                    return target
                return storage.to(target) if hasattr(storage, "to") else target
            return result

        return mapped
    return value


def application_location(location):
    """A saved storage location as the application knows it: the target's own ('emulated:0', or
    'neuron:0' on the hardware), in a checkpoint a library wrote on the target where a GPU machine
    writes 'cuda:0', is CUDA's (`map_location={'cuda:0': 'cpu'}` matches it)."""
    if location.__class__ is str and _rt.type != "cpu" and location.partition(":")[0] == _rt.type:
        return "cuda" + location[len(_rt.type):]
    return location


def _through_the_host(site: int | None, value):
    """`map_location=` on a target that cannot restore storages (`loads_to_device` false): what the
    application sends to CUDA is read on the host, then copied to the target (what torch.load of the
    application does with it; a library's load leaves the tensors on the host); the rest goes where
    it asks."""
    from torchport.retarget.host_loading import HostFunction, HostStorages, as_device, cuda_to_target

    if site is not None:
        _hit(site)
    if value.__class__ in (str, int, _device_type):
        mapped = map_device(value)
        if mapped is not value or (value.__class__ is _device_type and value.type == _rt.type):
            destination = as_device(mapped)
            return HostStorages(lambda location: destination)
        return value
    if isinstance(value, dict):
        def route(location: str):
            asked = value.get(application_location(location))
            if asked is None:  # where it was saved: CUDA's and the target's own on the target
                return cuda_to_target(location)
            return as_device(map_device(asked))

        return HostStorages(route)
    if callable(value):
        return HostFunction(value, application_location)
    return value


def restore_location(storage, location, site: int | None = None):
    """`storage`, saved at `location`, restored where the application's load puts it: a CUDA location
    on the target, any other where torch restores it."""
    if isinstance(location, str) and location.startswith("cuda"):
        location = map_device(location, site)
    return torch.serialization.default_restore_location(storage, str(location))


def mapped_into_memory(asked):
    """The `map_location` for `torch.load(..., mmap=True)` in application code on the CPU target, where
    the application asked for `asked`. A storage the load puts on the application's CUDA device
    (`map_location="cuda"`, a CUDA-saved storage without one, a dict or a function naming CUDA) is
    read into memory, as a GPU copies it into its own: the model then no longer reads the file,
    which the program may overwrite with its next checkpoint (the mapped pages would change under
    it, or end in a bus error where the new file is shorter). A storage the application keeps on
    the host stays mapped, as on a GPU machine."""
    table = asked if isinstance(asked, dict) else None
    function = asked if callable(asked) and table is None else None
    copied = []

    def into_memory(restored):
        if not copied:
            copied.append(True)
            _rt.decide("torch.load(mmap=True) to CUDA", "storages for the CUDA device are read into memory, as a GPU "
                                                       "copies them into its own: the file stays free to overwrite",
                      kind="adapted")
        return restored.clone()

    def restore(storage, location: str):
        if function is not None:
            result = function(storage, location)
            if result is None:
                destination = location
            elif result.__class__ in (str, int, _device_type):
                destination = result
            else:  # a storage: `storage.cuda(rank)` is a copy already (see `cuda`), `storage` stays on the host
                return result
        elif table is not None:
            destination = table.get(location, location)
        else:
            destination = location if asked is None else asked
        to_device = _crossing(destination) is _TO_DEVICE
        if destination.__class__ is not str:
            destination = str(map_device(destination)) if to_device else str(destination)
        restored = restore_location(storage, destination)
        return into_memory(restored) if to_device and restored.data_ptr() == storage.data_ptr() else restored

    return restore


def device_ids(site: int, value):
    """`device_ids=[rank]`: the target's indices, or None on the CPU (where DDP wants None)."""
    if value is None:
        return None
    _hit(site)
    if not _rt.accelerator:
        return None
    return [_rt.index(item) if isinstance(item, int) else map_device(item) for item in value]


def device_map(site: int, value):
    """transformers' `device_map=`: 'cuda' strings and dicts of ordinals."""
    if isinstance(value, (str, int, _device_type)):
        mapped = map_device(value, site)
        return str(mapped) if isinstance(mapped, _device_type) else mapped
    if isinstance(value, dict):
        result = {}
        for key, item in value.items():
            mapped = map_device(item, site)
            result[key] = str(mapped) if isinstance(mapped, _device_type) else mapped
        return result
    return value


def max_memory(site: int, value):
    """transformers' and Accelerate's `max_memory=` (`{0: "20GiB", "cpu": "60GiB"}`), whose integer keys
    are CUDA ordinals. On the CPU target the GPU is the host: its budget is added to the host's, so the
    model is placed as a GPU machine places it (on the device first), not offloaded for lack of room."""
    if not isinstance(value, dict) or _rt.accelerator or not any(key.__class__ is int for key in value):
        return value
    try:
        from accelerate.utils import convert_file_size_to_int
    except ImportError:  # without Accelerate, transformers refuses max_memory itself
        return value
    _hit(site)
    host = sum(convert_file_size_to_int(size) for key, size in value.items() if key.__class__ is int or key == "cpu")
    return {**{key: size for key, size in value.items() if key.__class__ is not int and key != "cpu"}, "cpu": host}


def pin_flag(site: int, value):
    """`pin_memory=True` on a DataLoader: off where the target has no pinned host memory."""
    if value is True and not _rt.backend.supports_pinned_memory:
        _rt.noop("pin_memory=True", f"{_rt.backend.name} has no pinned host memory", SITES[site])
        return False
    return value


#: Optimizer flags the target's profile may turn off (`fused_flag`, `capturable_flag`).
_OPTIMIZER_FLAGS = ("fused", "capturable")
_Optimizer = torch.optim.Optimizer


def _saved_as_asked(optimizer, flags: list[str]):
    """An optimizer whose `fused=True` (or `capturable=True`) the target turned off: its state_dict
    says what the application asked for, so the checkpoint resumes with the original code on a GPU
    (torch's load would otherwise turn the GPU's fused step off, and GradScaler's step then fails),
    and a state_dict asking for them (this run's, or a GPU's) loads here with them off again. Through
    torch's own state_dict hooks."""

    def saved(_optimizer, state_dict):
        for group in state_dict["param_groups"]:
            for flag in flags:
                if group.get(flag) is False:
                    group[flag] = True
        return state_dict

    def loading(_optimizer, state_dict):
        groups = [{**group, **{flag: False for flag in flags if group.get(flag)}} for group in state_dict["param_groups"]]
        return {**state_dict, "param_groups": groups}

    optimizer.register_state_dict_post_hook(saved)
    optimizer.register_load_state_dict_pre_hook(loading)
    return optimizer


def _optimizer_flag(site: int, value, capability: str, topic: str, why: str):
    """An optimizer's `flag=True` the target's profile says it cannot honour: turned off, reported."""
    if value is not True or getattr(_rt.backend, capability, True):
        return value
    _hit(site)
    _rt.decide(topic, f"{why.format(target=_rt.backend.name)} (its profile says so)", kind="adapted")
    return False


def fused_flag(site: int, value):
    """`AdamW(fused=True)`: kept where the target's profile has fused optimizer kernels, else off."""
    return _optimizer_flag(site, value, "supports_fused_optimizers", "fused optimizers",
                           "fused=True turned off, the default implementation runs: {target} has no fused "
                           "optimizer kernels")


def capturable_flag(site: int, value):
    """`Adam(capturable=True)` (the step kept on the device for CUDA graph capture): kept where the
    target's profile has it, else off: the same updates, without graph capture to serve."""
    return _optimizer_flag(site, value, "supports_capturable_optimizers", "capturable optimizers",
                           "capturable=True turned off, the updates are the same: {target} cannot run "
                           "capturable optimizer steps")


def _device_keyword(site: int, value):
    if value.__class__ is _device_type and value.type != "cuda":
        if _rt.cuda_ordinal(value) is not False:  # a device the application made from a CUDA name
            _hit(site)  # reaches torch as the target: a CUDA usage, as `.to(device)` is one
        return value
    return map_device(value, site)


def device_type_keyword(site: int, value):
    """`device_type="cuda"` (init_device_mesh, DeviceMesh, torch.Stream, ...): the target's device type."""
    if value.__class__ is str and value == "cuda":
        _hit(site)
        return _rt.type
    return value


def activities(site: int, value):
    """torch.profiler's `activities=[..., ProfilerActivity.CUDA]`: the target's kernels, where torch
    profiles them."""
    return profiler.activities(_rt, SITES[site], value)


def use_device(site: int, value):
    """torch.autograd.profiler's `use_device="cuda"`."""
    return profiler.use_device(_rt, SITES[site], value)


#: keyword -> the helper mapping its value where it reaches torch (see transform.REWRITTEN_KEYWORDS).
KEYWORD_HELPERS = {
    "device": _device_keyword,
    "device_id": _device_keyword,
    "device_type": device_type_keyword,
    "output_device": output_device,
    "map_location": map_location,
    "device_ids": device_ids,
    "device_map": device_map,
    "max_memory": max_memory,
    "pin_memory": pin_flag,
    "fused": fused_flag,
    "capturable": capturable_flag,
    "activities": activities,
    "use_device": use_device,
}


_METHOD_HELPERS = {"cuda": cuda, "to": to, "cpu": cpu}

