#!/usr/bin/env bash
# Creates .venv/ in the repository root with the CUDA build of torch==2.11.0 and the Python test
# dependencies, and installs the detops Python shim into it (editable). Idempotent: a second run only
# checks the pins.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
py="${PYTHON:-python3}"
stamp="$venv/.detops-setup-1"

if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
if [ ! -f "$stamp" ]; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "torch==2.11.0" pytest numpy matplotlib "setuptools>=70,<82" wheel \
    expecttest hypothesis
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
    -e "$root/python_shim"
  touch "$stamp"
fi
"$venv/bin/python" - <<'PY'
import torch
assert torch.__version__.startswith("2.11.0"), f"expected torch 2.11.0, got {torch.__version__}"
assert torch.version.cuda is not None, "torch in .venv is not a CUDA build"
PY
