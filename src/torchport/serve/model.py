"""What a deployment serves: the model from a factory, its request and response adapters, and the
tensor moves between host and device.

A factory is a `module:function` (or `path/file.py:function`, as for `torchport compare`) or a
callable. It takes no arguments and returns the model on the host (the deployment places it on each
device), `(model, example_inputs)` (a compare case: a function in the second place is the example as
a function of the batch size, never a preprocess), or a dict with `model` and optionally
`preprocess(json) -> inputs`, `postprocess(outputs) -> json` and `example` (inputs the deployment
runs once on each device at start: compilation and warm-up happen before the first request, not
inside its timeout). Inputs are one tensor (one
positional argument), a tuple or list (positional arguments) or a dict (keyword arguments).
"""

from __future__ import annotations

import collections
import json

from dataclasses import dataclass
from typing import Any, Callable

from torchport.errors import UsageError
from torchport.serve.errors import InvalidInput

__all__ = ["ModelSpec", "FACTORY_KEYS", "load_factory", "load_weights", "default_preprocess", "json_bytes",
           "default_postprocess", "to_device", "nonfinite_count", "all_finite", "narrowed_integers", "out_of_range",
           "state_out_of_range", "unusable_device", "placements",
           "MAX_INPUT_ELEMENTS", "REQUEST_DTYPES"]

#: Keys a factory's dict may have.
FACTORY_KEYS = ("model", "preprocess", "postprocess", "example", "name", "eval")

#: The entries of a compare case (`torchport compare`) that describe training and cost: a case returned
#: as a factory is served with them left aside (its `inputs` are the example).
_COMPARE_ONLY_KEYS = ("training_step", "batch_factory", "optimizer_factory", "unit", "units_per_sample")

#: The dtypes a request may name in "dtype" (default float32).
REQUEST_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "bool")

#: The largest whole number a JSON request carries exactly through the default preprocess (beyond
#: 2**53 - 1, float64 may have rounded it: 2**53 + 1 arrives as 2**53).
EXACT_INTEGERS = 2 ** 53 - 1

#: The most numbers the default preprocess accepts in one request.
MAX_INPUT_ELEMENTS = 1 << 20


@dataclass
class ModelSpec:
    """A model and how requests reach it and answers leave it."""

    model: Any
    preprocess: Callable[[Any], Any]
    postprocess: Callable[[Any], Any]
    name: str
    example: Any = None
    #: The model's submodules that were in training mode when the factory returned it and whose code
    #: reads it (dropout, batch norm's batch statistics): served in eval mode unless the factory said
    #: `"eval": False`.
    training: tuple[str, ...] = ()
    eval: bool = True


def default_preprocess(payload: Any):
    """`{"inputs": nested lists of numbers, "dtype": optional}` to one tensor (float32 unless "dtype"
    names one of REQUEST_DTYPES, e.g. "int64" for token ids); anything else is InvalidInput."""
    import torch

    if not isinstance(payload, dict) or "inputs" not in payload:
        shown = type(payload).__name__ if not isinstance(payload, dict) else f"keys {sorted(payload)[:10]}"
        raise InvalidInput(f"The request body is a JSON {shown}; expected an object with 'inputs'. "
                           'Send {"inputs": [[0.1, 0.2, ...]]}: nested lists of numbers, one float tensor.')
    values = payload["inputs"]
    if not isinstance(values, (list, int, float)) or isinstance(values, bool):
        raise InvalidInput(f"'inputs' is a JSON {type(values).__name__}; expected nested lists of numbers, "
                           'e.g. {"inputs": [[0.1, 0.2]]}.')
    dtype_name = payload.get("dtype", "float32")
    if dtype_name not in REQUEST_DTYPES:
        raise InvalidInput(f"'dtype' {dtype_name!r} is not allowed. Allowed: {', '.join(REQUEST_DTYPES)}.")
    try:
        # float64 first: exact for every integer a JSON client sends (up to 2**53), so the checks
        # below see the values as sent before they are converted.
        raw = torch.tensor(values, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError, OverflowError, RecursionError) as error:
        raise InvalidInput(f"'inputs' is not a rectangular array of numbers ({error}). "
                           "Every row must have the same length and hold only numbers.") from error
    if raw.numel() > MAX_INPUT_ELEMENTS:
        raise InvalidInput(f"'inputs' holds {raw.numel()} numbers; at most {MAX_INPUT_ELEMENTS} are allowed "
                           "per request. Split the batch.")
    if dtype_name != "bool" and _holds_bool(values):
        raise InvalidInput(f"'inputs' holds true or false where numbers belong (dtype {dtype_name!r}). Send numbers, "
                           'or "dtype": "bool" for a boolean tensor.')
    if not bool(torch.isfinite(raw).all()):
        raise InvalidInput("'inputs' contains NaN or infinity; only finite numbers are accepted.")
    dtype = getattr(torch, dtype_name)
    if not dtype.is_floating_point:
        allowed = "0 or 1 (or true/false)" if dtype == torch.bool else "whole numbers"
        if not bool((raw == raw.round()).all()) or (dtype == torch.bool and not bool(((raw == 0) | (raw == 1)).all())):
            raise InvalidInput(f"'inputs' holds values that are not {allowed}, as dtype {dtype_name!r} needs.")
        if dtype != torch.bool and raw.numel():
            # exact in float64 up to 2**53: beyond, a JSON integer may already have been rounded
            low, high = max(torch.iinfo(dtype).min, -EXACT_INTEGERS), min(torch.iinfo(dtype).max, EXACT_INTEGERS)
            if float(raw.min()) < low or float(raw.max()) > high:
                raise InvalidInput(f"'inputs' holds whole numbers outside {low}..{high}, the range dtype "
                                   f"{dtype_name!r} holds exactly as sent in JSON.")
    tensor = raw.to(dtype)
    if dtype.is_floating_point and not bool(torch.isfinite(tensor).all()):
        raise InvalidInput(f"'inputs' holds values beyond the range of {dtype_name!r}.")
    return tensor


def _holds_bool(values: Any) -> bool:
    """Whether a JSON true or false is among the nested lists `values` (torch takes them as 1 and 0)."""
    import itertools

    level = [values]
    while True:  # one level of the nesting at a time, its element types gathered in C
        nested = [value for value in level if value.__class__ is list]
        kinds = set(map(type, itertools.chain.from_iterable(nested)))
        if bool in kinds:
            return True
        if list not in kinds:
            return False
        level = list(itertools.chain.from_iterable(nested))


def default_postprocess(outputs: Any) -> dict[str, Any]:
    """The model's outputs as `{"outputs": JSON}`: tensors as nested lists, mappings (a transformers
    ModelOutput included) as objects, dataclasses as objects of their fields, tuples and lists as
    lists. Anything else (a KV cache object, say) is a TypeError naming where it is: the factory's
    postprocess then picks what to return."""
    return {"outputs": _json_ready(outputs, "outputs")}


def json_bytes(body: Any) -> bytes:
    """`body` as compact UTF-8 JSON, finite numbers only (ValueError for NaN or inf, TypeError for what
    JSON has no form of). A lone surrogate (a `"\\ud800"` escape a client sent, echoed back) has no
    UTF-8 form: the body is then written with escapes, which any JSON reader takes."""
    try:
        return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body, allow_nan=False, separators=(",", ":")).encode("ascii")


def _json_ready(value: Any, where: str) -> Any:
    import dataclasses
    from collections.abc import Mapping

    import torch

    if isinstance(value, torch.Tensor):
        return value.tolist()
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, Mapping):
        return {str(key): _json_ready(item, f"{where}.{key}") for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _json_ready(getattr(value, field.name), f"{where}.{field.name}")
                for field in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_json_ready(item, f"{where}[{index}]") for index, item in enumerate(value)]
    raise TypeError(f"{where} is a {type(value).__module__}.{type(value).__qualname__}, which has no JSON form")


def to_device(value: Any, device) -> Any:
    """Every tensor inside `value` (any structure compare's traversal knows) moved to `device`."""
    import torch

    if isinstance(value, torch.Tensor):  # the common case, without the traversal's cost
        return value.to(device)
    from torchport.compare.tree import map_tensors

    return map_tensors(lambda tensor: tensor.to(device), value)


def _leaves(value: Any) -> list:
    """The tensors and other leaves inside `value` (one walk; the common shapes without it)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)) and all(isinstance(item, torch.Tensor) for item in value):
        return list(value)
    from torchport.compare.tree import _leaves_with_paths

    return [leaf for _, leaf in _leaves_with_paths(value)]


def _nonfinite_number(leaf: Any) -> bool:
    """A Python or numpy float (a `.item()` in the outputs) that is NaN or infinite."""
    import math
    import numbers

    return isinstance(leaf, numbers.Real) and not isinstance(leaf, numbers.Integral) and not math.isfinite(leaf)


def _numpy_checked():
    import torch

    return (torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128)


def all_finite(value: Any) -> bool:
    """Whether every floating-point element of the tensors inside `value` (and every Python or numpy
    float beside them) is finite: one fused pass
    per tensor and one host sync in all. `t * 0` is 0 for a finite element and NaN for NaN or inf,
    so the sum of the products is NaN exactly when some element is not finite; unlike `t.sum()` it
    cannot overflow on large finite values, and unlike `isfinite(t).all()` it is one kernel, not four.
    Host tensors of the dtypes numpy has are checked by numpy's isfinite, faster still."""
    import math

    import torch

    total = None
    for tensor in _leaves(value):
        if not isinstance(tensor, torch.Tensor):
            if _nonfinite_number(tensor):
                return False
            continue
        if tensor.is_floating_point() or tensor.is_complex():
            if tensor.numel() == 0:
                continue
            tensor = _strided(tensor)
            if (tensor.device.type == "cpu" and tensor.dtype in _numpy_checked() and not tensor.requires_grad
                    and not tensor.is_conj() and not tensor.is_neg()):
                import numpy

                if not numpy.isfinite(tensor.numpy()).all():  # on the host numpy's own check is fastest
                    return False
                continue
            term = tensor.mul(0).sum()
            if tensor.is_complex():
                term = term.abs()
            total = term.float() if total is None else total + term.float().to(total.device)
    return total is None or not math.isnan(total.item())


def _strided(tensor):
    """A sparse (or other non-strided) tensor as the dense values it stands for."""
    import torch

    return tensor if tensor.layout == torch.strided else tensor.to_dense()


def nonfinite_count(value: Any) -> int:
    """How many floating-point elements of the tensors inside `value` are NaN or infinite."""
    import torch

    count = 0
    for leaf in _leaves(value):
        if not isinstance(leaf, torch.Tensor):
            count += _nonfinite_number(leaf)
            continue
        tensor = _strided(leaf)
        if (tensor.is_floating_point() or tensor.is_complex()) and not bool(torch.isfinite(tensor).all()):
            count += int(tensor.numel() - torch.isfinite(tensor).sum())
    return count


def narrowed_integers(downcasts: dict[str, str]) -> dict:
    """{torch.int64: torch.int32}: the integer dtypes a device's profile computes in a narrower one
    (from `Profile.downcasts()`); empty when it narrows none."""
    import torch

    pairs = {}
    for wide, narrow in downcasts.items():
        wide_dtype, narrow_dtype = getattr(torch, wide, None), getattr(torch, narrow, None)
        if (isinstance(wide_dtype, torch.dtype) and isinstance(narrow_dtype, torch.dtype)
                and not wide_dtype.is_floating_point and not wide_dtype.is_complex and wide_dtype != torch.bool):
            pairs[wide_dtype] = narrow_dtype
    return pairs


def out_of_range(value: Any, narrowed: dict, what: str = "input", device: str = "the primary") -> str | None:
    """What in `value` a device narrowing integers as `narrowed` ({torch.int64: torch.int32}) would
    change: the first tensor whose values do not fit the narrower type, described (`what` names the
    values, `device` the device); None when all fit."""
    import torch

    if not narrowed:
        return None
    for leaf in _leaves(value):
        if not isinstance(leaf, torch.Tensor) or leaf.dtype not in narrowed or leaf.numel() == 0:
            continue
        narrow = narrowed[leaf.dtype]
        low, high = torch.aminmax(_strided(leaf.detach()))
        limits = torch.iinfo(narrow)
        if low.item() < limits.min or high.item() > limits.max:
            wide_name, narrow_name = str(leaf.dtype).removeprefix("torch."), str(narrow).removeprefix("torch.")
            return (f"{wide_name} {what} values from {low.item()} to {high.item()} do not fit the "
                    f"{narrow_name} {device} computes {wide_name} in ({limits.min} to {limits.max})")
    return None


def state_out_of_range(model, narrowed: dict, device: str) -> str | None:
    """What in `model`'s parameters and buffers a device narrowing integers as `narrowed` would hold
    wrapped (catalogue ids beyond 2**31 in an int64 buffer): the first that does not fit, named with
    its values; None when all fit. Such a model cannot be held faithfully on that device: every answer
    that reads the tensor would be wrong, silently."""
    if not narrowed:
        return None
    for kind, named in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for name, tensor in named:
            found = out_of_range(tensor, narrowed, f"{kind} {name!r}", device)
            if found is not None:
                return found
    return None


def _factory_function(factory: Any) -> tuple[Callable[[], Any], str]:
    if callable(factory):
        return factory, getattr(factory, "__qualname__", type(factory).__name__)
    if not isinstance(factory, str):
        raise UsageError(f"Factory {factory!r} is neither MODULE:FUNCTION nor a callable. "
                         "Pass e.g. 'mypackage.serving:make_model'.")
    from torchport.compare.entry import load_function

    function = load_function(factory, "Factory", "mypackage.serving:make_model")
    return function, factory


def _reads_mode(module) -> bool:
    """Whether `module`'s own code reads `self.training` (dropout, batch norm, a custom branch), so
    that eval() changes what it computes: a method of its class (not nn.Module's own) names
    `training`. Dropout with p=0 and a recurrent layer without dropout compute the same in both."""
    import torch

    if isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.p == 0:
        return False
    if isinstance(module, torch.nn.RNNBase) and not module.dropout:
        return False
    for cls in type(module).__mro__:
        if cls is torch.nn.Module or cls is object:
            break
        for member in vars(cls).values():
            code = getattr(getattr(member, "__func__", member), "__code__", None)
            if code is not None and "training" in _names(code):
                return True
    return False


def _names(code) -> set[str]:
    """The names a function's code uses, its nested functions' included, and, in code that calls
    `getattr`, its string constants (`getattr(self, "training")` names the attribute in a string)."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if hasattr(constant, "co_names"):
            names |= _names(constant)
        elif isinstance(constant, str) and "getattr" in code.co_names:
            names.add(constant)
    return names


def unusable_device(error: BaseException, by_name: bool = True) -> str | None:
    """The device `error` comes from when this machine cannot use it (a factory written for a GPU host
    calling `.cuda()` where torch has no CUDA): a registered device the message names (with
    `by_name`; else only in torch's own "not compiled with" words: a client's error text naming a
    device is not one), or whose `torch.<device>` module the traceback passes through, that its
    backend's probe finds unusable."""
    import re
    import traceback

    from torchport.backends import real_backends

    message = str(error).lower()
    by_name = by_name or "compiled with" in message
    files = [frame.f_code.co_filename.replace("\\", "/") for frame, _ in traceback.walk_tb(error.__traceback__)]
    for backend in real_backends():
        if not backend.is_accelerator():
            continue
        named = by_name and re.search(rf"\b{re.escape(backend.name)}\b", message) is not None
        if not named and not any(f"/torch/{backend.device_type}/" in path for path in files):
            continue
        try:
            usable = backend.probe().usable
        except Exception:
            usable = False
        if not usable:
            return backend.name
    return None


def placements(device: str) -> str:
    """How code places a module on `device`: `.cuda()` where nn.Module has such a method, and `.to(...)`."""
    import torch

    moves = [f".{device}()"] if callable(getattr(torch.nn.Module, device, None)) else []
    return " and ".join(moves + [f".to({device!r})"])


def load_factory(factory: Any) -> ModelSpec:
    """Call the factory once and check what it returned; errors name the factory and the fix."""
    import torch

    function, name = _factory_function(factory)
    from_pair = False  # (model, example_inputs), read as a compare case's pair is
    try:
        value = function()
    except Exception as error:
        device = unusable_device(error)
        if device is not None and "deserialize" in str(error):  # torch.load of a checkpoint saved on a GPU
            raise UsageError(f"Factory {name!r} raised {type(error).__name__}: {error}: it loads a checkpoint saved on "
                             f"{device!r}, which this machine cannot use. Load it on the CPU "
                             "(torch.load(..., map_location='cpu')) and return the model there: serve moves it to "
                             "each device itself (--primary and --fallback).") from error
        if device is not None:  # `.cuda()` in a factory written for another machine
            raise UsageError(f"Factory {name!r} raised {type(error).__name__}: {error}: it places the model (or its "
                             f"example) on {device!r}, which this machine cannot use. Serve moves the model to each "
                             "device itself (--primary and --fallback): return it on the CPU, as the factory builds "
                             f"it (drop {placements(device)} from the factory, on its example too).") from error
        raise UsageError(f"Factory {name!r} raised {type(error).__name__}: {error}. "
                         "Fix the function so it returns the model (or a dict with 'model').") from error
    except SystemExit as error:  # a settings helper that exits on a missing variable or argument
        raise UsageError(f"Factory {name!r} called sys.exit({error.code!r}) instead of returning the model. "
                         "Raise an exception with the reason instead, or fix what it checked "
                         "(an environment variable, a file, a command-line argument).") from None
    if isinstance(value, dict):
        spec = dict(value)
        if "inputs" in spec:  # a compare case: its inputs are the example; its training entries serve nothing
            if "example" in spec:
                raise UsageError(f"Factory {name!r} returned both 'inputs' and 'example'. Return one: the example "
                                 "inputs the model runs at start.")
            spec["example"] = spec.pop("inputs")
            for key in _COMPARE_ONLY_KEYS:
                spec.pop(key, None)
    elif isinstance(value, (tuple, list)) and len(value) == 2 and isinstance(value[0], torch.nn.Module):
        spec = {"model": value[0], "example": value[1]}
        from_pair = True
    else:
        spec = {"model": value}
    unknown = set(spec) - set(FACTORY_KEYS)
    if unknown:
        raise UsageError(f"Factory {name!r} returned unknown keys {sorted(unknown)}. Allowed: {', '.join(FACTORY_KEYS)}.")
    model = spec.get("model")
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"Factory {name!r} returned {type(model).__name__} as the model, not a torch.nn.Module. "
                         "Return the model, or a dict with 'model' and optionally 'preprocess', 'postprocess'.")
    for key in ("preprocess", "postprocess"):
        if spec.get(key) is not None and not callable(spec[key]):
            raise UsageError(f"Factory {name!r} returned a {type(spec[key]).__name__} as {key!r}; it must be a function.")
    if not isinstance(spec.get("eval", True), bool):
        raise UsageError(f"Factory {name!r} returned {spec['eval']!r} as 'eval'; it must be True (the default: the "
                         "model is served in eval mode) or False (served in the mode it was returned in).")
    keep_mode = spec.get("eval", True) is False
    training = tuple(f"{module_name or 'the model'} ({type(module).__name__})"
                     for module_name, module in model.named_modules() if module.training and _reads_mode(module))
    example = spec.get("example")
    if callable(example) and not isinstance(example, torch.nn.Module):
        # a compare case's inputs as a function of the batch size: two rows, so that the batch dimension
        # is known (which outputs follow it, and whether micro-batching is safe)
        try:
            example = example(2)
        except Exception as error:
            how = ("a dict: {'model': model, 'preprocess': preprocess} (with 'postprocess' and 'example' as needed)"
                   if from_pair else "an 'example' the function returns for a batch size")
            read = ("returned a (model, function) pair, which is read as (model, example_inputs), the function "
                    "taken for the example as a function of the batch size" if from_pair else
                    "returned a function as its example, taken for a function of the batch size")
            raise UsageError(f"Factory {name!r} {read}; called for a batch of 2 it raised {type(error).__name__}: "
                             f"{error}. If the function is a preprocess (JSON request -> inputs), return {how}; if it "
                             "makes the example, fix it so that it takes the batch size.") from error
    return ModelSpec(
        model=model if keep_mode else model.eval(),
        training=training,
        eval=not keep_mode,
        preprocess=spec.get("preprocess") or default_preprocess,
        postprocess=spec.get("postprocess") or default_postprocess,
        name=str(spec.get("name") or name),
        example=example,
    )


def load_weights(model, path: str) -> None:
    """Load a state dict saved with torch.save into `model`, with `weights_only=True` (no code runs).

    The file may hold the state dict itself or a dict with 'state_dict' or 'model' holding it.
    """
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError as error:
        raise UsageError(f"Weights file {path!r} does not exist. Pass the path of a torch.save'd state dict.") from error
    except Exception as error:
        detail = str(error)
        at = detail.lower().find("unsupported global")
        if at >= 0:  # the unpickler met a global (a class, a function such as os.system): refused, nothing ran
            found = detail[at:].splitlines()[0].split(" was not ")[0]
            raise UsageError(_python_objects_refused(path, found, model)) from None
        found = detail.strip().splitlines()[-1] if detail.strip() else type(error).__name__
        raise UsageError(f"Weights file {path!r} is not a readable torch checkpoint (corrupt, truncated, or another "
                         f"format: {found}). Pass a file written by torch.save(model.state_dict(), path).") from None
    if isinstance(state, dict):
        for key in WEIGHTS_KEYS:
            if isinstance(state.get(key), dict):
                state = state[key]
                break
    if not isinstance(state, dict):
        raise UsageError(f"Weights file {path!r} holds a {type(state).__name__}, not a state dict. "
                         "Save it with torch.save(model.state_dict(), path).")
    state = _unwrapped(state, set(model.state_dict()))
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        missing, unexpected = _key_differences(state, model)
        if missing or unexpected:
            def shown(keys):
                return ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")

            found = "; ".join(([f"{len(missing)} key(s) of the model missing ({shown(missing)})"] if missing else [])
                              + ([f"{len(unexpected)} key(s) the model does not have ({shown(unexpected)})"]
                                 if unexpected else []))
        else:  # the keys agree: shapes or a module's own loading hook
            found = " ".join(str(error).strip().splitlines()[:3]).rstrip(".")
        raise UsageError(f"Weights file {path!r} does not fit the factory's model: {found}. Check that the file was "
                         "saved from the same architecture, with its state dict at the top or under one of "
                         f"{', '.join(map(repr, WEIGHTS_KEYS))}.") from error


def _python_objects_refused(path: str, found: str, model) -> str:
    """Why a weights file with Python objects in it is refused, and the way out that fits it: a model
    whose own state dict holds objects (a module's `get_extra_state`) cannot be saved without them, so
    the advice is to allow their class; any other file is a whole model or a checkpoint with other
    entries, whose state dict can be saved alone."""
    import re

    import torch

    name = re.search(r"GLOBAL ([\w.]+)", found)
    allow = (f"torch.serialization.add_safe_globals([{name.group(1)}])" if name
             else "torch.serialization.add_safe_globals([TheClass])")
    extra = [repr(module_name) if module_name else "the model itself" for module_name, module in model.named_modules()
             if type(module).get_extra_state is not torch.nn.Module.get_extra_state]
    refused = (f"Weights file {path!r} holds Python objects, not only tensors ({found}); it is refused, since "
               "loading them would run their code (weights_only=True).")
    if extra:
        shown = ", ".join(extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3 else "")
        return (f"{refused} The model's own state dict holds such objects: {shown} "
                f"{'keeps' if len(extra) == 1 else 'keep'} extra state (get_extra_state), saved under "
                "'<module>._extra_state'. If the class is yours and safe to load, "
                f"allow it where the factory is defined, before the weights load: {allow}; or have get_extra_state "
                "return tensors, numbers, strings and dicts or lists of them.")
    return (f"{refused} It is a whole model saved with torch.save(model), or a checkpoint with other objects beside "
            "its state dict (numpy arrays, a config). Save the state dict alone where the file is written "
            f"(torch.save(model.state_dict(), path)), or, if the class is yours and safe to load, allow it where the "
            f"factory is defined, before the weights load: {allow}.")


#: Where checkpoints keep the model's state dict beside other entries (epoch, optimizer state).
WEIGHTS_KEYS = ("state_dict", "model_state_dict", "model")
#: Prefixes a wrapper puts before every key: DistributedDataParallel / DataParallel, torch.compile.
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def _unwrapped(state: dict, wanted: set[str]) -> dict:
    """`state` with a wrapper's prefix taken off every key when the model's keys lack it (a state dict
    saved from a DDP or compiled model loads into the plain one), as torch's
    `consume_prefix_in_state_dict_if_present` takes it (the modules' versions kept)."""
    from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

    changed = True
    while changed and state and not set(state) <= wanted:
        changed = False
        for prefix in _WRAPPER_PREFIXES:
            if all(isinstance(key, str) and key.startswith(prefix) for key in state) and \
                    not any(key.startswith(prefix) for key in wanted):
                copied = collections.OrderedDict(state)  # the file's dict stays as loaded
                if hasattr(state, "_metadata"):
                    copied._metadata = dict(state._metadata)
                consume_prefix_in_state_dict_if_present(copied, prefix)
                state = copied
                changed = True
    return state


def _key_differences(state: dict, model) -> tuple[list[str], list[str]]:
    """(keys the model has and `state` lacks, keys `state` has and the model lacks)."""
    wanted = model.state_dict()
    return [key for key in wanted if key not in state], [str(key) for key in state if key not in wanted]
