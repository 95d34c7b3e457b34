"""`torchport doctor`: which backends are usable here, why not, and how to enable them."""

from __future__ import annotations

import json
import platform
import shutil
import sys

NAME = "doctor"
HELP = "show every backend, whether it is usable here, and how to enable it (exit 1 on a configuration problem)"


def add_arguments(parser) -> None:
    parser.add_argument("--output-format", choices=["text", "json"], default="text")


#: The capability facts doctor shows per backend (Backend properties, read from the profiles).
_FACTS = (
    "dist_backend", "preferred_precision", "compiler", "supports_grad_scaler", "supports_pinned_memory",
    "supports_fused_optimizers", "supports_sync_batchnorm", "supports_capturable_optimizers",
    "native_events", "native_streams", "loads_to_device",
)


def _facts(backend) -> tuple[dict, str]:
    """The backend's capability facts, or ({}, why) when its profile cannot be read."""
    try:
        return {name: getattr(backend, name) for name in _FACTS}, ""
    except Exception as error:  # a third-party profile that is missing or broken is a problem to show
        return {}, f"{type(error).__name__}: {error}"


def problems() -> list[str]:
    """Configuration doctor flags: a TORCHPORT_DEVICE naming no backend, plugins and profiles that
    failed to load. Each line says what failed, the value, what is allowed and the next step."""
    import os

    from torchport import backends
    from torchport.errors import UnknownDeviceError
    from torchport.retarget.api import ENV_DEVICE

    found = []
    device = os.environ.get(ENV_DEVICE)
    if device is not None and device.strip().lower() != "auto":
        try:
            backends.canonical_name(device)
        except UnknownDeviceError:
            known = ", ".join(backend.name for backend in backends.real_backends())
            found.append(
                f"{ENV_DEVICE}={device!r} names no backend; 'torchport run' will refuse it. "
                f"Known backends: {known} (and their '-emulated' twins, aliases, or 'auto'). "
                f"Set {ENV_DEVICE} to one of them, or unset it."
            )
    for name, why in backends.broken_plugins().items():
        found.append(
            f"The third-party backend entry point {name!r} failed to load ({why}). "
            "Reinstall or fix the package that provides it, or uninstall it."
        )
    return found


def collect() -> dict:
    """The facts doctor prints, as data."""
    import torch

    from torchport import backends
    from torchport.backends.cpu import cpu_flags, cpu_model_name

    chosen, _ = backends.auto()
    rows = []
    issues = problems()
    for backend in backends.all_backends():
        probe = backend.probe()
        facts, broken = _facts(backend)
        if broken:
            issues.append(f"Backend {backend.name!r} has no readable profile: {broken}")
        rows.append(
            {
                "name": backend.name,
                "aliases": list(backend.aliases),
                "usable": probe.usable,
                "reason": probe.reason,
                "how_to_enable": probe.how_to_enable,
                **{name: facts.get(name, "?") for name in _FACTS},
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
        "problems": issues,
    }


def run(args) -> int:
    facts = collect()
    if args.output_format == "json":
        print(json.dumps(facts, indent=2))
        return 1 if facts["problems"] else 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="torchport backends (auto tries them top to bottom)")
    for column in ("backend", "usable", "reason", "how to enable", "dist", "precision", "compiler"):
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
            row["compiler"],
        )
    console.print(table)
    features = ", ".join(f"{name}={'yes' if on else 'no'}" for name, on in facts["cpu_features"].items())
    compilers = ", ".join(f"{name}={path or 'not found'}" for name, path in facts["compilers"].items())
    console.print(f"torch {facts['torch']} on Python {facts['python']}, {facts['platform']}")
    console.print(f"CPU: {facts['cpu']} ({features})")
    console.print(f"Compilers: {compilers}")
    console.print(f"auto resolves to: [bold]{facts['auto']}[/bold]")
    for problem in facts["problems"]:
        console.print(f"[bold red]problem:[/bold red] {problem}", highlight=False)
    return 1 if facts["problems"] else 0
