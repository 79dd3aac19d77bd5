#!/usr/bin/env bash
# Builds libdetops.so, the tests, examples and benchmarks into build/ against the torch in .venv/.
# Idempotent; environment: DETOPS_CUDA_ARCHITECTURES (default "80;90"), DETOPS_BUILD_DIR (default build).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
build="${DETOPS_BUILD_DIR:-$root/build}"
# Where ccache is installed (CMakeLists.txt uses it when found), paths relative to the repository key its
# cache and the build directory is left out of it (ccache hashes it for nvcc otherwise; the build has no
# debug info to keep it for), so the wheel build (tests/python/test_install.py, build-wheel/) reuses these
# objects.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
args=(-S "$root" -B "$build" -G Ninja -DDETOPS_PYTHON="$root/.venv/bin/python")
if [ -n "${DETOPS_CUDA_ARCHITECTURES:-}" ]; then
  args+=(-DDETOPS_CUDA_ARCHITECTURES="$DETOPS_CUDA_ARCHITECTURES")
fi
if [ ! -f "$build/build.ninja" ] || [ -n "${DETOPS_CUDA_ARCHITECTURES:-}" ]; then
  cmake "${args[@]}" >"$root/.venv/cmake-configure.log" 2>&1 || { cat "$root/.venv/cmake-configure.log"; exit 1; }
fi
cmake --build "$build"
