#!/usr/bin/env bash
# Sets up, builds and runs every test: GoogleTest (CTest) and pytest. Tests labelled/marked `gpu` skip
# cleanly without a CUDA device.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/build.sh"
build="${DETOPS_BUILD_DIR:-$root/build}"
ctest --test-dir "$build" --output-on-failure
cd "$root"
DETOPS_LIBRARY="$build/libdetops.so" "$root/.venv/bin/python" -m pytest -q tests/python
