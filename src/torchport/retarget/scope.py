"""Which modules are the application's own, and the import hook that retargets exactly those.

The application is everything that is not the standard library, torch, torchport, or an installed
third-party distribution:

- the script's project: the nearest folder above the script (or, when none is found there, the
  working directory) holding `.git`, `pyproject.toml`, `setup.py` or `setup.cfg`; the script's own
  folder when there is no project marker at all;
- every `PYTHONPATH` entry;
- the user's editable installs (a distribution whose `direct_url.json` says `editable`);
- every `--scope PATH` / `TORCHPORT_SCOPE` entry.

`--no-scope PATH` / `TORCHPORT_NO_SCOPE` narrows it. A file is in scope when its real path lies under
a root and not under the standard library, a site-packages folder of this interpreter, torchport, or
a `--no-scope` path, so a virtual environment inside the project stays out of scope.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import json
import os
import site
import sys
import sysconfig

from torchport.retarget import transform
from torchport.retarget.state import TORCHPORT_ROOT

__all__ = ["in_scope", "RetargetFinder", "RetargetLoader", "excluded_roots", "application_roots",
           "PROJECT_MARKERS"]

PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
#: Callables (fullname, path, target) -> an AST pass `(tree, source, filename) -> None` or None,
#: run after torchport's own rewrite on in-scope modules (how another import hook's rewrite composes).
PASS_PROVIDERS: list = []


def excluded_roots() -> tuple[str, ...]:
    """The standard library, this interpreter's site-packages folders, and torchport, as real paths."""
    paths = {TORCHPORT_ROOT}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            paths.add(os.path.realpath(path))
    site_folders = list(getattr(site, "getsitepackages", lambda: [])())
    user_site = getattr(site, "getusersitepackages", lambda: None)()
    if user_site:
        site_folders.append(user_site)
    paths.update(os.path.realpath(path) for path in site_folders)
    return tuple(sorted(paths))


_EXCLUDED = excluded_roots()


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def in_scope(filename: str, roots: list[str], narrowed: list[str] = ()) -> bool:
    """True when `filename` belongs to the application (see the module docstring): under one of its
    roots, and not a distribution installed there (`pip install --target DIR` on PYTHONPATH)."""
    path = os.path.realpath(filename)
    if any(_under(path, root) for root in _EXCLUDED):
        return False
    if any(_under(path, os.path.realpath(root)) for root in narrowed):
        return False
    for root in roots:
        root = os.path.realpath(root)
        if _under(path, root):
            top = os.path.relpath(path, root).split(os.sep, 1)[0]
            if top.removesuffix(".py") not in _installed_in(root):
                return True
    return False


@functools.lru_cache(maxsize=None)
def _installed_in(folder: str) -> frozenset[str]:
    """The top-level modules and packages of the distributions installed into `folder` (those with a
    `*.dist-info` there: a `pip install --target` folder), which are libraries, not the application."""
    names: set[str] = set()
    try:
        entries = [entry for entry in os.listdir(folder) if entry.endswith(".dist-info")]
    except OSError:
        return frozenset()
    for entry in entries:
        for listing, column in (("top_level.txt", None), ("RECORD", 0)):
            try:
                with open(os.path.join(folder, entry, listing), encoding="utf-8") as handle:
                    lines = handle.read().splitlines()
            except OSError:
                continue
            for line in lines:
                name = line if column is None else line.split(",", 1)[0]
                top = name.strip().split("/", 1)[0]
                if top and not top.endswith((".dist-info", ".data")) and top != "..":
                    names.add(top.removesuffix(".py"))
    return frozenset(names)


def project_root(start: str) -> str | None:
    """The nearest folder at or above `start` holding a project marker, or None."""
    folder = os.path.realpath(start)
    while True:
        if any(os.path.exists(os.path.join(folder, marker)) for marker in PROJECT_MARKERS):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def _editable_installs() -> list[tuple[str, str]]:
    """(root, distribution name) of every editable install (PEP 610 `direct_url.json`), torchport excluded."""
    import importlib.metadata
    from urllib.parse import unquote, urlparse

    found = []
    for distribution in importlib.metadata.distributions():
        text = distribution.read_text("direct_url.json")
        if not text or '"editable"' not in text:
            continue
        try:
            info = json.loads(text)
        except ValueError:
            continue
        url = info.get("url", "")
        if not info.get("dir_info", {}).get("editable") or not url.startswith("file:"):
            continue
        root = os.path.realpath(unquote(urlparse(url).path))
        if _under(TORCHPORT_ROOT, root):
            continue  # torchport's own checkout
        found.append((root, distribution.metadata["Name"]))
    return found


def application_roots(start: str) -> list[tuple[str, str]]:
    """The application's roots for a program started from folder `start`, each with why it was chosen."""
    roots: list[tuple[str, str]] = []
    project = project_root(start)
    if project is not None:
        roots.append((project, f"project of the program: holds {_marker(project)}"))
    else:
        roots.append((os.path.realpath(start), "the program's folder (no project marker above it)"))
    working_project = project_root(os.getcwd())
    if working_project is not None:
        roots.append((working_project, f"project of the working directory: holds {_marker(working_project)}"))
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and os.path.isdir(entry):
            roots.append((os.path.realpath(entry), "PYTHONPATH entry"))
    for root, name in _editable_installs():
        roots.append((root, f"editable install of {name}"))
    unique: dict[str, str] = {}
    for root, reason in roots:
        unique.setdefault(root, reason)
    return list(unique.items())


def _marker(folder: str) -> str:
    return next(marker for marker in PROJECT_MARKERS if os.path.exists(os.path.join(folder, marker)))


class RetargetLoader(importlib.machinery.SourceFileLoader):
    """Loads an in-scope module with its import sites and CUDA call sites rewritten.

    The module keeps the interpreter's builtins; its globals gain one name, `__tp__` (the runtime
    helpers), as pytest's rewritten modules gain `@py_assert` names. Bytecode is never read from or
    written to __pycache__: the rewritten code depends on the target, and a plain run must not
    pick it up.
    """

    #: Further AST passes for this module (pytest's assertion rewriting under the plugin).
    extra_passes: tuple = ()

    def get_code(self, fullname):
        source = self.get_data(self.get_filename(fullname))
        return transform.compile_source(source, self.get_filename(fullname), self.extra_passes)

    def exec_module(self, module) -> None:
        from torchport.retarget import runtime, torchscript

        torchscript.install()  # functions and modules the application scripts land on the target
        module.__dict__[transform.HELPER] = runtime
        super().exec_module(module)

    def set_data(self, *args, **kwargs) -> None:
        return None


class RetargetFinder(importlib.abc.MetaPathFinder):
    """First on sys.meta_path: hands in-scope source modules to RetargetLoader."""

    def __init__(self, roots: list[str], narrowed: list[str] = ()):
        self.roots = roots
        self.narrowed = narrowed

    def find_spec(self, fullname, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return None
        if not spec.origin or not in_scope(spec.origin, self.roots, self.narrowed):
            return None
        loader = RetargetLoader(fullname, spec.origin)
        passes = [provider(fullname, path, target) for provider in PASS_PROVIDERS]
        loader.extra_passes = tuple(rewrite for rewrite in passes if rewrite is not None)
        spec.loader = loader
        return spec


def forget_unretargeted(retarget, with_cuda_only: bool = False) -> list[str]:
    """Drop from `sys.modules` the application's source modules imported before retargeting was on
    (by a forkserver that preloaded the program; by the entry script above its `use()`, there only
    those whose source names CUDA, as their import may have effects a second one repeats): the
    program's next import of them loads them retargeted. Returns their names."""
    dropped = []
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        origin = getattr(spec, "origin", None)
        if (name not in ("__main__", "__mp_main__") and origin and origin.endswith(".py")
                and getattr(spec, "has_location", False) and not isinstance(spec.loader, RetargetLoader)
                and retarget.in_scope(origin) and (not with_cuda_only or _names_cuda(origin))):
            del sys.modules[name]
            dropped.append(name)
    return dropped


def _names_cuda(filename: str) -> bool:
    try:
        with open(filename, "rb") as handle:
            return b"cuda" in handle.read()
    except OSError:
        return False
