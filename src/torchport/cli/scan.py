"""`torchport scan`: report what ties the code to CUDA and what will hurt on the target."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from torchport.errors import UsageError
from torchport.rules.base import TARGETS

__all__ = ["NAME", "HELP", "add_arguments", "run", "add_selection_arguments", "resolve_selection", "check_paths"]

NAME = "scan"
HELP = "report CUDA lock-in and target hazards (text, json or sarif)"
DESCRIPTION = (
    "Scan Python sources, CUDA files, requirements and scripts for code tied to CUDA. "
    "Exit codes: 0 clean, 1 findings, 2 usage or internal error."
)
TARGET_CHOICES = (*TARGETS, "any")


def _codes(values: list[str] | None) -> list[str]:
    return [part.strip() for value in values or [] for part in value.split(",") if part.strip()]


def add_selection_arguments(parser) -> None:
    """Paths, --select, --ignore and --config: shared by scan and fix."""
    parser.add_argument("paths", nargs="*", default=[], metavar="PATH", help="files or directories (default: .)")
    parser.add_argument("--select", action="append", metavar="CODES", help="rule codes or prefixes, comma-separated")
    parser.add_argument("--ignore", action="append", metavar="CODES", help="rule codes or prefixes to skip")
    parser.add_argument("--config", metavar="FILE", help="pyproject.toml to read [tool.torchport] from")


def add_arguments(parser) -> None:
    add_selection_arguments(parser)
    parser.add_argument(
        "--target",
        help=f"judge severities for this target: {', '.join(TARGET_CHOICES)} (default: any = worst case); "
        "also TORCHPORT_TARGET",
    )
    parser.add_argument("--output-format", choices=["text", "json", "sarif"], default="text")
    parser.add_argument("--output", metavar="FILE", help="write the report to FILE instead of stdout")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when any file could not be parsed (not parsed is not checked)")
    parser.add_argument("--no-cache", action="store_true", help="do not read or write the result cache")
    parser.add_argument("--cache-dir", metavar="DIR", help="where the result cache lives (default ~/.cache/torchport)")
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: all cores)")


def check_paths(paths: list[str]) -> list[str]:
    """The paths to scan; a missing one is a usage error naming it."""
    paths = paths or ["."]
    for path in paths:
        if not os.path.lexists(path):
            raise UsageError(f"Path {path!r} does not exist. Pass existing files or directories (default: .).")
    return paths


def _scanned_inputs(paths: list[str], output: str | None) -> list[str]:
    """The inputs --output must not replace: the named files, and the output itself when it is an
    existing file the scan of a named folder would read."""
    if not output or not os.path.isfile(output):
        return list(paths)
    from torchport.scan.files import file_kind

    real = os.path.realpath(output)
    under_a_folder = any(
        os.path.isdir(path) and real.startswith(os.path.realpath(path) + os.sep) for path in paths
    )
    return [*paths, output] if under_a_folder and file_kind(output) is not None else list(paths)


def resolve_selection(args, config) -> set[str]:
    """Rule codes selected by flags, falling back to [tool.torchport]."""
    from torchport.rules.registry import select_rules

    select = _codes(args.select) or config.select
    ignore = _codes(args.ignore) + list(config.ignore)
    return {rule.code for rule in select_rules(select, ignore)}


def _resolve_target(flag: str | None, config_target: str | None) -> str:
    from torchport.cli.common import target_setting

    value = (target_setting(flag) or config_target or "any").strip().lower()
    if value not in TARGET_CHOICES:
        try:
            from torchport.backends import canonical_name

            value = canonical_name(value)
        except Exception:
            pass
    if value not in TARGET_CHOICES:
        raise UsageError(f"Unknown target {value!r}. Allowed: {', '.join(TARGET_CHOICES)}. Pass one of them to --target.")
    return value


def run(args) -> int:
    from torchport.cli.common import check_output_path, write_output
    from torchport.scan.config import load_config
    from torchport.scan.reports import build_report, render_json, render_sarif, render_text
    from torchport.scan.runner import DEFAULT_MAX_FILE_BYTES, scan_paths

    paths = check_paths(args.paths)
    check_output_path(args.output, _scanned_inputs(paths, args.output))
    config = load_config(args.config, paths[0])
    codes = resolve_selection(args, config)
    target = _resolve_target(args.target, config.target)
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs} is not allowed; pass 1 or more.")
    max_bytes = int(config.max_file_size_mb * 1e6) if config.max_file_size_mb else DEFAULT_MAX_FILE_BYTES
    result = scan_paths(
        paths,
        exclude=tuple(config.exclude),
        jobs=args.jobs,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        use_cache=not args.no_cache,
        progress=args.output_format == "text" or bool(args.output),
        max_file_bytes=max_bytes,
    )
    report = build_report(result, codes, target)
    renderer = {"text": render_text, "json": render_json, "sarif": render_sarif}[args.output_format]
    text = renderer(report)
    if args.output:
        write_output(args.output, text)
    else:
        sys.stdout.write(text)
    if args.exit_zero:
        return 0
    return 1 if report.findings or (args.strict and report.not_parsed) else 0
