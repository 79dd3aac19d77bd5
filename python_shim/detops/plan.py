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

import dataclasses
from typing import Callable, Dict, List

import torch

__all__ = ["CallPlan", "Plan", "plan_summary", "summarize", "case_plan", "column"]

CALL_FIELDS = ("kind", "n", "num_keys", "D", "acc_bytes", "key_bytes")
SUMMARY_FIELDS = ("path", "launches", "memsets", "stream_ops", "allocations", "workspace_bytes", "bytes_moved",
                  "sort_bits", "levels")
KINDS = ("sort_reduce", "for_each", "count")
PATHS = ("empty", "gather", "count", "single_block", "multi")
TOTALS = ("launches", "memsets", "stream_ops", "allocations", "workspace_bytes", "bytes_moved")


@dataclasses.dataclass
class CallPlan:
    """One engine call (``call``: kind, n, num_keys, D, acc_bytes, key_bytes) and its plan (``summary``)."""

    call: Dict[str, object]
    summary: Dict[str, object]


@dataclasses.dataclass
class Plan:
    calls: List[CallPlan]
    totals: Dict[str, int]


def summarize(kind: str, n: int, num_keys: int = 0, D: int = 1, acc_bytes: int = 0, key_bytes: int = 0) -> dict:
    """The plan of one engine call, from the C++ model."""
    fields = torch.ops.detops._plan_summary([KINDS.index(kind), n, num_keys, D, acc_bytes, key_bytes])
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


def case_plan(case, full: bool = True, seed: int = 0) -> Plan:
    """The plan of a benchmark case (:mod:`detops.cases`) at its GPU shape (``full``) or its small one, from
    its CPU twin in plan-only mode."""
    from . import cases

    g = torch.Generator().manual_seed(seed)
    call = case.build(torch.device("cpu"), g, full)
    args, kwargs = cases.fresh_args(call)
    return plan_summary(cases.twin_op(case.op), *args, plan_only=True, **kwargs)


def column(plan: Plan) -> str:
    """The report's plan column: stream operations (launches + memsets) / allocations / workspace MB."""
    t = plan.totals
    return f"{t['stream_ops']} / {t['allocations']} / {t['workspace_bytes'] / 1e6:.1f}"
