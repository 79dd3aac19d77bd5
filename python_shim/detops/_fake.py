"""Fake (meta) kernels of the ``torch.ops.detops`` twins, for fake tensors, ``torch.compile`` and
``torch.library.opcheck``.

One function per aten operator gives the result of its functional overload (shape, dtype, strides, as the
real front end returns it); the in-place and ``.out``/``.grad_input`` overloads are derived from the schema:
an in-place overload returns ``self``, an out overload resizes its out arguments to the functional results.
Every overload in :func:`detops.covered_ops` gets one (``tests/python/test_compile.py`` checks it).

The in-place and out twins keep aten's schemas, whose results alias an argument (``-> Tensor(a!)``); torch
2.11 does not functionalize custom operators with aliased results by itself, so each gets a Functionalize
kernel (:mod:`detops._functionalize`) that calls the functional overload named in
:data:`FUNCTIONAL_OVERLOADS` and stores its result into the written argument.
"""

from __future__ import annotations

from typing import Any, Callable, Dict

import torch
from torch._prims_common import suggest_memory_format

__all__ = ["FUNCTIONAL_OVERLOADS", "FUNCTIONAL_RESULTS", "register_all"]


def _contiguous_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(t, memory_format=torch.contiguous_format)


def _like_self(self, *args, **kwargs) -> torch.Tensor:
    return _contiguous_like(self)


def _pool_like_self(grad_output, self, *args, **kwargs) -> torch.Tensor:
    return _contiguous_like(self)


def _pool_like_self_in_its_format(grad_output, self, *args, **kwargs) -> torch.Tensor:
    # Stock's channels-last-capable kernels return self's suggested memory format (ops/pooling.cpp in_format).
    return torch.empty_like(self, memory_format=suggest_memory_format(self))


def _bincount(self, weights=None, minlength=0) -> torch.Tensor:
    # The length is max(self) + 1 or minlength: data-dependent.
    length = torch.library.get_ctx().new_dynamic_size()
    if weights is None:
        dtype = torch.int64
    else:
        dtype = torch.float32 if weights.dtype == torch.float32 else torch.float64
    return self.new_empty((length,), dtype=dtype)


def _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                                  scale_grad_by_freq, mode, per_sample_weights, padding_idx=-1) -> torch.Tensor:
    return grad.new_empty((num_weights, grad.size(1)))


def _ctc_loss_backward(grad, log_probs, *args, **kwargs) -> torch.Tensor:
    return _contiguous_like(log_probs)


def _histc(self, bins=100, min=0, max=0) -> torch.Tensor:
    return self.new_empty((bins,))


def _nll_loss2d_forward(self, target, weight=None, reduction=1, ignore_index=-100):
    # (output, total_weight): output is [N, H, W] for reduction 'none' (0), else a scalar.
    shape = (self.size(0), self.size(2), self.size(3)) if reduction == 0 else ()
    return self.new_empty(shape), self.new_empty(())


def _upsample_bilinear2d_aa_backward(grad_output, output_size, input_size, *args, **kwargs) -> torch.Tensor:
    # Stock's result: input_size in grad_output's suggested memory format (ops/upsample_aa.cpp).
    return grad_output.new_empty(list(input_size)).contiguous(memory_format=suggest_memory_format(grad_output))


def _upsample_bicubic2d_aa_backward(grad_output, output_size, input_size, *args, **kwargs) -> torch.Tensor:
    # Stock's result: input_size, contiguous whatever grad_output's layout.
    return grad_output.new_empty(list(input_size))


def _grid_sampler_backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask):
    # (grad_input, grad_grid), both contiguous; grad_input is None when output_mask[0] is false, as in stock.
    grad_input = _contiguous_like(input) if output_mask[0] else None
    return grad_input, _contiguous_like(grid)


def _cudnn_grid_sampler_backward(self, grid, grad_output):
    return _contiguous_like(self), _contiguous_like(grid)


def _upsample_backward(grad_output, output_size, input_size, *args, **kwargs) -> torch.Tensor:
    return grad_output.new_empty(input_size)


def _upsample_backward_in_grad_format(grad_output, output_size, input_size, *args, **kwargs) -> torch.Tensor:
    # Stock's bilinear and trilinear backwards return grad_output's suggested memory format.
    result = grad_output.new_empty(input_size)
    return result.contiguous(memory_format=suggest_memory_format(grad_output))


def _median(self, dim, keepdim=False):
    # (values, indices): self's shape without dim (size 1 with keepdim); a 0-d self gives 0-d results.
    shape = list(self.shape)
    ndim = max(len(shape), 1)
    if not -ndim <= dim < ndim:  # stock's maybe_wrap_dim
        raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got {dim})")
    if shape:
        d = dim % len(shape)
        if keepdim:
            shape[d] = 1
        else:
            del shape[d]
    return self.new_empty(shape), self.new_empty(shape, dtype=torch.int64)


def _max_unpool2d(self, indices, output_size):
    # A 4-d input keeps its suggested memory format (channels-last in, channels-last out), as stock.
    out = self.new_empty((*self.shape[:-2], *output_size))
    if self.dim() == 4:
        out = out.contiguous(memory_format=suggest_memory_format(self))
    return out


def _max_unpool3d(self, indices, output_size, stride, padding):
    return self.new_empty((*self.shape[:-3], *output_size))


# The functional result of each aten operator detops covers, by name (no overload): a tensor, or a tuple for
# an operator with several results (an out overload then resizes its out arguments in order).
FUNCTIONAL_RESULTS: Dict[str, Callable[..., Any]] = {
    "index_add": _like_self,
    "index_add_": _like_self,
    "scatter_add": _like_self,
    "scatter_add_": _like_self,
    "bincount": _bincount,
    "_embedding_bag_dense_backward": _embedding_bag_dense_backward,
    "_adaptive_avg_pool2d_backward": _pool_like_self_in_its_format,
    "_adaptive_avg_pool3d_backward": _pool_like_self,
    "adaptive_avg_pool3d_backward": _pool_like_self,
    "avg_pool3d_backward": _pool_like_self,
    "adaptive_max_pool2d_backward": _pool_like_self_in_its_format,
    "adaptive_max_pool3d_backward": _pool_like_self,
    "fractional_max_pool2d_backward": _pool_like_self,
    "fractional_max_pool3d_backward": _pool_like_self,
    "max_pool3d_with_indices_backward": _pool_like_self_in_its_format,
    "_ctc_loss_backward": _ctc_loss_backward,
    "histc": _histc,
    "put_": _like_self,
    "index_copy": _like_self,
    "index_copy_": _like_self,
    "nll_loss2d_forward": _nll_loss2d_forward,
    "scatter_reduce": _like_self,
    "scatter_reduce_": _like_self,
    "index_reduce": _like_self,
    "index_reduce_": _like_self,
    "grid_sampler_2d_backward": _grid_sampler_backward,
    "grid_sampler_3d_backward": _grid_sampler_backward,
    "cudnn_grid_sampler_backward": _cudnn_grid_sampler_backward,
    "scatter": _like_self,
    "scatter_": _like_self,
    "_index_put_impl_": _like_self,
    "max_unpool2d": _max_unpool2d,
    "max_unpool3d": _max_unpool3d,
    "median": _median,
    "nanmedian": _median,
    **{f"{kind}_pad{n}d_backward": _pool_like_self_in_its_format
       for kind in ("reflection", "replication") for n in (1, 2, 3)},
    "_upsample_bilinear2d_aa_backward": _upsample_bilinear2d_aa_backward,
    "_upsample_bicubic2d_aa_backward": _upsample_bicubic2d_aa_backward,
    "upsample_linear1d_backward": _upsample_backward,
    "upsample_bicubic2d_backward": _upsample_backward,
    "upsample_bilinear2d_backward": _upsample_backward_in_grad_format,
    "upsample_trilinear3d_backward": _upsample_backward_in_grad_format,
}


# The functional overload whose result each writing twin (in-place, .out, .grad_input) stores into the
# argument it writes: what detops._functionalize calls for it under torch.compile and opcheck. Keys and values
# are spelled as in covered_ops(); "detops::put", "detops::_index_put_impl", "detops::median_dim" and
# "detops::nanmedian_dim" are functional companions detops defines for put_, _index_put_impl_ and the
# .dim_values overloads, which have no functional aten overload covered. A new writing overload adds one line.
FUNCTIONAL_OVERLOADS: Dict[str, str] = {
    "aten::index_add_": "aten::index_add",
    "aten::index_add.out": "aten::index_add",
    "aten::scatter_add_": "aten::scatter_add",
    "aten::scatter_add.out": "aten::scatter_add",
    "aten::adaptive_avg_pool3d_backward.grad_input": "aten::_adaptive_avg_pool3d_backward",
    "aten::avg_pool3d_backward.grad_input": "aten::avg_pool3d_backward",
    "aten::adaptive_max_pool2d_backward.grad_input": "aten::adaptive_max_pool2d_backward",
    "aten::adaptive_max_pool3d_backward.grad_input": "aten::adaptive_max_pool3d_backward",
    "aten::fractional_max_pool2d_backward.grad_input": "aten::fractional_max_pool2d_backward",
    "aten::fractional_max_pool3d_backward.grad_input": "aten::fractional_max_pool3d_backward",
    "aten::max_pool3d_with_indices_backward.grad_input": "aten::max_pool3d_with_indices_backward",
    "aten::histc.out": "aten::histc",
    "aten::put_": "detops::put",
    "aten::index_copy_": "aten::index_copy",
    "aten::index_copy.out": "aten::index_copy",
    "aten::nll_loss2d_forward.output": "aten::nll_loss2d_forward",
    "aten::scatter_reduce_.two": "aten::scatter_reduce.two",
    "aten::scatter_reduce.two_out": "aten::scatter_reduce.two",
    "aten::index_reduce_": "aten::index_reduce",
    "aten::index_reduce.out": "aten::index_reduce",
    "aten::_upsample_bilinear2d_aa_backward.grad_input": "aten::_upsample_bilinear2d_aa_backward",
    "aten::_upsample_bicubic2d_aa_backward.grad_input": "aten::_upsample_bicubic2d_aa_backward",
    "aten::median.dim_values": "detops::median_dim",
    "aten::nanmedian.dim_values": "detops::nanmedian_dim",
    "aten::max_unpool2d.out": "aten::max_unpool2d",
    "aten::max_unpool3d.out": "aten::max_unpool3d",
    **{f"aten::{kind}_pad{n}d_backward.grad_input": f"aten::{kind}_pad{n}d_backward"
       for kind in ("reflection", "replication") for n in (1, 2, 3)},
    **{f"aten::upsample_{kind}_backward.grad_input": f"aten::upsample_{kind}_backward"
       for kind in ("linear1d", "bilinear2d", "bicubic2d", "trilinear3d")},
    "aten::_index_put_impl_": "detops::_index_put_impl",
    **{f"aten::scatter{writing}": f"aten::scatter.{overload}"
       for overload in ("src", "value", "reduce", "value_reduce")
       for writing in (f"_.{overload}", f".{overload}_out")},
}


def _fake_for(overload: torch._ops.OpOverload, result: Callable[..., Any]) -> Callable[..., Any]:
    schema = overload._schema
    written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    out_args = [a.name for a in schema.arguments if a.kwarg_only and a.name in written]
    if out_args:

        def fake_out(*args, **kwargs):
            outs = [kwargs.pop(name) for name in out_args]
            expected = result(*args, **kwargs)
            expected = expected if isinstance(expected, tuple) else (expected,)
            for out, want in zip(outs, expected):
                if out.shape != want.shape:
                    out.resize_(want.shape)
            return tuple(outs) if len(outs) > 1 else outs[0]

        return fake_out
    if written:

        def fake_inplace(self, *args, **kwargs):
            return self

        return fake_inplace
    return result


def register_all(covered) -> list:
    """Registers the fake kernel of every twin in ``covered`` (``aten::name[.overload]`` spellings) that
    has one; returns those without."""
    missing = []
    for op in covered:
        name, _, overload = op.split("::", 1)[1].partition(".")
        if name not in FUNCTIONAL_RESULTS:
            missing.append(op)
            continue
        twin = getattr(getattr(torch.ops.detops, name), overload or "default")
        torch.library.register_fake(twin, _fake_for(twin, FUNCTIONAL_RESULTS[name]), allow_override=True)
    return missing
