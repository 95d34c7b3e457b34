"""`torchport check --target T SCRIPT [ARGS...]`: run a script on an emulated target and write a preflight report."""

from __future__ import annotations

import argparse
import os
import sys

from torchport import backends

NAME = "check"
#: The registry's first accelerator target (see backends.default_target).
DEFAULT_TARGET = backends.default_target()
HELP = f"run a script on an emulated target ({', '.join(backends.targets())}) and report what will break there"
DESCRIPTION = (
    "Runs SCRIPT on the emulated TARGET device (CUDA code retargeted to it) and reports ops by status "
    "with call sites, predicted compilations, dtype hazards, host syncs, peak memory, a verdict and "
    "ranked fixes. However the script ends (return, sys.exit, exception, signal, Ctrl-C, --timeout) the "
    "report is written. Exit code 0: ready; 1: findings or the script did not finish cleanly; "
    "2: usage or internal error; 130: interrupted (the report is still written)."
)


def add_arguments(parser) -> None:
    parser.add_argument("--target",
                        help="target profile name, alias or YAML path "
                        f"(env TORCHPORT_TARGET; default {DEFAULT_TARGET})")
    parser.add_argument("--output-format", choices=["text", "json", "html"], default="text")
    parser.add_argument("--output", help="write the report to this file instead of standard output")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when the report has findings")
    parser.add_argument("--timeout", type=float, metavar="SECONDS",
                        help="stop the script after SECONDS and report what ran (verdict: blocked)")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="arguments passed to the script")


def run(args) -> int:
    from torchport.cli.common import check_output_path, target_setting, write_output
    from torchport.check.ending import check_timeout
    from torchport.errors import UsageError
    from torchport.profiles import load

    if os.path.isdir(args.script):
        raise UsageError(f"Script {args.script!r} is a folder. Pass the path of a Python file to run.")
    if not os.path.isfile(args.script):
        raise UsageError(f"Script {args.script!r} does not exist. Pass the path of a Python file to run.")
    target = target_setting(args.target) or DEFAULT_TARGET
    load(target)  # a bad target fails here with the list of known ones
    timeout = check_timeout(args.timeout)
    check_output_path(args.output, [args.script])  # before the script runs, not after
    from torchport.check.api import check_script

    report = check_script(args.script, list(args.arguments), target=target, timeout=timeout)
    content = {"text": report.text, "json": report.json, "html": report.html}[args.output_format]()
    if args.output:
        write_output(args.output, content)
        print(f"torchport check: {report.verdict}; report written to {args.output}", file=sys.stderr)
    else:
        print(content)
    if report.data.get("program", {}).get("ended") == "interrupted":
        return 130
    if args.exit_zero:
        return 0
    return 0 if report.verdict == "ready" else 1
