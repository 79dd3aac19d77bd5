"""What stock torch 2.11 does on CUDA under ``torch.use_deterministic_algorithms(True)``, per aten overload.

The table is keyed by aten overload (``"aten::name"`` for the default overload, ``"aten::name.overload"``
otherwise, the spelling of :func:`detops.covered_ops`). An overload that is not listed is deterministic in
stock. Listed overloads carry one or more :class:`StockEntry`; the first whose condition holds for the call's
arguments applies (bincount throws only with weights, ``_embedding_bag_dense_backward`` only for
``mode='max'``, ``scatter_reduce`` throws for ``prod`` and takes the slow fallback for ``sum``/``mean``).

Whether a throwing overload is covered by detops is not recorded here: :mod:`detops.audit` asks
:func:`detops.covered_ops` at run time.

How the table was checked against 2.11.0: every ``alertNotDeterministic("<caller>")`` call named below was
read in PyTorch's CUDA sources, and each caller string was then looked up in the shipped
``libtorch_cuda.so`` of torch 2.11.0+cu130 (the literal is present exactly when the alert is compiled in).
Two alerts listed for older releases are gone in 2.11 and are kept here as deterministic entries, so the GPU
check (``tests/python/test_audit.py``, marker ``gpu``) also confirms they run:
``reflection_pad2d_backward`` (alert removed upstream) and ``cumsum`` (no ``cumsum_cuda_kernel`` alert).
``cudnn_grid_sampler_backward`` (kind ``ATOMICS``) was read in the disassembly instead, since its name is also
its checks' caller string: 2.11's kernel makes no ``alertNotDeterministic`` call. The same trap hid
``adaptive_max_pool3d_backward_cuda`` (its ``AT_DISPATCH`` name): a GPU run (H200, 2026-11-26) found that call
does not throw, and it is listed as ``ATOMICS`` where the windows overlap. Every other entry was checked there
against a real call under the flag (``tests/python/test_audit.py``, marker ``gpu``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

TORCH_VERSION = "2.11"

THROWS = "throws"
SLOW = "slow"
DETERMINISTIC = "deterministic"
ATOMICS = "atomics"  # no alert and no throw, but floating-point atomics: the bits vary from run to run

Condition = Callable[[Sequence[Any], Mapping[str, Any]], bool]


@dataclasses.dataclass(frozen=True)
class StockEntry:
    """Stock behaviour of one aten overload on CUDA under the deterministic flag."""

    kind: str  # THROWS, SLOW, ATOMICS or DETERMINISTIC
    # the alertNotDeterministic caller string (THROWS), what stock runs instead (SLOW), or the kernel that
    # adds with atomics without an alert (ATOMICS)
    alert: str
    when: str = ""  # the condition, in words ("" = always)
    applies: Optional[Condition] = None  # None = always
    note: str = ""
    # What a direct aten call on CUDA does with the flag on (the GPU check): differs from `kind` where
    # torch.nn.functional routes module calls around the kernel (F.interpolate, F.pad on CUDA).
    direct_call_throws: Optional[bool] = None
    wave: int = 0  # 1 or 2: the DESIGN.md §1 wave; 0 for the slow fallbacks
    # The overload whose detops override covers this one, when the stock CUDA kernel of this overload calls
    # it (e.g. _embedding_bag_backward -> _embedding_bag_dense_backward); "" = the overload itself.
    covered_by: str = ""

    def matches(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
        return self.applies is None or bool(self.applies(args, kwargs))

    @property
    def throws_when_called_directly(self) -> bool:
        if self.direct_call_throws is not None:
            return self.direct_call_throws
        return self.kind == THROWS


def argument(args: Sequence[Any], kwargs: Mapping[str, Any], index: int, name: str, default: Any = None) -> Any:
    """Argument ``name`` (position ``index`` in the schema) of a dispatched call."""
    if name in kwargs:
        return kwargs[name]
    if index < len(args):
        return args[index]
    return default


def _arg_is(index: int, name: str, predicate: Callable[[Any], bool], default: Any = None) -> Condition:
    return lambda args, kwargs: predicate(argument(args, kwargs, index, name, default))


_DECOMPOSED_NOTE = (
    "{module} on CUDA takes a Python decomposition under the flag (backward via index_put, deterministic "
    "and slow); a direct aten call of this overload throws ({alert})"
)


def _throws(alert: str, wave: int, when: str = "", applies: Optional[Condition] = None, note: str = "",
            covered_by: str = "") -> StockEntry:
    return StockEntry(THROWS, alert, when=when, applies=applies, note=note, wave=wave, covered_by=covered_by)


def _slow(what: str, when: str = "", applies: Optional[Condition] = None, note: str = "") -> StockEntry:
    return StockEntry(SLOW, what, when=when, applies=applies, note=note)


def _atomics(kernel: str, note: str = "", covered_by: str = "") -> StockEntry:
    return StockEntry(ATOMICS, kernel, note=note, wave=2, covered_by=covered_by)


def _decomposed(alert: str, module: str) -> StockEntry:
    return StockEntry(SLOW, alert, note=_DECOMPOSED_NOTE.format(module=module, alert=alert),
                      direct_call_throws=True, wave=2)


def _overloads(names: str, *entries: StockEntry) -> Dict[str, Tuple[StockEntry, ...]]:
    return {f"aten::{name}": tuple(entries) for name in names.split()}


_WEIGHTS_GIVEN = _arg_is(1, "weights", lambda w: w is not None)
_MODE_MAX = _arg_is(7, "mode", lambda m: m == 2)  # EmbeddingBag modes: 0 sum, 1 mean, 2 max


def _dense_mode_max(args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    return argument(args, kwargs, 8, "mode") == 2 and not argument(args, kwargs, 9, "sparse", False)
_REDUCTION_NOT_NONE = _arg_is(3, "reduction", lambda r: r != 0, 1)
_REDUCE_PROD = _arg_is(4, "reduce", lambda r: r == "prod")
_REDUCE_SUM_MEAN = _arg_is(4, "reduce", lambda r: r in ("sum", "mean"))
_NO_ACCUMULATE = _arg_is(3, "accumulate", lambda a: not a, False)
_REDUCE_MULTIPLY = _arg_is(4, "reduce", lambda r: r == "multiply")


def _max_pool3d_windows_overlap(args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """adaptive_max_pool3d_backward(grad_output, self, indices): stock's atomic kernel runs when an input size
    is not a multiple of its output size."""
    grad, x = argument(args, kwargs, 0, "grad_output"), argument(args, kwargs, 1, "self")
    if grad is None or x is None:
        return True
    return any(i % o != 0 for i, o in zip(x.shape[-3:], grad.shape[-3:]) if o > 0)


STOCK_TABLE: Dict[str, Tuple[StockEntry, ...]] = {
    # Wave 1 (DESIGN.md §1).
    **_overloads("_adaptive_avg_pool2d_backward _adaptive_avg_pool2d_backward.out",
                 _throws("adaptive_avg_pool2d_backward_cuda", 1)),
    **_overloads("adaptive_avg_pool3d_backward.grad_input",
                 _throws("adaptive_avg_pool3d_backward_out_cuda", 1)),
    **_overloads("_adaptive_avg_pool3d_backward _adaptive_avg_pool3d_backward.out",
                 _throws("adaptive_avg_pool3d_backward_cuda", 1)),
    **_overloads("adaptive_max_pool2d_backward adaptive_max_pool2d_backward.grad_input",
                 _throws("adaptive_max_pool2d_backward_cuda", 1)),
    # No alert in 2.11 (its caller string is also the kernel's dispatch name, so the library scan found it):
    # seen on an H200, where the call under the flag ran. Overlapping windows take the atomicAdd kernel.
    **_overloads("adaptive_max_pool3d_backward adaptive_max_pool3d_backward.grad_input",
                 StockEntry(ATOMICS, "atomicadaptivemaxgradinput", when="when windows overlap (an input size "
                            "not a multiple of its output size)", applies=_max_pool3d_windows_overlap, wave=1),
                 StockEntry(DETERMINISTIC, "adaptivemaxgradinput", wave=1)),
    **_overloads("avg_pool3d_backward avg_pool3d_backward.grad_input",
                 _throws("avg_pool3d_backward_cuda", 1)),
    **_overloads("max_pool3d_with_indices_backward max_pool3d_with_indices_backward.grad_input",
                 _throws("max_pool3d_with_indices_backward_out_cuda", 1)),
    **_overloads("fractional_max_pool2d_backward fractional_max_pool2d_backward.grad_input",
                 _throws("fractional_max_pool2d_backward_cuda", 1)),
    **_overloads("fractional_max_pool3d_backward fractional_max_pool3d_backward.grad_input",
                 _throws("fractional_max_pool3d_backward_out_cuda", 1)),
    **_overloads("_ctc_loss_backward _ctc_loss_backward.Tensor _ctc_loss_backward.out",
                 _throws("ctc_loss_backward_gpu", 1)),
    **_overloads("_embedding_bag_dense_backward _embedding_bag_dense_backward.out",
                 _throws("embedding_bag_backward_cuda_max", 1, when="mode='max'", applies=_MODE_MAX)),
    # EmbeddingBag's backward formula calls _embedding_bag_backward, whose CPU and CUDA kernels (not a
    # decomposition) call _embedding_bag_dense_backward when sparse=False.
    **_overloads("_embedding_bag_backward",
                 _throws("embedding_bag_backward_cuda_max", 1, when="mode='max', sparse=False",
                         applies=_dense_mode_max, note="via _embedding_bag_dense_backward",
                         covered_by="aten::_embedding_bag_dense_backward")),
    **_overloads("bincount bincount.out",
                 _throws("_bincount_cuda", 1, when="with weights", applies=_WEIGHTS_GIVEN)),
    # Wave 2.
    **_overloads("histc histc.out", _throws("_histc_cuda with floating point input", 2)),
    **_overloads("nll_loss2d_forward nll_loss2d_forward.output",
                 _throws("nll_loss2d_forward_out_cuda_template", 2, when="reduction != 'none'",
                         applies=_REDUCTION_NOT_NONE)),
    **_overloads("put_", _throws("put_", 2)),
    # put and put.out have no CUDA kernel: stock's composite kernel clones self and calls put_.
    **_overloads("put put.out", _throws("put_", 2, note="via put_", covered_by="aten::put_")),
    # max_unpool: stock's CPU kernels throw under the flag too (detops.covered_cpu_ops()).
    **_overloads("max_unpool2d max_unpool2d.out",
                 _throws("max_unpooling2d_forward_out", 2, note="on the CPU too")),
    **_overloads("max_unpool3d max_unpool3d.out",
                 _throws("max_unpooling3d_forward_out", 2, note="on the CPU too")),
    **_overloads("reflection_pad1d_backward reflection_pad1d_backward.grad_input",
                 _throws("reflection_pad1d_backward_out_cuda", 2)),
    **_overloads("reflection_pad3d_backward reflection_pad3d_backward.grad_input",
                 _throws("reflection_pad3d_backward_out_cuda", 2)),
    **_overloads("replication_pad1d_backward replication_pad1d_backward.grad_input",
                 _decomposed("replication_pad1d_backward_cuda", "F.pad(mode='replicate')")),
    **_overloads("replication_pad2d_backward replication_pad2d_backward.grad_input",
                 _decomposed("replication_pad2d_backward_cuda", "F.pad(mode='replicate')")),
    **_overloads("replication_pad3d_backward replication_pad3d_backward.grad_input",
                 _decomposed("replication_pad3d_backward_cuda", "F.pad(mode='replicate')")),
    **_overloads("upsample_linear1d_backward upsample_linear1d_backward.grad_input",
                 _throws("upsample_linear1d_backward_out_cuda", 2)),
    **_overloads("upsample_bicubic2d_backward upsample_bicubic2d_backward.grad_input",
                 _throws("upsample_bicubic2d_backward_out_cuda", 2)),
    **_overloads("upsample_bilinear2d_backward upsample_bilinear2d_backward.grad_input",
                 _decomposed("upsample_bilinear2d_backward_out_cuda", "F.interpolate(mode='bilinear')")),
    **_overloads("upsample_trilinear3d_backward upsample_trilinear3d_backward.grad_input",
                 _decomposed("upsample_trilinear3d_backward_out_cuda", "F.interpolate(mode='trilinear')")),
    **_overloads("_upsample_bilinear2d_aa_backward _upsample_bilinear2d_aa_backward.grad_input",
                 _throws("upsample_bilinear2d_aa_backward_out_cuda", 2)),
    **_overloads("_upsample_bicubic2d_aa_backward _upsample_bicubic2d_aa_backward.grad_input",
                 _throws("upsample_bicubic2d_aa_backward_out_cuda", 2)),
    **_overloads("grid_sampler_2d_backward",
                 _throws("grid_sampler_2d_backward_cuda", 2,
                         note="F.grid_sample may take cuDNN instead (4-D, bilinear, zeros, align_corners=True)")),
    **_overloads("grid_sampler_3d_backward", _throws("grid_sampler_3d_backward_cuda", 2)),
    # The .out overloads have no CUDA kernel: stock's composite kernel calls the functional one.
    **_overloads("grid_sampler_2d_backward.out",
                 _throws("grid_sampler_2d_backward_cuda", 2, note="via grid_sampler_2d_backward",
                         covered_by="aten::grid_sampler_2d_backward")),
    **_overloads("grid_sampler_3d_backward.out",
                 _throws("grid_sampler_3d_backward_cuda", 2, note="via grid_sampler_3d_backward",
                         covered_by="aten::grid_sampler_3d_backward")),
    # F.grid_sample's cuDNN route (4-D, bilinear, zeros, align_corners=True, C <= 1024): no alert in 2.11, but
    # cudnnSpatialTfSamplerBackward accumulates the input gradient with atomics.
    **_overloads("cudnn_grid_sampler_backward",
                 _atomics("cudnnSpatialTfSamplerBackward",
                          note="F.grid_sample's cuDNN route; no alert, atomics (bits vary from run to run)")),
    **_overloads("cudnn_grid_sampler_backward.out",
                 _atomics("cudnnSpatialTfSamplerBackward", note="via cudnn_grid_sampler_backward",
                          covered_by="aten::cudnn_grid_sampler_backward")),
    **_overloads("index_reduce index_reduce_ index_reduce.out", _throws("index_reduce_cuda", 2)),
    **_overloads("median.dim_values nanmedian.dim_values", _throws("median CUDA with indices output", 2)),
    # median.dim and nanmedian.dim have no CUDA kernel: stock's composite kernel calls the .dim_values overload.
    **_overloads("median.dim", _throws("median CUDA with indices output", 2, note="via median.dim_values",
                                       covered_by="aten::median.dim_values")),
    **_overloads("nanmedian.dim", _throws("median CUDA with indices output", 2, note="via nanmedian.dim_values",
                                          covered_by="aten::nanmedian.dim_values")),
    **_overloads("scatter_reduce.two scatter_reduce_.two scatter_reduce.two_out",
                 _throws("scatter_reduce_cuda_prod_", 2, when="reduce='prod'", applies=_REDUCE_PROD),
                 _slow("_scatter_via_index_put (sorts every element)", when="reduce='sum' or 'mean'",
                       applies=_REDUCE_SUM_MEAN)),
    # Stock deterministic fallbacks (no throw, slow).
    **_overloads("index_add index_add_ index_add.out",
                 _slow("index_put_(accumulate=True) of source * alpha (full copy, int64 index, sort)")),
    **_overloads("scatter_add scatter_add_ scatter_add.out",
                 _slow("_scatter_via_index_put (arange per non-scatter dim, sorts every element)")),
    **_overloads("scatter.src scatter_.src scatter.src_out", _slow("_scatter_via_index_put")),
    # scatter_ with a tensor src and reduce='add' takes the sort fallback; 'multiply' reaches the atomic kernel.
    **_overloads("scatter.reduce scatter_.reduce scatter.reduce_out",
                 _throws("scatter_reduce_cuda_kernel", 2, when="reduce='multiply'", applies=_REDUCE_MULTIPLY),
                 _slow("_scatter_via_index_put (sorts every element)", when="reduce='add'")),
    # One scalar for every destination: whatever the order of the writes (or of the atomic adds and
    # multiplies of that one value), the bits are the same. detops covers them for CPU == CUDA bits.
    **_overloads("scatter.value scatter_.value scatter.value_out scatter.value_reduce scatter_.value_reduce "
                 "scatter.value_reduce_out",
                 StockEntry(DETERMINISTIC, "scatter_fill_cuda_ (one value written or combined, any order)")),
    **_overloads("index_copy index_copy_ index_copy.out", _slow("index_put_ with a sort")),
    **_overloads("index_put index_put_ index_put.out _index_put_impl_",
                 _slow("sort-based index_put", when="accumulate=False", applies=_NO_ACCUMULATE)),
    # Alerts of older releases that 2.11 no longer raises (kept for the GPU check).
    **_overloads("reflection_pad2d_backward reflection_pad2d_backward.grad_input",
                 StockEntry(DETERMINISTIC, "reflection_pad2d_backward_out_cuda",
                            note="alert removed before 2.11", wave=2)),
    **_overloads("cumsum cumsum_ cumsum.out",
                 StockEntry(DETERMINISTIC, "cumsum_cuda_kernel", note="no alert in 2.11", wave=2)),
}


def lookup(overload: str, args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None) -> Optional[StockEntry]:
    """The entry that applies to a call of ``overload`` with these arguments; None: deterministic in stock."""
    for entry in STOCK_TABLE.get(overload, ()):
        if entry.matches(args, kwargs or {}):
            return entry
    return None
