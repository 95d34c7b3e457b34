"""torch.device values standing for CUDA stay so where the application loads or copies them.

Loading: a device saved as CUDA's is the target's (the in-place walk of loaded containers, `map_in_place`, is
also the one host_loading copies tensors with).

A checkpoint written on a GPU machine (or by torchport, which writes the target's devices as CUDA's:
the way back) holds `torch.device('cuda', 0)` wherever the program kept one (`args.device`,
`{'device': device}`). On a GPU machine it loads equal to the program's own `torch.device('cuda', 0)`;
here the program's device is the target's, so the loaded one is made the same way: the object the
application gets from `torch.device('cuda', 0)` (on the CPU target, the one that reads `.type`
'cuda').

Two ways, as torch.load has two unpicklers: with `weights_only=False` (or the application's own
pickle module) the devices are made by an Unpickler that builds `torch.device` the application's way,
wherever they sit (in an argparse Namespace, a dataclass, a module's attribute); with the
weights-only unpickler (torch's default), which takes no pickle module and can only build containers
and allow-listed types, the devices in the loaded dicts, lists and tuples are replaced.

Copying: on the CPU target a device made from a CUDA name is the host's device, told apart only by
being the object torchport made for that ordinal (`Retarget.cuda_ordinal`). torch.device is an
immutable value, so `copy.copy` / `copy.deepcopy` return it itself, as they return an int or a str:
`copy.deepcopy(args)` keeps `args.device.type == 'cuda'`. (A device pickled with `pickle` itself on
the CPU target comes back as the host's; `torch.save` writes it as CUDA's, as a GPU machine does.)

Sending to a child process: multiprocessing pickles what it hands a spawn or forkserver child (a
`Process`'s arguments, `mp.spawn`'s args, a DataLoader's dataset, a pool's tasks) with its
ForkingPickler, whose reducers are its own: there a device the application made from a CUDA name is
written as CUDA's and loads through `_device`, so the retargeted child gets its own CUDA device, as
a child on the GPU machine does.
"""

from __future__ import annotations

import copy
import os
import pickle

import torch

from torchport.retarget import state

__all__ = ["pickle_module_for", "uses_pickle_module", "map_devices", "map_in_place", "keep_identity_in_copies",
           "send_to_children_as_cuda"]

_real_device = torch.device


def _device(*args, **kwargs):
    """torch.device as the unpickler calls it (`torch.device('cuda', 0)`): CUDA's is the target's."""
    real = _real_device(*args, **kwargs)
    if real.type != "cuda":
        return real
    retarget = state.current()
    if retarget is None or not retarget.visible():
        return real
    retarget.redirected("torch.load of a torch.device('cuda')")
    return retarget.device(real.index)


class _DeviceLoading:
    """A pickle module whose Unpickler builds torch.device through `_device`."""

    def __init__(self, module):
        self._module = module
        base = module.Unpickler

        class Unpickler(base):
            def find_class(self, module_name, name):
                if module_name == "torch" and name == "device":
                    return _device
                return super().find_class(module_name, name)

        self.Unpickler = Unpickler

    def __getattr__(self, name):
        return getattr(self._module, name)


def pickle_module_for(pickle_module, weights_only):
    """The pickle module torch.load should get: a device-mapping one where torch.load will use a
    pickle module (weights_only=False, or the application's own module without weights_only), else
    the application's argument unchanged (passing a module would turn torch's weights-only default
    off, or be refused by it)."""
    forced = os.getenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0").lower() in ("1", "y", "yes", "true")
    if forced or weights_only or (weights_only is None and pickle_module is None):
        return pickle_module
    module = pickle if pickle_module is None else pickle_module
    return module if isinstance(module, _DeviceLoading) else _DeviceLoading(module)


def uses_pickle_module(pickle_module) -> bool:
    """Whether torch.load got the device-mapping pickle module (its result needs no walk)."""
    return isinstance(pickle_module, _DeviceLoading)


def map_devices(value):
    """`value` with CUDA devices in its dicts, lists and tuples replaced by the target's."""
    return map_in_place(value, _loaded_device)


def _loaded_device(value):
    if value.__class__ is _real_device and value.type == "cuda":
        return _device(value.type, value.index)
    return value


def map_in_place(value, leaf):
    """`value` with `leaf` applied to what its dicts, lists and tuples hold: dicts and lists changed
    in place (shared ones once, their sharing kept), a tuple rebuilt only where a member changed."""
    return _walk(value, leaf, set())


def _walk(value, leaf, seen: set):
    kind = value.__class__
    if kind is dict or isinstance(value, dict):
        if id(value) not in seen:
            seen.add(id(value))
            for key, item in value.items():
                mapped = _walk(item, leaf, seen)
                if mapped is not item:
                    value[key] = mapped
        return value
    if kind is list:
        if id(value) not in seen:
            seen.add(id(value))
            for position, item in enumerate(value):
                mapped = _walk(item, leaf, seen)
                if mapped is not item:
                    value[position] = mapped
        return value
    if isinstance(value, tuple):
        items = [_walk(item, leaf, seen) for item in value]
        if all(mapped is item for mapped, item in zip(items, value)):
            return value
        return kind._make(items) if hasattr(kind, "_make") else kind(items)
    return leaf(value)


def _same(value, memo=None):
    return value


def _reduce_for_child(device):
    """How multiprocessing writes a torch.device: one the application made from a CUDA name as CUDA's
    (loaded by `_device` in the child), any other as itself."""
    retarget = state.current()
    ordinal = retarget.cuda_ordinal(device) if retarget is not None else False
    if ordinal is False:
        return device.__reduce__()
    return _device, ("cuda",) if ordinal is None else ("cuda", ordinal)


def send_to_children_as_cuda(on: bool) -> None:
    """Register (`on=False`: take back) the multiprocessing reducer of torch.device."""
    from multiprocessing.reduction import ForkingPickler

    reducers = ForkingPickler._extra_reducers  # type: ignore[attr-defined]
    if on:
        reducers.setdefault(_real_device, _reduce_for_child)
    elif reducers.get(_real_device) is _reduce_for_child:
        del reducers[_real_device]


def keep_identity_in_copies(on: bool) -> None:
    """copy.copy / copy.deepcopy of a torch.device give the device itself (an immutable value, as
    the copy module treats ints and strings); `on=False` takes that back."""
    for table in (copy._copy_dispatch, copy._deepcopy_dispatch):  # type: ignore[attr-defined]
        if on:
            table.setdefault(_real_device, _same)
        elif table.get(_real_device) is _same:
            del table[_real_device]
