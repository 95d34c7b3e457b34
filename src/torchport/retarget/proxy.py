"""The `torch` the application's own modules import.

The rewritten import sites of an in-scope module (see transform.py) bind facades for torch,
torch.cuda, torch.cuda.amp, torch.amp, torch.distributed and torch.backends; the module keeps the
interpreter's builtins. Every other attribute is the real one, copied into the facade's namespace so
reading it costs what reading the real module costs. `sys.modules` is shared with PyTorch and the
libraries and stays the truth: `sys.modules["torch"].cuda` is the real torch.cuda.
"""

from __future__ import annotations

import contextlib
import copyreg
import os
import types

import torch

from torchport.retarget import (accelerator_api, amp, attention, backend_flags, compiler, cuda_api, data_parallel,
                                device_values, distributed, host_loading, profiler, runtime, state, sync_batchnorm,
                                torchscript)
from torchport.retarget.standin import facade_module, reduce_class
from torchport.retarget.traced import constant_in_compiled_code

__all__ = ["Facades"]

_real_device = torch.device
_real_generator = torch.Generator


def _facade_module(real: types.ModuleType, overrides: dict) -> types.ModuleType:
    """A module holding a copy of `real`'s namespace plus `overrides` (see standin.FacadeModule):
    attribute reads at plain-module speed; names the copy lacks (lazy submodules, attributes set
    later) fall through to the real module; names the application sets reach the real module."""
    return facade_module(real, overrides)


class _MappedClassMeta(type):
    """Metaclass of stand-ins for torch classes that cannot be subclassed: isinstance goes to the real
    class; construction (`__new__` of the stand-in) gives an instance of the real class."""

    def __instancecheck__(cls, instance) -> bool:
        return isinstance(instance, cls._torchport_real)

    def __subclasscheck__(cls, subclass) -> bool:
        if torch.compiler.is_compiling():
            # torch.compile asks, as CPython's `type.__call__` does, whether what `__new__` gave is of
            # the class itself (to run its `__init__`): the class's own answer (see standin.StandIn;
            # these stand-ins have no subclasses)
            return subclass is cls
        return issubclass(subclass, cls._torchport_real)


copyreg.pickle(_MappedClassMeta, reduce_class)  # `torch.device` itself pickles as torch's


def _construct_device(*args, **kwargs):
    retarget = state.current()
    if not retarget.visible():  # CUDA_VISIBLE_DEVICES hid every device: the device as written, as on a
        return _real_device(*args, **kwargs)  # GPU machine (placing work on it raises there, and here)
    if args and isinstance(args[0], str) and args[0].split(":")[0].strip() == "cuda":
        retarget.redirected("torch.device('cuda')")
        if len(args) > 1 and args[1] is not None:
            return retarget.device(args[1])
        real = _real_device(args[0])
        return retarget.device(real.index)
    if args and args[0].__class__ is int:
        retarget.redirected("torch.device(ordinal)")
        return retarget.device(args[0])
    if len(args) == 1 and not kwargs and args[0].__class__ is _real_device:
        # torch.device(device): the same device, so one standing for CUDA still does (on the CPU
        # target, `.type` reads 'cuda' only for the objects made from CUDA names)
        if args[0].type == "cuda":
            retarget.redirected("torch.device('cuda')")
            return retarget.device(args[0].index)
        if retarget.cuda_ordinal(args[0]) is not False:
            return args[0]
    if kwargs.get("type") == "cuda":
        retarget.redirected("torch.device(type='cuda')")
        return retarget.device(kwargs.get("index"))
    return _real_device(*args, **kwargs)


def _construct_generator(device="cpu"):
    mapped = runtime.map_device(device)
    retarget = state.current()
    generator = None
    if _real_device(mapped).type == retarget.type:
        hosted = retarget.backend.generator_device(mapped)
        if _real_device(hosted) != _real_device(mapped):
            generator = _HostedGenerator(hosted)
            generator._torchport_device = _real_device(mapped)
    if generator is None:
        generator = _real_generator(mapped)
    if runtime.names_cuda_device(device):  # its state reads as a CUDA generator's (16 bytes)
        cuda_api.CUDA_GENERATORS.add(generator)
    return generator


class _HostedGenerator(_real_generator):
    """A generator for a target whose random numbers come from the host's generators (the emulated
    devices): it is the host's, as torch needs, and its `.device` reads the target's, as a CUDA
    generator's reads its GPU, so a draw made "on the generator's device" (`torch.randn(shape,
    generator=g, device=g.device)`) lands on the target. It pickles as torch's Generator."""

    @property
    def device(self):
        return self._torchport_device


class DeviceFacade(metaclass=_MappedClassMeta):
    """`torch.device` in application code: 'cuda' means the target."""

    _torchport_real = _real_device

    def __new__(cls, *args, **kwargs):
        if torch.compiler.is_compiling():
            return _real_device(_device_name(*args, **kwargs))
        return _construct_device(*args, **kwargs)


@constant_in_compiled_code
def _device_name(*args, **kwargs) -> str:
    """The name of the device `torch.device(*args, **kwargs)` makes, in code torch.compile traces: made
    at trace time and held as a constant."""
    return str(_construct_device(*args, **kwargs))


class GeneratorFacade(metaclass=_MappedClassMeta):
    """`torch.Generator` in application code: 'cuda' means the target."""

    _torchport_real = _real_generator

    def __new__(cls, *args, **kwargs):
        return _construct_generator(*args, **kwargs)


#: [True] while the default device is the CPU target because the application named CUDA (a CUDA
#: default device, or a torch.cuda tensor type): `torch.get_default_device()` then reads as CUDA's.
_default_device_named_cuda: list = []


def _set_default_device(device):
    named = state.current().type == "cpu" and device is not None and runtime.names_cuda_device(device)
    _default_device_named_cuda[:] = [True] if named else []
    return torch.set_default_device(runtime.map_device(device))


def _get_default_device():
    """`torch.get_default_device()` in application code: after `set_default_device("cuda")` on the CPU
    target, the application's CUDA device (`cuda:N` of the current ordinal, as on a GPU), not the
    host's, which torch cannot tell from it."""
    device = torch.get_default_device()
    retarget = state.current()
    if _default_device_named_cuda and device.type == retarget.type:
        return retarget.device(retarget.current_ordinal or 0)
    return device


def _set_default_tensor_type(tensor_type):
    """'torch.cuda.FloatTensor' or torch.cuda.FloatTensor -> default device = the target, default
    dtype = float32."""
    if isinstance(tensor_type, str):
        name = tensor_type
    else:  # the legacy type classes (the genuine ones, or the stand-ins the application holds)
        name = f"{getattr(tensor_type, '__module__', '')}.{getattr(tensor_type, '__name__', '')}"
    if name.startswith("torch.cuda."):
        retarget = state.current()
        retarget.redirected("torch.set_default_tensor_type('torch.cuda.*')")
        cpu_name = "torch." + name[len("torch.cuda."):]
        torch.set_default_device(retarget.device())
        _default_device_from_tensor_type[:] = [True]
        _default_device_named_cuda[:] = [True] if retarget.type == "cpu" else []
        return torch.set_default_tensor_type(cpu_name)
    if _default_device_from_tensor_type:  # back to a host type: the device a CUDA type set goes too
        _default_device_from_tensor_type.clear()
        _default_device_named_cuda.clear()
        torch.set_default_device(None)
    return torch.set_default_tensor_type(tensor_type)


#: [True] while the default device is the target because the application set a torch.cuda tensor type.
_default_device_from_tensor_type: list = []


def _load(f, map_location=None, pickle_module=None, *args, **kwargs):
    """`torch.load` in application code: without `map_location`, what was saved on a CUDA device
    loads on the target, as it loads on the GPU on a GPU machine (torch alone would stop: "Attempting
    to deserialize object on a CUDA device"); a `map_location` given positionally maps as a keyword.
    The torch.device objects it holds that name CUDA are the target's (device_values.py)."""
    asked = map_location
    if kwargs.get("mmap") and state.current().type == "cpu":
        map_location = runtime.mapped_into_memory(asked)
    elif map_location is None and not state.current().backend.loads_to_device:
        map_location = host_loading.HostStorages()
    elif map_location is None:
        restored_any = []

        def map_location(storage, location: str):
            restored = _restore_cuda_on_target(storage, location)
            if restored is not None and not restored_any:
                restored_any.append(True)
                state.current().redirected("torch.load of tensors saved on CUDA")
            return restored
    else:
        map_location = runtime.map_location(None, map_location)
    pickle_module = device_values.pickle_module_for(pickle_module, kwargs.get("weights_only"))
    load = host_loading.load if isinstance(map_location, (host_loading.HostStorages, host_loading.HostFunction)) \
        else torch.load
    result = load(f, map_location, pickle_module, *args, **kwargs)
    if device_values.uses_pickle_module(pickle_module):
        return result
    return device_values.map_devices(result)  # the weights-only unpickler: devices in its containers


def _jit_load(f, map_location=None, _extra_files=None, _restore_shapes=False):
    """`torch.jit.load` in application code: without `map_location`, an archive saved on a CUDA device
    (a model traced or scripted on a GPU machine) loads on the target, as it loads on the GPU there
    (torch alone stops: "Could not run 'aten::empty_strided' with arguments from the 'CUDA'
    backend"); an archive saved on the host loads as torch loads it. A `map_location` given
    positionally maps as a keyword. The CUDA devices its graphs hold as constants (a GPU trace of
    `torch.arange(n, device=x.device)`) are the target's, as in the application's own scripted code."""
    retarget = state.current()
    if map_location is not None:
        module = torch.jit.load(f, runtime.map_device(map_location), _extra_files, _restore_shapes)
    else:
        start = None
        try:  # a path, or a file object read again from here if it can be (a pipe cannot)
            if getattr(f, "seekable", lambda: False)():
                start = f.tell()
        except (OSError, ValueError):
            start = None
        try:
            module = torch.jit.load(f, None, _extra_files, _restore_shapes)
        except (RuntimeError, NotImplementedError) as error:
            if "'CUDA' backend" not in str(error) and "CUDA" not in str(error).split("\n", 1)[0]:
                raise
            if not isinstance(f, (str, os.PathLike)) and start is None:
                raise  # read once already: it cannot be read again on the target
            if start is not None:
                f.seek(start)
            module = torch.jit.load(f, retarget.device(None), _extra_files, _restore_shapes)
            retarget.redirected("torch.jit.load of an archive saved on CUDA")
    if torchscript.map_loaded(module, retarget):  # devices a GPU trace recorded as constants
        retarget.redirected("torch.jit.load of an archive with CUDA device constants")
    return module


def _restore_cuda_on_target(storage, location: str):
    if not location.startswith("cuda"):
        return None  # torch's own restore
    return runtime.restore_location(storage, location)


def _save(obj, f, pickle_module=None, *args, **kwargs):
    """`torch.save` in application code: tensors on the target are recorded as saved on CUDA (the
    device ordinal the application knows them by), so the checkpoint is the one the program writes on
    a GPU machine: the original code loads it on CUDA unchanged (the way back), and torchport loads
    it on the target. Only the location tags differ from torch's own; on the CPU target, only the
    devices the application made from CUDA names are."""
    import pickle

    pickle_module = pickle if pickle_module is None else pickle_module
    retarget = state.current()
    if retarget is not None:
        pickle_module = _CudaTagging(pickle_module, retarget)
    return torch.save(obj, f, pickle_module, *args, **kwargs)


class _CudaTagging:
    """A pickle module whose Pickler writes the target's storage locations, and its torch.device
    objects, as 'cuda:N' (torch.save hands its Pickler the persistent_id that records each storage's
    location). On the CPU target, where the host's storages and devices are the target's too, only
    the devices the application made from CUDA names are written as CUDA's."""

    def __init__(self, module, retarget):
        self._module = module
        target_type = retarget.type if retarget.accelerator else None
        visible = retarget.visible()

        def cuda_tag(location: str) -> str:
            kind, _, index = location.partition(":")
            if kind != target_type:
                return location
            if not index.isdigit():
                return "cuda"
            index = int(index)
            return f"cuda:{visible.index(index) if index in visible else index}"

        def retag(found):
            if isinstance(found, tuple) and len(found) >= 4 and found[0] == "storage" and isinstance(found[3], str):
                return (*found[:3], cuda_tag(found[3]), *found[4:])
            return found

        base_slot = getattr(module.Pickler, "persistent_id", None)

        class Pickler(module.Pickler):
            # torch.save subclasses the Pickler with a persistent_id method (read by the C pickler
            # when it initialises): an instance attribute set first takes its place. The legacy
            # format assigns `pickler.persistent_id = function` instead: the property wraps it.
            def __init__(self, *args, **kwargs):
                own = type(self).__dict__.get("persistent_id")
                if callable(own):
                    bound = own.__get__(self)
                    self.__dict__["persistent_id"] = lambda obj: retag(bound(obj))
                super().__init__(*args, **kwargs)

            def reducer_override(self, obj):
                # a torch.device of the target (`torch.save(args)` holding args.device) is CUDA's too,
                # with the ordinal the application made it for ('cuda' stays 'cuda')
                if type(obj) is _real_device:
                    ordinal = retarget.cuda_ordinal(obj)
                    if ordinal is not False:
                        return _real_device, (("cuda",) if ordinal is None else ("cuda", ordinal))
                    if obj.type == target_type:
                        return _real_device, (cuda_tag(str(obj)),)
                return NotImplemented

            @property
            def persistent_id(self):
                return base_slot.__get__(self) if base_slot is not None else None

            @persistent_id.setter
            def persistent_id(self, function):
                wrapped = lambda obj: retag(function(obj))  # noqa: E731
                if base_slot is not None and hasattr(base_slot, "__set__"):
                    base_slot.__set__(self, wrapped)
                else:
                    self.__dict__["persistent_id"] = wrapped

        self.Pickler = Pickler

    def __getattr__(self, name):
        return getattr(self._module, name)


def _manual_seed(seed):
    """`torch.manual_seed(s)` in application code seeds every device, as on a GPU machine; torch does not
    reach every target's generator (torch_xla keeps its own), so the target's is seeded too (with the
    same seed, which repeats what torch did where it does reach it)."""
    generator = torch.manual_seed(seed)
    retarget = state.current()
    if retarget is not None and retarget.accelerator:
        retarget.backend.device_module().manual_seed(int(seed))
    return generator


def _fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices", device_type=None):
    """`torch.random.fork_rng` in application code: its device is CUDA ("cuda", or the default where
    no accelerator is found), so the target's generator is forked; on the CPU the host generator,
    which torch always forks, is the device's."""
    if device_type in (None, "cuda"):
        retarget = state.current()
        if enabled and devices is not None and len(devices) == 0 and cuda_api.shares_host_generator(retarget):
            retarget.decide("torch.random.fork_rng(devices=[])", f"forks the host generator, which on "
                                                                 f"{retarget.backend.name} also draws the device's "
                                                                 "random numbers: device draws inside the block are "
                                                                 "rewound at its end, where a GPU's go on",
                            kind="adapted")
        if retarget.accelerator:
            device_type = retarget.type
            if getattr(torch, device_type, None) is None:  # torch_xla registers no torch.xla module
                return _fork_device_rng(retarget.backend.device_module(), devices, enabled)
        else:
            devices = []
    return torch.random.fork_rng(devices, enabled, _caller, _devices_kw, device_type)


@contextlib.contextmanager
def _fork_device_rng(module, devices, enabled: bool):
    """fork_rng for a target whose RNG torch cannot reach (no torch.<type> module): the host
    generator as torch forks it, the device's through the backend's device module."""
    with torch.random.fork_rng(devices=[], enabled=enabled):
        if not enabled or (devices is not None and len(devices) == 0):
            yield
            return
        saved = module.get_rng_state()
        try:
            yield
        finally:
            module.set_rng_state(saved)


def _get_device_module(device=None):
    """`torch.get_device_module('cuda')` (or of the current accelerator, or of a device standing for
    CUDA: `torch.device("cuda")`, a tensor's on the target) in application code is the torch.cuda
    facade: the application runs on a CUDA machine."""
    if device is None or (isinstance(device, str) and device.split(":")[0] == "cuda") or (
        isinstance(device, _real_device) and (device.type == "cuda" or state.current().stands_for_cuda(device))
    ):
        return _facades.cuda
    return torch.get_device_module(device)


class Facades:
    """The facade modules for one activation, and the `__import__` that hands them out."""

    def __init__(self):
        import torch.distributed as real_distributed

        self.cuda = cuda_api.build_cuda_module()
        self.accelerator = accelerator_api.build_accelerator_module(self.cuda)
        self.amp = _facade_module(
            torch.amp,
            {
                "autocast": amp.autocast,
                "GradScaler": amp.GradScaler,
                "custom_fwd": amp.custom_fwd,
                "custom_bwd": amp.custom_bwd,
            },
        )
        import torch.distributed.device_mesh as real_device_mesh

        self.device_mesh = _facade_module(real_device_mesh, {"init_device_mesh": distributed.init_device_mesh})
        self.distributed = _facade_module(
            real_distributed,
            {"init_process_group": distributed.init_process_group, "new_group": distributed.new_group,
             "get_backend": distributed.get_backend, "is_nccl_available": distributed.is_nccl_available,
             "init_device_mesh": distributed.init_device_mesh, "device_mesh": self.device_mesh},
        )
        self.backends = backend_flags.build_backends_module(torch.backends)
        self.random = _facade_module(torch.random, {"fork_rng": _fork_rng, "manual_seed": _manual_seed})
        self.attention = _facade_module(torch.nn.attention, {"sdpa_kernel": attention.sdpa_kernel})
        self.autograd_profiler = _facade_module(torch.autograd.profiler, {"emit_nvtx": profiler.emit_nvtx})
        self.autograd = _facade_module(torch.autograd, {"profiler": self.autograd_profiler})
        self.profiler = _facade_module(torch.profiler, {"supported_activities": profiler.supported_activities})
        self.parallel = _facade_module(torch.nn.parallel, {"DataParallel": data_parallel.DataParallel,
                                                           "data_parallel": data_parallel.data_parallel})
        self.jit = _facade_module(torch.jit, {"load": _jit_load})
        self.nn = _facade_module(torch.nn, {"SyncBatchNorm": sync_batchnorm.SyncBatchNorm,
                                            "DataParallel": data_parallel.DataParallel,
                                            "parallel": self.parallel,
                                            "attention": self.attention})
        self.torch = _facade_module(
            torch,
            {
                "cuda": self.cuda,
                "accelerator": self.accelerator,
                "amp": self.amp,
                "distributed": self.distributed,
                "backends": self.backends,
                "random": self.random,
                "nn": self.nn,
                "autograd": self.autograd,
                "profiler": self.profiler,
                "jit": self.jit,
                "device": DeviceFacade,
                "Generator": GeneratorFacade,
                "autocast": amp.autocast,
                "is_autocast_enabled": amp.is_autocast_enabled,
                "get_autocast_dtype": amp.get_autocast_dtype,
                "get_autocast_gpu_dtype": amp.get_autocast_gpu_dtype,
                "set_autocast_enabled": amp.set_autocast_enabled,
                "set_autocast_dtype": amp.set_autocast_dtype,
                "set_autocast_gpu_dtype": amp.set_autocast_gpu_dtype,
                "set_default_device": _set_default_device,
                "get_default_device": _get_default_device,
                "set_default_tensor_type": _set_default_tensor_type,
                "get_device_module": _get_device_module,
                "load": _load,
                "save": _save,
                "compile": compiler.compile,
                "manual_seed": _manual_seed,
            },
        )
        #: module name -> facade, for every real module the application may import.
        self.by_name = {
            "torch": self.torch,
            "torch.cuda": self.cuda,
            "torch.accelerator": self.accelerator,
            "torch.cuda.amp": self.cuda.amp,
            "torch.cuda.nvtx": self.cuda.nvtx,
            "torch.cuda.profiler": self.cuda.profiler,
            "torch.cuda.memory": self.cuda.memory,
            "torch.cuda.comm": self.cuda.comm,
            "torch.cuda.nccl": self.cuda.nccl,
            "torch.cuda.graphs": self.cuda.graphs,
            "torch.cuda.jiterator": self.cuda.jiterator,
            "torch.amp": self.amp,
            "torch.distributed": self.distributed,
            "torch.distributed.device_mesh": self.device_mesh,
            "torch.backends": self.backends,
            "torch.backends.cudnn": self.backends.cudnn,
            "torch.backends.cuda": self.backends.cuda,
            "torch.random": self.random,
            "torch.nn": self.nn,
            "torch.nn.attention": self.attention,
            "torch.nn.parallel": self.parallel,
            "torch.autograd": self.autograd,
            "torch.autograd.profiler": self.autograd_profiler,
            "torch.profiler": self.profiler,
            "torch.jit": self.jit,
        }


_facades: Facades | None = None
