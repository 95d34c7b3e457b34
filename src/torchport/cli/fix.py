"""`torchport fix`: rewrite CUDA-only code to device-neutral PyTorch APIs, in place."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

from torchport.errors import UsageError

__all__ = ["NAME", "HELP", "add_arguments", "run"]

NAME = "fix"
HELP = "rewrite CUDA-only code toward torch.accelerator / torch.amp (safe fixes by default)"
DESCRIPTION = (
    "Apply the rules' fixes with libcst, keeping formatting and comments. Only safe fixes unless "
    "--unsafe-fixes. Fixes follow the oldest torch the project declares (requirements or pyproject): "
    "a torch.accelerator function newer than it (all of them below 2.6) is not written. Files changed "
    "on disk while fix runs, read-only and hard-linked files (unless --force), files that do not parse "
    "and symlinks leaving the given folders are left as they are and listed as not processed. Exit "
    "codes: 0 nothing left, 1 findings remain, a file was not processed, or (with --diff) fixes are "
    "pending, 2 usage or internal error."
)


def add_arguments(parser) -> None:
    from torchport.cli.scan import add_selection_arguments

    add_selection_arguments(parser)
    parser.add_argument("--diff", action="store_true",
                        help="print a unified diff, with the reason of each unsafe fix, and write nothing")
    parser.add_argument("--unsafe-fixes", action="store_true", help="also apply fixes that may change behaviour")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")
    parser.add_argument("--force", action="store_true",
                        help="also rewrite read-only files (mode kept) and hard-linked ones (in place, link kept)")
    parser.add_argument("--torch-version", metavar="X.Y",
                        help="the oldest torch the fixed code must run on "
                        "(default: the lowest the project's pin admits, else current)")


def _torch_floor(args, paths: list[str]):
    """The oldest torch (major, minor) the fixed code must run on: --torch-version, else the lowest
    release the project's requirement admits; None for the torch in use (no requirement found)."""
    from torchport.fix import neutral

    if args.torch_version:
        try:
            major, minor = (int(part) for part in args.torch_version.split(".")[:2])
        except ValueError:
            raise UsageError(
                f"--torch-version {args.torch_version!r} is not a version. Pass MAJOR.MINOR, e.g. 2.5."
            ) from None
        return major, minor
    pin = neutral.declared_torch(Path(paths[0]).resolve())
    floor = pin.floor if pin is not None else None
    if floor is None or not neutral.may_write_legacy(floor):
        return None
    newer = sorted(name for name, since in neutral.ACCELERATOR_SINCE.items() if since > floor)
    what = ("without torch.accelerator" if floor < neutral.ACCELERATOR_MIN_VERSION
            else "without the torch.accelerator functions it lacks (" + ", ".join(newer) + ")")
    print(f"torchport: {pin.source} pins torch{pin.specifier}: writing code for torch {floor[0]}.{floor[1]}, {what}",
          file=sys.stderr)
    return floor


def _outside(path: str, roots: list[str]) -> str | None:
    """The real path of `path` when it leaves every given root (through a symlink), else None."""
    real = os.path.realpath(path)
    if any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots):
        return None
    return real


def _fix_file(source, kind: str, codes: tuple[str, ...], unsafe: bool, floor):
    """Fix one source: a Python file, or a notebook's code cells (the result then holds its JSON)."""
    from torchport import notebooks
    from torchport.fix.engine import fix_source
    from torchport.fix.sources import NotProcessed

    if kind == "python":
        return fix_source(source.text, source.path, codes, unsafe=unsafe, floor=floor)
    try:
        notebook = notebooks.load(source.raw)
        result = fix_source(notebooks.to_python(notebook, marks=True), source.path, codes, unsafe=unsafe, floor=floor)
        if result.changed and not result.error:
            result.original, result.fixed = source.text, notebooks.dump(notebooks.from_python(notebook, result.fixed))
    except notebooks.NotebookError as error:
        raise NotProcessed(str(error)) from error
    return result


def run(args) -> int:
    from torchport.cli.scan import check_paths, resolve_selection
    from torchport.fix.engine import unified_diff, unsafe_reason
    from torchport.fix.sources import NotProcessed, check_writable, read_source, write_source
    from torchport.rules.base import FixSafety
    from torchport.scan.config import load_config
    from torchport.scan.files import discover

    paths = check_paths(args.paths)
    config = load_config(args.config, paths[0])
    codes = tuple(sorted(resolve_selection(args, config)))
    floor = _torch_floor(args, paths)
    roots = [os.path.realpath(path) for path in paths]
    discovery = discover(paths, tuple(config.exclude))
    changed = applied = unsafe_skipped = 0
    left: list = []
    problems = dict(discovery.problems)
    for path, kind in discovery.files:
        if kind not in ("python", "notebook"):
            continue
        real = _outside(path, roots)
        if real is not None:
            problems[path] = f"a symlink to {real!r}, outside the folders given; name it to fix it"
            continue
        try:
            source = read_source(path)
        except NotProcessed as reason:
            problems[path] = f"{reason}; left as is"
            continue
        try:
            result = _fix_file(source, kind, codes, args.unsafe_fixes, floor)
        except NotProcessed as reason:
            problems[path] = f"{reason}; left as is"
            continue
        if result.error:
            problems[path] = f"{result.error}; left as is"
            continue
        left += result.remaining
        unsafe_skipped += result.unsafe_skipped
        if not result.changed:
            continue
        if args.diff:
            reasons = sorted({(item.line, item.code) for item in result.applied if item.fix.safety is FixSafety.UNSAFE})
            for line, code in reasons:
                sys.stdout.write(f"# {path}:{line}: {code} (unsafe): {unsafe_reason(code)}\n")
            sys.stdout.write(unified_diff(result))
        else:
            try:
                write_source(source, result.fixed, args.force)
            except NotProcessed as reason:
                problems[path] = f"{reason}; left as is"
                left += [item for item in result.applied]
                continue
            except OSError as error:
                raise UsageError(f"Cannot write {path!r}: {error.strerror}. Check its permissions.") from error
        changed += 1
        applied += len(result.applied)
        if args.diff:
            try:
                check_writable(source, args.force)
            except NotProcessed as reason:
                problems[path] = f"{reason} (fix would leave it as is)"
    _report(args, problems, left, applied, changed, unsafe_skipped)
    if args.exit_zero:
        return 0
    return 1 if left or problems or (args.diff and changed) else 0


def _report(args, problems: dict[str, str], left: list, applied: int, changed: int, unsafe_skipped: int) -> None:
    """Files not processed, then what is left for a person and why, then one summary line."""
    from torchport.fix.engine import manual_reason

    for path, reason in sorted(problems.items()):
        print(f"torchport: not processed: {path}: {reason}", file=sys.stderr)
    counts = Counter(item.code for item in left)
    if counts:
        print("Left for a person (code, count, why fix does not do it):", file=sys.stderr)
    for code, count in sorted(counts.items(), key=lambda pair: (-pair[1], pair[0])):
        pending = [item for item in left if item.code == code and item.fix is not None]
        if pending and not args.unsafe_fixes:
            why = "its fix changes behaviour: run fix --unsafe-fixes (or --diff to review it first)"
        else:
            why = manual_reason(code)
        print(f"  {code} {count:>4}  {why}", file=sys.stderr)
    verb = "would fix" if args.diff else "fixed"
    summary = f"{verb} {applied} finding{'s' if applied != 1 else ''} in {changed} file{'s' if changed != 1 else ''}"
    if unsafe_skipped:
        summary += f"; {unsafe_skipped} more with --unsafe-fixes"
    summary += f"; {len(left)} left for manual changes (run 'torchport scan')"
    if problems:
        summary += f"; {len(problems)} file{'s' if len(problems) != 1 else ''} not processed"
    print(summary, file=sys.stderr)
