"""Optional micro-batching: concurrent requests whose input is one tensor of the same trailing shape
and dtype are joined along dimension 0 into one model call, then split back.

Off by default (`Deployment(batch_max_size=1)`). Bounded: a batch holds at most `max_size` rows and
its first request waits at most `max_wait_s` for others. The batch fails over as a whole, so every
request in it is answered by the device that answered the batch. When the model rejects the batch
(`ModelRejectedInput`: it raises, or gives NaN, on the fallback too), one request's bad rows must not
fail the others: each request of the batch is then run on its own and gets its own answer or error.
The outputs that follow the batch (found from the factory's example) are split along dimension 0;
the others go whole to every request, which is right only for outputs that do not depend on the
other rows (a prior, a constant): the deployment refuses batching for a model whose example shows
otherwise (a batch mean would mix clients' answers). A joined answer whose rows depend on the
values (a filter) cannot be split: each request is then run on its own. Only inputs of rank 2 or
more are joined: a 1-D input has no row dimension.

Joined batches come in a few sizes only (`bucket_sizes`: powers of two below `max_size`, and
`max_size`): a batch of 5 rows runs as 8, its last row repeated, and the repeats' outputs are
dropped. A compiling device (XLA, Neuron) then compiles a handful of shapes, all of them at start,
where the deployment checks each size on both devices (a primary that cannot take one caps the
batches below it; a model whose rows mix at one refuses batching); an arbitrary row count would
have been a fresh shape, unchecked, at any time. A request that is alone in its batch runs as sent.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable

from torchport.serve.errors import ModelRejectedInput

__all__ = ["MicroBatcher", "bucket_sizes"]


def bucket_sizes(max_size: int) -> tuple[int, ...]:
    """The row counts joined batches run at: the powers of two from 2 below `max_size`, and `max_size`."""
    sizes, size = [], 2
    while size < max_size:
        sizes.append(size)
        size *= 2
    return (*sizes, max_size) if max_size >= 2 else ()


class _Batch:
    def __init__(self):
        self.tensors: list[Any] = []
        self.rows = 0
        self.full = threading.Event()
        self.done = threading.Event()
        self.answer = None
        self.error: BaseException | None = None
        #: Per request, (answer, error) when the batch was split into calls of their own.
        self.own: list[tuple[Any, BaseException | None]] | None = None


class MicroBatcher:
    """Joins concurrent calls of `run(tensor, probe) -> Answer` into batched calls; `probe` is one
    request's own tensor, what a probe of the primary made from this call uses (a probe judges the
    device, not a batch size)."""

    def __init__(self, run: Callable[[Any], Any], max_size: int, max_wait_s: float, batched: frozenset[str]):
        self._run = run
        #: The output paths that follow the batch.
        self.batched = batched
        self.max_size = max_size
        self.sizes = bucket_sizes(max_size)
        self.max_wait_s = max_wait_s
        self._lock = threading.Lock()
        self._open: dict[tuple, _Batch] = {}
        #: Batched model calls made, and requests they answered.
        self.batches = 0
        self.requests = 0

    def resize(self, max_size: int) -> None:
        """Batches of at most `max_size` rows from now on (the primary's sizes checked after start)."""
        with self._lock:
            self.max_size, self.sizes = max_size, bucket_sizes(max_size)

    def __call__(self, tensor) -> Any:
        rows = int(tensor.shape[0])
        key = (tuple(tensor.shape[1:]), tensor.dtype)
        with self._lock:
            batch = self._open.get(key)
            leader = batch is None or batch.rows + rows > self.max_size
            if leader:
                batch = self._open[key] = _Batch()
            start, position = batch.rows, len(batch.tensors)
            batch.tensors.append(tensor)
            batch.rows += rows
            if batch.rows >= self.max_size:
                self._close(key, batch)
        if leader:
            self._lead(key, batch)
        else:
            batch.done.wait()
        if batch.own is not None:
            answer, error = batch.own[position]
            if error is not None:
                raise error
            return answer
        if batch.error is not None:
            raise batch.error
        return self._slice(batch, start, start + rows)

    def _close(self, key: tuple, batch: _Batch) -> None:
        if self._open.get(key) is batch:
            del self._open[key]
        batch.full.set()

    def _lead(self, key: tuple, batch: _Batch) -> None:
        import torch

        batch.full.wait(self.max_wait_s)
        with self._lock:
            self._close(key, batch)
            self.batches += 1
            self.requests += len(batch.tensors)
        try:
            if len(batch.tensors) == 1:
                joined, size = batch.tensors[0], batch.rows
            else:  # run at its bucket's size, the last row repeated
                joined = torch.cat(batch.tensors)
                size = next((size for size in self.sizes if size >= batch.rows), batch.rows) if batch.rows else 0
                if size > batch.rows:
                    joined = torch.cat([joined, joined[-1:].expand(size - batch.rows, *joined.shape[1:])])
            answer = self._run(joined, batch.tensors[0])
            if len(batch.tensors) > 1 and not self._splits(answer.outputs, size):
                # rows that depend on the values (a nonzero, a filter): the joined answer cannot be split
                batch.own = [self._own(tensor) for tensor in batch.tensors]
            else:
                batch.answer = answer
        except ModelRejectedInput as error:
            if len(batch.tensors) == 1:
                batch.error = error
            else:  # some request's rows are at fault: each request on its own
                batch.own = [self._own(tensor) for tensor in batch.tensors]
        except BaseException as error:  # a device failure: handed to every request of the batch
            batch.error = error
        finally:
            batch.done.set()

    def _own(self, tensor) -> tuple[Any, BaseException | None]:
        try:
            return self._run(tensor, tensor), None
        except Exception as error:
            return None, error

    def _splits(self, outputs: Any, rows: int) -> bool:
        """Whether every output that follows the batch has one row per joined row."""
        from torchport.compare.tree import flatten_tensors

        return all(tensor.dim() >= 1 and tensor.shape[0] == rows
                   for path, tensor in flatten_tensors(outputs) if path in self.batched)

    def _slice(self, batch: _Batch, start: int, stop: int):
        from torchport.compare.tree import map_tensors_with_paths

        answer = batch.answer
        if len(batch.tensors) == 1:
            return answer

        def part(path: str, tensor):
            # an output given whole (a prior, a constant, maybe the model's own buffer) is each
            # request's own copy: one caller editing it in place must not change its batch-mates' answers
            return tensor[start:stop] if path in self.batched else tensor.clone()

        return dataclasses.replace(answer, outputs=map_tensors_with_paths(part, answer.outputs))
