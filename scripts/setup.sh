#!/usr/bin/env bash
# Creates .venv/ in the repository root with the CUDA build of torch==2.11.0 and the Python test
# dependencies, and installs the detops Python shim into it (editable). Installs ccache where it is missing
# and the machine allows (root with apt-get; optional, the build works without it): the wheel build of
# tests/python/test_install.py then reuses build/'s objects instead of compiling the library a second time.
# Idempotent: a second run only checks the pins.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
py="${PYTHON:-python3}"
stamp="$venv/.detops-setup-1"

if ! command -v ccache >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ccache; } >/dev/null 2>&1 ||
    echo "setup.sh: could not install ccache; building without it" >&2
fi

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
