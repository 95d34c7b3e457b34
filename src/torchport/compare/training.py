"""Training-mode parity: N steps of a user's training step on both sides, same seed, same weights,
same batches; the loss curve and the gradient norm compared step by step."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from torchport.compare.devices import DeviceSpec, move_to, precision_context, prepare_model, side
from torchport.compare.metrics import precision_rank
from torchport.errors import DeviceSetupError, UsageError

__all__ = [
    "TrainingTolerance",
    "DEFAULT_TRAINING_TOLERANCE",
    "TrainingResult",
    "run_training",
    "default_optimizer",
]

@dataclass(frozen=True)
class TrainingTolerance:
    """Largest relative difference allowed, per step, in the loss and in the gradient norm."""

    loss_rel: float
    grad_norm_rel: float

    def to_dict(self) -> dict[str, float]:
        """The limits as plain data."""
        return dict(self.__dict__)


#: By the least precise compute dtype of the two sides.
DEFAULT_TRAINING_TOLERANCE: dict[str, TrainingTolerance] = {
    "float64": TrainingTolerance(loss_rel=1e-9, grad_norm_rel=1e-8),
    "float32": TrainingTolerance(loss_rel=1e-3, grad_norm_rel=1e-2),
    "bfloat16": TrainingTolerance(loss_rel=5e-2, grad_norm_rel=0.25),
    "float16": TrainingTolerance(loss_rel=2e-2, grad_norm_rel=0.1),
}


@dataclass
class TrainingResult:
    """Loss and gradient norm of every step on both sides, and the verdict."""

    steps: int
    reference_loss: list[float]
    target_loss: list[float]
    reference_grad_norm: list[float]
    target_grad_norm: list[float]
    loss_rel_diff: list[float]
    grad_norm_rel_diff: list[float]
    judged_as: str
    tolerance: dict[str, float]
    passed: bool
    first_divergent_step: int | None
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The result as plain data (non-finite numbers as None)."""
        def clean(values):
            return [value if math.isfinite(value) else None for value in values]

        data = dict(self.__dict__)
        for key in ("reference_loss", "target_loss", "reference_grad_norm", "target_grad_norm",
                    "loss_rel_diff", "grad_norm_rel_diff"):
            data[key] = clean(data[key])
        return data


def default_optimizer(parameters):
    """AdamW with lr 1e-3: the optimizer used when the caller names none."""
    import torch

    return torch.optim.AdamW(parameters, lr=1e-3)


def _grad_norm(model) -> float:
    import torch

    squares = 0.0
    for parameter in model.parameters():
        if parameter.grad is not None:
            squares += float(parameter.grad.detach().to("cpu", torch.float64).pow(2).sum())
    return math.sqrt(squares)


def _relative(expected: float, actual: float) -> float:
    if not (math.isfinite(expected) and math.isfinite(actual)):
        return 0.0 if expected == actual or (math.isnan(expected) and math.isnan(actual)) else math.inf
    return abs(actual - expected) / max(abs(expected), 1e-12)


def _loss_of(value: Any):
    """The loss tensor in what a training step returned: the tensor itself, or the one tensor under a
    `loss` key or attribute (a `ModelOutput`, a dataclass, a dict)."""
    import torch

    from torchport.compare.tree import flatten

    if isinstance(value, torch.Tensor):
        return value
    flat = flatten(value)
    losses = [tensor for path, tensor in flat.tensors if path in (".loss", "['loss']")]
    if len(losses) == 1 and losses[0].numel() == 1:
        return losses[0]
    raise UsageError(
        f"training_step returned {type(value).__name__} holding tensors at {[path for path, _ in flat.tensors][:6]}, "
        "and no single-element 'loss' among them. Return the loss tensor (e.g. `return model(**batch).loss`)."
    )


def _train_side(model, spec: DeviceSpec, side_name: str, batches: list, training_step, optimizer_factory, seed: int,
                progress: Callable[[str], None] | None):
    import torch

    model = prepare_model(model, spec, side_name).train()
    optimizer = optimizer_factory(model.parameters())
    losses, norms = [], []
    for step, batch in enumerate(batches):
        torch.manual_seed(seed + step)
        device_batch = move_to(batch, spec.device, downcast_float64=spec.downcasts_float64, side_name=side_name)
        optimizer.zero_grad(set_to_none=True)
        with side(side_name):
            with precision_context(spec, side_name):
                loss = _loss_of(training_step(model, device_batch))
            try:
                loss.backward()
            except RuntimeError as error:
                if "device_ready_queues_" not in str(error):
                    raise
                raise DeviceSetupError(
                    f"Backward on {spec.label!r} failed: its device was registered after this process ran its "
                    "first backward, and autograd sizes its device queues only once. Run the comparison in a "
                    f"fresh process, or call torchport.backends.resolve({spec.backend_name!r}).device() before "
                    "any training."
                ) from error
        norms.append(_grad_norm(model))
        optimizer.step()
        losses.append(float(loss.detach().to("cpu", torch.float64)))
        if progress:
            progress(f"training step {step + 1}/{len(batches)} on {side_name}")
    spec.backend.synchronize()
    return losses, norms


def run_training(
    model,
    reference: DeviceSpec,
    target: DeviceSpec,
    training_step: Callable[[Any, Any], Any],
    batch_factory: Callable[[int], Any],
    steps: int,
    seed: int = 0,
    optimizer_factory: Callable[[Any], Any] | None = None,
    tolerance: Mapping[str, TrainingTolerance] | None = None,
    progress: Callable[[str], None] | None = None,
) -> TrainingResult:
    """Train a copy of `model` on each side for `steps` steps and compare loss and gradient norm.

    `training_step(model, batch)` returns the loss; compare runs backward, records the gradient
    norm and steps the optimizer. `batch_factory(step)` returns the host-side batch for a step.
    """
    import torch

    optimizer_factory = optimizer_factory or default_optimizer
    batches = []
    for step in range(steps):
        torch.manual_seed(seed + step)
        batches.append(batch_factory(step))
    curves = {}
    for side_name, spec in (("reference", reference), ("target", target)):
        curves[side_name] = _train_side(copy.deepcopy(model), spec, side_name, batches, training_step,
                                        optimizer_factory, seed, progress)
    table = dict(DEFAULT_TRAINING_TOLERANCE)
    table.update(tolerance or {})
    judged_as = min((reference.compute_dtype_name, target.compute_dtype_name), key=precision_rank)
    limits = table[judged_as]
    (reference_loss, reference_norm), (target_loss, target_norm) = curves["reference"], curves["target"]
    loss_diff = [_relative(a, b) for a, b in zip(reference_loss, target_loss)]
    norm_diff = [_relative(a, b) for a, b in zip(reference_norm, target_norm)]
    reasons = []
    first_bad = None
    for step, (loss_error, norm_error) in enumerate(zip(loss_diff, norm_diff)):
        problems = []
        if not loss_error <= limits.loss_rel:
            problems.append(f"loss differs by {loss_error:.3g} (relative) > {limits.loss_rel}")
        if not norm_error <= limits.grad_norm_rel:
            problems.append(f"gradient norm differs by {norm_error:.3g} (relative) > {limits.grad_norm_rel}")
        if problems and first_bad is None:
            first_bad = step
            reasons += [f"step {step}: {problem}" for problem in problems]
    return TrainingResult(
        steps=steps,
        reference_loss=reference_loss,
        target_loss=target_loss,
        reference_grad_norm=reference_norm,
        target_grad_norm=target_norm,
        loss_rel_diff=loss_diff,
        grad_norm_rel_diff=norm_diff,
        judged_as=judged_as,
        tolerance=limits.to_dict(),
        passed=first_bad is None,
        first_divergent_step=first_bad,
        reasons=reasons,
    )
