"""Emulated targets: '<target>-emulated' runs code written for the target on this machine's CPU.

One backend per profile in torchport/profiles (neuron-emulated, xla-emulated, mps-emulated, ...).
All of them use the one PyTorch device type ``emulated`` (PrivateUse1, registered on first use);
the profile decides which target it behaves like. When the real target is usable here the emulated
one steps aside and says to use the real one.
"""

from __future__ import annotations

import os

from typing import ClassVar

from torchport.backends import register
from torchport.backends.base import Backend, Probe

__all__ = ["EmulatedBackend", "EMULATED_DEVICE_TYPE"]

#: The torch device type every emulated target shares.
EMULATED_DEVICE_TYPE = "emulated"

#: What the emulator itself cannot do, whatever the target: it computes synchronously on the host
#: (no device events or streams to hand out, its kernels profiled as the CPU's) and runs collectives through gloo registered for the
#: ``emulated`` device (``dist_backend``). Every other capability and decision (GradScaler, pinned
#: host memory, precision, checkpoint loading, fused optimizers, compiler) is the real target's,
#: read from its profile, so a twin rehearses the decisions the target makes.
EMULATOR_LIMITS: dict[str, object] = {
    "native_events": False,
    "native_streams": False,
    # the emulated kernels run on the host, under ProfilerActivity.CPU: the target's activity
    # (ProfilerActivity.XPU) would find no XPU and warn
    "profiler_activity": None,
}
EMULATOR_DIST_BACKEND = "emulated"


class EmulatedBackend(Backend):
    """A target emulated on the CPU through the ``emulated`` device and a profile."""

    #: The profile (torchport/profiles/<name>.yaml) this backend follows.
    profile_name: ClassVar[str] = ""
    auto_selectable = False

    def capability_flag(self, name: str):
        """The real target's capability, unless the emulator cannot provide it (EMULATOR_LIMITS)."""
        if name in EMULATOR_LIMITS:
            return EMULATOR_LIMITS[name]
        return super().capability_flag(name)

    # gloo registered for the CPU and the emulated device (torchport/emulated/distributed.py); the
    # emulated device's collective kernels hand gloo CPU views of the device bytes.
    dist_backend = EMULATOR_DIST_BACKEND

    @property
    def device_type(self) -> str:  # type: ignore[override]
        """'emulated'. Reading it means the device is about to be used, so it is prepared here."""
        self.prepare()
        return EMULATED_DEVICE_TYPE

    #: The Profile object this backend follows, for a backend made by `for_profile`; the registered
    #: backends leave it None and load their profile by name.
    bound_profile: ClassVar[object | None] = None

    @classmethod
    def for_profile(cls, profile) -> EmulatedBackend:
        """An (unregistered) emulated backend that follows `profile` itself, e.g. a user's YAML file.

        It is named after the profile's `emulated_name` and keeps that profile active even where the
        name is a built-in one ('extends: neuron' inherits 'neuron-emulated').
        """
        attributes = {
            "name": profile.emulated_name,
            "profile_name": profile.name,
            "bound_profile": profile,
            "description": profile.title,
            "device_type": EmulatedBackend.__dict__["device_type"],
            "__module__": __name__,
        }
        backend = type(f"{profile.name.capitalize()}ProfileEmulatedBackend", (cls,), attributes)()
        backend.__dict__["_profile"] = profile  # what Backend.profile() returns, not a reload by name
        return backend

    def prepare(self):
        """Register the emulated device (once per process) and make this backend's profile active."""
        from torchport import emulated as device

        profile = device.active_profile()
        if self.bound_profile is not None:
            if profile is not self.bound_profile:
                profile = device.activate(self.bound_profile)
        elif profile is None or profile.name != self.profile_name:
            profile = device.activate(self.profile_name)
        return profile

    def probe(self) -> Probe:
        from torchport import backends

        real_name = self.profile_name
        if real_name != "cpu":
            try:
                real = backends.get(real_name)
            except Exception:
                real = None
            if real is not None and real.probe().usable:
                return Probe(
                    False,
                    f"the real {real_name!r} backend is usable on this machine, so the emulator steps aside",
                    f"Use --device {real_name} to run on the real hardware.",
                )
        try:
            import torch
        except ImportError:  # pragma: no cover - torch is a dependency
            return Probe(False, "torch is not installed", "Install torch.")
        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", EMULATED_DEVICE_TYPE):
            return Probe(
                False,
                f"PrivateUse1 is already taken by {current!r} in this process",
                f"Run in a process that does not load the {current!r} backend.",
            )
        return Probe(True, f"{self.description} (profile {self.profile_name!r}; census with 'torchport check')")

    def is_accelerator(self) -> bool:
        return True

    def device_module(self):
        self.prepare()
        import torch

        return torch.get_device_module(EMULATED_DEVICE_TYPE)

    def generator_device(self, device):
        """The host: the emulated device's ops draw their random numbers there (PyTorch makes device
        generators through a C++ hook a Python backend cannot provide)."""
        import torch

        return torch.device("cpu")

    def device_count(self) -> int:
        self.prepare()
        return 1

    def device(self, index: int | None = None):
        self.prepare()
        import torch

        return torch.device(EMULATED_DEVICE_TYPE, 0 if index is None else index % 1)

    def total_memory(self, index: int = 0) -> int:
        return self.prepare().memory_bytes

    def memory_stat(self, stat: str, index: int | None = None) -> int:
        self.prepare()
        from torchport import emulated as device

        stats = {
            "memory_allocated": device.memory_allocated,
            "max_memory_allocated": device.max_memory_allocated,
            "memory_reserved": device.memory_allocated,
            "max_memory_reserved": device.max_memory_allocated,
        }
        function = stats.get(stat)
        return int(function()) if function is not None else 0

    def compile_backend(self) -> str:
        """The emulated device has no code generator: the graphs Dynamo captures run through
        AOTAutograd, eagerly, on the device (graph breaks, recompilations and dynamic shapes are
        exercised as on the target; no kernels are generated)."""
        return "aot_eager"

    def before_compile(self) -> None:
        from torchport.emulated.registration import hide_from_dynamo

        hide_from_dynamo()

    def memory_stats(self, index: int | None = None) -> dict:
        self.prepare()
        from torchport import emulated as device

        return dict(device.memory_stats())

    def reset_peak_memory_stats(self, index: int | None = None) -> None:
        self.prepare()
        from torchport import emulated as device

        device.reset_peak_memory_stats()

    def synchronize(self, index: int | None = None) -> None:
        self.device_module().synchronize()

    def on_activate(self) -> list[str]:
        """As the target of `torchport run`: each dtype the profile computes in a narrower one
        (float64 on Neuron) is reported the first time the program computes in it, and each op the
        profile says the target lacks (aten::nonzero on Neuron, a fused optimizer's kernel where it
        has none) the first time the program runs it, with the application's line that reached it;
        under --strict, one the application's own line calls is refused there."""
        from torchport.emulated.state import state as device_state
        from torchport.retarget import state as retarget_state

        name = self.name

        def report(op: str, wide, narrow) -> None:
            retarget = retarget_state.current()
            if retarget is not None:
                wide_name, narrow_name = str(wide).replace("torch.", ""), str(narrow).replace("torch.", "")
                retarget.decide(f"{wide_name} on {name}", f"computed in {narrow_name} (first by {op}, reached "
                                                          f"{_reached_from(retarget)}), as the profile says the "
                                                          f"target does: the tensors keep dtype {wide_name} with "
                                                          f"{narrow_name}'s precision",
                                kind="adapted")

        def lacks(op: str, rule) -> None:
            retarget = retarget_state.current()
            if retarget is not None:
                mechanism = (device_state.profile.data.get("fallback") or {}).get("mechanism")
                there = f"; on {self.profile_name}: {mechanism}" if mechanism else ""
                fix = f". Fix: {rule.fix}" if rule.fix else ""
                retarget.decide(op, f"{rule.reason}. First reached {_reached_from(retarget)}; it ran here on the "
                                    f"emulator's host{there}{fix}", kind="target lacks")

        device_state.on_first_downcast = report
        device_state.on_first_unsupported = lacks
        device_state.unsupported_noted = set()
        retarget = retarget_state.current()
        device_state.refuse_unsupported = (lambda: _called_by_application(retarget)) \
            if retarget is not None and retarget.strict else None
        return super().on_activate()


#: torch's dispatch machinery between a call and the emulator's kernels: not a library that called the op.
_DISPATCH_FILES = tuple(os.sep + os.path.join("torch", name) for name in ("_ops.py", "library.py", "_library"))


def _caller_frames():
    """The frames below the emulator's and torch's dispatch machinery, innermost first."""
    import sys

    from torchport.retarget.state import TORCHPORT_ROOT

    frame = sys._getframe(3)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(TORCHPORT_ROOT) and not any(part in filename for part in _DISPATCH_FILES):
            yield frame
        frame = frame.f_back


def _called_by_application(retarget) -> bool:
    """Whether the op being run was called by the application's own line (`torch.nonzero(x)` there),
    not reached inside a library or torch's own code (torch printing a tensor)."""
    frame = next(_caller_frames(), None)
    return frame is not None and retarget.in_scope(frame.f_code.co_filename)


def _reached_from(retarget) -> str:
    """Where the op being run was reached: the application's innermost line on the stack, and the
    library in between when the application did not call the op itself (torch printing a tensor
    runs masked_select)."""
    through = None
    for frame in _caller_frames():
        filename = frame.f_code.co_filename
        if retarget.in_scope(filename):
            via = f" (through {through})" if through else ""
            try:
                shown = filename if filename.startswith("<") else os.path.relpath(filename)
            except ValueError:  # another drive
                shown = filename
            return f"at {shown}:{frame.f_lineno}{via}"
        if through is None:
            parts = filename.replace(os.sep, "/").split("/")
            through = "/".join(parts[-2:]) if "site-packages" not in parts[-2:] else parts[-1]
    return f"outside the application's code{f' (in {through})' if through else ''}"


def _make(real: Backend) -> type[EmulatedBackend]:
    """The '<name>-emulated' twin of a registered real backend; its aliases follow the real ones
    ('trainium' names neuron, so 'trainium-emulated' names neuron-emulated)."""
    profile_name = real.profile_name or real.name
    description = real.description or profile_name
    attributes = {
        "name": f"{real.name}-emulated",
        "profile_name": profile_name,
        "description": f"{description}, emulated on the CPU",
        # Keep the property: Backend.__init_subclass__ would otherwise set device_type = name.
        "device_type": EmulatedBackend.__dict__["device_type"],
        "aliases": tuple(f"{alias}-emulated" for alias in real.aliases),
        "__doc__": f"{description}, emulated on the CPU with the {profile_name!r} profile.",
        "__module__": __name__,
    }
    if real.profile_file() is not None:
        attributes["profile_path"] = str(real.profile_file())
    class_name = f"{real.name.replace('-', '_').capitalize()}EmulatedBackend"
    return register(type(class_name, (EmulatedBackend,), attributes))


def register_twins(real_backends) -> None:
    """Give every real backend (built-in or third-party) its '-emulated' twin. The registry calls
    this once, after it has loaded the built-in modules and the entry points."""
    for real in real_backends:
        if isinstance(real, EmulatedBackend):
            continue
        twin = _make(real)
        globals()[twin.__name__] = twin
