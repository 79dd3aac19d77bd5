#!/usr/bin/env python3
"""The detops benchmarks in Python, for machines without Google Benchmark (the GPU test machines).

Same cases (python_shim/detops/cases.py, registered by aten overload and kept when detops covers the op),
same statistics and the same JSON schema as bench/detops_bench (Google Benchmark's
``--benchmark_format=json``): one median aggregate per run named ``<device>/<aten op>/<shape>/<variant>``,
``real_time`` in µs, and the counters ``bytes_min`` (the fewest bytes the op must move) and
``bandwidth_GBps``.

CUDA (default where there is a device), variants per case:
  stock_atomic         flag off, detops mode "off": stock's nondeterministic kernel
  stock_deterministic  flag on, mode "off": stock's deterministic fallback (an error entry where it throws)
  detops               flag on, mode "auto": the detops override
timed with CUDA events around each call after warm-up, median of many; random data; inputs smaller than
the L2 cache are rotated through enough copies to overflow it. The copy bandwidth of the device is
measured in the same run (context ``detops_copy_bandwidth_GBps``).

CPU (``--device cpu``; small shapes): ``stock_cpu`` (the aten op on CPU) vs ``detops_cpu`` (the twin),
wall-clock medians, the two variants' calls alternated.

    python bench/bench_ops.py --out bench-cpu.json --device cpu
    python bench/bench_ops.py --out bench/results/h100-2026-11-22.json   # on a GPU machine
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import pathlib
import platform
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
try:
    import detops  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "python_shim"))
    import detops  # noqa: F401

import torch

from detops import cases as C
from detops.plan import case_plan
from detops.report import format_markdown, summarize

CUDA_VARIANTS = {  # name: (deterministic flag, detops mode)
    "stock_atomic": (False, "off"),
    "stock_deterministic": (True, "off"),
    "detops": (True, "auto"),
}


def _settings(flag: bool, mode: str):
    torch.use_deterministic_algorithms(flag)
    detops.set_mode(mode)


def _l2_bytes() -> int:
    return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20) or (50 << 20))


def _input_sets(case: C.Case, device: torch.device, full: bool, l2: int, max_sets: int):
    """Random argument sets: one, or (when one set fits in L2) enough copies to overflow it twice."""
    g = torch.Generator(device=device if device.type == "cuda" else "cpu").manual_seed(1234)
    first = case.build(device, g, full)
    sets = [first]
    size = first.nbytes()
    if device.type == "cuda" and size < l2:
        count = min(max_sets, math.ceil(2 * l2 / max(size, 1)))
        sets += [case.build(device, g, full) for _ in range(count - 1)]
    return sets


def _time(fn, sets, warmup: int, reps: int, budget_s: float, mark, seconds, min_reps: int):
    """Median µs of fn over the sets and the repetitions timed. mark(fn, s) runs fn(s) between two marks and
    returns them; seconds(marks) gives their times once all have run."""
    # The first warm-up call is timed: a variant slower than the whole budget (stock's atomic index_reduce
    # into one destination takes seconds) is timed once more and no more.
    first_s = seconds([mark(fn, sets[0])])[0]
    if first_s > budget_s:
        return seconds([mark(fn, sets[1 % len(sets)])])[0] * 1e6, 1
    for i in range(1, warmup):
        fn(sets[i % len(sets)])
    # Few repetitions for slow variants (stock deterministic fallbacks on big shapes), many for fast ones.
    once_s = seconds([mark(fn, sets[0])])[0]
    reps = max(min_reps, min(reps, int(budget_s / max(once_s, 1e-6))))
    return statistics.median(seconds([mark(fn, sets[i % len(sets)]) for i in range(reps)])) * 1e6, reps


def _mark_cuda(fn, s):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn(s)
    end.record()
    return start, end


def _seconds_cuda(marks):
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1e-3 for start, end in marks]


def _mark_cpu(fn, s):
    start = time.perf_counter()
    fn(s)
    return time.perf_counter() - start


def _time_cuda(fn, sets, warmup: int, reps: int, budget_s: float):
    return _time(fn, sets, warmup, reps, budget_s, _mark_cuda, _seconds_cuda, 5)


def _time_cpu_alternately(fns: dict, sets, warmup: int, reps: int, budget_s: float) -> dict:
    """Per variant name, (median µs, repetitions) of fns[name], or the RuntimeError it raised. The variants' calls
    alternate, one of each per round after the warm-ups, so that a drift of the machine's speed moves them alike;
    the rounds fit the slowest variant's budget (at least 3)."""
    results, alive = {}, {}
    for name, fn in fns.items():
        try:
            for i in range(max(warmup, 1)):
                fn(sets[i % len(sets)])
            alive[name] = fn
        except RuntimeError as e:
            results[name] = e
    if alive:
        once_s = max(_mark_cpu(fn, sets[0]) for fn in alive.values())
        rounds = max(3, min(reps, int(budget_s / max(once_s, 1e-6))))
        times = {name: [] for name in alive}
        for i in range(rounds):
            for name, fn in alive.items():
                times[name].append(_mark_cpu(fn, sets[i % len(sets)]))
        results.update({name: (statistics.median(t) * 1e6, rounds) for name, t in times.items()})
    return results


def copy_bandwidth_GBps(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy of a buffer far larger than L2: bytes read + bytes written per second."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    time_us, _ = _time_cuda(lambda _: dst.copy_(src), [None], 3, 20, 1.0)
    del src, dst
    return 2 * nbytes / (time_us * 1e-6) / 1e9


def _entry(device: str, case: C.Case, variant: str, time_us: float, reps: int, bytes_min: int) -> dict:
    run_name = f"{device}/{case.op}/{case.shape}/{variant}"
    return {
        "name": run_name + "_median", "run_name": run_name, "run_type": "aggregate", "aggregate_name": "median",
        "repetitions": reps, "threads": 1, "iterations": 1, "real_time": time_us, "cpu_time": time_us,
        "time_unit": "us", "bytes_min": float(bytes_min),
        "bandwidth_GBps": bytes_min / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0, "label": case.what,
    }


def _plan_fields(case: C.Case, full: bool) -> dict:
    """The CUDA engine's plan for the case's shape (detops.plan, counted on the CPU in plan-only mode)."""
    try:
        totals = case_plan(case, full=full).totals
    except (RuntimeError, MemoryError) as e:
        return {"plan_error": str(e).splitlines()[0][:200]}
    return {f"plan_{k}": float(v) for k, v in totals.items()}


def _error_entry(device: str, case: C.Case, variant: str, message: str) -> dict:
    run_name = f"{device}/{case.op}/{case.shape}/{variant}"
    return {"name": run_name, "run_name": run_name, "run_type": "iteration", "error_occurred": True,
            "error_message": message, "label": case.what}


def run(device: str, selected, warmup: int, reps: int, budget_s: float, max_sets: int, log, checkpoint=None) -> dict:
    """Runs the cases; ``checkpoint(doc)``, if given, is called after each case with the results so far
    (the context says ``detops_partial``: "<done>/<total> cases") so that a run cut short keeps them."""
    dev = torch.device(device)
    context = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host_name": platform.node(), "executable": "bench/bench_ops.py", "num_cpus": os.cpu_count(),
        "library_build_type": "release", "detops_version": detops.__version__, "detops_torch": torch.__version__,
        "detops_cuda": str(torch.version.cuda), "detops_statistic": "median",
        "detops_device": torch.cuda.get_device_name(0) if device == "cuda" else f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)",
    }
    benchmarks = []
    flag, mode = torch.are_deterministic_algorithms_enabled(), detops.get_mode()
    try:
        if device == "cuda":
            l2 = _l2_bytes()
            context["detops_l2_bytes"] = l2
            context["detops_copy_bandwidth_GBps"] = copy_bandwidth_GBps()
            log(f"copy bandwidth {context['detops_copy_bandwidth_GBps']:.0f} GB/s, L2 {l2 >> 20} MiB")
        for done, case in enumerate(selected, 1):
            if device == "cuda":
                sets = _input_sets(case, dev, True, l2, max_sets)
                variants = CUDA_VARIANTS
                timer = _time_cuda
            else:
                sets = [case.build(dev, torch.Generator().manual_seed(1234), False)]
                variants = {"stock_cpu": None, "detops_cpu": None}
                cpu_fns = {"stock_cpu": C.stock_cpu_op(case), "detops_cpu": C.twin_op(case.op)}
                timed = _time_cpu_alternately(
                    {v: (lambda fn: lambda s: fn(*s.args, **s.kwargs))(fn) for v, fn in cpu_fns.items()}, sets,
                    warmup, reps, budget_s)
            bytes_min = sets[0].min_bytes
            for variant, setting in variants.items():
                if setting is not None:
                    _settings(*setting)
                try:
                    if device == "cuda":
                        fn = C.aten_op(case.op)
                        time_us, n = timer(lambda s: fn(*s.args, **s.kwargs), sets, warmup, reps, budget_s)
                    elif isinstance(timed[variant], RuntimeError):
                        raise timed[variant]
                    else:
                        time_us, n = timed[variant]
                except RuntimeError as e:
                    message = str(e).splitlines()[0][:300]
                    benchmarks.append(_error_entry(device, case, variant, message))
                    log(f"{case.op:46s} {case.shape:18s} {variant:20s} error: {message[:80]}")
                    continue
                finally:
                    if setting is not None:
                        _settings(flag, mode)
                entry = _entry(device, case, variant, time_us, n, bytes_min)
                if variant in ("detops", "detops_cpu"):
                    entry.update(_plan_fields(case, full=device == "cuda"))
                benchmarks.append(entry)
                log(f"{case.op:46s} {case.shape:18s} {variant:20s} {time_us:12.1f} us  ({len(sets)} input sets, "
                    f"{n} reps)")
            del sets
            if device == "cuda":
                torch.cuda.empty_cache()
            if checkpoint is not None:
                checkpoint({"context": dict(context, detops_partial=f"{done}/{len(selected)} cases"),
                            "benchmarks": list(benchmarks)})
    finally:
        torch.use_deterministic_algorithms(flag)
        detops.set_mode(mode)
    return {"context": context, "benchmarks": benchmarks}


def read_first_file(path: str) -> list:
    """The entries of a --first-file: one per line, '#' to the end of a line a comment."""
    entries = []
    for line in pathlib.Path(path).read_text().splitlines():
        entries += line.split("#", 1)[0].split()
    return entries


def measure_first(selected: list, first: list, known: list) -> list:
    """`selected` with the cases that `first` names (``op`` or ``op/shape``, ``aten::`` optional) moved to the
    front, in the order `first` names them. An entry that names none of the `known` cases (a typo) raises; one
    that names only cases outside the selection is passed over."""
    def names(c, op, shape):
        return c.op == op and (not shape or c.shape == shape)

    ordered, taken = [], set()
    for entry in first:
        op, _, shape = entry.partition("/")
        op = op if op.startswith("aten::") else "aten::" + op
        if not any(names(c, op, shape) for c in known):
            raise SystemExit(f"bench_ops: --first {entry}: no such case (bench_ops.py --list)")
        hits = [i for i, c in enumerate(selected) if names(c, op, shape)]
        ordered += [i for i in hits if i not in taken]
        taken.update(hits)
    return [selected[i] for i in ordered] + [c for i, c in enumerate(selected) if i not in taken]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=None, help="JSON output file (default: stdout summary only)")
    parser.add_argument("--markdown", default=None, help="also write a markdown table of the results here")
    parser.add_argument("--ops", nargs="*", default=None, help="aten overloads, e.g. index_add_ scatter_add.out")
    parser.add_argument("--shapes", nargs="*", default=None, help="shape names, e.g. hot_destination")
    parser.add_argument("--first", nargs="*", default=None,
                        help="overloads (index_add_) or cases (index_add_/hot_destination) measured before the "
                        "other selected cases, in this order: a run cut short by a time limit keeps these")
    parser.add_argument("--first-file", default=None,
                        help="more --first entries, one per line ('#' starts a comment), e.g. "
                        "bench/measure_first.txt")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--reps", type=int, default=50, help="most timed repetitions per variant")
    parser.add_argument("--budget", type=float, default=0.5,
                        help="seconds of timed calls per variant at most; a variant whose first call takes "
                        "longer is timed once more and no more")
    parser.add_argument("--max-input-sets", type=int, default=32, help="most rotated input copies")
    parser.add_argument("--list", action="store_true", help="list the cases and whether each is covered")
    args = parser.parse_args(argv)

    covered = set(detops.covered_ops())
    if args.list:
        for case in C.all_cases():
            print(f"{case.op:50s} {case.shape:18s} {'covered' if case.op in covered else 'not covered'}  {case.what}")
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_ops: no CUDA device; use --device cpu", file=sys.stderr)
        return 2
    selected = C.cases(covered, ops=args.ops, shapes=args.shapes)
    first = list(args.first or [])
    if args.first_file:
        first += read_first_file(args.first_file)
    selected = measure_first(selected, first, C.all_cases())
    skipped = sorted({c.op for c in C.all_cases()} - covered)
    if skipped:
        print(f"bench_ops: skipping ops detops does not cover: {', '.join(skipped)}", file=sys.stderr)

    def write(doc: dict) -> None:
        pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        tmp = pathlib.Path(args.out + ".tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        tmp.replace(args.out)

    # With --out, the file is rewritten after each case (marked partial until the end): a run stopped by
    # a time limit keeps what it measured.
    doc = run(args.device, selected, args.warmup, args.reps, args.budget, args.max_input_sets,
              lambda line: print(line, file=sys.stderr, flush=True), write if args.out else None)
    doc["summary"] = summarize(doc)
    if args.out:
        write(doc)
        print(f"bench_ops: wrote {args.out}", file=sys.stderr)
    table = format_markdown(doc)
    if args.markdown:
        pathlib.Path(args.markdown).write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
