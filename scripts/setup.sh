#!/usr/bin/env bash
# Create .venv with the pinned CPU torch and torchport installed in editable mode.
#   bash scripts/setup.sh          runtime only
#   bash scripts/setup.sh --dev    plus the test and report dependencies
set -euo pipefail
cd "$(dirname "$0")/.."
python_bin="${PYTHON:-python3.11}"
command -v "$python_bin" >/dev/null 2>&1 || python_bin=python3
if [ ! -x .venv/bin/python ]; then
  "$python_bin" -m venv .venv
fi
extras=""
if [ "${1:-}" = "--dev" ]; then
  extras="[dev]"
fi
# torch==2.13.0 is pinned for development and CI; the package itself accepts a range.
.venv/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0 -e ".${extras}" 2>&1 \
  | grep -v "is ignored: it is neither a file nor a directory" || true
.venv/bin/python -c "import torch, torchport; print('torchport', torchport.__version__, 'with torch', torch.__version__)"
