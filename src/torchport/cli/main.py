"""`torchport` / `python -m torchport`: dispatches to one module per subcommand.

A subcommand is any module in this package that defines NAME, HELP, add_arguments(parser) and
run(args) -> int. Errors torchport raises on purpose become one line and exit code 2; anything else
is an internal error, shown in full only with TORCHPORT_DEBUG=1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

from torchport import __version__
from torchport.errors import TorchportError

__all__ = ["main", "entry", "build_parser"]


def _subcommand_modules(only: str | None = None):
    """Every subcommand module; only `only`'s when it names one (`torchport run` imports run alone)."""
    import torchport.cli as package

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda item: item.name):
        if info.name in {"main", "common"} or info.name.startswith("_"):
            continue
        if only is not None and info.name != only:
            continue
        module = importlib.import_module(f"torchport.cli.{info.name}")
        if all(hasattr(module, attribute) for attribute in ("NAME", "HELP", "add_arguments", "run")):
            yield module


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchport",
        description="Run PyTorch code written for CUDA on any backend, and prove it still works.",
    )
    parser.add_argument("--version", action="version", version=f"torchport {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = list(_subcommand_modules(only))
    if only is not None and not modules:
        modules = list(_subcommand_modules())  # not a subcommand: the full parser says so
    for module in modules:
        subparser = subparsers.add_parser(
            module.NAME, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP)
        )
        module.add_arguments(subparser)
        subparser.set_defaults(_run=module.run)
    return parser


#: Subcommands that load torch: they import it first thing, a few frames from the bottom of the
#: stack, as a script does. Imported deeper, CPython 3.11's frame stack can cross a chunk boundary
#: at a hot spot of torch's import and map and unmap a chunk thousands of times (`python -m
#: torchport run` measured ~10,000 extra mmap/munmap pairs, tens of milliseconds, against ~1,000).
TORCH_COMMANDS = frozenset({"run", "check", "compare", "serve"})


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words and words[0] in TORCH_COMMANDS and not {"-h", "--help"} & set(words):
        try:
            import torch  # noqa: F401  (see TORCH_COMMANDS)
        except Exception:  # a broken install: the subcommand's own import reports it
            pass
    parser = build_parser(words[0] if words and not words[0].startswith("-") else None)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args._run(args) or 0)
    except TorchportError as error:
        print(f"torchport: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("torchport: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # an internal error: one line unless debugging
        if os.environ.get("TORCHPORT_DEBUG"):
            raise
        print(
            f"torchport: internal error: {type(error).__name__}: {error}. "
            "Rerun with TORCHPORT_DEBUG=1 for the traceback, and report it.",
            file=sys.stderr,
        )
        return 2


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
