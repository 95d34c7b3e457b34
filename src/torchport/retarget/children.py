"""Python programs the application starts itself: `subprocess.run([sys.executable, "eval.py", ...])`.

On a GPU machine such a child runs on the GPU like its parent; here its command line, where it leaves
the application for `subprocess`, becomes `[sys.executable, -m torchport run --device D --precision P
..., "eval.py", ...]`, so the child is retargeted with this process's settings (the children of
torchrun and multiprocessing already are). The interpreter's own flags stay in front; a child that
is not a script or a module (`python -c CODE`, a shell string) is left as written and reported.
"""

from __future__ import annotations

import os
import subprocess
import sys

from torchport.retarget import state

__all__ = ["command", "FUNCTIONS"]

#: The subprocess functions whose first argument is the child's command line.
FUNCTIONS = frozenset({subprocess.run, subprocess.Popen, subprocess.call, subprocess.check_call,
                       subprocess.check_output})
#: Interpreter flags that take a value (`-W error`, `-X dev`).
_FLAGS_WITH_VALUE = {"-W", "-X", "--check-hash-based-pycs"}


def _is_this_interpreter(program) -> bool:
    try:
        program = os.fspath(program)
    except TypeError:
        return False
    if not isinstance(program, str):
        return False
    if program == sys.executable:
        return True
    return os.path.isabs(program) and os.path.realpath(program) == os.path.realpath(sys.executable)


def _options(retarget: state.Retarget) -> list[str]:
    options = ["--device", retarget.backend.name, "--precision", retarget.precision]
    if retarget.strict:
        options.append("--strict")
    for root in retarget.scope:
        options += ["--scope", root]
    for root in retarget.narrowed:
        options += ["--no-scope", root]
    return options


def command(value, site=None):
    """`value` (a child's command line) with a Python child of this interpreter run under torchport."""
    retarget = state.current()
    if retarget is None or not isinstance(value, (list, tuple)) or not value or not _is_this_interpreter(value[0]):
        return value
    items = [os.fspath(item) if isinstance(item, os.PathLike) else item for item in value]
    index = 1
    while index < len(items) and isinstance(items[index], str) and items[index].startswith("-") \
            and items[index] not in ("-m", "-c", "-"):
        index += 2 if items[index] in _FLAGS_WITH_VALUE else 1
    rest = items[index:]
    if rest[:2] == ["-m", "torchport"]:
        return value  # already started under torchport
    if not rest or not isinstance(rest[0], str) or rest[0] in ("-c", "-") \
            or (rest[0] == "-m" and len(rest) > 1 and rest[1] == "torch.distributed.run"):
        what = "python " + " ".join(str(item) for item in rest[:2]) if rest else "python (interactive)"
        retarget.decide("Python child processes left as written", f"{what} started by the application is not "
                                                                "retargeted: start it as a script or module (torchrun: "
                                                                "-m torchport run SCRIPT)",
                        kind="device")
        return value
    retarget.decide("Python child processes", f"started by the application with this interpreter: run under "
                                              f"torchport run --device {retarget.backend.name}", kind="device")
    return type(value)([*items[:index], "-m", "torchport", "run", "--child", *_options(retarget), *rest])
