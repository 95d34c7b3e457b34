"""Loading a comparison case from a `module:function` (or `path/file.py:function`) entry point.

The function takes no arguments and returns `(model, inputs)` or a dict with `model` and any of
`inputs`, `training_step`, `batch_factory`, `optimizer_factory`, `unit`, `units_per_sample`, `name`.
`inputs` may be a sample or a function batch_size -> inputs.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from torchport.errors import UsageError

__all__ = ["load_case", "load_function", "CASE_KEYS"]

#: Keys a case dict may have.
CASE_KEYS = ("model", "inputs", "training_step", "batch_factory", "optimizer_factory", "unit", "units_per_sample", "name")


def _import(module_text: str, entry: str):
    if module_text.endswith(".py") or "/" in module_text:
        path = Path(module_text)
        if not path.is_file():
            raise UsageError(f"Entry point {entry!r}: file {module_text!r} does not exist. "
                             "Write MODULE:FUNCTION or PATH/TO/FILE.py:FUNCTION.")
        folder = str(path.resolve().parent)
        if folder not in sys.path:  # its sibling modules import, as under `python FILE.py`
            sys.path.insert(0, folder)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        ours = sys.modules.setdefault(path.stem, module) is module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            if ours and sys.modules.get(path.stem) is module:  # no half-run module left for a later import
                del sys.modules[path.stem]
            raise
        return module
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(module_text)
    except ModuleNotFoundError as error:
        raise UsageError(f"Entry point {entry!r}: cannot import module {module_text!r} ({error}). "
                         "Run from the directory that holds it, or write PATH/TO/FILE.py:FUNCTION.") from error


def _failure(error: BaseException) -> str:
    """'raised ValueError: ...' or 'called sys.exit(3)'."""
    if isinstance(error, SystemExit):
        return f"called sys.exit({error.code!r})"
    return f"raised {type(error).__name__}: {error}"


def load_function(entry: str, kind: str = "Entry point", example: str = "mypackage.models:make_case"):
    """The function a MODULE:FUNCTION (or PATH/TO/FILE.py:FUNCTION) names; errors say `kind` and the fix."""
    module_text, colon, function_name = entry.rpartition(":")
    if not colon or not module_text or not function_name:
        raise UsageError(f"{kind} {entry!r} is not MODULE:FUNCTION. Example: {example}.")
    try:
        module = _import(module_text, entry)
    except UsageError:
        raise
    except (Exception, SystemExit) as error:  # the module's own top-level code failed or exited
        raise UsageError(f"{kind} {entry!r}: importing {module_text!r} {_failure(error)}. "
                         "Fix the module so it imports cleanly.") from error
    function = getattr(module, function_name, None)
    if not callable(function):
        available = sorted(name for name, value in vars(module).items() if callable(value) and not name.startswith("_"))
        raise UsageError(f"{kind} {entry!r}: {module_text!r} has no function {function_name!r}. "
                         f"Callables there: {available[:15]}.")
    return function


def load_case(entry: str) -> dict[str, Any]:
    """Import the entry point, call it, and return the case as a dict with at least `model`."""
    import torch

    function = load_function(entry)
    module_text, _, function_name = entry.rpartition(":")
    try:
        value = function()
    except (Exception, SystemExit) as error:
        raise UsageError(f"Entry point {entry!r} {_failure(error)}. "
                         "Fix the function so it returns (model, inputs).") from error
    if isinstance(value, dict):
        case = dict(value)
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        case = {"model": value[0], "inputs": value[1]}
    else:
        case = {"model": value}
    unknown = set(case) - set(CASE_KEYS)
    if unknown:
        raise UsageError(f"Entry point {entry!r} returned unknown keys {sorted(unknown)}. Allowed: {', '.join(CASE_KEYS)}.")
    if not isinstance(case.get("model"), torch.nn.Module):
        raise UsageError(f"Entry point {entry!r} returned {type(case.get('model')).__name__} as the model, not a "
                         "torch.nn.Module. Return (model, inputs) or a dict with 'model' and 'inputs'.")
    if case.get("inputs") is None and case.get("training_step") is None:
        raise UsageError(f"Entry point {entry!r} returned a model without inputs. Return (model, inputs), "
                         "where inputs is a sample or a function batch_size -> inputs.")
    case.setdefault("name", f"{module_text}:{function_name}")
    return case
