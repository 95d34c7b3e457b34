"""Time `torchport scan` on a large real tree against a bare single-core ast.parse pass.

Prints, in one run: files, lines, the ast.parse baseline, the first scan (all cores, no cache),
the cached re-scan, their ratios, and files/s and lines/s. The baseline is timed before and
after the scans and the faster pass kept, so that load on a shared machine during one of them
does not flatter the scan; `--rounds N` repeats the whole sequence and keeps each minimum.

    .venv/bin/python benchmarks/bench_scan.py [PATH ...]   (default: the installed torch and
                                                            transformers packages)
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

from torchport.scan.files import discover
from torchport.scan.runner import scan_paths


def _default_paths() -> list[str]:
    paths = []
    for package in ("torch", "transformers"):
        spec = importlib.util.find_spec(package)
        if spec and spec.origin:
            paths.append(str(Path(spec.origin).parent))
    return paths


def _parse_baseline(files: list[str]) -> float:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path in files:
            try:
                ast.parse(Path(path).read_bytes())
            except (SyntaxError, ValueError, RecursionError):
                pass
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    paths = args.paths or _default_paths()
    python_files = [path for path, kind in discover(paths).files if kind == "python"]
    baselines: list[float] = [_parse_baseline(python_files)]
    firsts: list[float] = []
    cached: list[float] = []
    for _round in range(max(1, args.rounds)):
        with tempfile.TemporaryDirectory() as cache:
            start = time.perf_counter()
            first = scan_paths(paths, jobs=args.jobs, cache_dir=Path(cache), progress=False)
            firsts.append(time.perf_counter() - start)
            start = time.perf_counter()
            scan_paths(paths, jobs=args.jobs, cache_dir=Path(cache), progress=False)
            cached.append(time.perf_counter() - start)
        baselines.append(_parse_baseline(python_files))
    baseline, first_seconds, cached_seconds = min(baselines), min(firsts), min(cached)
    print(f"tree: {', '.join(paths)}")
    print(f"files: {first.files}  lines: {first.lines}  findings: {len(first.findings)}  "
          f"not parsed: {len(first.not_parsed)}  cores: {args.jobs}")
    print(f"ast.parse, 1 core ({len(python_files)} .py files): {baseline:8.2f} s   "
          f"(min of {', '.join(f'{value:.2f}' for value in baselines)})")
    print(f"scan, first run:                {first_seconds:8.2f} s   ratio to ast.parse {first_seconds / baseline:5.2f} "
          "(target <= 1.0)")
    print(f"scan, cached re-scan:           {cached_seconds:8.2f} s   ratio to first scan {cached_seconds / first_seconds:5.2f} "
          "(target <= 0.1)")
    print(f"throughput, ast.parse: {len(python_files) / baseline:,.0f} files/s, {first.lines / baseline:,.0f} lines/s")
    print(f"throughput, first run: {first.files / first_seconds:,.0f} files/s, {first.lines / first_seconds:,.0f} lines/s")
    print(f"throughput, cached:    {first.files / cached_seconds:,.0f} files/s, {first.lines / cached_seconds:,.0f} lines/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
