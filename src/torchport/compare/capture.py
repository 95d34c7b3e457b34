"""Recording what a model computes: per-module inputs and outputs (forward hooks), and on request
every operator's outputs (a dispatch mode), copied to the host for comparison."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

from torchport.compare.metrics import flatten_tensors

__all__ = ["Record", "Capture", "capture"]


@dataclass
class Record:
    """What one call of one module (or one operator) produced."""

    key: str
    kind: str  # "module" or "op"
    type_name: str
    order: int
    inputs: list[tuple[str, Any]] = field(default_factory=list)
    outputs: list[tuple[str, Any]] = field(default_factory=list)


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

    def copy_all(self, value: Any) -> list[tuple[str, Any]]:
        import torch

        return [(path, self.copy(tensor)) for path, tensor in flatten_tensors(value) if isinstance(tensor, torch.Tensor)]


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
        name = self._names.get(id(module), type(module).__name__) or "(model)"
        inputs = self._copier.copy_all((args, kwargs)) if self.record_inputs else []
        self._stack.append((self._call_key(name), inputs))

    def _post_hook(self, module, args, kwargs, output):
        key, inputs = self._stack.pop()
        self.records.append(
            Record(key, "module", type(module).__name__, len(self.records), inputs, self._copier.copy_all(output))
        )

    def record_op(self, op_name: str, output) -> None:
        """Record one operator's outputs under the innermost running module."""
        module = self._stack[-1][0] if self._stack else "(model)"
        key = self._call_key(f"{module}/{op_name}")
        self.records.append(Record(key, "op", op_name, len(self.records), [], self._copier.copy_all(output)))

    def install(self) -> None:
        """Register the hooks on every module."""
        for module in self.model.modules():
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
def capture(model, per_op: bool = False, record_inputs: bool = True, clone_host: bool = True) -> Iterator[Capture]:
    """Hooks on every module of `model` (and a dispatch mode when `per_op`) while the block runs.

    With `clone_host=False` host tensors are recorded without a copy; check `mutated` afterwards.
    """
    recorder = Capture(model, per_op=per_op, record_inputs=record_inputs, clone_host=clone_host)
    recorder.install()
    try:
        if per_op:
            with _op_mode(recorder):
                yield recorder
        else:
            yield recorder
    finally:
        recorder.remove()
