"""Numeric parity of one forward pass on two sides, module by module (and op by op on request)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from torchport.compare.capture import Record, capture
from torchport.compare.devices import DeviceSpec, move_to, precision_context, prepare_model, side
from torchport.compare.metrics import Thresholds, Workspace, judge, tensor_metrics, threshold_for, worst

__all__ = ["NodeParity", "ParityResult", "run_parity", "call_model", "seeded"]


@dataclass
class NodeParity:
    """The verdict for one module call (or one operator call)."""

    name: str
    kind: str
    type_name: str
    order: int
    judged_as: str
    thresholds: dict[str, float]
    metrics: dict[str, Any]
    passed: bool
    reasons: list[str] = field(default_factory=list)
    inputs_agree: bool | None = None
    first_divergence: bool = False
    tensors: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The verdict as plain data."""
        return dict(self.__dict__)


@dataclass
class ParityResult:
    """Every compared node, and the first one that diverges."""

    nodes: list[NodeParity]
    first_divergence: str | None
    unmatched: list[str]
    passed: bool

    @property
    def failed_nodes(self) -> list[NodeParity]:
        """Nodes whose outputs disagree."""
        return [node for node in self.nodes if not node.passed]

    def node(self, name: str) -> NodeParity:
        """The node called `name`; raises KeyError naming the known ones."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r}; known: {[node.name for node in self.nodes][:20]}")

    def to_dict(self) -> dict[str, Any]:
        """The result as plain data."""
        return {
            "passed": self.passed,
            "first_divergence": self.first_divergence,
            "unmatched": list(self.unmatched),
            "nodes": [node.to_dict() for node in self.nodes],
        }


def seeded(seed: int, function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` with torch's and Python's generators seeded, so both sides get the same draw."""
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    return function(*args)


def call_model(model, inputs: Any):
    """Call `model` with `inputs`: positional for a tuple or list, keywords for a dict, else one argument."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def _allowed_dtype(spec: DeviceSpec) -> str | None:
    if spec.precision in ("bf16", "fp16"):
        return spec.compute_dtype_name
    if spec.downcasts_float64:
        return "float32"
    return None


def _compare_tensors(
    reference: list[tuple[str, Any]],
    target: list[tuple[str, Any]],
    dtype_allowed: str | None,
    policy_dtypes: list[str],
    table: Mapping[str, Thresholds],
    cache: dict | None = None,
    workspace: Workspace | None = None,
) -> tuple[str, Thresholds, list, list[str]]:
    reasons: list[str] = []
    target_by_path = dict(target)
    pairs = []
    for path, tensor in reference:
        if path not in target_by_path:
            reasons.append(f"output {path or '(tensor)'} missing on target")
            continue
        pairs.append((path, tensor, target_by_path[path]))
    extra = set(target_by_path) - {path for path, _ in reference}
    if extra:
        reasons.append(f"outputs only on target: {sorted(extra)}")
    dtype_names = list(policy_dtypes)
    for _, expected, actual in pairs:
        dtype_names += [str(expected.dtype), str(actual.dtype)]
    judged_as, limits = threshold_for(dtype_names, table)
    all_metrics = []
    for path, expected, actual in pairs:
        # A parent often returns its last child's tensor: the host copies are then the same objects.
        key = (id(expected), id(actual))
        metrics = cache.get(key) if cache is not None else None
        if metrics is None:
            metrics = tensor_metrics(expected, actual, dtype_allowed, workspace)
            if cache is not None:
                cache[key] = metrics
        all_metrics.append(metrics)
        label = f"{path}: " if path else ""
        reasons += [label + reason for reason in judge(metrics, limits)]
    return judged_as, limits, all_metrics, reasons


def _run_side(model, inputs: Any, spec: DeviceSpec, side_name: str, per_op: bool) -> tuple[list[Record], Any]:
    import torch

    device_inputs = move_to(inputs, spec.device, downcast_float64=spec.downcasts_float64, side_name=side_name)
    # Record host tensors without copying them first; if the model changed one in place after it
    # was recorded, run again with copies.
    for clone_host in (False, True):
        with torch.no_grad(), side(side_name), capture(model, per_op=per_op, clone_host=clone_host) as recorder:
            with precision_context(spec, side_name):
                output = call_model(model, device_inputs)
            spec.backend.synchronize()
        if not recorder.mutated:
            break
    return recorder.records, output


def run_parity(
    model,
    inputs: Any,
    reference: DeviceSpec,
    target: DeviceSpec,
    thresholds: Mapping[str, Thresholds],
    per_op: bool = False,
    progress: Callable[[str], None] | None = None,
) -> ParityResult:
    """Run `model` (a host-side module, copied for each side) on both sides and compare every node.

    The first divergence is the first node, in the order calls finished, whose inputs agree and
    whose outputs do not: the place where the error jumps. When no failing node has agreeing inputs
    (the inputs themselves differ), it is the first failing node.
    """
    policy_dtypes = [reference.compute_dtype_name, target.compute_dtype_name]
    records = {}
    for side_name, spec in (("reference", reference), ("target", target)):
        if progress:
            progress(f"parity forward on {side_name} ({spec.label})")
        side_model = prepare_model(copy.deepcopy(model), spec, side_name).eval()
        records[side_name], _ = _run_side(side_model, inputs, spec, side_name, per_op)
        del side_model
    reference_records = {record.key: record for record in records["reference"]}
    target_records = {record.key: record for record in records["target"]}
    dtype_allowed = _allowed_dtype(target)
    nodes: list[NodeParity] = []
    cache: dict = {}
    workspace = Workspace()
    for record in records["reference"]:
        other = target_records.get(record.key)
        if other is None:
            continue
        judged_as, limits, all_metrics, reasons = _compare_tensors(
            record.outputs, other.outputs, dtype_allowed, policy_dtypes, thresholds, cache, workspace
        )
        nodes.append(
            NodeParity(
                name=record.key,
                kind=record.kind,
                type_name=record.type_name,
                order=record.order,
                judged_as=judged_as,
                thresholds=limits.to_dict(),
                metrics=worst(all_metrics),
                passed=not reasons,
                reasons=reasons,
                tensors=len(all_metrics),
            )
        )
    # Input agreement matters only where outputs disagree; it is computed there alone.
    for node in nodes:
        if node.passed or node.kind != "module":
            continue
        reference_inputs = reference_records[node.name].inputs
        target_inputs = target_records[node.name].inputs
        *_, input_reasons = _compare_tensors(reference_inputs, target_inputs, dtype_allowed, policy_dtypes, thresholds,
                                            cache, workspace)
        node.inputs_agree = not input_reasons
    unmatched = sorted(set(reference_records) ^ set(target_records))
    # Operator sequences may differ legitimately (autocast, fused kernels); modules may not.
    unmatched_modules = [key for key in unmatched if "/" not in key]
    failing = [node for node in nodes if not node.passed]
    first = next((node for node in failing if node.inputs_agree), None)
    if first is None and failing:
        first = min(failing, key=lambda node: node.order)
    if first is not None:
        first.first_divergence = True
    return ParityResult(
        nodes=nodes,
        first_divergence=first.name if first else None,
        unmatched=unmatched,
        passed=not failing and not unmatched_modules,
    )
