"""Run every benchmark in this folder (bench_*.py), one after another, and print their ratios.

    .venv/bin/python benchmarks/run.py            # all
    .venv/bin/python benchmarks/run.py retarget   # only bench_retarget.py
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv: list[str]) -> int:
    wanted = set(argv)
    status = 0
    for path in sorted(glob.glob(os.path.join(HERE, "bench_*.py"))):
        name = os.path.basename(path)[len("bench_"):-len(".py")]
        if wanted and name not in wanted:
            continue
        print(f"\n=== {name} ===", flush=True)
        completed = subprocess.run([sys.executable, path], cwd=os.path.dirname(HERE))
        status = status or completed.returncode
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
