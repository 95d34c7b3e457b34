"""`check_model` and `check_script`: run a workload on an emulated target and build the preflight report.

    from torchport.check import check_model
    report = check_model(model, [batch_a, batch_b], target="neuron")
    print(report.text())
"""

from __future__ import annotations

import copy
import sys
from typing import Any, Callable, Iterable

import torch

from torchport import emulated as device
from torchport.check.bucketing import predict_compilations, suggest_buckets
from torchport.check.census import CENSUS_CONTENTS, Census
from torchport.check.report import Report, build_report, not_emulated_verdict
from torchport.errors import UsageError

__all__ = ["check_model", "check_script"]


def _move(value, target_device):
    if isinstance(value, torch.Tensor):
        return value.to(target_device)
    if isinstance(value, dict):
        return {key: _move(item, target_device) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_move(item, target_device) for item in value)
    return value


def _call(model, sample):
    if isinstance(sample, dict):
        return model(**sample)
    if isinstance(sample, (list, tuple)):
        return model(*sample)
    return model(sample)


def _outputs(result) -> list[torch.Tensor]:
    """The floating-point tensors of a model's result (logits, loss, ...), on the host."""
    if isinstance(result, torch.Tensor):
        return [result.detach().to("cpu")] if result.is_floating_point() else []
    if isinstance(result, dict) or hasattr(result, "items"):
        return [tensor for value in result.values() for tensor in _outputs(value)]
    if isinstance(result, (list, tuple)):
        return [tensor for value in result for tensor in _outputs(value)]
    return []


#: Every run of the workload starts from this seed (in a forked generator: the caller's is untouched),
#: so that runs of one model differ only by what check does to them (dropout draws the same masks).
_SEED = 0


def _run(model, samples, loss_function, census: Census | None):
    target = torch.device(device.DEVICE_TYPE)
    model = model.to(target)
    outputs = []
    context = census.recording() if census is not None else _null()
    with torch.random.fork_rng(devices=[]), context:
        torch.manual_seed(_SEED)
        for sample in samples:
            result = _call(model, _move(sample, target))
            if loss_function is not None:
                loss = loss_function(result, _move(sample, target))
                loss.backward()
                model.zero_grad(set_to_none=True)
                result = loss
            outputs.append(_outputs(result))
            if census is not None:
                census.end_step()
    return outputs


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _numeric_effect(with_downcast, without_downcast) -> dict:
    max_abs = 0.0
    max_rel = 0.0
    for sample_with, sample_without in zip(with_downcast, without_downcast):
        for value_with, value_without in zip(sample_with, sample_without):
            difference = (value_with.double() - value_without.double()).abs()
            if difference.numel() == 0:
                continue
            max_abs = max(max_abs, difference.max().item())
            scale = value_without.double().abs().clamp_min(1e-12)
            max_rel = max(max_rel, (difference / scale).max().item())
    return {"max_abs_error": max_abs, "max_rel_error": max_rel}


def _pad(sample, dimension_sizes: dict[tuple, int], pad_value: float):
    """`sample` with each varying dimension padded up to its bucket."""

    def pad_tensor(path, tensor):
        for (tensor_path, dimension), size in dimension_sizes.items():
            if tensor_path != path:
                continue
            missing = size - tensor.shape[dimension]
            if missing > 0:
                shape = list(tensor.shape)
                shape[dimension] = missing
                filler = torch.full(shape, pad_value, dtype=tensor.dtype)
                tensor = torch.cat([tensor, filler], dim=dimension)
        return tensor

    return _map_tensors(sample, pad_tensor)


def _map_tensors(value, function, path=()):
    if isinstance(value, torch.Tensor):
        return function(path, value)
    if isinstance(value, dict):
        return {key: _map_tensors(item, function, (*path, key)) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_map_tensors(item, function, (*path, index)) for index, item in enumerate(value))
    return value


def _shapes(sample) -> dict[tuple, tuple]:
    shapes: dict[tuple, tuple] = {}
    _map_tensors(sample, lambda path, tensor: shapes.__setitem__(path, tuple(tensor.shape)) or tensor)
    return shapes


def _same_outputs(first: list, second: list) -> bool:
    """True when two runs' outputs are equal bit for bit (NaN equal to NaN)."""
    if len(first) != len(second):
        return False
    for sample_first, sample_second in zip(first, second):
        if len(sample_first) != len(sample_second):
            return False
        for left, right in zip(sample_first, sample_second):
            if left.dtype != right.dtype or left.shape != right.shape:
                return False
            if not torch.equal(left, right) and not bool(((left == right) | (left.isnan() & right.isnan())).all()):
                return False
    return True


def _census_run(model, samples, loss_function, profile) -> tuple[Census, list]:
    """The census of the workload, taken only where recording it does not change what the model does.

    The workload first runs unrecorded (a model that fails then fails here with its own error); the
    recorded run must then give the same outputs bit for bit. Where recording makes the model fail or
    compute differently, the census is not taken: the report says so (census.not_checked) and its
    verdict is "not checked", never "ready". Returns the census and the unrecorded outputs.
    """
    plain = _run(copy.deepcopy(model), samples, loss_function, None)
    census = Census(profile)
    try:
        recorded = _run(copy.deepcopy(model), samples, loss_function, census)
    except Exception as error:
        why = f"the model fails while its ops are recorded ({type(error).__name__}: {error})"
    else:
        if _same_outputs(recorded, plain):
            return census, plain
        again = _run(copy.deepcopy(model), samples, loss_function, None)
        if not _same_outputs(again, plain):
            # Nondeterministic kernels: recording did not change the model, the model changes itself.
            census.not_checked.append({
                "what": "bit-for-bit reproducibility of the workload",
                "why": "two unrecorded runs differ (nondeterministic kernels, or randomness the seed does not "
                       "reach); the census is of one recorded run",
            })
            return census, plain
        why = "recording its ops changes what the model computes (its outputs differ from the unrecorded run)"
    untaken = Census(profile)
    untaken.taken = False
    untaken.not_checked.append({"what": CENSUS_CONTENTS, "why": why})
    return untaken, plain


def check_model(
    model: torch.nn.Module,
    samples: Iterable[Any],
    target: str | None = None,
    loss_function: Callable | None = None,
    pad_value: float = 0,
) -> Report:
    """Run `model` on each sample on the emulated `target` and return the preflight report.

    `samples` are model inputs (a tensor, a tuple of positional tensors, or a dict of keyword
    tensors); give several to see shape dynamism. With `loss_function(result, sample) -> loss`
    each sample also runs a backward pass. The model is copied; the original is not touched.
    `target` defaults to the registry's first accelerator target (backends.default_target()).
    """
    target = target or _default_target()
    samples = list(samples)
    if not samples:
        raise UsageError("check_model got no samples. Pass a list of model inputs, e.g. [input_ids_batch].")
    profile = device.activate(target)
    previous = device.downcast_enabled()
    try:
        device.set_downcast_enabled(True)
        census, with_downcast = _census_run(model, samples, loss_function, profile)
        numeric = None
        suggestion = None
        if census.downcasts:
            device.set_downcast_enabled(False)
            without_downcast = _run(copy.deepcopy(model), samples, loss_function, None)
            numeric = _numeric_effect(with_downcast, without_downcast)
        device.set_downcast_enabled(previous)
        shapes = [_shapes(sample) for sample in samples]
        suggestion = suggest_buckets(shapes)
        if suggestion is not None:
            padded = []
            for sample, shape in zip(samples, shapes):
                sizes = {key: suggestion.bucket_of(key, shape[key[0]][key[1]]) for key in suggestion.dimensions}
                padded.append(_pad(sample, sizes, pad_value))
            bucketed = Census(profile)
            try:
                _run(copy.deepcopy(model), padded, loss_function, bucketed)
            except Exception as error:  # the padded inputs are check's, not the program's
                census.not_checked.append({
                    "what": "compilations with the suggested buckets (verified_compilations_after)",
                    "why": f"the model fails on the padded inputs ({type(error).__name__}: {error})",
                })
            else:
                suggestion.verified_graphs = bucketed.graph_count()
    finally:
        device.set_downcast_enabled(previous)
    report = build_report(census, numeric_effect=numeric, buckets=suggestion, workload=type(model).__name__)
    # What torchport.compile would compile on a static-shape target, with and without its buckets.
    report.data["shapes"]["compile_prediction"] = predict_compilations(shapes)
    return report


def _default_target() -> str:
    from torchport.backends import default_target

    return default_target()


def check_script(script: str, arguments: list[str], target: str | None = None, timeout: float | None = None) -> Report:
    """Run a Python script on the emulated `target` (its 'cuda' code retargeted) and return the report.

    The report has a verdict however the script ends: returning, sys.exit(code), an exception, a
    signal, Ctrl-C or running past `timeout` seconds (see torchport.check.ending). Afterwards the
    script's modules keep their retargeting (its atexit handlers may still run), and the settings made
    for libraries that choose their device themselves are taken back from the environment."""
    import os

    from torchport.backends.emulated import EmulatedBackend
    from torchport.check.ending import check_timeout, watch
    from torchport.retarget import frameworks
    from torchport.retarget.api import activate
    from torchport.retarget.runner import run_script

    target = target or _default_target()
    profile = device.activate(target)
    census = Census(profile)
    # The backend follows this Profile object, so a user's YAML is what the device behaves like even
    # when it keeps or inherits a built-in emulated_name.
    backend = EmulatedBackend.for_profile(profile)
    retarget = activate(backend, scope=[os.path.dirname(os.path.abspath(script))], precision="keep")
    timeout = check_timeout(timeout)
    saved_argv = list(sys.argv)
    saved_path = list(sys.path)
    try:
        with watch(timeout) as ending, census.recording():
            exit_code = run_script(script, list(arguments), retarget)
            if exit_code and ending.kind == "returned":
                ending.kind, ending.exit_code = "exception", exit_code
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        frameworks.restore()
    report = build_report(census, numeric_effect=None, buckets=None, workload=script)
    report.data["script_exit_code"] = ending.exit_code
    report.data["program"] = ending.to_dict()
    # A program that does not finish cleanly on the target is not ready, whatever the census says.
    report.data["verdict"] = not_emulated_verdict(report.data, ending.verdict()) or ending.verdict() or report.data["verdict"]
    return report
