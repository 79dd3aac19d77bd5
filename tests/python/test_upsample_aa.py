"""Antialiased upsample backwards (_upsample_bilinear2d_aa_backward, _upsample_bicubic2d_aa_backward, functional
and .grad_input): the twins against stock CPU (float, double) and a float64 reference (half, bfloat16), up- and
downsampling by large factors, align_corners, explicit scales; F.interpolate(antialias=True) autograd; the
contract's bits (a Python model of the windows and the tree), reruns, thread counts; layouts, empty inputs,
every bad input; on a GPU: CUDA == CPU twin bitwise and the override under the flag."""

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import detops
from conftest import FLOAT_DTYPES, assert_bitwise_equal, assert_twin_schemas_equal_aten, cpu_bytes_allocated
from contract_ref import tree_sum

ops = torch.ops.detops
aten = torch.ops.aten

MODES = ("bilinear", "bicubic")
OVERLOADS = [f"aten::_upsample_{mode}2d_aa_backward{suffix}" for mode in MODES for suffix in ("", ".grad_input")]


def twin(mode):
    return getattr(ops, f"_upsample_{mode}2d_aa_backward")


def stock(mode):
    return getattr(aten, f"_upsample_{mode}2d_aa_backward")


# (id, input size [N, C, H, W], output size [OH, OW], align_corners, scales (h, w) or None)
CASES = [
    ("down2", [2, 3, 12, 10], [6, 5], False, None),
    ("down_odd", [2, 2, 13, 11], [5, 4], False, None),
    ("down8", [1, 2, 64, 48], [8, 6], False, None),
    ("down_large", [1, 1, 97, 130], [3, 4], False, None),
    ("down_to_one", [1, 2, 20, 9], [1, 1], False, None),
    ("up2", [2, 3, 5, 6], [10, 12], False, None),
    ("up5", [1, 2, 4, 3], [20, 15], False, None),
    ("up_large", [1, 1, 3, 2], [40, 33], False, None),
    ("mixed", [2, 2, 9, 4], [3, 17], False, None),
    ("align_down", [2, 2, 17, 13], [5, 4], True, None),
    ("align_up", [1, 3, 4, 5], [13, 17], True, None),
    ("align_one", [1, 2, 7, 6], [1, 3], True, None),
    ("scales_down", [2, 2, 20, 15], [6, 4], False, (0.3, 0.3)),
    ("scales_up", [1, 2, 5, 4], [12, 10], False, (2.5, 2.5)),
    ("scales_odd", [1, 2, 11, 7], [4, 9], False, (0.37, 1.4)),
]
CASE_IDS = [c[0] for c in CASES]


def make_grad(in_size, out_size, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn([in_size[0], in_size[1], *out_size], generator=g, dtype=torch.float64).to(dtype)


def scales_of(scales):
    return (None, None) if scales is None else scales


def call(op, grad, out_size, in_size, align, scales, **kwargs):
    return op(grad, out_size, in_size, align, *scales_of(scales), **kwargs)


# ---- a Python model of the windows and the contract (docs/upsample_aa.md) ----

def aa_filter(mode, x, f):
    x = -x if x < 0 else x
    if mode == "bilinear":
        return f(1) - x if x < 1 else f(0)
    a = f(-0.5)
    if x < 1:
        t = (a + f(2)) * x - (a + f(3))
        return t * x * x + f(1)
    if x < 2:
        return (((x + f(-5)) * x + f(8)) * x + f(-4)) * a
    return f(0)


def axis_scale(inp, out, align, scale, f):
    if align:
        return f(inp - 1) / f(out - 1) if out > 1 else f(0)
    if scale is not None and scale > 0:
        return f(1.0 / scale)
    return f(inp) / f(out)


def axis_windows(mode, inp, out, align, scale, f):
    """Per output: (xmin, normalised weights), each operation rounded to `f` (np.float32 or np.float64)."""
    s = axis_scale(inp, out, align, scale, f)
    half = f(1 if mode == "bilinear" else 2)
    support = half * s if s >= 1 else half
    invscale = f(1) / s if s >= 1 else f(1)
    max_window = int(np.ceil(support)) * 2 + 1
    windows = []
    for o in range(out):
        center = s * (f(o) + f(0.5))
        xmin = max(int(center - support + f(0.5)), 0)
        xsize = min(int(center + support + f(0.5)), inp) - xmin
        xsize = min(max(xsize, 0), max_window)
        raw = [aa_filter(mode, ((f(j) + (f(xmin) - center)) + f(0.5)) * invscale, f) for j in range(xsize)]
        total = f(0)
        for w in raw:
            total = total + w
        windows.append((xmin, [w / total if total != 0 else w for w in raw]))
    return windows


def tree_ref(mode, grad, out_size, in_size, align, scales):
    """Per input element: (wx * wy) * grad over the covering outputs in ascending (oy, ox), 0 + the contract's
    tree, rounded once (float32)."""
    f = np.float32
    sh, sw = scales_of(scales)
    wy = axis_windows(mode, in_size[2], out_size[0], align, sh, f)
    wx = axis_windows(mode, in_size[3], out_size[1], align, sw, f)
    n, c, ih, iw = in_size
    g = grad.reshape(n * c, out_size[0], out_size[1]).numpy()
    ref = np.zeros((n * c, ih, iw), dtype=np.float32)
    for p in range(n * c):
        contrib = {}
        for oy, (ymin, wys) in enumerate(wy):
            for ox, (xmin, wxs) in enumerate(wx):
                for a, wyv in enumerate(wys):
                    for b, wxv in enumerate(wxs):
                        contrib.setdefault((ymin + a, xmin + b), []).append(f(wxv * wyv) * g[p, oy, ox])
        for (y, x), vals in contrib.items():
            # NB: appended in ascending (oy, ox): the source order.
            ref[p, y, x] = f(f(0) + tree_sum(vals, f))
    return torch.from_numpy(ref).reshape(in_size)


def reference64(mode, grad, out_size, in_size, align, scales):
    """Stock's CPU kernel in float64 on the same grad values."""
    return call(stock(mode), grad.double(), out_size, in_size, align, scales)


# ---- the table and the schemas ----

def test_covered_ops_lists_every_overload():
    covered = detops.covered_ops()
    for name in OVERLOADS:
        assert name in covered, name


def test_twin_schemas_equal_aten():
    assert_twin_schemas_equal_aten(OVERLOADS)


def test_python_windows_are_stock_forward():
    """The model's windows in float64 give stock's CPU forward (a check of the model itself)."""
    g = torch.Generator().manual_seed(3)
    for mode in MODES:
        for _, in_size, out_size, align, scales in CASES:
            x = torch.randn(in_size, generator=g, dtype=torch.float64)
            want = getattr(aten, f"_upsample_{mode}2d_aa")(x, out_size, align, *scales_of(scales))
            sh, sw = scales_of(scales)
            wy = axis_windows(mode, in_size[2], out_size[0], align, sh, np.float64)
            wx = axis_windows(mode, in_size[3], out_size[1], align, sw, np.float64)
            my = np.zeros((out_size[0], in_size[2]))
            mx = np.zeros((out_size[1], in_size[3]))
            for o, (lo, ws) in enumerate(wy):
                my[o, lo:lo + len(ws)] = ws
            for o, (lo, ws) in enumerate(wx):
                mx[o, lo:lo + len(ws)] = ws
            got = torch.einsum("ab,ncbd,ed->ncae", torch.from_numpy(my), x, torch.from_numpy(mx))
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10, msg=f"{mode} {in_size} {out_size}")


# ---- values ----

def _tol(dtype):
    return {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,in_size,out_size,align,scales", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_twin_matches_stock_cpu(mode, name, in_size, out_size, align, scales, dtype):
    grad = make_grad(in_size, out_size, dtype)
    got = call(twin(mode), grad, out_size, in_size, align, scales)
    assert list(got.shape) == in_size and got.dtype == dtype and got.is_contiguous()
    ref = reference64(mode, grad, out_size, in_size, align, scales)
    tol = _tol(dtype)
    torch.testing.assert_close(got.double(), ref, rtol=tol, atol=tol, msg=name)
    if dtype in (torch.float32, torch.float64):
        want = call(stock(mode), grad, out_size, in_size, align, scales)
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=name)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("size,scale_factor", [((7, 30), None), ((64, 9), None), (None, 0.23), (None, 3.7),
                                               (None, (0.5, 2.25))], ids=str)
def test_interpolate_autograd_on_cpu_matches_twin(mode, align, size, scale_factor):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 3, 31, 17, generator=g, dtype=torch.float64, requires_grad=True)
    y = F.interpolate(x, size=size, scale_factor=scale_factor, mode=mode, align_corners=align, antialias=True)
    grad = torch.randn(y.shape, generator=g, dtype=torch.float64)
    (autograd,) = torch.autograd.grad(y, x, grad)
    node = y.grad_fn
    scales = (node._saved_scales_h, node._saved_scales_w)
    assert list(node._saved_output_size) == list(y.shape[2:])
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 2e-5)):
        got = call(twin(mode), grad.to(dtype), list(y.shape[2:]), list(x.shape), align, scales)
        torch.testing.assert_close(got.double(), autograd, rtol=tol, atol=tol)


def test_large_factor_downsampling_spreads_over_the_window():
    # 8x downsampling: every input of a 16-wide (bilinear) window gets a share, unlike plain bilinear.
    grad = torch.ones(1, 1, 4, 4, dtype=torch.float64)
    got = ops._upsample_bilinear2d_aa_backward(grad, [4, 4], [1, 1, 32, 32], False)
    assert (got > 0).all()
    torch.testing.assert_close(got.sum(), torch.tensor(16.0, dtype=torch.float64))  # weights sum to 1 per output


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_audit_finds_interpolate_antialias_covered(mode, device):
    from detops.audit import COVERED

    x = torch.randn(1, 2, 16, 12).to(device).requires_grad_(True)
    result = detops.audit(lambda t: F.interpolate(t, size=(5, 4), mode=mode, antialias=True), x)
    op = f"aten::_upsample_{mode}2d_aa_backward"
    assert result[op].category == COVERED
    assert result[op].alert == f"upsample_{mode}2d_aa_backward_out_cuda"


# ---- the contract's bits ----

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,in_size,out_size,align,scales", CASES, ids=CASE_IDS)
def test_bits_equal_python_tree(mode, name, in_size, out_size, align, scales):
    if in_size[2:] == out_size:
        pytest.skip("equal sizes copy")
    grad = make_grad(in_size, out_size, torch.float32, seed=5)
    got = call(twin(mode), grad, out_size, in_size, align, scales)
    assert_bitwise_equal(got, tree_ref(mode, grad, out_size, in_size, align, scales), f"{mode} {name}")


def test_upsampling_takes_more_than_one_block():
    # 4x bicubic upsampling: an interior input is covered by 16 outputs per axis, 256 contributions.
    in_size, out_size = [1, 1, 6, 6], [24, 24]
    wy = axis_windows("bicubic", 6, 24, False, None, np.float32)
    covering = [o for o, (lo, ws) in enumerate(wy) if lo <= 3 < lo + len(ws)]
    assert len(covering) ** 2 > 32
    grad = make_grad(in_size, out_size, torch.float32, seed=8)
    got = ops._upsample_bicubic2d_aa_backward(grad, out_size, in_size, False)
    assert_bitwise_equal(got, tree_ref("bicubic", grad, out_size, in_size, False, None))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("in_size,out_size", [([4, 8, 40, 36], [9, 7]), ([4, 8, 9, 7], [40, 36])], ids=str)
def test_bitwise_across_reruns_and_threads(mode, in_size, out_size):
    grad = make_grad(in_size, out_size, torch.float32, seed=2)
    torch.set_num_threads(1)
    one = twin(mode)(grad, out_size, in_size, False)
    torch.set_num_threads(2)
    two = twin(mode)(grad, out_size, in_size, False)
    again = twin(mode)(grad, out_size, in_size, False)
    assert_bitwise_equal(one, two)
    assert_bitwise_equal(two, again)


# ---- overloads, layouts, empty inputs, equal sizes ----

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,in_size,out_size,align,scales", CASES[:6], ids=CASE_IDS[:6])
def test_grad_input_overload(mode, name, in_size, out_size, align, scales):
    grad = make_grad(in_size, out_size)
    want = call(twin(mode), grad, out_size, in_size, align, scales)
    buf = torch.empty(0)
    res = call(twin(mode).grad_input, grad, out_size, in_size, align, scales, grad_input=buf)
    assert res.data_ptr() == buf.data_ptr()
    assert_bitwise_equal(buf, want, name)
    strided = torch.full([*in_size[:-1], 2 * in_size[-1]], 7.0)[..., ::2]
    call(twin(mode).grad_input, grad, out_size, in_size, align, scales, grad_input=strided)
    assert not strided.is_contiguous()
    assert_bitwise_equal(strided, want, name)
    with pytest.raises(RuntimeError, match=re.escape(f"_upsample_{mode}2d_aa_backward(): expected grad_input of "
                                                     "dtype Float, but got Double")):
        call(twin(mode).grad_input, grad, out_size, in_size, align, scales,
             grad_input=torch.empty(0, dtype=torch.float64))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,in_size,out_size,align,scales", CASES[:6], ids=CASE_IDS[:6])
def test_grad_input_computed_in_place_or_aside_same_bits(mode, name, in_size, out_size, align, scales):
    grad = make_grad(in_size, out_size)
    want = call(twin(mode), grad, out_size, in_size, align, scales)
    # Contiguous and of the input's size: written in place, over what it held, allocating grad_input's bytes less
    # than the functional overload.
    buf = torch.full(in_size, 7.0)
    run = lambda: call(twin(mode).grad_input, grad, out_size, in_size, align, scales, grad_input=buf)
    assert run().data_ptr() == buf.data_ptr()
    assert_bitwise_equal(buf, want, name)
    functional = lambda: call(twin(mode), grad, out_size, in_size, align, scales)
    assert cpu_bytes_allocated(run) + buf.nbytes <= cpu_bytes_allocated(functional), name
    # Over grad_output's memory: computed aside from the unchanged grad_output, then copied.
    n = buf.numel()
    store = torch.empty(max(grad.numel(), n))
    g = store[:grad.numel()].view(grad.shape).copy_(grad)
    call(twin(mode).grad_input, g, out_size, in_size, align, scales, grad_input=store[:n].view(in_size))
    assert_bitwise_equal(store[:n].view(in_size), want, name)
    # A channels-last grad_output into a contiguous grad_input, and into a channels-last one.
    gradc = grad.contiguous(memory_format=torch.channels_last)
    for into in (torch.full(in_size, 7.0), torch.full(in_size, 7.0).contiguous(memory_format=torch.channels_last)):
        call(twin(mode).grad_input, gradc, out_size, in_size, align, scales, grad_input=into)
        assert_bitwise_equal(into, want, name)


@pytest.mark.parametrize("mode", MODES)
def test_non_contiguous_grad_output(mode):
    in_size, out_size = [2, 3, 14, 11], [5, 23]
    grad = make_grad(in_size, out_size)
    want = twin(mode)(grad, out_size, in_size, False)
    strided = torch.empty([*grad.shape[:-1], 3 * grad.shape[-1]])[..., ::3]
    strided.copy_(grad)
    transposed = grad.transpose(0, 1).contiguous().transpose(0, 1)
    assert not strided.is_contiguous() and not transposed.is_contiguous()
    assert_bitwise_equal(twin(mode)(strided, out_size, in_size, False), want)
    assert_bitwise_equal(twin(mode)(transposed, out_size, in_size, False), want)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_channels_last_same_bits_and_stock_layout(mode, dtype):
    in_size, out_size = [2, 5, 16, 12], [5, 31]
    grad = make_grad(in_size, out_size, dtype)
    gradc = grad.contiguous(memory_format=torch.channels_last)
    got = twin(mode)(grad, out_size, in_size, False)
    gotc = twin(mode)(gradc, out_size, in_size, False)
    stockc = stock(mode)(gradc, out_size, in_size, False)
    assert_bitwise_equal(got, gotc)
    assert gotc.stride() == stockc.stride(), f"{gotc.stride()} vs stock {stockc.stride()}"
    # Stock's bilinear result keeps grad_output's channels-last layout; its bicubic result is contiguous.
    assert gotc.is_contiguous(memory_format=torch.channels_last if mode == "bilinear" else torch.contiguous_format)
    torch.testing.assert_close(gotc, stockc, rtol=_tol(dtype), atol=_tol(dtype))


@pytest.mark.parametrize("mode", MODES)
def test_empty_inputs(mode):
    for in_size in ([0, 3, 8, 6], [2, 0, 8, 6]):
        out_size = [3, 4]
        grad = torch.randn(in_size[0], in_size[1], *out_size)
        got = twin(mode)(grad, out_size, in_size, False)
        assert list(got.shape) == in_size and got.dtype == grad.dtype
        assert got.shape == stock(mode)(grad, out_size, in_size, False).shape
        buf = torch.empty(5)
        twin(mode).grad_input(grad, out_size, in_size, False, grad_input=buf)
        assert list(buf.shape) == in_size


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("align", [False, True])
def test_equal_sizes_copy_grad_output(mode, align):
    in_size = [2, 3, 7, 9]
    grad = make_grad(in_size, in_size[2:])
    got = twin(mode)(grad, in_size[2:], in_size, align)
    assert_bitwise_equal(got, grad)
    assert got.data_ptr() != grad.data_ptr()
    # Stock's CPU kernel computes identity weights there: the same values.
    assert_bitwise_equal(stock(mode)(grad, in_size[2:], in_size, align), grad)


@pytest.mark.parametrize("mode", MODES)
def test_one_output_with_align_corners_feeds_the_top_left_corner(mode):
    # Scale 0: the one output's window is the first input (bilinear) or the first two (bicubic) per axis.
    grad = torch.randn(1, 2, 1, 1, dtype=torch.float64)
    got = twin(mode)(grad, [1, 1], [1, 2, 5, 4], True)
    k = 1 if mode == "bilinear" else 2
    assert torch.equal(got[:, :, k:], torch.zeros_like(got[:, :, k:]))
    assert torch.equal(got[:, :, :, k:], torch.zeros_like(got[:, :, :, k:]))
    if mode == "bilinear":
        assert torch.equal(got[:, :, 0, 0], grad[:, :, 0, 0])
    torch.testing.assert_close(got, stock(mode)(grad, [1, 1], [1, 2, 5, 4], True), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_integer_dtypes_go_to_stock(mode):
    grad = torch.ones(1, 1, 3, 3, dtype=torch.int64)
    for op in (stock(mode), twin(mode)):
        with pytest.raises(NotImplementedError, match=f'"upsample_{mode}2d_aa_backward_cpu" not implemented for '
                                                      "'Long'"):
            op(grad, [3, 3], [1, 1, 6, 6], False)


# ---- bad inputs ----

def _raises_both(mode, args, pattern):
    """The twin raises `pattern` after the op's name; so does stock's CPU op."""
    with pytest.raises(RuntimeError, match=re.escape(f"_upsample_{mode}2d_aa_backward(): ") + pattern):
        twin(mode)(*args)
    with pytest.raises(RuntimeError, match=pattern):
        stock(mode)(*args)


@pytest.mark.parametrize("mode", MODES)
def test_bad_inputs_raise_clear_errors(mode):
    g = torch.randn(2, 3, 4, 5)
    _raises_both(mode, (g, [4, 5], [2, 3, 8], False),
                 re.escape("It is expected input_size equals to 4, but got size 3"))
    _raises_both(mode, (g, [4], [2, 3, 8, 10], False),
                 re.escape("It is expected output_size equals to 2, but got size 1"))
    _raises_both(mode, (g, [4, 5], [2, 3, 0, 10], False),
                 re.escape("Input and output sizes should be greater than 0, but got input (H: 0, W: 10) output "
                           "(H: 4, W: 5)"))
    _raises_both(mode, (g, [4, 0], [2, 3, 8, 10], False),
                 re.escape("Input and output sizes should be greater than 0, but got input (H: 8, W: 10) output "
                           "(H: 4, W: 0)"))
    _raises_both(mode, (g[0], [4, 5], [2, 3, 8, 10], False),
                 re.escape("Expected grad_output to be a tensor of dimension 4 but got: dimension 3"))
    _raises_both(mode, (g, [4, 6], [2, 3, 8, 10], False),
                 re.escape("Expected grad_output to have the same shape as output; output.size(3) = 6 but got "
                           "grad_output.size(3) = 5"))
    _raises_both(mode, (g, [4, 5], [2, 4, 8, 10], False),
                 re.escape("Expected grad_output to have the same shape as output; output.size(1) = 4 but got "
                           "grad_output.size(1) = 3"))
    _raises_both(mode, (g, [4, 5], [3, 3, 8, 10], False),
                 re.escape("Expected grad_output to have the same shape as output; output.size(0) = 3 but got "
                           "grad_output.size(0) = 2"))
    # The .grad_input overload checks the same before touching grad_input.
    buf = torch.full((3,), 5.0)
    with pytest.raises(RuntimeError, match="output.size\\(3\\) = 6"):
        twin(mode).grad_input(g, [4, 6], [2, 3, 8, 10], False, grad_input=buf)
    assert torch.equal(buf, torch.full((3,), 5.0))


# ---- GPU ----

@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,in_size,out_size,align,scales", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_gpu_cuda_twin_equals_cpu_twin_bitwise(mode, name, in_size, out_size, align, scales, dtype):
    grad = make_grad(in_size, out_size, dtype, seed=4)
    cpu = call(twin(mode), grad, out_size, in_size, align, scales)
    cuda = call(twin(mode), grad.cuda(), out_size, in_size, align, scales)
    assert cuda.is_cuda and cuda.dtype == dtype
    assert_bitwise_equal(cuda.cpu(), cpu, name)
    buf = torch.empty(0, dtype=dtype, device="cuda")
    call(twin(mode).grad_input, grad.cuda(), out_size, in_size, align, scales, grad_input=buf)
    assert_bitwise_equal(buf.cpu(), cpu, name + " .grad_input")
    gradc = grad.contiguous(memory_format=torch.channels_last)
    cl = call(twin(mode), gradc.cuda(), out_size, in_size, align, scales)
    assert cl.stride() == call(twin(mode), gradc, out_size, in_size, align, scales).stride()
    assert_bitwise_equal(cl.cpu(), cpu, name + " channels_last")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,in_size,out_size,align,scales", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_gpu_override_under_flag_equals_cpu_twin(mode, name, in_size, out_size, align, scales, dtype):
    grad = make_grad(in_size, out_size, dtype, seed=6)
    want = call(twin(mode), grad, out_size, in_size, align, scales)
    gc = grad.cuda()
    with detops.mode("auto"):
        torch.use_deterministic_algorithms(True)
        got = call(stock(mode), gc, out_size, in_size, align, scales)
        buf = torch.empty(0, dtype=dtype, device="cuda")
        call(stock(mode).grad_input, gc, out_size, in_size, align, scales, grad_input=buf)
        torch.cuda.synchronize()
    assert_bitwise_equal(got.cpu(), want, name)
    assert_bitwise_equal(buf.cpu(), want, name + " .grad_input")
    with detops.mode("always"):
        torch.use_deterministic_algorithms(False)
        assert_bitwise_equal(call(stock(mode), gc, out_size, in_size, align, scales).cpu(), want, name + " (always)")
    # Stock's atomics kernel (mode off, flag off) agrees within tolerance, scaled by the result's magnitude
    # (stock adds up to thousands of contributions per element in any order). Its half and bfloat16 kernels
    # round the weights and every partial sum to the dtype, so only float and double are compared.
    if dtype in (torch.float32, torch.float64):
        with detops.mode("off"):
            torch.use_deterministic_algorithms(False)
            ref = call(stock(mode), gc, out_size, in_size, align, scales).cpu()
        tol = 1e-10 if dtype == torch.float64 else 1e-4
        scale = max(want.abs().max().item(), 1.0)
        torch.testing.assert_close(ref, want, rtol=tol, atol=tol * scale, msg=name)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_gpu_interpolate_antialias_backward_under_flag(mode):
    g = torch.Generator().manual_seed(12)
    x = torch.randn(2, 3, 64, 48, generator=g)
    grad = torch.randn(2, 3, 16, 20, generator=g)
    xc = x.cuda().requires_grad_(True)
    with detops.mode("auto"):
        torch.use_deterministic_algorithms(True)
        y = F.interpolate(xc, size=(16, 20), mode=mode, antialias=True)
        (got,) = torch.autograd.grad(y, xc, grad.cuda())
        (again,) = torch.autograd.grad(F.interpolate(xc, size=(16, 20), mode=mode, antialias=True), xc, grad.cuda())
    want = twin(mode)(grad, [16, 20], list(x.shape), False)
    assert_bitwise_equal(got.cpu(), want)
    assert_bitwise_equal(again.cpu(), want)
