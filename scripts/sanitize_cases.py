#!/usr/bin/env python3
"""Runs every covered op once per dtype through its detops twin, small inputs: the workload that
scripts/gpu_run.sh runs under compute-sanitizer (memcheck, racecheck, initcheck, synccheck).

Every covered overload (``detops.covered_ops()``) with every case registered for it in ``detops.cases``
(``full=False``: the small shapes), and the calls of ``EXTRA_CASES`` for the paths those miss (the max pools'
gather and gated engine, the average pools' two steps, the engine's buckets with and without their flag), built
on the CPU from a fixed seed and copied to the device, is run once through
``torch.ops.detops.<name>.<overload>`` for each dtype (floating-point tensors converted).
On CUDA the result is also compared bit for bit with the CPU twin on the same inputs (the order contract).
Inputs are built on the CPU, so the CUDA kernels that run are (nearly) only the detops ones.

One line per run, flushed (``ok`` / ``skip`` / ``FAIL`` / ``MISMATCH``), then a count line:

    sanitize_cases: 192 runs: 184 ok, 0 failed, 0 mismatched, 8 skipped

Exit status 1 when a run failed or mismatched, 2 when the device is not available, else 0.

    python scripts/sanitize_cases.py --device cuda            # what the runner sanitizes
    python scripts/sanitize_cases.py --device cpu --dtypes float32   # dry run: every case builds and runs
    python scripts/sanitize_cases.py --list
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import traceback

ROOT = pathlib.Path(__file__).resolve().parent.parent
try:
    import detops
except ImportError:
    sys.path.insert(0, str(ROOT / "python_shim"))
    import detops

import torch

from detops import cases as C

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16}


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous().cpu()
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _same_bits(a, b) -> bool:
    a, b = C.output_tensors(a), C.output_tensors(b)
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(_bits(x), _bits(y)) for x, y in zip(a, b))


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


def _max_pool_gather(op: str, forward, shape, extra: tuple, moved: bool) -> C.Builder:
    """A max pool's call of more than 4,096 outputs (its CUDA path gathers, docs/pooling.md), with the forward's
    indices or with some moved out of their windows (the gated engine's call then runs too)."""
    def build(device, g, full: bool) -> C.Call:
        x = torch.randn(shape, generator=g)
        out, indices = forward(x)
        if moved:
            indices = indices.clone()
            indices.view(-1)[0] = x[0, 0].numel() - 1  # the last element of the plane: outside output 0's window
            indices.view(-1)[-1] = 0
        grad = torch.randn(out.shape, generator=g)
        return C.Call((grad, x) + extra + (indices,), {}, 0)

    return build


# Calls past the small shapes, for the paths those do not reach: the max pools' gather and their gated engine.
EXTRA_CASES = [
    C.Case(op, name + ("_moved" if moved else ""), _max_pool_gather(op, forward, dims, extra, moved), name)
    for op, name, forward, dims, extra in (
        ("aten::adaptive_max_pool2d_backward", "gather", lambda x: torch.ops.aten.adaptive_max_pool2d(x, [17, 23]),
         (2, 8, 40, 36), ()),
        # More than 32 outputs pick some elements: the gather's second walk (StreamingTree).
        ("aten::adaptive_max_pool2d_backward", "gather_upsample",
         lambda x: torch.ops.aten.adaptive_max_pool2d(x, [40, 45]), (2, 4, 6, 5), ()),
        ("aten::max_pool3d_with_indices_backward", "gather",
         lambda x: torch.ops.aten.max_pool3d_with_indices(x, [3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], False),
         (1, 4, 9, 30, 30), ([3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], False)),
        ("aten::fractional_max_pool3d_backward", "gather",
         lambda x: torch.ops.aten.fractional_max_pool3d(x, [2, 3, 2], [9, 10, 12],
                                                        torch.rand(x.shape[0], x.shape[1], 3,
                                                                   generator=torch.Generator().manual_seed(1))),
         (1, 4, 15, 17, 19), ([2, 3, 2], [9, 10, 12])),
    )
    for moved in (False, True)
]


def _avg_pool_two_steps(shape, out_shape, args: tuple) -> C.Builder:
    """An average pool's call of at least 65,536 input elements (its CUDA path takes two steps, docs/pooling.md)."""
    def build(device, g, full: bool) -> C.Call:
        return C.Call((torch.randn(out_shape, generator=g), torch.randn(shape, generator=g)) + args, {}, 0)

    return build


# The average pools' two steps: the scale step and the gather over its scratch, 32-bit indices, with elements of
# at most and of more than 32 windows.
EXTRA_CASES += [
    C.Case("aten::avg_pool3d_backward", "two_steps",
           _avg_pool_two_steps((1, 4, 10, 40, 42), (1, 4, 5, 20, 21), ([3, 3, 3], [2, 2, 2], [1, 1, 1], False, True,
                                                                        None)), "two_steps"),
    C.Case("aten::_adaptive_avg_pool2d_backward", "two_steps_many_windows",
           _avg_pool_two_steps((1, 16, 256, 16), (1, 16, 300, 160), ()), "two_steps_many_windows"),
]


def _buckets(op: str, n: int, keys: int, hot: int = 0, width: int = 0) -> C.Builder:
    """About one contribution per key (the CUDA engine's buckets, docs/engine.md): ``scatter_add_`` or
    ``index_add_`` (``width`` columns) of ``n`` contributions into ``keys`` destinations, ``hot`` of them into
    destination 0 (more than 32: the buckets raise their flag and the gated multi-block path runs)."""
    def build(device, g, full: bool) -> C.Call:
        index = torch.randint(0, keys, (n,), generator=g)
        index[torch.randperm(n, generator=g)[:hot]] = 0
        if op == "aten::index_add_":
            return C.Call((torch.randn(keys, width, generator=g), 0, index, torch.randn(n, width, generator=g)), {}, 0)
        return C.Call((torch.randn(keys, generator=g), 0, index, torch.randn(n, generator=g)), {}, 0)

    return build


# The buckets: one and two columns (carried), rows of 40 (positions), and a hot destination that sends the call to
# the gated multi-block path.
EXTRA_CASES += [
    C.Case("aten::scatter_add_", "buckets", _buckets("aten::scatter_add_", 20000, 20000), "buckets"),
    C.Case("aten::index_add_", "buckets_pairs", _buckets("aten::index_add_", 9000, 7000, width=2), "buckets_pairs"),
    C.Case("aten::index_add_", "buckets_rows", _buckets("aten::index_add_", 6000, 8000, width=40), "buckets_rows"),
    C.Case("aten::scatter_add_", "buckets_hot", _buckets("aten::scatter_add_", 20000, 20000, hot=40), "buckets_hot"),
]


def run(device: str, dtypes, ops=None, shapes=None, seed: int = 0, compare: bool = True, log=print) -> dict:
    counts = {"runs": 0, "ok": 0, "failed": 0, "mismatched": 0, "skipped": 0}
    selected = C.cases(detops.covered_ops(), ops=ops, shapes=shapes) + _extra(ops, shapes)
    covered_without_case = sorted(set(detops.covered_ops()) - {c.op for c in C.cases()})
    for op in covered_without_case:
        log(f"skip {op}: no case registered in detops.cases")
        counts["skipped"] += 1
    for case in selected:
        twin = C.twin_op(case.op)
        call = case.build(torch.device("cpu"), torch.Generator().manual_seed(seed), False)
        for name in dtypes:
            dtype = DTYPES[name]
            what = f"{case.op} [{case.shape}] {name}"
            counts["runs"] += 1
            if twin is None:
                counts["failed"] += 1
                log(f"FAIL {what}: no detops twin torch.ops.detops.{case.name}.{case.overload}")
                continue
            try:
                args, kwargs = C.fresh_args(call, device, dtype)
                result = twin(*args, **kwargs)
                if device == "cuda":
                    torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - reported, then the next case runs
                # A dtype the twin rejects on the CPU too, or that stock's own CUDA kernel rejects (histc takes
                # no half or bfloat16 there), is unsupported, not a failure.
                unsupported = _rejected(twin, call, "cpu", dtype)
                if unsupported is None and device == "cuda":
                    unsupported = _rejected(C.aten_op(case.op), call, device, dtype, stock=True)
                if unsupported is not None:
                    counts["skipped"] += 1
                    log(f"skip {what}: unsupported dtype ({unsupported})")
                    continue
                counts["failed"] += 1
                log(f"FAIL {what}: {_first_line(e)}")
                if device == "cuda" and "CUDA" in str(e) and "error" in str(e).lower():
                    traceback.print_exc(file=sys.stdout)
                continue
            if device == "cuda" and compare:
                try:
                    args, kwargs = C.fresh_args(call, "cpu", dtype)
                    reference = twin(*args, **kwargs)
                except Exception as e:  # noqa: BLE001
                    counts["ok"] += 1
                    log(f"ok   {what} (CPU twin raised, not compared: {_first_line(e)})")
                    continue
                if not _same_bits(result, reference):
                    counts["mismatched"] += 1
                    log(f"MISMATCH {what}: CUDA twin != CPU twin")
                    continue
            counts["ok"] += 1
            log(f"ok   {what}")
    return counts


def _extra(ops=None, shapes=None):
    wanted_ops = None if ops is None else {o if o.startswith("aten::") else "aten::" + o for o in ops}
    return [c for c in EXTRA_CASES
            if (wanted_ops is None or c.op in wanted_ops) and (shapes is None or c.shape in shapes)]


def _rejected(op, call, device, dtype, stock=False):
    """The first line of the error ``op`` raises on fresh arguments (prefixed "stock CUDA: " for the stock aten
    op, run with detops mode "off"), or None when it runs."""
    try:
        args, kwargs = C.fresh_args(call, device, dtype)
        if stock:
            with detops.mode("off"):
                op(*args, **kwargs)
        else:
            op(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        return ("stock CUDA: " if stock else "") + _first_line(e)
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=list(DTYPES))
    parser.add_argument("--ops", nargs="*", default=None, help="aten overloads, e.g. index_add_ scatter_add.out")
    parser.add_argument("--shapes", nargs="*", default=None, help="case shape names")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-compare", action="store_true", help="on CUDA, skip the bitwise CPU comparison")
    parser.add_argument("--list", action="store_true", help="list the runs and exit")
    args = parser.parse_args(argv)

    if args.list:
        for case in C.cases(detops.covered_ops(), ops=args.ops, shapes=args.shapes) + _extra(args.ops, args.shapes):
            print(f"{case.op:50s} {case.shape:18s} {' '.join(args.dtypes)}")
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("sanitize_cases: no CUDA device (use --device cpu for a dry run)", file=sys.stderr)
        return 2

    def log(line: str) -> None:
        print(line, flush=True)

    counts = run(args.device, args.dtypes, args.ops, args.shapes, args.seed, not args.no_compare, log)
    log(f"sanitize_cases: {counts['runs']} runs on {args.device}: {counts['ok']} ok, {counts['failed']} failed, "
        f"{counts['mismatched']} mismatched, {counts['skipped']} skipped")
    return 1 if counts["failed"] or counts["mismatched"] else 0


if __name__ == "__main__":
    sys.exit(main())
