"""The `torch.cuda` the application sees: the same API, answered by the target backend.

Where the target has a real equivalent it is used (synchronize, memory statistics, streams and
events through torch.Stream / torch.Event); where the target is the CPU, calls with no meaning
there (set_device, empty_cache) are recorded as no-ops, events time with a real clock, and
streams are context managers that run work in order. CUDA-only features with no substitute
(CUDA graphs, IPC, jiterator) raise an error naming the call site and the alternative.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import threading
import time
import types
import warnings
import weakref

import torch

from torchport.retarget import amp, state
from torchport.retarget.standin import StandIn, facade_module, mirror
from torchport.retarget.traced import constant_in_compiled_code

__all__ = ["build_cuda_module", "Event", "Stream"]

_real_cuda = torch.cuda


def _rt() -> state.Retarget:
    return state.current()


# -- devices ---------------------------------------------------------------------------------
#: A question about the devices (CUDA_VISIBLE_DEVICES is read at activation) asked in a function
#: torch.compile traces: answered once at trace time and held as a constant, as the compiler does for
#: torch.cuda's own (`torch.cuda.is_available()` in a compiled function); the device current when the
#: function was traced stays its answer to current_device().
_constant_in_compiled_code = constant_in_compiled_code


@_constant_in_compiled_code
def is_available() -> bool:
    retarget = _rt()
    retarget.redirected("torch.cuda.is_available")
    return bool(retarget.visible())


@_constant_in_compiled_code
def device_count() -> int:
    retarget = _rt()
    retarget.redirected("torch.cuda.device_count")
    return len(retarget.visible())


@_constant_in_compiled_code
def current_device() -> int:
    retarget = _rt()
    retarget.redirected("torch.cuda.current_device")
    return _current_in(retarget)


def _current_in(retarget) -> int:
    visible = retarget.visible()
    if not visible:
        raise RuntimeError("No CUDA GPUs are available")
    if retarget.current_ordinal is not None:
        return retarget.current_ordinal
    if not retarget.accelerator:
        return 0
    index = retarget.backend.current_index()
    return visible.index(index) if index in visible else 0


def set_device(device) -> None:
    retarget = _rt()
    if not (isinstance(device, torch.device) and retarget.stands_for_cuda(device)):
        from torch.cuda._utils import _get_device_index

        _get_device_index(device)  # CUDA's ValueError for None, 'cuda' without an index, 'cpu', 1.5
    ordinal = _ordinal(device) if isinstance(device, (int, str, torch.device)) else None
    if ordinal is not None and ordinal >= 0 and retarget.visible():
        # what current_device() answers, as on CUDA; an ordinal past the devices the application sees
        # (mp.spawn ranks written for more GPUs) shares one of them, as its tensors do (`Retarget.device`)
        retarget.device(ordinal)
        retarget.current_ordinal = ordinal
    if not retarget.accelerator:
        retarget.noop("torch.cuda.set_device", "the CPU has one device")
        return
    retarget.redirected("torch.cuda.set_device")
    index = device if isinstance(device, int) else torch.device(retarget.map_string(str(device))).index
    if index is not None:
        retarget.backend.set_current_index(retarget.index(index))


@contextlib.contextmanager
def _current_index(backend, index: int):
    """Device `index` of `backend` current inside the block, the previous one after it."""
    previous = backend.current_index()
    backend.set_current_index(index)
    try:
        yield
    finally:
        backend.set_current_index(previous)


def _selected_ordinal(value) -> int:
    """The CUDA ordinal `torch.cuda.device(value)` selects, read as torch.cuda reads it
    (`_get_device_index(value, optional=True)`) from the application's values: an integer as it is
    (negative: none), 'cuda:N' / a device made from it N, 'cuda' / None the current device, another
    `torch.cuda.device` its `idx`. A device of the target that was not made from a CUDA name (a
    tensor's `.device`) is the CUDA device it stands for; a host device or string raises as on CUDA."""
    retarget = _rt()
    if isinstance(value, _real_cuda.device):
        return value.idx
    if isinstance(value, bool) or not isinstance(value, (int, str, torch.device, type(None))):
        raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{value}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        match = state._CUDA_STRING.match(value.strip())
        if match is None:
            raise ValueError(f"Expected a cuda device, but got: {torch.device(value)}")
        value = retarget.device(None if match.group(1) is None else int(match.group(1)))
    ordinal = None if value is None else retarget.cuda_ordinal(value)
    if ordinal is False:
        if value.type != retarget.type:
            raise ValueError(f"Expected a cuda device, but got: {value}")
        ordinal = retarget.ordinal_of(value.index)
    return _current_ordinal() if ordinal is None else ordinal


def _current_ordinal() -> int:
    """current_device()'s answer, or -1 where the application sees no CUDA device."""
    retarget = _rt()
    return _current_in(retarget) if retarget.visible() else -1


class device(_real_cuda.device):  # noqa: N801 - mirrors torch.cuda.device
    """`with torch.cuda.device(i):` on the target: torch's class (`isinstance`, `idx`, `prev_idx`),
    selecting the target device that CUDA ordinal `i` names, so `current_device()` inside the block
    answers `i` as on a GPU machine; a negative ordinal or None with no device is a no-op, as there."""

    def __init__(self, device):
        self.idx = _selected_ordinal(device)
        self.prev_idx = -1
        self._restore = None

    def __enter__(self):
        retarget = _rt()
        retarget.redirected("torch.cuda.device")
        self.prev_idx = _current_ordinal()
        if self.idx < 0 or self.idx == self.prev_idx:
            self._restore = None
            return
        retarget.device(self.idx)  # an ordinal past the target's devices shares one, reported
        context = (_current_index(retarget.backend, retarget.index(self.idx)) if retarget.accelerator
                   else contextlib.nullcontext())
        context.__enter__()
        self._restore = (context, retarget.select(self.idx))

    def __exit__(self, *exc_info):
        if self._restore is not None:
            context, previous = self._restore
            self._restore = None
            _rt().select(previous)
            context.__exit__(*exc_info)
        return False


class device_of(device, _real_cuda.device_of):  # noqa: N801 - mirrors torch.cuda.device_of
    """`with torch.cuda.device_of(x):` the device of a tensor or storage on the target, by its CUDA
    ordinal (`x.get_device()` as the application reads it); a no-op (idx -1) for one on the host."""

    def __init__(self, obj):
        retarget = _rt()
        tensor_device = getattr(obj, "device", None)
        if tensor_device.__class__ is torch.device and retarget.holds(tensor_device):
            super().__init__(retarget.ordinal_of(tensor_device.index))
        else:
            super().__init__(-1)


def synchronize(device=None) -> None:
    retarget = _rt()
    retarget.redirected("torch.cuda.synchronize")
    if retarget.accelerator:
        retarget.backend.synchronize(None if device is None else retarget.index(_ordinal(device)))


def _ordinal(device) -> int:
    if isinstance(device, int):
        return device
    index = torch.device(device).index if isinstance(device, str) else getattr(device, "index", None)
    return index or 0


def _queried(retarget, device) -> int:
    """The target's device index a query about CUDA device `device` (None: device 0) reads; an ordinal
    past the devices the application sees shares one of them, reported as a tensor placed there is."""
    if device is None:
        return 0
    return retarget.device(_ordinal(device)).index or 0


@_constant_in_compiled_code
def get_device_name(device=None) -> str:
    retarget = _rt()
    retarget.redirected("torch.cuda.get_device_name")
    return retarget.backend.device_name(_queried(retarget, device))


@_constant_in_compiled_code
def get_device_capability(device=None) -> tuple[int, int]:
    retarget = _rt()
    retarget.redirected("torch.cuda.get_device_capability")
    _queried(retarget, device)
    return retarget.backend.capability()


def get_arch_list() -> list[str]:
    """The architecture a CUDA build would list for the capability answered above (`sm_80` for
    (8, 0)): code that gates a kernel on `"sm_80" in get_arch_list()` decides as it does on
    `get_device_capability()`, where torch's own answer on a build without CUDA is an empty list."""
    retarget = _rt()
    retarget.redirected("torch.cuda.get_arch_list")
    major, minor = retarget.backend.capability()
    return [f"sm_{major}{minor}"]


def get_gencode_flags() -> str:
    """`nvcc`'s flags for `get_arch_list()`, as a CUDA build writes them."""
    return " ".join(f"-gencode compute={arch.replace('sm', 'compute')},code={arch}" for arch in get_arch_list())


#: The fields of CUDA's device properties that describe NVIDIA hardware (warps, caches, PCI
#: slots): no value of the target's answers them.
_HARDWARE_PROPERTIES = frozenset((
    "L2_cache_size", "gcnArchName", "max_threads_per_multi_processor", "pci_bus_id", "pci_device_id",
    "pci_domain_id", "regs_per_multiprocessor", "shared_memory_per_block", "shared_memory_per_block_optin",
    "shared_memory_per_multiprocessor", "uuid", "warp_size", "clock_rate", "memory_clock_rate", "memory_bus_width"))


class DeviceProperties(types.SimpleNamespace):
    """`torch.cuda.get_device_properties()`: the fields that describe the target (name, memory size,
    capability, processors), shown as CUDA shows them. A field of NVIDIA's hardware is absent, as
    `hasattr` probes expect, and reading it says why (a plain namespace said only its name)."""

    def __getattr__(self, name):
        if name in _HARDWARE_PROPERTIES:
            retarget = _rt()
            target = retarget.backend.name if retarget is not None else "the target"
            raise AttributeError(f"torch.cuda.get_device_properties().{name} is a property of NVIDIA's hardware, "
                                 f"which {target} does not have: branch on name, total_memory or major/minor "
                                 "instead (torchport)")
        raise AttributeError(f"'_CudaDeviceProperties' object has no attribute {name!r}")

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name={self.name!r}, major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // 2**20}MB, multi_processor_count={self.multi_processor_count})")


@_constant_in_compiled_code
def get_device_properties(device=None):
    """The fields CUDA code reads most (name, total_memory, major/minor, SMs): DeviceProperties."""
    import os

    retarget = _rt()
    retarget.redirected("torch.cuda.get_device_properties")
    index = _queried(retarget, device)
    major, minor = retarget.backend.capability()
    processors = 1 if retarget.accelerator else (os.cpu_count() or 1)
    return DeviceProperties(
        name=retarget.backend.device_name(index),
        total_memory=_total_memory(retarget, index),
        major=major,
        minor=minor,
        multi_processor_count=processors,
        is_integrated=False,
        is_multi_gpu_board=False,
        type=retarget.type,
    )


def _total_memory(retarget, index: int) -> int:
    """The device's memory size as its runtime reports it; where the runtime reports none (XLA's CPU
    runtime), the profile's, and the report says so: code sizing batches from total_memory would
    otherwise read 0 bytes."""
    total = retarget.backend.total_memory(index)
    if total > 0:
        return total
    try:
        profile = retarget.backend.profile()
    except Exception:  # a third-party backend without a profile
        return total
    retarget.decide("device memory size", f"{retarget.backend.name}'s runtime reports no memory size here: "
                                          f"total_memory and mem_get_info() read the profile's "
                                          f"{profile.memory_bytes / 2**30:g} GiB ({profile.title})", kind="device")
    return profile.memory_bytes


@_constant_in_compiled_code
def is_bf16_supported(including_emulation: bool = True) -> bool:
    """As CUDA answers it: natively from compute capability 8.0 on (the capability the target shows:
    8.0 where bf16 is fast there), and with `including_emulation` wherever bf16 tensors work."""
    retarget = _rt()
    retarget.redirected("torch.cuda.is_bf16_supported")
    supported = retarget.backend.bf16_supported()
    if not including_emulation:
        return supported and retarget.backend.capability() >= (8, 0)
    return supported


def is_tf32_supported() -> bool:
    """False: TF32 is NVIDIA's format; the target's matmuls run at their own precision (the TF32
    flags are reported no-ops)."""
    _rt().redirected("torch.cuda.is_tf32_supported")
    return False


def can_device_access_peer(device, peer_device) -> bool:
    """False: no CUDA peer-to-peer access between the target's devices (code takes its copy path)."""
    retarget = _rt()
    retarget.redirected("torch.cuda.can_device_access_peer")
    _queried(retarget, device)
    _queried(retarget, peer_device)
    return False


def get_allocator_backend() -> str:
    """'native': the caching allocator's answer (no cudaMallocAsync on the target)."""
    _rt().redirected("torch.cuda.get_allocator_backend")
    return "native"


def is_initialized() -> bool:
    return True


def init() -> None:
    return None


# -- memory ----------------------------------------------------------------------------------
def _memory(stat: str):
    def function(device=None) -> int:
        retarget = _rt()
        if not retarget.accelerator:
            retarget.noop(f"torch.cuda.{stat}", "the CPU keeps no device memory statistics (0)")
            return 0
        retarget.redirected(f"torch.cuda.{stat}")
        return retarget.backend.memory_stat(stat, None if device is None else retarget.index(_ordinal(device)))

    function.__name__ = stat
    return function


def reset_peak_memory_stats(device=None) -> None:
    retarget = _rt()
    if not retarget.accelerator:
        retarget.noop("torch.cuda.reset_peak_memory_stats", "the CPU keeps no device memory statistics")
        return
    retarget.redirected("torch.cuda.reset_peak_memory_stats")
    retarget.backend.reset_peak_memory_stats(None if device is None else retarget.index(_ordinal(device)))


def empty_cache() -> None:
    retarget = _rt()
    if not retarget.accelerator:
        retarget.noop("torch.cuda.empty_cache", "the CPU has no caching allocator to empty")
        return
    retarget.redirected("torch.cuda.empty_cache")
    retarget.backend.device_module().empty_cache()


# Every key `torch.cuda.memory_stats()` has on a GPU machine (CUDA's caching allocator), with the
# value an allocator that never split, retried or failed reports.
_POOLED_STATS = ("active", "active_bytes", "allocated_bytes", "allocation", "inactive_split",
                 "inactive_split_bytes", "requested_bytes", "reserved_bytes", "segment")
_METRICS = ("allocated", "current", "freed", "peak")
CUDA_MEMORY_STATS: dict[str, int] = dict(sorted(
    [(f"{stat}.{pool}.{metric}", 0) for stat in _POOLED_STATS
     for pool in ("all", "large_pool", "small_pool") for metric in _METRICS]
    + [(f"{stat}.{metric}", 0) for stat in ("oversize_allocations", "oversize_segments") for metric in _METRICS]
    + [("max_split_size", -1), ("num_alloc_retries", 0), ("num_device_alloc", 0), ("num_device_free", 0),
       ("num_ooms", 0), ("num_oom_rejections", 0), ("num_sync_all_streams", 0)]
))


def memory_stats(device=None) -> dict:
    """CUDA's keys, each read from the target's allocator where it keeps that statistic; the
    others read what an allocator that never split, retried or failed reports (named in the report)."""
    retarget = _rt()
    kept = retarget.backend.memory_stats(None if device is None else retarget.index(_ordinal(device)))
    missing = [key for key in CUDA_MEMORY_STATS if key not in kept]
    if not kept:
        retarget.noop("torch.cuda.memory_stats", f"the {retarget.backend.name} target keeps no device memory "
                      "statistics: every value reads 0")
    elif missing:
        retarget.noop("torch.cuda.memory_stats", f"{len(missing)} of CUDA's {len(CUDA_MEMORY_STATS)} statistics "
                      f"are not kept by the {retarget.backend.name} target and read 0 (e.g. {', '.join(missing[:3])})")
    else:
        retarget.redirected("torch.cuda.memory_stats")
    stats = collections.OrderedDict(CUDA_MEMORY_STATS)
    stats.update((key, value) for key, value in kept.items() if key in CUDA_MEMORY_STATS)
    return stats


def memory_stats_as_nested_dict(device=None) -> dict:
    """`memory_stats()` nested as CUDA's allocator reports it (`["allocated_bytes"]["all"]["peak"]`)."""
    nested: dict = {}
    for key, value in memory_stats(device).items():
        *path, last = key.split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return nested


def memory_summary(device=None, abbreviated: bool = False) -> str:
    stats = memory_stats(device)
    return "\n".join(f"{key}: {value}" for key, value in stats.items())


def device_memory_used(device=None) -> int:
    """`torch.cuda.device_memory_used()` (nvidia-smi's used memory): the device's size less its free memory."""
    free, total = mem_get_info(device)
    return total - free


def mem_get_info(device=None) -> tuple[int, int]:
    retarget = _rt()
    retarget.redirected("torch.cuda.mem_get_info")
    index = retarget.index(_ordinal(device)) if device is not None else None
    total = _total_memory(retarget, index or 0)
    return min(retarget.backend.free_memory(index, total), total), total


# Allocator history (`torch.cuda.memory._record_memory_history` / `_snapshot` / `_dump_snapshot`, the
# memory-debugging workflow of pytorch.org/memory_viz): the target's own where its device module
# records one, else nothing is recorded and snapshots are empty, in CUDA's format, reported.
def _target_memory_module():
    retarget = _rt()
    if not retarget.accelerator:
        return None
    memory = getattr(retarget.backend.device_module(), "memory", None)
    return memory if hasattr(memory, "_record_memory_history") and hasattr(memory, "_snapshot") else None


def _no_history(api: str) -> None:
    retarget = _rt()
    retarget.noop(api, f"the {retarget.backend.name} allocator records no history: memory snapshots are empty")


def _record_memory_history(*args, **kwargs) -> None:
    memory = _target_memory_module()
    if memory is None:
        _no_history("torch.cuda.memory._record_memory_history")
        return None
    _rt().redirected("torch.cuda.memory._record_memory_history")
    return memory._record_memory_history(*args, **kwargs)


def _snapshot(*args, **kwargs) -> dict:
    memory = _target_memory_module()
    if memory is None:
        _no_history("torch.cuda.memory._snapshot")
        return {"segments": [], "device_traces": [[]]}
    _rt().redirected("torch.cuda.memory._snapshot")
    return memory._snapshot(*args, **kwargs)


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    import pickle

    with open(filename, "wb") as handle:
        pickle.dump(_snapshot(), handle)


def memory_snapshot(*args, **kwargs) -> list:
    return _snapshot()["segments"]


# -- random numbers --------------------------------------------------------------------------
def shares_host_generator(retarget) -> bool:
    """Whether the target's random draws come from the host generator (the CPU; a device whose
    generator is the host's, as the emulated one's): seeding it seeds the host's draws too."""
    if not retarget.accelerator:
        return True
    generators = getattr(retarget.backend.device_module(), "default_generators", ()) or ()
    return any(generator is torch.default_generator for generator in generators)


def manual_seed(seed: int) -> None:
    retarget = _rt()
    retarget.redirected("torch.cuda.manual_seed")
    if shares_host_generator(retarget):
        _seed_host(retarget, "torch.cuda.manual_seed", seed)
    else:
        retarget.backend.device_module().manual_seed(seed)


def _seed_host(retarget, api: str, seed: int | None) -> None:
    """Where the device's draws come from the host generator (its state is what get_rng_state
    gives): seeding it keeps them reproducible after torch.cuda.manual_seed(s), as on CUDA; host
    draws restart with them, one generator serving both (reported). `seed` None: a random seed."""
    retarget.decide(api, f"seeds the host generator: on {retarget.backend.name} it also draws the device's "
                         "random numbers (host draws, such as a DataLoader's shuffle, restart with it)",
                    kind="adapted")
    if seed is None:
        torch.default_generator.seed()
    else:
        torch.default_generator.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    retarget = _rt()
    retarget.redirected("torch.cuda.manual_seed_all")
    if shares_host_generator(retarget):
        _seed_host(retarget, "torch.cuda.manual_seed_all", seed)
    else:
        module = retarget.backend.device_module()
        getattr(module, "manual_seed_all", module.manual_seed)(seed)


def seed() -> None:
    retarget = _rt()
    retarget.redirected("torch.cuda.seed")
    if shares_host_generator(retarget):
        _seed_host(retarget, "torch.cuda.seed", None)
    else:
        retarget.backend.device_module().seed()


seed_all = seed


def initial_seed() -> int:
    retarget = _rt()
    retarget.redirected("torch.cuda.initial_seed")
    if retarget.accelerator:
        return retarget.backend.device_module().initial_seed()
    return torch.initial_seed()


def get_rng_state(device="cuda"):
    _rt().redirected("torch.cuda.get_rng_state")
    return _cuda_shaped(_rng_state())


def _rng_state():
    if _rt().accelerator:
        return _rt().backend.device_module().get_rng_state()
    return torch.get_rng_state()


#: The bytes of a CUDA generator's state: Philox's 64-bit seed and 64-bit offset.
_CUDA_STATE_BYTES = 16
#: What follows those 16 bytes in the storage of a state `get_rng_state` gave: this marker, the length
#: of the target's own state (8 bytes), the state.
_CARRIED_MARK = b"torchprt"
_CARRIED_HEADER = _CUDA_STATE_BYTES + len(_CARRIED_MARK) + 8


#: The generators the application made for CUDA (`torch.Generator(device="cuda")`): their states read
#: as a CUDA generator's (`generator_get_state`).
CUDA_GENERATORS: weakref.WeakSet = weakref.WeakSet()


def generator_get_state(generator):
    """`generator.get_state()` in the application: for a generator it made for CUDA, or one of
    `torch.cuda.default_generators` where they are not the host's, the 16-byte state a CUDA generator
    gives (`_cuda_shaped`, the target's own state carried behind it), so a checkpoint holding it
    restores on a GPU machine and here; anything else's own state."""
    state = generator.get_state()
    if generator in CUDA_GENERATORS or (_rt().accelerator and any(generator is own for own in _default_generators())):
        return _cuda_shaped(state, int(generator.initial_seed()))
    return state


def _cuda_shaped(state, seed: int | None = None):
    """The target generator's `state` as the application's CUDA generator state: 16 bytes, as CUDA's
    (`torch.cuda.set_rng_state` on a GPU machine takes nothing else, so a checkpoint holding it loads
    there with the original code: the way back), holding the target's seed and, as the offset, a
    multiple of 4 digested from the target's state (it changes with every draw, so two states compare
    as CUDA's do; the target's generator keeps no count of draws to give CUDA's Philox offset). The
    target's own state rides in the same
    storage, marked, behind the 16 bytes the tensor shows: `torch.save` keeps a tensor's whole
    storage, so `set_rng_state` of the tensor, or of the tensor a checkpoint gives back, restores the
    target's generator exactly. (A target whose state is 16 bytes, or not a tensor, as torch_xla's
    seed, gives it as it is.)"""
    import zlib

    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.numel() == _CUDA_STATE_BYTES:
        return state
    own = state.detach().cpu().contiguous().reshape(-1)
    offset = 4 * zlib.crc32(own.numpy().tobytes())
    seed = _initial_seed(_rt()) if seed is None else seed
    packed = torch.empty(_CARRIED_HEADER + own.numel(), dtype=torch.uint8)
    packed[:_CUDA_STATE_BYTES].view(torch.int64).copy_(torch.tensor([seed - 2**64 if seed >= 2**63 else seed, offset]))
    packed[_CUDA_STATE_BYTES:_CARRIED_HEADER - 8].copy_(torch.frombuffer(bytearray(_CARRIED_MARK), dtype=torch.uint8))
    packed[_CARRIED_HEADER - 8:_CARRIED_HEADER].view(torch.int64).fill_(own.numel())
    packed[_CARRIED_HEADER:].copy_(own)
    return packed[:_CUDA_STATE_BYTES]


def _initial_seed(retarget) -> int:
    """The seed of the target's generator (the host's where the target has no `initial_seed`)."""
    seeded = getattr(retarget.backend.device_module(), "initial_seed", None) if retarget.accelerator else None
    return int(seeded()) if seeded is not None else torch.initial_seed()


def cuda_shaped(state) -> bool:
    """Whether `state` has the shape of a CUDA generator's state (16 bytes)."""
    return isinstance(state, torch.Tensor) and state.dtype == torch.uint8 and state.numel() == _CUDA_STATE_BYTES


def carries_state(state) -> bool:
    """Whether `state` is a `_cuda_shaped` tensor carrying the target generator's own state."""
    return _carried_state(state) is not None


def _carried_state(state):
    """The target generator's own state carried behind a `_cuda_shaped` tensor, or None."""
    if not cuda_shaped(state) or state.device.type != "cpu" or state.storage_offset() != 0 or state.stride() != (1,):
        return None
    storage = state.untyped_storage()
    size = storage.nbytes()
    if size <= _CARRIED_HEADER:
        return None
    whole = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (size,))
    if (bytes(whole[_CUDA_STATE_BYTES:_CARRIED_HEADER - 8].tolist()) != _CARRIED_MARK
            or int(whole[_CARRIED_HEADER - 8:_CARRIED_HEADER].view(torch.int64)) != size - _CARRIED_HEADER):
        return None
    return whole[_CARRIED_HEADER:].clone()


def set_rng_state(new_state, device="cuda") -> None:
    _rt().redirected("torch.cuda.set_rng_state")
    _set_rng_state(new_state)


def generator_set_state(generator, new_state):
    """`generator.set_state(new_state)` in the application. For one of `torch.cuda.default_generators`
    (Megatron's and DeepSpeed's RNG trackers restore `torch.cuda.get_rng_state()` through them) a
    CUDA-shaped state is `set_rng_state`'s; for another generator, the target's own state a
    `_cuda_shaped` one carries; anything else as torch takes it."""
    if cuda_shaped(new_state):
        if any(generator is own for own in _default_generators()):
            _set_rng_state(new_state)
            return generator
        carried = _carried_state(new_state)
        if carried is not None:
            new_state = carried
    return generator.set_state(new_state)


def _set_rng_state(new_state) -> None:
    retarget = _rt()
    carried = _carried_state(new_state)
    if carried is not None:  # what get_rng_state gave: the target's own state, restored exactly
        new_state = carried
    else:
        gpu = _gpu_generator_state(new_state)
        if gpu is not None:  # a checkpoint written on a GPU machine, or a copy of the 16 bytes alone
            seed, offset = gpu
            retarget.decide("CUDA generator state", f"a 16-byte CUDA generator state (Philox: seed {seed}, offset "
                                                    f"{offset}) restored as seed {seed} on {retarget.backend.name}, "
                                                    "whose generator has another algorithm: its draws are not the "
                                                    "GPU's", kind="adapted")
            if retarget.accelerator:
                retarget.backend.device_module().manual_seed(seed)
            else:
                torch.default_generator.manual_seed(seed)
            return
    if shares_host_generator(retarget):
        retarget.decide("torch.cuda.set_rng_state", f"restores the host generator: on {retarget.backend.name} it "
                                                    "also draws the device's random numbers, so host draws made since "
                                                    "the state was taken (a DataLoader's shuffle) repeat, where a GPU's "
                                                    "host generator goes on", kind="adapted")
    if retarget.accelerator:
        retarget.backend.device_module().set_rng_state(new_state)
    else:
        torch.set_rng_state(new_state)


def _gpu_generator_state(state) -> tuple[int, int] | None:
    """(seed, offset) of a CUDA generator's state (16 bytes: Philox's 64-bit seed and offset), where
    the target's generator keeps another state; else None."""
    if not cuda_shaped(state):
        return None
    own = _rng_state()  # torch_xla's is an integer
    if isinstance(own, torch.Tensor) and own.numel() == _CUDA_STATE_BYTES:
        return None
    seed, offset = state.detach().cpu().contiguous().view(torch.int64).tolist()
    return seed % 2**64, offset


def _default_generators() -> tuple:
    """`torch.cuda.default_generators`: the generators the target's draws come from (the host's on
    the CPU; one per device where the device module has them; none where torch has no generator
    object for the device, as torch_xla)."""
    retarget = _rt()
    if not retarget.accelerator:
        return (torch.default_generator,)
    return tuple(getattr(retarget.backend.device_module(), "default_generators", ()) or ())


def _lazy_call(callable, **kwargs) -> None:
    """`torch.cuda._lazy_call`: CUDA here is always initialised (`is_initialized()`), and CUDA runs a
    lazy call at once once it is (Megatron's RNG tracker sets generator states through it)."""
    callable()


def get_rng_state_all():
    """One state per CUDA device the application sees (`states[local_rank]` under torchrun)."""
    _rt().redirected("torch.cuda.get_rng_state_all")
    return [_cuda_shaped(_rng_state()) for _ in range(len(_rt().visible()))]


def set_rng_state_all(new_states) -> None:
    """One state per CUDA device the application sees; the devices it sees share the target's
    generator where they share its device (the state of the process's own device is restored)."""
    _rt().redirected("torch.cuda.set_rng_state_all")
    if new_states:
        current = _rt().current_ordinal or 0
        _set_rng_state(new_states[current if current < len(new_states) else 0])


# -- streams and events ----------------------------------------------------------------------
def _new_standin(cls, genuine, *args, **kwargs):
    """A stand-in Event/Stream: the genuine constructor where CUDA is real, else a plain object
    (without CUDA the genuine base is a placeholder whose constructor raises)."""
    if _real_cuda.is_available():
        return genuine.__new__(cls, *args, **kwargs)
    try:
        return object.__new__(cls)
    except TypeError:
        # A CUDA build of torch on a machine without a GPU: the genuine base is the C type, which
        # alone may allocate the object. Its handle is created lazily and never used here.
        return genuine.__new__(cls)


class Event(_real_cuda.Event, metaclass=StandIn, genuine=_real_cuda.Event):
    """`torch.cuda.Event`: torch.Event on accelerators; a wall-clock event on the CPU.

    A subclass of the genuine class (isinstance, issubclass, subclassing). The CPU runs work in
    program order, so the time at `record()` is when all earlier work ended.
    """

    def __new__(cls, *args, **kwargs):
        return _new_standin(cls, _real_cuda.Event, *args, **kwargs)

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        retarget = _rt()
        retarget.redirected("torch.cuda.Event")
        self._time: float | None = None
        self._torchport_real = None
        self._synchronize = None
        if retarget.accelerator and retarget.backend.native_events:
            self._torchport_real = torch.Event(retarget.device(), enable_timing=enable_timing)
        elif retarget.accelerator:
            # No native events (lazy-tensor devices): time on the host after a synchronize.
            self._synchronize = retarget.backend.synchronize
        self.enable_timing = enable_timing

    @property
    def cuda_event(self) -> int:
        """A handle for the event once recorded, 0 before (what torch's repr and ctypes read)."""
        return id(self) if self._recorded else 0

    _recorded = False

    def record(self, stream=None) -> None:
        self._recorded = True
        if self._torchport_real is not None:
            real_stream = getattr(stream, "_torchport_real", stream)
            self._torchport_real.record(real_stream) if real_stream is not None else self._torchport_real.record()
            return
        if self._synchronize is not None:
            self._synchronize()
        self._time = time.perf_counter()

    def synchronize(self) -> None:
        if self._torchport_real is not None:
            self._torchport_real.synchronize()

    def query(self) -> bool:
        return self._torchport_real.query() if self._torchport_real is not None else True

    def wait(self, stream=None) -> None:
        if self._torchport_real is not None:
            real_stream = getattr(stream, "_torchport_real", stream)
            self._torchport_real.wait(real_stream) if real_stream is not None else self._torchport_real.wait()

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds between this event and `end_event`, as CUDA reports them; CUDA's ValueErrors
        (aten's CUDAEvent::elapsed_time) for events made without `enable_timing=True` or not
        recorded, whatever the target's own events would allow."""
        if not (self.enable_timing and getattr(end_event, "enable_timing", False)):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if not (self._recorded and getattr(end_event, "_recorded", False)):
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        if self._torchport_real is not None:
            return self._torchport_real.elapsed_time(end_event._torchport_real)
        return (end_event._time - self._time) * 1000.0


# A CUDA build of torch without a GPU (torch_xla's environment) cannot allocate even an unused
# torch.cuda.Stream: there the stand-in is a plain class (isinstance still holds, see StandIn).
_STREAM_BASES = (_real_cuda.Stream,) if torch.version.cuda is None or _real_cuda.is_available() else ()


class Stream(*_STREAM_BASES, metaclass=StandIn, genuine=_real_cuda.Stream):
    """`torch.cuda.Stream`: torch.Stream on accelerators; on the CPU work is already in order."""

    def __new__(cls, *args, **kwargs):
        return _new_standin(cls, _real_cuda.Stream, *args, **kwargs)

    def __init__(self, device=None, priority: int = 0, **kwargs):
        retarget = _rt()
        retarget.redirected("torch.cuda.Stream")
        self._torchport_real = None
        self._torchport_priority = priority
        if retarget.accelerator and retarget.backend.native_streams:
            self._torchport_real = torch.Stream(retarget.device(), priority=priority)
        elif retarget.accelerator:
            retarget.noop("torch.cuda.Stream", f"{retarget.backend.name} has no user streams; work runs in order")
        self._context = contextlib.nullcontext()

    @staticmethod
    def priority_range() -> tuple[int, int]:
        """(lowest, highest) priority: one level where the target has no stream priorities."""
        return (0, 0)

    @property
    def device(self) -> torch.device:
        real = getattr(self, "_torchport_real", None)
        return real.device if real is not None else _rt().device()

    @property
    def priority(self) -> int:
        return getattr(self, "_torchport_priority", 0)

    @property
    def cuda_stream(self) -> int:
        """The handle CUDA code reads (an int): the target stream's id; 0, the default stream's, where
        the target has no user streams."""
        real = getattr(self, "_torchport_real", None)
        return int(getattr(real, "stream_id", 0)) if real is not None else 0

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device={self.device} cuda_stream={self.cuda_stream:#x}>"

    def wait_stream(self, stream) -> None:
        if self._torchport_real is not None:
            self._torchport_real.wait_stream(getattr(stream, "_torchport_real", stream))

    def wait_event(self, event) -> None:
        if self._torchport_real is not None:
            self._torchport_real.wait_event(event._torchport_real)

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def synchronize(self) -> None:
        if self._torchport_real is not None:
            self._torchport_real.synchronize()

    def query(self) -> bool:
        return self._torchport_real.query() if self._torchport_real is not None else True

    def __enter__(self):
        if self._torchport_real is not None:
            self._context = self._torchport_real
        else:  # no user streams: the stream is still the current one inside the block, as on CUDA
            _current.__dict__.setdefault("stack", []).append(self)
        return self._context.__enter__()

    def __exit__(self, *exc_info):
        if self._torchport_real is None:
            stack = _current.__dict__.get("stack")
            if stack:
                stack.pop()
        return self._context.__exit__(*exc_info)


_default_stream: Stream | None = None
#: Per thread, where the target has no user streams: the stream set_stream chose ("set") and those
#: entered with `with torch.cuda.stream(s)` ("stack"), so current_stream() answers as on CUDA.
_current = threading.local()


def current_stream(device=None) -> Stream:
    retarget = _rt()
    if retarget.accelerator and retarget.backend.native_streams:
        wrapper = Stream.__new__(Stream)
        wrapper._torchport_real = torch.accelerator.current_stream()
        wrapper._context = contextlib.nullcontext()
        return wrapper
    stack = _current.__dict__.get("stack")
    if stack:
        return stack[-1]
    chosen = _current.__dict__.get("set")
    if chosen is not None:
        return chosen
    return default_stream(device)


def default_stream(device=None) -> Stream:
    global _default_stream
    retarget = _rt()
    if retarget.accelerator and retarget.backend.native_streams:
        return current_stream(device)
    if _default_stream is None:
        _default_stream = Stream()
    return _default_stream


def stream(stream_object):
    """`with torch.cuda.stream(s):`"""
    if stream_object is None:
        return contextlib.nullcontext()
    return stream_object


class StreamContext:
    """`with torch.cuda.StreamContext(s):`, the context manager `torch.cuda.stream(s)` returns."""

    def __init__(self, stream):
        self.stream = stream
        self._context = globals()["stream"](stream)

    def __enter__(self) -> None:  # torch's gives nothing to `as`
        self._context.__enter__()

    def __exit__(self, *exc_info):
        return self._context.__exit__(*exc_info)


def set_stream(stream_object) -> None:
    real = getattr(stream_object, "_torchport_real", None)
    if real is not None:
        torch.accelerator.set_stream(real)
    elif stream_object is not None:
        _current.set = stream_object


# -- nvtx ------------------------------------------------------------------------------------
def _noop(name: str, why: str, result=None):
    """A `torch.cuda.<name>` with nothing to do on the target: recorded (an error under --strict)."""

    def function(*args, **kwargs):
        retarget = _rt()
        retarget.noop(f"torch.cuda.{name}", why.format(target=retarget.backend.name))
        return result

    function.__name__ = name.rpartition(".")[2]
    return function


#: torch.cuda calls that only tune or clean up CUDA itself: nothing to do on the target (reported).
_NOOPS = {
    "ipc_collect": "no CUDA IPC handles to collect on {target}",
    "set_per_process_memory_fraction": "the cap on this process's device memory is not applied on {target}",
}


_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}
_sync_debug = {"mode": 0}


def set_sync_debug_mode(debug_mode) -> None:
    """CUDA's warning (or error) on operations that synchronize with the host: kept and read back,
    not applied on the target (reported; `torchport check` lists a program's host syncs)."""
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_DEBUG_MODES:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = _SYNC_DEBUG_MODES[debug_mode]
    _sync_debug["mode"] = int(debug_mode)
    if debug_mode:
        retarget = _rt()
        retarget.noop("torch.cuda.set_sync_debug_mode",
                      f"{retarget.backend.name} does not flag host synchronizations as they happen "
                      "(torchport check lists them)")


def get_sync_debug_mode() -> int:
    return _sync_debug["mode"]


def is_current_stream_capturing() -> bool:
    """False: no CUDA graph is ever being captured on the target."""
    return False


_PROFILER_WINDOW = "an Nsight capture window; {target} has none (use torch.profiler)"


class _CudaRuntime:
    """`torch.cuda.cudart()`: the CUDA runtime handle. Profiling scripts' `cudaProfilerStart()` /
    `cudaProfilerStop()` (an Nsight capture window) and offloading code's `cudaHostRegister` /
    `cudaHostUnregister` (pinning memory it holds) are reported no-ops answering `cudaSuccess` (0); any
    other call of the CUDA runtime is unsupported, named with its call site."""

    cudaProfilerStart = staticmethod(_noop("cudart().cudaProfilerStart", _PROFILER_WINDOW, 0))
    cudaProfilerStop = staticmethod(_noop("cudart().cudaProfilerStop", _PROFILER_WINDOW, 0))
    cudaHostRegister = staticmethod(_noop("cudart().cudaHostRegister", "the memory is used unpinned on {target}", 0))
    cudaHostUnregister = staticmethod(_noop("cudart().cudaHostUnregister", "nothing was pinned on {target}", 0))

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def function(*args, **kwargs):
            _rt().unsupported(f"torch.cuda.cudart().{name}", "Use torch.cuda's own API (torch.accelerator, "
                              "torch.cuda.Event, memory statistics) for what the target can do")

        function.__name__ = name
        return function


def cudart() -> _CudaRuntime:
    """The CUDA runtime handle (`_CudaRuntime`)."""
    return _CudaRuntime()


def _build_profiler() -> types.ModuleType:
    """`torch.cuda.profiler`: start/stop/profile() delimit an Nsight capture window, nothing on the target."""
    stop = _noop("profiler.stop", _PROFILER_WINDOW)
    start = _noop("profiler.start", _PROFILER_WINDOW)

    @contextlib.contextmanager
    def profile():
        start()
        try:
            yield
        finally:
            stop()

    return facade_module(_real_cuda.profiler, {"start": start, "stop": stop, "profile": profile,
                                               "init": _noop("profiler.init", _PROFILER_WINDOW), "cudart": cudart})


def _build_nvtx() -> types.ModuleType:
    module = types.ModuleType("torch.cuda.nvtx", "NVTX ranges as torch.profiler ranges on the target.")
    stack: list = []

    def range_push(message: str) -> int:
        context = torch.profiler.record_function(message)
        context.__enter__()
        stack.append(context)
        return len(stack) - 1

    def range_pop() -> int:
        if stack:
            stack.pop().__exit__(None, None, None)
        return len(stack)

    @contextlib.contextmanager
    def range(message: str, *args, **kwargs):  # noqa: A001 - mirrors torch.cuda.nvtx.range
        with torch.profiler.record_function(message.format(*args, **kwargs)):
            yield

    def mark(message: str) -> None:
        with torch.profiler.record_function(message):
            pass

    started: dict[int, torch.autograd.profiler.record_function] = {}
    handles = itertools.count(1)

    def range_start(message: str) -> int:
        """A range not tied to a stack (it may end on another thread): its handle ends it."""
        context = torch.profiler.record_function(message)
        context.__enter__()
        handle = next(handles)
        started[handle] = context
        return handle

    def range_end(range_id: int) -> None:
        context = started.pop(range_id, None)
        if context is not None:
            context.__exit__(None, None, None)

    module.range_push = range_push
    module.range_pop = range_pop
    module.range_start = range_start
    module.range_end = range_end
    module.range = range
    module.mark = mark
    return module


# -- what cannot be redirected ---------------------------------------------------------------
def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3, allow_unused_input: bool = False,
                           pool=None):
    """CUDA graphs of callables whose forward and backward then replay: on the target the callables
    run eagerly (the same results; reported). The warm-up forward passes CUDA runs on the sample
    arguments run too, so what they change (batch-norm statistics, random draws) changes as on CUDA."""
    retarget = _rt()
    retarget.noop("torch.cuda.make_graphed_callables",
                  f"{retarget.backend.name} runs the callables eagerly (no CUDA graphs; the warm-up passes run)")
    single = not isinstance(callables, tuple)
    functions = (callables,) if single else callables
    arguments = (sample_args,) if single else sample_args
    for function, args in zip(functions, arguments):
        for _ in range(num_warmup_iters):
            function(*args)
    return callables


_UNSUPPORTED = {
    "CUDAGraph": "Use torch.compile(model, mode='reduce-overhead'), which uses the target's graph capture if any",
    "graph": "Use torch.compile(model, mode='reduce-overhead')",
    "graph_pool_handle": "Use torch.compile(model, mode='reduce-overhead'), which pools its graphs' memory itself",
}
_JITERATOR_ALTERNATIVE = "Use a torch.compile'd Python function"
#: NVML's readings of an NVIDIA GPU (torch.cuda asks pynvml for them): no such library for the target.
_NVML_ALTERNATIVE = ("NVML reads NVIDIA GPUs only: read the target's own monitoring tool, or the device "
                     "metrics of `torchport serve` (/metrics)")
_UNSUPPORTED.update(dict.fromkeys(("utilization", "temperature", "power_draw", "clock_rate", "memory_usage",
                                    "list_gpu_processes"), _NVML_ALTERNATIVE))

#: torch.cuda.nccl's single-process collectives (version gates, DataParallel-style reductions).
_NCCL_ALTERNATIVE = ("Use torch.distributed: 'nccl' process groups run on the target's collectives, or "
                     "torch.cuda.comm, which runs on the target")


def _unsupported(name: str, alternative: str | None = None):
    """A stand-in for `torch.cuda.<name>` that stops with the call site and the alternative."""
    alternative = _UNSUPPORTED[name] if alternative is None else alternative

    def function(*args, **kwargs):
        _rt().unsupported(f"torch.cuda.{name}", alternative)

    function.__name__ = name.rpartition(".")[2]
    return function


def _build_graphs_and_jiterator(module: types.ModuleType) -> tuple[types.ModuleType, types.ModuleType]:
    """`torch.cuda.graphs` and `torch.cuda.jiterator` as the application sees them: modules (code
    imports names from them), whose CUDA-only entry points stop with the call site and the
    alternative, and whose other names are torch.cuda's stand-ins."""
    import torch.cuda.graphs as real_graphs
    import torch.cuda.jiterator as real_jiterator

    graphs = facade_module(real_graphs, {
        "CUDAGraph": module.CUDAGraph, "graph": module.graph, "graph_pool_handle": module.graph_pool_handle,
        "make_graphed_callables": module.make_graphed_callables,
        "is_current_stream_capturing": module.is_current_stream_capturing})
    jiterator = facade_module(real_jiterator, {
        name: _unsupported(f"jiterator.{name}", _JITERATOR_ALTERNATIVE)
        for name in ("_create_jit_fn", "_create_multi_output_jit_fn")})
    return graphs, jiterator


class _LegacyTensorType(StandIn):
    """Metaclass of `torch.cuda.FloatTensor` and kin: a tensor of that dtype on the target is one."""

    def __instancecheck__(cls, instance) -> bool:
        if cls.__dict__.get("_torchport_standin") is not cls:
            return type.__instancecheck__(cls, instance)
        retarget = _rt()
        return (isinstance(instance, torch.Tensor) and instance.dtype == cls.dtype
                and instance.layout == cls.layout and retarget is not None and retarget.holds(instance.device))

    def __subclasscheck__(cls, subclass) -> bool:
        return type.__subclasscheck__(cls, subclass)

    def __call__(cls, *args, **kwargs):
        if cls.__dict__.get("_torchport_standin") is not cls:
            return type.__call__(cls, *args, **kwargs)
        retarget = _rt()
        retarget.redirected(f"{cls.__module__}.{cls.__name__}")
        if cls.layout == torch.sparse_coo:
            # `torch.cuda.sparse.FloatTensor(indices, values[, size])` / `(*size)`: the host's legacy sparse
            # constructor (its arguments brought to the host), sent to the target
            host = [argument.cpu() if isinstance(argument, torch.Tensor) else argument for argument in args]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch's deprecation, about its own call here
                return getattr(torch.sparse, cls.__name__)(*host, **kwargs).to(retarget.device())
        if args and not isinstance(args[0], int):
            return torch.tensor(args[0], dtype=cls.dtype, device=retarget.device())
        # `torch.cuda.FloatTensor()` is an empty tensor, as the legacy constructor makes it
        return torch.empty(*(args or (0,)), dtype=cls.dtype, device=retarget.device())


def _tensor_type(dtype: torch.dtype, name: str, sparse: bool = False) -> type:
    """The stand-in for the legacy `torch.cuda.<name>` (`torch.cuda.sparse.<name>`: sparse COO
    tensors): constructor, isinstance, `x.type(T)`."""
    module = "torch.cuda.sparse" if sparse else "torch.cuda"
    namespace = {"dtype": dtype, "is_cuda": True, "layout": torch.sparse_coo if sparse else torch.strided,
                 "__module__": module, "__qualname__": name,
                 "__doc__": f"`{module}.{name}` on the target: {dtype} tensors on the target device."}
    return _LegacyTensorType(name, (), namespace, genuine=getattr(_real_cuda.sparse if sparse else _real_cuda, name))


#: 'torch.cuda.FloatTensor' -> float32, and so on (the strings `x.type()` returns on CUDA).
LEGACY_TENSOR_TYPES: dict[str, torch.dtype] = {}


class _CudaModule(types.ModuleType):
    """Unknown attributes fall through to the real torch.cuda, and are reported."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "default_generators":  # read each time: it follows the target's devices
            return _default_generators()
        value = getattr(_real_cuda, name)
        if isinstance(value, types.ModuleType):  # torch.cuda.random, torch.cuda.memory, ...
            from torchport.retarget import runtime

            return runtime.facade(value)
        if callable(value) and not isinstance(value, type):
            retarget = _rt()
            if retarget is not None:
                error = retarget.unsupported(
                    f"torch.cuda.{name}", "Use torch.accelerator or torch.get_device_module()",
                    raise_error=False,
                )
                return _stopping_clearly(value, error)
        return value


def _stopping_clearly(function, error):
    """`function` (a torch.cuda function torchport does not map, already reported), whose failure for
    want of CUDA ("Torch not compiled with CUDA enabled", a missing torch._C CUDA binding) is `error`,
    naming the call site and the alternative: torch's own message contradicts is_available()."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except (AssertionError, AttributeError, RuntimeError) as failure:
            text = str(failure)
            if "compiled with CUDA" in text or "'_cuda" in text:
                raise error from failure
            raise

    return call


def _build_comm() -> types.ModuleType:
    """torch.cuda.comm on the target's devices (retarget/cuda_comm.py)."""
    import torch.cuda.comm as real_comm

    from torchport.retarget import cuda_comm

    return facade_module(real_comm, {name: getattr(cuda_comm, name) for name in cuda_comm.__all__})


def _build_nccl() -> types.ModuleType:
    """torch.cuda.nccl: NCCL's single-process collectives do not exist off CUDA. `is_available(tensors)`
    answers False, as torch does for tensors NCCL cannot take, so code checking it takes its other
    path; the collectives and version() stop with the alternative."""
    import torch.cuda.nccl as real_nccl

    def is_available(tensors) -> bool:
        _rt().noop("torch.cuda.nccl.is_available", "no NCCL on the target: False, as for tensors NCCL cannot take")
        return False

    def unsupported(name: str):
        def function(*args, **kwargs):
            _rt().unsupported(f"torch.cuda.nccl.{name}", _NCCL_ALTERNATIVE)

        function.__name__ = name
        return function

    names = ("version", "unique_id", "init_rank", "all_reduce", "reduce", "broadcast", "all_gather",
             "reduce_scatter")
    return facade_module(real_nccl, {"is_available": is_available, **{name: unsupported(name) for name in names}})


def build_cuda_module() -> types.ModuleType:
    """A fresh `torch.cuda` facade module."""
    module = _CudaModule("torch.cuda", __doc__)
    names = [
        "is_available", "device_count", "current_device", "set_device", "device", "device_of", "synchronize",
        "get_device_name", "get_device_capability", "get_device_properties", "is_bf16_supported",
        "is_tf32_supported", "can_device_access_peer", "get_allocator_backend",
        "get_arch_list", "get_gencode_flags", "is_initialized", "init", "reset_peak_memory_stats", "empty_cache",
        "memory_stats", "memory_stats_as_nested_dict", "memory_summary", "mem_get_info", "device_memory_used", "manual_seed", "manual_seed_all", "seed", "seed_all",
        "initial_seed", "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
        "Event", "Stream", "current_stream", "default_stream", "stream", "StreamContext", "set_stream",
        "is_current_stream_capturing", "cudart", "memory_snapshot", "_lazy_call", "set_sync_debug_mode",
        "get_sync_debug_mode", "make_graphed_callables",
    ]
    namespace = globals()
    for name in names:
        setattr(module, name, namespace[name])
    for stat in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        setattr(module, stat, _memory(stat))
    module.reset_max_memory_allocated = reset_peak_memory_stats
    module.reset_max_memory_cached = reset_peak_memory_stats
    module.memory_cached = _memory("memory_reserved")
    module.max_memory_cached = _memory("max_memory_reserved")
    for name in _UNSUPPORTED:
        setattr(module, name, _unsupported(name))
    for name, why in _NOOPS.items():
        setattr(module, name, _noop(name, why))
    module.profiler = _build_profiler()
    # torch.cuda.memory holds what torch.cuda re-exports (memory_stats, ...): the same stand-ins
    defined = vars(module)
    replaced = {name: defined[name] for name, value in vars(_real_cuda.memory).items()
                if not name.startswith("__") and vars(_real_cuda).get(name) is value
                and defined.get(name, value) is not value}
    module.memory = facade_module(_real_cuda.memory, {
        **replaced, "_record_memory_history": _record_memory_history, "_snapshot": _snapshot,
        "_dump_snapshot": _dump_snapshot})
    module.nvtx = _build_nvtx()
    module.comm = _build_comm()
    module.nccl = _build_nccl()
    module.graphs, module.jiterator = _build_graphs_and_jiterator(module)
    module._initialized = True  # as is_initialized(): code gating device RNG state on the flag reads it
    module.amp = facade_module(_real_cuda.amp, {  # its submodules too (autocast_mode, grad_scaler)
        "autocast": amp.cuda_amp_autocast, "GradScaler": amp.cuda_amp_grad_scaler,
        "custom_fwd": amp.cuda_amp_custom_fwd, "custom_bwd": amp.cuda_amp_custom_bwd})
    legacy = ((torch.float32, "Float"), (torch.float16, "Half"), (torch.bfloat16, "BFloat16"),
              (torch.float64, "Double"), (torch.int64, "Long"), (torch.int32, "Int"),
              (torch.int16, "Short"), (torch.int8, "Char"), (torch.uint8, "Byte"), (torch.bool, "Bool"))
    for dtype, prefix in legacy:
        setattr(module, f"{prefix}Tensor", _tensor_type(dtype, f"{prefix}Tensor"))
        LEGACY_TENSOR_TYPES[f"torch.cuda.{prefix}Tensor"] = dtype
    sparse = [(dtype, prefix) for dtype, prefix in legacy if hasattr(_real_cuda.sparse, f"{prefix}Tensor")]
    module.sparse = facade_module(_real_cuda.sparse, {  # torch.cuda.sparse.FloatTensor and kin (no Bool)
        f"{prefix}Tensor": _tensor_type(dtype, f"{prefix}Tensor", sparse=True) for dtype, prefix in sparse})
    # `x.type(torch.cuda.sparse.DoubleTensor)` converts the dtype and keeps x's layout, as torch does
    LEGACY_TENSOR_TYPES.update({f"torch.cuda.sparse.{prefix}Tensor": dtype for dtype, prefix in sparse})
    module.OutOfMemoryError = torch.OutOfMemoryError
    mirror(_real_cuda, module, {name: value for name, value in vars(module).items()
                                if not name.startswith("__")
                                and name not in ("amp", "nvtx", "profiler", "memory", "comm", "nccl", "graphs", "jiterator",
                                                 "sparse")})
    return module
