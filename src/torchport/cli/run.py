"""`torchport run`: run a CUDA-written script or module on another device, with no code change."""

from __future__ import annotations

import argparse

from torchport import precision as precision_vocabulary
from torchport.errors import UsageError

NAME = "run"
HELP = "run a script (or -m module) written for CUDA on the chosen device"
DESCRIPTION = (
    "Run SCRIPT (or -m MODULE) with its CUDA usages redirected to --device. Only the application's "
    "code is retargeted (the script's project, PYTHONPATH entries, editable installs, --scope paths, "
    "minus --no-scope paths); PyTorch and installed libraries see the real machine. Under torchrun: "
    "torchrun [args] -m torchport run [options] SCRIPT [ARGS...]"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", help="target backend or alias (default: auto, or $TORCHPORT_DEVICE)")
    parser.add_argument(
        "--precision", choices=list(precision_vocabulary.SUPPORTED["run"]),
        help=f"autocast policy (default: auto, or $TORCHPORT_PRECISION): {precision_vocabulary.describe('run')}",
    )
    parser.add_argument("--strict", action="store_true", default=None,
                        help="fail on anything unsupported or silently ignored")
    parser.add_argument("--report", metavar="FILE", help="write a JSON report of what was redirected")
    parser.add_argument("--compile", action="store_true",
                        help="compile the models the program moves to the device (torchport.compile: "
                             "shape buckets, host fallback, a placement report)")
    parser.add_argument("--scope", metavar="PATH", action="append", default=[],
                        help="also retarget code under PATH (repeatable; or $TORCHPORT_SCOPE)")
    parser.add_argument("--no-scope", metavar="PATH", action="append", default=[], dest="no_scope",
                        help="never retarget code under PATH (repeatable; or $TORCHPORT_NO_SCOPE)")
    parser.add_argument("--verbose", action="store_true", default=None,
                        help="say which folders are retargeted and why (or $TORCHPORT_VERBOSE=1)")
    # set by torchport on the Python children the application starts: their stderr is the application's
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE [ARGS...]",
                        help="run a module as python -m does (options go before -m)")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="SCRIPT [ARGS...] or, with -m, ARGS...")


def _check_paths(args) -> None:
    """Before the program starts (and before anything is retargeted): the script exists, each --scope
    exists, and --report is writable and not the script."""
    import os

    from torchport.cli.common import check_output_path
    from torchport.retarget.runner import check_script_path

    for path in args.scope:
        if not os.path.isdir(path) and not os.path.isfile(path):
            raise UsageError(f"--scope {path!r} does not exist. Pass an existing folder or file of the program's code.")
    script = [] if args.module else args.program[:1]
    if script and os.path.isdir(script[0]):
        raise UsageError(f"Script {script[0]!r} is a folder. Pass a Python file, or -m PACKAGE to run its __main__.")
    if script:
        check_script_path(script[0])
    check_output_path(args.report, script, "--report")


def run(args) -> int:
    from torchport.retarget.api import activate, resolve_options
    from torchport.retarget.runner import run_module, run_script

    if not args.module and not args.program:
        raise UsageError("Nothing to run: give a SCRIPT or -m MODULE, e.g. torchport run train.py --epochs 1")
    _check_paths(args)
    options = resolve_options(args.device, args.precision, args.strict, args.scope, args.report,
                              args.no_scope, args.verbose)
    retarget = activate(options["device"], options["scope"], options["precision"], options["strict"],
                        options["report"], options["no_scope"], options["verbose"])
    retarget.recorder.silent = args.child
    if args.compile:
        from torchport.compile.run import install

        install(retarget)
    if args.module:
        return run_module(args.module[0], args.module[1:], retarget)
    return run_script(args.program[0], args.program[1:], retarget)
