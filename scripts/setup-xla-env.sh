#!/usr/bin/env bash
# Create .venv-xla: torch 2.9 + torch_xla 2.9 (the newest torch_xla on PyPI, which needs torch 2.9),
# with torchport installed, for running the xla backend on its CPU runtime (PJRT_DEVICE=CPU).
# The only torch 2.9 on PyPI is the CUDA build, so this environment is several GB.
set -euo pipefail
cd "$(dirname "$0")/.."
python_bin="${PYTHON:-python3.11}"
command -v "$python_bin" >/dev/null 2>&1 || python_bin=python3
if [ ! -x .venv-xla/bin/python ]; then
  "$python_bin" -m venv .venv-xla
fi
.venv-xla/bin/python -m pip install --quiet --disable-pip-version-check \
  "torch==2.9.*" "torch_xla==2.9.*" -e . 2>&1 \
  | grep -v "is ignored: it is neither a file nor a directory" || true
if ! PJRT_DEVICE=CPU .venv-xla/bin/python -c "import torch, torch_xla, torchport; print('torch', torch.__version__, 'torch_xla', torch_xla.__version__)"; then
  # a half-installed environment (a full disk, a broken download) would make the xla tests fail
  # instead of skipping: remove it, and say so
  rm -rf .venv-xla
  echo "setup-xla-env: .venv-xla could not import torch, torch_xla and torchport; removed it" >&2
  exit 1
fi
