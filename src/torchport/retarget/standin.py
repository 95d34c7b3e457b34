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

import copyreg

__all__ = ["StandIn", "reduce_as_genuine"]


class StandIn(type):
    """Metaclass of the stand-ins: instance and subclass checks of the stand-in itself go to the genuine class."""

    def __new__(mcs, name, bases, namespace, genuine=None):
        cls = super().__new__(mcs, name, bases, namespace)
        if genuine is not None:
            cls._torchport_genuine = genuine
            cls._torchport_standin = cls
        return cls

    def __init__(cls, name, bases, namespace, genuine=None):
        super().__init__(name, bases, namespace)

    def __instancecheck__(cls, instance) -> bool:
        if cls.__dict__.get("_torchport_standin") is cls:
            return isinstance(instance, cls._torchport_genuine)
        return type.__instancecheck__(cls, instance)

    def __subclasscheck__(cls, subclass) -> bool:
        if cls.__dict__.get("_torchport_standin") is cls:
            return issubclass(subclass, cls._torchport_genuine)
        return type.__subclasscheck__(cls, subclass)


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
