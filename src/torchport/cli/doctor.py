"""`torchport doctor`: which backends are usable here, why not, and how to enable them."""

from __future__ import annotations

import json
import platform
import shutil
import sys

NAME = "doctor"
HELP = "show every backend, whether it is usable here, and how to enable it"


def add_arguments(parser) -> None:
    parser.add_argument("--output-format", choices=["text", "json"], default="text")


def collect() -> dict:
    """The facts doctor prints, as data."""
    import torch

    from torchport import backends
    from torchport.backends.cpu import cpu_flags, cpu_model_name

    chosen, _ = backends.auto()
    rows = []
    for backend in backends.all_backends():
        probe = backend.probe()
        rows.append(
            {
                "name": backend.name,
                "aliases": list(backend.aliases),
                "usable": probe.usable,
                "reason": probe.reason,
                "how_to_enable": probe.how_to_enable,
                "dist_backend": backend.dist_backend,
                "preferred_precision": backend.preferred_precision,
                "auto": backend.name == chosen.name,
            }
        )
    flags = cpu_flags()
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cpu": cpu_model_name(),
        "cpu_features": {name: name in flags for name in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")},
        "compilers": {name: shutil.which(name) for name in ("gcc", "g++", "clang", "nvcc")},
        "auto": chosen.name,
        "backends": rows,
        "priority": list(backends.PRIORITY),
    }


def run(args) -> int:
    facts = collect()
    if args.output_format == "json":
        print(json.dumps(facts, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="torchport backends (auto tries them top to bottom)")
    for column in ("backend", "usable", "reason", "how to enable", "dist", "precision"):
        table.add_column(column)
    for row in facts["backends"]:
        marker = " (auto)" if row["auto"] else ""
        table.add_row(
            row["name"] + marker,
            "yes" if row["usable"] else "no",
            row["reason"],
            row["how_to_enable"],
            row["dist_backend"],
            row["preferred_precision"],
        )
    console.print(table)
    features = ", ".join(f"{name}={'yes' if on else 'no'}" for name, on in facts["cpu_features"].items())
    compilers = ", ".join(f"{name}={path or 'not found'}" for name, path in facts["compilers"].items())
    console.print(f"torch {facts['torch']} on Python {facts['python']}, {facts['platform']}")
    console.print(f"CPU: {facts['cpu']} ({features})")
    console.print(f"Compilers: {compilers}")
    console.print(f"auto resolves to: [bold]{facts['auto']}[/bold]")
    return 0
