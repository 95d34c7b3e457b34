"""`torchport fix`: rewrite CUDA-only code to device-neutral PyTorch APIs, in place."""

from __future__ import annotations

import sys
from pathlib import Path

from torchport.errors import UsageError
from torchport.fileio import atomic_write

__all__ = ["NAME", "HELP", "add_arguments", "run"]

NAME = "fix"
HELP = "rewrite CUDA-only code toward torch.accelerator / torch.amp (safe fixes by default)"
DESCRIPTION = (
    "Apply the rules' fixes with libcst, keeping formatting and comments. Only safe fixes unless "
    "--unsafe-fixes. Exit codes: 0 nothing left to report, 1 findings remain, 2 usage or internal error."
)


def add_arguments(parser) -> None:
    from torchport.cli.scan import add_selection_arguments

    add_selection_arguments(parser)
    parser.add_argument("--diff", action="store_true", help="print a unified diff and write nothing")
    parser.add_argument("--unsafe-fixes", action="store_true", help="also apply fixes that may change behaviour")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")


def run(args) -> int:
    from torchport.cli.scan import check_paths, resolve_selection
    from torchport.fix.engine import fix_source, unified_diff
    from torchport.scan.config import load_config
    from torchport.scan.files import discover

    paths = check_paths(args.paths)
    config = load_config(args.config, paths[0])
    codes = tuple(sorted(resolve_selection(args, config)))
    discovery = discover(paths, tuple(config.exclude))
    changed = applied = remaining = unsafe_skipped = 0
    problems = dict(discovery.problems)
    for path, kind in discovery.files:
        if kind != "python":
            continue
        try:
            source = Path(path).read_bytes().decode("utf-8")
        except UnicodeDecodeError as error:
            problems[path] = f"not UTF-8 ({error.reason} at byte {error.start}); left as is"
            continue
        except OSError as error:
            problems[path] = f"cannot read: {error.strerror}; left as is"
            continue
        result = fix_source(source, path, codes, unsafe=args.unsafe_fixes)
        if result.error:
            problems[path] = f"{result.error}; left as is"
            continue
        remaining += len(result.remaining)
        unsafe_skipped += result.unsafe_skipped
        if not result.changed:
            continue
        changed += 1
        applied += len(result.applied)
        if args.diff:
            sys.stdout.write(unified_diff(result))
            continue
        try:
            atomic_write(path, result.fixed)
        except OSError as error:
            raise UsageError(f"Cannot write {path!r}: {error.strerror}. Check its permissions.") from error
    for path, reason in sorted(problems.items()):
        print(f"torchport: not fixed: {path}: {reason}", file=sys.stderr)
    verb = "would fix" if args.diff else "fixed"
    summary = f"{verb} {applied} finding{'s' if applied != 1 else ''} in {changed} file{'s' if changed != 1 else ''}"
    if unsafe_skipped:
        summary += f"; {unsafe_skipped} more with --unsafe-fixes"
    summary += f"; {remaining} left for manual changes (run 'torchport scan')"
    print(summary, file=sys.stderr)
    if args.exit_zero:
        return 0
    return 1 if remaining or (args.diff and changed) else 0
