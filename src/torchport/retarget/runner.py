"""Run a script or module the way `python SCRIPT` / `python -m MODULE` would, retargeted.

The program sees its own sys.argv, `__name__ == "__main__"`, its exit status and its own
traceback: torchport's frames are cut from the top of a traceback before it is printed.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import signal
import sys
import types

from torchport.errors import UsageError
from torchport.retarget import runtime, transform
from torchport.retarget.scope import RetargetLoader, application_roots
from torchport.retarget.state import TORCHPORT_ROOT, Retarget

__all__ = ["run_script", "run_module"]



def _print_exception(error: BaseException) -> None:
    """Print `error` as Python would, without torchport's frames in its traceback.

    The program's own frames stay, so an error raised by a facade (an unsupported CUDA feature,
    --strict) ends at the program's line. TORCHPORT_DEBUG=1 keeps every frame.
    """
    traceback = error.__traceback__
    if not os.environ.get("TORCHPORT_DEBUG"):
        kept = []
        while traceback is not None:
            # torchport's frames and the import machinery's, as Python itself hides the latter
            if not traceback.tb_frame.f_code.co_filename.startswith((TORCHPORT_ROOT, "<frozen importlib")):
                kept.append(traceback)
            traceback = traceback.tb_next
        for earlier, later in zip(kept, kept[1:]):
            earlier.tb_next = later
        if kept:
            kept[-1].tb_next = None
        traceback = kept[0] if kept else None
    error.__traceback__ = traceback
    sys.excepthook(type(error), error, traceback)


def _execute(code, module: types.ModuleType, retarget: Retarget) -> int:
    """Exec `code` as __main__; returns the exit status Python would have given."""
    from torchport.retarget import torchscript
    from torchport.retarget.api import finish

    torchscript.install()  # functions and modules the application scripts land on the target
    sys.modules["__main__"] = module
    if "multiprocessing" in sys.modules:
        # multiprocessing names the main module __mp_main__ when it is imported, which torch did before
        # the script became __main__: objects of the script's classes that spawned children send back
        # (pool results, DataLoader batches, queue items) are pickled as __mp_main__.Class
        sys.modules["__mp_main__"] = module
    try:
        exec(code, module.__dict__)
    except SystemExit:
        finish(retarget)
        raise
    except KeyboardInterrupt as error:
        finish(retarget)
        _print_exception(error)
        sys.stdout.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130  # pragma: no cover - the signal ends the process first
    except BaseException as error:  # noqa: BLE001 - printed exactly as Python would
        finish(retarget)
        _print_exception(error)
        return 1
    finish(retarget)
    return 0


def _main_namespace(filename: str, retarget: Retarget, spec=None) -> types.ModuleType:
    module = types.ModuleType("__main__")
    module.__file__ = filename
    module.__dict__[transform.HELPER] = runtime
    module.__spec__ = spec
    module.__loader__ = spec.loader if spec is not None else importlib.machinery.SourceFileLoader("__main__", filename)
    module.__package__ = spec.parent if spec is not None else None
    module.__cached__ = None
    return module


def check_script_path(path: str) -> str:
    """The absolute path of the script to run; a usage error when there is no such file."""
    filename = os.path.abspath(path)
    if not os.path.isfile(filename):
        raise UsageError(f"Script {path!r} not found (looked in {os.getcwd()!r}). Check the path.")
    return filename


def run_script(path: str, argv: list[str], retarget: Retarget, rerun: bool = False, argv0: str | None = None) -> int:
    """Run the Python file at `path` with `argv` as its arguments (`argv0`: sys.argv[0] as the user
    typed it, for a run again of the entry script)."""
    filename = check_script_path(path)
    directory = os.path.dirname(filename)
    for root, why in application_roots(directory):
        retarget.widen(root, why)
    sys.argv = [argv0 or path, *argv]
    if not rerun:
        sys.path[0] = directory
    with open(filename, "rb") as handle:
        source = handle.read()
    module = _main_namespace(filename, retarget)
    try:
        code = transform.compile_source(source, filename, target=retarget.backend.name)
    except SyntaxError as error:
        # As Python shows it: the script's line, no frames of the compiler (torchport's or ast's).
        error.__traceback__ = None
        sys.excepthook(type(error), error, None)
        from torchport.retarget.api import finish

        finish(retarget)  # --report is written for a script that does not compile, too
        return 1
    return _execute(code, module, retarget)


def run_module(name: str, argv: list[str], retarget: Retarget, rerun: bool = False) -> int:
    """Run module `name` as `python -m name` would (a package runs its __main__)."""
    if not rerun:
        sys.path[0] = os.getcwd()
    for root, why in application_roots(os.getcwd()):
        retarget.widen(root, why)
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            name = f"{name}.__main__"
            spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as error:
        raise UsageError(f"No module named {name!r} ({error}). Check the name and sys.path.") from error
    except Exception as error:  # noqa: BLE001 - a parent package's __init__ failed: the program's error
        _print_exception(error)
        return 1
    if spec is None or spec.origin is None or not os.path.isfile(spec.origin):
        raise UsageError(f"No module named {name!r} (searched from {os.getcwd()!r}). Check the name.")
    sys.argv = [spec.origin, *argv]
    if spec.parent:
        try:
            importlib.import_module(spec.parent)
        except Exception as error:  # noqa: BLE001 - shown as python -m would show it
            _print_exception(error)
            return 1
    if retarget.in_scope(spec.origin):
        spec.loader = RetargetLoader(spec.name, spec.origin)
        with open(spec.origin, "rb") as handle:
            code = transform.compile_source(handle.read(), spec.origin, target=retarget.backend.name)
    else:
        code = spec.loader.get_code(spec.name)
    module = _main_namespace(spec.origin, retarget, spec)
    return _execute(code, module, retarget)
