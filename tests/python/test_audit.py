"""detops.audit on CPU and meta tensors: small models that use each wave-1 op, an op detops does not cover,
the slow fallbacks; the stock table against torch 2.11's op registry; and (marker gpu) the table against
reality: every entry run on CUDA under the flag with mode "off" throws exactly when the table says so."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import detops
from conftest import assert_bitwise_equal
from detops import stock_table
from detops.audit import (ATOMICS_NO_ALERT, COVERED, DETERMINISTIC, NOT_COVERED, SLOW_FALLBACK, classify,
                          overload_name)

aten = torch.ops.aten
DEVICES = ["cpu", "meta"]


def _x(*shape, device="cpu", grad=True):
    g = torch.Generator().manual_seed(sum(shape))
    return torch.randn(*shape, generator=g).to(device).requires_grad_(grad)


def _module_case(module, *shape):
    def build(device):
        m = module().to(device)
        return m, (_x(*shape, device=device),)
    return build


def _ctc(tensor_lengths):
    def build(device):
        log_probs = _x(6, 2, 4, device=device, grad=False).log_softmax(2).detach().requires_grad_()
        targets = torch.tensor([[1, 2, 3], [2, 1, 0]]).to(device)
        lengths = ((6, 6), (3, 2))
        if tensor_lengths:
            lengths = tuple(torch.tensor(v).to(device) for v in lengths)
        loss = nn.CTCLoss(reduction="sum")
        return (lambda lp: loss(lp, targets, *lengths)), (log_probs,)
    return build


def _embedding_bag(mode):
    def build(device):
        bag = nn.EmbeddingBag(10, 4, mode=mode).to(device)
        indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]).to(device)
        offsets = torch.tensor([0, 4]).to(device)
        return bag, (indices, offsets)
    return build


# (name, builder(device) -> (fn, args), devices, expected overload, its expected category for CUDA under the
# flag with detops loaded, the stock alert it reports). Every wave-1 overload is covered today: an override
# that goes away must change this data (the categories are written out, not recomputed from the table).
WAVE1_CASES = [
    ("AdaptiveAvgPool2d", _module_case(lambda: nn.AdaptiveAvgPool2d((2, 3)), 1, 2, 5, 7), DEVICES,
     "aten::_adaptive_avg_pool2d_backward", COVERED, "adaptive_avg_pool2d_backward_cuda"),
    ("AdaptiveAvgPool3d", _module_case(lambda: nn.AdaptiveAvgPool3d((2, 2, 3)), 1, 2, 4, 5, 5), DEVICES,
     "aten::_adaptive_avg_pool3d_backward", COVERED, "adaptive_avg_pool3d_backward_cuda"),
    ("AdaptiveMaxPool2d", _module_case(lambda: nn.AdaptiveMaxPool2d(2), 1, 2, 5, 5), DEVICES,
     "aten::adaptive_max_pool2d_backward", COVERED, "adaptive_max_pool2d_backward_cuda"),
    ("AdaptiveMaxPool3d", _module_case(lambda: nn.AdaptiveMaxPool3d(2), 1, 2, 5, 5, 5), DEVICES,
     "aten::adaptive_max_pool3d_backward", ATOMICS_NO_ALERT, "atomicadaptivemaxgradinput"),
    ("AvgPool3d", _module_case(lambda: nn.AvgPool3d(2, stride=1), 1, 2, 4, 4, 4), DEVICES,
     "aten::avg_pool3d_backward", COVERED, "avg_pool3d_backward_cuda"),
    ("MaxPool3d", _module_case(lambda: nn.MaxPool3d(2, stride=1), 1, 2, 4, 4, 4), DEVICES,
     "aten::max_pool3d_with_indices_backward", COVERED, "max_pool3d_with_indices_backward_out_cuda"),
    ("FractionalMaxPool2d", _module_case(lambda: nn.FractionalMaxPool2d(2, output_size=3), 1, 2, 6, 6),
     DEVICES, "aten::fractional_max_pool2d_backward", COVERED, "fractional_max_pool2d_backward_cuda"),
    ("FractionalMaxPool3d", _module_case(lambda: nn.FractionalMaxPool3d(2, output_size=3), 1, 2, 6, 6, 6),
     DEVICES, "aten::fractional_max_pool3d_backward", COVERED, "fractional_max_pool3d_backward_out_cuda"),
    ("CTCLoss", _ctc(False), ["cpu"], "aten::_ctc_loss_backward", COVERED, "ctc_loss_backward_gpu"),
    ("CTCLoss with tensor lengths", _ctc(True), ["cpu"], "aten::_ctc_loss_backward.Tensor", COVERED,
     "ctc_loss_backward_gpu"),
    # Covered through the overload its kernel calls (the table's covered_by).
    ("EmbeddingBag max", _embedding_bag("max"), DEVICES, "aten::_embedding_bag_backward", COVERED,
     "embedding_bag_backward_cuda_max"),
    ("bincount with weights",
     lambda d: (lambda x, w: torch.bincount(x, w)), ["cpu"], "aten::bincount", COVERED, "_bincount_cuda"),
]


def _build(case_builder, name, device):
    if name == "bincount with weights":
        return case_builder(device), (torch.tensor([0, 1, 1, 3]), torch.tensor([0.5, 1.0, 2.0, 0.25]))
    return case_builder(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,builder,devices,op,category,alert", WAVE1_CASES, ids=[c[0] for c in WAVE1_CASES])
def test_wave1_ops_are_found_and_classified(name, builder, devices, op, category, alert, device):
    if device not in devices:
        pytest.skip(f"{name}: no meta kernel (data-dependent output size)")
    fn, args = _build(builder, name, device)
    result = detops.audit(fn, *args)
    assert op in result, result.format(show_deterministic=True)
    assert result[op].category == category, result.format()
    assert result[op].covered
    assert result[op].alert == alert
    assert result.ops(NOT_COVERED) == [], result.format()
    if result.error:  # an op without a meta kernel: recorded, then the run stops
        assert device == "meta" and "Meta" in result.error and "INCOMPLETE" in result.format()
        assert not result.ok
        with pytest.raises(NotImplementedError, match="Meta"):
            detops.audit(fn, *args, raise_errors=True)
    else:
        assert result.ok


@pytest.mark.parametrize("device", DEVICES)
def test_adaptive_avg_pool2d_is_covered_once_detops_overrides_it(monkeypatch, device):
    """The issue's example: nn.AdaptiveAvgPool2d backward -> _adaptive_avg_pool2d_backward, 'throws in stock,
    covered by detops' when covered_ops() lists it (decided at run time, not by the table)."""
    op = "aten::_adaptive_avg_pool2d_backward"
    covered = detops.covered_ops()
    monkeypatch.setattr(detops, "covered_ops", lambda: covered + [op])
    result = detops.audit(nn.AdaptiveAvgPool2d((2, 2)).to(device), _x(1, 3, 6, 6, device=device))
    assert result[op].category == COVERED and result[op].covered
    assert result[op].phases == ["backward"]
    assert result.ok
    monkeypatch.setattr(detops, "covered_ops", lambda: [o for o in covered if o != op])
    assert detops.audit(nn.AdaptiveAvgPool2d((2, 2)).to(device), _x(1, 3, 6, 6, device=device))[op].category \
        == NOT_COVERED


def test_embedding_bag_is_covered_through_the_dense_backward(monkeypatch):
    covered = detops.covered_ops()
    monkeypatch.setattr(detops, "covered_ops", lambda: covered + ["aten::_embedding_bag_dense_backward"])
    fn, args = _embedding_bag("max")("cpu")
    assert detops.audit(fn, *args)["aten::_embedding_bag_backward"].category == COVERED


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_variants_of_conditional_ops(device):
    fn, args = _embedding_bag("sum")(device)
    result = detops.audit(fn, *args)
    assert result["aten::_embedding_bag_backward"].category == DETERMINISTIC
    assert result.ok
    # AdaptiveAvgPool2d to 1x1 is a mean: nothing to throw.
    result = detops.audit(nn.AdaptiveAvgPool2d(1).to(device), _x(1, 3, 4, 4, device=device))
    assert "aten::_adaptive_avg_pool2d_backward" not in result and result.ok


def test_wave2b_ops_are_covered():
    """histc and put_ throw in stock and are covered (put through put_, which its composite kernel calls);
    index_copy takes stock's slow fallback, which detops replaces."""
    def fn(t):
        h = torch.histc(t, 5)
        p = torch.put(t, torch.tensor([0, 2, 2]), t[:3].clone())
        c = torch.zeros(5, device=t.device).index_copy(0, torch.tensor([0, 2, 0]), t[:3])
        return h, p, c

    result = detops.audit(fn, _x(20, grad=False))
    assert result["aten::histc"].category == COVERED
    assert result["aten::put"].category == COVERED and result["aten::put"].covered
    assert result["aten::index_copy"].category == SLOW_FALLBACK and result["aten::index_copy"].covered
    assert result.ops(NOT_COVERED) == [] and result.ok
    assert classify("aten::put_", (torch.zeros(3), torch.tensor([0]), torch.ones(1), True), {})[0] == COVERED
    assert classify("aten::histc.out", (torch.zeros(3),), {})[0] == COVERED


def test_bincount_without_weights_is_deterministic():
    result = detops.audit(torch.bincount, torch.tensor([0, 1, 1, 3]))
    assert result["aten::bincount"].category == DETERMINISTIC
    assert not result.ran_backward


@pytest.mark.parametrize("device", DEVICES)
def test_op_detops_does_not_cover(device):
    x = _x(1, 1, 4, 4, device=device)
    result = detops.audit(lambda t: F.interpolate(t, scale_factor=2, mode="bicubic"), x)
    op = "aten::upsample_bicubic2d_backward"
    if op in detops.covered_ops():
        pytest.skip(f"{op} is covered now")
    assert result[op].category == NOT_COVERED
    assert result[op].alert == "upsample_bicubic2d_backward_out_cuda"
    assert result["aten::upsample_bicubic2d"].category == DETERMINISTIC
    assert not result.ok
    assert result.ops(NOT_COVERED) == [op]
    text = result.format()
    assert "throws, not covered (1)" in text and op in text and "NOT OK" in text


@pytest.mark.parametrize("device", DEVICES)
def test_slow_fallbacks(device):
    def fn(x, index):
        y = torch.zeros(3, 4, device=x.device).index_add(0, index, x)
        z = torch.zeros(3, 4, device=x.device).scatter_reduce(0, index[:, None].expand(-1, 4), x, "sum")
        return y + z

    result = detops.audit(fn, _x(5, 4, device=device, grad=False), torch.tensor([0, 2, 2, 1, 0]).to(device))
    assert result["aten::index_add"].category == SLOW_FALLBACK
    assert result["aten::index_add"].covered is True  # detops overrides index_add on CUDA
    assert result["aten::scatter_reduce.two"].covered is True  # detops overrides scatter_reduce on CUDA
    assert result["aten::scatter_reduce.two"].category == SLOW_FALLBACK
    assert result["aten::scatter_reduce.two"].when == "reduce='sum' or 'mean'"
    assert result.ok


def test_scatter_reduce_by_reduction():
    covered = []
    args = (torch.zeros(3), 0, torch.tensor([0, 1]), torch.ones(2))  # reduce is argument 4
    assert classify("aten::scatter_reduce.two", args + ("prod",), {}, covered)[0] == NOT_COVERED
    assert classify("aten::scatter_reduce.two", args + ("mean",), {}, covered)[0] == SLOW_FALLBACK
    assert classify("aten::scatter_reduce.two", args + ("amax",), {}, covered)[0] == DETERMINISTIC
    assert classify("aten::scatter_reduce.two", args, {"reduce": "prod"}, covered)[0] == NOT_COVERED
    assert classify("aten::scatter_reduce.two", args + ("prod",), {}, ["aten::scatter_reduce.two"])[0] == COVERED


def test_interpolate_bilinear_and_replicate_pad_take_the_decomposition():
    x = _x(1, 1, 4, 4)
    result = detops.audit(lambda t: F.pad(F.interpolate(t, scale_factor=2, mode="bilinear"), (1, 1, 1, 1),
                                          mode="replicate"), x)
    for op in ("aten::upsample_bilinear2d_backward", "aten::replication_pad2d_backward"):
        assert result[op].category == SLOW_FALLBACK, op
        assert "decomposition" in result[op].note
    assert result["aten::replication_pad2d_backward"].covered  # reached on CUDA through detops.route_padding
    assert result.ok


def test_reflection_pads():
    result = detops.audit(lambda t: F.pad(t, (1, 1), mode="reflect"), _x(1, 2, 5))
    # Throws in stock, covered by detops: written out, not recomputed.
    assert result["aten::reflection_pad1d_backward"].category == COVERED
    assert result["aten::reflection_pad1d_backward"].alert == "reflection_pad1d_backward_out_cuda"
    assert result.ok
    result = detops.audit(lambda t: F.pad(t, (1, 1, 1, 1, 1, 1), mode="reflect"), _x(1, 2, 3, 3, 3))
    assert result["aten::reflection_pad3d_backward"].category == COVERED
    result = detops.audit(lambda t: F.pad(t, (1, 1, 1, 1), mode="reflect"), _x(1, 2, 5, 5))
    assert result["aten::reflection_pad2d_backward"].category == DETERMINISTIC  # alert gone in 2.11
    assert result["aten::reflection_pad2d_backward"].covered  # detops overrides it all the same


@pytest.mark.parametrize("device", DEVICES)
def test_grid_sample_backwards(device):
    """F.grid_sample off CUDA takes the native kernels: their backwards throw in stock and are covered. On CUDA
    the 4-D bilinear/zeros/align_corners=True call takes cuDNN, whose backward raises no alert but adds with
    atomics: its own category, covered by detops too."""
    x = _x(1, 2, 5, 5, device=device)
    theta = torch.tensor([[[0.9, 0.1, 0.05], [-0.1, 1.1, 0.0]]], device=device)
    grid = F.affine_grid(theta, [1, 2, 4, 4], align_corners=False)
    result = detops.audit(lambda t: F.grid_sample(t, grid, mode="bicubic", align_corners=False), x)
    assert result["aten::grid_sampler_2d_backward"].category == COVERED
    assert result["aten::grid_sampler_2d_backward"].alert == "grid_sampler_2d_backward_cuda"
    x3 = _x(1, 2, 3, 4, 5, device=device)
    grid3 = F.affine_grid(torch.eye(3, 4, device=device)[None], [1, 2, 2, 3, 4], align_corners=True)
    result = detops.audit(lambda t: F.grid_sample(t, grid3, align_corners=True), x3)
    assert result["aten::grid_sampler_3d_backward"].category == COVERED and result.ok

    def cudnn(t):  # stock has neither a CPU nor a meta kernel for it: recorded, then the run stops
        return aten.cudnn_grid_sampler_backward(t, grid.to("meta"), torch.ones(1, 2, 4, 4, device="meta"))

    result = detops.audit(cudnn, x.detach().to("meta"))
    entry = result["aten::cudnn_grid_sampler_backward"]
    assert entry.category == ATOMICS_NO_ALERT and entry.covered
    assert entry.alert == "cudnnSpatialTfSamplerBackward"
    assert result.ops(NOT_COVERED) == [] and result.error  # nothing throws under the flag
    text = result.format()
    assert ATOMICS_NO_ALERT in text and "detops kernel" in text


def test_atomics_category_without_detops():
    op = "aten::cudnn_grid_sampler_backward"
    category, covered, entry = classify(op, (), {}, [])
    assert category == ATOMICS_NO_ALERT and not covered and entry.kind == stock_table.ATOMICS
    assert classify(op + ".out", (), {}, [op])[:2] == (ATOMICS_NO_ALERT, True)  # through its functional
    assert classify("aten::grid_sampler_2d_backward.out", (), {}, ["aten::grid_sampler_2d_backward"])[0] == COVERED
    assert classify("aten::grid_sampler_3d_backward.out", (), {}, [])[0] == NOT_COVERED
    from detops import cases
    assert cases.stock_under_flag(op) == "no alert, atomics (cudnnSpatialTfSamplerBackward)"


def test_counts_phases_and_dict():
    lin = nn.Linear(4, 4)
    result = detops.audit(lambda x: lin(lin(x)).sum(), _x(2, 4))
    assert result["aten::addmm"].count == 2
    assert result["aten::addmm"].phases == ["forward"]
    assert "backward" in result["aten::mm"].phases
    data = result.as_dict()
    assert data["ran_backward"] and data["ok"] and data["table_version"] == "2.11"
    assert lin.weight.grad is not None


def test_kwargs_are_passed():
    result = detops.audit(torch.cumsum, torch.ones(3), dim=0)
    assert result["aten::cumsum"].category == DETERMINISTIC
    assert result.ops() == ["aten::cumsum"]


# ---- the table itself ----

def _resolve(key):
    name = key.split("::", 1)[1]
    base, _, overload = name.partition(".")
    return getattr(getattr(aten, base), overload or "default")


def test_every_table_key_is_an_aten_overload_of_this_torch():
    assert torch.__version__.startswith(stock_table.TORCH_VERSION + ".")
    for key in stock_table.STOCK_TABLE:
        op = _resolve(key)
        assert overload_name(op) == key


def test_table_lists_all_of_design_wave1():
    wave1 = {k for k, entries in stock_table.STOCK_TABLE.items() if any(e.wave == 1 for e in entries)}
    for key in ["_adaptive_avg_pool2d_backward", "adaptive_avg_pool3d_backward.grad_input",
                "_adaptive_avg_pool3d_backward", "adaptive_max_pool2d_backward",
                "adaptive_max_pool2d_backward.grad_input", "adaptive_max_pool3d_backward",
                "adaptive_max_pool3d_backward.grad_input", "avg_pool3d_backward", "avg_pool3d_backward.grad_input",
                "max_pool3d_with_indices_backward", "max_pool3d_with_indices_backward.grad_input",
                "fractional_max_pool2d_backward", "fractional_max_pool2d_backward.grad_input",
                "fractional_max_pool3d_backward", "fractional_max_pool3d_backward.grad_input",
                "_ctc_loss_backward", "_ctc_loss_backward.Tensor", "_embedding_bag_dense_backward", "bincount"]:
        assert f"aten::{key}" in wave1, key


# Direct-call samples for each table entry: builder(device) -> (args, kwargs), functional overloads; the
# in-place and out variants are derived from them.
def _t(*shape, device, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device)


def _pool_backward(forward, shape, *fargs):
    def build(d):
        x = _t(*shape, device=d)
        out = forward(x, *fargs)
        values, indices = out if isinstance(out, tuple) else (out, None)
        return x, values, indices
    return build


def _ctc_sample(tensor_lengths):
    def build(d):
        log_probs = _t(6, 2, 4, device=d).log_softmax(2)
        targets = torch.tensor([[1, 2, 3], [2, 1, 0]], device=d)
        lengths = ([6, 6], [3, 2])
        if tensor_lengths:
            lengths = tuple(torch.tensor(v, device=d) for v in lengths)
            nll, alpha = aten._ctc_loss.Tensor(log_probs, targets, *lengths, 0, False)
        else:
            nll, alpha = aten._ctc_loss(log_probs, targets, *lengths, 0, False)
        return (torch.ones(2, device=d), log_probs, targets, *lengths, nll, alpha, 0), {}
    return build


def _bag(d):
    weight = _t(10, 4, device=d)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9], device=d)
    offsets = torch.tensor([0, 4], device=d)
    out, offset2bag, bag_size, max_indices = aten._embedding_bag(weight, indices, offsets, False, 2)
    return torch.ones_like(out), indices, offsets, offset2bag, bag_size, max_indices


def _pool(name):
    def build(d):
        if name == "_adaptive_avg_pool2d_backward":
            x = _t(1, 2, 5, 7, device=d)
            return (torch.ones(1, 2, 2, 3, device=d), x), {}
        if name == "_adaptive_avg_pool3d_backward":
            x = _t(1, 2, 4, 5, 5, device=d)
            return (torch.ones(1, 2, 2, 2, 3, device=d), x), {}
        if name in ("adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward"):
            x = _t(1, 2, *([5] * (2 if "2d" in name else 3)), device=d)
            fwd = aten.adaptive_max_pool2d if "2d" in name else aten.adaptive_max_pool3d
            out, idx = fwd(x, [2] * (x.dim() - 2))
            return (torch.ones_like(out), x, idx), {}
        if name == "avg_pool3d_backward":
            x = _t(1, 1, 4, 4, 4, device=d)
            return (torch.ones(1, 1, 3, 3, 3, device=d), x, [2, 2, 2], [1, 1, 1], [0, 0, 0], False, True, None), {}
        if name == "max_pool3d_with_indices_backward":
            x = _t(1, 1, 4, 4, 4, device=d)
            args = ([2, 2, 2], [1, 1, 1], [0, 0, 0], [1, 1, 1], False)
            out, idx = aten.max_pool3d_with_indices(x, *args)
            return (torch.ones_like(out), x, *args, idx), {}
        if name in ("fractional_max_pool2d_backward", "fractional_max_pool3d_backward"):
            dims = 2 if "2d" in name else 3
            x = _t(1, 2, *([6] * dims), device=d)
            samples = torch.rand(1, 2, dims, generator=torch.Generator().manual_seed(1)).to(d)
            fwd = aten.fractional_max_pool2d if dims == 2 else aten.fractional_max_pool3d
            out, idx = fwd(x, [2] * dims, [3] * dims, samples)
            return (torch.ones_like(out), x, [2] * dims, [3] * dims, idx), {}
        raise KeyError(name)
    return build


def _pad(dims, grad_shape, shape, pad):
    return lambda d: ((torch.ones(*grad_shape, device=d), _t(*shape, device=d), pad), {})


def _upsample(grad_shape, out_size, in_size):
    return lambda d: ((torch.ones(*grad_shape, device=d), out_size, in_size, False), {})


def _unpool(dims):
    def build(d):
        x = _t(1, 1, *([4] * dims), device=d)
        fwd = aten.max_pool2d_with_indices if dims == 2 else aten.max_pool3d_with_indices
        out, idx = fwd(x, [2] * dims, [2] * dims)
        if dims == 2:
            return (out, idx, [4, 4]), {}
        return (out, idx, [4, 4, 4], [2, 2, 2], [0, 0, 0]), {}
    return build


def _grid(dims):
    def build(d):
        x = _t(1, 1, *([4] * dims), device=d)
        grid = torch.rand(1, *([3] * dims), dims, generator=torch.Generator().manual_seed(2)).to(d) * 2 - 1
        return (torch.ones(1, 1, *([3] * dims), device=d), x, grid, 0, 0, False, [True, True]), {}
    return build


def _cudnn_grid(d):
    x = _t(1, 1, 4, 4, device=d)
    grid = torch.rand(1, 3, 3, 2, generator=torch.Generator().manual_seed(2)).to(d) * 2 - 1
    return (x, grid, torch.ones(1, 1, 3, 3, device=d)), {}


def _scatterish(reduce=None):
    def build(d):
        self = _t(5, 3, device=d)
        index2d = torch.tensor([[0, 1, 0], [2, 0, 1], [0, 0, 0], [4, 4, 1]], device=d)
        src = _t(4, 3, device=d, seed=1)
        return (self, 0, index2d, src) + ((reduce,) if reduce else ()), {}
    return build


def _indexish(extra=()):
    def build(d):
        return (_t(5, 3, device=d), 0, torch.tensor([0, 2, 0, 4], device=d), _t(4, 3, device=d, seed=1),
                *extra), {}
    return build


# index_add and scatter_add, which stock runs through a deterministic fallback: 40 contributions into one
# element (two blocks of the order contract's tree) so that stock's one-at-a-time accumulation does not give
# detops' bits, and the GPU check that compares with the CPU twin tells the two apart.
def _hot_index_add(d):
    index = torch.tensor([0, 2, 0, 4] * 20, device=d)
    return (_t(5, 3, device=d), 0, index, _t(80, 3, device=d, seed=1)), {}


def _hot_scatter_add(d):
    index2d = torch.tensor([[0, 1, 0], [2, 0, 1], [0, 0, 0], [4, 4, 1]] * 20, device=d)
    return (_t(5, 3, device=d), 0, index2d, _t(80, 3, device=d, seed=1)), {}


SAMPLES = {
    **{n: _pool(n) for n in ["_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward",
                             "adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward", "avg_pool3d_backward",
                             "max_pool3d_with_indices_backward", "fractional_max_pool2d_backward",
                             "fractional_max_pool3d_backward"]},
    "_ctc_loss_backward": _ctc_sample(False),
    "_ctc_loss_backward.Tensor": _ctc_sample(True),
    "_embedding_bag_dense_backward": lambda d: (
        lambda g, i, o, o2b, bs, mi: ((g, i, o2b, bs, mi, 10, False, 2, None), {}))(*_bag(d)),
    "_embedding_bag_backward": lambda d: (
        lambda g, i, o, o2b, bs, mi: ((g, i, o, o2b, bs, mi, 10, False, 2, False, None), {}))(*_bag(d)),
    "bincount": lambda d: ((torch.tensor([0, 1, 1, 3], device=d), torch.tensor([0.5, 1.0, 2.0, 0.25], device=d)), {}),
    "histc": lambda d: ((_t(20, device=d),), {"bins": 5}),
    "nll_loss2d_forward": lambda d: ((_t(2, 3, 4, 4, device=d).log_softmax(1),
                                      torch.randint(0, 3, (2, 4, 4), generator=torch.Generator().manual_seed(3)).to(d),
                                      None, 1, -100), {}),
    "put": lambda d: ((_t(5, device=d), torch.tensor([0, 2, 2], device=d), _t(3, device=d, seed=1)), {}),
    "max_unpool2d": _unpool(2),
    "max_unpool3d": _unpool(3),
    "reflection_pad1d_backward": _pad(1, (1, 2, 9), (1, 2, 5), [2, 2]),
    "reflection_pad2d_backward": _pad(2, (1, 1, 6, 6), (1, 1, 4, 4), [1, 1, 1, 1]),
    "reflection_pad3d_backward": _pad(3, (1, 1, 5, 5, 5), (1, 1, 3, 3, 3), [1] * 6),
    "replication_pad1d_backward": _pad(1, (1, 2, 9), (1, 2, 5), [2, 2]),
    "replication_pad2d_backward": _pad(2, (1, 1, 6, 6), (1, 1, 4, 4), [1, 1, 1, 1]),
    "replication_pad3d_backward": _pad(3, (1, 1, 5, 5, 5), (1, 1, 3, 3, 3), [1] * 6),
    "upsample_linear1d_backward": _upsample((1, 1, 8), [8], [1, 1, 4]),
    "upsample_bilinear2d_backward": _upsample((1, 1, 8, 8), [8, 8], [1, 1, 4, 4]),
    "upsample_bicubic2d_backward": _upsample((1, 1, 8, 8), [8, 8], [1, 1, 4, 4]),
    "upsample_trilinear3d_backward": _upsample((1, 1, 4, 4, 4), [4, 4, 4], [1, 1, 2, 2, 2]),
    "_upsample_bilinear2d_aa_backward": _upsample((1, 1, 8, 8), [8, 8], [1, 1, 4, 4]),
    "_upsample_bicubic2d_aa_backward": _upsample((1, 1, 8, 8), [8, 8], [1, 1, 4, 4]),
    "grid_sampler_2d_backward": _grid(2),
    "grid_sampler_3d_backward": _grid(3),
    "cudnn_grid_sampler_backward": _cudnn_grid,
    "index_reduce": _indexish(("prod",)),
    "median.dim": lambda d: ((_t(4, 5, device=d), 1), {}),
    "nanmedian.dim": lambda d: ((_t(4, 5, device=d), 1), {}),
    "scatter_reduce.two": _scatterish("prod"),
    "index_add": _hot_index_add,
    "scatter_add": _hot_scatter_add,
    "scatter.src": _scatterish(),
    "scatter.value": lambda d: (_scatterish()(d)[0][:3] + (1.5,), {}),
    "scatter.reduce": lambda d: (_scatterish()(d)[0], {"reduce": "multiply"}),
    "scatter.value_reduce": lambda d: (_scatterish()(d)[0][:3] + (2.0,), {"reduce": "add"}),
    "index_copy": _indexish(),
    "index_put": lambda d: ((_t(5, 3, device=d), [torch.tensor([0, 2, 0], device=d)], _t(3, 3, device=d, seed=1)), {}),
    "_index_put_impl_": lambda d: ((_t(5, 3, device=d), [torch.tensor([0, 2, 0], device=d)],
                                    _t(3, 3, device=d, seed=1)), {}),
    "cumsum": lambda d: ((_t(4, 5, device=d), 1), {}),
}

# Out / in-place overloads whose functional counterpart is named differently.
FUNCTIONAL_OF = {"adaptive_avg_pool3d_backward.grad_input": "_adaptive_avg_pool3d_backward", "put_": "put"}


def _functional_key(name):
    if name in FUNCTIONAL_OF:
        return FUNCTIONAL_OF[name]
    if name in SAMPLES:
        return name
    base, _, overload = name.partition(".")
    base = base.rstrip("_") if base.endswith("_") and not base.startswith("_index_put_impl") else base
    overload = {"out": "", "grad_input": "", "output": "", "two_out": "two", "src_out": "src",
                "value_out": "value", "reduce_out": "reduce", "value_reduce_out": "value_reduce",
                "dim_values": "dim"}.get(overload, overload)
    return base + ("." + overload if overload else "")


def _has_stock_kernel(key, device):
    """Whether stock runs table key ``key`` on ``device``: its functional overload has a kernel there
    (cudnn_grid_sampler_backward has none on the CPU; its .out calls it)."""
    functional = "aten::" + _functional_key(key.split("::", 1)[1])
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(functional, k)
               for k in ("CPU" if device == "cpu" else "CUDA", "CompositeExplicitAutograd",
                         "CompositeImplicitAutograd"))


def _runnable(key, device):
    """The aten overload of functional key ``key``, or its detops twin where stock has no kernel for
    ``device``."""
    return _resolve(key) if _has_stock_kernel(key, device) else _twin_of(key)


def sample(key, device):
    """(overload, args, kwargs) for a direct call of table key ``key`` on ``device``."""
    name = key.split("::", 1)[1]
    functional = _functional_key(name)
    args, kwargs = SAMPLES[functional](device)
    op = _resolve(key)
    out_names = [a.name for a in op._schema.arguments if a.is_out]
    if out_names:
        results = _runnable("aten::" + functional, device)(*args, **kwargs)
        results = results if isinstance(results, (tuple, list)) else (results,)
        kwargs = dict(kwargs, **{n: torch.empty_like(r) for n, r in zip(out_names, results)})
    elif name != functional and name.split(".")[0].endswith("_"):
        args = (args[0].clone(),) + tuple(args[1:])
    return op, args, kwargs


def test_every_table_entry_has_a_valid_cpu_sample():
    """The GPU check's inputs are valid: each sample runs on CPU, and picks the entry it is meant to test."""
    for key in stock_table.STOCK_TABLE:
        op, args, kwargs = sample(key, "cpu")
        if _has_stock_kernel(key, "cpu"):
            op(*args, **kwargs)
        else:  # no stock CPU kernel: the functional twin checks the inputs as stock's CUDA kernel would
            functional = "aten::" + _functional_key(key.split("::", 1)[1])
            f_args, f_kwargs = SAMPLES[functional.split("::", 1)[1]]("cpu")
            _twin_of(functional)(*f_args, **f_kwargs)
        entry = stock_table.lookup(key, args, kwargs)
        assert entry is not None, f"{key}: the sample does not exercise the table entry"


@pytest.mark.gpu
@pytest.mark.parametrize("key", sorted(stock_table.STOCK_TABLE))
def test_table_matches_stock_cuda_under_the_flag(key):
    op, args, kwargs = sample(key, "cuda")
    entry = stock_table.lookup(key, args, kwargs)
    with detops.mode("off"):
        torch.use_deterministic_algorithms(True)
        if entry.throws_when_called_directly:
            with pytest.raises(RuntimeError, match="does not have a deterministic implementation"):
                op(*args, **kwargs)
        else:
            op(*args, **kwargs)
        torch.cuda.synchronize()


def _to_cpu(value):
    """CPU copies of the tensors in an argument (lists too); other values as they are."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def _twin_of(key):
    """torch.ops.detops.<name>.<overload> for table key ``aten::<name>[.<overload>]``."""
    base, _, overload = key.split("::", 1)[1].partition(".")
    return getattr(getattr(torch.ops.detops, base), overload or "default")


def test_twin_of_every_covered_overload_has_the_aten_schema():
    for key in detops.covered_ops():
        assert key in stock_table.STOCK_TABLE, key
        twin, op = _twin_of(key)._schema, _resolve(key)._schema
        assert str(twin).split("(", 1)[1] == str(op).split("(", 1)[1], key


@pytest.mark.gpu
@pytest.mark.parametrize("key", sorted(stock_table.STOCK_TABLE))
def test_covered_entries_run_under_the_flag_with_detops(key):
    """The aten call on CUDA under the flag runs the detops kernel: no error (stock throws for most of these)
    and the CPU twin's bits on the same inputs (stock's deterministic fallbacks do not give them)."""
    if key not in detops.covered_ops():
        pytest.skip(f"{key} is not covered")
    op, args, kwargs = sample(key, "cuda")
    cpu_args, cpu_kwargs = _to_cpu(args), {k: _to_cpu(v) for k, v in kwargs.items()}  # before any in-place write
    with detops.mode("auto"):
        torch.use_deterministic_algorithms(True)
        got = op(*args, **kwargs)
        torch.cuda.synchronize()
    want = _twin_of(key)(*cpu_args, **cpu_kwargs)
    # A tensor, or a tuple of them (nll_loss2d_forward: output, total_weight).
    got_all = list(got) if isinstance(got, (tuple, list)) else [got]
    want_all = list(want) if isinstance(want, (tuple, list)) else [want]
    assert len(got_all) == len(want_all), key
    for g, w in zip(got_all, want_all):
        assert g.device.type == "cuda" and w.device.type == "cpu"
        assert_bitwise_equal(g, w, f"{key}: CUDA under the flag vs the CPU twin")
    written = [a for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    for arg, returned in zip(written, got_all):  # the in-place self or the out= tensors, in the returns' order
        if arg.kwarg_only:
            got_written, want_written = kwargs[arg.name], cpu_kwargs[arg.name]
        else:
            position = [a.name for a in op._schema.arguments].index(arg.name)
            got_written, want_written = args[position], cpu_args[position]
        assert got_written.data_ptr() == returned.data_ptr(), f"{key}: returns its {arg.name}"
        assert_bitwise_equal(got_written, want_written, f"{key}: {arg.name}")


@pytest.mark.gpu
def test_audit_on_cuda_agrees_with_cpu():
    results = {}
    for device in ("cuda", "cpu"):
        fn, args = _embedding_bag("max")(device)
        results[device] = detops.audit(fn, *args)
    for device, result in results.items():
        assert result.complete and result.ok, f"{device}:\n{result.format()}"
        # Not empty: the one overload that throws in stock, covered through _embedding_bag_dense_backward.
        flagged = {e.op: e.category for e in result.entries if e.category != DETERMINISTIC}
        assert flagged == {"aten::_embedding_bag_backward": COVERED}, f"{device}:\n{result.format()}"
    cuda, cpu = ([(e.op, e.category) for e in results[d].entries] for d in ("cuda", "cpu"))
    assert cuda == cpu


def test_cli_audit(tmp_path):
    (tmp_path / "mymodel.py").write_text(textwrap.dedent("""
        import torch, torch.nn as nn, torch.nn.functional as F

        def main():
            x = torch.randn(1, 2, 6, 6, requires_grad=True)
            return F.interpolate(nn.AdaptiveAvgPool2d(3)(x), scale_factor=2, mode="bicubic")
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path)] + sys.path))
    proc = subprocess.run([sys.executable, "-m", "detops", "audit", "mymodel:main"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=300)
    assert "aten::upsample_bicubic2d_backward" in proc.stdout, proc.stderr
    assert "aten::_adaptive_avg_pool2d_backward" in proc.stdout
    assert proc.returncode == (0 if "aten::upsample_bicubic2d_backward" in detops.covered_ops() else 1)
    bad = subprocess.run([sys.executable, "-m", "detops", "audit", "no_colon"], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=300)
    assert bad.returncode == 2 and "module:function" in bad.stderr


def test_an_incomplete_run_with_nothing_that_throws_says_so():
    def fn():
        torch.zeros(3).index_add_(0, torch.tensor([0]), torch.ones(1))
        raise ValueError("boom")

    result = detops.audit(fn)
    assert not result.complete and not result.ok and result.ops(NOT_COVERED) == []
    text = result.format()
    assert "INCOMPLETE" in text and "NOT OK: the run did not complete" in text and "0 overload(s)" not in text
