"""The device-neutral spellings that fixes write, in one place, and their form for older torch.

Every fix that chooses a device writes one of the expressions below, so a fixed program reads like
a hand migration to `torch.accelerator` (the style of PyTorch's own examples since 2025):

    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")

`torch.accelerator` exists from torch 2.6, and some of its functions came later (`ACCELERATOR_SINCE`).
Fixes target the oldest torch a project's requirement admits (`TorchPin.floor`, or
`fix --torch-version`): a fix whose code needs a newer torch than that is written without
`torch.accelerator` (`adapt`): CUDA first, then MPS, then the CPU, which is what a hand migration
for those versions writes. The fixes whose code that torch has keep `torch.accelerator`.

This module never imports torch or libcst: rules (which `scan` loads in every worker) use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEVICE",
    "DEVICE_TYPE",
    "IS_AVAILABLE",
    "ACCELERATOR_MIN_VERSION",
    "ACCELERATOR_SINCE",
    "Version",
    "needs",
    "is_legacy",
    "written",
    "may_write_legacy",
    "device",
    "device_type",
    "indexed",
    "indexed_code",
    "when_available",
    "adapt",
    "legacy_spans",
    "TorchPin",
    "declared_torch",
    "HELPERS",
    "Helper",
]

#: The best available device (a torch.device): the accelerator, else the CPU.
DEVICE = '{torch}.accelerator.current_accelerator() if {torch}.accelerator.is_available() else {torch}.device("cpu")'
#: Its type as a string ('cuda', 'mps', 'xpu', ..., or 'cpu'), for code that keeps device strings.
DEVICE_TYPE = '{torch}.accelerator.current_accelerator().type if {torch}.accelerator.is_available() else "cpu"'
#: Whether there is an accelerator at all.
IS_AVAILABLE = "{torch}.accelerator.is_available()"
Version = tuple[int, int]

#: The first torch release (major, minor) of each `torch.accelerator` function the fixes write; the
#: one source of truth for what a fix may write for a given torch. How each was verified:
#: - 2.6: the module and these functions (`set_device_index`/`current_device_index` under these names
#:   from the first release: pytorch/pytorch#143186 renamed them on the 2.6 release branch).
#: - `device_index` (the context manager): pytorch/pytorch#148864, merged April 2025, after the 2.7
#:   branch cut: 2.8. Present in 2.9.1 (`.venv-xla`).
#: - the memory functions: `dir(torch.accelerator)` in torch 2.9.1 (`.venv-xla`) lists them; the 2.8
#:   documentation of `torch.accelerator` does not.
#: - `get_memory_info`: absent from torch 2.9.1 (`.venv-xla`), present in 2.13 (`.venv`); added by
#:   pytorch/pytorch#156812, merged November 2025 after the 2.9 release: 2.10.
#: `torch.Event`, written next to `torch.accelerator` calls, goes with them (see `_LEGACY`).
ACCELERATOR_SINCE: dict[str, Version] = {
    **dict.fromkeys(("current_accelerator", "is_available", "device_count", "set_device_index",
                     "current_device_index", "synchronize"), (2, 6)),
    "device_index": (2, 8),
    **dict.fromkeys(("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                     "reset_peak_memory_stats", "empty_cache"), (2, 9)),
    "get_memory_info": (2, 10),
}
#: The first torch release with `torch.accelerator`.
ACCELERATOR_MIN_VERSION: Version = min(ACCELERATOR_SINCE.values())
#: The torch from which every fix keeps `torch.accelerator`.
_NEWEST: Version = max(ACCELERATOR_SINCE.values())
_USES = re.compile(r"\baccelerator\.(\w+)")

_LEGACY = {
    DEVICE: '{torch}.device("cuda" if {torch}.cuda.is_available() else "mps" if '
    '{torch}.backends.mps.is_available() else "cpu")',
    DEVICE_TYPE: '"cuda" if {torch}.cuda.is_available() else "mps" if {torch}.backends.mps.is_available() else "cpu"',
    IS_AVAILABLE: "({torch}.cuda.is_available() or {torch}.backends.mps.is_available())",
    "{torch}.distributed.get_default_backend_for_device(" + DEVICE + ")": (
        '("nccl" if {torch}.cuda.is_available() else "gloo")'
    ),
    # the device type in an f-string, quoted with single quotes there
    DEVICE_TYPE.replace('"', "'"): "'cuda' if {torch}.cuda.is_available() else 'mps' if "
    "{torch}.backends.mps.is_available() else 'cpu'",
    "{torch}.accelerator.set_device_index(": "{torch}.cuda.set_device(",
    "{torch}.accelerator.current_device_index()": "{torch}.cuda.current_device()",
    "{torch}.accelerator.device_count()": "{torch}.cuda.device_count()",
    "{torch}.accelerator.device_count": "{torch}.cuda.device_count",
    **{
        f"{{torch}}.accelerator.{name}(": f"{{torch}}.cuda.{name}("
        for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved",
                     "reset_peak_memory_stats", "empty_cache")
    },
    "{torch}.accelerator.synchronize()": "{torch}.cuda.synchronize()",
    "{torch}.accelerator.get_memory_info(": "{torch}.cuda.mem_get_info(",
    # TP107 renames the function only; with no torch.accelerator the CUDA check stays
    "{torch}.accelerator.is_available": "{torch}.cuda.is_available",
    # an indexed device (`indexed`), behind the accelerator check: CUDA's or MPS' type
    "{torch}.accelerator.current_accelerator().type + ": '("cuda" if {torch}.cuda.is_available() else "mps") + ',
    # torch.Event is younger than torch.accelerator: the CUDA event, behind the CUDA check
    "{torch}.Event(": "{torch}.cuda.Event(",
    "{torch}.Event if ": "{torch}.cuda.Event if ",
}


def _pattern(template: str) -> re.Pattern[str]:
    escaped = re.escape(template)
    # the first {torch} captures the spelling of torch; later ones must repeat it
    # (a dotted spelling of torch never ends in `.cuda`: `torch.cuda.Event(` is not `torch.Event(`)
    escaped = escaped.replace(re.escape("{torch}"), r"(?<![\w.])(?P<torch>[A-Za-z_]\w*(?:\.(?!cuda\b)\w+)*)", 1)
    return re.compile(escaped.replace(re.escape("{torch}"), r"(?P=torch)"))


#: Longest first, so that a whole expression is replaced before the calls inside it.
_LEGACY_PATTERNS = [(_pattern(modern), legacy) for modern, legacy in sorted(_LEGACY.items(), key=lambda i: -len(i[0]))]


#: The legacy spellings, to recognise them in fixed code (a second `fix` leaves them alone). Calls
#: renamed back to their `torch.cuda` name are not among them: they read as the code a project
#: wrote, which the rules must still see (`fix_source` drops a fix that would write them again).
_RENAMED = re.compile(r"\{torch\}\.cuda\.\w+(\(\))?")
_LEGACY_WRITTEN = [_pattern(legacy) for legacy in sorted(set(_LEGACY.values()), key=len, reverse=True)
                   if not legacy.endswith("(") and not _RENAMED.fullmatch(legacy)]


def legacy_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of `text` that hold a legacy spelling written by `adapt`."""
    if ".cuda." not in text:
        return []
    return [match.span() for pattern in _LEGACY_WRITTEN for match in pattern.finditer(text)]


def device(torch: str, bare: bool = False) -> str:
    """The best-device expression spelling torch as `torch`; parenthesized unless `bare` (for a
    place where a conditional expression needs no parentheses, such as a call argument)."""
    text = DEVICE.format(torch=torch)
    return text if bare else f"({text})"


def device_type(torch: str, quote: str = '"', bare: bool = False) -> str:
    """The device-type expression (a str); `quote` quotes its "cpu"; parenthesized unless `bare`."""
    text = DEVICE_TYPE.format(torch=torch).replace('"', quote)
    return text if bare else f"({text})"


def indexed(torch: str, index: str, bare: bool = False) -> str:
    """Device `index` of the accelerator as a string (`'cuda:0'` on CUDA), else `"cpu"`: the CPU
    has no numbered devices where a device is looked up by name (`torch.load(map_location=...)`)."""
    return indexed_code(torch, repr(index), bare)


def indexed_code(torch: str, suffix: str, bare: bool = False) -> str:
    """As `indexed`, with the `':N'` part given as code (`f':{rank}'`, `':' + str(rank)`)."""
    text = f'{torch}.accelerator.current_accelerator().type + {suffix} if {IS_AVAILABLE.format(torch=torch)} else "cpu"'
    return text if bare else f"({text})"


def when_available(torch: str, expression: str, otherwise: str, bare: bool = False) -> str:
    """`(expression if torch.accelerator.is_available() else otherwise)`; no parentheses if `bare`."""
    text = f"{expression} if {IS_AVAILABLE.format(torch=torch)} else {otherwise}"
    return text if bare else f"({text})"


def needs(text: str) -> Version | None:
    """The oldest torch that has every device-neutral API `text` calls (None: it calls none). An
    API missing from `ACCELERATOR_SINCE` counts as the newest there."""
    versions = [ACCELERATOR_SINCE.get(name, _NEWEST) for name in _USES.findall(text)]
    return max(versions, default=None)


def is_legacy(text: str, floor: Version | None) -> bool:
    """Whether `text` needs a newer torch than `floor`, the oldest one the code must run on (None:
    the torch in use, which has them all)."""
    if floor is None or floor >= _NEWEST:
        return False
    version = needs(text)
    return version is not None and version > floor


def written(replacement: str, legacy_form: str | None, floor: Version | None) -> str:
    """The code a fix writes for `floor`: `replacement` when that torch has all it calls, else the
    fix's own `legacy_form` if it has one, else `replacement` without `torch.accelerator`."""
    if not is_legacy(replacement, floor):
        return replacement
    return legacy_form or adapt(replacement, floor)


def may_write_legacy(floor: Version | None) -> bool:
    """Whether some fix writes its legacy form for `floor`."""
    return floor is not None and floor < _NEWEST


def adapt(text: str, floor: Version | None) -> str:
    """`text` as written for torch `floor`: unchanged when that torch has every API it calls, else
    all of it without `torch.accelerator` (one guard for the whole expression: CUDA's or MPS')."""
    if not is_legacy(text, floor):
        return text
    for pattern, replacement in _LEGACY_PATTERNS:
        text = pattern.sub(lambda match: replacement.format(torch=match.group("torch")), text)
    return text


@dataclass(frozen=True)
class TorchPin:
    """The torch requirement a project declares, and where."""

    specifier: str
    source: str

    @property
    def legacy(self) -> bool:
        """Whether no torch with `torch.accelerator` (>= 2.6) satisfies the requirement."""
        admitted = self._admitted()
        return bool(admitted) and max(admitted) < ACCELERATOR_MIN_VERSION

    @property
    def floor(self) -> Version | None:
        """The oldest torch (major, minor) the fixed code must run on: the lowest release the
        requirement admits. A requirement with no lower bound (`<3`, `!=2.5.0`) says nothing of the
        oldest torch in use: the newest release it admits, which an install picks, counts. None
        when the specifier does not parse or admits no release."""
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import InvalidVersion, Version as Release

        admitted = self._admitted()
        try:
            clauses = list(SpecifierSet(self.specifier))
        except InvalidSpecifier:
            return None
        if not admitted:
            # a local or otherwise unlisted version (`==2.7.1+cu121`): the lowest one named
            named = []
            for clause in clauses:
                try:
                    named.append(tuple(Release(clause.version.rstrip(".*")).release[:2]))
                except InvalidVersion:
                    continue
            return min(named, default=None)
        bounded = any(clause.operator in ("==", "===", "~=", ">=", ">") for clause in clauses)
        return min(admitted) if bounded else max(admitted)

    def _admitted(self) -> list[Version]:
        """The torch releases (major, minor) the requirement admits, from 1.0 to 3.5."""
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            specifiers = SpecifierSet(self.specifier)
        except InvalidSpecifier:
            return []
        releases = [(1, minor) for minor in range(14)] + [(2, minor) for minor in range(30)]
        releases += [(3, minor) for minor in range(6)]
        return [
            release for release in releases
            if any(specifiers.contains(f"{release[0]}.{release[1]}.{patch}", prereleases=True) for patch in range(10))
        ]


_REQUIREMENT = re.compile(r"""^\s*["']?torch\s*(?:\[[^\]]*\])?\s*(?P<spec>(?:[<>=!~]=?|===)[^;#"'\s][^;#"']*)""", re.M)
_MANIFESTS = ("pyproject.toml", "requirements.txt", "requirements-dev.txt", "setup.cfg", "setup.py", "environment.yml")


def declared_torch(start: Path) -> TorchPin | None:
    """The torch requirement declared by the project holding `start`, searching upward.

    The nearest folder with a manifest that names torch wins; None when none does.
    """
    folder = start if start.is_dir() else start.parent
    for candidate in (folder, *folder.parents):
        for name in _MANIFESTS + tuple(sorted(path.name for path in candidate.glob("requirements*.txt"))):
            manifest = candidate / name
            if not manifest.is_file():
                continue
            try:
                text = manifest.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            match = _REQUIREMENT.search(text)
            if match:
                return TorchPin(match.group("spec").strip().rstrip(","), str(manifest))
        if (candidate / ".git").exists():
            break
    return None


@dataclass(frozen=True)
class Helper:
    """A module-level definition a fix writes once, after the module's imports, and calls.

    Used where torch has no device-neutral spelling that runs without an accelerator (CPU events
    cannot time). It imports what it uses inside itself, so names the module binds do not matter.
    """

    name: str
    code: str


HELPERS: dict[str, Helper] = {
    helper.name: helper
    for helper in (
        Helper(
            "_HostEvent",
            '''class _HostEvent:
    """torch.Event for a machine without an accelerator: CPU events cannot record or time, so this
    one reads the host clock (the CPU runs each op before the next one starts)."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.time = None

    def record(self, stream=None):
        import time  # here, not at the top: scripts often bind `time` to time.time

        self.time = time.perf_counter()

    def elapsed_time(self, end_event):
        return (end_event.time - self.time) * 1000.0

    def synchronize(self):
        pass

    def wait(self, stream=None):
        pass

    def query(self):
        return True
''',
        ),
        Helper(
            "_host_device_properties",
            '''def _host_device_properties(device=None):
    """The host's counterparts of a GPU's properties where there is none: its processor's name, its
    memory and its cores; compute capability (0, 0)."""
    import os
    import platform
    import types

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
    return types.SimpleNamespace(name=platform.processor() or platform.machine() or "cpu", total_memory=memory,
                                 multi_processor_count=os.cpu_count() or 1, major=0, minor=0)
''',
        ),
        Helper(
            "_host_memory_info",
            '''def _host_memory_info():
    """(free, total) bytes of the host's memory, for a machine without an accelerator (where
    there is one, the fixed code asks it for its own)."""
    import os

    if not hasattr(os, "sysconf"):
        return 0, 0
    page = os.sysconf("SC_PAGE_SIZE")
    return page * os.sysconf("SC_AVPHYS_PAGES"), page * os.sysconf("SC_PHYS_PAGES")
''',
        ),
    )
}
