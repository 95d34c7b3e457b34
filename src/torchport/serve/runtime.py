"""`Deployment`: one model on a primary device with a live way back to a fallback device.

A request that fails on the primary (an exception, no answer within `timeout_s`, NaN or inf in the
outputs, out of memory as the device's profile describes it, outputs that break the contract the
fallback's answer to the factory's example set, or outputs the factory's postprocess rejects) is
answered by the fallback within the same request. A model that cannot be moved to the primary at
start is served from the fallback, the breaker open, until a probe moves it. Repeated failures open
the circuit breaker (`torchport.serve.breaker`); shadow mode mirrors a share of traffic to the other
device and judges the two outputs with compare's parity rule (`torchport.serve.shadow`); canary mode
sends only a share of live traffic to the primary. `drain()` lets in-flight requests finish and
refuses new ones.

Primary calls run on persistent worker threads behind a lock rendezvous (`torchport.serve.handoff`)
so that a hung call can be abandoned at the timeout (Python cannot kill it; the call keeps its
worker until it returns and is counted as abandoned) while later requests take other workers; with
`timeout_s=None` they run in the caller's thread, without that handoff and without a timeout. The
fallback runs in the caller's thread, without a timeout: it is the last resort. An asyncio server
calls `predict_async`: the whole request (a failover to the fallback included) runs on a primary
worker, the primary in that worker's thread, and the event loop holds the primary's deadline (one
thread hop each way instead of two); past it, the fallback answers on a thread of its own pool.

Models run under `torch.no_grad()`, as plain PyTorch inference code runs them, so that a model
using autograd in `forward` works and its outputs are ordinary tensors a postprocess may edit. A
model whose integer parameters or buffers the primary's profile would narrow (int64 ids beyond its
int32) is not moved there, and a primary whose answer to the example differs from the fallback's
in integer outputs it narrows past their range starts out of service, its probes asking the example
again: neither answers wrongly in silence. The factory's postprocess gets its own copy of what
something else reads (`_given`). Failovers (rate-limited per cause) and the drift alarm's rising
and clearing are logged with their reasons.

The path of a healthy request is kept short, since the runtime's cost is paid on every call: one
fused finiteness check with one host sync, no copies for a host replica but the one a factory's
own postprocess is given, the metrics' labelled children looked up once, and the in-flight and
abandoned gauges read at scrape time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import functools
import logging
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from torchport.errors import TorchportError, UsageError
from torchport.serve.batching import MicroBatcher, bucket_sizes
from torchport.serve.breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker
from torchport.serve.errors import (Draining, InvalidInput, ModelRejectedInput, NoDeviceAnswered, PostprocessFailed,
                                    PreprocessFailed, ServeError, UnserializableOutput)
from torchport.serve.handoff import Busy, Deadline, Handoff
from torchport.serve.metrics import make_metrics
from torchport.compare.parity import call_model
from torchport.serve.model import (all_finite, default_postprocess, json_bytes, load_factory, load_weights,
                                   narrowed_integers, nonfinite_count, out_of_range, placements, state_out_of_range,
                                   to_device, unusable_device)
from torchport.serve.shadow import ShadowMonitor, ShadowResult

__all__ = ["Deployment", "Answer", "Replica", "UnfaithfulModel", "failure_cause", "PRIMARY", "FALLBACK", "FAILURE_CAUSES"]

PRIMARY, FALLBACK = "primary", "fallback"
#: The longest primary timeout: a day (a lock's wait is bounded by threading.TIMEOUT_MAX).
MAX_TIMEOUT_S = 86400.0
#: Why a primary call counts as failed. 'bad_output': the outputs break the contract the fallback's
#: outputs set at warm-up (structure, dtypes, ranks, batch size), or the factory's postprocess raised
#: on them while it accepts the fallback's.
FAILURE_CAUSES = ("error", "timeout", "nonfinite", "oom", "bad_output")


@dataclass
class Answer:
    """How one request was answered."""

    #: The model's outputs on the host, before postprocess.
    outputs: Any
    #: PRIMARY or FALLBACK, and the backend name of that device.
    role: str
    device: str
    #: The cause when this very request failed on the primary and was answered by the fallback.
    failover: str | None = None
    #: Why the request went straight to the fallback: 'canary', 'breaker_open' or 'out_of_range' (the
    #: primary's profile narrows an integer dtype its values do not fit); None: it did not.
    routed: str | None = None
    #: The primary could not be asked (its breaker open), whatever `routed` says: a shadow comparison
    #: of it is a mismatch, not a call of the primary.
    primary_unavailable: bool = False
    #: The canary share sent it to the fallback, which failed it, and the primary answered it.
    fallback_failed: bool = False
    latency_s: float = 0.0
    #: The postprocessed response body (predict only).
    body: Any = None
    #: `body` rendered as JSON (UTF-8 bytes; predict only).
    content: bytes = b""


_log = logging.getLogger("torchport.serve")

#: What a preprocess raises that is of the server's making, not the request's (a module or name its
#: code lacks, a vocabulary file the deployment lacks): 500; anything else it raises is about what the
#: request holds (a missing key, a value it cannot read, a corrupt image, an argparse-style exit): 400.
_SERVER_ERRORS = (ImportError, NameError, FileNotFoundError, PermissionError, MemoryError, NotImplementedError,
                  KeyboardInterrupt, GeneratorExit)


class _DeviceFailure(Exception):
    def __init__(self, cause: str, detail: str, fallback: tuple[Any, BaseException | None] | None = None):
        super().__init__(f"{cause}: {detail}")
        self.cause = cause
        self.detail = detail
        #: (outputs, error) of the fallback for the same input, when judging the primary already ran it.
        self.fallback = fallback


class UnfaithfulModel(TorchportError):
    """The model cannot be held faithfully on a device (its profile narrows an integer type whose
    values in the model's parameters or buffers do not fit): it is not moved there."""


class _Abandoned(BaseException):
    """Unwinds a worker whose request the event loop answered without it (its primary call passed
    the deadline): nothing it computed is counted or returned. Not an Exception, so that no
    handler on the way mistakes it for the model's failure."""


#: The least time between two log lines about primary failures (failovers).
FAILURE_LOG_INTERVAL_S = 10.0


class _RateLimitedLog:
    """Logs at most one line per `interval_s` for each key (a failover's cause: a burst of errors
    does not hide the out-of-memory that follows); the next line logged for that key says how many
    were held back."""

    def __init__(self, interval_s: float):
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def warning(self, key: str, message: str, *args: Any) -> None:
        with self._lock:
            now = time.monotonic()
            last = self._last.get(key)
            if last is not None and now - last < self.interval_s:
                self._held[key] = self._held.get(key, 0) + 1
                return
            held, self._held[key], self._last[key] = self._held.get(key, 0), 0, now
        if held:
            message += " (%d more such line(s) since the last one logged, not logged)"
            args = (*args, held)
        _log.warning(message, *args)


class _Window:
    """The primary's part of a request that runs on a worker while an event loop holds its deadline
    (`Deployment.predict_async`). The worker enters it before calling the primary and leaves it
    after; the loop abandons the request when the primary has been running `timeout_s`. Whichever
    comes first under the lock wins, so a request is answered exactly once."""

    __slots__ = ("lock", "state", "started", "inputs", "arrived")

    def __init__(self):
        self.lock = threading.Lock()
        self.state = "before"  # -> "primary" -> "after", or "primary" -> "abandoned"
        self.started = 0.0
        self.inputs = None
        #: perf_counter() when the request reached the runtime (after preprocess): its latency's start.
        self.arrived = 0.0

    def enter(self, inputs: Any) -> None:
        with self.lock:
            if self.state == "abandoned":
                raise _Abandoned()
            self.inputs, self.started, self.state = inputs, time.monotonic(), "primary"

    def leave(self) -> None:
        """Raises _Abandoned when the loop has given up on this request."""
        with self.lock:
            if self.state == "abandoned":
                raise _Abandoned()
            self.state = "after"

    def expire(self, timeout_s: float) -> float | None:
        """None when the request is abandoned now (its primary call has run `timeout_s`); else the
        seconds until it could be."""
        with self.lock:
            if self.state != "primary":
                return timeout_s  # not in the primary call: no deadline runs (check again later)
            left = self.started + timeout_s - time.monotonic()
            if left > 0:
                return left
            self.state = "abandoned"
            return None


def _finished(task, gate, admission) -> None:
    """A request task of `predict_async` ended: its place at the gate is free, it is no longer in
    flight; an error nobody awaits any more (the caller was cancelled) counts as seen."""
    gate.release()
    admission.__exit__(None, None, None)
    if not task.cancelled():
        task.exception()


def _resolve(future, outcome) -> None:
    """Settle an asyncio future from the loop's thread, once."""
    if not future.done():
        future.set_result(outcome)


def _batch(inputs: Any) -> int | None:
    """The batch size of `inputs`: the first dimension of a tensor, or the one every tensor of a
    tuple or dict of inputs shares (a transformers model's input_ids and attention_mask)."""
    import torch

    if isinstance(inputs, torch.Tensor):
        return inputs.shape[0] if inputs.dim() >= 1 else None
    from torchport.compare.tree import flatten_tensors

    sizes = {tensor.shape[0] if tensor.dim() >= 1 else None for _, tensor in flatten_tensors(inputs)}
    return sizes.pop() if len(sizes) == 1 else None


def _layout(value: Any) -> tuple[tuple[str, str, int], ...]:
    """Per tensor inside `value`: its path, dtype and rank."""
    import torch

    from torchport.compare.tree import flatten_tensors

    pairs = [("", value)] if isinstance(value, torch.Tensor) else flatten_tensors(value)
    return tuple((path, str(tensor.dtype).removeprefix("torch."), tensor.dim()) for path, tensor in pairs)


def _row_shapes(value: Any, batched: frozenset[str] | None = None) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Per tensor inside `value`: its path and its shape without the batch dimension (inputs: every
    tensor's; outputs, given `batched`: the shape past the first dimension of those that follow the
    batch, the whole shape of the others)."""
    import torch

    from torchport.compare.tree import flatten_tensors

    pairs = [("", value)] if isinstance(value, torch.Tensor) else flatten_tensors(value)
    return tuple((path, tuple(tensor.shape[1:]) if batched is None or path in batched else tuple(tensor.shape))
                 for path, tensor in pairs)


def batched_paths(run: Callable[[Any], Any], example: Any, outputs: Any) -> frozenset[str]:
    """The paths of the outputs whose first dimension is the batch: those that follow it when the
    `example` is run again with every input tensor doubled along its first dimension (`run` is the
    fallback; `outputs` its answer to `example`). Empty when the example has no batch or the model
    does not take the doubled one."""
    import torch

    from torchport.compare.tree import flatten_tensors, map_tensors

    batch = _batch(example)
    if batch is None or batch == 0:
        return frozenset()
    try:
        doubled = run(map_tensors(lambda tensor: torch.cat([tensor, tensor]), example))
    except (Exception, SystemExit):
        return frozenset()
    single, twice = dict(flatten_tensors(outputs)), dict(flatten_tensors(doubled))
    paths = frozenset(path for path, tensor in single.items()
                      if tensor.dim() >= 1 and tensor.shape[0] == batch and path in twice
                      and tuple(twice[path].shape) == (2 * batch, *tensor.shape[1:]))
    if isinstance(outputs, (list, tuple)) and isinstance(doubled, (list, tuple)) \
            and len(outputs) == batch and len(doubled) == 2 * batch:
        paths |= {ENTRY_PER_ROW}  # one entry per input row (a detector's list of dicts): OutputContract.per_row
    return paths


#: In `batched_paths`: the outputs are a list with one entry per input row.
ENTRY_PER_ROW = "[per row]"


#: How many of the example's rows `rows_mixed` runs alone.
ROWS_CHECKED = 8


def rows_alike(example: Any) -> bool:
    """Whether every input tensor of `example` has the same value in all its rows (`torch.zeros(2, 4)`,
    a placeholder): running its rows alone cannot show a model that mixes them."""
    import torch

    from torchport.compare.tree import flatten_tensors

    tensors = [example] if isinstance(example, torch.Tensor) else [tensor for _, tensor in flatten_tensors(example)]
    return all(tensor.dim() >= 1 and bool((tensor == tensor[:1]).all()) for tensor in tensors)


def repeated(example: Any, rows: int) -> Any:
    """`example` (a tensor, or tensors with one batch dimension) repeated along dimension 0 to `rows` rows."""
    import torch

    from torchport.compare.tree import map_tensors

    repeats = -(-rows // (_batch(example) or 1))
    return map_tensors(lambda tensor: torch.cat([tensor] * repeats)[:rows], example)


def rows_mixed(run: Callable[[Any], Any], example: Any, batched: frozenset[str],
               sizes: tuple[int, ...] = ()) -> dict[int, list[str]]:
    """The outputs that change with the other rows of the batch, by the batch size where they do:
    `run` (the fallback) on each of the example's rows alone (the first ROWS_CHECKED) against the
    whole example, and against the example repeated (or cut) to each of `sizes` rows, the sizes
    joined batches run at (a model may take another path for another batch size). An output that
    does not follow the batch must be the same (a batch mean, a row count would not be), and so must
    a value beside the tensors (a `float(y.max())` would not); one that follows it must give each row
    the same row (a row computed over the batch, `y - y.mean(0)`, a cumulative sum over it, cross-row
    attention, would not). And the example's rows beside a row of a wider range (the last, times 8
    plus 1; float inputs) must get their own rows: a scale or statistic taken over the whole batch
    (dynamic quantization's, a batch-wide normalisation) would not, though the example's rows, of
    one range, cannot show it. Micro-batching would give such an output, computed over other
    clients' rows, to every request."""
    import torch

    from torchport.compare.tree import _leaves_with_paths, flatten_tensors, map_tensors

    def values(outputs):
        return [(path, leaf) for path, leaf in _leaves_with_paths(outputs) if not isinstance(leaf, torch.Tensor)]

    batch = _batch(example) or 0
    rows = min(batch, ROWS_CHECKED)
    alone = [run(map_tensors(lambda tensor, row=row: tensor[row:row + 1], example)) for row in range(rows)]
    # (inputs, size, the rows compared, what is noted beside a path that differs)
    batches = [(example, batch, range(batch), "")]
    batches += [(repeated(example, size), size, range(size), "") for size in sorted(sizes) if size != batch]
    if batch >= 2 and all(tensor.is_floating_point() for _, tensor in flatten_tensors(example)):
        # the example's rows beside another client's row of a wider range: a scale or statistic taken
        # over the whole batch (dynamic quantization, a batch-wide normalisation) changes the others' answers
        def widened(tensor):
            wide = tensor.clone()
            wide[-1] = wide[-1] * 8 + 1
            return wide

        batches.append((map_tensors(widened, example), batch, range(batch - 1), " (beside a row of a wider range)"))
    mixed: dict[int, list[str]] = {}
    for inputs, size, compared, note in batches:
        answer = run(inputs)
        whole, whole_values = dict(flatten_tensors(answer)), values(answer)
        found = mixed.get(size, [])
        for row in compared:
            if row % batch >= rows:
                continue
            single_answer = alone[row % batch]
            single_tensors = dict(flatten_tensors(single_answer))
            for path, tensor in whole.items():
                single = single_tensors.get(path)
                if path in batched:  # a batch of one gives one row; kernels for other batch sizes may round it otherwise
                    tensor, rtol, atol = tensor[row:row + 1], 1e-3, 1e-4
                else:
                    rtol, atol = 1e-5, 1e-6
                same = single is not None and single.shape == tensor.shape and (
                    torch.allclose(single.double(), tensor.double(), rtol=rtol, atol=atol)
                    if tensor.is_floating_point() or tensor.is_complex() else torch.equal(single, tensor))
                if not same and (path or "tensor") + note not in found:
                    found.append((path or "tensor") + note)
            if values(single_answer) != whole_values:
                changed = [path for (path, leaf), (_, other) in zip(values(single_answer), whole_values) if leaf != other]
                for path in changed or ["values beside the tensors"]:
                    if path + note not in found:
                        found.append(path + note)
        if found:
            mixed[size] = found
    return mixed


#: How many input layouts (paths, dtypes, ranks) the contract learns beyond the example's.
CONFIRMED_LAYOUTS = 64


class OutputContract:
    """The primary's outputs must look like the fallback's did on the warm-up example: the same
    tensors (paths), dtypes (or the primary profile's downcast of them), ranks, and a batch-sized
    first dimension where the fallback's followed the batch. Shapes beyond that may follow the input.

    The contract is a cheap filter, not the judge: outputs that break it are held against the
    fallback's answer for the same input (`differs`), and what the fallback confirms is learned
    (`confirm`), so a healthy primary is never failed over twice for what the example did not
    foresee: an output layout for an input layout (an input of another rank, one entry per input row
    for a batch of another size), and a dimension whose length follows the values (the boxes a
    detector keeps)."""

    def __init__(self, reference: Any, example: Any, batched: frozenset[str], downcasts: Mapping[str, str]):
        #: Whether the outputs are a list with one entry per input row (a detector's list of dicts).
        self.per_row = ENTRY_PER_ROW in batched
        batched = batched - {ENTRY_PER_ROW}
        self.reference = tuple((path, dtype, rank, path in batched) for path, dtype, rank in _layout(reference))
        #: The outputs that follow the batch (their first dimension is the input's batch size).
        self.batched = batched
        self._downcasts = dict(downcasts)
        self._allowed = {(path, dtype): {dtype, downcasts.get(dtype, dtype)} for path, dtype, _, _ in self.reference}
        #: input layout -> {output layout the fallback confirmed for it: the outputs following the batch
        #: (None: learned from a batch of one)}
        self._confirmed: dict[tuple, dict[tuple, frozenset[str] | None]] = {}
        self._learned = 0
        self._lock = threading.Lock()
        #: Inputs laid out row for row as the example's are answered with the shapes the fallback gave
        #: it (a primary answering 2 logits where it answers 3 breaks the contract)...
        self._example_rows = _row_shapes(example) if _batch(example) is not None else None
        self._reference_rows = dict(_row_shapes(reference, batched))
        #: ...but for the (path, dimension) pairs the fallback answered such an input with another length.
        self._free: set[tuple[str, int]] = set()

    def violation(self, outputs: Any, inputs: Any) -> str | None:
        """None when `outputs` keep the contract, else what differs."""
        if self.per_row and isinstance(outputs, (list, tuple)):
            batch = _batch(inputs)
            if batch is not None and len(outputs) != batch:
                return f"the outputs hold {len(outputs)} entries for a batch of {batch} (one per row for the fallback)"
        found = self._against_reference(outputs, inputs)
        if found is not None and self._confirmed:
            learned = self._confirmed.get(_layout(inputs), {})
            layout = _layout(outputs)
            if layout in learned:
                found = self._rows(outputs, inputs, learned[layout], found)
        return found if found is not None else self._example_shaped(outputs, inputs)

    def _example_shaped(self, outputs: Any, inputs: Any) -> str | None:
        """For inputs shaped as the example's (past the batch): None when the outputs' shapes past the
        batch are the fallback's for the example, but for lengths it answered another with since
        (a length that follows the values), else what differs."""
        if self._example_rows is None or _row_shapes(inputs) != self._example_rows:
            return None
        for path, shape, dimension, want in self._row_differences(outputs):
            if (path, dimension) not in self._free:
                return (f"output {path or 'tensor'} has shape {list(shape)} (past the batch) for an input shaped "
                        f"as the example, the fallback's {list(want)}")
        return None

    def _row_differences(self, outputs: Any):
        """(path, shape, dimension, the example's shape) for each dimension past the batch in which an
        output differs from the fallback's answer to the example (a path it did not have: none)."""
        for path, shape in _row_shapes(outputs, self.batched):
            want = self._reference_rows.get(path)
            if want is None or want == shape:
                continue
            for dimension, (length, wanted) in enumerate(zip(shape, want)):
                if length != wanted:
                    yield path, shape, dimension, want

    @staticmethod
    def _rows(outputs: Any, inputs: Any, batched: frozenset[str] | None, found: str) -> str | None:
        """For a learned layout: None when every output learned to follow the batch has a row per
        input row; `found` (confirm again) when which ones follow it was learned from a batch of one."""
        import torch

        from torchport.compare.tree import flatten_tensors

        batch = _batch(inputs)
        if batch is None or (batch < 2 and batched is None):
            return None
        if batched is None:
            return found
        for path, tensor in [("", outputs)] if isinstance(outputs, torch.Tensor) else flatten_tensors(outputs):
            if path in batched and tensor.shape[0] != batch:
                return f"output {path or 'tensor'} has {tensor.shape[0]} rows for a batch of {batch}"
        return None

    def _against_reference(self, outputs: Any, inputs: Any) -> str | None:
        import torch

        from torchport.compare.tree import flatten_tensors

        actual = [("", outputs)] if isinstance(outputs, torch.Tensor) else flatten_tensors(outputs)
        if [path for path, _ in actual] != [entry[0] for entry in self.reference]:
            return (f"output tensors {[path or 'tensor' for path, _ in actual]} differ from the fallback's "
                    f"{[entry[0] or 'tensor' for entry in self.reference]}")
        batch = _batch(inputs)
        for (path, tensor), (_, want_dtype, want_rank, want_batched) in zip(actual, self.reference):
            name, dtype = path or "tensor", str(tensor.dtype).removeprefix("torch.")
            if dtype not in self._allowed[(path, want_dtype)]:
                return f"output {name} is {dtype}, the fallback's is {want_dtype}"
            if tensor.dim() != want_rank:
                return f"output {name} has {tensor.dim()} dimensions, the fallback's {want_rank}"
            if want_batched and batch is not None and tensor.shape[0] != batch:
                return f"output {name} has {tensor.shape[0]} rows for a batch of {batch}"
        return None

    def differs(self, outputs: Any, reference: Any) -> str | None:
        """None when the primary's `outputs` have the paths, shapes and dtypes (up to the profile's
        downcasts) of the fallback's `reference` for the same input, else what differs."""
        import torch

        from torchport.compare.tree import flatten_tensors

        actual = [("", outputs)] if isinstance(outputs, torch.Tensor) else flatten_tensors(outputs)
        expected = [("", reference)] if isinstance(reference, torch.Tensor) else flatten_tensors(reference)
        if [path for path, _ in actual] != [path for path, _ in expected]:
            return (f"the fallback answers this input with tensors {[path or 'tensor' for path, _ in expected]}, "
                    f"the primary with {[path or 'tensor' for path, _ in actual]}")
        for (path, tensor), (_, want) in zip(actual, expected):
            name = path or "tensor"
            dtype, want_dtype = (str(t.dtype).removeprefix("torch.") for t in (tensor, want))
            if dtype not in (want_dtype, self._downcasts.get(want_dtype, want_dtype)):
                return f"output {name} is {dtype}, the fallback's answer to this input is {want_dtype}"
            if tensor.shape != want.shape:
                return (f"output {name} has shape {list(tensor.shape)}, the fallback's answer to this input "
                        f"{list(want.shape)}")
        return None

    def confirm(self, inputs: Any, outputs: Any) -> bool:
        """Learn what the fallback's answer for the same input confirmed: the layout of `outputs` for
        inputs laid out as `inputs`, with which outputs follow the batch (those with a row per input
        row, known from a batch of 2 or more; None: learned from a batch of one), and, for inputs
        shaped as the example's, the dimensions in which they differ from its answer. False when
        nothing new could be learned (CONFIRMED_LAYOUTS layouts learned already)."""
        import torch

        from torchport.compare.tree import flatten_tensors

        batch = _batch(inputs)
        batched = None
        if batch is not None and batch >= 2:
            pairs = [("", outputs)] if isinstance(outputs, torch.Tensor) else flatten_tensors(outputs)
            batched = frozenset(path for path, tensor in pairs if tensor.dim() >= 1 and tensor.shape[0] == batch)
        learned = False
        with self._lock:
            if self._against_reference(outputs, inputs) is not None:
                layouts = self._confirmed.setdefault(_layout(inputs), {})
                layout = _layout(outputs)
                if layout not in layouts and self._learned < CONFIRMED_LAYOUTS:
                    layouts[layout], learned = batched, True
                    self._learned += 1
                elif layout in layouts and batched is not None and layouts[layout] != batched:
                    # which outputs follow the batch, now known; one seen not following it never does (a
                    # detector's image keeping as many boxes as the batch has images, by chance)
                    known = layouts[layout]
                    layouts[layout] = batched if known is None else known & batched
                    learned = layouts[layout] != known
            if self._example_rows is not None and _row_shapes(inputs) == self._example_rows:
                free = {(path, dimension) for path, _, dimension, _ in self._row_differences(outputs)}
                learned = learned or not free <= self._free
                self._free |= free
        return learned


def failure_cause(error: BaseException, backend) -> str:
    """'oom' when `error` is `backend`'s device (or the host) out of memory, as its profile's
    `out_of_memory` facts recognise it (`Backend.is_out_of_memory`); 'error' for anything else."""
    return "oom" if backend.is_out_of_memory(error) else "error"


class Replica:
    """The model on one device; loaded at construction, or on first use when `lazy`."""

    def __init__(self, role: str, backend, model, lazy: bool = False, copy_model: bool = False):
        self.role = role
        self.backend = backend
        self.name = backend.name
        try:
            self._source = copy.deepcopy(model) if copy_model else model
        except Exception as error:
            raise UsageError(f"The model cannot be copied for the {role} device {self.name!r} (copy.deepcopy raised "
                             f"{type(error).__name__}: {error}). Keep locks, files and sockets out of the module's "
                             "attributes, or give it a __deepcopy__.") from error
        self._model = None
        self._lock = threading.Lock()
        self.device = None
        if not lazy:
            self.model()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def profile_downcasts(self) -> dict[str, str]:
        """{'float64': 'float32', ...}: the dtypes this device's profile computes in a narrower type."""
        try:
            return self.backend.profile().downcasts()
        except Exception:  # a third-party backend without a profile
            return {}

    def model(self):
        """The model on this device, moving it there on first use. A model whose integer parameters or
        buffers hold values the device's profile would narrow (int64 ids beyond 2**31 on a device that
        computes int64 as int32) is not moved (UnfaithfulModel): the device would hold them wrapped and
        answer wrongly, silently."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    narrowed = narrowed_integers(self.profile_downcasts())
                    found = state_out_of_range(self._source, narrowed, f"the {self.role} {self.name!r}")
                    if found is not None:
                        raise UnfaithfulModel(f"{found}: the device would hold them wrapped and answer wrongly")
                    self.device = self.backend.device()
                    self._model = self._source.to(self.device)
                    self._source = None
        return self._model

    def run(self, inputs: Any) -> Any:
        """The model's outputs for `inputs` (host tensors in, host tensors out). The model gets its own
        copy of the inputs, as a device replica does by the move: one that edits its input in place
        (`x.div_(255)`) leaves the request's tensors as they came for the other device (a failover, a
        shadow comparison, a probe).

        The call runs under `torch.no_grad()`, as plain PyTorch inference code does, not under
        `torch.inference_mode()`: a model may use autograd inside `forward` (`torch.enable_grad()` and
        `torch.autograd.grad`, for forces or saliency), which inference mode forbids, and its outputs
        are ordinary tensors that a postprocess may edit in place."""
        import torch

        model = self.model()
        with torch.no_grad():
            if self.device.type == "cpu" and isinstance(inputs, torch.Tensor) and inputs.device.type == "cpu":
                outputs = call_model(model, inputs.clone())  # host to host: a copy, nothing to move
                if isinstance(outputs, torch.Tensor) and outputs.device.type == "cpu":
                    return outputs
                return to_device(outputs, "cpu")
            if self.device.type == "cpu":
                from torchport.compare.tree import map_tensors

                moved = map_tensors(lambda tensor: tensor.to("cpu", copy=True), inputs)
            else:
                moved = to_device(inputs, self.device)
            return to_device(call_model(model, moved), "cpu")


def _share(name: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise UsageError(f"{name}={value!r} is not a share. Allowed: a number from 0.0 to 1.0, e.g. {name}=0.05.")
    return float(value)


class _Share:
    """Picks exactly `share` of the calls, evenly spread (deterministic, unlike a coin toss): call n
    is picked when floor(n * share) grows, counted in exact fractions (the share as the decimal the
    user wrote: 0.1 is 1/10, so every 10th call, not the float's 0.1000000000000000055...)."""

    def __init__(self, share: float):
        import fractions

        self.share = share
        exact = fractions.Fraction(repr(float(share)))  # the shortest decimal that is the float: 0.1 -> 1/10
        self._numerator, self._denominator = exact.numerator, exact.denominator
        self._calls = 0
        self._lock = threading.Lock()

    def pick(self) -> bool:
        if self.share >= 1.0:
            return True
        if self.share <= 0.0:
            return False
        with self._lock:
            before = self._calls * self._numerator // self._denominator
            self._calls += 1
            return self._calls * self._numerator // self._denominator > before


@dataclass
class _Background:
    """A small pool for probes and shadow comparisons, with a bound on pending shadow work."""

    limit: int
    pool: concurrent.futures.ThreadPoolExecutor = field(default=None)
    pending: int = 0
    condition: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self):
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="torchport-background")

    def submit(self, function, *args, bounded: bool = True) -> bool:
        with self.condition:
            if bounded and self.pending >= self.limit:
                return False
            self.pending += 1
        try:
            self.pool.submit(self._run, function, *args)
        except RuntimeError:  # shut down
            self._done()
            return False
        return True

    def _run(self, function, *args):
        try:
            function(*args)
        finally:
            self._done()

    def _done(self):
        with self.condition:
            self.pending -= 1
            self.condition.notify_all()

    def flush(self, timeout_s: float) -> bool:
        with self.condition:
            return self.condition.wait_for(lambda: self.pending == 0, timeout_s)


class Deployment:
    """Serve `factory`'s model on `primary` with `fallback` as the live way back.

    `factory` is a `module:function` or a callable returning the model or a dict with `model` and
    optionally `preprocess` and `postprocess` (see `torchport.serve.model`). `shadow` is the share of
    requests also run on the other device and compared; `canary` the share of live traffic sent to
    the primary. The breaker opens after `failure_threshold` primary failures in a row, probes after
    `reset_after_s` and closes after `recovery_successes` good probes in a row. `batch_max_size` > 1
    joins concurrent single-tensor requests into one call (`torchport.serve.batching`; off by default).
    """

    def __init__(self, factory: Any, primary: str = "auto", fallback: str = "cpu", timeout_s: float = 2.0,
                 shadow: float = 0.0, canary: float = 1.0, *, failure_threshold: int = 5,
                 reset_after_s: float = 5.0, recovery_successes: int = 3, shadow_alarm_after: int = 3,
                 shadow_window: int = 100, thresholds: Mapping[str, Any] | None = None, lazy_fallback: bool = False,
                 max_concurrency: int = 32, max_background: int = 8, weights: str | None = None,
                 batch_max_size: int = 1, batch_wait_s: float = 0.002, warmup_timeout_s: float | None = 600.0):
        from torchport.backends import resolve

        if warmup_timeout_s is not None and not 0 < warmup_timeout_s <= MAX_TIMEOUT_S:
            raise UsageError(f"warmup_timeout_s={warmup_timeout_s!r} must be a positive number of seconds up to "
                             f"{MAX_TIMEOUT_S:.0f}, e.g. warmup_timeout_s=600 (or None: wait for the primary's warm-up).")
        #: How long the primary's warm-up may take before traffic starts on the fallback without it.
        self.warmup_timeout_s = warmup_timeout_s
        if timeout_s is not None and not 0 < timeout_s <= MAX_TIMEOUT_S:
            raise UsageError(f"timeout_s={timeout_s!r} must be a positive number of seconds up to {MAX_TIMEOUT_S:.0f}, "
                             "e.g. timeout_s=2 (or None: no timeout, the primary runs in the caller's thread).")
        if max_concurrency < 1:
            raise UsageError(f"max_concurrency={max_concurrency!r} must be at least 1.")
        if batch_max_size < 1 or not 0 <= batch_wait_s <= 1:
            raise UsageError(f"batch_max_size={batch_max_size!r}, batch_wait_s={batch_wait_s!r}: need a size >= 1 "
                             "(1: no batching) and a wait from 0 to 1 second, e.g. batch_max_size=8, batch_wait_s=0.002.")
        self.timeout_s = None if timeout_s is None else float(timeout_s)
        self.shadow_share = _share("shadow", shadow)
        self.canary_share = _share("canary", canary)
        self._shadow_pick = _Share(self.shadow_share)
        self._canary_pick = _Share(self.canary_share)
        primary_backend, fallback_backend = resolve(primary), resolve(fallback)
        self.shadow_note = ""
        if primary_backend.name == fallback_backend.name and self.shadow_share > 0:
            self.shadow_note = (f"shadow not checked: primary and fallback are both {primary_backend.name!r}, "
                                "a comparison would be a self-comparison")
            self._shadow_pick = _Share(0.0)
        self.spec = load_factory(factory)
        if weights:
            load_weights(self.spec.model, weights)
        self.primary = Replica(PRIMARY, primary_backend, self.spec.model, lazy=True, copy_model=True)
        self.fallback = Replica(FALLBACK, fallback_backend, self.spec.model, lazy=True)
        if not lazy_fallback:
            try:
                self.fallback.model()
            except Exception as error:
                raise UsageError(f"The model cannot be moved to the fallback {self.fallback.name!r}: "
                                 f"{type(error).__name__}: {error}. The fallback is the way back; pick one the "
                                 "model loads on (e.g. --fallback cpu).") from error
        self.metrics = make_metrics(self._replicas_loaded)
        self._failure_log = _RateLimitedLog(FAILURE_LOG_INTERVAL_S)
        self.breaker = CircuitBreaker(failure_threshold, reset_after_s, recovery_successes,
                                      on_change=self._breaker_changed)
        #: Why the model could not be moved to the primary at start (None: it was); traffic then
        #: starts on the fallback and the breaker's probes retry the move.
        self.primary_load_error = self._load_primary()
        self.shadow_monitor = ShadowMonitor(shadow_alarm_after, shadow_window, thresholds,
                                            downcasts=self.primary.profile_downcasts(), on_alarm=self._alarm_changed)
        #: {torch.int64: torch.int32}: integer inputs the primary computes in a narrower type; a request
        #: whose values do not fit goes to the fallback (the primary would answer it wrapped, silently)
        self._narrowed = narrowed_integers(self.primary.profile_downcasts())
        self.max_concurrency = max_concurrency
        # Room for every live call plus as many abandoned at their timeout, so that a few hung calls do
        # not make healthy ones wait; with every worker busy a call fails over at once.
        self._primary_workers = Handoff(2 * max_concurrency + 4, "torchport-primary")
        self.metrics.watch(in_flight=lambda: self._in_flight, abandoned=lambda: self._primary_workers.abandoned)
        self._background = _Background(max_background)
        self._async_pool: concurrent.futures.ThreadPoolExecutor | None = None
        #: predict_async's bound on requests running at once, one per event loop.
        self._gates: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        #: predict's and infer's bound on requests running at once from callers' threads.
        self._thread_gate = threading.Semaphore(max_concurrency)
        self._state = threading.Condition()
        #: close() was called (the pools stop when no request is in flight), and they have stopped.
        self._closing = self._stopped = False
        self._in_flight = 0
        self.draining = False
        #: The output contract from the fallback's answer to the factory's example (None: no example, the
        #: primary's outputs are checked for NaN and inf only; status() says so).
        self.contract: OutputContract | None = None
        #: Whose outputs on the example set the contract: FALLBACK, or PRIMARY with a lazy fallback.
        self.contract_source: str | None = None
        #: The fallback's answer to the example, kept while the primary's differed from it at start: its
        #: probes ask the example too, so a primary that answers it wrongly is not taken back.
        self._example_reference: Any = None
        #: How each loaded device did on the factory's example at start ("ok" or what went wrong).
        self.warmup = self._warm_up(self.spec.example) if self.spec.example is not None else {}
        if self.primary_load_error and not self.warmup:
            self.warmup = {PRIMARY: f"not loaded: {self.primary_load_error}"}
        #: Joins concurrent single-tensor requests into one call when batch_max_size > 1 (off by default);
        #: it splits the outputs the contract found to follow the batch and gives the others whole.
        self.batcher = None
        #: Micro-batching's size limit, and where the primary failed the example joined to a larger batch.
        self.batching: dict[str, Any] | None = None
        #: The batch size to check on the primary once its probes take it back (it failed its warm-up).
        self._batch_sizes_unchecked = 0
        if batch_max_size > 1:
            self._refuse_batching_if_unsafe(batch_max_size, max_concurrency)
            if self.contract_source == FALLBACK:  # checked on the fallback before the primary compiles each size
                self._refuse_batching_if_rows_mix(batch_max_size)
            self._batch_asked = batch_max_size
            size, self.batching = self._batch_the_primary_takes(batch_max_size)
            if self.contract_source != FALLBACK and size > 1:  # a lazy fallback: on the primary, at the sizes it takes
                self._refuse_batching_if_rows_mix(size)
            if size > 1 or self._batch_sizes_unchecked:
                # a probe made from a joined batch is judged as a postprocessed request is (the batch may
                # hold requests of either kind; the postprocess check only ever keeps a primary out longer)
                self.batcher = MicroBatcher(lambda joined, probe: self._route_and_run(joined, True, probe_inputs=probe,
                                                                                 canary=False),
                                            size, batch_wait_s, self.contract.batched)

    def _refuse_batching_if_unsafe(self, batch_max_size: int, max_concurrency: int) -> None:
        """Micro-batching can work for this model: the example is one tensor with 2 or more different
        rows, some outputs follow the batch, and batches can fill."""
        import torch

        example = self.spec.example
        why = None
        if self.contract is None:
            why = (f"the factory's 'example' answered by the fallback, to learn which outputs follow the batch "
                   f"({self._contract_status()}). Return {{'model': ..., 'example': inputs}} from the factory")
        elif not isinstance(example, torch.Tensor):
            why = (f"requests whose input is one tensor (it joins them along dimension 0); this model's example is a "
                   f"{type(example).__name__}, so no request would ever be joined")
        elif (_batch(example) or 0) < 2:
            why = "an 'example' with 2 or more rows along dimension 0 (the factory's has fewer). Fix the example"
        elif not self.contract.batched:
            why = "an 'example' whose outputs follow its batch (none of the fallback's outputs grew with it)"
        elif rows_alike(example):
            why = ("an 'example' whose rows differ (the factory's are all the same, as in torch.zeros(2, 4): run alone "
                   "they cannot show whether the model mixes the rows of a batch). Give real inputs")
        if why is not None:
            raise UsageError(f"Micro-batching (batch_max_size={batch_max_size}, --batch-max-size) needs {why}; "
                             "or turn batching off (batch_max_size=1, the default).")
        if batch_max_size > max_concurrency:
            raise UsageError(f"batch_max_size={batch_max_size} is more than max_concurrency={max_concurrency}: a batch "
                             "joins only requests running at once, so it could never fill. Raise max_concurrency "
                             f"(--max-concurrency) to at least {batch_max_size}.")

    def _refuse_batching_if_rows_mix(self, batch_max_size: int) -> None:
        """No output of the model depends on the other rows of a batch, at any size joined batches run
        at (on the replica that set the contract: the fallback, or a lazy fallback's primary)."""
        sizes = bucket_sizes(batch_max_size)
        replica = self.fallback if self.contract_source == FALLBACK else self.primary
        try:
            mixed = rows_mixed(replica.run, self.spec.example, self.contract.batched, sizes)
        except (Exception, SystemExit) as error:  # a batch norm in training mode cannot take one row alone
            raise UsageError(f"Micro-batching (batch_max_size={batch_max_size}, --batch-max-size) runs the example's "
                             "rows alone and in batches of each size it joins, to check that no request's answer "
                             f"depends on the others' rows; on {replica.name!r} that raised {type(error).__name__}: "
                             f"{error}. Turn batching off (batch_max_size=1, the default), or serve the model in "
                             "eval mode if it was returned with 'eval': False.") from None
        if not mixed:
            return
        first = min(mixed)
        rows = _batch(self.spec.example)
        where = ("the example's rows ran alone and together" if first == rows else
                 f"the example's rows ran alone and in a batch of {first} rows (the example repeated to that size, "
                 "a size joined batches run at)")
        safe = [size for size in sizes if size < first]
        advice = (f"Lower batch_max_size (--batch-max-size) to {safe[-1]}, where they agree, or turn batching off"
                  if safe and first != rows else "Turn batching off (batch_max_size=1, the default)")
        raise UsageError(f"Micro-batching (batch_max_size={batch_max_size}, --batch-max-size) needs outputs that do not "
                         f"depend on the other rows of a batch: {', '.join(mixed[first])} differed when {where} "
                         "(joined, a request would get its answer computed over other clients' rows). "
                         f"{advice}.")

    def _batch_the_primary_takes(self, batch_max_size: int) -> int:
        """The largest micro-batch the primary answers, checked at start: the example repeated (or
        cut) to each size joined batches run at (`bucket_sizes`), smallest first, runs on the primary
        within the warm-up limit (on a compiling device each size compiles here, not on live traffic)
        and, with a timeout, once more within `timeout_s`. Batches are capped below the first size it
        fails (an error, as a graph compiled for a fixed batch raises, out of memory, NaN, or past the
        timeout); none passing turns batching off. Joined batches the primary cannot take would fail
        over as a whole and open the breaker. A cap is logged and /readyz reports it. A primary out of
        service at start is checked once its probes take it back: until then requests are not joined
        (the size 1). Returns the size and what /readyz reports of it."""
        if not self.warmup.get(PRIMARY, "").startswith("ok") or not self.primary.loaded:
            self._batch_sizes_unchecked = batch_max_size
            return 1, {"max_size": 1, "asked": batch_max_size, "primary_checked": False}
        passed, failure = 1, None
        for size in bucket_sizes(batch_max_size):
            batch = repeated(self.spec.example, size)
            try:
                bad = nonfinite_count(self._warm_up_run(self.primary, batch))
                if not bad and self.timeout_s is not None:
                    began = time.perf_counter()
                    self._warm_up_run(self.primary, batch)
                    took = time.perf_counter() - began
                    if took > self.timeout_s:
                        failure = f"{size} rows: {took:.3g} s, past timeout_s ({self.timeout_s:g} s)"
                        break
                if bad:
                    failure = f"{size} rows: {bad} NaN or inf elements in the outputs"
                    break
            except (Exception, SystemExit) as error:
                failure = f"{size} rows: {type(error).__name__}: {error}"
                break
            passed = size
        batching: dict[str, Any] = {"max_size": passed}
        if failure is not None:
            batching.update(asked=batch_max_size, primary_failed=failure)
            if passed > 1:
                _log.warning("micro-batches capped at %d rows (asked: %d, --batch-max-size): the primary %r failed the "
                             "example joined to %s", passed, batch_max_size, self.primary.name, failure)
            else:
                _log.warning("micro-batching off (asked: %d rows, --batch-max-size): the primary %r failed the example "
                             "joined to %s", batch_max_size, self.primary.name, failure)
        return passed, batching

    def _check_batch_sizes_after_recovery(self) -> None:
        """The primary is back in service (after failing its warm-up, or after an outage): its batch
        sizes are checked now (requests are not joined meanwhile), then batches of the sizes it passed
        are made (the check runs beside live traffic, so a size slowed by it past the timeout is capped
        too: the cautious side)."""
        with self._state:
            asked, self._batch_sizes_unchecked = self._batch_sizes_unchecked, 0
        if asked and self.batcher is not None:
            size, batching = self._batch_the_primary_takes(asked)
            self.batcher.resize(size)
            self.batching = batching

    def _load_primary(self) -> str | None:
        try:
            self.primary.model()
        except Exception as error:
            if not self.fallback.loaded:
                try:
                    self.fallback.model()
                except Exception as fallback_error:
                    raise UsageError(
                        f"The model loads on neither device: {self.primary.name!r} {type(error).__name__}: {error}; "
                        f"{self.fallback.name!r} {type(fallback_error).__name__}: {fallback_error}."
                    ) from fallback_error
            self.metrics.load_failed(PRIMARY, self.primary.name)
            _log.warning("the model is not moved to the primary %r (%s: %s): serving from the fallback %r",
                         self.primary.name, type(error).__name__, error, self.fallback.name)
            self.breaker.force_open()
            return f"{type(error).__name__}: {error}"
        return None

    def _warm_up(self, example: Any) -> dict[str, str]:
        """Run the example once on each loaded device (compilation belongs here), the primary within
        `warmup_timeout_s`; a primary that fails it, or whose outputs differ in structure from the fallback's, starts
        with the breaker open, so traffic begins on the fallback (a lazy fallback is loaded for it
        here). The fallback's outputs set the output contract the primary's are held to on every
        request; with the fallback loaded lazily and a primary that answers the example, the primary's
        own outputs set it (and a primary already wrong at start goes unnoticed: `contract_source`
        and /readyz say so)."""
        results, signatures = {}, {}
        if self.primary_load_error:
            results[PRIMARY] = f"not loaded: {self.primary_load_error}"
        for replica in (self.primary, self.fallback):
            if not replica.loaded and not (replica is self.fallback and results.get(PRIMARY, "ok") != "ok"):
                continue  # a lazy fallback loads here only when the primary failed: traffic starts on it
            try:
                outputs = self._warm_up_run(replica, example)
                bad = nonfinite_count(outputs)
                results[replica.role] = "ok" if not bad else f"{bad} NaN or inf elements in the outputs"
                signatures[replica.role] = outputs
            except (Exception, SystemExit) as error:  # sys.exit() in a model fails its warm-up, as a request
                results[replica.role] = f"{type(error).__name__}: {error}"
        if results.get(FALLBACK, "ok") != "ok":  # the reference and last resort fails it: the example is at fault
            raise UsageError(f"The factory's example fails on the fallback {self.fallback.name!r}, the reference: "
                             f"{results[FALLBACK]} (on the primary {self.primary.name!r}: "
                             f"{results.get(PRIMARY, 'not run')}). Fix the example, which runs once on each device at "
                             "start and whose answer on the fallback sets the output contract, or leave it out; if "
                             "the fallback device itself is at fault (out of memory, a broken runtime), pick another "
                             "--fallback.")
        source = FALLBACK if results.get(FALLBACK) == "ok" else None
        if source is None and not self.fallback.loaded and results.get(PRIMARY) == "ok":
            source = PRIMARY  # the fallback loads lazily
        if source is not None:
            reference, replica = signatures[source], self.fallback if source == FALLBACK else self.primary
            # the doubled example: on the primary (a lazy fallback's contract), within the warm-up's limit too
            run = functools.partial(self._warm_up_run, replica)
            self.contract = OutputContract(reference, example, batched_paths(run, example, reference),
                                           self.primary.profile_downcasts())
            self.contract_source = source
            if source == FALLBACK:
                # integer outputs the primary would compute narrowed past its range: its probes ask the
                # example again until it answers them as the fallback does (a primary that failed or
                # hung here included)
                self._example_reference = self._narrowed_outputs(reference)
                if self._narrowed and self._example_reference is None:  # they fit: checked here only
                    self._note_narrowed_outputs(reference)
            if source == FALLBACK and results.get(PRIMARY) == "ok":
                violation = self.contract.differs(signatures[PRIMARY], reference)
                difference = self._example_differs(signatures[PRIMARY])
                if violation:
                    results[PRIMARY] = f"outputs break the fallback's contract: {violation}"
                elif difference:
                    results[PRIMARY] = difference
                else:  # it computes them as the fallback does (a primary with native int64)
                    self._example_reference = None
        if results.get(PRIMARY, "ok") != "ok":
            if not self.primary_load_error:  # a model not moved there is logged where the move failed
                _log.warning("the primary %r failed the example at start: %s", self.primary.name, results[PRIMARY])
            self.breaker.force_open()
        return results

    def _alarm_changed(self, raised: bool, result: ShadowResult) -> None:
        """The log follows the drift alarm, with the reason of the comparison that raised it."""
        monitor = self.shadow_monitor
        if raised:
            _log.warning("shadow drift alarm raised: %d of the last %d comparisons of the primary %r with the fallback "
                         "%r mismatched; the last: %s", monitor.recent_mismatches, monitor.recent_comparisons,
                         self.primary.name, self.fallback.name, "; ".join(result.reasons) or "no reason given")
        else:
            _log.warning("shadow drift alarm cleared: %d of the last %d comparisons of the primary %r with the "
                         "fallback %r mismatched (the alarm rises at %d)", monitor.recent_mismatches, monitor.recent_comparisons,
                         self.primary.name, self.fallback.name, monitor.alarm_after)

    def _note_narrowed_outputs(self, reference: Any) -> None:
        """Log, at start, that integer outputs of a type the primary narrows were checked on the example
        only: a live answer computed past the narrower range (an id beyond 2**31 for other inputs) is
        answered wrapped, which only shadow mode compares."""
        from torchport.compare.tree import flatten_tensors

        # class indices (an argmax) cannot reach the narrower range; ids and counts can
        paths = [path or "outputs" for path, tensor in flatten_tensors(reference)
                 if tensor.dtype in self._narrowed and tensor.numel() and int(tensor.abs().max()) > 65535]
        if paths:
            dtypes = sorted({str(dtype).removeprefix("torch.") for dtype in self._narrowed})
            _log.warning("the model answers %s (%s) and the primary %r computes %s in a narrower type: the example's "
                         "values fit it, but a live answer computed past it would be answered wrapped, without a "
                         "failover; shadow mode (--shadow) compares live answers", "/".join(dtypes),
                         ", ".join(paths[:3]), self.primary.name, "/".join(dtypes))

    def _narrowed_outputs(self, reference: Any) -> dict[str, Any] | None:
        """The fallback's answer to the example, where it has integer values the primary's profile
        computes in a narrower type and that do not fit it (an int64 id computed past 2**31 on a
        primary computing int64 as int32): {path: tensor}; None when there are none. Only these are
        held to the primary's answer at start and in probes: they are exact, so a primary that differs
        there answers wrongly, while float outputs differ legitimately (a sampling model, a near tie
        in an argmax), which shadow mode judges on live traffic."""
        if not self._narrowed:
            return None
        from torchport.compare.tree import flatten_tensors

        found = {path: tensor for path, tensor in flatten_tensors(reference)
                 if tensor.dtype in self._narrowed and out_of_range(tensor, self._narrowed) is not None}
        return found or None

    def _example_differs(self, outputs: Any) -> str | None:
        """How the primary's answer to the example differs from the fallback's at the outputs
        `_narrowed_outputs` found; None when it agrees there (or there are none)."""
        import torch

        from torchport.compare.tree import flatten_tensors

        reference = self._example_reference
        if not reference:
            return None
        given = dict(flatten_tensors(outputs))
        for path, expected in reference.items():
            answered = given.get(path)
            if answered is None or answered.shape != expected.shape or not torch.equal(answered.to(expected.dtype),
                                                                                       expected):
                where = f" {path!r}" if path else ""
                found = out_of_range(expected, self._narrowed, "output", f"the primary {self.primary.name!r}")
                return f"its answer to the example differs from the fallback's at output{where}: {found}"
        return None

    def _breaker_changed(self, state: str) -> None:
        """Metrics and the log follow the breaker; the primary taken back into service after failing
        its warm-up has /readyz say so."""
        self.metrics.breaker_changed(state)
        reopened = bool(self.breaker.history) and self.breaker.history[-1][0] == HALF_OPEN
        if state == OPEN and not reopened:  # a probe that failed reopens it: the same outage, said once
            last = getattr(self, "_last_failure", None)
            why = f" after {self.breaker.failure_threshold} failures, the last: {last.cause}: {last.detail}" \
                if last is not None else ""
            _log.warning("the primary %r is out of service (circuit breaker open%s): requests go to the fallback %r; "
                         "probing it every %g s", self.primary.name, why, self.fallback.name, self.breaker.reset_after_s)
        elif state == CLOSED:
            warmup = getattr(self, "warmup", None) or {}
            if not warmup.get(PRIMARY, "ok").startswith("ok"):
                warmup[PRIMARY] = f"ok after probes (at start: {warmup[PRIMARY]})"
            self._example_reference = None
            _log.warning("the primary %r is back in service (circuit breaker closed after %d good probes)",
                         self.primary.name, self.breaker.recovery_successes)
            if getattr(self, "batcher", None) is not None:
                # back after an outage: its batch sizes are checked again before joined batches reach it
                # (a fault of one size only, memory taken by something else, lets one-row probes pass)
                with self._state:
                    self._batch_sizes_unchecked = self._batch_asked
                self.batcher.resize(1)
                self.batching = {"max_size": 1, "asked": self._batch_asked, "primary_checked": False}
                self._background.submit(self._check_batch_sizes_after_recovery, bounded=False)

    def _warm_up_run(self, replica: Replica, example: Any) -> Any:
        """`replica.run(example)`; for the primary, within `warmup_timeout_s` (TimeoutError past it: a
        primary that hangs at start must not keep the service from starting on the fallback; its
        call goes on in the background, and the breaker's probes find it once it answers)."""
        if replica is not self.primary or self.warmup_timeout_s is None:
            return replica.run(example)
        result: dict[str, Any] = {}

        def run() -> None:
            try:
                result["outputs"] = replica.run(example)
            except BaseException as error:  # handed to the caller, as the call's own
                result["error"] = error

        worker = threading.Thread(target=run, name="torchport-primary-warmup", daemon=True)
        worker.start()
        worker.join(self.warmup_timeout_s)
        if worker.is_alive():
            raise TimeoutError(f"no answer to the example within {self.warmup_timeout_s:g} s (warmup_timeout_s, "
                               "--warmup-timeout-s); serving from the fallback, the breaker's probes retry it")
        if "error" in result:
            raise result["error"]
        return result["outputs"]

    # -- state ---------------------------------------------------------------------------------
    def _replicas_loaded(self):
        return [(replica.role, replica.name, replica.backend) for replica in (self.primary, self.fallback)
                if replica.loaded]

    @property
    def ready(self) -> bool:
        """Not draining, and the model is loaded on the primary or the fallback."""
        return not self.draining and (self.primary.loaded or self.fallback.loaded)

    def _contract_status(self) -> str:
        if self.contract_source == FALLBACK:
            return "checked against the fallback's outputs on the factory's example"
        if self.contract_source == PRIMARY:
            return ("checked against the primary's own outputs on the factory's example, since the fallback loads "
                    "lazily (a primary already wrong at start is not caught); outputs that break it are held "
                    "against the fallback's answer")
        if self.spec.example is None:
            return "not checked: the factory gives no example (only NaN and inf are checked)"
        return (f"not checked: no device answered the factory's example at start (primary: "
                f"{self.warmup.get(PRIMARY, 'not run')}; fallback: {self.warmup.get(FALLBACK, 'not run')}); only NaN "
                "and inf are checked")

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def status(self) -> dict[str, Any]:
        """What /readyz reports: devices, breaker, shadow counts, drain state."""
        monitor = self.shadow_monitor
        return {
            "ready": self.ready,
            "draining": self.draining,
            "model": self.spec.name,
            "primary": {"device": self.primary.name, "loaded": self.primary.loaded},
            "fallback": {"device": self.fallback.name, "loaded": self.fallback.loaded},
            "breaker": self.breaker.state,
            "warmup": self.warmup or None,
            "output_contract": self._contract_status(),
            "canary": self.canary_share,
            "batching": self.batching,
            "shadow": {"share": self.shadow_share, "comparisons": monitor.comparisons,
                       "mismatches": monitor.mismatches, "drift_alarm": monitor.alarm,
                       "last_mismatch": "; ".join(monitor.last_mismatch.reasons) if monitor.last_mismatch else None,
                       "note": self.shadow_note or None},
            "in_flight": self._in_flight,
            "abandoned_calls": self._primary_workers.abandoned,
        }

    # -- requests ------------------------------------------------------------------------------
    def predict(self, payload: Any) -> Answer:
        """Answer one JSON request: preprocess, `infer`, postprocess."""
        with self._admitted(), self._place():
            started = time.perf_counter()
            return self._infer(self._preprocess(payload), postprocess=True, started=started)

    @contextlib.contextmanager
    def _place(self):
        """A place under `max_concurrency` for a caller's thread (predict_async has one per event loop):
        more threads than that wait their turn, counted in the queue wait, instead of finding every
        primary worker busy and failing over as if the primary had timed out."""
        arrived = time.perf_counter()
        self._thread_gate.acquire()
        self.metrics.queued(time.perf_counter() - arrived)
        try:
            yield
        finally:
            self._thread_gate.release()

    async def predict_async(self, payload: Any) -> Answer:
        """`predict` for an asyncio server: the request runs on one of the primary's workers, the primary
        called in that worker's thread, while the event loop holds the primary's deadline; past it,
        the loop answers from the fallback and the worker's late result is dropped (counted as an
        abandoned call). One thread hop each way, as any server makes to keep model calls off its
        loop; `predict` with a timeout, called from a thread, adds a second one."""
        return await self._answer_async(payload, True)

    async def infer_async(self, inputs: Any) -> Answer:
        """`infer` (host tensors in, no pre- or postprocess) for asyncio callers, as `predict_async`."""
        return await self._answer_async(inputs, False)

    async def _answer_async(self, request: Any, postprocess: bool) -> Answer:
        import asyncio

        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = asyncio.Semaphore(self.max_concurrency)
        # Admitted (and counted in flight, so that a drain waits for it) before it queues at the gate:
        # a request accepted before a drain began is answered, not refused for having waited its turn.
        admission = self._admitted()
        admission.__enter__()
        arrived = time.perf_counter()
        try:
            await gate.acquire()  # max_concurrency requests at once per loop; the others wait their turn here
        except BaseException as error:
            admission.__exit__(None, None, None)
            if isinstance(error, asyncio.CancelledError):  # its caller stopped waiting before it had a place
                self.metrics.rejected("cancelled")
            raise
        self.metrics.queued(time.perf_counter() - arrived)
        try:
            task = loop.create_task(self._run_async(loop, request, postprocess))
        except BaseException:
            gate.release()
            admission.__exit__(None, None, None)
            raise
        task.add_done_callback(lambda done: _finished(done, gate, admission))
        # A caller that stops waiting (a client gone, a wait_for of its own) does not stop the request:
        # once admitted it runs to its answer, its deadline held and its accounting done, as on a thread.
        return await asyncio.shield(task)

    async def _run_async(self, loop, request: Any, postprocess: bool) -> Answer:
        if self.timeout_s is None or self.batcher is not None:
            return await loop.run_in_executor(self._fallback_pool(), self._request_in, (request, postprocess, None))
        window = _Window()
        ended = loop.create_future()

        def on_done(call) -> None:  # on the worker
            loop.call_soon_threadsafe(_resolve, ended, call)

        try:
            call = self._primary_workers.submit(self._request_in, (request, postprocess, window), on_done)
        except Busy:  # every worker is held by a hung call: the request runs on the pool as from a
            # thread, where a primary call finds no worker and fails over ('timeout') unless routed elsewhere
            return await loop.run_in_executor(self._fallback_pool(), self._request_in,
                                              (request, postprocess, None))
        timer = None

        def check() -> None:
            nonlocal timer
            wait = window.expire(self.timeout_s)
            if wait is not None:
                timer = loop.call_later(wait, check)
                return
            # the window is closed: whatever the worker brings back is dropped (_Abandoned); its
            # thread counts as abandoned while it is still busy
            self._primary_workers.abandon(call)
            _resolve(ended, None)

        timer = loop.call_later(self.timeout_s, check)
        try:
            outcome = await ended
        finally:
            timer.cancel()
        if outcome is None:  # abandoned at the deadline
            failure = _DeviceFailure("timeout", f"no answer within timeout_s={self.timeout_s}")
            return await loop.run_in_executor(self._fallback_pool(), self._answer_timed_out, window.inputs,
                                              postprocess, failure, window.arrived)
        if outcome.error is not None:
            error, outcome.error = outcome.error, None
            raise error
        return outcome.result

    def _fallback_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        """Threads for what `predict_async` / `infer_async` run off the primary's workers: answers after
        a timeout, requests that found no free worker, and whole requests without a timeout or with
        batching."""
        if self._async_pool is None:
            with self._state:
                if self._async_pool is None:
                    self._async_pool = concurrent.futures.ThreadPoolExecutor(
                        max_workers=self.max_concurrency, thread_name_prefix="torchport-async")
        return self._async_pool

    def _request_in(self, argument: tuple[Any, bool, _Window | None]) -> Answer:
        """One request on a worker: `predict`'s (a JSON payload, postprocessed) or `infer`'s."""
        request, postprocess, window = argument
        started = time.perf_counter()  # the request's time in the runtime includes its preprocess
        inputs = self._preprocess(request) if postprocess else request
        return self._infer(inputs, postprocess=postprocess, window=window, started=started)

    def _answer_timed_out(self, inputs: Any, postprocess: bool, failure: _DeviceFailure, started: float) -> Answer:
        """The fallback's answer for a request whose primary call passed the deadline an event loop holds."""
        return self._infer(inputs, postprocess=postprocess, failed=failure, started=started)

    def _preprocess(self, payload: Any) -> Any:
        try:
            return self.spec.preprocess(payload)
        except ServeError as error:
            self.metrics.rejected(error.kind)
            raise
        except _SERVER_ERRORS as error:
            if isinstance(error, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
                raise  # Ctrl-C of a program calling predict
            self.metrics.rejected(PreprocessFailed.kind)
            _log.error("the factory's preprocess failed (500 preprocess_error)", exc_info=error)
            raise PreprocessFailed(f"The factory's preprocess failed: {type(error).__name__}: {error}. An error of "
                                   "this kind is the server's (its code or files), not the request's.") from error
        except (Exception, SystemExit) as error:  # sys.exit() in a preprocess ends the request, not the server
            device = unusable_device(error, by_name=False) if isinstance(error, Exception) else None
            if device is not None:  # `.to("cuda")` in a preprocess written for a GPU host: every request fails
                self.metrics.rejected(PreprocessFailed.kind)
                _log.error("the factory's preprocess places the request on %r, which this machine cannot use "
                           "(500 preprocess_error)", device, exc_info=error)
                raise PreprocessFailed(
                    f"The factory's preprocess failed: {type(error).__name__}: {error}: it places the request's "
                    f"tensors on {device!r}, which this machine cannot use. Serve moves the inputs to each device "
                    f"itself (--primary and --fallback): return them on the CPU (drop {placements(device)} from "
                    "the preprocess).") from error
            self.metrics.rejected(InvalidInput.kind)
            raise InvalidInput(f"The model's preprocess rejected the request: {type(error).__name__}: {error}.") from error

    def infer(self, inputs: Any) -> Answer:
        """Run already-preprocessed `inputs` (host tensors) with failover; outputs on the host."""
        with self._admitted(), self._place():
            return self._infer(inputs)

    class _Admission:
        def __init__(self, deployment):
            self.deployment = deployment

        def __enter__(self):
            deployment = self.deployment
            with deployment._state:
                if deployment.draining:
                    deployment.metrics.rejected(Draining.kind)
                    raise Draining("The deployment is draining for shutdown and takes no new requests. "
                                   "Retry on another replica.")
                deployment._in_flight += 1

        def __exit__(self, *exc_info):
            deployment = self.deployment
            with deployment._state:
                deployment._in_flight -= 1
                if deployment.draining:
                    deployment._state.notify_all()
                last = deployment._closing and deployment._in_flight == 0
            if last:  # closed while this request was in flight: the pools stop once it is answered
                deployment._stop_pools()
            return False

    def _admitted(self) -> _Admission:
        return self._Admission(self)

    def _infer(self, inputs: Any, postprocess: bool = False, window: _Window | None = None,
               failed: _DeviceFailure | None = None, started: float | None = None) -> Answer:
        """`window`: the primary runs inline, the deadline held by an event loop; `failed`: the primary
        already failed this request (the fallback answers); `started`: when the request arrived."""
        import torch

        started = time.perf_counter() if started is None else started
        if window is not None:
            window.arrived = started
        # An input the primary cannot compute (out of its integer range) goes to the fallback first,
        # whatever the breaker and the canary share say, alone (not taking a micro-batch with it): it
        # probes nothing and is not shadowed. Rows of a 2-D or higher input may be joined; a 1-D input
        # has no row dimension to join along
        beyond = failed is None and bool(self._narrowed) and out_of_range(inputs, self._narrowed) is not None
        batched = self.batcher is not None and isinstance(inputs, torch.Tensor) and inputs.dim() >= 2
        try:
            if failed is not None:
                answer = Answer(self._fail_over(failed, inputs), FALLBACK, self.fallback.name, failover=failed.cause)
            elif beyond:
                answer = Answer(self._fallback_only(inputs), FALLBACK, self.fallback.name, routed="out_of_range")
            elif batched and self.canary_share < 1.0 and self.breaker.allows_primary() and not self._canary_pick.pick():
                answer = self._canary_answer(inputs, window)  # the share is of requests, not of batches
            elif batched:
                answer = self.batcher(inputs)
            else:
                answer = self._route_and_run(inputs, postprocess, window)
            # picked before the postprocess, which then gets copies of the tensors the comparison reads
            shadowed = self._shadow_pick.pick()
            if postprocess:
                try:
                    self._postprocess(answer, inputs, shadowed)
                except ServeError:
                    if shadowed:  # the comparison the pick promised is not made: counted, not dropped
                        self.metrics.shadow_skipped("failed")
                    raise
        except ServeError as error:
            self.metrics.rejected(error.kind)
            raise
        if answer.role == PRIMARY:
            # counted only once the primary's answer is the response (its postprocess passed too), so
            # a postprocess that keeps rejecting the primary's outputs opens the breaker
            self.breaker.record_success()
        answer.latency_s = time.perf_counter() - started
        # counted per request (a micro-batch's members each), not per model call
        if answer.failover:
            self.metrics.failover(answer.failover)
        elif answer.routed:
            self.metrics.routed_to_fallback(answer.routed)
        if answer.fallback_failed:
            self.metrics.fallback_failed()
        self.metrics.answered(answer.role, answer.device, "failover" if answer.failover else "ok", answer.latency_s)
        if shadowed:
            self._start_shadow(inputs, answer)
        return answer

    def _postprocess(self, answer: Answer, inputs: Any, shadowed: bool = False) -> None:
        """Set `answer.body` and `answer.content`, its JSON. When the factory's postprocess raises on
        the primary's outputs, or gives a body that is not JSON (an `-inf` from `log` of a probability
        the primary's precision rounded to 0), the request fails over ('bad_output') and the
        fallback's outputs are postprocessed instead; when the fallback's fail too, the postprocess
        itself is at fault (PostprocessFailed or UnserializableOutput, 500), not the primary.
        `shadowed`: a shadow comparison reads `answer.outputs` after it."""
        if answer.role != PRIMARY:
            given = self._given(answer.outputs, self.fallback, shadowed)
            answer.body, answer.content = self._rendered(self._postprocessed(given, answer.device))
            return
        answer.body, answer.content, rejected = self._judge_postprocess(answer.outputs, inputs, shadowed)
        if rejected is not None:
            failure, outputs = rejected
            self._primary_failed(failure)
            answer.outputs, answer.role, answer.device = outputs, FALLBACK, self.fallback.name
            answer.failover = "bad_output"

    def _given(self, outputs: Any, replica: Replica, shadowed: bool) -> Any:
        """What the factory's own postprocess is called with, so that one editing its argument leaves
        the model's outputs as the model returned them: new containers always (a popped key stays in
        `Answer.outputs`), and copies of the tensors where something else reads them: a shadow
        comparison (`shadowed`), or the model itself, whose own tensors a host replica's outputs may
        be (a buffer returned as is). A device replica's tensors are already the request's own copies
        on the host. The default postprocess only reads."""
        if self.spec.postprocess is default_postprocess:
            return outputs
        import torch

        from torchport.compare.tree import map_tensors

        copy = shadowed or replica.device is None or replica.device.type == "cpu"
        return map_tensors(torch.Tensor.clone if copy else (lambda tensor: tensor), outputs)

    def _judge_postprocess(self, outputs: Any, inputs: Any,
                           shadowed: bool = False) -> tuple[Any, bytes, tuple[_DeviceFailure, Any] | None]:
        """The postprocess on the primary's `outputs`, judged as for a live request: (body, JSON, None)
        when it takes them and gives JSON; (the fallback's body and JSON, (bad_output failure, the
        fallback's outputs)) when not but the fallback's do; PostprocessFailed or UnserializableOutput
        when the fallback's fail too (the postprocess, not the primary, is at fault: the breaker is not
        charged)."""
        try:
            return (*self._rendered(self.spec.postprocess(self._given(outputs, self.primary, shadowed))), None)
        except UnserializableOutput as error:
            failure = _DeviceFailure("bad_output", f"its postprocessed answer is not JSON ({error.reason})")
        except (Exception, SystemExit) as error:
            failure = _DeviceFailure("bad_output", f"postprocess raised {type(error).__name__}: {error} on its outputs")
        fallback_outputs = self._fallback_only(inputs)
        try:
            body = self.spec.postprocess(self._given(fallback_outputs, self.fallback, shadowed))
        except (Exception, SystemExit) as error:
            raise PostprocessFailed(f"The factory's postprocess raised {type(error).__name__}: {error} on the outputs "
                                    "of both devices. Fix the postprocess; the outputs were computed.") from error
        return (*self._rendered(body), (failure, fallback_outputs))

    def _postprocessed(self, outputs: Any, device: str) -> Any:
        try:
            return self.spec.postprocess(outputs)
        except (Exception, SystemExit) as error:  # sys.exit() too: the request's error, not the server's end
            raise PostprocessFailed(f"The factory's postprocess raised {type(error).__name__}: {error} on the "
                                    f"outputs of {device!r}. Fix the postprocess; the outputs were computed.") from error

    @staticmethod
    def _rendered(body: Any) -> tuple[Any, bytes]:
        """(body, its JSON), or UnserializableOutput."""
        try:
            return body, json_bytes(body)
        except (TypeError, ValueError, RecursionError) as error:
            raise UnserializableOutput(
                f"The postprocessed answer is not JSON ({type(error).__name__}: {error}). Return lists, finite numbers "
                "and strings from the factory's postprocess (the default one turns tensors into lists and keeps other "
                "objects as they are: give the factory a postprocess that picks the tensors to return).",
                reason=f"{type(error).__name__}: {error}") from error

    def _route_and_run(self, inputs: Any, postprocess: bool = False, window: _Window | None = None,
                       probe_inputs: Any = None, canary: bool = True) -> Answer:
        """The answer for `inputs`; `postprocess`: the request's answer is postprocessed (a probe of the
        primary then checks that its outputs pass the postprocess too); `window`: see `_call_primary`;
        `probe_inputs`: what a probe of the primary uses (a micro-batch's: one request's own rows);
        `canary`: the canary share picks here (False: it picked already, request by request, as for
        the requests a micro-batch joins). `inputs` fit the primary's integer range (`_infer` routed
        the others)."""
        if not self.breaker.allows_primary():
            if self.breaker.try_start_probe():
                probe = inputs if probe_inputs is None else probe_inputs
                self._background.submit(self._probe, probe, postprocess, bounded=False)
            # the canary share picks as usual: what it sends to the fallback anyway is its, not the breaker's
            routed = "canary" if canary and not self._canary_pick.pick() else "breaker_open"
            return Answer(self._fallback_only(inputs), FALLBACK, self.fallback.name, routed=routed,
                          primary_unavailable=True)
        if canary and not self._canary_pick.pick():
            return self._canary_answer(inputs, window)
        try:
            outputs = self._call_primary(inputs, window)
        except _DeviceFailure as failure:
            outputs = self._fail_over(failure, inputs)
            return Answer(outputs, FALLBACK, self.fallback.name, failover=failure.cause)
        return Answer(outputs, PRIMARY, self.primary.name)

    def _canary_answer(self, inputs: Any, window: _Window | None) -> Answer:
        """A request the canary share sends to the fallback."""
        try:
            return Answer(self._fallback_only(inputs), FALLBACK, self.fallback.name, routed="canary")
        except (ModelRejectedInput, NoDeviceAnswered) as rejected:
            return self._primary_after_fallback_rejected(inputs, rejected, window)

    def _primary_after_fallback_rejected(self, inputs: Any, rejected: ModelRejectedInput | NoDeviceAnswered,
                                         window: _Window | None) -> Answer:
        """A request the canary share routed to the fallback, which raised, gave NaN or inf, or ran out of
        memory for it: the primary, which was not asked, answers it if it can (the fallback is then
        at fault, a broken device or runtime, and counted so); when it fails too, in any way, the
        fallback's answer stands: the input is at fault (422), or no device could answer (503), and
        the breaker is not charged, as for a request the primary failed first."""
        try:
            outputs = self._call_primary(inputs, window)
        except _DeviceFailure as failure:
            raise type(rejected)(f"{rejected} The primary {self.primary.name!r}, asked next, failed on it too "
                                 f"({failure}).") from None
        return Answer(outputs, PRIMARY, self.primary.name, fallback_failed=True)

    def _call_primary(self, inputs: Any, window: _Window | None = None) -> Any:
        """The primary's checked outputs, or _DeviceFailure (sys.exit() in the model is a failure too;
        Ctrl-C is not). With a timeout the call runs on a worker; without one, and inside a `window`
        (already on a worker, the deadline held by an event loop), in this thread."""
        try:
            if window is None and self.timeout_s is not None:
                outputs = self._primary_workers.call(self.primary.run, inputs, self.timeout_s)
            else:
                if window is not None:
                    window.enter(inputs)
                try:
                    outputs = self.primary.run(inputs)
                finally:
                    if window is not None:
                        window.leave()  # raises _Abandoned once the loop has answered without it
        except (Deadline, Busy) as error:  # Busy: every worker is still in a call past its timeout
            raise _DeviceFailure("timeout", str(error)) from None
        except (Exception, SystemExit) as error:
            raise _DeviceFailure(failure_cause(error, self.primary.backend), f"{type(error).__name__}: {error}") from error
        return self._checked(outputs, inputs)

    def _checked(self, outputs: Any, inputs: Any) -> Any:
        """The primary's outputs, if finite and within the output contract."""
        if not all_finite(outputs):
            bad = nonfinite_count(outputs)
            raise _DeviceFailure("nonfinite", f"{bad} NaN or inf elements in the outputs")
        if self.contract is not None:
            violation = self.contract.violation(outputs, inputs)
            if violation:
                self._confirm(outputs, inputs, violation)
        return outputs

    def _confirm(self, outputs: Any, inputs: Any, violation: str) -> None:
        """Hold outputs that break the contract against the fallback's answer for the same input: the
        same layout and shapes, and the contract learns it; else a 'bad_output' failure that carries
        the fallback's answer (or error) for the failover."""
        try:
            reference = self.fallback.run(inputs)
        except (Exception, SystemExit) as error:
            self.metrics.contract_check("fallback_failed")
            raise _DeviceFailure("bad_output", f"{violation}, and the fallback raised on this input",
                                 fallback=(None, error)) from None
        difference = self.contract.differs(outputs, reference)
        if difference:
            self.metrics.contract_check("differed")
            raise _DeviceFailure("bad_output", difference, fallback=(reference, None))
        self.metrics.contract_check("learned" if self.contract.confirm(inputs, outputs) else "agreed")

    def _fallback_only(self, inputs: Any) -> Any:
        """The fallback's answer for a request routed straight to it."""
        try:
            outputs = self.fallback.run(inputs)
        except (Exception, SystemExit) as error:
            self._fallback_raised(error)
        self._fallback_finite(outputs)
        return outputs

    def _fallback_raised(self, error: BaseException, failure: _DeviceFailure | None = None):
        """The fallback raised for this input. It is the reference: a plain error means the input is at
        fault (ModelRejectedInput, 422; the primary is not charged, whatever it did); out of memory
        means no device could answer (NoDeviceAnswered, 503)."""
        if failure_cause(error, self.fallback.backend) == "error":
            fallback = f"{type(error).__name__}: {error}"
            if failure is None:
                where = f"The model raised on {self.fallback.name!r} for this input: {fallback}"
            elif failure.cause == "error":
                where = (f"The model raised on both devices for this input: {self.primary.name!r} {failure.detail}; "
                         f"{self.fallback.name!r} {fallback}")
            else:
                where = (f"The primary {self.primary.name!r} failed ({failure}) and the model raised on the fallback "
                         f"{self.fallback.name!r} for this input: {fallback}")
            raise ModelRejectedInput(f"{where}. Check the input's shape and type.") from error
        if failure is not None:
            self._primary_failed(failure)
            raise NoDeviceAnswered(f"The primary {self.primary.name!r} failed ({failure}) and the fallback "
                                   f"{self.fallback.name!r} ran out of memory ({type(error).__name__}: {error}). "
                                   "Lower the request size or the concurrency limit.") from error
        raise NoDeviceAnswered(f"The fallback {self.fallback.name!r} ran out of memory: {error}. "
                               "Lower the request size or the concurrency limit.") from error

    def _fallback_finite(self, outputs: Any) -> None:
        """NaN or inf from the fallback, the reference, means the input is at fault (422)."""
        bad = 0 if all_finite(outputs) else nonfinite_count(outputs)
        if bad:
            raise ModelRejectedInput(f"The model returned {bad} NaN or inf elements on {self.fallback.name!r} for this "
                                     "input. Check the input's range.")

    def _fail_over(self, failure: _DeviceFailure, inputs: Any) -> Any:
        """The fallback's answer for a request that failed on the primary. The fallback is the reference:
        when it rejects the input too (it raises, or gives NaN), the input is at fault (422) and the
        breaker is not charged, whatever the primary's failure was."""
        outputs, error = self._fallback_for(failure, inputs)
        if error is not None:
            self._fallback_raised(error, failure)
        self._fallback_finite(outputs)
        self._primary_failed(failure)
        return outputs

    def _fallback_for(self, failure: _DeviceFailure, inputs: Any) -> tuple[Any, BaseException | None]:
        """(outputs, error) of the fallback for the input the primary failed: the ones judging the
        primary already computed, else a run now (sys.exit() in the model is an error like any other)."""
        if failure.fallback is not None:
            return failure.fallback
        try:
            return self.fallback.run(inputs), None
        except (Exception, SystemExit) as error:
            return None, error

    def _primary_failed(self, failure: _DeviceFailure) -> None:
        """Charge the breaker with a live request's primary failure, and log why (at most one line per
        FAILURE_LOG_INTERVAL_S, counting those held back, so a failing primary does not flood the log)."""
        self._failure_log.warning(failure.cause, "a request failed on the primary %r (%s): %s", self.primary.name,
                                  failure.cause, failure.detail)
        self._last_failure = failure  # named by the log line of the breaker opening on it
        self.breaker.record_failure()
        if failure.cause == "oom" and self.primary.backend.is_accelerator():
            try:  # give the allocator's cached blocks back, so the next request has a chance
                self.primary.backend.device_module().empty_cache()
            except Exception:
                pass

    # -- background work -----------------------------------------------------------------------
    def _probe(self, inputs: Any, postprocess: bool = False) -> None:
        """A background call of the primary with a live request's inputs: it succeeds as a live request
        would (an answer, in time, finite, within the contract and, for a postprocessed request,
        accepted by the postprocess unless the postprocess rejects the fallback's outputs as well)."""
        try:
            outputs = self._call_primary(inputs)
            if postprocess:
                try:
                    _, _, rejected = self._judge_postprocess(outputs, inputs)
                except ModelRejectedInput:  # the fallback rejects the input: the probe proves nothing
                    self.breaker.probe_inconclusive()
                    self.metrics.probe(None)
                    return
                except ServeError:  # the postprocess or the fallback is at fault, not the primary
                    rejected = None
                if rejected is not None:
                    raise rejected[0]
            if self._example_reference is not None:
                difference = self._example_differs(self._call_primary(self.spec.example))
                if difference:
                    raise _DeviceFailure("bad_output", difference)
        except _DeviceFailure as failure:
            if self._fallback_rejects(inputs, failure):  # a bad input proves nothing about the primary
                self.breaker.probe_inconclusive()
                self.metrics.probe(None)
                return
            self.breaker.record_failure(probe=True)
            self.metrics.probe(False)
            return
        self.breaker.record_success(probe=True)
        self.metrics.probe(True)

    def _fallback_rejects(self, inputs: Any, failure: _DeviceFailure) -> bool:
        """Whether the fallback, the reference, rejects `inputs` too (raises other than out of memory, or
        gives NaN or inf): the input is at fault, as for a live request."""
        outputs, error = self._fallback_for(failure, inputs)
        if error is not None:
            return failure_cause(error, self.fallback.backend) == "error"
        return not all_finite(outputs)

    def _start_shadow(self, inputs: Any, answer: Answer) -> None:
        if answer.failover:
            # the primary failed this input live and the fallback answered it: the mismatch a shadow
            # call of the primary would have found (whatever the canary share that sent it there)
            result = self.shadow_monitor.record(ShadowResult(False, [f"the primary failed: {answer.failover}"]))
            self.metrics.shadow(result, self.shadow_monitor.alarm)
            return
        if answer.routed == "out_of_range":
            # an input the primary is never asked live (its integer width cannot hold it): nothing to
            # compare, and not drift
            self.metrics.shadow_skipped("out_of_range")
            return
        if answer.primary_unavailable:
            # the primary cannot be asked: its breaker opened on failures (or it failed at start). A
            # mismatch, as its failures are: a shadow rollout must not pass a primary that never answers
            result = self.shadow_monitor.record(ShadowResult(False, ["the primary is unavailable: its breaker is open"]))
            self.metrics.shadow(result, self.shadow_monitor.alarm)
            return
        if not self._background.submit(self._shadow, inputs, answer):
            self.metrics.shadow_skipped("busy")

    def _shadow(self, inputs: Any, answer: Answer) -> None:
        """Compare the two devices on a live input. The primary failing on an input the fallback
        answered (it raises, hangs, gives NaN, breaks the contract) is a mismatch, not a comparison
        skipped: a primary that never answers right must not pass a shadow rollout."""
        try:
            if answer.role == PRIMARY:
                reference, target = self.fallback.run(inputs), answer.outputs
            else:
                reference, target = answer.outputs, self._call_primary(inputs)
        except _DeviceFailure as failure:
            result = self.shadow_monitor.record(ShadowResult(False, [f"the primary failed: {failure}"]))
            self.metrics.shadow(result, self.shadow_monitor.alarm)
            return
        except (Exception, SystemExit):  # the fallback failed: nothing to compare against
            self.metrics.shadow_skipped("failed")
            return
        if answer.role == PRIMARY and not all_finite(reference):  # the input is at fault, as for a request
            self.metrics.shadow_skipped("failed")
            return
        result = self.shadow_monitor.observe(reference, target)
        self.metrics.shadow(result, self.shadow_monitor.alarm)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until pending probes and shadow comparisons are done; False on timeout."""
        return self._background.flush(timeout_s)

    # -- shutdown ------------------------------------------------------------------------------
    def drain(self, timeout_s: float = 30.0) -> bool:
        """Refuse new requests (Draining, HTTP 503) and wait for in-flight ones; False on timeout."""
        with self._state:
            self.draining = True
            return self._state.wait_for(lambda: self._in_flight == 0, timeout_s)

    def close(self, drain_s: float | None = None) -> None:
        """Drain (for `drain_s`, by default the primary's timeout or 5 s; 0 when the caller has drained
        already), then stop the worker pools (abandoned calls are left to finish on their own). Requests
        still in flight after the drain keep the pools until the last of them is answered, as it would
        have been (not failed over for a primary worker that was stopped under it). Called on a thread
        that runs an event loop (leaving `with Deployment(...)` in an asyncio app), it does not wait:
        the loop answers the requests it holds; `async with` / `aclose()` waits without blocking it."""
        try:
            asyncio.get_running_loop()
            drain_s = 0.0  # waiting here would stop the loop that answers the requests in flight
        except RuntimeError:
            pass
        self.drain(timeout_s=(self.timeout_s or 5.0) if drain_s is None else drain_s)
        with self._state:
            self._closing = True
            idle = self._in_flight == 0
        if idle:
            self._stop_pools()

    async def aclose(self, drain_s: float | None = None) -> None:
        """`close` for asyncio callers: waits for the requests in flight (for `drain_s`, by default the
        primary's timeout or 5 s) without blocking the event loop."""
        loop = asyncio.get_running_loop()
        with self._state:
            self.draining = True
        deadline = loop.time() + ((self.timeout_s or 5.0) if drain_s is None else drain_s)
        while self._in_flight and loop.time() < deadline:
            await asyncio.sleep(0.005)
        self.close(drain_s=0.0)

    def _stop_pools(self) -> None:
        """Stop the worker pools, once."""
        with self._state:
            if self._stopped:
                return
            self._stopped = True
            pool = self._async_pool
        self._primary_workers.close()
        # the shadow comparisons and probes already queued still run (each is counted when it ends:
        # cancelled, they would be neither made nor counted as skipped, and flush() would wait forever)
        self._background.pool.shutdown(wait=False)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    async def __aenter__(self) -> Deployment:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()
