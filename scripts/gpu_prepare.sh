#!/usr/bin/env bash
# Run on the development machine before a remote GPU run: puts what the GPU machine lacks into third_party/
# (ignored by git), the one folder to send along with the working tree:
#   third_party/googletest       GoogleTest's sources (from /usr/src/googletest, package `googletest`, or
#                                $DETOPS_GTEST_SOURCE_DIR): tests/CMakeLists.txt builds them where
#                                find_package(GTest) finds none, so the C++ suite builds there
#   third_party/python/expecttest  the pure-Python module torch.testing._internal imports (the OpInfo tests)
#   third_party/revision.txt     the commit, for the run's summary (no .git travels)
# Then checks that what travels (tracked and untracked-not-ignored files plus third_party/) stays well under
# 64 MiB that a remote run takes. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/third_party"
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
echo "gpu_prepare: third_party/ ready ($((carried / 1024)) KiB: googletest$([ -d "$dest/python/expecttest" ] && echo ', expecttest'))"
echo "gpu_prepare: a remote run sends about $total MiB (limit 64), with third_party/"
if [ "$total" -ge 60 ]; then
  echo "gpu_prepare: too close to the 64 MiB limit: remove large untracked files or ignore them" >&2
  exit 1
fi
