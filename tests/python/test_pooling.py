"""Pooling backwards: the twins against stock CPU ops (random cases, OpInfo samples, nn modules through
autograd), the contract's bits (a Python reference of the tree, reruns, thread counts), bad inputs, and on
a GPU: no error under the flag, CUDA == CPU twin bitwise, close to stock, 1000 reruns identical."""

import copy
import math
import re

import pytest
import torch
import torch.nn.functional as F

import detops
from conftest import FLOAT_DTYPES, HAS_CUDA, assert_bitwise_equal, assert_close_to_f64, assert_twin_schemas_equal_aten

ops = torch.ops.detops

POOLING_OVERLOADS = [
    "aten::_adaptive_avg_pool2d_backward",
    "aten::_adaptive_avg_pool3d_backward",
    "aten::adaptive_avg_pool3d_backward.grad_input",
    "aten::avg_pool3d_backward",
    "aten::avg_pool3d_backward.grad_input",
    "aten::adaptive_max_pool2d_backward",
    "aten::adaptive_max_pool2d_backward.grad_input",
    "aten::adaptive_max_pool3d_backward",
    "aten::adaptive_max_pool3d_backward.grad_input",
    "aten::fractional_max_pool2d_backward",
    "aten::fractional_max_pool2d_backward.grad_input",
    "aten::fractional_max_pool3d_backward",
    "aten::fractional_max_pool3d_backward.grad_input",
    "aten::max_pool3d_with_indices_backward",
    "aten::max_pool3d_with_indices_backward.grad_input",
]


KNOWN = {"AdaptiveAvgPool2DBackward0", "AdaptiveAvgPool3DBackward0", "AvgPool3DBackward0",
         "AdaptiveMaxPool2DBackward0", "AdaptiveMaxPool3DBackward0", "FractionalMaxPool2DBackward0",
         "FractionalMaxPool3DBackward0", "MaxPool3DWithIndicesBackward0"}


def twin_backward(out: torch.Tensor, grad: torch.Tensor, device=None, grad_input=None, dtype=None, indices=None):
    """Calls the detops twin of `out`'s pooling backward on the forward's saved tensors (moved to
    `device` and cast to `dtype` if given); with `grad_input`, the .grad_input overload; with `indices`, those in
    place of the max pools' saved ones."""
    fn = out.grad_fn
    name = type(fn).__name__
    if name not in KNOWN:
        raise KeyError(name)

    def mv(t):
        t = t.to(device) if device is not None else t
        return t.to(dtype) if dtype is not None and t.is_floating_point() else t

    self_ = mv(fn._saved_self.detach())
    grad = mv(grad)
    if name == "AdaptiveAvgPool2DBackward0":
        return ops._adaptive_avg_pool2d_backward(grad, self_)
    if name == "AdaptiveAvgPool3DBackward0":
        if grad_input is not None:
            return ops.adaptive_avg_pool3d_backward.grad_input(grad, self_, grad_input=grad_input)
        return ops._adaptive_avg_pool3d_backward(grad, self_)
    if name == "AvgPool3DBackward0":
        divisor = fn._saved_divisor_override
        if divisor is not None and divisor >= 2**63:  # the saved int64 reads back unsigned
            divisor -= 2**64
        args = (grad, self_, fn._saved_kernel_size, fn._saved_stride, fn._saved_padding, fn._saved_ceil_mode,
                fn._saved_count_include_pad, divisor)
        if grad_input is not None:
            return ops.avg_pool3d_backward.grad_input(*args, grad_input=grad_input)
        return ops.avg_pool3d_backward(*args)
    indices = mv(fn._saved_result1 if indices is None else indices)
    if name in ("AdaptiveMaxPool2DBackward0", "AdaptiveMaxPool3DBackward0"):
        op = ops.adaptive_max_pool2d_backward if "2D" in name else ops.adaptive_max_pool3d_backward
        if grad_input is not None:
            return op.grad_input(grad, self_, indices, grad_input=grad_input)
        return op(grad, self_, indices)
    if name in ("FractionalMaxPool2DBackward0", "FractionalMaxPool3DBackward0"):
        op = ops.fractional_max_pool2d_backward if "2D" in name else ops.fractional_max_pool3d_backward
        args = (grad, self_, fn._saved_kernel_size, fn._saved_output_size, indices)
        if grad_input is not None:
            return op.grad_input(*args, grad_input=grad_input)
        return op(*args)
    if name == "MaxPool3DWithIndicesBackward0":
        args = (grad, self_, fn._saved_kernel_size, fn._saved_stride, fn._saved_padding, fn._saved_dilation,
                fn._saved_ceil_mode, indices)
        if grad_input is not None:
            return ops.max_pool3d_with_indices_backward.grad_input(*args, grad_input=grad_input)
        return ops.max_pool3d_with_indices_backward(*args)
    raise KeyError(name)


def frac_samples(x: torch.Tensor, nspatial: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    batch = x.shape[0] if x.dim() == nspatial + 2 else 1
    return torch.rand(batch, x.shape[-nspatial - 1], nspatial, generator=g, dtype=x.dtype)


# (name, input shape, forward). Unbatched, batched, odd sizes, overlapping windows.
CASES = [
    ("adaptive_avg2d", (2, 3, 9, 7), lambda x: F.adaptive_avg_pool2d(x, (4, 5))),
    ("adaptive_avg2d_up", (3, 5, 4), lambda x: F.adaptive_avg_pool2d(x, (7, 9))),
    ("adaptive_avg3d", (2, 3, 5, 9, 7), lambda x: F.adaptive_avg_pool3d(x, (3, 4, 5))),
    ("adaptive_avg3d_unbatched", (3, 6, 5, 7), lambda x: F.adaptive_avg_pool3d(x, (4, 2, 3))),
    ("avg3d", (2, 3, 6, 7, 8), lambda x: F.avg_pool3d(x, 3, stride=2, padding=1)),
    ("avg3d_ceil", (2, 2, 7, 6, 9), lambda x: F.avg_pool3d(x, (3, 2, 4), stride=(2, 1, 3), padding=(1, 1, 2),
                                                          ceil_mode=True)),
    ("avg3d_no_pad_count", (1, 2, 7, 6, 9), lambda x: F.avg_pool3d(x, 3, stride=1, padding=1, ceil_mode=True,
                                                                  count_include_pad=False)),
    ("avg3d_divisor", (3, 5, 6, 7), lambda x: F.avg_pool3d(x, 2, stride=1, divisor_override=3)),
    ("adaptive_max2d", (2, 3, 9, 7), lambda x: F.adaptive_max_pool2d(x, (4, 5))),
    ("adaptive_max2d_unbatched", (3, 5, 4), lambda x: F.adaptive_max_pool2d(x, (7, 3))),
    ("adaptive_max3d", (2, 3, 5, 9, 7), lambda x: F.adaptive_max_pool3d(x, (3, 4, 5))),
    ("max3d", (2, 3, 7, 8, 9), lambda x: F.max_pool3d(x, 3, stride=1, padding=1)),
    ("max3d_dilated_ceil", (2, 2, 9, 8, 10), lambda x: F.max_pool3d(x, (2, 3, 2), stride=(2, 1, 3), padding=1,
                                                                    dilation=(2, 1, 3), ceil_mode=True)),
    ("max3d_unbatched", (3, 6, 5, 7), lambda x: F.max_pool3d(x, 2, stride=1)),
    ("frac2d", (2, 3, 11, 9), lambda x: F.fractional_max_pool2d(x, (3, 2), output_size=(5, 6),
                                                               _random_samples=frac_samples(x, 2))),
    ("frac2d_unbatched", (3, 10, 9), lambda x: F.fractional_max_pool2d(x, 2, output_size=(6, 7),
                                                                      _random_samples=frac_samples(x, 2))),
    ("frac3d", (2, 2, 8, 9, 7), lambda x: F.fractional_max_pool3d(x, 2, output_size=(5, 6, 4),
                                                                 _random_samples=frac_samples(x, 3))),
]
CASE_IDS = [c[0] for c in CASES]


def run_stock(shape, forward, dtype, channels_last=False, seed=0):
    """Input (quarter-rounded values: max pools see ties), the forward, a grad in `dtype`, stock's CPU
    gradient. Where stock's CPU kernel lacks `dtype` (avg_pool3d: half, bfloat16), the forward runs in
    float32 on the same values and stock is None: call the twin with dtype=`dtype`."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    x = (x * 4).round() / 4
    x = x.to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    x.requires_grad_(True)
    try:
        out = forward(x)
    except NotImplementedError:
        x = x.detach().float().requires_grad_(True)
        out = forward(x)
    grad = torch.randn(out.shape, generator=g, dtype=torch.float64).to(dtype)
    if x.dtype != dtype:
        return x, out, grad, None
    (stock,) = torch.autograd.grad(out, x, grad, retain_graph=True)
    return x, out, grad, stock


def test_covered_ops_lists_every_pooling_overload():
    covered = detops.covered_ops()
    for name in POOLING_OVERLOADS:
        assert name in covered, name


def test_twin_schemas_equal_aten():
    assert_twin_schemas_equal_aten(POOLING_OVERLOADS)


@pytest.mark.parametrize("name,shape,forward", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_twin_matches_stock_cpu(name, shape, forward, dtype):
    x, out, grad, stock = run_stock(shape, forward, dtype)
    got = twin_backward(out, grad, dtype=dtype)
    assert got.shape == x.shape and got.dtype == dtype
    if "max" in name or "frac" in name:
        # Reference: the grads scattered in float64 to this forward's indices.
        ref = torch.zeros_like(x, dtype=torch.float64).flatten(-3 if "3d" in name else -2)
        fn = out.grad_fn
        idx = fn._saved_result1.flatten(-3 if "3d" in name else -2)
        ref.scatter_add_(-1, idx, grad.double().flatten(-3 if "3d" in name else -2))
        assert_close_to_f64(got, ref.view(x.shape), name)
    else:
        # Reference: stock on float64 copies of the same input and grad.
        x64 = x.detach().double().requires_grad_(True)
        (stock64,) = torch.autograd.grad(forward(x64), x64, grad.double())
        assert_close_to_f64(got, stock64, name)
    if dtype in (torch.float32, torch.float64):
        torch.testing.assert_close(got, stock, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-6)


def case_id(v):
    if isinstance(v, torch.nn.Module):
        return type(v).__name__
    return v if isinstance(v, str) else ""


@pytest.mark.parametrize("name,shape,forward", [c for c in CASES if len(c[1]) in (4, 5)], ids=case_id)
def test_channels_last_same_bits_and_stock_layout(name, shape, forward):
    if len(shape) == 4 and ("3d" in name):
        pytest.skip("unbatched 3-D input has no channels-last layout")
    x, out, grad, stock = run_stock(shape, forward, torch.float32)
    xc, outc, gradc, stockc = run_stock(shape, forward, torch.float32, channels_last=True)
    got = twin_backward(out, grad)
    gotc = twin_backward(outc, gradc)
    assert_bitwise_equal(got, gotc, name)
    assert gotc.stride() == stockc.stride(), f"{name}: {gotc.stride()} vs stock {stockc.stride()}"
    assert got.stride() == stock.stride()


@pytest.mark.parametrize("name,shape,forward", CASES, ids=CASE_IDS)
def test_grad_input_overload(name, shape, forward):
    x, out, grad, stock = run_stock(shape, forward, torch.float32)
    want = twin_backward(out, grad)
    if type(out.grad_fn).__name__ == "AdaptiveAvgPool2DBackward0":
        pytest.skip("aten has no _adaptive_avg_pool2d_backward.grad_input")
    buf = torch.empty(0)
    res = twin_backward(out, grad, grad_input=buf)
    assert res.data_ptr() == buf.data_ptr()
    assert_bitwise_equal(buf, want, name)
    # A correctly sized, strided grad_input keeps its strides.
    strided = torch.full([*x.shape[:-1], 2 * x.shape[-1]], 7.0)[..., ::2]
    twin_backward(out, grad, grad_input=strided)
    assert_bitwise_equal(strided, want, name)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("name,shape,forward", CASES, ids=CASE_IDS)
def test_grad_input_computed_in_place_or_aside_same_bits(name, shape, forward, device):
    x, out, grad, stock = run_stock(shape, forward, torch.float32)
    if type(out.grad_fn).__name__ == "AdaptiveAvgPool2DBackward0":
        pytest.skip("aten has no _adaptive_avg_pool2d_backward.grad_input")
    want = twin_backward(out, grad)  # the CPU twin
    # Contiguous and of self's size, full of 7s: written in place (the max pools zero it first on CUDA).
    buf = torch.full(x.shape, 7.0, device=device)
    assert twin_backward(out, grad, device=device, grad_input=buf).data_ptr() == buf.data_ptr()
    assert_bitwise_equal(buf.cpu(), want, name)
    # Over grad_output's memory: computed aside from the unchanged grad_output, then copied.
    store = torch.empty(max(grad.numel(), x.numel()), device=device)
    g = store[:grad.numel()].view(grad.shape).copy_(grad)
    twin_backward(out, g, device=device, grad_input=store[:x.numel()].view(x.shape))
    assert_bitwise_equal(store[:x.numel()].view(x.shape).cpu(), want, name)


def test_max_pool_bad_index_leaves_a_direct_grad_input_untouched():
    x = torch.randn(1, 2, 6, 6, requires_grad=True)
    out, indices = torch.ops.aten.adaptive_max_pool2d(x.detach(), [3, 3])
    bad = indices.clone()
    bad[0, 1, 2, 2] = 36
    buf = torch.full(x.shape, 7.0)
    with pytest.raises(RuntimeError, match=r"adaptive_max_pool2d_backward\(\): index 36"):
        ops.adaptive_max_pool2d_backward.grad_input(torch.randn(out.shape), x.detach(), bad, grad_input=buf)
    assert bool((buf == 7.0).all())


@pytest.mark.parametrize("name,shape,forward", CASES, ids=CASE_IDS)
def test_bitwise_across_reruns_and_threads(name, shape, forward):
    x, out, grad, _ = run_stock([s * 2 if i >= len(shape) - 2 else s for i, s in enumerate(shape)], forward,
                                torch.float32)
    torch.set_num_threads(1)
    one = twin_backward(out, grad)
    torch.set_num_threads(2)
    two = twin_backward(out, grad)
    again = twin_backward(out, grad)
    assert_bitwise_equal(one, two, name)
    assert_bitwise_equal(two, again, name)


# ---- the contract's bits, from a Python reference of the tree ----

def tree_sum_f32(values):
    """docs/order_contract.md: blocks of 32 folded left to right, repeated over the block sums; float32."""
    vals = [torch.tensor(v, dtype=torch.float32) for v in values]
    while len(vals) > 1:
        nxt = []
        for b in range(0, len(vals), 32):
            s = vals[b]
            for v in vals[b + 1:b + 32]:
                s = s + v
            nxt.append(s)
        vals = nxt
    return torch.tensor(0.0, dtype=torch.float32) + vals[0]


def test_avg_pool3d_bits_equal_python_tree():
    # kernel 4, stride 1: an interior input element is covered by 64 windows, two blocks of the tree.
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 1, 7, 6, 6, generator=g)
    k, s, p = 4, 1, 1
    out = F.avg_pool3d(x, k, stride=s, padding=p, ceil_mode=True, count_include_pad=False)
    grad = torch.randn(out.shape, generator=g)
    got = ops.avg_pool3d_backward(grad, x, [k] * 3, [s] * 3, [p] * 3, True, False, None)
    O = out.shape[2:]
    I = x.shape[2:]
    ref = torch.zeros_like(x)
    for it in range(I[0]):
        for ih in range(I[1]):
            for iw in range(I[2]):
                contrib = []
                for ot in range(O[0]):
                    for oh in range(O[1]):
                        for ow in range(O[2]):
                            o = (ot, oh, ow)
                            i = (it, ih, iw)
                            if not all(o[d] * s - p <= i[d] < o[d] * s - p + k for d in range(3)):
                                continue
                            n = 1
                            for d in range(3):
                                lo, hi = max(o[d] * s - p, 0), min(o[d] * s - p + k, I[d])
                                n *= hi - lo
                            contrib.append(grad[0, 0, ot, oh, ow] / torch.tensor(float(n), dtype=torch.float32))
                if contrib:
                    ref[0, 0, it, ih, iw] = tree_sum_f32(contrib)
    assert_bitwise_equal(got, ref, "avg_pool3d vs Python tree")


def test_max_pool3d_bits_equal_python_tree_on_a_hot_element():
    # One spike chosen by every window that covers it: 64 contributions (two blocks) into one element.
    g = torch.Generator().manual_seed(4)
    x = torch.randn(1, 2, 9, 9, 9, generator=g)
    x[0, 1, 4, 4, 4] = 100.0
    out, idx = F.max_pool3d(x, 4, stride=1, return_indices=True)
    grad = torch.randn(out.shape, generator=g)
    got = ops.max_pool3d_with_indices_backward(grad, x, [4] * 3, [1] * 3, [0] * 3, [1] * 3, False, idx)
    ref = torch.zeros_like(x).flatten(2)
    flat_idx = idx.flatten(2)
    flat_grad = grad.flatten(2)
    for c in range(2):
        buckets = {}
        for o in range(flat_idx.shape[-1]):
            buckets.setdefault(int(flat_idx[0, c, o]), []).append(float(flat_grad[0, c, o]))
        for key, vals in buckets.items():
            ref[0, c, key] = tree_sum_f32(vals)
    assert len(buckets) > 0
    hot = (flat_idx[0, 1] == 4 * 81 + 4 * 9 + 4).sum().item()
    assert hot == 64
    assert_bitwise_equal(got, ref.view(x.shape), "max_pool3d vs Python tree")


def test_adaptive_avg_pool2d_bits_equal_python_tree():
    # Upsampling-like adaptive pool: overlapping windows, stock's grad / kh / kw per contribution.
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 5, 7, generator=g)
    out = F.adaptive_avg_pool2d(x, (9, 11))
    grad = torch.randn(out.shape, generator=g)
    got = ops._adaptive_avg_pool2d_backward(grad, x)

    def win(o, osz, isz):
        return (o * isz) // osz, -((-(o + 1) * isz) // osz)

    ref = torch.zeros_like(x)
    for c in range(2):
        for ih in range(5):
            for iw in range(7):
                contrib = []
                for oh in range(9):
                    h0, h1 = win(oh, 9, 5)
                    if not h0 <= ih < h1:
                        continue
                    for ow in range(11):
                        w0, w1 = win(ow, 11, 7)
                        if not w0 <= iw < w1:
                            continue
                        v = grad[c, oh, ow] / torch.tensor(float(h1 - h0)) / torch.tensor(float(w1 - w0))
                        contrib.append(v)
                ref[c, ih, iw] = tree_sum_f32(contrib)
    assert_bitwise_equal(got, ref, "adaptive_avg_pool2d vs Python tree")


# ---- OpInfo samples and nn modules ----

OPINFO_NAMES = {
    "nn.functional.adaptive_avg_pool2d",
    "nn.functional.adaptive_avg_pool3d",
    "nn.functional.avg_pool3d",
    "nn.functional.adaptive_max_pool2d",
    "nn.functional.adaptive_max_pool3d",
    "nn.functional.max_pool3d",
    "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d",
}


def opinfo_cases():
    from torch.testing._internal.common_methods_invocations import op_db

    return [o for o in op_db if o.name in OPINFO_NAMES]


@pytest.mark.parametrize("opinfo", opinfo_cases(), ids=lambda o: o.name)
def test_opinfo_samples(opinfo):
    checked = 0
    for sample in opinfo.sample_inputs("cpu", torch.float64, requires_grad=True):
        torch.manual_seed(0)
        result = opinfo(sample.input, *sample.args, **sample.kwargs)
        out = result[0] if isinstance(result, tuple) else result
        if out.grad_fn is None or out.numel() == 0:
            continue
        try:
            twin_backward(out, torch.ones_like(out))
        except KeyError:
            continue  # a decomposition (e.g. output size 1 -> mean): no pooling backward to test
        grad = torch.randn_like(out)
        (stock,) = torch.autograd.grad(out, sample.input, grad, retain_graph=True)
        got = twin_backward(out, grad)
        torch.testing.assert_close(got, stock, rtol=1e-12, atol=1e-12)
        checked += 1
    assert checked > 0


MODULES = [
    (torch.nn.AdaptiveAvgPool2d((3, 4)), (2, 4, 10, 9)),
    (torch.nn.AdaptiveAvgPool3d((2, 3, 4)), (2, 3, 6, 7, 9)),
    (torch.nn.AvgPool3d(3, stride=2, padding=1, ceil_mode=True), (2, 3, 7, 8, 9)),
    (torch.nn.MaxPool3d(3, stride=2, padding=1, dilation=1, ceil_mode=True), (2, 3, 7, 8, 9)),
    (torch.nn.AdaptiveMaxPool2d((4, 3)), (2, 3, 9, 7)),
    (torch.nn.AdaptiveMaxPool3d((2, 3, 2)), (2, 3, 5, 7, 6)),
    (torch.nn.FractionalMaxPool2d(3, output_size=(5, 4), _random_samples=torch.rand(2, 3, 2)), (2, 3, 12, 10)),
    (torch.nn.FractionalMaxPool3d(2, output_size=(3, 4, 3), _random_samples=torch.rand(2, 3, 3)), (2, 3, 7, 8, 6)),
]


@pytest.mark.parametrize("module,shape", MODULES, ids=case_id)
def test_modules_autograd_matches_twin(module, shape):
    torch.manual_seed(1)
    x = torch.randn(shape, requires_grad=True)
    out = module(x)
    grad = torch.randn_like(out)
    (stock,) = torch.autograd.grad(out, x, grad, retain_graph=True)
    got = twin_backward(out, grad)
    torch.testing.assert_close(got, stock, rtol=1e-5, atol=1e-6)


def test_empty_inputs():
    x = torch.randn(0, 3, 4, 5, 6)
    g = torch.randn(0, 3, 2, 2, 3)
    assert ops._adaptive_avg_pool3d_backward(g, x).shape == x.shape
    assert ops.avg_pool3d_backward(g, x, [2], [2], [0], False, True, None).shape == x.shape
    idx = torch.zeros(0, 3, 2, 2, 3, dtype=torch.long)
    assert ops.adaptive_max_pool3d_backward(g, x, idx).shape == x.shape
    assert ops.max_pool3d_with_indices_backward(g, x, [2], [2], [0], [1], False, idx).shape == x.shape


def test_adaptive_pools_reject_an_empty_non_batch_dimension_as_stock():
    # Stock's adaptive_pool_empty_output_check (its meta functions and CUDA kernels): every grad_output dimension but
    # the first non-empty; an empty batch passes.
    for name, x, g, extra in (
            ("_adaptive_avg_pool2d_backward", torch.randn(2, 0, 4, 4), torch.randn(2, 0, 1, 1), ()),
            ("_adaptive_avg_pool2d_backward", torch.randn(2, 3, 4, 4), torch.randn(2, 3, 0, 2), ()),
            ("_adaptive_avg_pool3d_backward", torch.randn(2, 0, 4, 4, 4), torch.randn(2, 0, 1, 1, 1), ()),
            ("adaptive_max_pool2d_backward", torch.randn(2, 0, 4, 4), torch.randn(2, 0, 1, 1),
             (torch.zeros(2, 0, 1, 1, dtype=torch.long),)),
            ("adaptive_max_pool3d_backward", torch.randn(2, 0, 4, 4, 4), torch.randn(2, 0, 1, 1, 1),
             (torch.zeros(2, 0, 1, 1, 1, dtype=torch.long),))):
        with pytest.raises(RuntimeError, match="Expected grad_output to have non-zero size for non-batch dimensions"):
            getattr(ops, name)(g, x, *extra)
        stock = getattr(torch.ops.aten, name).default
        with pytest.raises(RuntimeError, match="Expected grad_output to have non-zero size for non-batch dimensions"):
            stock(g, x, *extra)
    assert ops._adaptive_avg_pool2d_backward(torch.randn(0, 2, 2), torch.randn(0, 4, 4)).shape == (0, 4, 4)


def test_avg_pool3d_of_integers_is_stocks():
    x = torch.randint(0, 10, (1, 2, 4, 5, 6))
    g = torch.randint(-50, 50, (1, 2, 2, 3, 4))
    args = ([2, 2, 2], [2, 2, 2], [0, 1, 1], False, True, None)
    expected = torch.ops.aten.avg_pool3d_backward(g, x, *args)
    assert expected.dtype == torch.long and torch.equal(ops.avg_pool3d_backward(g, x, *args), expected)
    out = torch.empty(0, dtype=torch.long)
    assert ops.avg_pool3d_backward.grad_input(g, x, *args, grad_input=out) is out and torch.equal(out, expected)


# ---- bad inputs ----

def test_bad_inputs_raise_clear_errors():
    x = torch.randn(2, 3, 8, 8)
    out, idx = F.adaptive_max_pool2d(x, (4, 4), return_indices=True)
    g = torch.randn_like(out)
    bad = idx.clone()
    bad[1, 2, 3, 3] = 64
    with pytest.raises(RuntimeError, match=r"adaptive_max_pool2d_backward\(\): index 64"):
        ops.adaptive_max_pool2d_backward(g, x, bad)
    bad[1, 2, 3, 3] = -1
    with pytest.raises(RuntimeError, match="index -1"):
        ops.adaptive_max_pool2d_backward(g, x, bad)
    with pytest.raises(RuntimeError, match="expected indices of dtype int64, but got Int"):
        ops.adaptive_max_pool2d_backward(g, x, idx.int())
    with pytest.raises(RuntimeError, match=re.escape("expected indices of grad_output's shape [2, 3, 4, 4], but got [2, 3, 2, 4]")):
        ops.adaptive_max_pool2d_backward(g, x, idx[:, :, :2])
    with pytest.raises(RuntimeError, match="expected grad_output of dtype Float like self, but got Double"):
        ops._adaptive_avg_pool2d_backward(g.double(), x)
    with pytest.raises(RuntimeError, match="expected self of a floating-point dtype .* but got Long"):
        ops._adaptive_avg_pool2d_backward(g.long(), x.long())
    with pytest.raises(RuntimeError, match=re.escape("expected a 3D or 4D self, but got sizes [8, 8]")):
        ops._adaptive_avg_pool2d_backward(g[0, 0], x[0, 0])
    with pytest.raises(RuntimeError, match=re.escape("grad_output sizes [1, 3, 4, 4] do not match self sizes")):
        ops._adaptive_avg_pool2d_backward(g[:1], x)
    x5 = torch.randn(2, 3, 6, 6, 6)
    g5 = torch.randn(2, 3, 3, 3, 3)
    with pytest.raises(RuntimeError, match="divisor must be not zero"):
        ops.avg_pool3d_backward(g5, x5, [2], [2], [0], False, True, 0)
    with pytest.raises(RuntimeError, match="pad should be"):
        ops.avg_pool3d_backward(g5, x5, [2], [2], [2], False, True, None)
    # grad_output's spatial sizes against the forward's output size (stock's own shape check, stock's message)
    with pytest.raises(RuntimeError, match=re.escape("tensor.size[2] == 3 but got: dimension 5 and tensor.size[2] = 2")):
        ops.avg_pool3d_backward(g5[:, :, :2], x5, [2], [2], [0], False, True, None)
    with pytest.raises(RuntimeError, match="kernel_size must be a single int, or a tuple of three ints"):
        ops.avg_pool3d_backward(g5, x5, [2, 2], [2], [0], False, True, None)
    out5, idx5 = F.max_pool3d(x5, 2, return_indices=True)
    with pytest.raises(RuntimeError, match="dilation must be either a single int, or a tuple of three ints"):
        ops.max_pool3d_with_indices_backward(out5, x5, [2], [2], [0], [1, 1], False, idx5)
    # stride 1 makes the forward's output 5x5x5, not grad_output's 3x3x3
    with pytest.raises(RuntimeError, match=re.escape("tensor.size[2] == 5 but got: dimension 5 and tensor.size[2] = 3")):
        ops.max_pool3d_with_indices_backward(out5, x5, [2], [1], [0], [1], False, idx5)
    with pytest.raises(RuntimeError, match=re.escape("grad_output sizes [2, 3, 3, 3, 3] do not match output_size [3, 3, 2]")):
        ops.fractional_max_pool3d_backward(out5, x5, [2, 2, 2], [3, 3, 2], idx5)


# ---- GPU ----

GPU_MODULES = MODULES


@pytest.mark.gpu
@pytest.mark.parametrize("module,shape", GPU_MODULES, ids=case_id)
def test_gpu_module_backward_under_flag_equals_cpu_twin(module, shape):
    torch.manual_seed(2)
    x = torch.randn(shape, device="cuda", requires_grad=True)
    m = copy.deepcopy(module).to("cuda")  # MODULES is shared with the CPU tests: never move it in place
    if getattr(m, "_random_samples", None) is not None:
        assert m._random_samples.is_cuda  # a buffer: moved with the copy
    out = m(x)
    grad = torch.randn_like(out)
    (stock,) = torch.autograd.grad(out, x, grad, retain_graph=True)  # stock, flag off
    torch.use_deterministic_algorithms(True)
    (ours,) = torch.autograd.grad(out, x, grad, retain_graph=True)
    again = [torch.autograd.grad(out, x, grad, retain_graph=True)[0] for _ in range(3)]
    torch.use_deterministic_algorithms(False)
    torch.testing.assert_close(ours, stock, rtol=1e-5, atol=1e-5)
    for a in again:
        assert_bitwise_equal(a, ours, "rerun")
    cpu_twin = twin_backward(out, grad.cpu(), device="cpu")
    assert_bitwise_equal(ours.cpu(), cpu_twin, "CUDA vs CPU twin")
    cuda_twin = twin_backward(out, grad)
    assert_bitwise_equal(cuda_twin, ours, "CUDA twin vs override")


@pytest.mark.gpu
@pytest.mark.parametrize("name,shape,forward", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_gpu_cuda_equals_cpu_twin_bitwise(name, shape, forward, dtype):
    x, out, grad, _ = run_stock(shape, forward, dtype)
    # dtype=: where stock's CPU forward lacks `dtype`, run_stock ran it in float32 (see there)
    cpu = twin_backward(out, grad, dtype=dtype)
    cuda = twin_backward(out, grad, device="cuda", dtype=dtype)
    assert cpu.dtype == dtype and cuda.is_cuda
    assert_bitwise_equal(cuda.cpu(), cpu, name)


def eager_and_replayed(op, *args):
    """op(*args) on CUDA run eagerly, and captured into a CUDA graph (after a warm-up on a side stream, as
    torch.cuda.graphs advises) and replayed over a result filled with NaN, with pinned host memory allocated and
    overwritten after the capture (a table copied from the host must replay as it was at capture)."""
    eager = op(*args)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        op(*args)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = op(*args)
    junk = [torch.full((1 << 16,), -1, dtype=torch.int64).pin_memory() for _ in range(8)]
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    del junk
    return eager, captured


# Average pools of at least 65,536 input elements: the CUDA path takes two steps (a scale step into a scratch
# buffer, then the gather from there; docs/pooling.md). The last has elements of more than 32 windows.
TWO_STEP_CASES = [
    ("avg3d", (2, 4, 12, 40, 36), lambda x: F.avg_pool3d(x, 3, stride=2, padding=1)),
    ("avg3d_ceil_no_pad_count", (2, 3, 13, 30, 41), lambda x: F.avg_pool3d(
        x, (3, 2, 4), stride=(2, 1, 3), padding=(1, 1, 2), ceil_mode=True, count_include_pad=False)),
    ("avg3d_divisor", (3, 20, 40, 41), lambda x: F.avg_pool3d(x, 2, stride=1, divisor_override=3)),
    ("adaptive_avg2d", (4, 16, 40, 36), lambda x: F.adaptive_avg_pool2d(x, (17, 23))),
    ("adaptive_avg3d", (2, 8, 10, 30, 28), lambda x: F.adaptive_avg_pool3d(x, (6, 7, 9))),
    ("adaptive_avg2d_up_many", (4, 16, 256, 4), lambda x: F.adaptive_avg_pool2d(x, (300, 40))),
]


@pytest.mark.gpu
@pytest.mark.parametrize("name,shape,forward", TWO_STEP_CASES, ids=[c[0] for c in TWO_STEP_CASES])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_gpu_average_pools_in_two_steps_equal_cpu_twin(name, shape, forward, dtype):
    x, out, grad, _ = run_stock(shape, forward, dtype)
    assert math.prod(shape) >= 1 << 16
    cpu = twin_backward(out, grad, dtype=dtype)
    cuda = twin_backward(out, grad, device="cuda", dtype=dtype)
    assert_bitwise_equal(cuda.cpu(), cpu, name)
    for _ in range(10):
        assert torch.equal(twin_backward(out, grad, device="cuda", dtype=dtype), cuda)


@pytest.mark.gpu
def test_gpu_average_pool_in_two_steps_replays_in_a_cuda_graph():
    """Captured into a CUDA graph, the scale step (its scratch from the graph's pool) and the gather replay: the
    eager bits."""
    name, shape, _ = TWO_STEP_CASES[0]
    assert name == "avg3d"  # F.avg_pool3d(x, 3, stride=2, padding=1)
    x = torch.randn(shape, device="cuda")
    grad = torch.randn(F.avg_pool3d(x, 3, stride=2, padding=1).shape, device="cuda")
    eager, replayed = eager_and_replayed(ops.avg_pool3d_backward, grad, x, [3, 3, 3], [2, 2, 2], [1, 1, 1], False,
                                         True, None)
    assert_bitwise_equal(replayed, eager, "replayed")


# Max pools of more than 4,096 outputs: the CUDA path gathers first (docs/pooling.md), the engine gated on it.
GATHER_CASES = [
    ("adaptive_max2d", (4, 16, 40, 36), lambda x: F.adaptive_max_pool2d(x, (17, 23))),
    ("adaptive_max2d_up", (2, 8, 6, 5), lambda x: F.adaptive_max_pool2d(x, (40, 45))),  # > 32 picks: StreamingTree
    ("adaptive_max3d", (2, 8, 10, 12, 14), lambda x: F.adaptive_max_pool3d(x, (6, 7, 9))),
    ("max3d_dilated_ceil", (2, 4, 13, 16, 18), lambda x: F.max_pool3d(x, (2, 3, 2), stride=(2, 1, 3), padding=1,
                                                                      dilation=(2, 1, 3), ceil_mode=True)),
    ("frac2d", (4, 16, 37, 41), lambda x: F.fractional_max_pool2d(x, 3, output_size=(20, 25),
                                                                 _random_samples=frac_samples(x, 2))),
    ("frac3d", (2, 4, 15, 17, 19), lambda x: F.fractional_max_pool3d(x, 2, output_size=(9, 10, 11),
                                                                    _random_samples=frac_samples(x, 3))),
]


@pytest.mark.gpu
@pytest.mark.parametrize("name,shape,forward", GATHER_CASES, ids=[c[0] for c in GATHER_CASES])
@pytest.mark.parametrize("moved", [False, True], ids=["forward_indices", "indices_out_of_their_windows"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_gpu_max_pool_gather_equals_cpu_twin(name, shape, forward, moved, dtype):
    """The forward's indices: the gather alone. Some moved out of their outputs' windows (still in the plane): the
    gather raises the gate and the engine's gated call recomputes. CPU twin's bits either way, and reruns equal."""
    x, out, grad, _ = run_stock(shape, forward, dtype)
    indices = out.grad_fn._saved_result1.clone()
    if moved:
        flat = indices.view(-1)
        plane = math.prod(shape[-3:] if "3d" in name else shape[-2:])
        flat[0] = plane - 1
        flat[-1] = 0
        flat[flat.numel() // 2] = plane // 3
    cpu = twin_backward(out, grad, dtype=dtype, indices=indices)
    cuda = twin_backward(out, grad, device="cuda", dtype=dtype, indices=indices)
    assert_bitwise_equal(cuda.cpu(), cpu, name)
    for _ in range(20):
        assert torch.equal(twin_backward(out, grad, device="cuda", dtype=dtype, indices=indices), cuda)


@pytest.mark.gpu
@pytest.mark.parametrize("moved", [False, True], ids=["forward_indices", "indices_out_of_their_windows"])
def test_gpu_max_pool_gather_replays_in_a_cuda_graph(moved):
    """Captured into a CUDA graph, the tables' copy (which zeroes the gate) replays from the pinned buffer it had at
    capture, the gather and the gated engine (one launch per step there) after it: the eager bits."""
    _, shape, forward = GATHER_CASES[0]
    x, out, grad, _ = run_stock(shape, forward, torch.float32)
    indices = out.grad_fn._saved_result1.clone()
    if moved:
        indices.view(-1)[0] = shape[-1] * shape[-2] - 1
    eager, replayed = eager_and_replayed(ops.adaptive_max_pool2d_backward, grad.cuda(), x.detach().cuda(),
                                         indices.cuda())
    assert_bitwise_equal(replayed, eager, "replayed")


@pytest.mark.gpu
@pytest.mark.parametrize("name,shape,forward", CASES, ids=CASE_IDS)
def test_gpu_1000_reruns_identical(name, shape, forward):
    x, out, grad, _ = run_stock([s * 2 for s in shape], forward, torch.float32)
    first = twin_backward(out, grad, device="cuda")
    for _ in range(1000):
        assert torch.equal(twin_backward(out, grad, device="cuda"), first)


def tiny_resnet():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveMaxPool2d((6, 5)),
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d((3, 2)),
        torch.nn.Flatten(), torch.nn.Unflatten(1, (48, 1, 1)), torch.nn.Conv2d(48, 4, 1))


def tiny_conv3d():
    return torch.nn.Sequential(
        torch.nn.Conv3d(2, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool3d(3, stride=2, padding=1),
        torch.nn.Conv3d(6, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.AvgPool3d(2, stride=1, ceil_mode=True),
        torch.nn.FractionalMaxPool3d(2, output_size=(3, 3, 2)), torch.nn.AdaptiveAvgPool3d((2, 2, 1)),
        torch.nn.AdaptiveMaxPool3d((1, 2, 1)))


def train_20_steps(make, shape):
    """20 SGD steps under the flag (no nn.Linear: cuBLAS would need CUBLAS_WORKSPACE_CONFIG)."""
    torch.manual_seed(0)
    torch.cuda.manual_seed(0)
    model = make().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    torch.use_deterministic_algorithms(True)
    try:
        for _ in range(20):
            x = torch.randn(shape, generator=g).cuda()
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.use_deterministic_algorithms(False)
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.gpu
@pytest.mark.parametrize("make,shape", [(tiny_resnet, (4, 3, 16, 15)), (tiny_conv3d, (2, 2, 12, 11, 10))],
                         ids=["resnet_like", "conv3d"])
def test_gpu_training_20_steps_bitwise_identical(make, shape):
    first = train_20_steps(make, shape)
    second = train_20_steps(make, shape)
    for a, b in zip(first, second):
        assert_bitwise_equal(a, b, "weights after 20 steps")


@pytest.mark.parametrize("name,shape,forward", CASES, ids=CASE_IDS)
def test_non_contiguous_grad_output_and_indices(name, shape, forward):
    x, out, grad, _ = run_stock(shape, forward, torch.float32)
    want = twin_backward(out, grad)
    strided = torch.empty([*grad.shape[:-1], 3 * grad.shape[-1]])[..., ::3]
    strided.copy_(grad)
    assert not strided.is_contiguous()
    fn = out.grad_fn
    if hasattr(fn, "_saved_result1"):
        idx = fn._saved_result1
        idx_strided = torch.empty([*idx.shape[:-1], 2 * idx.shape[-1]], dtype=idx.dtype)[..., ::2]
        idx_strided.copy_(idx)
        name_ = type(fn).__name__
        if name_ == "AdaptiveMaxPool2DBackward0":
            got = ops.adaptive_max_pool2d_backward(strided, fn._saved_self, idx_strided)
        elif name_ == "AdaptiveMaxPool3DBackward0":
            got = ops.adaptive_max_pool3d_backward(strided, fn._saved_self, idx_strided)
        elif name_ == "MaxPool3DWithIndicesBackward0":
            got = ops.max_pool3d_with_indices_backward(
                strided, fn._saved_self, fn._saved_kernel_size, fn._saved_stride, fn._saved_padding,
                fn._saved_dilation, fn._saved_ceil_mode, idx_strided)
        else:
            op = ops.fractional_max_pool2d_backward if "2D" in name_ else ops.fractional_max_pool3d_backward
            got = op(strided, fn._saved_self, fn._saved_kernel_size, fn._saved_output_size, idx_strided)
    else:
        got = twin_backward(out, strided)
    assert_bitwise_equal(got, want, name)
