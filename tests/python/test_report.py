"""The report (python -m detops report), the benchmark cases and the benchmark JSON they share."""

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import detops
from detops import cases as C
from detops import report as R
from detops.__main__ import main

from conftest import HAS_CUDA

REPO = pathlib.Path(__file__).resolve().parent.parent.parent


@pytest.mark.parametrize("case", C.all_cases(), ids=lambda c: f"{c.op}/{c.shape}")
def test_every_case_builder_runs_the_stock_cpu_op(case):
    """Each case's small shape is valid input for the stock CPU op, covered or not yet."""
    call = case.build(torch.device("cpu"), torch.Generator().manual_seed(0), False)
    out = C.output_tensors(C.stock_cpu_op(case)(*call.args, **call.kwargs))  # a tensor or a tuple of them
    assert out and all(t.numel() > 0 for t in out)
    assert call.min_bytes > 0 and call.nbytes() > 0
    out_names = ("out", "grad_input", "output", "total_weight", "values", "indices")
    float_inputs = [a for a in list(call.args) + [v for k, v in call.kwargs.items() if k not in out_names]
                    if isinstance(a, torch.Tensor) and a.is_floating_point()]
    assert float_inputs and all(bool((a != 0).any()) for a in float_inputs), "random data, never zeros"


def test_cases_keep_only_covered_ops():
    covered = detops.covered_ops()
    kept = C.cases(covered)
    assert kept and {c.op for c in kept} == set(covered), "every covered op has cases"
    assert C.cases(["aten::_ctc_loss_backward"]) and not C.cases([])
    assert all(c.shape == "hot_destination" for c in C.cases(covered, shapes=["hot_destination"]))
    assert {c.op for c in C.cases(covered, ops=["index_add_"])} == {"aten::index_add_"}
    # Every covered op throws or crawls in stock, but reflection_pad2d_backward: stock 2.11 runs a deterministic
    # gather kernel for it (detops covers it for CPU == CUDA bits and all six padding backwards alike); and
    # scatter with a scalar value, where every write or combine is of one value (covered with the scatter family).
    deterministic_in_stock = {"aten::reflection_pad2d_backward", "aten::reflection_pad2d_backward.grad_input"} | {
        f"aten::{name}.{overload}" for name, overload in [
            ("scatter", "value"), ("scatter_", "value"), ("scatter", "value_out"), ("scatter", "value_reduce"),
            ("scatter_", "value_reduce"), ("scatter", "value_reduce_out")]}
    for op in covered:
        assert C.twin_op(op) is not None, op
        assert (C.stock_under_flag(op) == "deterministic") == (op in deterministic_in_stock), op


def _fake_results(date="2026-01-02T03:04:05Z"):
    """Synthetic benchmark JSON (test data only), in Google Benchmark's naming with its suffixes."""
    def entry(op, shape, variant, us, bytes_min=8e6):
        run = f"cuda/{op}/{shape}/{variant}/min_time:0.050/repeats:10/manual_time"
        return {"name": run + "_median", "run_name": run, "run_type": "aggregate", "aggregate_name": "median",
                "real_time": us * 1e3, "time_unit": "ns", "bytes_min": bytes_min}

    benchmarks = []
    for op in ("aten::index_add_", "aten::scatter_add"):
        for shape, (atomic, det, ours) in {"hot_destination": (100.0, 1000.0, 50.0),
                                          "wide_rows": (10.0, 200.0, 25.0)}.items():
            benchmarks += [entry(op, shape, "stock_atomic", atomic), entry(op, shape, "stock_deterministic", det),
                           entry(op, shape, "detops", ours)]
            mean = dict(entry(op, shape, "detops", 1e9), aggregate_name="mean")
            benchmarks.append(mean)
    benchmarks.append({"name": "cuda/aten::bincount/hot_destination/stock_deterministic",
                       "run_name": "cuda/aten::bincount/hot_destination/stock_deterministic",
                       "run_type": "iteration", "error_occurred": True, "error_message": "throws"})
    return {"context": {"date": date, "detops_device": "Test GPU", "detops_copy_bandwidth_GBps": "1000"},
            "benchmarks": benchmarks}


def test_summarize_ratios_bandwidth_and_targets():
    rows = R.summarize(_fake_results())
    by = {(r["op"], r["shape"]): r for r in rows}
    hot = by[("aten::index_add_", "hot_destination")]
    assert hot["times_us"] == {"stock_atomic": 100.0, "stock_deterministic": 1000.0, "detops": 50.0}
    assert hot["ours_vs_atomic"] == pytest.approx(0.5) and hot["ours_vs_deterministic"] == pytest.approx(0.05)
    assert hot["bandwidth_GBps"] == pytest.approx(8e6 / 50e-6 / 1e9)
    assert hot["copy_fraction"] == pytest.approx(hot["bandwidth_GBps"] / 1000)
    assert by[("aten::bincount", "hot_destination")]["errors"] == {"stock_deterministic": "throws"}
    targets = {t: (met, figures) for t, met, figures in R.check_targets(rows)}
    assert targets[R.TARGETS[0]][0] is False  # wide rows at 2.5x stock atomics
    assert targets[R.TARGETS[1]][0] is True  # worst ours/deterministic 0.1
    assert targets[R.TARGETS[2]][0] is True  # hot destination at 0.5
    assert targets[R.TARGETS[3]][0] is False  # 8e6 B / 25 µs = 320 GB/s of 1000
    table = R.format_markdown(_fake_results())
    assert "Test GPU" in table and "| `aten::index_add_` | hot_destination |" in table and "throws" in table


def test_latest_results_picks_the_newest_gpu_file(tmp_path):
    assert R.latest_results(tmp_path) is None
    (tmp_path / "a.json").write_text(json.dumps(_fake_results("2026-01-01T00:00:00Z")))
    (tmp_path / "b.json").write_text(json.dumps(_fake_results("2026-03-01T00:00:00Z")))
    (tmp_path / "cpu.json").write_text(json.dumps({"context": {"date": "2027-01-01"}, "benchmarks": []}))
    (tmp_path / "broken.json").write_text("{")
    path, doc = R.latest_results(tmp_path)
    assert path.endswith("b.json") and doc["context"]["date"].startswith("2026-03")


def test_report_without_committed_results(tmp_path, capsys):
    empty = tmp_path / "results"
    empty.mkdir()
    rc = main(["report", "--reruns", "2", "--reps", "1", "--shapes", "hot_destination", "--out-dir",
               str(tmp_path / "out"), "--results-dir", str(empty)])
    assert rc == 0
    text = capsys.readouterr().out
    for op in detops.covered_ops():
        assert op in text
    assert "none measured yet" in text
    if not HAS_CUDA:
        assert "GPU columns need a CUDA device" in text
    chart = tmp_path / "out" / "detops-report.png"
    assert f"Chart: {chart}" in text
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_shows_committed_gpu_results_with_device_and_date(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "test-gpu-2026-01-02.json").write_text(json.dumps(_fake_results()))
    lines = []
    out = R.run_report(reruns=2, reps=1, out_dir=tmp_path, results_dir=results, shapes=["hot_destination"],
                       print_fn=lines.append)
    text = "\n".join(lines)
    assert "Test GPU, 2026-01-02T03:04:05Z" in text
    assert all(r["cpu_bitwise"] and r["cpu_matches_stock"] for r in out["live"])
    row = next(r for r in out["table"] if r[0] == "aten::index_add_")
    assert row[8] == "1.12" and row[9] == "0.079"  # geomeans over two shapes: sqrt(0.5 * 2.5), sqrt(0.05 * 0.125)
    assert "Targets:" in text and "MISSED" in text
    assert pathlib.Path(out["chart"]).is_file()


def test_bench_ops_cpu_mode_writes_the_shared_schema(tmp_path):
    out = tmp_path / "bench.json"
    env = dict(os.environ, PYTHONPATH=str(REPO / "python_shim") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, str(REPO / "bench" / "bench_ops.py"), "--device", "cpu", "--ops", "index_add_",
                    "scatter_add.out", "--shapes", "hot_destination", "--reps", "3", "--warmup", "1",
                    "--out", str(out)], check=True, env=env, capture_output=True)
    doc = json.loads(out.read_text())
    names = {b["run_name"] for b in doc["benchmarks"]}
    assert names == {f"cpu/{op}/hot_destination/{v}" for op in ("aten::index_add_", "aten::scatter_add.out")
                     for v in ("stock_cpu", "detops_cpu")}
    assert all(b["real_time"] > 0 and b["time_unit"] == "us" and b["bytes_min"] > 0 for b in doc["benchmarks"])
    rows = R.summarize(doc)
    assert len(rows) == 2 and all(r["ours_vs_stock_cpu"] > 0 for r in rows)


def _bench_ops_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_ops", REPO / "bench" / "bench_ops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("call_s, calls, reps", [(0.05, 2, 1), (0.0, 1 + 2 + 1 + 10, 10)])
def test_bench_timer_times_a_variant_slower_than_the_budget_once(call_s, calls, reps):
    # A variant whose first call outlasts the budget (stock's atomic index_reduce into one destination: 12 s
    # a call on an H200) is timed once more and no more; a fast one gets its warm-ups and repetitions.
    import time
    bench_ops = _bench_ops_module()
    seen = []

    def fn(s):
        seen.append(s)
        time.sleep(call_s)

    sets = ["a", "b"]
    time_us, n = bench_ops._time(fn, sets, 3, 10, 0.01, bench_ops._mark_cpu, list, 3)
    assert n == reps and len(seen) == calls
    if call_s:
        assert seen == ["a", "b"] and time_us >= call_s * 1e6
    else:
        assert seen[:4] == ["a", "b", "a", "a"]


def test_report_compares_last_writer_ops_with_stock_at_one_thread():
    # Stock CPU's index_put_(accumulate=False) and put_ with duplicate indices pick the writer by thread timing at
    # more than one thread; the report's reference is stock at one thread, the serial source-order result.
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        last_writer = [c for c in C.all_cases() if c.shape == "last_writer"]
        assert {c.op for c in last_writer} == {"aten::_index_put_impl_", "aten::put_"}
        for _ in range(20):
            for case in last_writer:
                r = R._measure_case(case, reruns=1, reps=1, cuda=False)
                assert r["cpu_bitwise"] and r["cpu_matches_stock"], case.op
    finally:
        torch.set_num_threads(threads)


def test_bench_measures_the_first_cases_first(tmp_path):
    # A GPU run cut short by its time limit keeps the cases of bench/measure_first.txt: they come first, in the
    # file's order; a typo raises instead of being passed over, and a case outside --ops is passed over.
    bench_ops = _bench_ops_module()
    known = C.all_cases()
    picked = bench_ops.measure_first(known, ["scatter_add_/hot_destination", "aten::index_add_"], known)
    assert [(c.op, c.shape) for c in picked[:5]] == [("aten::scatter_add_", "hot_destination")] + [
        ("aten::index_add_", s) for s in ("low_contention", "high_contention", "hot_destination", "wide_rows")]
    assert sorted(map(id, picked)) == sorted(map(id, known))
    some = [c for c in known if c.op == "aten::index_add_"]
    assert bench_ops.measure_first(some, ["scatter_add_"], known) == some
    with pytest.raises(SystemExit, match="no such case"):
        bench_ops.measure_first(known, ["scatter_add_/hot_destinaton"], known)
    listed = tmp_path / "first.txt"
    listed.write_text("# comment\nput_/low_contention  # why\n\nbincount\n")
    assert bench_ops.read_first_file(str(listed)) == ["put_/low_contention", "bincount"]
    entries = bench_ops.read_first_file(str(REPO / "bench" / "measure_first.txt"))
    assert len(entries) >= 20
    assert len(bench_ops.measure_first(known, entries, known)) == len(known)


def test_report_times_twin_and_stock_alternately():
    # One call of each per round after a warm-up round: a drift of the machine's speed moves both alike.
    import time
    calls = []

    def make(name, seconds):
        def fn():
            calls.append(name)
            time.sleep(seconds)
        return fn

    twin_us, stock_us = R._median_times([make("twin", 0.002), make("stock", 0.001)], 3)
    assert calls == ["twin", "stock"] * 4
    assert twin_us >= 2000 and stock_us >= 1000 and twin_us > stock_us


@pytest.mark.parametrize("argv, message", [
    (["report", "--shapes", "nosuch"], "no case has the shape"),
    (["report", "--reps", "0"], "expected 1 or more"),
    (["report", "--reruns", "-1"], "expected 1 or more"),
    (["report", "--results", "/no/such.json"], "no such file"),
    (["report", "--results-dir", "/no/such/dir"], "no such directory"),
])
def test_report_command_rejects_bad_arguments(argv, message, capsys):
    from detops.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_bench_times_the_cpu_variants_alternately():
    # One call of each variant per round after the warm-ups, so that a drift of the machine moves both alike; a
    # variant that raises is reported as its error, the other still timed.
    bench_ops = _bench_ops_module()
    calls = []

    def make(name):
        def fn(s):
            calls.append(name)
        return fn

    def fails(s):
        raise RuntimeError("not implemented")

    sets = ["a"]
    timed = bench_ops._time_cpu_alternately({"stock_cpu": make("stock"), "detops_cpu": make("twin")}, sets, 2, 5,
                                            1.0)
    assert calls == ["stock", "stock", "twin", "twin"] + ["stock", "twin"] * 6  # warm-ups, one timed probe, 5 rounds
    assert {k: v[1] for k, v in timed.items()} == {"stock_cpu": 5, "detops_cpu": 5}
    timed = bench_ops._time_cpu_alternately({"stock_cpu": fails, "detops_cpu": make("twin")}, sets, 1, 4, 1.0)
    assert isinstance(timed["stock_cpu"], RuntimeError) and timed["detops_cpu"][1] == 4
