"""The CUDA engine's plan per engine call, counted without a GPU.

Every detops op computes through an engine (``cpu::Engine`` or ``cuda::Engine``, the same ``*_compute``
code on both), so the engine calls an op makes on the CPU are the ones it makes on CUDA for the same
arguments. :func:`plan_summary` runs an op with recording on and returns, per engine call, the plan the
CUDA engine runs for it (``ops/plan.h``, the model the CUDA engine itself lays out its work with): its path,
stream operations (kernel launches, CUB's counted with the kernels they launch, and memsets), allocations,
workspace bytes and predicted bytes moved. ``plan_only=True`` skips the CPU engine's reductions (the op's
checks, allocations and gathers still run), so the full benchmark shapes are cheap. docs/engine.md explains
the counts.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable, Dict, List

import torch

__all__ = ["CallPlan", "Plan", "plan_summary", "summarize", "case_plan", "build_for_plan", "column", "SHAPE_ONLY_OPS"]

CALL_FIELDS = ("kind", "n", "num_keys", "D", "acc_bytes", "key_bytes", "gated")
SUMMARY_FIELDS = ("path", "launches", "memsets", "stream_ops", "allocations", "workspace_bytes", "bytes_moved",
                  "sort_bits", "levels", "value_bytes")
KINDS = ("sort_reduce", "for_each", "count", "kernel")
PATHS = ("empty", "gather", "count", "single_block", "multi", "kernel", "buckets")
TOTALS = ("launches", "memsets", "stream_ops", "allocations", "workspace_bytes", "bytes_moved")


@dataclasses.dataclass
class CallPlan:
    """One engine call (``call``: kind, n, num_keys, D, acc_bytes, key_bytes, gated) and its plan (``summary``). A
    ``kernel`` entry is an op's own work outside the engine, its fields launches, memsets and copies,
    allocations, allocated bytes and predicted bytes moved (``plan::kernel_call``, ops/plan_record.h)."""

    call: Dict[str, object]
    summary: Dict[str, object]


@dataclasses.dataclass
class Plan:
    calls: List[CallPlan]
    totals: Dict[str, int]


def summarize(kind: str, n: int, num_keys: int = 0, D: int = 1, acc_bytes: int = 0, key_bytes: int = 0,
              gated: int = 0) -> dict:
    """The plan of one engine call, from the C++ model (``gated``: 1 where the op's call is gated on a device word,
    as the max pools' after their gather)."""
    fields = torch.ops.detops._plan_summary([KINDS.index(kind), n, num_keys, D, acc_bytes, key_bytes, gated])
    summary = dict(zip(SUMMARY_FIELDS, fields))
    summary["path"] = PATHS[summary["path"]]
    return summary


def _plan(flat: List[int]) -> Plan:
    calls = []
    for i in range(0, len(flat), len(CALL_FIELDS)):
        fields = list(flat[i:i + len(CALL_FIELDS)])
        call = dict(zip(CALL_FIELDS, fields))
        call["kind"] = KINDS[call["kind"]]
        calls.append(CallPlan(call, summarize(**call)))
    totals = {k: sum(int(c.summary[k]) for c in calls) for k in TOTALS}
    return Plan(calls, totals)


def plan_summary(fn: Callable, *args, plan_only: bool = False, **kwargs) -> Plan:
    """Runs ``fn(*args, **kwargs)`` (a detops twin or anything calling one, on CPU tensors) with the engine
    calls recorded, and returns their plans with the totals."""
    torch.ops.detops._plan_start(plan_only)
    try:
        fn(*args, **kwargs)
    finally:
        flat = torch.ops.detops._plan_stop()
    return _plan(list(flat))


# Ops whose engine calls depend on the shapes and dtypes of their arguments alone, not on the values in them
# (test_plan.py checks it for every case at its small shape): at the GPU shapes their cases are built with
# constant floating-point data, which costs a fraction of drawing it. Index tensors are drawn as they are; any
# other op's case is built as the benchmarks build it.
SHAPE_ONLY_OPS = frozenset(
    f"aten::{name}" for name in (
        "_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward", "adaptive_avg_pool3d_backward.grad_input",
        "avg_pool3d_backward", "avg_pool3d_backward.grad_input",
        "adaptive_max_pool2d_backward", "adaptive_max_pool2d_backward.grad_input",
        "adaptive_max_pool3d_backward", "adaptive_max_pool3d_backward.grad_input",
        "max_pool3d_with_indices_backward", "max_pool3d_with_indices_backward.grad_input",
        "fractional_max_pool2d_backward", "fractional_max_pool2d_backward.grad_input",
        "fractional_max_pool3d_backward", "fractional_max_pool3d_backward.grad_input",
        "index_add", "index_add_", "index_add.out", "index_copy", "index_copy_", "index_copy.out",
        "index_reduce", "index_reduce_", "index_reduce.out", "_index_put_impl_",
        "scatter_add", "scatter_add_", "scatter_add.out",
        "upsample_linear1d_backward", "upsample_linear1d_backward.grad_input",
        "upsample_bilinear2d_backward", "upsample_bilinear2d_backward.grad_input",
        "upsample_bicubic2d_backward", "upsample_bicubic2d_backward.grad_input",
        "upsample_trilinear3d_backward", "upsample_trilinear3d_backward.grad_input",
        "_upsample_bilinear2d_aa_backward", "_upsample_bilinear2d_aa_backward.grad_input",
        "_upsample_bicubic2d_aa_backward", "_upsample_bicubic2d_aa_backward.grad_input",
        "reflection_pad1d_backward", "reflection_pad1d_backward.grad_input",
        "reflection_pad2d_backward", "reflection_pad2d_backward.grad_input",
        "reflection_pad3d_backward", "reflection_pad3d_backward.grad_input",
        "replication_pad1d_backward", "replication_pad1d_backward.grad_input",
        "replication_pad2d_backward", "replication_pad2d_backward.grad_input",
        "replication_pad3d_backward", "replication_pad3d_backward.grad_input",
        "nll_loss2d_forward", "nll_loss2d_forward.output",
        "median.dim_values", "nanmedian.dim_values",
    ))


@contextlib.contextmanager
def _constant_values():
    """The case builders' random floating-point values (detops.cases._randn) as zeros while building."""
    from . import cases

    randn = cases._randn
    cases._randn = lambda shape, g, device, dtype=torch.float32: torch.zeros(shape, dtype=dtype, device=device)
    try:
        yield
    finally:
        cases._randn = randn


def build_for_plan(case, full: bool = True, seed: int = 0, cheap: bool = True):
    """A benchmark case's call on the CPU for planning: with constant floating-point data where ``cheap`` and
    the op's plan depends on shapes alone (:data:`SHAPE_ONLY_OPS`)."""
    g = torch.Generator().manual_seed(seed)
    with _constant_values() if cheap and case.op in SHAPE_ONLY_OPS else contextlib.nullcontext():
        return case.build(torch.device("cpu"), g, full)


def case_plan(case, full: bool = True, seed: int = 0, cheap: bool = True) -> Plan:
    """The plan of a benchmark case (:mod:`detops.cases`) at its GPU shape (``full``) or its small one, from
    its CPU twin in plan-only mode. ``cheap``: built as :func:`build_for_plan` builds it (the same plan)."""
    from . import cases

    call = build_for_plan(case, full, seed, cheap)
    # NB: the call is built for this plan alone, so the twin may write into it (in-place and .out overloads):
    # no fresh copy of the arguments.
    return plan_summary(cases.twin_op(case.op), *call.args, plan_only=True, **call.kwargs)


def column(plan: Plan) -> str:
    """The report's plan column: stream operations (launches + memsets) / allocations / workspace MB."""
    t = plan.totals
    return f"{t['stream_ops']} / {t['allocations']} / {t['workspace_bytes'] / 1e6:.1f}"
