"""A progress line for long comparisons: a rich spinner on a terminal, silent otherwise."""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator

__all__ = ["progress_reporter"]


@contextlib.contextmanager
def progress_reporter(enabled: bool | None = None) -> Iterator[Callable[[str], None]]:
    """Yield `report(message)`; it shows the message with a spinner when stderr is a terminal."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield lambda message: None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=True) as progress:
        task = progress.add_task("torchport compare", total=None)

        def report(message: str) -> None:
            progress.update(task, description=message)

        yield report
