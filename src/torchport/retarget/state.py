"""The active retargeting: which backend 'cuda' means, the precision policy, strictness, the report.

One instance per process, set by `activate`. Everything the facades and rewritten code ask about
the target goes through here, and from here to the backend object (the one source of device facts).
"""

from __future__ import annotations

import os
import re
import sys
import threading
from dataclasses import dataclass, field

from torchport.backends import Backend
from torchport.errors import StrictModeError, UnsupportedCudaFeature
from torchport.retarget.report import NOOP, REDIRECTED, UNSUPPORTED, Recorder, Site

__all__ = ["Retarget", "current", "set_current", "visible_devices", "PRECISION_POLICIES"]

PRECISION_POLICIES = ("keep", "auto", "bf16", "fp32")
_CUDA_STRING = re.compile(r"^cuda(?::(\d+))?$")
#: torchport's own source folder: frames under it are never the application's.
TORCHPORT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Retarget:
    """What 'cuda' means in the application's code, and how strictly to treat what cannot be mapped."""

    backend: Backend
    precision: str = "auto"
    strict: bool = False
    scope: list[str] = field(default_factory=list)
    #: Paths taken out of the scope (`--no-scope`).
    narrowed: list[str] = field(default_factory=list)
    recorder: Recorder = field(default_factory=Recorder)
    report_path: str | None = None
    finished: bool = False
    verbose: bool = False

    def __post_init__(self) -> None:
        self.type = self.backend.device_type
        self.accelerator = self.backend.is_accelerator()
        self.mapped_strings: dict[str, str] = {}  # read directly by the runtime's hot path
        self._device_cache: dict[int | None, object] = {}
        self._visible: tuple[int, ...] | None = None
        #: The CUDA ordinal the application last made current (torch.cuda.set_device), if any.
        self._set_ordinal: int | None = None
        #: Per thread, as CUDA's current device is: the ordinal a `with torch.cuda.device(i)` block selects.
        self._selected = threading.local()
        #: Rewritten sites where the application read a host device's `.type` on the CPU target (in order).
        self.cpu_type_reads: dict[int, None] = {}
        #: Whether the precision policy has run an fp16 autocast region of the application in bfloat16
        #: (its bfloat16 results stand for CUDA's float16 ones where NumPy takes them: runtime.numpy).
        self.fp16_ran_as_bf16 = False
        self.recorder.target = self.backend.name
        self.recorder.precision = self.precision

    def __repr__(self) -> str:  # what a notebook or the prompt shows for use()'s result
        return f"<torchport retarget: cuda -> {self.backend.name}, precision {self.precision}>"

    # -- devices -----------------------------------------------------------------------------
    @property
    def current_ordinal(self) -> int | None:
        """The CUDA ordinal current in this thread: the one a `torch.cuda.device(i)` block around it
        selects, else the one torch.cuda.set_device made current, if any."""
        selected = getattr(self._selected, "ordinal", None)
        return self._set_ordinal if selected is None else selected

    @current_ordinal.setter
    def current_ordinal(self, ordinal: int | None) -> None:
        self._set_ordinal = ordinal

    def select(self, ordinal: int | None) -> int | None:
        """Make `ordinal` current in this thread (None: what set_device made current); the previous
        selection, for the block's end."""
        previous = getattr(self._selected, "ordinal", None)
        self._selected.ordinal = ordinal
        return previous

    def visible(self) -> tuple[int, ...]:
        """The target's device indices that CUDA ordinals 0, 1, ... name: every device, or the ones
        `CUDA_VISIBLE_DEVICES` lists. Read once, at the first question about devices, as CUDA reads it
        when it initialises (a script that sets it before touching CUDA is obeyed)."""
        if self._visible is None:
            count = max(1, self.backend.device_count()) if self.accelerator else 1
            processes = os.environ.get("LOCAL_WORLD_SIZE", "")
            if processes.isdigit() and int(processes) > count:
                # torchrun runs more processes on this node than the target has devices: as on the GPU
                # machine such a launch is written for, each process's local rank names a device of
                # its own (ordinals beyond the target's devices share them)
                self.decide("device count", f"{processes} processes on this node (torchrun): the application "
                                            f"sees {processes} CUDA devices, sharing {self.backend.name}'s {count}",
                            kind="device")
                count = int(processes)
            setting = os.environ.get("CUDA_VISIBLE_DEVICES")
            visible, why = visible_devices(setting, count)
            if why:
                self.decide("CUDA_VISIBLE_DEVICES", f"{setting!r}: {why} ({self.backend.name} has {count} "
                                                    f"device{'s' if count != 1 else ''})", kind="device")
            if self.accelerator and visible and visible[0] != 0:  # CUDA's device 0 is the first one listed
                self.backend.set_current_index(visible[0])
            self._visible = visible
        return self._visible

    def holds(self, device) -> bool:
        """Whether a tensor on `device` (a torch.device) is on the application's CUDA device: on the
        target's device type, while CUDA_VISIBLE_DEVICES leaves the application a CUDA device (with
        every device hidden it has none, and its tensors are the host's, as on a GPU machine)."""
        return device.type == self.type and bool(self.visible())

    def device(self, index: int | None = None):
        """The torch.device standing for 'cuda' (index None) or 'cuda:index'."""
        try:
            return self._device_cache[index]
        except KeyError:
            visible = self.visible()
            if not visible:  # what CUDA raises when every device is hidden
                raise RuntimeError("No CUDA GPUs are available")
            if index is not None and index >= len(visible):
                # a program written for more GPUs than the target has (model parallel over cuda:0 and
                # cuda:1): the ordinals past them share its devices, as torchrun's local ranks do; a GPU
                # machine with this many devices would raise "invalid device ordinal"
                self.decide(f"cuda:{index}", f"past the {len(visible)} CUDA device{'s' if len(visible) != 1 else ''} "
                                             f"the application sees ({self.backend.name}): it shares cuda:"
                                             f"{index % len(visible)}", kind="device")
            device = self.backend.device(None if index is None else visible[index % len(visible)])
            self._device_cache[index] = device
            return device

    def cuda_ordinal(self, device):
        """The CUDA ordinal (None for plain 'cuda') this run made `device` for, or False."""
        for ordinal, made in self._device_cache.items():
            if device is made:
                return ordinal
        return False

    def stands_for_cuda(self, device) -> bool:
        """Whether torch.device `device` is the application's CUDA device: a device of the target's
        type; on the CPU target, where every host device has that type, only the devices the
        application made from CUDA names."""
        return device.type == self.type and (self.type != "cpu" or self.cuda_ordinal(device) is not False)

    def ordinal_of(self, index: int | None) -> int:
        """The CUDA ordinal a tensor on target device `index` is on, as a GPU machine reports it.
        Where CUDA ordinals share a target device (more torchrun processes than devices, the CPU),
        the device the process made current is the one it uses: its ordinal is the answer."""
        current = self.current_ordinal
        if current is not None and self.device(current).index == index:
            return current
        if index is None:
            return 0
        visible = self.visible()
        return visible.index(index) if index in visible else index

    def map_string(self, value: str) -> str:
        """'cuda' / 'cuda:N' -> the target's string; anything else unchanged."""
        try:
            return self.mapped_strings[value]
        except KeyError:
            match = _CUDA_STRING.match(value.strip())
            if match is None:
                mapped = value
            else:
                index = match.group(1)
                mapped = str(self.device(int(index) if index is not None else None))
            self.mapped_strings[value] = mapped
            return mapped

    def index(self, ordinal: int) -> int | None:
        """The target device index for CUDA ordinal `ordinal` (None on the CPU)."""
        if not self.accelerator:
            return None
        return self.device(ordinal).index

    # -- events ------------------------------------------------------------------------------
    def redirected(self, api: str, site: Site | None = None) -> None:
        self.recorder.add(REDIRECTED, site or caller_site(api))

    def noop(self, api: str, why: str, site: Site | None = None) -> None:
        """A CUDA call with no effect on the target; an error under --strict."""
        site = site or caller_site(api)
        if self.strict:
            raise StrictModeError(f"{api} ({why})", site.location(), self.backend.name)
        self.recorder.add(NOOP, site, why)

    def unsupported(self, api: str, alternative: str, site: Site | None = None, raise_error: bool = True):
        """A CUDA-only feature: recorded, then a clear error naming the call site."""
        site = site or caller_site(api)
        self.recorder.add(UNSUPPORTED, site, alternative)
        error = UnsupportedCudaFeature(api, site.location(), self.backend.name, alternative)
        if raise_error or self.strict:
            raise error
        return error

    def decide(self, topic: str, decision: str, kind: str = "precision", modules: tuple[str, ...] = ()) -> None:
        self.recorder.decide(topic, decision, kind, modules)

    def in_scope(self, filename: str) -> bool:
        from torchport.retarget.scope import in_scope

        return in_scope(filename, self.scope, self.narrowed)

    def widen(self, root: str, why: str) -> None:
        """Add `root` to the scope (once), remembering why for the report and --verbose."""
        root = os.path.abspath(root)
        if root not in self.scope:
            self.scope.append(root)
            self.recorder.scope[root] = why
            if self.verbose:
                print(f"torchport: retargeting code under {root} ({why})", file=sys.stderr)


def visible_devices(setting: str | None, count: int) -> tuple[tuple[int, ...], str]:
    """The device indices `CUDA_VISIBLE_DEVICES=setting` leaves visible on a machine with `count`
    devices, as CUDA parses it (each entry read as C's strtoul reads it, so '1gpu' is 1; a negative or
    unreadable entry ends the list, a repeated one empties it, the first index past the devices ends
    it), and why, when that hides devices ('' when it does not)."""
    every = tuple(range(count))
    if setting is None:
        return every, ""
    if setting.startswith(("GPU-", "MIG-")):
        return every, "names GPUs by UUID, which name no device of the target: not applied"
    visible: list[int] = []
    for entry in setting.split(","):
        match = re.match(r"\s*([+-]?\d+)", entry)
        ordinal = int(match.group(1)) if match else -1
        if ordinal in visible:
            visible = []
            break
        if ordinal < 0 or ordinal >= count:
            break
        visible.append(ordinal)
    if tuple(visible) == every:
        return every, ""
    if not visible:
        return (), "hides every device: the application sees no CUDA device, as on a GPU machine"
    return tuple(visible), f"the application's CUDA devices 0..{len(visible) - 1} are the target's {visible}"


def caller_site(api: str) -> Site:
    """The first frame outside torchport, as a Site (used by the facades, not on hot paths)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(TORCHPORT_ROOT):
        frame = frame.f_back
    if frame is None:
        return Site("<unknown>", 0, api)
    return Site(frame.f_code.co_filename, frame.f_lineno, api)


_current: Retarget | None = None


def current() -> Retarget | None:
    return _current


def set_current(retarget: Retarget | None) -> None:
    global _current
    _current = retarget
