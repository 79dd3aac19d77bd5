#!/usr/bin/env bash
# One-call GPU run: builds against this machine's python3 torch, runs the gpu tests, compute-sanitizer
# memcheck and racecheck over a small subset, bench/bench_ops.py and the report; everything under $OUT.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$root/gpu-out}"
mkdir -p "$OUT"
py="${PYTHON:-python3}"
build="$root/build-gpu"
cd "$root"
device="$("$py" -c 'import torch; print(torch.cuda.get_device_name(0).replace(" ", "-"))')"
date="$(date -u +%Y-%m-%d)"
export DETOPS_LIBRARY="$build/libdetops.so" PYTHONPATH="$root/python_shim"
{
  cmake -S . -B "$build" -G Ninja -DDETOPS_PYTHON="$py" -DDETOPS_BUILD_TESTS=OFF -DDETOPS_BUILD_BENCHMARKS=OFF \
    -DDETOPS_BUILD_EXAMPLES=OFF && ninja -C "$build"
} >"$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
timeout 150 "$py" -m pytest -q -m gpu tests/python >"$OUT/pytest-gpu.log" 2>&1; echo "pytest gpu rc=$?"
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool "$tool" "$py" bench/bench_ops.py --device cuda --ops index_add_ scatter_add \
    --shapes hot_destination --reps 5 --warmup 1 --max-input-sets 1 >"$OUT/sanitizer-$tool.log" 2>&1; echo "$tool rc=$?"
done
timeout 240 "$py" bench/bench_ops.py --out "$OUT/$device-$date.json" --markdown "$OUT/RESULTS-table.md" \
  >"$OUT/bench.log" 2>&1; echo "bench rc=$?"
timeout 90 "$py" -m detops report --results "$OUT/$device-$date.json" --out-dir "$OUT" >"$OUT/report.txt" 2>&1
echo "report rc=$?"; cat "$OUT/report.txt"
