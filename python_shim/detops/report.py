"""``python -m detops report``: does detops fix my op, and what does it cost?

One table per covered aten overload: what stock PyTorch does on CUDA under
``torch.use_deterministic_algorithms(True)``, what detops does, whether the result is bitwise identical over
N reruns, whether CUDA equals the CPU twin, and the time against stock. The CPU parts are measured live
(the twins' reruns at one and at several threads, twin vs stock CPU time); the CUDA parts are measured live
where there is a device, and otherwise taken from the latest committed GPU results in ``bench/results/``,
shown with their device and date. A PNG chart of the ratios is written under ``report/``.

The benchmark JSON read here is Google Benchmark's schema (``bench/detops_bench --benchmark_format=json``)
or the same schema written by ``bench/bench_ops.py``: run names ``<device>/<aten op>/<shape>/<variant>``.
"""

from __future__ import annotations

import glob
import json
import math
import os
import pathlib
import statistics
import time
from typing import Dict, Iterable, List, Optional, Tuple

import torch

import detops
from detops import cases as _cases
from detops import plan as _plan

__all__ = ["summarize", "load_results", "latest_results", "format_markdown", "check_targets", "run_report",
           "plan_column", "TARGETS"]

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
DEFAULT_RESULTS_DIR = REPO / "bench" / "results"

# The targets the benchmarks are measured against (issue 4); benchmarks, not tests.
TARGETS = [
    "geometric mean of ours/stock-atomic <= 1.25 over the shapes, no shape above 2x",
    "ours >= 5x faster than the stock deterministic fallbacks (ours/stock-deterministic <= 0.2)",
    "hot destination faster than stock atomics (ours/stock-atomic < 1)",
    "wide-row index_add_ at >= 50% of the measured copy bandwidth",
]

_UNIT_TO_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def geomean(values: Iterable[float]) -> Optional[float]:
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


# ---------------------------------------------------------------------------------------------------
# Benchmark JSON -> one row per case.

def summarize(doc: dict) -> List[dict]:
    """One row per (device, op, shape): median time of each variant (µs), ours/stock-atomic,
    ours/stock-deterministic (CUDA), ours/stock (CPU), achieved bandwidth and its fraction of the copy
    bandwidth measured in the same run."""
    context = doc.get("context", {})
    copy_bw = _float(context.get("detops_copy_bandwidth_GBps"))
    rows: Dict[Tuple[str, str, str], dict] = {}
    for b in doc.get("benchmarks", []):
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        parts = b.get("run_name", b.get("name", "")).split("/")
        if len(parts) < 4:
            continue
        device, op, shape, variant = parts[:4]
        variant = variant.split("_median")[0]
        row = rows.setdefault((device, op, shape), {
            "device": device, "op": op, "shape": shape, "label": b.get("label", ""), "times_us": {},
            "errors": {}, "bytes_min": None, "bandwidth_GBps": None})
        if b.get("error_occurred"):
            row["errors"][variant] = b.get("error_message", "error")
            continue
        t = float(b["real_time"]) * _UNIT_TO_US[b.get("time_unit", "ns")]
        row["times_us"][variant] = t
        if variant.startswith("detops"):
            if "plan_stream_ops" in b:
                row["plan"] = {k[len("plan_"):]: int(_float(v) or 0) for k, v in b.items() if k.startswith("plan_")
                               and k != "plan_error"}
            bytes_min = _float(b.get("bytes_min"))
            row["bytes_min"] = bytes_min
            if bytes_min:
                row["bandwidth_GBps"] = bytes_min / (t * 1e-6) / 1e9
    for row in rows.values():
        times = row["times_us"]
        ours = times.get("detops", times.get("detops_cpu"))
        row["ours_vs_atomic"] = _ratio(ours, times.get("stock_atomic"))
        row["ours_vs_deterministic"] = _ratio(ours, times.get("stock_deterministic"))
        row["ours_vs_stock_cpu"] = _ratio(times.get("detops_cpu"), times.get("stock_cpu"))
        row["copy_fraction"] = _ratio(row["bandwidth_GBps"], copy_bw) if row["device"] == "cuda" else None
    return sorted(rows.values(), key=lambda r: (r["device"], r["op"], r["shape"]))


def plan_column(totals: Optional[dict]) -> str:
    """The plan column: the CUDA engine's stream operations (launches + memsets) / allocations / workspace MB
    for the shape, summed over the op's engine calls (detops.plan, docs/engine.md)."""
    if not totals:
        return "—"
    return f"{totals['stream_ops']} / {totals['allocations']} / {totals['workspace_bytes'] / 1e6:.1f}"


def _float(v) -> Optional[float]:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _ratio(a, b) -> Optional[float]:
    return a / b if a is not None and b else None


def check_targets(rows: List[dict]) -> List[Tuple[str, Optional[bool], str]]:
    """(target, met or None when not measurable, the figures) for the CUDA rows."""
    cuda = [r for r in rows if r["device"] == "cuda"]
    out = []
    vs_atomic = [r["ours_vs_atomic"] for r in cuda if r["ours_vs_atomic"]]
    if vs_atomic:
        g, worst = geomean(vs_atomic), max(vs_atomic)
        out.append((TARGETS[0], g <= 1.25 and worst <= 2.0, f"geomean {g:.2f}, worst {worst:.2f}"))
    else:
        out.append((TARGETS[0], None, "not measured"))
    vs_det = [r["ours_vs_deterministic"] for r in cuda if r["ours_vs_deterministic"]]
    if vs_det:
        worst = max(vs_det)
        out.append((TARGETS[1], worst <= 0.2, f"worst ours/stock-deterministic {worst:.3f} "
                                               f"({1 / worst:.1f}x faster), geomean {geomean(vs_det):.3f}"))
    else:
        out.append((TARGETS[1], None, "not measured"))
    hot = [r for r in cuda if r["shape"] == "hot_destination" and r["ours_vs_atomic"]]
    if hot:
        worst = max(r["ours_vs_atomic"] for r in hot)
        out.append((TARGETS[2], worst < 1.0, f"worst ours/stock-atomic {worst:.2f}"))
    else:
        out.append((TARGETS[2], None, "not measured"))
    wide = [r for r in cuda if r["shape"] == "wide_rows" and r["op"] == "aten::index_add_" and r["copy_fraction"]]
    if wide:
        frac = wide[0]["copy_fraction"]
        out.append((TARGETS[3], frac >= 0.5, f"{100 * frac:.0f}% of copy bandwidth"))
    else:
        out.append((TARGETS[3], None, "not measured"))
    return out


def load_results(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def latest_results(results_dir=None) -> Optional[Tuple[str, dict]]:
    """The newest GPU results JSON in ``bench/results/`` (by the date in its context), or None."""
    results_dir = pathlib.Path(results_dir) if results_dir is not None else DEFAULT_RESULTS_DIR
    found = []
    for path in glob.glob(str(results_dir / "*.json")):
        try:
            doc = load_results(path)
        except (OSError, ValueError):
            continue
        if any(b.get("run_name", b.get("name", "")).startswith("cuda/") for b in doc.get("benchmarks", [])):
            found.append((str(doc.get("context", {}).get("date", "")), path, doc))
    if not found:
        return None
    _, path, doc = max(found)
    return path, doc


def _fmt(v: Optional[float], spec: str = ".2f") -> str:
    return "—" if v is None else format(v, spec)


def _fmt_us(v: Optional[float]) -> str:
    if v is None:
        return "—"
    return f"{v / 1e3:.2f} ms" if v >= 1e4 else f"{v:.1f} µs"


def format_markdown(doc: dict) -> str:
    """A markdown table of a results JSON: one row per case, and the targets."""
    context = doc.get("context", {})
    rows = summarize(doc)
    lines = [f"Device: {context.get('detops_device', '?')}; date {context.get('date', '?')}; "
             f"torch {context.get('detops_torch', '?')}; copy bandwidth "
             f"{_fmt(_float(context.get('detops_copy_bandwidth_GBps')), '.0f')} GB/s.", ""]
    cuda = [r for r in rows if r["device"] == "cuda"]
    if cuda:
        lines += ["| op | shape | stock atomic | stock deterministic | detops | ours/atomic | ours/deterministic "
                  "| GB/s | of copy | plan: ops / allocs / MB |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in cuda:
            t = r["times_us"]
            det = _fmt_us(t.get("stock_deterministic")) if "stock_deterministic" in t else (
                "throws" if "stock_deterministic" in r["errors"] else "—")
            lines.append(f"| `{r['op']}` | {r['shape']} | {_fmt_us(t.get('stock_atomic'))} | {det} | "
                         f"{_fmt_us(t.get('detops'))} | {_fmt(r['ours_vs_atomic'])} | "
                         f"{_fmt(r['ours_vs_deterministic'], '.3f')} | {_fmt(r['bandwidth_GBps'], '.0f')} | "
                         f"{_fmt(None if r['copy_fraction'] is None else 100 * r['copy_fraction'], '.0f')}% | "
                         f"{plan_column(r.get('plan'))} |")
        lines += ["", "| target | met | measured |", "|---|---|---|"]
        for target, met, figures in check_targets(rows):
            lines.append(f"| {target} | {'—' if met is None else ('yes' if met else 'NO')} | {figures} |")
    cpu = [r for r in rows if r["device"] == "cpu"]
    if cpu:
        lines += ["", "| op | shape (CPU) | stock CPU | detops twin | twin/stock | plan: ops / allocs / MB |",
                  "|---|---|---|---|---|---|"]
        for r in cpu:
            t = r["times_us"]
            lines.append(f"| `{r['op']}` | {r['shape']} | {_fmt_us(t.get('stock_cpu'))} | "
                         f"{_fmt_us(t.get('detops_cpu'))} | {_fmt(r['ours_vs_stock_cpu'])} | "
                         f"{plan_column(r.get('plan'))} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------
# Live measurements.

def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous().cpu()
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _same_bits(a, b) -> bool:
    """Bitwise equality of two results (a tensor, or a tuple of them: nll_loss2d_forward)."""
    a, b = _cases.output_tensors(a), _cases.output_tensors(b)
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(_bits(x), _bits(y)) for x, y in zip(a, b))


def _fresh(call: _cases.Call, device=None) -> Tuple[tuple, dict]:
    """A copy of the call's arguments (in-place and out overloads write into them), optionally moved."""
    def copy(v):
        if isinstance(v, torch.Tensor):
            return _cases.copy_tensor(v, device)
        return v

    return tuple(copy(a) for a in call.args), {k: copy(v) for k, v in call.kwargs.items()}


def _median_times(fns, reps: int) -> list:
    """Median µs of each of `fns` over `reps` rounds, one call of each per round in turn, after one warm-up round:
    a machine whose speed drifts during the measurement moves every fn alike, so their ratio holds."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for t, fn in zip(times, fns):
            start = time.perf_counter()
            fn()
            t.append(time.perf_counter() - start)
    return [statistics.median(t) * 1e6 for t in times]


def _measure_case(case: _cases.Case, reruns: int, reps: int, cuda: bool) -> dict:
    g = torch.Generator().manual_seed(0)
    call = case.build(torch.device("cpu"), g, False)
    twin, stock = _cases.twin_op(case.op), _cases.stock_cpu_op(case)
    result = {"op": case.op, "shape": case.shape}
    threads = torch.get_num_threads()
    try:
        args, kwargs = _fresh(call)
        first = twin(*args, **kwargs)
        same = True
        for i in range(reruns):
            # Half of the reruns at one thread: the contract promises the same bits at any thread count.
            torch.set_num_threads(1 if i % 2 == 0 else threads)
            args, kwargs = _fresh(call)
            same = same and _same_bits(first, twin(*args, **kwargs))
    finally:
        torch.set_num_threads(threads)
    result["cpu_bitwise"] = same
    args, kwargs = _fresh(call)
    try:
        # NB: the reference at one thread: stock CPU's last-writer ops (index_put_ with accumulate=False and
        # duplicate indices) pick a writer by thread timing with more.
        torch.set_num_threads(1)
        reference = stock(*args, **kwargs)
    finally:
        torch.set_num_threads(threads)
    result["cpu_matches_stock"] = all(
        torch.allclose(a.double(), b.double(), rtol=1e-4, atol=1e-4, equal_nan=True)
        for a, b in zip(_cases.output_tensors(first), _cases.output_tensors(reference)))
    fresh_twin, fresh_stock = _fresh(call), _fresh(call)
    try:
        # NB: timed at one thread, both sides: a fair comparison, and stable on a busy machine.
        torch.set_num_threads(1)
        t_twin, t_stock = _median_times([lambda: twin(*fresh_twin[0], **fresh_twin[1]),
                                         lambda: stock(*fresh_stock[0], **fresh_stock[1])], reps)
    finally:
        torch.set_num_threads(threads)
    result["cpu_twin_us"], result["cpu_stock_us"] = t_twin, t_stock
    result["cpu_ratio"] = t_twin / t_stock if t_stock > 0 else None
    if cuda:
        result.update(_measure_cuda(case, call, first, reruns))
    return result


def _measure_cuda(case: _cases.Case, call: _cases.Call, cpu_result, reruns: int) -> dict:
    stock = _cases.aten_op(case.op)
    flag = torch.are_deterministic_algorithms_enabled()
    out = {}
    try:
        torch.use_deterministic_algorithms(True)
        with detops.mode("auto"):
            args, kwargs = _fresh(call, "cuda")
            first = stock(*args, **kwargs)
            same = True
            for _ in range(reruns):
                args, kwargs = _fresh(call, "cuda")
                same = same and _same_bits(first, stock(*args, **kwargs))
            torch.cuda.synchronize()
        out["cuda_bitwise"] = same
        out["cuda_equals_cpu"] = _same_bits(first, cpu_result)
    except RuntimeError as e:
        out["cuda_error"] = str(e).splitlines()[0]
    finally:
        torch.use_deterministic_algorithms(flag)
    return out


# ---------------------------------------------------------------------------------------------------
# Output.

def _yes_no(v) -> str:
    return "—" if v is None else ("yes" if v else "NO")


def _chart(path: pathlib.Path, live: List[dict], gpu_rows: List[dict], gpu_title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("CPU twin / stock CPU (live)", [f"{r['op'][6:]}\n{r['shape']}" for r in live],
               {"twin/stock": [r.get("cpu_ratio") for r in live]})]
    cuda = [r for r in gpu_rows if r["device"] == "cuda"]
    if cuda:
        panels.append((f"CUDA: {gpu_title}", [f"{r['op'][6:]}\n{r['shape']}" for r in cuda],
                       {"ours/stock-atomic": [r["ours_vs_atomic"] for r in cuda],
                        "ours/stock-deterministic": [r["ours_vs_deterministic"] for r in cuda]}))
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(8, 0.45 * max(len(p[1]) for p in panels)),
                                                       4.5 * len(panels)), squeeze=False)
    for ax, (title, labels, series) in zip(axes[:, 0], panels):
        width = 0.8 / len(series)
        for k, (name, values) in enumerate(series.items()):
            xs = [i + k * width for i in range(len(labels))]
            ax.bar(xs, [v if v else 0 for v in values], width=width, label=name)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))])
        ax.set_xticklabels(labels, rotation=90, fontsize=7)
        ax.set_ylabel("time ratio (lower is faster)")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_report(reruns: int = 10, reps: int = 5, out_dir=None, results_dir=None, results_file=None,
               shapes: Optional[Iterable[str]] = None, print_fn=print) -> dict:
    """Runs the report; returns what it printed as data (for tests) with the chart's path."""
    cuda = torch.cuda.is_available()
    covered = detops.covered_ops()
    selected = _cases.cases(covered, shapes=shapes)
    p = print_fn
    p(f"detops {detops.__version__} ({detops.load_library()})")
    p(f"torch {torch.__version__} (CUDA {torch.version.cuda}); CPU threads {torch.get_num_threads()}; "
      f"CUDA device: {torch.cuda.get_device_name() if cuda else 'none'}")
    p(f"covered: {', '.join(covered)}")
    p("")
    live = [_measure_case(c, reruns, reps, cuda) for c in selected]
    for c, r in zip(selected, live):
        try:
            r["plan"] = _plan.case_plan(c, full=True).totals
        except (RuntimeError, MemoryError):
            r["plan"] = None

    # GPU results: the file given, else the latest committed.
    gpu_title, gpu_rows = None, []
    if results_file is not None:
        found = (str(results_file), load_results(results_file))
    else:
        found = latest_results(results_dir)
    if found is not None:
        path, doc = found
        ctx = doc.get("context", {})
        gpu_title = f"{ctx.get('detops_device', '?')}, {ctx.get('date', '?')} ({os.path.relpath(path)})"
        gpu_rows = [r for r in summarize(doc) if r["device"] == "cuda"]
        # Results measured before the plan was recorded: the plan of the code here, for the same shape.
        plans = {(r["op"], r["shape"]): r["plan"] for r in live}
        for r in gpu_rows:
            if not r.get("plan"):
                r["plan"] = plans.get((r["op"], r["shape"]))

    by_op: Dict[str, List[dict]] = {}
    for r in live:
        by_op.setdefault(r["op"], []).append(r)
    gpu_by_op: Dict[str, List[dict]] = {}
    for r in gpu_rows:
        gpu_by_op.setdefault(r["op"], []).append(r)

    if not cuda:
        p("GPU columns need a CUDA device: none here, so 'CUDA rerun bitwise' and 'CUDA == CPU twin' are not "
          "measured; GPU times come from the committed results below.")
    p(f"Live CPU checks (small shapes): each twin rerun {reruns}x, alternating 1 and {torch.get_num_threads()} "
      f"threads; times at one thread, medians of {reps} alternated calls.")
    p(f"GPU times: {gpu_title if gpu_title else 'none measured yet'}")
    p("")
    header = ["aten overload", "stock CUDA under the flag", "detops", "CPU rerun bitwise",
              "CPU == stock (close)", "CPU twin/stock", "CUDA rerun bitwise", "CUDA == CPU twin",
              "GPU ours/atomic", "GPU ours/deterministic"]
    table = []
    for op in covered:
        rows = by_op.get(op, [])
        if not rows:
            continue
        if cuda:
            errors = [r["cuda_error"] for r in rows if "cuda_error" in r]
            cuda_bitwise = _yes_no(not errors and all(r.get("cuda_bitwise") for r in rows))
            cuda_cpu = _yes_no(not errors and all(r.get("cuda_equals_cpu") for r in rows))
            if errors:
                cuda_bitwise = cuda_cpu = f"ERROR: {errors[0]}"
        else:
            cuda_bitwise = cuda_cpu = "needs a CUDA device"
        g = gpu_by_op.get(op, [])
        table.append([
            op, _cases.stock_under_flag(op), "deterministic kernel",
            _yes_no(all(r["cpu_bitwise"] for r in rows)), _yes_no(all(r["cpu_matches_stock"] for r in rows)),
            _fmt(geomean(r["cpu_ratio"] for r in rows)),
            cuda_bitwise, cuda_cpu,
            _fmt(geomean(r["ours_vs_atomic"] for r in g)) if g else "none measured yet",
            _fmt(geomean(r["ours_vs_deterministic"] for r in g), ".3f") if g else "none measured yet",
        ])
    _print_table(p, header, table)
    p("")
    p("Per case, CPU (live): twin vs stock CPU; plan: the CUDA engine's stream operations / allocations / "
      "workspace MB at the GPU shape (docs/engine.md)")
    _print_table(p, ["aten overload", "shape", "stock CPU", "detops twin", "twin/stock", "bitwise",
                     "plan: ops / allocs / MB"],
                 [[r["op"], r["shape"], _fmt_us(r["cpu_stock_us"]), _fmt_us(r["cpu_twin_us"]), _fmt(r["cpu_ratio"]),
                   _yes_no(r["cpu_bitwise"]), plan_column(r.get("plan"))] for r in live])
    p("")
    if gpu_rows:
        p(f"Per case, CUDA ({gpu_title}):")
        _print_table(p, ["aten overload", "shape", "stock atomic", "stock deterministic", "detops", "ours/atomic",
                         "ours/deterministic", "GB/s", "of copy", "plan: ops / allocs / MB"],
                     [[r["op"], r["shape"], _fmt_us(r["times_us"].get("stock_atomic")),
                       _fmt_us(r["times_us"].get("stock_deterministic")) if "stock_deterministic" in r["times_us"]
                       else ("throws" if "stock_deterministic" in r["errors"] else "—"),
                       _fmt_us(r["times_us"].get("detops")), _fmt(r["ours_vs_atomic"]),
                       _fmt(r["ours_vs_deterministic"], ".3f"), _fmt(r["bandwidth_GBps"], ".0f"),
                       _fmt(None if r["copy_fraction"] is None else 100 * r["copy_fraction"], ".0f") + "%",
                       plan_column(r.get("plan"))]
                      for r in gpu_rows])
        p("")
        p("Targets:")
        for target, met, figures in check_targets(gpu_rows):
            p(f"  [{'—' if met is None else ('met' if met else 'MISSED')}] {target}: {figures}")
    else:
        p("CUDA benchmark results: none measured yet (run scripts/gpu_run.sh on a CUDA machine).")
    p("")
    out_dir = pathlib.Path(out_dir) if out_dir is not None else REPO / "report"
    chart = out_dir / "detops-report.png"
    _chart(chart, live, gpu_rows, gpu_title or "")
    p(f"Chart: {chart}")
    return {"live": live, "gpu_rows": gpu_rows, "gpu_title": gpu_title, "table": table, "chart": str(chart),
            "cuda": cuda}


def _print_table(p, header: List[str], rows: List[List[str]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)] if rows else [len(h) for h in header]
    p("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    p("  ".join("-" * w for w in widths))
    for row in rows:
        p("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))

