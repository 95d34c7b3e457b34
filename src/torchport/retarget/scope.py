"""Which modules are the application's own, and the import hook that retargets exactly those.

A file is in scope when it lies under one of the scope roots (the script's directory, or for
`-m pkg.mod` the current directory, plus every path given with --scope or TORCHPORT_SCOPE) and not
inside an installed-packages directory, the standard library, or torchport itself. So a virtual
environment inside the project directory stays out of scope.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import sysconfig

from torchport.retarget import transform
from torchport.retarget.state import TORCHPORT_ROOT

__all__ = ["in_scope", "RetargetFinder", "RetargetLoader", "excluded_roots"]



def excluded_roots() -> tuple[str, ...]:
    paths = {TORCHPORT_ROOT}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            paths.add(os.path.realpath(path))
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        paths.add(os.path.realpath(os.path.join(prefix, "lib")))
    return tuple(sorted(paths))


_EXCLUDED = excluded_roots()
_PACKAGE_DIRS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def in_scope(filename: str, roots: list[str]) -> bool:
    """True when `filename` belongs to the application (see the module docstring)."""
    path = os.path.realpath(filename)
    if any(marker in path for marker in _PACKAGE_DIRS):
        return False
    if any(_under(path, root) for root in _EXCLUDED):
        return False
    return any(_under(path, os.path.realpath(root)) for root in roots)


class RetargetLoader(importlib.machinery.SourceFileLoader):
    """Loads an in-scope module with its CUDA call sites rewritten and the torch facades bound.

    Bytecode is never read from or written to __pycache__: the rewritten code depends on the
    target, and a plain run must not pick it up.
    """

    builtins_namespace: dict = {}
    helper = None

    def get_code(self, fullname):
        source = self.get_data(self.get_filename(fullname))
        return transform.compile_source(source, self.get_filename(fullname))

    def exec_module(self, module) -> None:
        module.__dict__["__builtins__"] = self.builtins_namespace
        module.__dict__[transform.HELPER] = self.helper
        super().exec_module(module)

    def set_data(self, *args, **kwargs) -> None:
        return None


class RetargetFinder(importlib.abc.MetaPathFinder):
    """First on sys.meta_path: hands in-scope source modules to RetargetLoader."""

    def __init__(self, roots: list[str]):
        self.roots = roots

    def find_spec(self, fullname, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return None
        if not spec.origin or not in_scope(spec.origin, self.roots):
            return None
        spec.loader = RetargetLoader(fullname, spec.origin)
        return spec
