"""scripts/profile_cases.py without a GPU: its ncu table reader on ncu's text layout, and its torch.profiler
mode on the CPU twin."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

import detops

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "profile_cases.py"

_spec = importlib.util.spec_from_file_location("profile_cases", SCRIPT)
profile_cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(profile_cases)


def _kernel(name: str, grid: str, block: str, duration: str, unit: str = "us", dram: str = "10.50") -> str:
    return f"""  void {name}(T1, long) ({grid})x({block}), Context 1, Stream 7, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    DRAM Throughput                   %        {dram}
    Duration                       {unit:>4}       {duration}
    Compute (SM) Throughput           %        48.12
    Section: Launch Statistics
    Registers Per Thread             register/thread              40
    Section: Occupancy
    Achieved Occupancy                        %        49.30
"""


NCU_TEXT = "==PROF== Connected to process 1\n" + "".join([
    _kernel("at::vectorized_elementwise_kernel<2, at::FillFunctor<long>, std::array<char *, 1>>", "1, 1, 1",
            "128, 1, 1", "2.14"),
    _kernel("cuda::count_kernel<true, long>", "528, 1, 1", "256, 1, 1", "105.38"),
    _kernel("cuda::make_keys_kernel<unsigned int, Op>", "16384, 1, 1", "256, 1, 1", "1,029.18"),
    _kernel("cuda::level0_rows_kernel<float, unsigned int, Op>", "4096, 1, 1", "256, 1, 1", "1.5", unit="ms"),
    _kernel("cuda::level_kernel<float, unsigned int, Op>", "16385, 1, 1", "64, 4, 1", "22.05"),
    _kernel("cuda::level_kernel<float, unsigned int, Op>", "16385, 1, 1", "64, 4, 1", "22.14"),
    _kernel("cuda::make_keys_kernel<unsigned int, Op>", "4096, 1, 1", "256, 1, 1", "10.0"),
    _kernel("cuda::level0_rows_kernel<float, unsigned int, Op>", "4096, 1, 1", "256, 1, 1", "20.0"),
    _kernel("cuda::level_rows_kernel<float, unsigned int, Op>", "65, 1, 1", "256, 1, 1", "3.0"),
    _kernel("cuda::level_rows_kernel<float, unsigned int, Op>", "65, 1, 1", "256, 1, 1", "2.0"),
    _kernel("cuda::count_kernel<true, long>", "528, 1, 1", "256, 1, 1", "7.0"),
])


def test_ncu_kernels_reads_names_launch_shapes_and_metrics():
    ks = list(profile_cases.ncu_kernels(NCU_TEXT))
    assert [k["name"] for k in ks] == ["at::vectorized_elementwise_kernel (fill long)", "cuda::count_kernel",
                                       "cuda::make_keys_kernel", "cuda::level0_rows_kernel", "cuda::level_kernel",
                                       "cuda::level_kernel", "cuda::make_keys_kernel", "cuda::level0_rows_kernel",
                                       "cuda::level_rows_kernel", "cuda::level_rows_kernel", "cuda::count_kernel"]
    assert ks[1] == {"name": "cuda::count_kernel", "grid": 528, "block": 256, "us": 105.38, "dram": 10.5,
                     "sm": 48.12, "regs": 40.0, "occ": 49.3}
    assert ks[2]["us"] == 1029.18  # thousands separators
    assert ks[3]["us"] == 1500.0  # ncu switches units for long kernels
    assert ks[4]["block"] == 256  # 64 x 4


def test_ncu_table_splits_cases_after_the_last_level_or_count_kernel():
    table = profile_cases.ncu_table(NCU_TEXT, ["histc", "scatter_add", "index_add", "bincount"])
    assert "## histc: 2 kernels, 108 us" in table
    assert "## scatter_add: 4 kernels, 2573 us" in table
    assert "## index_add: 4 kernels, 35 us" in table  # ends after its level_rows_kernel launches
    assert "## bincount: 1 kernels, 7 us" in table
    assert "   105.38   10.5   48.1    40   49.3  cuda::count_kernel (528 x 256)" in table


def test_ncu_table_splits_cases_at_the_marker_kernels():
    # Without levels, with the counting sort's count kernel, and mean's count before its sort: the markers split.
    text = "".join([
        _kernel("at::cuda::<unnamed>::spin_kernel", "1, 1, 1", "1, 1, 1", "1.0"),
        _kernel("detops::make_keys_kernel<float, unsigned int, Op>", "4096, 1, 1", "256, 1, 1", "10.0"),
        _kernel("detops::<unnamed>::counting_count_kernel<unsigned int>", "256, 1, 1", "256, 1, 1", "4.0"),
        _kernel("detops::<unnamed>::counting_scatter_kernel<float>", "256, 1, 1", "256, 1, 1", "6.0"),
        _kernel("detops::level0_window_kernel<float, unsigned int, Op>", "4096, 1, 1", "256, 1, 1", "20.0"),
        _kernel("at::cuda::(anonymous namespace)::spin_kernel", "1, 1, 1", "1, 1, 1", "1.0"),
        _kernel("detops::cuda::count_kernel<true, KeyValues<Layout>>", "528, 1, 1", "256, 1, 1", "7.0"),
        _kernel("detops::make_keys_kernel<float, unsigned int, Op>", "4096, 1, 1", "256, 1, 1", "10.0"),
        _kernel("detops::level_kernel<float, unsigned int, Op>", "65, 1, 1", "256, 1, 1", "3.0"),
    ])
    assert [len(g) for g in profile_cases.group_cases(list(profile_cases.ncu_kernels(text)))] == [4, 3]
    table = profile_cases.ncu_table(text, ["scatter_add high_contention", "scatter_reduce mean"])
    assert "## scatter_add high_contention: 4 kernels, 40 us" in table
    assert "## scatter_reduce mean: 3 kernels, 20 us" in table
    assert "spin_kernel" not in table


def test_short_names_keep_kernels_in_anonymous_namespaces():
    head = "void detops::<unnamed>::long_segments_kernel<unsigned int>(const T1 *, int, long, int *)"
    assert profile_cases._short_name(head) == "detops::long_segments_kernel"
    assert profile_cases._short_name("void detops::level0_kernel<float, 256>(T1, long)") == "detops::level0_kernel"


def test_table_mode_runs_the_twin_and_stock_on_the_cpu():
    env = dict(os.environ, DETOPS_LIBRARY=detops.load_library(), PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, str(SCRIPT), "table", "--device", "cpu", "aten::histc@high_contention"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    heads = [line for line in proc.stdout.splitlines() if line.startswith("=====")]
    assert heads == ["===== aten::histc high_contention detops (cpu, 5 calls)",
                     "===== aten::histc high_contention stock_atomic (cpu, 5 calls)"]
    assert "detops::histc" in proc.stdout  # the twin, not the stock CPU kernel


def test_a_case_must_name_a_covered_op_and_shape():
    with pytest.raises(SystemExit, match="no covered case aten::histc@nope"):
        profile_cases.run("table", ["aten::histc@nope"], "cpu")
    with pytest.raises(SystemExit, match="is not <aten op>@<shape>"):
        profile_cases.run("table", ["histc"], "cpu")
