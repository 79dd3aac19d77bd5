"""``detops.audit(fn, *args)``: which aten overloads a model hits, and what each does on CUDA under the flag.

``fn`` runs once (forward, then backward if its result requires grad) under a ``TorchDispatchMode`` that
records every aten overload dispatched, with its arguments. Each call is classified from the stock table of
the pinned torch version (:mod:`detops.stock_table`) and :func:`detops.covered_ops`, so the answer to "will
my model throw under the flag on CUDA?" needs no GPU: CPU or meta tensors are enough.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch._C import DispatchKey
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from . import stock_table

DETERMINISTIC = "deterministic in stock"
SLOW_FALLBACK = "stock deterministic fallback (slow)"
ATOMICS_NO_ALERT = "no alert in stock, but atomics (bits vary from run to run)"
COVERED = "throws in stock, covered by detops"
NOT_COVERED = "throws, not covered"
CATEGORIES = (NOT_COVERED, COVERED, ATOMICS_NO_ALERT, SLOW_FALLBACK, DETERMINISTIC)


def overload_name(func: Any) -> str:
    """``aten::name`` for the default overload, ``aten::name.overload`` otherwise (as in covered_ops())."""
    schema = func._schema
    return schema.name if not schema.overload_name else f"{schema.name}.{schema.overload_name}"


@dataclasses.dataclass
class AuditEntry:
    """One aten overload hit by ``fn``, classified for CUDA under the deterministic flag."""

    op: str
    category: str
    count: int = 0
    covered: bool = False  # detops overrides this overload on CUDA
    phases: List[str] = dataclasses.field(default_factory=list)  # "forward" and/or "backward"
    alert: str = ""  # the stock alert string, or what the stock fallback runs
    when: str = ""  # the argument condition that made it apply
    note: str = ""

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class AuditResult:
    entries: List[AuditEntry]
    torch_version: str
    table_version: str
    detops_mode: str
    ran_backward: bool
    error: str = ""  # what fn (or its backward) raised: the overloads up to and including the failing one
    # "" for an eager run (audit); for audit_compiled, the graphs' source and whether route_compile was on.
    compiled: str = ""

    @property
    def complete(self) -> bool:
        return not self.error

    def ops(self, category: Optional[str] = None) -> List[str]:
        return [e.op for e in self.entries if category is None or e.category == category]

    def __getitem__(self, op: str) -> AuditEntry:
        matches = [e for e in self.entries if e.op == op]
        if not matches:
            raise KeyError(op)
        # An overload classified two ways (by arguments) reports its worst classification.
        return min(matches, key=lambda e: CATEGORIES.index(e.category))

    def __contains__(self, op: str) -> bool:
        return any(e.op == op for e in self.entries)

    @property
    def ok(self) -> bool:
        """True when the run completed and nothing would throw on CUDA under the flag with detops loaded."""
        return self.complete and not self.ops(NOT_COVERED)

    def as_dict(self) -> Dict[str, Any]:
        return {
            "torch_version": self.torch_version,
            "table_version": self.table_version,
            "detops_mode": self.detops_mode,
            "ran_backward": self.ran_backward,
            "compiled": self.compiled,
            "ok": self.ok,
            "error": self.error,
            "entries": [e.as_dict() for e in self.entries],
        }

    def format(self, show_deterministic: bool = False) -> str:
        lines = [
            f"detops audit: {len(self.entries)} aten overloads "
            f"({'forward + backward' if self.ran_backward else 'forward only'}), classified for CUDA under "
            f"torch.use_deterministic_algorithms(True), torch {self.table_version} table"
        ]
        if self.compiled:
            lines[0] = lines[0].replace("aten overloads", f"aten overloads in {self.compiled}", 1)
        for category in CATEGORIES:
            entries = [e for e in self.entries if e.category == category]
            if not entries:
                continue
            lines.append(f"  {category} ({len(entries)}):")
            if category == DETERMINISTIC and not show_deterministic:
                lines.append("    " + ", ".join(e.op for e in entries))
                continue
            for e in entries:
                detail = [f"x{e.count}", "/".join(e.phases)]
                if e.when:
                    detail.append(e.when)
                if category == SLOW_FALLBACK:
                    detail.append("detops kernel" if e.covered else (e.alert or ""))
                elif category == ATOMICS_NO_ALERT:
                    detail.append("detops kernel" if e.covered else f"stock: {e.alert}")
                elif e.alert:
                    detail.append(f'alert "{e.alert}"')
                if e.note:
                    detail.append(e.note)
                lines.append(f"    {e.op:48s} " + "; ".join(d for d in detail if d))
        if self.error:
            lines.append(f"INCOMPLETE: the run stopped at the last overload recorded: {self.error}")
        throwing = len(self.ops(NOT_COVERED))
        if self.ok:
            verdict = "OK: nothing throws under the flag with detops"
        elif throwing:
            verdict = f"NOT OK: {throwing} overload(s) throw under the flag even with detops"
        else:
            verdict = "NOT OK: the run did not complete; none of the overloads it reached throws under the flag"
        lines.append(verdict + (f" (detops mode is {self.detops_mode!r})" if self.detops_mode != "auto" else ""))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def classify(op: str, args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None,
             covered: Optional[Sequence[str]] = None) -> Tuple[str, bool, Optional[stock_table.StockEntry]]:
    """(category, covered by detops, the stock entry that applied) for one call of ``op``."""
    if covered is None:
        from . import covered_ops
        covered = covered_ops()
    entry = stock_table.lookup(op, args, kwargs or {})
    is_covered = (entry.covered_by if entry is not None and entry.covered_by else op) in covered
    if entry is None or entry.kind == stock_table.DETERMINISTIC:
        return DETERMINISTIC, is_covered, entry
    if entry.kind == stock_table.SLOW:
        return SLOW_FALLBACK, is_covered, entry
    if entry.kind == stock_table.ATOMICS:
        return ATOMICS_NO_ALERT, is_covered, entry
    return (COVERED if is_covered else NOT_COVERED), is_covered, entry


class _Recorder(TorchDispatchMode):
    def __init__(self, covered: Sequence[str]):
        super().__init__()
        self.covered = list(covered)
        self.phase = "forward"
        self.entries: Dict[Tuple[str, str], AuditEntry] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.has_kernel_for_dispatch_key(DispatchKey.CompositeImplicitAutograd):
            # A CompositeImplicitAutograd op that reaches the mode whole never runs a kernel of its own: run
            # its decomposition under the mode, so the overloads it calls are recorded instead.
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        self.record(func, args, kwargs)
        return func(*args, **kwargs)

    def record(self, func, args, kwargs, note: str = "") -> None:
        op = overload_name(func)
        category, is_covered, stock = classify(op, args, kwargs, self.covered)
        entry = self.entries.get((op, category))
        if entry is None:
            entry = AuditEntry(op=op, category=category, covered=is_covered)
            if stock is not None and category != DETERMINISTIC:
                entry.alert, entry.when, entry.note = stock.alert, stock.when, stock.note
            if note:
                entry.note = f"{entry.note}; {note}" if entry.note else note
            self.entries[(op, category)] = entry
        entry.count += 1
        if self.phase not in entry.phases:
            entry.phases.append(self.phase)


def _grad_outputs(out: Any) -> List[torch.Tensor]:
    leaves, _ = tree_flatten(out)
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]


def audit(fn: Callable[..., Any], *args: Any, raise_errors: bool = False, **kwargs: Any) -> AuditResult:
    """Runs ``fn(*args, **kwargs)`` once, and its backward if the result requires grad, recording every aten
    overload hit; classifies each for CUDA under ``torch.use_deterministic_algorithms(True)``.

    Works on CPU and meta tensors. Parameters' ``.grad`` are accumulated by the backward as in training;
    the deterministic flag is left as it is. If ``fn`` or its backward raises (e.g. an op without a meta
    kernel), the result holds the overloads recorded up to and including the failing one and ``error`` says
    what was raised (``ok`` is then False); ``raise_errors=True`` re-raises instead."""
    from . import covered_ops, get_mode

    recorder = _Recorder(covered_ops())
    ran_backward = False
    error = ""
    try:
        with recorder:
            out = fn(*args, **kwargs)
            outputs = _grad_outputs(out)
            if outputs:
                recorder.phase = "backward"
                ran_backward = True
                torch.autograd.backward(outputs, [torch.ones_like(t) for t in outputs])
    except Exception as exc:  # noqa: BLE001 - reported in the result
        if raise_errors:
            raise
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    entries = sorted(recorder.entries.values(), key=lambda e: (CATEGORIES.index(e.category), e.op))
    return AuditResult(entries=entries, torch_version=torch.__version__,
                       table_version=stock_table.TORCH_VERSION, detops_mode=get_mode(),
                       ran_backward=ran_backward, error=error)


# Overloads whose inductor lowering calls the aten op anyway under the deterministic flag (torch 2.11,
# torch/_inductor/lowering.py: index_put_impl_ and scatter_fallback / use_scatter_fallback).
_INDUCTOR_FALLS_BACK_UNDER_FLAG = ("index_put", "index_put_", "_unsafe_index_put", "scatter", "scatter_",
                                   "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_")
LOWERED_BY_INDUCTOR = "inductor lowers it to its own code (no aten call: the kernel named here does not run)"


def _lowered_by_inductor(func) -> bool:
    from torch._inductor import lowering

    if func not in lowering.lowerings or func in lowering.fallbacks:
        return False
    return func._schema.name.split("::", 1)[1] not in _INDUCTOR_FALLS_BACK_UNDER_FLAG


def _node_values(value: Any) -> Any:
    from torch.utils._pytree import tree_map_only

    return tree_map_only(torch.fx.Node, lambda n: n.meta.get("val"), value)


def audit_compiled(fn: Callable[..., Any], *args: Any, raise_errors: bool = False, **kwargs: Any) -> AuditResult:
    """Compiles ``fn`` with ``torch.compile`` as inductor would trace it and classifies the aten calls of
    the compiled graphs (forward, and backward if the result requires grad) like :func:`audit`.

    The graphs are the ones inductor receives: AOTAutograd with inductor's decomposition table
    (``torch._inductor.decomposition.select_decomp_table()``, so :func:`detops.route_compile` applies),
    traced with ``torch.use_deterministic_algorithms(True)`` (restored afterwards). A backend captures them
    and runs them eagerly, so no GPU and no code generation is needed: CPU or meta inputs are enough.
    Calls that inductor lowers to its own code rather than calling aten are noted ("inductor lowers it");
    the rest are extern aten calls, which detops' overrides catch on CUDA. ``torch._dynamo.reset()`` is
    called before and after (functions compiled earlier are compiled again on their next call)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor import lowering  # noqa: F401 - some of inductor's decompositions use it
    from torch._inductor.decomposition import select_decomp_table

    from . import compile_routed, covered_ops, get_mode

    graphs: List[Tuple[str, torch.fx.GraphModule]] = []

    def capture(phase: str):
        def compiler(gm: torch.fx.GraphModule, example_inputs):
            graphs.append((phase, gm))
            return make_boxed_func(gm.forward)

        return compiler

    backend = aot_autograd(fw_compiler=capture("forward"), bw_compiler=capture("backward"),
                           decompositions=select_decomp_table())
    flag = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    ran_backward = False
    error = ""
    torch._dynamo.reset()
    torch.use_deterministic_algorithms(True)
    try:
        out = torch.compile(fn, backend=backend)(*args, **kwargs)
        outputs = _grad_outputs(out)
        if outputs:
            ran_backward = True
            torch.autograd.backward(outputs, [torch.ones_like(t) for t in outputs])
    except Exception as exc:  # noqa: BLE001 - reported in the result
        if raise_errors:
            raise
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        torch.use_deterministic_algorithms(flag[0], warn_only=flag[1])
        torch._dynamo.reset()

    recorder = _Recorder(covered_ops())
    for phase, gm in graphs:
        recorder.phase = phase
        for node in gm.graph.nodes:
            if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                continue
            note = LOWERED_BY_INDUCTOR if _lowered_by_inductor(node.target) else ""
            recorder.record(node.target, _node_values(node.args), _node_values(node.kwargs), note)
    entries = sorted(recorder.entries.values(), key=lambda e: (CATEGORIES.index(e.category), e.op))
    routed = "on" if compile_routed() else "off"
    return AuditResult(entries=entries, torch_version=torch.__version__,
                       table_version=stock_table.TORCH_VERSION, detops_mode=get_mode(),
                       ran_backward=ran_backward, error=error,
                       compiled=f"the graphs inductor compiles (detops.route_compile {routed})")
