"""The GPU runner (scripts/gpu_run.sh) and its workloads, checked without a GPU: the dry run configures
with GoogleTest built from source, lists the build plan and the CTest tests, collects the pytest chunks,
runs the sanitizer workload and the hashes on the CPU, and plans every command of a real run."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile

import pytest

import detops

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNNER = ROOT / "scripts" / "gpu_run.sh"
GTEST_SOURCES = [p for p in (os.environ.get("DETOPS_GTEST_SOURCE_DIR"), ROOT / "third_party" / "googletest",
                             "/usr/src/googletest") if p and (pathlib.Path(p) / "CMakeLists.txt").is_file()]


def _env(**extra) -> dict:
    env = dict(os.environ)
    env.update(DETOPS_LIBRARY=detops.load_library(), PYTHON=sys.executable, PYTHONUNBUFFERED="1")
    env.pop("DETOPS_GPU_BUILD_DIR", None)
    env.update(extra)
    return env


def _run(args, timeout, **extra) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, env=_env(**extra), capture_output=True, text=True, timeout=timeout)


def _dry(tmp_path, *phases, timeout=170, **extra):
    out = tmp_path / "out"
    proc = _run(["bash", str(RUNNER), *phases], timeout, DETOPS_GPU_RUN_DRY="1", OUT=str(out), **extra)
    summaries = sorted(out.glob("*-tests.txt"))
    assert len(summaries) == 1, (proc.stdout[-3000:], proc.stderr[-3000:])
    return proc, out, summaries[0].read_text()


def _steps(summary: str) -> dict:
    """step name -> status, from the summary's step lines."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^(\S+)\s+(ok|FAIL|TIMEOUT|SKIPPED|PLANNED|MISSING|INFO)\s+rc=",
                                                         summary, re.M)}


def test_scripts_parse():
    for script in sorted((ROOT / "scripts").glob("*.sh")):
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{script.name}: {proc.stderr}"


def test_unknown_phase_is_refused(tmp_path):
    proc = _run(["bash", str(RUNNER), "benchmark"], 30, DETOPS_GPU_RUN_DRY="1", OUT=str(tmp_path))
    assert proc.returncode == 2 and "unknown phase" in proc.stderr


@pytest.mark.skipif(not GTEST_SOURCES, reason="no GoogleTest sources to build from (package googletest)")
@pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("ninja") and shutil.which("nvcc")),
                    reason="cmake, ninja and nvcc are needed to configure")
def test_dry_run_checks_and_plans_every_phase(tmp_path):
    proc, out, summary = _dry(tmp_path, "all")
    assert proc.returncode == 0, summary
    assert summary.rstrip().endswith("result: OK (0 failed, 0 timed out, 0 skipped)"), summary
    assert "(DRY RUN)" in summary.splitlines()[0]
    for phase in ("build", "test", "sanitize", "bench"):
        assert f"\n== {phase} ==\n" in summary
    steps = _steps(summary)

    # build: GoogleTest from source, the plan builds it and the suite, CTest sees the gpu label
    assert steps["configure-gtest-from-source"] == "ok" and steps["build-plan"] == "ok", summary
    assert steps["build"] == "PLANNED" and "-DDETOPS_BUILD_TESTS=ON" in summary
    assert "-DDETOPS_BUILD_BENCHMARKS=OFF" in summary
    assert steps["ctest-list"] == "ok" and re.search(r"ctest -L gpu: .*\btest_gpu\b", summary)

    # test: every test file is one chunk; both CTest halves; the gpu marker collects
    assert steps["pytest-collect-gpu"] == "ok" and re.search(r"\d+/\d+ tests collected", summary)
    for path in sorted((ROOT / "tests" / "python").glob("test_*.py")):
        assert steps.get(f"pytest-{path.stem}") == "PLANNED", path.name
    assert steps["ctest-gpu"] == "PLANNED" and steps["ctest-rest"] == "PLANNED"
    assert re.search(r"would run \(timeout \d+s\): ctest .* -L gpu --output-on-failure", summary)

    # sanitize: the workload runs on the CPU; four tools planned over it
    assert steps["cases-on-cpu"] == "ok"
    assert re.search(r"sanitize_cases: (\d+) runs on cpu: \1 ok, 0 failed", summary), summary
    for tool in ("memcheck", "racecheck", "initcheck", "synccheck"):
        assert steps[tool] == "PLANNED"
        assert re.search(rf"compute-sanitizer --tool {tool} --error-exitcode 99 \S+ scripts/sanitize_cases.py "
                         r"--device cuda", summary), tool

    # bench: hashes and a tiny benchmark run on the CPU; the real ones are planned into $OUT
    for name in ("hashes-cpu", "bench-list", "bench-cpu-tiny", "report-help"):
        assert steps[name] == "ok", name
    assert steps["hashes"] == steps["bench"] == steps["report"] == steps["large-call"] == "PLANNED"
    assert re.search(r"would run \(timeout \d+s\): \S+ scripts/large_call.py", summary)
    assert re.search(r"output_hashes.py --devices cpu cuda --out \S+/dry-run-\d{4}-\d\d-\d\d-hashes.json", summary)
    assert re.search(r"bench/bench_ops.py --out \S+/dry-run-\d{4}-\d\d-\d\d.json --markdown \S+ --first-file "
                     r"bench/measure_first.txt", summary)

    # $OUT: the summary and one tarball of logs, nothing else (a remote run returns at most 8 files)
    files = sorted(p.name for p in out.iterdir())
    assert len(files) == 2 and files[0].endswith("-build_test_sanitize_bench-logs.tar.gz"), files
    with tarfile.open(out / files[0]) as tar:
        names = set(tar.getnames())
    for log in ("./configure-gtest-from-source.log", "./pytest-collect-gpu.log", "./cases-on-cpu.log",
                "./summary.txt"):
        assert log in names, sorted(names)


def test_dry_run_fails_visibly_and_goes_on(tmp_path):
    # No library: the Python checks fail, every later step is still recorded, the exit status says so.
    proc, out, summary = _dry(tmp_path, "sanitize", "bench", timeout=90, DETOPS_LIBRARY=str(tmp_path / "missing.so"))
    assert proc.returncode == 1
    assert "result: FAILED (2 failed" in summary, summary
    steps = _steps(summary)
    assert steps["cases-on-cpu"] == "FAIL" and steps["python-checks"] == "FAIL"
    assert steps["memcheck"] == "PLANNED" and steps["bench"] == "PLANNED"
    assert "== build ==" not in summary and "== test ==" not in summary


def test_sanitize_cases_runs_every_covered_op_on_cpu():
    proc = _run([sys.executable, "scripts/sanitize_cases.py", "--device", "cpu", "--dtypes", "float32", "float16",
                 "--ops", "index_add_", "_ctc_loss_backward"], 120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(re.match(r"ok   aten::index_add_ \[hot_destination\] float16$", l) for l in lines), lines
    # CTC has no half kernels, as stock: reported as skipped, not failed
    assert any(l.startswith("skip aten::_ctc_loss_backward [speech] float16: unsupported dtype") for l in lines)
    assert re.match(r"sanitize_cases: \d+ runs on cpu: \d+ ok, 0 failed, 0 mismatched, 1 skipped$", lines[-1]), lines[-1]
    listed = _run([sys.executable, "scripts/sanitize_cases.py", "--list"], 60)
    ops = {line.split()[0] for line in listed.stdout.splitlines()}
    assert ops == set(detops.covered_ops())


def test_sanitize_cases_extra_calls_take_the_max_pools_gather_the_average_pools_two_steps_and_the_buckets():
    """The calls sanitize_cases.py adds past the small shapes reach the max pools' gather on CUDA (their twins record
    the CUDA path's calls, the tables' copy and the gather, then the gated engine), the average pools' two
    steps (the scale step, then the gather) and the engine's buckets (one call each)."""
    import importlib.util

    import torch
    from detops import cases as C
    from detops import plan as P

    spec = importlib.util.spec_from_file_location("sanitize_cases", ROOT / "scripts" / "sanitize_cases.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert len(module.EXTRA_CASES) == 14
    for case in module.EXTRA_CASES:
        call = case.build(torch.device("cpu"), torch.Generator().manual_seed(0), False)
        plan = P.plan_summary(C.twin_op(case.op), *call.args, plan_only=True, **call.kwargs)
        if case.shape.startswith("buckets"):
            assert [c.summary["path"] for c in plan.calls] == ["buckets"], (case.op, case.shape)
            continue
        second = "for_each" if "avg" in case.op else "sort_reduce"
        assert [c.call["kind"] for c in plan.calls] == ["kernel", second], (case.op, case.shape)


def test_prebuilt_runs_the_carried_cpp_suite_and_selected_files(tmp_path):
    # A short lease: the library and tests/test_gpu built elsewhere (DETOPS_GPU_PREBUILT, here a directory),
    # the C++ suite run directly, the pytest steps restricted to some files. Without a GPU (NO_GPU_OK) the
    # gpu tests skip, so this checks the paths and the summary, not the kernels.
    lib = pathlib.Path(detops.load_library())
    test_gpu = lib.parent / "tests" / "test_gpu"
    if not test_gpu.is_file():
        pytest.skip(f"no tests/test_gpu beside {lib} (a build with DETOPS_BUILD_TESTS=ON)")
    prebuilt = tmp_path / "prebuilt"
    (prebuilt / "tests").mkdir(parents=True)
    shutil.copy2(lib, prebuilt / "libdetops.so")
    shutil.copy2(test_gpu, prebuilt / "tests" / "test_gpu")
    out = tmp_path / "out"
    proc = _run(["bash", str(RUNNER), "build", "test"], 240, DETOPS_GPU_RUN_NO_GPU_OK="1", OUT=str(out),
                DETOPS_GPU_PREBUILT=str(prebuilt), DETOPS_GPU_BUILD_DIR=str(tmp_path / "build"),
                DETOPS_GPU_PYTEST_MARK="gpu", DETOPS_GPU_PYTEST_FILES="tests/python/test_histc.py")
    summaries = sorted(out.glob("*-tests.txt"))
    assert len(summaries) == 1, (proc.stdout[-3000:], proc.stderr[-3000:])
    summary = summaries[0].read_text()
    assert proc.returncode == 0, summary
    steps = _steps(summary)
    assert steps["prebuilt"] == "ok" and steps["test_gpu"] == "ok" and steps["pytest-test_histc"] == "ok", summary
    assert "configure" not in steps and "ctest-gpu" not in steps, summary
    assert [name for name in steps if name.startswith("pytest-")] == ["pytest-test_histc"], summary
    assert re.search(r"\d+ skipped", summary), summary
