#!/usr/bin/env bash
# Run on the development machine before a remote GPU run: puts what the GPU machine lacks into third_party/
# (ignored by git), the one folder to send along with the working tree:
#   third_party/googletest       GoogleTest's sources (from /usr/src/googletest, package `googletest`, or
#                                $DETOPS_GTEST_SOURCE_DIR): tests/CMakeLists.txt builds them where
#                                find_package(GTest) finds none, so the C++ suite builds there
#   third_party/python/expecttest  the pure-Python module torch.testing._internal imports (the OpInfo tests)
#   third_party/revision.txt     the commit, for the run's summary (no .git travels)
# With --prebuilt [BUILD_DIR] (default build/), also
#   third_party/prebuilt.tar.xz  BUILD_DIR's libdetops.so and tests/test_gpu with a manifest, for a lease too
#                                short to build there: DETOPS_GPU_PREBUILT=third_party/prebuilt.tar.xz
#                                scripts/gpu_run.sh unpacks it instead of building (BUILD_DIR must be built
#                                for that GPU's architecture, with the tests: DETOPS_BUILD_TESTS=ON)
# Then checks that what travels (tracked and untracked-not-ignored files plus third_party/) stays well under
# 64 MiB that a remote run takes. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/third_party"
prebuilt=""
if [ "${1:-}" = --prebuilt ]; then
  prebuilt="$(cd "${2:-$root/build}" && pwd)"
  for f in libdetops.so tests/test_gpu; do
    [ -f "$prebuilt/$f" ] || { echo "gpu_prepare: no $f in $prebuilt (build with DETOPS_BUILD_TESTS=ON)" >&2; exit 1; }
  done
elif [ $# -gt 0 ]; then
  echo "usage: scripts/gpu_prepare.sh [--prebuilt [BUILD_DIR]]" >&2; exit 2
fi
src="${DETOPS_GTEST_SOURCE_DIR:-/usr/src/googletest}"
if [ -n "${PYTHON:-}" ]; then py="$PYTHON"
elif [ -x "$root/.venv/bin/python" ]; then py="$root/.venv/bin/python"
else py=python3; fi

if [ ! -f "$src/CMakeLists.txt" ]; then
  echo "gpu_prepare: no GoogleTest sources at $src (apt-get install googletest, or set DETOPS_GTEST_SOURCE_DIR)" >&2
  exit 1
fi
mkdir -p "$dest"
rm -rf "$dest/googletest" "$dest/python"
# -L: copies what links point to (a link would travel as a link, its target left behind).
cp -rL "$src" "$dest/googletest"
rm -rf "$dest/googletest/.git"

module="$("$py" -c 'import expecttest, os; print(os.path.dirname(expecttest.__file__))' 2>/dev/null || true)"
if [ -n "$module" ] && [ -f "$module/__init__.py" ]; then
  mkdir -p "$dest/python"
  cp -rL "$module" "$dest/python/expecttest"
  find "$dest/python" -name __pycache__ -prune -exec rm -rf {} +
else
  echo "gpu_prepare: warning: $py has no expecttest; the OpInfo tests will fail on the GPU machine" >&2
fi

if git -C "$root" rev-parse HEAD >/dev/null 2>&1; then
  echo "$(git -C "$root" rev-parse --short HEAD) ($(git -C "$root" status --porcelain | wc -l) paths changed at prepare time)" \
    >"$dest/revision.txt"
fi

rm -f "$dest/prebuilt.tar.xz"
if [ -n "$prebuilt" ]; then
  stage="$(mktemp -d)"
  mkdir -p "$stage/tests"
  cp "$prebuilt/libdetops.so" "$stage/"
  cp "$prebuilt/tests/test_gpu" "$stage/tests/"
  { echo "prebuilt: $(cat "$dest/revision.txt" 2>/dev/null || echo 'unknown revision'), built in $prebuilt"
    echo "prebuilt: $(grep -E '^DETOPS_CUDA_ARCHITECTURES:' "$prebuilt/CMakeCache.txt" 2>/dev/null | cut -d= -f2 | sed 's/^/CUDA architectures /'),"\
      "torch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo unknown), packed $(date -u +%Y-%m-%dT%H:%MZ)"
  } >"$stage/prebuilt.txt"
  XZ_OPT="-6 -T0" tar -cJf "$dest/prebuilt.tar.xz" -C "$stage" libdetops.so tests/test_gpu prebuilt.txt
  rm -rf "$stage"
fi

if ! git -C "$root" check-ignore -q "$dest/googletest/CMakeLists.txt"; then
  echo "gpu_prepare: third_party/ is not ignored by git; add /third_party/ to .gitignore" >&2
  exit 1
fi
travels=0
if git -C "$root" rev-parse HEAD >/dev/null 2>&1; then
  travels="$(cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')"
fi
carried="$(du -sb "$dest" | cut -f1)"
total=$(((travels + carried) / 1048576))
echo "gpu_prepare: third_party/ ready ($((carried / 1024)) KiB: googletest$([ -d "$dest/python/expecttest" ] && echo ', expecttest')$([ -n "$prebuilt" ] && echo ', prebuilt.tar.xz'))"
echo "gpu_prepare: a remote run sends about $total MiB (limit 64), with third_party/"
if [ "$total" -ge 60 ]; then
  echo "gpu_prepare: too close to the 64 MiB limit: remove large untracked files or ignore them" >&2
  exit 1
fi
