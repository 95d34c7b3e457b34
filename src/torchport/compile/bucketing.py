"""Shape bucketing: pad varying dimensions up to a few bucket sizes, prove the padding is safe, slice it off.

A dimension group is one dimension index (0: batch, 1: sequence, ...) across every tensor input that
has it at the varying size. Buckets come from the planner `torchport check` uses
(`check.bucketing.bucket_for`: the next power of two, or the first of the sizes a user gives).

Padding is used only where it is shown not to leak into results: before a group is padded, the model
runs eagerly three times (the input as is, padded with the fill value, padded with random values)
and every output must keep its values at the real positions, with the padded dimension (if it has
one) mapped to exactly one output dimension that is then sliced back. An op that mixes positions
without a mask (attention with no causal or padding mask, a mean over the sequence, batch
statistics, a loss reduced over padded positions) fails this, and the group is not padded: the
report says which output and which module changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten

from torchport.check.bucketing import bucket_for

__all__ = ["DimensionGroup", "Bucketer", "parse_buckets"]


@dataclass
class DimensionGroup:
    """One padded (or refused) dimension index and what the safety probe found."""

    dimension: int
    sizes: list[int] | None = None  # None: the power-of-two ladder
    padded: bool = True
    reason: str = ""
    probed: bool = False
    #: output leaf index -> output dimension holding the padded positions
    outputs: dict[int, int] = field(default_factory=dict)

    def decision(self) -> dict:
        buckets = self.sizes if self.sizes is not None else "powers of two"
        return {"buckets": buckets, "padded": self.padded, "reason": self.reason}


def parse_buckets(buckets) -> dict[int, list[int] | None] | str | None:
    """'auto', None (no bucketing) or {dimension: [sizes]} checked and normalised."""
    if buckets is None or buckets == "auto":
        return buckets
    if isinstance(buckets, dict):
        parsed = {}
        for dimension, sizes in buckets.items():
            if not isinstance(dimension, int) or dimension < 0:
                break
            if sizes is not None and (not sizes or not all(isinstance(size, int) and size > 0 for size in sizes)):
                break
            parsed[dimension] = sorted(sizes) if sizes is not None else None
        else:
            return parsed
    from torchport.errors import UsageError

    raise UsageError(
        f"buckets={buckets!r} is not allowed. Pass 'auto' (pad varying dimensions to powers of two), "
        "None (no padding), or {dimension: [sizes]}, e.g. {1: [64, 128, 256, 512]} for the sequence dimension."
    )


def _tolerance(tensor: torch.Tensor) -> float:
    return 2e-2 if tensor.dtype in (torch.float16, torch.bfloat16) else 1e-4


def _pad_leaf(tensor: torch.Tensor, dimension: int, size: int, fill) -> torch.Tensor:
    missing = size - tensor.shape[dimension]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dimension] = missing
    if fill == "random":
        if tensor.dtype == torch.bool or _is_mask(tensor):
            filler = torch.zeros(shape, dtype=tensor.dtype, device=tensor.device)
        elif tensor.is_floating_point():
            filler = torch.randn(shape, device=tensor.device).to(tensor.dtype) * 3
        else:
            low = int(tensor.min()) if tensor.numel() else 0
            high = int(tensor.max()) if tensor.numel() else 1
            filler = torch.randint(low, high + 1, shape, device=tensor.device, dtype=tensor.dtype)
    else:
        filler = torch.full(shape, fill, dtype=tensor.dtype, device=tensor.device)
    return torch.cat([tensor, filler], dim=dimension)


def _is_mask(tensor: torch.Tensor) -> bool:
    """An integer tensor holding only 0 and 1 is taken for a mask: its padding stays 0 (masked)."""
    if tensor.is_floating_point() or tensor.numel() == 0:
        return False
    return bool(((tensor == 0) | (tensor == 1)).all())


class Bucketer:
    """Decides, per call, which tensor leaves to pad to which size, and slices outputs back."""

    def __init__(self, spec, pad_value=0, host_pad: bool = False) -> None:
        self.spec = spec
        self.pad_value = pad_value
        #: Pad device inputs on the host and copy them back: on a static-shape target (the profile's
        #: shapes.static: XLA, Neuron) padding on the device compiles a pad graph for every real size.
        self.host_pad = host_pad
        self.groups: dict[int, DimensionGroup] = {}
        self.observed: list[tuple] | None = None  # first call's leaf shapes (auto)
        if isinstance(spec, dict):
            self.groups = {dimension: DimensionGroup(dimension, sizes) for dimension, sizes in spec.items()}

    # -- which dimensions vary ---------------------------------------------------------------
    def observe(self, leaves) -> bool:
        """Record shapes on the first call in auto mode; True when this call only observes."""
        shapes = [tuple(leaf.shape) if isinstance(leaf, torch.Tensor) else None for leaf in leaves]
        if self.spec != "auto":
            return False
        if self.observed is None:
            self.observed = shapes
            return True
        if len(shapes) == len(self.observed):
            for before, now in zip(self.observed, shapes):
                if before is None or now is None or len(before) != len(now):
                    continue
                for dimension, (old, new) in enumerate(zip(before, now)):
                    if old != new and dimension not in self.groups:
                        self.groups[dimension] = DimensionGroup(dimension)
        return False

    def members(self, leaves, group: DimensionGroup) -> tuple[list[int], int | None]:
        """Indices of the tensor leaves padded together in `group`, and their common size."""
        tensors = [(index, leaf) for index, leaf in enumerate(leaves)
                   if isinstance(leaf, torch.Tensor) and leaf.dim() > group.dimension]
        if not tensors:
            return [], None
        if self.observed is not None:
            # Leaves whose size at this dimension changed set the size; others at it follow it.
            varying = [leaf.shape[group.dimension] for index, leaf in tensors
                       if self.observed[index] is not None and len(self.observed[index]) == leaf.dim()
                       and self.observed[index][group.dimension] != leaf.shape[group.dimension]]
            size = varying[0] if varying else tensors[0][1].shape[group.dimension]
        else:
            size = max(leaf.shape[group.dimension] for _, leaf in tensors)
        return [index for index, leaf in tensors if leaf.shape[group.dimension] == size], size

    # -- padding -----------------------------------------------------------------------------
    def pad(self, leaves, sizes: dict[int, int], fill=None) -> list:
        """`leaves` with each group's members padded to its size in `sizes`."""
        fill = self.pad_value if fill is None else fill
        padded = list(leaves)
        for dimension, size in sizes.items():
            indices, _ = self.members(leaves, self.groups[dimension])
            for index in indices:
                leaf = padded[index]
                if leaf.dim() > dimension and leaf.shape[dimension] < size:
                    if self.host_pad and leaf.device.type != "cpu":
                        padded[index] = _pad_leaf(leaf.cpu(), dimension, size, fill).to(leaf.device)
                    else:
                        padded[index] = _pad_leaf(leaf, dimension, size, fill)
        return padded

    def plan(self, leaves) -> dict[int, tuple[int, int]]:
        """{dimension: (real size, bucket)} for the groups padded on this call."""
        plan = {}
        for dimension, group in self.groups.items():
            if not group.padded:
                continue
            _, size = self.members(leaves, group)
            if size is None:
                continue
            plan[dimension] = (size, bucket_for(size, group.sizes))
        return plan

    def slice(self, output_leaves, plan: dict[int, tuple[int, int]]) -> list:
        """Output leaves with the padded positions cut off."""
        sliced = list(output_leaves)
        for dimension, (real, bucket) in plan.items():
            if bucket == real:
                continue
            for index, output_dimension in self.groups[dimension].outputs.items():
                sliced[index] = sliced[index].narrow(output_dimension, 0, real)
        return sliced

    # -- the safety probe --------------------------------------------------------------------
    def probe(self, model, call, leaves, dimension: int) -> None:
        """Run the model eagerly with and without padding on `dimension` and decide if padding is safe."""
        group = self.groups[dimension]
        indices, size = self.members(leaves, group)
        if size is None:
            return
        bucket = bucket_for(size, group.sizes)
        if bucket > size:
            base, padded_size = leaves, bucket
        elif size >= 2:
            # Already on a bucket: probe a shorter slice of it padded back to this size.
            shorter = size - max(1, size // 4)
            base = [leaf.narrow(dimension, 0, shorter) if index in indices else leaf
                    for index, leaf in enumerate(leaves)]
            padded_size = size
        else:
            return
        group.probed = True
        amount = padded_size - base[indices[0]].shape[dimension]
        try:
            with _quiet(model):
                reference, modules_reference = _run(model, call, base)
                filled, _ = _run(model, call, self.pad(base, {dimension: padded_size}))
                noisy, modules_noisy = _run(model, call, self.pad(base, {dimension: padded_size}, fill="random"))
        except Exception as error:  # a model that refuses the padded shape cannot be padded
            group.padded = False
            group.reason = f"the model failed on inputs padded along dimension {dimension}: {error}"
            return
        outputs, problem = _compare(reference, [filled, noisy], amount)
        if problem is None:
            group.outputs = outputs
            return
        group.padded = False
        culprit = _first_changed_module(modules_reference, modules_noisy, amount)
        where = f"; first module whose output changed: {culprit}" if culprit else ""
        group.reason = (
            f"padding dimension {dimension} changed {problem}: an op mixes positions along it without a mask "
            f"(attention with no causal or padding mask, a reduction over it, batch statistics){where}. "
            "Each new size compiles separately"
        )


class _quiet:
    """Eval-mode dropout, no gradients, and buffers (BatchNorm statistics) restored afterwards."""

    def __init__(self, model) -> None:
        self.model = model

    def __enter__(self):
        self.dropouts = [module for module in self.model.modules()
                         if isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.training]
        for module in self.dropouts:
            module.training = False
        self.buffers = {name: buffer.detach().clone() for name, buffer in self.model.named_buffers()}
        self.grad = torch.no_grad()
        self.grad.__enter__()
        self.rng = torch.random.fork_rng(devices=[])
        self.rng.__enter__()

    def __exit__(self, *exc):
        self.rng.__exit__(*exc)
        self.grad.__exit__(*exc)
        for module in self.dropouts:
            module.training = True
        for name, buffer in self.model.named_buffers():
            buffer.copy_(self.buffers[name])
        return False


def _run(model, call, leaves):
    """(flat output leaves, [(module name, flat output leaves)] in completion order) of one eager run."""
    seen = []
    handles = [module.register_forward_hook(
        lambda module, args, output, name=name: seen.append((name, tree_flatten(output)[0])))
        for name, module in model.named_modules() if name]
    try:
        torch.manual_seed(0)
        output = call(leaves)
    finally:
        for handle in handles:
            handle.remove()
    return tree_flatten(output)[0], seen


def _match(reference, candidate, amount: int) -> tuple[bool, int | None]:
    """Whether `candidate` equals `reference` at the real positions, and the output dimension padded."""
    if not isinstance(reference, torch.Tensor) or not isinstance(candidate, torch.Tensor):
        return (reference == candidate) is True or reference is candidate, None
    if candidate.shape == reference.shape:
        dimension = None
    else:
        grown = [index for index, (old, new) in enumerate(zip(reference.shape, candidate.shape)) if old != new]
        if candidate.dim() != reference.dim() or len(grown) != 1 or \
                candidate.shape[grown[0]] - reference.shape[grown[0]] != amount:
            return False, None
        dimension = grown[0]
        candidate = candidate.narrow(dimension, 0, reference.shape[dimension])
    if not reference.is_floating_point():
        return bool(torch.equal(reference, candidate)), dimension
    scale = float(reference.detach().abs().max()) if reference.numel() else 1.0
    tolerance = _tolerance(reference)
    close = torch.allclose(candidate.float(), reference.float(), rtol=tolerance, atol=tolerance * max(1.0, scale))
    return bool(close), dimension


def _compare(reference: list, runs: list[list], amount: int) -> tuple[dict[int, int], str | None]:
    outputs: dict[int, int] = {}
    for run in runs:
        if len(run) != len(reference):
            return {}, "the number of outputs"
        for index, (expected, got) in enumerate(zip(reference, run)):
            same, dimension = _match(expected, got, amount)
            if not same:
                return {}, f"output {index} at the real positions"
            if dimension is not None:
                outputs[index] = dimension
    return outputs, None


def _first_changed_module(reference, noisy, amount: int) -> str | None:
    by_name = dict(noisy)
    for name, outputs in reference:
        other = by_name.get(name)
        if other is None or len(other) != len(outputs):
            continue
        for expected, got in zip(outputs, other):
            if isinstance(expected, torch.Tensor) and not _match(expected, got, amount)[0]:
                return name
    return None
