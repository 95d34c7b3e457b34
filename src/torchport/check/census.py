"""The census: what a program does on the emulated target, recorded op by op.

`Census.recording()` installs the recorder the emulated device's kernels report to. It counts ops by
name and status (native / fallback / unsupported per the profile) with a few call sites each, every
distinct shape signature per op, the graphs a compiling target would build (the op sequence between
host syncs and optimizer steps, hashed with its shapes), host syncs with call sites, dtype downcasts,
and the peak of device memory. View ops (view, transpose, ...) only rearrange metadata on the device
and are not counted.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections import Counter
from dataclasses import dataclass, field

import torch

from torchport.errors import TorchportError
from torchport.profiles import Profile

__all__ = ["Census", "OpRecord", "SYNC_OPS", "CENSUS_CONTENTS", "call_site"]

#: Ops that hand a value to the host: the device must finish everything queued before them.
SYNC_OPS = frozenset({"aten::_local_scalar_dense", "aten::equal", "aten::is_nonzero", "aten::allclose"})

_SKIPPED_DIRECTORIES = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
    os.path.dirname(contextlib.__file__) + os.sep,
)
#: Sites recorded per op and per sync kind.
SITES_PER_OP = 3
#: What a census looks at, named where it could not be taken.
CENSUS_CONTENTS = "the op census (ops and their status, call sites, shapes and compilations, host syncs, dtype downcasts, peak memory)"


def call_site(extra_skipped: tuple[str, ...] = ()) -> str:
    """'file:line in function' of the innermost frame outside torch, torchport and the standard library."""
    skipped = _SKIPPED_DIRECTORIES + extra_skipped
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(skipped) and not filename.startswith("<frozen"):
            return f"{filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return "(backward pass, inside autograd)"


@dataclass
class OpRecord:
    """One op's count, status and where it was called from."""

    name: str
    status: str
    count: int = 0
    sites: Counter = field(default_factory=Counter)


def _signature(values) -> tuple:
    parts = []
    for value in values:
        if isinstance(value, torch.Tensor):
            parts.append((tuple(value.shape), value.dtype))
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
            parts.append(tuple((tuple(item.shape), item.dtype) for item in value if item is not None))
        elif isinstance(value, (int, bool)) or value is None:
            parts.append(value)
    return tuple(parts)


def _observing(method):
    """A recording method that never makes the program fail: where recording itself breaks, the census
    stops (it uninstalls itself and says what it did not look at) and the program runs on unrecorded.
    Errors torchport raises on purpose (an op refused under strict mode) still reach the program."""

    @functools.wraps(method)
    def observe(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except TorchportError:
            raise
        except Exception as error:
            self.stop_recording(f"recording failed at {method.__name__}({_first_name(args)}): "
                                f"{type(error).__name__}: {error}")
            return None

    return observe


def _first_name(args) -> str:
    first = args[0] if args else ""
    return str(getattr(first, "name", first))[:80]


class Census:
    """Records ops, shapes, syncs, downcasts and memory while installed on the emulated device."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.ops: dict[str, OpRecord] = {}
        self.signatures: dict[str, set] = {}
        self.graphs: dict[int, int] = {}
        self.graph_shapes: dict[int, list] = {}
        self.syncs: Counter = Counter()
        self.sync_kinds: Counter = Counter()
        self.transfers = 0
        self.transfer_bytes = 0
        self.downcasts: dict[tuple[str, str, str], list[int]] = {}
        #: (op, what) -> count of ops the emulated device does not emulate yet (emulator gaps)
        self.not_emulated: Counter = Counter()
        self.steps = 0
        self.peak_memory = 0
        #: False when check could not take this census (recording changed the workload): it is empty.
        self.taken = True
        #: What check did not look at, and why: [{"what": ..., "why": ...}]
        self.not_checked: list[dict[str, str]] = []
        self._graph_hash = 0
        self._graph_length = 0
        self._graph_ops: list = []

    # -- recording (called by the emulated device's kernels) --------------------------------
    @_observing
    def record_op(self, info, host_args, host_kwargs) -> None:
        """Count one op call with its shape signature."""
        name = info.name
        record = self.ops.get(name)
        if record is None:
            record = OpRecord(name, info.rule_status)
            self.ops[name] = record
            self.signatures[name] = set()
        record.count += 1
        if record.count <= SITES_PER_OP or record.status != "native":
            record.sites[call_site()] += 1
        signature = _signature(host_args)
        self.signatures[name].add(signature)
        self._graph_hash = hash((self._graph_hash, name, signature))
        self._graph_length += 1
        self._graph_ops.append((name, signature))
        if record.status == "unsupported":
            from torchport.emulated import dispatch, state

            if state.is_strict():
                raise dispatch.unsupported_error(info)
        elif record.status == "fallback":
            # The op runs on the host: its inputs go there and its outputs come back.
            self.transfers += 1
            self._close_graph()
        if name in SYNC_OPS:
            self.record_sync(name)

    @_observing
    def record_not_emulated(self, op: str, what: str) -> None:
        """Count an op the emulated device cannot run yet: a gap of the emulator, not a target fact."""
        self.not_emulated[(op, what)] += 1

    @_observing
    def record_sync(self, kind: str) -> None:
        """Count one host sync (item, copy to the host, synchronize) at its call site."""
        if kind == "aten::_local_scalar_dense":
            kind = "item() / scalar read"
        self.sync_kinds[kind] += 1
        self.syncs[(kind, call_site())] += 1
        self._close_graph()

    @_observing
    def record_transfer(self, nbytes: int) -> None:
        """Count one host-to-device copy."""
        self.transfer_bytes += nbytes

    @_observing
    def record_downcast(self, op_name: str, wide, narrow, changed: bool) -> None:
        """Count one op output computed in a narrower dtype, and whether rounding changed it."""
        key = (op_name, str(wide).replace("torch.", ""), str(narrow).replace("torch.", ""))
        counts = self.downcasts.setdefault(key, [0, 0])
        counts[0] += 1
        counts[1] += int(changed)

    @_observing
    def record_step(self, *args, **kwargs) -> None:
        """Optimizer step hook: one training step ends, and with it a graph."""
        self.steps += 1
        self._close_graph()

    def stop_recording(self, why: str) -> None:
        """Stop recording for good: uninstall this census, which the report then calls not taken."""
        from torchport import emulated as device

        if device.get_recorder() is self:
            device.set_recorder(None)
        if self.taken:
            self.taken = False
            self.not_checked.append({"what": f"{CENSUS_CONTENTS} from this point on", "why": why})

    @_observing
    def _close_graph(self) -> None:
        if not self._graph_length:
            return
        key = self._graph_hash
        if key not in self.graphs:
            self.graph_shapes[key] = self._graph_ops
        self.graphs[key] = self.graphs.get(key, 0) + 1
        self._graph_hash = 0
        self._graph_length = 0
        self._graph_ops = []

    @_observing
    def end_step(self) -> None:
        """Mark the end of one step where no optimizer runs (the check API calls it per sample)."""
        self.steps += 1
        self._close_graph()

    @contextlib.contextmanager
    def recording(self):
        """Install this census on the emulated device for the duration of the block."""
        from torchport import emulated as device

        previous = device.get_recorder()
        device.reset_peak_memory_stats()
        from torch.optim.optimizer import register_optimizer_step_post_hook

        handle = register_optimizer_step_post_hook(self.record_step)
        device.set_recorder(self)
        try:
            yield self
        finally:
            device.set_recorder(previous)
            handle.remove()
            self._close_graph()
            self.peak_memory = max(self.peak_memory, device.max_memory_allocated())

    # -- summaries --------------------------------------------------------------------------
    def op_signature_count(self) -> int:
        """Distinct (op, input shapes and dtypes) pairs: compilations of an eager per-op compiler."""
        return sum(len(signatures) for signatures in self.signatures.values())

    def graph_count(self) -> int:
        """Distinct graphs (op sequences with shapes): compilations of a graph compiler."""
        return len(self.graphs)

    def status_counts(self) -> Counter:
        """Op calls by status."""
        counts: Counter = Counter()
        for record in self.ops.values():
            counts[record.status] += record.count
        return counts

    def sync_count(self) -> int:
        """Host syncs recorded."""
        return sum(self.sync_kinds.values())
