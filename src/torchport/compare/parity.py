"""Numeric parity of one forward pass on two sides, module by module (and op by op on request)."""

from __future__ import annotations

import copy
import functools
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from torchport.compare.capture import ROOT, Capture, Record, capture
from torchport.compare.devices import DeviceSpec, move_to, precision_context, prepare_model, side
from torchport.compare.metrics import Thresholds, Workspace, judge, tensor_metrics, threshold_for, worst

__all__ = ["NodeParity", "Coverage", "ParityResult", "run_parity", "call_model", "seeded"]


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
    elements: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The verdict as plain data."""
        return dict(self.__dict__)


@dataclass
class Coverage:
    """How much of the model the comparison saw, and what it could not compare and why."""

    modules_called: int = 0
    modules_compared: int = 0
    operators_compared: int = 0
    output_tensors_compared: int = 0
    elements_compared: int = 0
    model_output_tensors: int = 0
    model_output_elements: int = 0
    #: Why nothing of the model's output was compared (None when some of it was).
    model_output_problem: str | None = None
    #: {'what': ..., 'why': ...} for everything not compared.
    not_compared: list[dict[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        """'12 of 14 module calls compared, 30 output tensors (4,096 elements); model output: 2 tensors (...)'."""
        text = (f"{self.modules_compared} of {self.modules_called} module calls compared, "
                f"{self.output_tensors_compared} output tensors ({self.elements_compared:,} elements)")
        if self.operators_compared:
            text += f", {self.operators_compared} operator calls"
        if self.model_output_problem:
            return f"{text}; model output NOT compared: {self.model_output_problem}"
        return (f"{text}; model output: {self.model_output_tensors} tensor(s), "
                f"{self.model_output_elements:,} elements")

    def to_dict(self) -> dict[str, Any]:
        """The coverage as plain data."""
        data = dict(self.__dict__)
        data["not_compared"] = [dict(item) for item in self.not_compared]
        return data


@dataclass
class ParityResult:
    """Every compared node, the first one that diverges, and what the comparison covered."""

    nodes: list[NodeParity]
    first_divergence: str | None
    unmatched: list[str]
    passed: bool
    coverage: Coverage = field(default_factory=Coverage)

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
            "coverage": self.coverage.to_dict(),
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
    """Call `model` with `inputs`: positional for a tuple or list, keywords for a mapping, else one argument."""
    if isinstance(inputs, Mapping):
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


def _forward(model, device_inputs: Any, spec: DeviceSpec, side_name: str, seed: int) -> Any:
    """One forward of a side under its precision policy, with the generators seeded."""
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    with precision_context(spec, side_name):
        output = call_model(model, device_inputs)
    spec.backend.synchronize()
    return output


def _recorded_run(model, device_inputs: Any, spec: DeviceSpec, side_name: str, seed: int, per_op: bool,
                  skip: frozenset[str] = frozenset()) -> tuple[list[Record], Any]:
    """One forward recording module outputs with hooks (but not inside `skip`), and operators when `per_op`."""
    import torch

    # Record host tensors without copying them first; if the model changed one in place after it
    # was recorded, run again with copies.
    for clone_host in (False, True):
        with torch.no_grad(), side(side_name):
            with capture(model, per_op=per_op, clone_host=clone_host, skip=skip) as recorder:
                output = _forward(model, device_inputs, spec, side_name, seed)
        if not recorder.mutated:
            break
    return recorder.records, output


def same_output(first: Any, second: Any) -> bool:
    """True when two outputs hold the same tensors at the same paths, bit for bit (NaN equal to NaN)."""
    import torch

    from torchport.compare.capture import comparable
    from torchport.compare.tree import flatten_tensors

    first_tensors, second_tensors = flatten_tensors(first), flatten_tensors(second)
    if [path for path, _ in first_tensors] != [path for path, _ in second_tensors]:
        return False
    for (_, left), (_, right) in zip(first_tensors, second_tensors):
        left, right = comparable(left).detach().cpu(), comparable(right).detach().cpu()
        if left.dtype != right.dtype or left.shape != right.shape:
            return False
        if not torch.equal(left, right):
            if not left.is_floating_point() or not bool(((left == right) | (left.isnan() & right.isnan())).all()):
                return False
    return True


@functools.lru_cache(maxsize=None)
def _forward_reads_hooks(cls: type) -> bool:
    """True when a module class's forward looks at its hooks (PyTorch's TransformerEncoderLayer takes
    its fused fast path only when no hook is attached to it or below it)."""
    try:
        source = inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False
    return "_forward_hooks" in source or "_forward_pre_hooks" in source


def _hook_sensitive(model) -> frozenset[str]:
    """Names of the outermost modules whose forward changes when hooks are attached."""
    names: list[str] = []
    for name, module in model.named_modules():
        if any(name.startswith(f"{outer}.") for outer in names):
            continue
        if _forward_reads_hooks(type(module)):
            names.append(name)
    return frozenset(names)


def _run_side(model, inputs: Any, spec: DeviceSpec, side_name: str, per_op: bool,
              seed: int = 0) -> tuple[list[Record], Any, list[dict[str, str]]]:
    """Run one side: (records, the model's output, what the recording had to leave out and why).

    Recording must not change what a model computes. The side first runs plainly (a model that
    fails then fails here with its own error); each recorded run must then reproduce that output
    bit for bit. When the operator recorder (a dispatch mode) or the module hooks make the model fail
    or compute differently (fused fast paths that refuse to run under them), the run is repeated
    with less recording: without the operator recorder, without hooks inside the modules whose
    forward reads its hooks, and at last the plain output alone. Each loss is reported.
    """
    import torch

    device_inputs = move_to(inputs, spec.device, downcast_float64=spec.downcasts_float64, side_name=side_name)
    with torch.no_grad(), side(side_name):
        plain_output = _forward(model, device_inputs, spec, side_name, seed)
    notes: list[dict[str, str]] = []
    reproducible: list[bool] = []

    def reproduces_itself() -> bool:
        # Asked once, at the first difference: a model that differs from itself run twice unrecorded
        # (nondeterministic kernels, randomness the seed does not reach) is not changed by recording.
        if not reproducible:
            with torch.no_grad(), side(side_name):
                again = _forward(model, device_inputs, spec, side_name, seed)
            reproducible.append(same_output(again, plain_output))
            if not reproducible[0]:
                notes.append({"what": f"bit-for-bit reproducibility on {side_name}",
                              "why": "two unrecorded runs of the model differ (nondeterministic kernels, or "
                                     "randomness the seed does not reach); the recorded outputs are compared as "
                                     "they are"})
        return reproducible[0]

    def attempt(per_op_now: bool, skip: frozenset[str]) -> tuple[list[Record], Any] | str:
        try:
            records, output = _recorded_run(model, device_inputs, spec, side_name, seed, per_op_now, skip)
        except Exception as error:
            return f"the model fails while they are recorded ({type(error).__name__}: {error})"
        if not same_output(output, plain_output) and reproduces_itself():
            return "recording them changes what the model computes (it takes other kernels than it does unrecorded)"
        return records, output

    if per_op:
        outcome = attempt(True, frozenset())
        if not isinstance(outcome, str):
            return (*outcome, notes)
        notes.append({"what": f"operator outputs on {side_name}", "why": outcome})
    outcome = attempt(False, frozenset())
    if not isinstance(outcome, str):
        return (*outcome, notes)
    sensitive = _hook_sensitive(model)
    if sensitive:
        partial = attempt(False, sensitive)
        if not isinstance(partial, str):
            names = ", ".join(sorted(sensitive))
            notes.append({"what": f"module outputs inside {names} on {side_name}",
                          "why": f"{outcome}: these modules run a fused path only when no hook is attached"})
            return (*partial, notes)
    notes.append({"what": f"module outputs on {side_name}", "why": outcome})
    recorder = Capture(model, record_inputs=False, clone_host=True)
    recorder.record(ROOT, "module", type(model).__name__, plain_output)
    recorder.remove()
    return recorder.records, plain_output, notes


def run_parity(
    model,
    inputs: Any,
    reference: DeviceSpec,
    target: DeviceSpec,
    thresholds: Mapping[str, Thresholds],
    per_op: bool = False,
    progress: Callable[[str], None] | None = None,
    seed: int = 0,
) -> ParityResult:
    """Run `model` (a host-side module, copied for each side) on both sides and compare every node.

    The first divergence is the first node, in the order calls finished, whose inputs agree and
    whose outputs do not: the place where the error jumps. When no failing node has agreeing inputs
    (the inputs themselves differ), it is the first failing node.
    """
    policy_dtypes = [reference.compute_dtype_name, target.compute_dtype_name]
    records = {}
    notes: list[dict[str, str]] = []
    for side_name, spec in (("reference", reference), ("target", target)):
        if progress:
            progress(f"parity forward on {side_name} ({spec.label})")
        side_model = prepare_model(copy.deepcopy(model), spec, side_name).eval()
        records[side_name], _, side_notes = _run_side(side_model, inputs, spec, side_name, per_op, seed)
        notes += side_notes
        del side_model
    modules_called = sum(1 for record in records["reference"] if record.kind == "module")
    _drop_one_sided_recording(records, notes)
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
                elements=sum(_elements(metrics) for metrics in all_metrics),
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
    coverage = _coverage(nodes, records, unmatched_modules, notes, modules_called)
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
        passed=not failing and not unmatched_modules and coverage.model_output_problem is None,
        coverage=coverage,
    )


def _elements(metrics) -> int:
    """Elements compared in one tensor pair (none when the shapes differ)."""
    if metrics.shape_reference != metrics.shape_target:
        return 0
    return math.prod(metrics.shape_reference)


def _drop_one_sided_recording(records: dict[str, list[Record]], notes: list[dict[str, str]]) -> None:
    """Where a side could record only part of what was asked, compare the part both sides recorded."""
    lost = [note["what"] for note in notes]
    modules_lost = any(what.startswith("module outputs") for what in lost)
    operators_lost = modules_lost or any(what.startswith("operator outputs") for what in lost)
    if not operators_lost:
        return
    # Modules that ran on one side only are still a finding, unless a side's module recording was cut.
    common = {record.key for record in records["reference"]} & {record.key for record in records["target"]}
    for side_name in records:
        records[side_name] = [record for record in records[side_name]
                              if record.key in common or (record.kind == "module" and not modules_lost)]


def _model_output_problem(root: NodeParity | None, reference_root: Record | None) -> str | None:
    """Why nothing of the model's output was compared, or None when some of it was."""
    if root is not None and root.tensors > 0:
        return None
    if reference_root is None:
        return "the model's own call was not recorded on the reference side"
    if root is None:
        return "the model's own call was recorded on the reference side only"
    if reference_root.skipped:
        leaves = ", ".join(f"{path or '(output)'}: {why}" for path, why in reference_root.skipped[:5])
        return f"its output holds no tensor ({leaves}); return the tensors to compare from forward"
    return "its output holds no tensor (None or an empty structure); return the tensors to compare from forward"


def _coverage(nodes: list[NodeParity], records: dict[str, list[Record]], unmatched_modules: list[str],
              notes: list[dict[str, str]], modules_called: int) -> Coverage:
    modules = [node for node in nodes if node.kind == "module"]
    root = next((node for node in modules if node.name == ROOT), None)
    reference_root = next((record for record in records["reference"] if record.key == ROOT), None)
    not_compared = list(notes)
    seen = set()
    for side_name in ("reference", "target"):
        for record in records[side_name]:
            for path, why in record.skipped:
                what = f"{record.key} output {path}" if path else f"{record.key} output"
                if what not in seen:
                    seen.add(what)
                    not_compared.append({"what": what, "why": why})
    for node in modules:
        if node.tensors == 0 and not any(item["what"].startswith(f"{node.name} output") for item in not_compared):
            not_compared.append({"what": f"{node.name} output", "why": "holds no tensor"})
    not_compared += [{"what": name, "why": "ran on one side only"} for name in unmatched_modules]
    return Coverage(
        modules_called=modules_called,
        modules_compared=sum(1 for node in modules if node.tensors > 0),
        operators_compared=sum(1 for node in nodes if node.kind == "op" and node.tensors > 0),
        output_tensors_compared=sum(node.tensors for node in nodes),
        elements_compared=sum(node.elements for node in nodes),
        model_output_tensors=root.tensors if root else 0,
        model_output_elements=root.elements if root else 0,
        model_output_problem=_model_output_problem(root, reference_root),
        not_compared=not_compared,
    )
