"""Recording what a model computes: per-module inputs and outputs (forward hooks), and on request
every operator's outputs (a dispatch mode), copied to the host for comparison."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

from torchport.compare.tree import flatten

__all__ = ["ROOT", "Record", "Capture", "capture", "comparable"]

#: The name of the model itself among the recorded modules.
ROOT = "(model)"


@dataclass
class Record:
    """What one call of one module (or one operator) produced."""

    key: str
    kind: str  # "module" or "op"
    type_name: str
    order: int
    inputs: list[tuple[str, Any]] = field(default_factory=list)
    outputs: list[tuple[str, Any]] = field(default_factory=list)
    #: (path, why) for every output leaf that could not be compared.
    skipped: list[tuple[str, str]] = field(default_factory=list)


class _HostCopier:
    """Copies tensors to the host once: a module's input is usually the previous module's output.

    Host tensors are kept without a copy unless `clone_host` is set; `mutated()` then says whether
    any of them changed in place later in the forward (the caller reruns with copies).
    """

    def __init__(self, clone_host: bool = True) -> None:
        self._seen: dict[tuple, Any] = {}
        self.clone_host = clone_host
        self._kept: list[tuple[Any, int]] = []

    def mutated(self) -> bool:
        """True when a tensor kept without a copy was modified in place after it was recorded."""
        return any(tensor._version != version for tensor, version in self._kept)

    def copy(self, tensor):
        import torch

        try:
            pointer = tensor.untyped_storage().data_ptr()
        except Exception:  # storage-less tensors (some device wrappers)
            pointer = 0
        key = None
        if pointer:
            key = (pointer, tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype,
                   tensor.device, tensor._version)
            if key in self._seen:
                return self._seen[key][1]
        if tensor.device.type != "cpu":
            host = tensor.detach().to("cpu", copy=True)
        elif self.clone_host:
            host = tensor.detach().clone()
        else:
            host = tensor.detach()
            self._kept.append((host, host._version))
        if key is not None:
            # Hold the source too, so its storage (and pointer) cannot be reused while cached.
            self._seen[key] = (tensor, host)
        return host

    def copy_all(self, value: Any) -> tuple[list[tuple[str, Any]], list[tuple[str, str]]]:
        """Host copies of every tensor in `value` with their paths, and (path, why) for each leaf not copied."""
        flat = flatten(value)
        copies: list[tuple[str, Any]] = []
        skipped = [(path, f"not a tensor ({type_name})") for path, type_name in flat.others]
        for path, tensor in flat.tensors:
            try:
                copies.append((path, self.copy(comparable(tensor))))
            except Exception as error:  # a layout or subclass the host cannot hold densely
                skipped.append((path, f"{_layout_name(tensor)} tensor not comparable on the host: {error}"))
        return copies, skipped


def _layout_name(tensor) -> str:
    if getattr(tensor, "is_nested", False):
        return "nested"
    return str(tensor.layout).replace("torch.", "")


def comparable(tensor):
    """A dense, strided view of `tensor` the metrics can read: nested tensors padded with zeros, sparse densified."""
    import torch

    if getattr(tensor, "is_nested", False):
        return torch.nested.to_padded_tensor(tensor.detach(), 0.0)
    if tensor.layout != torch.strided:
        return tensor.detach().to_dense()
    return tensor


class Capture:
    """The records of one forward pass, in the order calls finished."""

    def __init__(self, model, per_op: bool = False, record_inputs: bool = True, clone_host: bool = True) -> None:
        self.model = model
        self.per_op = per_op
        self.record_inputs = record_inputs
        self.records: list[Record] = []
        self._copier = _HostCopier(clone_host)
        self.mutated = False
        self._calls: dict[str, int] = {}
        self._stack: list[tuple[str, list]] = []
        self._handles: list[Any] = []
        self._names = {id(module): name for name, module in model.named_modules()}

    def _call_key(self, base: str) -> str:
        count = self._calls.get(base, 0)
        self._calls[base] = count + 1
        return base if count == 0 else f"{base}#{count}"

    def _pre_hook(self, module, args, kwargs):
        name = self._names.get(id(module), type(module).__name__) or ROOT
        inputs = self._copier.copy_all((args, kwargs))[0] if self.record_inputs else []
        self._stack.append((self._call_key(name), inputs))

    def _post_hook(self, module, args, kwargs, output):
        key, inputs = self._stack.pop()
        self.record(key, "module", type(module).__name__, output, inputs)

    def record(self, key: str, kind: str, type_name: str, output, inputs: list | None = None) -> None:
        """Record one call's outputs (host copies) under `key`."""
        outputs, skipped = self._copier.copy_all(output)
        self.records.append(Record(key, kind, type_name, len(self.records), inputs or [], outputs, skipped))

    def record_op(self, op_name: str, output) -> None:
        """Record one operator's outputs under the innermost running module."""
        module = self._stack[-1][0] if self._stack else ROOT
        self.record(self._call_key(f"{module}/{op_name}"), "op", op_name, output)

    def install(self, skip: frozenset[str] = frozenset()) -> None:
        """Register the hooks on every module but those named in `skip` and their submodules."""
        for name, module in self.model.named_modules():
            if any(name == skipped or name.startswith(f"{skipped}.") for skipped in skip):
                continue
            self._handles.append(module.register_forward_pre_hook(self._pre_hook, with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._post_hook, with_kwargs=True, always_call=False))

    def remove(self) -> None:
        """Remove the hooks and drop the host-copy cache."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.mutated = self._copier.mutated()
        self._copier = _HostCopier()

    def by_key(self, kind: str) -> dict[str, Record]:
        """Records of one kind by key."""
        return {record.key: record for record in self.records if record.kind == kind}


def _op_mode(recorder: Capture):
    from torch.utils._python_dispatch import TorchDispatchMode

    skipped = {"detach", "_to_copy", "copy_", "clone", "empty", "empty_like", "lift_fresh", "t", "view"}

    class _OperatorRecorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            output = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name not in skipped:
                recorder.record_op(name, output)
            return output

    return _OperatorRecorder()


@contextlib.contextmanager
def capture(model, per_op: bool = False, record_inputs: bool = True, clone_host: bool = True,
            skip: frozenset[str] = frozenset()) -> Iterator[Capture]:
    """Hooks on every module of `model` (but those named in `skip` and their submodules), and a
    dispatch mode when `per_op`, while the block runs.

    With `clone_host=False` host tensors are recorded without a copy; check `mutated` afterwards.
    """
    recorder = Capture(model, per_op=per_op, record_inputs=record_inputs, clone_host=clone_host)
    recorder.install(skip)
    try:
        if per_op:
            with _op_mode(recorder):
                yield recorder
        else:
            yield recorder
    finally:
        recorder.remove()
