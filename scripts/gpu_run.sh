#!/usr/bin/env bash
# The GPU runner: builds detops (and the GoogleTest suite) against this machine's torch, runs CTest and
# pytest, compute-sanitizer over every covered op, the output hashes and the benchmarks. Logs and
# results go under $OUT, in few files (a remote run returns at most 8 files).
#
#   scripts/gpu_run.sh [build] [test] [sanitize] [bench] [all]         (no phase: all)
#
#   build     configure build-gpu/ (tests ON, benchmarks OFF: bench/bench_ops.py measures) and build it
#   test      ctest -L gpu, ctest -LE gpu, pytest one chunk per tests/python file (in parallel), doctor
#   sanitize  compute-sanitizer memcheck, racecheck, initcheck, synccheck over scripts/sanitize_cases.py
#   bench     scripts/output_hashes.py (CPU + CUDA), examples/reproducible_training.py twice,
#             scripts/large_call.py (a call over 2^31 where the GPU has the memory), bench/bench_ops.py,
#             python -m detops report
#
# A phase that needs libdetops.so builds it first when build-gpu/ is missing or stale (a fresh machine).
# Nothing stops the run: every step runs under its own `timeout`, failures are recorded and the next step
# runs; the exit status is 1 when a step failed or timed out. All steps of one invocation end within
# DETOPS_GPU_BUDGET_S seconds (default 540: inside one remote command of at most 600 s); a step that no longer fits
# is recorded as SKIPPED and can be run by a later call (e.g. `scripts/gpu_run.sh bench`).
#
# $OUT receives: <device>-<date>-tests.txt (the summary: each step's status, exit code, time, failing test
# ids, sanitizer counts), <device>-<date>-<phases>-logs.tar.gz (every log), and from the bench phase
# <device>-<date>.json (benchmarks), <device>-<date>-table.md, <device>-<date>-hashes.json,
# <device>-<date>-report.txt and detops-report.png.
#
# Environment: OUT (default gpu-out/), PYTHON (default .venv/bin/python, else python3),
# DETOPS_GPU_BUILD_DIR (default build-gpu/), DETOPS_CUDA_ARCHITECTURES (default: the device's),
# DETOPS_GPU_BUDGET_S, DETOPS_GPU_JOBS (parallel test chunks, default 4), DETOPS_GPU_PYTEST_MARK (e.g. gpu),
# DETOPS_GPU_TEST_TIMEOUT (per pytest test where pytest-timeout is installed, default 240),
# DETOPS_SANITIZE_DTYPES (default: float32 float64 float16 bfloat16), DETOPS_SANITIZE_LIGHT_DTYPES (racecheck,
# initcheck and synccheck; default: DETOPS_SANITIZE_DTYPES), DETOPS_GPU_CMAKE_ARGS (more configure
# arguments), DETOPS_SANITIZE_ARGS (more compute-sanitizer options), DETOPS_BENCH_ARGS (more bench_ops.py
# options), DETOPS_BENCH_FIRST_FILE (the cases benchmarked first; default bench/measure_first.txt, empty:
# none), DETOPS_GPU_REPORT=0 (no report step), DETOPS_GPU_RUN_NO_GPU_OK=1 (run for real without a GPU: for
# testing this script).
#
# A short lease (one command does everything):
#   DETOPS_GPU_PREBUILT=<tarball or dir>  libdetops.so and tests/test_gpu built elsewhere for this device
#       (scripts/gpu_prepare.sh --prebuilt): the build phase unpacks them instead of building, the test phase
#       runs tests/test_gpu itself (no CTest; the CPU-only C++ tests are CI's)
#   DETOPS_GPU_XDIST=<n>  the pytest steps as one `pytest -n <n>` (pytest-xdist) instead of a chunk per file
#   DETOPS_GPU_OVERLAP=1  the sanitizers start in the test phase's pool instead of after it
#   DETOPS_GPU_PYTEST_FILES="<paths>"  only these test files (default: every tests/python/test_*.py)
#
# DETOPS_GPU_RUN_DRY=1: a dry run for machines without a GPU (CI). It configures into a temporary build dir
# with GoogleTest forced from source, lists the build plan (ninja -n) and the CTest tests, collects the
# pytest chunks, runs the sanitizer workload, the hashes and a tiny benchmark on the CPU, and prints each
# command it would run. It needs libdetops.so ($DETOPS_LIBRARY, else build/libdetops.so) and builds nothing.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
exec </dev/null  # no step reads the terminal (a step may still take a here-document)
dry="${DETOPS_GPU_RUN_DRY:-0}"
[ "$dry" = 0 ] || dry=1
if [ -n "${PYTHON:-}" ]; then py="$PYTHON"
elif [ -x "$root/.venv/bin/python" ]; then py="$root/.venv/bin/python"
else py=python3; fi
budget="${DETOPS_GPU_BUDGET_S:-540}"
prebuilt="${DETOPS_GPU_PREBUILT:-}"
xdist="${DETOPS_GPU_XDIST:-0}"
overlap="${DETOPS_GPU_OVERLAP:-0}"
jobs_max="${DETOPS_GPU_JOBS:-4}"
start=$SECONDS
reserve=15   # seconds kept for writing the summary and packing the logs
min_step=20  # a step is started only with at least this many seconds left

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

# ---- phases ------------------------------------------------------------------------------------------
want_build=0 want_test=0 want_sanitize=0 want_bench=0
[ $# -gt 0 ] || set -- all
for arg in "$@"; do
  case "$arg" in
    build) want_build=1 ;;
    test) want_test=1 ;;
    sanitize) want_sanitize=1 ;;
    bench) want_bench=1 ;;
    all) want_build=1 want_test=1 want_sanitize=1 want_bench=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_run: unknown phase '$arg' (build, test, sanitize, bench, all)" >&2; exit 2 ;;
  esac
done
phases=()
[ $want_build = 1 ] && phases+=(build)
[ $want_test = 1 ] && phases+=(test)
[ $want_sanitize = 1 ] && phases+=(sanitize)
[ $want_bench = 1 ] && phases+=(bench)
tag="$(IFS=_; echo "${phases[*]}")"
OUT="${OUT:-$root/gpu-out}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

# ---- the machine -------------------------------------------------------------------------------------
date_="$(date -u +%Y-%m-%d)"
if [ $dry = 1 ] || [ "${DETOPS_GPU_RUN_NO_GPU_OK:-0}" = 1 ]; then  # the latter: testing the runner itself
  device="$([ $dry = 1 ] && echo dry-run || echo no-gpu)"
  arch="${DETOPS_CUDA_ARCHITECTURES:-90}"
  torch_info="$("$py" -c 'import torch; print(f"torch {torch.__version__}, CUDA {torch.version.cuda}")' 2>&1)" \
    || { echo "gpu_run: $py cannot import torch: $torch_info" >&2; exit 2; }
else
  info="$("$py" - 2>&1 <<'PY'
import re, torch
if not torch.cuda.is_available():
    raise SystemExit("no CUDA device visible to torch (DETOPS_GPU_RUN_DRY=1 for a dry run)")
p = torch.cuda.get_device_properties(0)
print(re.sub(r"[^A-Za-z0-9._-]+", "-", torch.cuda.get_device_name(0)).strip("-"), f"{p.major}{p.minor}",
      f"torch {torch.__version__}, CUDA {torch.version.cuda}, {p.multi_processor_count} SMs, "
      f"{p.total_memory >> 30} GiB")
PY
)" || { echo "gpu_run: $info" >&2; exit 2; }
  info="$(tail -1 <<<"$info")"
  device="${info%% *}"; rest="${info#* }"
  arch="${DETOPS_CUDA_ARCHITECTURES:-${rest%% *}}"
  torch_info="${rest#* }"
fi

# ---- directories and environment ---------------------------------------------------------------------
if [ -n "${DETOPS_GPU_BUILD_DIR:-}" ]; then build="$DETOPS_GPU_BUILD_DIR"
elif [ $dry = 1 ]; then build="$(mktemp -d "${TMPDIR:-/tmp}/detops-gpu-dry.XXXXXX")"; trap 'rm -rf "$build"' EXIT
else build="$root/build-gpu"; fi
mkdir -p "$build"
logs="$build/runner-logs"
rm -rf "$logs"
mkdir -p "$logs/results"
summary="$OUT/$device-$date_-tests.txt"
tarball="$OUT/$device-$date_-$tag-logs.tar.gz"

if [ $dry = 1 ]; then
  lib="${DETOPS_LIBRARY:-$root/build/libdetops.so}"
else
  lib="$build/libdetops.so"
fi
[ -z "$prebuilt" ] || case "$prebuilt" in /*) ;; *) prebuilt="$root/$prebuilt" ;; esac
# The prebuilt C++ tests find torch's libraries (and its CUDA runtime) here, not where they were linked.
torch_libs="$("$py" -c 'import os, torch; d = os.path.dirname(torch.__file__)
print(":".join(p for p in (os.path.join(d, "lib"), os.path.join(d, "..", "nvidia", "cu13", "lib")) if os.path.isdir(p)))' 2>/dev/null || true)"
if [ -n "$xdist" ] && [ "$xdist" != 0 ] && ! "$py" -c 'import xdist' 2>/dev/null; then xdist=0; fi
export DETOPS_LIBRARY="$lib" PYTHONUNBUFFERED=1
export PYTHONPATH="$root/python_shim${PYTHONPATH:+:$PYTHONPATH}"
# torch.testing._internal (the OpInfo tests) imports expecttest; the GPU image lacks it, so
# scripts/gpu_prepare.sh copies it into third_party/python.
if "$py" -c 'import expecttest' 2>/dev/null; then expecttest=installed
elif [ -d "$root/third_party/python/expecttest" ]; then
  export PYTHONPATH="$PYTHONPATH:$root/third_party/python"; expecttest="from third_party/python"
else expecttest="MISSING (the OpInfo tests will fail; run scripts/gpu_prepare.sh and carry third_party)"; fi
pytest_timeout=()
if "$py" -c 'import pytest_timeout' 2>/dev/null; then pytest_timeout=(--timeout "${DETOPS_GPU_TEST_TIMEOUT:-240}"); fi
sanitizer="$(command -v compute-sanitizer || true)"
if [ -z "$sanitizer" ]; then
  for d in /usr/local/cuda/bin "$(dirname "$(command -v nvcc 2>/dev/null || echo /nonexistent/nvcc)")"; do
    [ -x "$d/compute-sanitizer" ] && { sanitizer="$d/compute-sanitizer"; break; }
  done
fi
# A prebuilt library comes from the commit gpu_prepare.sh recorded; a copy of the repository made for the
# remote run may carry an older git HEAD.
if [ -n "${DETOPS_GPU_PREBUILT:-}" ] && [ -f "$root/third_party/revision.txt" ]; then
  revision="$(cat "$root/third_party/revision.txt") (from gpu_prepare.sh, with the prebuilt library)"
elif git -C "$root" rev-parse HEAD >/dev/null 2>&1; then
  revision="$(git -C "$root" rev-parse --short HEAD) ($(git -C "$root" status --porcelain 2>/dev/null | wc -l) paths changed)"
elif [ -f "$root/third_party/revision.txt" ]; then revision="$(cat "$root/third_party/revision.txt") (from gpu_prepare.sh)"
else revision=unknown; fi
gpu_line="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"

# ---- steps, results, summary -------------------------------------------------------------------------
seq_no=0
SEQ=000
new_seq() { seq_no=$((seq_no + 1)); SEQ="$(printf '%03d' "$seq_no")"; }
remaining() { echo $((budget - (SECONDS - start))); }
step_timeout() {  # min(cap, what is left of the budget less the reserve)
  local left=$(($(remaining) - reserve))
  if [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi
}

# result <seq> <phase> <name> <status> <rc> <seconds> <note> [file of detail lines]
result() {
  local file="$logs/results/$1.txt"
  printf '%s\t%-30s %-9s rc=%-4s %4ss  %s\n' "$2" "$3" "$4" "$5" "$6" "$7" >"$file.tmp"
  if [ -n "${8:-}" ] && [ -s "$8" ]; then sed 's/^/      /' "$8" >>"$file.tmp"; fi
  mv "$file.tmp" "$file"
}

count_status() {  # how many step results have one of these statuses
  cat "$logs"/results/*.txt 2>/dev/null | grep -c -E "^[^[:space:]]+"$'\t'"[^ ]+ +($1) "
}

render() {
  local tmp="$summary.tmp" phase="" line file
  {
    echo "# detops GPU run: $device, $date_ (UTC), phases: ${phases[*]}$([ $dry = 1 ] && echo ' (DRY RUN)')"
    echo "revision: $revision"
    echo "python: $py; $torch_info; CUDA architectures $arch${gpu_line:+; nvidia-smi: $gpu_line}"
    echo "library: $lib; build dir: $build; expecttest: $expecttest"
    echo "compute-sanitizer: ${sanitizer:-not found}; pytest-timeout: $([ ${#pytest_timeout[@]} -gt 0 ] && echo "${pytest_timeout[*]}" || echo no)"
    echo "budget: ${budget}s, used $((SECONDS - start))s; logs: $(basename "$tarball")"
    for file in "$logs"/results/*.txt; do
      [ -e "$file" ] || continue
      line="$(head -1 "$file")"
      if [ "${line%%$'\t'*}" != "$phase" ]; then phase="${line%%$'\t'*}"; echo; echo "== $phase =="; fi
      echo "${line#*$'\t'}"
      tail -n +2 "$file"
    done
    local failed timed skipped
    failed="$(count_status 'FAIL|MISSING')"
    timed="$(count_status TIMEOUT)"
    skipped="$(count_status SKIPPED)"
    echo
    if [ "$failed" = 0 ] && [ "$timed" = 0 ]; then verdict=OK; else verdict=FAILED; fi
    echo "result: $verdict ($failed failed, $timed timed out, $skipped skipped)"
  } >"$tmp"
  mv "$tmp" "$summary"
}

pack() {
  render
  cp "$summary" "$logs/summary.txt" 2>/dev/null
  tar -czf "$tarball.tmp" -C "$logs" . 2>/dev/null && mv "$tarball.tmp" "$tarball"
}

status_of() {  # status_of <rc>
  case "$1" in
    0) echo ok ;;
    124|137) echo TIMEOUT ;;
    *) echo FAIL ;;
  esac
}

# ---- what each kind of log says ----------------------------------------------------------------------
details_pytest() {  # the counts line, each failing test id, and on a timeout the test that was running
  local log=$1 rc=$2 counts
  counts="$(grep -E '(passed|failed|error|skipped|deselected|no tests ran).* in [0-9.]+s' "$log" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')"
  [ -n "$counts" ] && echo "$counts"
  if grep -q 'short test summary info' "$log"; then
    grep -E '^(FAILED|ERROR) ' "$log" | sed 's/ - .*//' | head -200
  else  # stopped before pytest's own summary: the verdicts printed so far (-v; with -n: "[gwN] ... FAILED id")
    { grep -E '^tests/.*::.* (FAILED|ERROR)' "$log" | sed -E 's/^(\S+) +(FAILED|ERROR).*/\2 \1/'
      grep -E '^\[gw[0-9]+\].* (FAILED|ERROR) tests/' "$log" | sed -E 's/.* (FAILED|ERROR) (\S+).*/\1 \2/'; } | head -200
  fi
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "running when stopped: $(grep -E '^tests/.*::' "$log" | tail -1 | sed 's/ *\(PASSED\|FAILED\|SKIPPED\|ERROR\|XFAIL\|XPASS\).*//')"
  fi
}

details_gtest() {  # GoogleTest's own summary lines and each failing test
  grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|^\[==========\] [0-9]+ tests? from .* ran' "$1" | sort -u | head -40
}

details_ctest() {
  local log=$1
  grep -E 'tests passed|No tests were found|Total Tests:' "$log" | tail -1
  sed -n '/The following tests FAILED:/,/^Errors while running CTest/p' "$log" | grep -E '^\s+[0-9]+ - ' | sed 's/^\s*/FAILED /'
}

details_sanitizer() {
  local log=$1
  grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^sanitize_cases:' "$log" | sed 's/^=* *//' | tail -3
  grep -E '^(FAIL|MISMATCH) ' "$log" | head -50
  grep -E '^=+ +(Invalid|Uninitialized|Race|Barrier|Error|Program hit|Warning)' "$log" | sed 's/^=* *//' | sort | uniq -c | sort -rn | head -10
  grep -E '^=+ +at ' "$log" | sed -E 's/^=+ +at +//; s/\+0x[0-9a-f]+.*//' | sort | uniq -c | sort -rn | head -10 | sed 's/^/   at /'
}

details_tail() { tail -n +3 "$1" | grep -v '^\s*$' | tail -3; }
details_repro() { grep -E '^(weights sha256|repro:)' "$1" | tail -3; }
details_doctor() { sed -n '/^versions:/,$p' "$1" | head -20; }
details_bench() {  # how many measurements, the variants that raised, the targets
  local log=$1
  echo "$(grep -c ' us  (' "$log") measurements, $(grep -c ' error: ' "$log") variants raised (stock under the flag throws for some ops); $(grep -E '^bench_ops: wrote' "$log" || echo 'JSON: see the log')"
  grep -E ' error: ' "$log" | grep -v 'stock_deterministic' | head -10
  [ -f "$bench_table" ] && grep -E '^\| (geometric|>=|hot|wide)' "$bench_table"
  return 0
}

details_build() {
  local log=$1 rc=$2
  grep -E 'ninja: no work to do|Linking .*libdetops.so' "$log" | tail -1
  [ "$rc" = 0 ] || grep -E -m 8 'error|Error|FAILED:' "$log"
}

# run_step <phase> <name> <kind> <cap seconds> <command...>: runs under `timeout`, logs to <name>.log,
# records the result (uses $SEQ: call new_seq first, in the parent shell).
run_step() {
  local phase=$1 name=$2 kind=$3 cap=$4 seq=$SEQ; shift 4
  local log="$logs/$name.log" t t0 rc dt st
  t="$(step_timeout "$cap")"
  if [ "$t" -lt "$min_step" ]; then
    result "$seq" "$phase" "$name" SKIPPED - 0 "time budget spent ($(remaining)s left); run this phase again"
    return 0
  fi
  { printf '$'; printf ' %q' "$@"; printf '\n# timeout %ss, started %s UTC\n' "$t" "$(date -u +%H:%M:%S)"; } >"$log"
  t0=$SECONDS
  timeout -k 10 "$t" "$@" >>"$log" 2>&1
  rc=$?
  dt=$((SECONDS - t0))
  st="$(status_of "$rc")"
  [ "$kind" = pytest ] && [ "$rc" = 5 ] && st=ok  # pytest: no tests selected (a -m filter), not a failure
  "details_$kind" "$log" "$rc" >"$log.details" 2>/dev/null
  if [ "${info_only:-0}" = 1 ]; then
    result "$seq" "$phase" "$name" INFO "$rc" "$dt" "$name.log (informational: its exit status is not counted)" "$log.details"
    rc=0
  else
    result "$seq" "$phase" "$name" "$st" "$rc" "$dt" "$name.log" "$log.details"
  fi
  rm -f "$log.details"
  return "$rc"
}

# plan <phase> <name> <cap> <command...>: the dry run's record of a command it would run (checks that the
# program exists; compute-sanitizer only informs, this machine need not have it).
plan() {
  local phase=$1 name=$2 cap=$3 st=PLANNED note prog; shift 3
  note="would run (timeout ${cap}s):$(printf ' %q' "$@")"
  for prog in "$@"; do [ "$prog" = env ] || [[ "$prog" == *=* ]] || break; done
  if ! command -v "$prog" >/dev/null 2>&1 && [ ! -x "$prog" ]; then
    if [ "$(basename "$prog")" = compute-sanitizer ]; then note="$note  [not on this machine; the GPU machine has it]"
    else st=MISSING; note="$note  [$prog not found]"; fi
  fi
  new_seq
  result "$SEQ" "$phase" "$name" "$st" - 0 "$note"
}

# step / pstep <phase> <name> <kind> <cap> <command...>: run a step (pstep: in the parallel pool); in the dry
# run, plan it instead. The dry run's plan and the real run come from the same calls.
step() {
  if [ $dry = 1 ]; then plan "$1" "$2" "$4" "${@:5}"; return 0; fi
  new_seq
  run_step "$@"
}
pstep() {
  if [ $dry = 1 ]; then plan "$1" "$2" "$4" "${@:5}"; return 0; fi
  pool_add "$@"
}

# The parallel pool: pool_add runs a step in the background once fewer than jobs_max run.
pool_add() {
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; pack; done
  new_seq
  run_step "$@" &
}
pool_wait() { wait; pack; }

on_signal() {
  new_seq
  result "$SEQ" "${current_phase:-?}" interrupted FAIL - $((SECONDS - start)) "the runner was stopped by a signal"
  pack
  exit 1
}
trap on_signal TERM INT

have_library() { [ -f "$lib" ]; }

# ---- build -------------------------------------------------------------------------------------------
configured=0 built_all=0 built_lib=0 build_tried=0 bench_table=""
gtest_src=""
for d in "${DETOPS_GTEST_SOURCE_DIR:-}" "$root/third_party/googletest" /usr/src/googletest; do
  if [ -n "$d" ] && [ -f "$d/CMakeLists.txt" ]; then gtest_src="$d"; break; fi
done
# CMAKE_POLICY_VERSION_MINIMUM: lets CMake 4 configure GoogleTest 1.12's cmake_minimum_required(3.5).
cmake_args=(-S "$root" -B "$build" -G Ninja -DDETOPS_PYTHON="$py" -DDETOPS_CUDA_ARCHITECTURES="$arch"
            -DDETOPS_BUILD_TESTS=ON -DDETOPS_BUILD_BENCHMARKS=OFF -DDETOPS_BUILD_EXAMPLES=ON
            -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
[ -n "$gtest_src" ] && cmake_args+=(-DDETOPS_GTEST_SOURCE_DIR="$gtest_src")
read -r -a extra_cmake_args <<<"${DETOPS_GPU_CMAKE_ARGS:-}"
cmake_args+=("${extra_cmake_args[@]}")

configure() {  # tests ON; where GoogleTest can be neither found nor built, tests OFF (the library still builds)
  [ $configured = 1 ] && return 0
  if step "$1" configure tail 240 cmake "${cmake_args[@]}"; then configured=1; pack; return 0; fi
  if grep -q 'GoogleTest not found' "$logs/configure.log"; then
    step "$1" configure-without-tests tail 240 cmake "${cmake_args[@]}" -DDETOPS_BUILD_TESTS=OFF && configured=1
  fi
  pack
  [ $configured = 1 ]
}

unpack_prebuilt() {  # DETOPS_GPU_PREBUILT: the library and the C++ tests built elsewhere
  build_tried=1
  if step "$1" prebuilt tail 120 "$py" - "$prebuilt" "$build" <<'PY'
import pathlib, shutil, subprocess, sys, tarfile
src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
if src.is_dir():
    for name in ("libdetops.so", "tests/test_gpu", "prebuilt.txt"):
        if (src / name).exists():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / name, dst / name)
else:
    with tarfile.open(src) as tar:
        tar.extractall(dst, filter="data")
if (dst / "prebuilt.txt").exists():
    print((dst / "prebuilt.txt").read_text().strip())
missing = [n for n in ("libdetops.so", "tests/test_gpu") if not (dst / n).is_file()]
if missing:
    sys.exit(f"prebuilt: {src} lacks {', '.join(missing)}")
cuobjdump = shutil.which("cuobjdump") or shutil.which("/usr/local/cuda/bin/cuobjdump")
elves = cuobjdump and subprocess.run([cuobjdump, "--list-elf", str(dst / "libdetops.so")], capture_output=True, text=True)
if elves and elves.returncode == 0:
    arches = sorted({part for line in elves.stdout.split() for part in line.split(".") if part.startswith("sm_")})
    print(f"prebuilt: libdetops.so carries {', '.join(arches) or 'no'} machine code")
print(f"prebuilt: {dst}/libdetops.so, {dst}/tests/test_gpu")
PY
  then built_all=1 built_lib=1; fi
  pack
  [ $built_lib = 1 ]
}

build_all() {  # everything that builds (ninja -k 0), else the library alone
  [ -n "$prebuilt" ] && { unpack_prebuilt "$1"; return; }
  build_tried=1
  configure "$1" || return 1
  if step "$1" build build 480 cmake --build "$build" -- -k 0; then built_all=1 built_lib=1; pack; return 0; fi
  pack
  build_lib "$1"
}

build_lib() {
  [ $built_lib = 1 ] && return 0
  [ -n "$prebuilt" ] && { unpack_prebuilt "$1"; return; }
  configure "$1" || return 1
  step "$1" build-library build 420 cmake --build "$build" --target detops && built_lib=1
  pack
  [ $built_lib = 1 ]
}

dry_build_checks() {  # configure with GoogleTest forced from source, and the build plan (ninja -n)
  new_seq
  if [ -z "$gtest_src" ]; then
    result "$SEQ" build configure-gtest-from-source FAIL - 0 "no GoogleTest sources (DETOPS_GTEST_SOURCE_DIR, third_party/googletest, /usr/src/googletest)"
    return
  fi
  run_step build configure-gtest-from-source tail 240 cmake "${cmake_args[@]}" -DDETOPS_GTEST_FROM_SOURCE=ON
  new_seq
  if ! grep -q 'building GoogleTest from' "$logs/configure-gtest-from-source.log"; then
    result "$SEQ" build build-plan FAIL - 0 "configure did not take the GoogleTest-from-source path"
    return
  fi
  run_step build build-plan tail 120 bash -c 'set -o pipefail; cmake --build "$1" -- -n | tee "$2" | tail -3
    for t in gtest-all.cc gtest_main.cc libdetops.so tests/test_gpu examples/index_add_example; do
      grep -q "$t" "$2" || { echo "build plan lacks $t"; exit 1; }; done; echo "build plan: $(grep -c "^\[" "$2") commands"' \
    _ "$build" "$logs/build-plan.txt"
  new_seq
  run_step build ctest-list tail 60 "$py" - "$build" <<'PY'
import json, subprocess, sys
def names(*label):
    out = subprocess.run(["ctest", "--test-dir", sys.argv[1], "--show-only=json-v1", *label],
                         capture_output=True, text=True, check=True).stdout
    return [t["name"] for t in json.loads(out)["tests"]]
gpu, rest = names("-L", "gpu"), names("-LE", "gpu")
print("ctest -L gpu:", " ".join(gpu))
print("ctest -LE gpu:", " ".join(rest))
sys.exit(0 if "test_gpu" in gpu and rest else 1)
PY
}

phase_build() {
  current_phase=build
  [ $dry = 1 ] && dry_build_checks
  build_all build
  pack
}

# ---- test --------------------------------------------------------------------------------------------
pytest_files() {  # files of gpu tests first, most marks first (the longest chunks start first)
  local f n
  for f in ${DETOPS_GPU_PYTEST_FILES:-tests/python/test_*.py}; do
    n="$(grep -c 'mark\.gpu' "$f")"
    grep -q '^pytestmark = pytest\.mark\.gpu' "$f" && n=1000
    printf '%s %s\n' "$n" "$f"
  done | sort -k1,1nr -k2,2 | cut -d' ' -f2
}
pytest_opts=(-v -rfE "${pytest_timeout[@]}")
[ -n "${DETOPS_GPU_PYTEST_MARK:-}" ] && pytest_opts+=(-m "$DETOPS_GPU_PYTEST_MARK")

phase_test() {
  current_phase=test
  local files f
  mapfile -t files < <(pytest_files)
  if [ $dry = 1 ]; then
    new_seq
    if have_library; then
      run_step test pytest-collect-gpu pytest 120 "$py" -m pytest --collect-only -q -m gpu "${pytest_opts[@]}" "${files[@]}"
    else
      result "$SEQ" test pytest-collect-gpu FAIL - 0 "no libdetops.so at $lib (set DETOPS_LIBRARY)"
    fi
  elif [ $built_all = 0 ] && [ $build_tried = 0 ]; then
    build_all test
  fi
  if [ $dry = 1 ] || have_library; then
    info_only=1 step test doctor doctor 60 "$py" -m detops doctor
  fi
  if [ $dry = 0 ] && [ -n "$prebuilt" ]; then
    if [ -x "$build/tests/test_gpu" ]; then
      pstep test test_gpu gtest 300 env LD_LIBRARY_PATH="$build:$torch_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$build/tests/test_gpu"
    else
      new_seq; result "$SEQ" test test_gpu MISSING - 0 "no tests/test_gpu in the prebuilt $prebuilt"
    fi
  elif [ $dry = 1 ] || { [ $configured = 1 ] && [ -f "$build/tests/CTestTestfile.cmake" ]; }; then
    pstep test ctest-gpu ctest 300 ctest --test-dir "$build" -L gpu --output-on-failure --timeout 280 -j 2
    pstep test ctest-rest ctest 300 ctest --test-dir "$build" -LE gpu --output-on-failure --timeout 280 -j 8
  else
    new_seq; result "$SEQ" test ctest SKIPPED - 0 "the C++ tests were not configured (see the build steps)"
  fi
  if { [ $dry = 1 ] || have_library; } && [ "$xdist" != 0 ]; then
    pstep test pytest-xdist pytest 300 "$py" -m pytest "${pytest_opts[@]}" -n "$xdist" "${files[@]}"
  elif [ $dry = 1 ] || have_library; then
    for f in "${files[@]}"; do
      pstep test "pytest-$(basename "$f" .py)" pytest 300 "$py" -m pytest "${pytest_opts[@]}" "$f"
    done
  else
    new_seq; result "$SEQ" test pytest SKIPPED - 0 "no libdetops.so at $lib"
  fi
  # DETOPS_GPU_OVERLAP=1: the sanitize phase adds its steps to this pool and waits for both.
  [ "$overlap" = 1 ] && [ $want_sanitize = 1 ] || pool_wait
}

# ---- sanitize ----------------------------------------------------------------------------------------
read -r -a sanitize_dtypes <<<"${DETOPS_SANITIZE_DTYPES:-float32 float64 float16 bfloat16}"
read -r -a sanitize_light_dtypes <<<"${DETOPS_SANITIZE_LIGHT_DTYPES:-${sanitize_dtypes[*]}}"
read -r -a sanitize_args <<<"${DETOPS_SANITIZE_ARGS:-}"

phase_sanitize() {
  current_phase=sanitize
  local tool extra
  if [ $dry = 1 ]; then
    new_seq
    if have_library; then
      run_step sanitize cases-on-cpu sanitizer 120 "$py" scripts/sanitize_cases.py --device cpu --dtypes float32
    else
      result "$SEQ" sanitize cases-on-cpu FAIL - 0 "no libdetops.so at $lib (set DETOPS_LIBRARY)"
    fi
  else
    build_lib sanitize
    if ! have_library; then new_seq; result "$SEQ" sanitize sanitizers SKIPPED - 0 "no libdetops.so"; pack; return; fi
    if [ -z "$sanitizer" ]; then new_seq; result "$SEQ" sanitize sanitizers FAIL - 0 "compute-sanitizer not found"; pack; return; fi
  fi
  # The four tools at once (separate processes, small inputs), with the caching allocator off so that
  # every tensor is its own allocation; memcheck also compares CUDA with the CPU twin bit for bit.
  for tool in memcheck racecheck initcheck synccheck; do
    extra=(--no-compare --dtypes "${sanitize_light_dtypes[@]}")
    [ $tool = memcheck ] && extra=(--dtypes "${sanitize_dtypes[@]}")
    pstep sanitize "$tool" sanitizer 300 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${sanitizer:-compute-sanitizer}" \
      --tool "$tool" --error-exitcode 99 "${sanitize_args[@]}" "$py" scripts/sanitize_cases.py --device cuda \
      "${extra[@]}"
  done
  pool_wait
}

# ---- bench -------------------------------------------------------------------------------------------
phase_bench() {
  current_phase=bench
  local json="$OUT/$device-$date_.json" table="$OUT/$device-$date_-table.md"
  local hashes="$OUT/$device-$date_-hashes.json" report="$OUT/$device-$date_-report.txt"
  if [ $dry = 1 ]; then
    if have_library; then
      new_seq; run_step bench hashes-cpu tail 120 "$py" scripts/output_hashes.py --devices cpu \
        --ops index_add_ bincount --out "$logs/hashes-dry.json"
      new_seq; run_step bench bench-list tail 60 "$py" bench/bench_ops.py --list
      new_seq; run_step bench bench-cpu-tiny tail 120 "$py" bench/bench_ops.py --device cpu --ops index_add_ \
        --shapes hot_destination --reps 3 --warmup 1 --out "$logs/bench-dry.json" \
        --first-file bench/measure_first.txt
      new_seq; run_step bench report-help tail 60 "$py" -m detops report --help
    else
      new_seq; result "$SEQ" bench python-checks FAIL - 0 "no libdetops.so at $lib (set DETOPS_LIBRARY)"
    fi
  else
    build_lib bench
    if ! have_library; then new_seq; result "$SEQ" bench bench SKIPPED - 0 "no libdetops.so"; pack; return; fi
  fi
  step bench hashes tail 180 "$py" scripts/output_hashes.py --devices cpu cuda --out "$hashes"
  pack
  # The reproducible-training example twice, in two processes: the same weights, bit for bit.
  step bench repro repro 120 bash -c 'for i in 1 2; do echo "repro: run $i"; "$1" examples/reproducible_training.py || exit 1
    done >"$2" 2>&1; cat "$2"; n="$(grep "^weights sha256" "$2" | sort -u | wc -l)"
    [ "$(grep -c "^weights sha256" "$2")" = 2 ] && [ "$n" = 1 ] && echo "repro: identical across two processes" && exit 0
    echo "repro: the two runs differ"; exit 1' _ "$py" "$logs/repro-runs.txt"
  pack
  # One call of more than 2^31 contributions through the key chunks (it skips itself without the memory).
  step bench large-call tail 120 "$py" scripts/large_call.py
  pack
  bench_table="$table"
  read -r -a bench_args <<<"${DETOPS_BENCH_ARGS:-}"
  # The cases of changes predicted and not yet measured first: a bench step cut short by the budget keeps them.
  local first_file="${DETOPS_BENCH_FIRST_FILE-bench/measure_first.txt}"
  [ -n "$first_file" ] && [ -f "$first_file" ] && bench_args=(--first-file "$first_file" "${bench_args[@]}")
  step bench bench bench 330 "$py" bench/bench_ops.py --out "$json" --markdown "$table" "${bench_args[@]}"
  pack
  if [ -f "$json" ] && [ ! -f "$table" ]; then  # cut short: the table of what was measured
    "$py" -c 'import json, sys; from detops.report import format_markdown
open(sys.argv[2], "w").write(format_markdown(json.load(open(sys.argv[1]))))' "$json" "$table" 2>>"$logs/bench.log"
  fi
  rm -f "$json.tmp"
  if { [ -f "$json" ] || [ $dry = 1 ]; } && [ "${DETOPS_GPU_REPORT:-1}" != 0 ]; then
    step bench report tail 150 "$py" -m detops report --results "$json" --out-dir "$OUT"
    [ $dry = 1 ] || cp "$logs/report.log" "$report" 2>/dev/null
  fi
  pack
}

# ---- run ---------------------------------------------------------------------------------------------
echo "gpu_run: $device, phases ${phases[*]}$([ $dry = 1 ] && echo ' (dry run)'), budget ${budget}s; summary: $summary"
pack
[ $want_build = 1 ] && phase_build
[ $want_test = 1 ] && phase_test
[ $want_sanitize = 1 ] && phase_sanitize
[ $want_bench = 1 ] && phase_bench
current_phase=end
pack
cat "$summary"
grep -q '^result: OK' "$summary"
