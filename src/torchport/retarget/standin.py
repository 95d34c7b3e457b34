"""Stand-ins that are real types: subclasses of the genuine torch classes.

`class GradScaler(torch.amp.GradScaler, metaclass=StandIn, genuine=torch.amp.GradScaler)` decides
the device and otherwise is the genuine class, so `issubclass`, subclassing and pickling hold by
construction. The metaclass adds one thing: `isinstance(x, StandIn)` (and `issubclass`) is asked of
the genuine class, so an object a library built with the genuine class (Accelerate's GradScaler,
a model's autocast) is an instance of what the application calls by that name, as in PyTorch.
A user's subclass of a stand-in is an ordinary class. A pickled stand-in instance is pickled as the
genuine class, so what a retargeted program saves loads where torchport is not installed.
"""

from __future__ import annotations

import copy
import copyreg
import types
import weakref

import torch

__all__ = ["StandIn", "reduce_as_genuine", "copy_keeping_class", "FacadeModule", "facade_module", "mirror"]


class StandIn(type):
    """Metaclass of the stand-ins: instance and subclass checks of the stand-in itself go to the genuine class."""

    def __new__(mcs, name, bases, namespace, genuine=None):
        cls = super().__new__(mcs, name, bases, namespace)
        if genuine is not None:
            cls._torchport_genuine = genuine
            cls._torchport_standin = cls
            # named as the genuine class (`type(scaler).__name__ == "GradScaler"`, log lines, config
            # dumps); its `__module__` and `__qualname__` stay the path to this very class (a config's
            # `module.qualname`, pydoc.locate), and calls into torchport's module never map device values
            cls.__name__ = genuine.__name__
        return cls

    def __init_subclass__(mcs, **kwargs):
        # each metaclass of stand-ins pickles its classes as the genuine ones (copyreg matches the exact type)
        super().__init_subclass__(**kwargs)
        copyreg.pickle(mcs, reduce_class)

    def __init__(cls, name, bases, namespace, genuine=None):
        super().__init__(name, bases, namespace)

    # `getattr(cls, "_torchport_standin", None) is cls`: the stand-in itself, not a subclass of it (the
    # class's own `__dict__` says the same, but torch.compile stops at a class dict read in code it traces)
    def __instancecheck__(cls, instance) -> bool:
        if getattr(cls, "_torchport_standin", None) is cls:
            # the stand-in's own instances too, for a stand-in that cannot subclass its genuine class
            return isinstance(instance, cls._torchport_genuine) or type.__instancecheck__(cls, instance)
        return type.__instancecheck__(cls, instance)

    def __subclasscheck__(cls, subclass) -> bool:
        if getattr(cls, "_torchport_standin", None) is cls:
            if torch.compiler.is_compiling():
                # A stand-in may give, in code torch.compile traces, the genuine object it stands for
                # (`amp.autocast`); the compiler then asks, as CPython's `type.__call__` does, whether
                # what `__new__` gave is of the class itself (to run its `__init__`): the class's own
                # answer, not the genuine one's.
                return cls in subclass.__mro__
            return issubclass(subclass, cls._torchport_genuine)
        return type.__subclasscheck__(cls, subclass)


def reduce_class(cls):
    """Pickling a stand-in class itself (`self.tensor_type = torch.cuda.FloatTensor` in a pickled
    object, a class passed to a spawned worker): the genuine class, by reference, as a GPU machine
    pickles it, so plain PyTorch loads it (`copy.copy` of a class is the class: the stream holds no
    torchport name). Loaded, it is the genuine class, as a stand-in instance loads as an instance of
    it. An application's own subclass of a stand-in pickles by reference as any class does. Registered
    with copyreg for each metaclass of stand-ins (pickle asks copyreg before it saves a class as a
    global)."""
    genuine = cls.__dict__.get("_torchport_genuine", cls.__dict__.get("_torchport_real"))
    if genuine is None or cls.__dict__.get("_torchport_standin", cls) is not cls:
        return cls.__qualname__
    return copy.copy, (genuine,)


copyreg.pickle(StandIn, reduce_class)


def reduce_as_genuine(instance, protocol):
    """`__reduce_ex__` for a stand-in instance: the same state under the genuine class.

    `copyreg._reconstructor` (what protocols 0 and 1 use) builds a bare instance of the genuine
    class, so loading needs neither torchport nor the stand-in.
    """
    cls = type(instance)
    if cls.__dict__.get("_torchport_standin") is not cls:
        return object.__reduce_ex__(instance, protocol)
    reduced = object.__reduce_ex__(instance, protocol)
    state = reduced[2] if len(reduced) > 2 else None
    return (copyreg._reconstructor, (cls._torchport_genuine, object, None), state)


def copy_keeping_class(instance, memo=None):
    """`__copy__` / `__deepcopy__` for a stand-in instance: a copy is of the instance's own class, as
    in Python (pickling, which leaves the process, gives the genuine class: `reduce_as_genuine`)."""
    cls = type(instance)
    copied = cls.__new__(cls)
    if memo is None:
        copied.__dict__.update(instance.__dict__)
    else:
        memo[id(instance)] = copied
        copied.__dict__.update(copy.deepcopy(instance.__dict__, memo))
    return copied


class FacadeModule(types.ModuleType):
    """A torch module as the application sees it: a copy of the real module's namespace with some
    names replaced by stand-ins. Reads are plain module reads (names the copy lacks fall through to
    the real module); a name the application sets or deletes is set or deleted on the real module
    too, so that patching torch (`torch.serialization.location_tag = ...`, `mock.patch.object`)
    reaches torch and the libraries as it does without torchport. A replaced name is set in the
    facade alone: the stand-in behind it calls the genuine object, which stays in place. A property
    of the real module's class (`torch.backends.fp32_precision`) is read and set on the real module
    only, so the application reads what torch holds."""

    def __setattr__(self, name: str, value) -> None:
        real = self.__dict__.get("_torchport_real")
        if (real is not None and not name.startswith("__") and name not in self.__dict__.get("_torchport_overrides", ())
                and hasattr(type(getattr(type(real), name, None)), "__set__")):
            setattr(real, name, value)
            return
        super().__setattr__(name, value)
        if name not in self.__dict__.get("_torchport_overrides", ()) and not name.startswith("_torchport"):
            setattr(self.__dict__["_torchport_real"], name, value)

    def __delattr__(self, name: str) -> None:
        super().__delattr__(name)
        if name not in self.__dict__.get("_torchport_overrides", ()):
            real = self.__dict__["_torchport_real"]
            if hasattr(real, name):
                delattr(real, name)


def facade_module(real: types.ModuleType, overrides: dict) -> FacadeModule:
    """A FacadeModule of `real` with `overrides` in place of the real names."""
    module = FacadeModule(real.__name__, real.__doc__)
    namespace = module.__dict__
    namespace.update(real.__dict__)
    namespace.update(overrides)
    namespace["_torchport_real"] = real
    namespace["_torchport_overrides"] = frozenset(overrides)
    namespace["__getattr__"] = lambda name: getattr(real, name)
    mirror(real, module, overrides)
    return module


class MirroredModule(types.ModuleType):
    """The class a real torch module takes once a facade of it exists. Reads are a module's; a name
    set or deleted on it (`mock.patch("torch.cuda.is_available", ...)`, `mock.patch("torch.distributed
    .get_rank")`, a library, the import system) is set or deleted in its facades too, so the
    application reads what torch and the libraries read, as it would without torchport. A replaced
    name set to its genuine object again (the patch undone) is the stand-in again."""

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        if not name.startswith("__"):
            for facade, genuine, standins in _facades_of(self):
                namespace = facade.__dict__
                if name in standins:
                    namespace[name] = standins[name] if value is genuine.get(name) else value
                elif name in namespace and getattr(namespace[name], "_torchport_real", None) is not value:
                    namespace[name] = value  # (a submodule's facade stays in place of that submodule)

    def __delattr__(self, name: str) -> None:
        super().__delattr__(name)
        if not name.startswith("__"):
            for facade, _, standins in _facades_of(self):
                namespace = facade.__dict__
                if name in standins:
                    namespace[name] = standins[name]
                else:
                    namespace.pop(name, None)


#: id(real module) -> [(weak reference to a facade of it, its genuine objects, its stand-ins)].
_mirrors: dict[int, list] = {}


def _facades_of(real: types.ModuleType):
    entries = _mirrors.get(id(real), ())
    for reference, genuine, standins in list(entries):
        facade = reference()
        if facade is not None:
            yield facade, genuine, standins


def mirror(real: types.ModuleType, facade: types.ModuleType, standins: dict) -> None:
    """Keep `facade` (holding `standins` in place of `real`'s names) in step with what is set on
    `real`. A module whose class is not the plain module type (torch.backends' flag modules) is left
    as it is."""
    if type(real) is types.ModuleType:
        real.__class__ = MirroredModule
    if isinstance(real, MirroredModule):
        genuine = {name: real.__dict__.get(name) for name in standins}
        _mirrors.setdefault(id(real), []).append((weakref.ref(facade), genuine, dict(standins)))
