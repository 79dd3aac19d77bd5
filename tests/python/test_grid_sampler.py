"""Grid sampler backwards (grid_sampler_2d_backward, grid_sampler_3d_backward, cudnn_grid_sampler_backward): the
twins against stock CPU and a float64 reference over every interpolation, padding and align_corners, every
dtype, non-contiguous and empty inputs, output_mask; the contract's bits (a Python model of the taps and the
tree, reruns, thread counts); F.grid_sample + F.affine_grid through autograd on the CPU; every bad input; on a
GPU: CUDA == CPU twin bitwise, the overrides under the flag (native and cuDNN routes) and a spatial
transformer that trains to the same weights in two processes."""

import contextlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import detops
from conftest import FLOAT_DTYPES, assert_bitwise_equal
from contract_ref import tree_sum

ops = torch.ops.detops
aten = torch.ops.aten

MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}

# (id, input shape, grid spatial shape): 2-d and 3-d; grids denser than the input (many contributions per
# pixel: more than one block of the contract's tree), sparser, single pixels, batch > 1.
CASES = [
    ("2d", (2, 3, 5, 6), (4, 7)),
    ("2d_dense", (1, 2, 3, 4), (16, 16)),
    ("2d_one_pixel", (2, 2, 1, 1), (3, 3)),
    ("2d_one_row", (1, 3, 1, 7), (5, 2)),
    ("3d", (2, 2, 3, 4, 5), (2, 3, 4)),
    ("3d_dense", (1, 2, 2, 2, 3), (5, 6, 7)),
]
CASE_IDS = [c[0] for c in CASES]

SETTINGS = [(m, p, a) for m in MODES for p in PADDINGS for a in (False, True)]
SETTING_IDS = [f"{m}-{p}-{'ac' if a else 'noac'}" for m, p, a in SETTINGS]


def twin(dims):
    return ops.grid_sampler_2d_backward if dims == 2 else ops.grid_sampler_3d_backward


def stock(dims):
    return aten.grid_sampler_2d_backward if dims == 2 else aten.grid_sampler_3d_backward


def make(shape, out, dtype=torch.float32, seed=0, spread=1.3):
    """input, grid (values in [-spread, spread]: some points outside the input) and grad_output."""
    g = torch.Generator().manual_seed(seed)
    dims = len(shape) - 2
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    grid = (torch.rand((shape[0],) + tuple(out) + (dims,), generator=g, dtype=torch.float64) * 2 - 1) * spread
    grad = torch.randn((shape[0], shape[1]) + tuple(out), generator=g, dtype=torch.float64)
    return x.to(dtype), grid.to(dtype), grad.to(dtype)


def call(fn, grad, x, grid, mode, padding, align, mask=(True, True)):
    return fn(grad, x, grid, MODES[mode], PADDINGS[padding], align, list(mask))


def skip_3d_bicubic(shape, mode):
    if len(shape) == 5 and mode == "bicubic":
        pytest.skip("bicubic is 2-d only (stock rejects it, tested below)")


# ---- the twins against stock ----

@pytest.mark.parametrize("mode,padding,align", SETTINGS, ids=SETTING_IDS)
@pytest.mark.parametrize("name,shape,out", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_twin_matches_stock_cpu(name, shape, out, mode, padding, align, dtype):
    skip_3d_bicubic(shape, mode)
    dims = len(shape) - 2
    x, grid, grad = make(shape, out, dtype, seed=len(name))
    got_in, got_grid = call(twin(dims), grad, x, grid, mode, padding, align)
    want_in, want_grid = call(stock(dims), grad, x, grid, mode, padding, align)
    tol = {torch.float32: 2e-5, torch.float64: 1e-12}[dtype]
    for got, want in ((got_in, want_in), (got_grid, want_grid)):
        assert got.dtype == want.dtype and got.shape == want.shape and got.is_contiguous()
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("mode,padding,align", SETTINGS, ids=SETTING_IDS)
@pytest.mark.parametrize("name,shape,out", CASES[:1] + CASES[4:5], ids=["2d", "3d"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_reduced_precision_against_float64(name, shape, out, mode, padding, align, dtype):
    """Half and bfloat16 (stock's CPU kernels lack or round them step by step): the twin, which accumulates in
    float and rounds once, against stock in float64 on the same values."""
    skip_3d_bicubic(shape, mode)
    dims = len(shape) - 2
    # Grid values on a coarse lattice: exactly representable, so float and float64 pick the same taps.
    x, grid, grad = make(shape, out, dtype, seed=3)
    grid = (grid.double() * 16).round().div(16).to(dtype)
    got_in, got_grid = call(twin(dims), grad, x, grid, mode, padding, align)
    want_in, want_grid = call(stock(dims), grad.double(), x.double(), grid.double(), mode, padding, align)
    eps = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}[dtype]
    for got, want in ((got_in, want_in), (got_grid, want_grid)):
        assert got.dtype == dtype
        scale = want.abs().max().item() + 1
        torch.testing.assert_close(got.double(), want, rtol=2 * eps, atol=2 * eps * scale)


def test_cudnn_twin_is_the_native_backward_with_cudnn_settings():
    for dtype in (torch.float32, torch.float64, torch.float16):
        x, grid, grad = make((2, 3, 5, 6), (4, 7), dtype, seed=9)
        got = ops.cudnn_grid_sampler_backward(x, grid, grad)
        native = ops.grid_sampler_2d_backward(grad, x, grid, 0, 0, True, [True, True])
        for a, b in zip(got, native):
            assert_bitwise_equal(a, b, f"cudnn vs native twin, {dtype}")
        if dtype != torch.float16:
            want = aten.grid_sampler_2d_backward(grad, x, grid, 0, 0, True, [True, True])
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-4)


@pytest.mark.parametrize("dims", [2, 3])
def test_output_mask(dims):
    shape, out = ((2, 3, 5, 6), (4, 7)) if dims == 2 else ((1, 2, 3, 4, 5), (2, 3, 4))
    x, grid, grad = make(shape, out, seed=5)
    both = call(twin(dims), grad, x, grid, "bilinear", "border", False)
    for mask in ((False, True), (False, False)):
        got_in, got_grid = call(twin(dims), grad, x, grid, "bilinear", "border", False, mask)
        stock_in, _ = call(stock(dims), grad, x, grid, "bilinear", "border", False, mask)
        assert got_in is None and stock_in is None  # not computed, as in stock
        assert_bitwise_equal(got_grid, both[1], f"grad_grid with output_mask {mask}")
    got = call(twin(dims), grad, x, grid, "bilinear", "border", False, (True, False))
    for a, b in zip(got, both):  # stock computes grad_grid whatever output_mask[1] says
        assert_bitwise_equal(a, b, "output_mask (True, False)")


@pytest.mark.parametrize("dims", [2, 3])
def test_non_contiguous_inputs_give_the_contiguous_bits(dims):
    shape, out = ((2, 3, 5, 6), (4, 7)) if dims == 2 else ((2, 2, 3, 4, 5), (2, 3, 4))
    x, grid, grad = make(shape, out, seed=6)
    want = call(twin(dims), grad, x, grid, "bilinear", "reflection", True)
    fmt = torch.channels_last if dims == 2 else torch.channels_last_3d
    x_cl = x.contiguous(memory_format=fmt)
    grid_t = grid.transpose(1, 2).contiguous().transpose(1, 2)  # same values, permuted strides
    grad_exp = grad[:, :1].expand_as(grad)  # zero stride over channels
    want_exp = call(twin(dims), grad_exp.contiguous(), x, grid, "bilinear", "reflection", True)
    got = call(twin(dims), grad, x_cl, grid_t, "bilinear", "reflection", True)
    got_exp = call(twin(dims), grad_exp, x, grid, "bilinear", "reflection", True)
    for a, b in zip(got, want):
        assert_bitwise_equal(a, b, "channels-last input, permuted grid")
        assert a.is_contiguous()
    for a, b in zip(got_exp, want_exp):
        assert_bitwise_equal(a, b, "expanded grad_output")


@pytest.mark.parametrize("shape,out", [((0, 3, 4, 5), (2, 3)), ((2, 0, 4, 5), (2, 3)), ((2, 3, 4, 5), (0, 3)),
                                       ((0, 2, 3, 4, 5), (2, 3, 4)), ((2, 2, 3, 4, 5), (2, 0, 4))], ids=str)
def test_empty(shape, out):
    dims = len(shape) - 2
    x, grid, grad = make(shape, out, seed=1)
    for mode, padding in (("bilinear", "zeros"), ("nearest", "reflection"), ("bilinear", "border")):
        got = call(twin(dims), grad, x, grid, mode, padding, False)
        want = call(stock(dims), grad, x, grid, mode, padding, False)
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.dtype == b.dtype
            torch.testing.assert_close(a, b)


# ---- the contract's bits ----

def _np_tap_model(x, grid, grad, align):
    """2-d bilinear, zeros padding: each (grid point, tap) pair's pixel and weight * grad_output in float32
    (numpy, each operation rounded), in source order; the expected grad_input by the contract's tree."""
    n_, c_, h, w = x.shape
    f = np.float32
    g = grid.numpy()
    go = grad.numpy()
    contributions = {}  # (n, c, y, x) -> values in source order
    for n in range(n_):
        for oy in range(grid.shape[1]):
            for ox in range(grid.shape[2]):
                gx, gy = f(g[n, oy, ox, 0]), f(g[n, oy, ox, 1])
                if align:
                    ix = f(f(f(gx + f(1)) / f(2)) * f(w - 1))
                    iy = f(f(f(gy + f(1)) / f(2)) * f(h - 1))
                else:
                    ix = f(f(f(f(gx + f(1)) * f(w)) - f(1)) / f(2))
                    iy = f(f(f(f(gy + f(1)) * f(h)) - f(1)) / f(2))
                x0, y0 = int(np.floor(ix)), int(np.floor(iy))
                dx1, dx0 = f(f(x0 + 1) - ix), f(ix - f(x0))
                dy1, dy0 = f(f(y0 + 1) - iy), f(iy - f(y0))
                taps = [(y0, x0, f(dx1 * dy1)), (y0, x0 + 1, f(dx0 * dy1)), (y0 + 1, x0, f(dx1 * dy0)),
                        (y0 + 1, x0 + 1, f(dx0 * dy0))]
                for ty, tx, weight in taps:
                    if 0 <= ty < h and 0 <= tx < w:
                        for c in range(c_):
                            contributions.setdefault((n, c, ty, tx), []).append(f(weight * f(go[n, c, oy, ox])))
    want = np.zeros(x.shape, dtype=np.float32)
    for key, values in contributions.items():
        want[key] = f(f(0) + tree_sum(values, np.float32))
    return torch.from_numpy(want), max(len(v) for v in contributions.values())


@pytest.mark.parametrize("align", [False, True])
def test_grad_input_follows_the_contract_bitwise(align):
    # 24x24 points on a 3x4 input: pixels collect far more than one block (32) of contributions.
    x, grid, grad = make((1, 2, 3, 4), (24, 24), seed=11, spread=1.1)
    want, most = _np_tap_model(x, grid, grad, align)
    assert most > 32 * 2
    got, _ = ops.grid_sampler_2d_backward(grad, x, grid, 0, 0, align, [True, True])
    assert_bitwise_equal(got, want, "grad_input vs the contract's model")


def test_nearest_grad_input_is_the_tree_of_its_grad_outputs():
    # Grid points exactly on pixel centres (align_corners=True): each point's pixel is known.
    h, w = 3, 5
    g = torch.Generator().manual_seed(2)
    iy = torch.randint(0, h, (2, 10, 12), generator=g)
    ix = torch.randint(0, w, (2, 10, 12), generator=g)
    grid = torch.stack([ix / (w - 1) * 2 - 1, iy / (h - 1) * 2 - 1], dim=-1).float()
    grad = torch.randn(2, 3, 10, 12, generator=g)
    x = torch.randn(2, 3, h, w, generator=g)
    got, got_grid = ops.grid_sampler_2d_backward(grad, x, grid, 1, 0, True, [True, True])
    want = np.zeros((2, 3, h, w), dtype=np.float32)
    for n in range(2):
        for c in range(3):
            for py in range(h):
                for px in range(w):
                    sel = ((iy[n] == py) & (ix[n] == px)).flatten().numpy()
                    values = grad[n, c].flatten().numpy()[sel]
                    if len(values):
                        want[n, c, py, px] = np.float32(0) + tree_sum(values, np.float32)
    assert_bitwise_equal(got, torch.from_numpy(want), "nearest grad_input")
    assert torch.equal(got_grid, torch.zeros_like(got_grid))


@pytest.mark.parametrize("mode,padding,align", SETTINGS, ids=SETTING_IDS)
@pytest.mark.parametrize("dims", [2, 3])
def test_reruns_and_thread_counts_give_the_same_bits(dims, mode, padding, align):
    if dims == 3 and mode == "bicubic":
        pytest.skip("2-d only")
    shape, out = ((2, 3, 4, 5), (20, 21)) if dims == 2 else ((1, 2, 3, 3, 4), (6, 7, 8))
    x, grid, grad = make(shape, out, seed=13)
    threads = torch.get_num_threads()
    results = []
    for n in (1, 2, 1, max(threads, 2)):
        torch.set_num_threads(n)
        results.append(call(twin(dims), grad, x, grid, mode, padding, align))
    for r in results[1:]:
        for a, b in zip(r, results[0]):
            assert_bitwise_equal(a, b, f"threads / reruns, {mode} {padding} {align}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_every_dtype_runs_and_keeps_it(dtype):
    for dims, shape, out in ((2, (2, 3, 4, 5), (3, 4)), (3, (1, 2, 3, 4, 5), (2, 3, 4))):
        x, grid, grad = make(shape, out, dtype, seed=2)
        a = call(twin(dims), grad, x, grid, "bilinear", "zeros", False)
        b = call(twin(dims), grad, x, grid, "bilinear", "zeros", False)
        for t, u in zip(a, b):
            assert t.dtype == dtype
            assert_bitwise_equal(t, u, str(dtype))


def test_non_finite_grid_values_stay_out_of_the_input():
    """NaN, inf and huge coordinates map to -100 (stock's safe_downgrade_to_int_range): outside the input, so
    the other points' gradients are finite (bicubic with border or reflection padding pads such a tap back into
    the input with a NaN weight, as stock CUDA does). (Stock's CPU kernel crashes on these with border padding, so the
    twin is compared with itself on the points that are finite.)"""
    x, grid, grad = make((1, 2, 4, 4), (3, 3), seed=4)
    bad = grid.clone()
    bad[0, 0, 0] = float("nan")
    bad[0, 1, 1, 0] = float("inf")
    bad[0, 2, 2, 1] = 1e30
    for mode in MODES:
        for padding in PADDINGS:
            got_in, got_grid = call(ops.grid_sampler_2d_backward, grad, x, bad, mode, padding, False)
            again = call(ops.grid_sampler_2d_backward, grad, x, bad, mode, padding, False)
            assert_bitwise_equal(got_in, again[0], f"{mode} {padding}")
            if mode != "bicubic" or padding == "zeros":  # bicubic pads its taps into the input, as stock
                assert torch.isfinite(got_in).all(), (mode, padding)
            keep = torch.isfinite(bad).all(-1) & (bad.abs() < 2).all(-1)
            assert torch.isfinite(got_grid[keep]).all()


# ---- F.grid_sample through autograd on the CPU ----

class _TwinBackward(TorchDispatchMode):
    """Sends aten's grid sampler backwards to the detops twins (what the CUDA override does under the flag)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten.grid_sampler_2d_backward.default:
            self.calls += 1
            return ops.grid_sampler_2d_backward(*args, **kwargs)
        if func is aten.grid_sampler_3d_backward.default:
            self.calls += 1
            return ops.grid_sampler_3d_backward(*args, **kwargs)
        return func(*args, **kwargs)


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", list(PADDINGS))
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_and_affine_grid_autograd(dims, mode, padding, align):
    if dims == 3 and mode == "bicubic":
        pytest.skip("2-d only")
    torch.manual_seed(dims)
    size = (2, 3, 5, 6) if dims == 2 else (2, 2, 3, 4, 5)
    out_size = (2, 3, 7, 4) if dims == 2 else (2, 2, 4, 3, 5)

    def run(mode_ctx):
        x = torch.randn(size, generator=torch.Generator().manual_seed(1), requires_grad=True)
        theta = (torch.eye(dims, dims + 1) + 0.3 * torch.randn(2, dims, dims + 1, generator=torch.Generator()
                                                                .manual_seed(2))).requires_grad_()
        grid = F.affine_grid(theta, list(out_size), align_corners=align)
        with mode_ctx:
            y = F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)
            (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        return x.grad, theta.grad

    recorder = _TwinBackward()
    got = run(recorder)
    want = run(contextlib.nullcontext())
    assert recorder.calls == 1
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


# ---- bad inputs ----

def _bad(dims=2, **changes):
    shape, out = ((2, 3, 4, 5), (3, 4)) if dims == 2 else ((2, 3, 2, 4, 5), (2, 3, 4))
    x, grid, grad = make(shape, out, seed=0)
    args = dict(grad=grad, x=x, grid=grid, mode=0, padding=0)
    args.update(changes)
    return args


BAD = [
    # (id, dims, changes, message pattern, stock CPU raises the same)
    ("batch", 2, dict(x=torch.randn(1, 3, 4, 5)), "expected grid and input to have same batch size", True),
    ("last_dim", 2, dict(grid=torch.rand(2, 3, 4, 3)), "expected grid to have size 2 in last dimension", True),
    ("input_dims", 2, dict(x=torch.randn(2, 3, 4, 5, 1)),
     r"expected 4D input and grid with same number of dimensions", False),  # stock checks the grid's last size first
    ("grid_dims_3d", 3, dict(grid=torch.rand(2, 3, 4, 3)),
     r"expected 5D input and grid with same number of dimensions", True),
    ("empty_spatial", 2, dict(x=torch.randn(2, 3, 0, 5)), "expected input to have non-empty spatial dimensions", True),
    ("bicubic_3d", 3, dict(mode=2), "bicubic interpolation only supports 4D input", True),
    ("grid_dtype", 2, dict(grid=torch.rand(2, 3, 4, 2, dtype=torch.float64)), "expected grid of dtype Float", False),
    ("grad_dtype", 2, dict(grad=torch.randn(2, 3, 3, 4, dtype=torch.float64)),
     "expected grad_output of dtype Float", False),
    ("grad_shape", 2, dict(grad=torch.randn(2, 3, 4, 4)), r"expected grad_output with sizes \[2, 3, 3, 4\]", False),
    ("grad_channels", 3, dict(grad=torch.randn(2, 2, 2, 3, 4)), r"expected grad_output with sizes \[2, 3, 2, 3, 4\]",
     False),
    ("int_dtype", 2, dict(x=torch.ones(2, 3, 4, 5, dtype=torch.long), grid=torch.zeros(2, 3, 4, 2, dtype=torch.long),
                          grad=torch.ones(2, 3, 3, 4, dtype=torch.long)), "expected input of a floating-point dtype",
     False),
    ("mode", 2, dict(mode=3), "expected interpolation_mode 0 .bilinear., 1 .nearest. or 2 .bicubic., but got 3", False),
    ("padding", 2, dict(padding=-1), "expected padding_mode 0 .zeros., 1 .border. or 2 .reflection., but got -1",
     False),
]


@pytest.mark.parametrize("name,dims,changes,pattern,stock_same", BAD, ids=[b[0] for b in BAD])
def test_bad_inputs(name, dims, changes, pattern, stock_same):
    a = _bad(dims, **changes)
    args = (a["grad"], a["x"], a["grid"], a["mode"], a["padding"], False, [True, True])
    op_name = f"grid_sampler_{dims}d_backward"
    with pytest.raises(RuntimeError, match=f"{op_name}\\(\\): {pattern}"):
        twin(dims)(*args)
    if stock_same:
        with pytest.raises(RuntimeError, match=pattern):
            stock(dims)(*args)


@pytest.mark.gpu
def test_gpu_bad_devices():
    a = _bad()
    with pytest.raises(RuntimeError, match="expected input and grid to be on same device"):
        ops.grid_sampler_2d_backward(a["grad"].cuda(), a["x"].cuda(), a["grid"], 0, 0, False, [True, True])
    with pytest.raises(RuntimeError, match="expected grad_output on the same device"):
        ops.grid_sampler_2d_backward(a["grad"], a["x"].cuda(), a["grid"].cuda(), 0, 0, False, [True, True])


CUDNN_INVALID = "Invalid arguments to cudnn_grid_sampler_backward"
CUDNN_BAD = [
    ("bfloat16", lambda x, g, go: (x.bfloat16(), g.bfloat16(), go.bfloat16()), CUDNN_INVALID),
    ("too_many_channels", lambda x, g, go: (torch.randn(1, 1025, 2, 2), g[:1], torch.randn(1, 1025, 3, 4)),
     CUDNN_INVALID),
    ("5d", lambda x, g, go: (x[..., None], torch.rand(2, 3, 4, 1, 3), go[..., None]), CUDNN_INVALID),
    ("grad_dims", lambda x, g, go: (x, g, go[0]), r"Expected 4-dimensional tensor, but got 3-dimensional tensor "
     r"for argument #3 'grad_output' \(while checking arguments for cudnn_grid_sampler_backward\)"),
    ("batch", lambda x, g, go: (x[:1], g, go),
     r"cudnn_grid_sampler_backward\(\): expected grid and input to have same batch size"),
    ("grad_shape", lambda x, g, go: (x, g, go[:, :, :2]),
     r"cudnn_grid_sampler_backward\(\): expected grad_output with sizes"),
    ("grid_dtype", lambda x, g, go: (x, g.double(), go),
     r"cudnn_grid_sampler_backward\(\): expected grid of dtype Float"),
]


@pytest.mark.parametrize("name,change,pattern", CUDNN_BAD, ids=[b[0] for b in CUDNN_BAD])
def test_cudnn_bad_inputs(name, change, pattern):
    x, grid, grad = make((2, 3, 4, 5), (3, 4), seed=0)
    with pytest.raises(RuntimeError, match=pattern):
        ops.cudnn_grid_sampler_backward(*change(x, grid, grad))


# ---- GPU ----

@pytest.mark.gpu
@pytest.mark.parametrize("mode,padding,align", SETTINGS, ids=SETTING_IDS)
@pytest.mark.parametrize("name,shape,out", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_gpu_cuda_twin_equals_cpu_twin_bitwise(name, shape, out, mode, padding, align, dtype):
    skip_3d_bicubic(shape, mode)
    dims = len(shape) - 2
    x, grid, grad = make(shape, out, dtype, seed=21)
    cpu = call(twin(dims), grad, x, grid, mode, padding, align)
    cuda = call(twin(dims), grad.cuda(), x.cuda(), grid.cuda(), mode, padding, align)
    for a, b in zip(cuda, cpu):
        assert a.device.type == "cuda"
        assert_bitwise_equal(a, b, f"{name} {mode} {padding} {align} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("mask", [(True, True), (False, True)], ids=str)
def test_gpu_override_under_flag_equals_cpu_twin(dims, mask):
    shape, out = ((4, 8, 16, 16), (40, 40)) if dims == 2 else ((2, 4, 6, 7, 8), (9, 10, 11))
    x, grid, grad = make(shape, out, seed=22)
    want = call(twin(dims), grad, x, grid, "bilinear", "zeros", False, mask)
    torch.use_deterministic_algorithms(True)
    with detops.mode("auto"):
        got = call(stock(dims), grad.cuda(), x.cuda(), grid.cuda(), "bilinear", "zeros", False, mask)
    for a, b in zip(got, want):
        if b is None:
            assert a is None
            continue
        assert_bitwise_equal(a, b, f"override under the flag, mask {mask}")


@pytest.mark.gpu
def test_gpu_cudnn_route_under_flag_equals_cpu_twin():
    """F.grid_sample (4-D, bilinear, zeros, align_corners=True) on CUDA takes cuDNN; under the flag its backward
    is detops', with the CPU twin's bits."""
    x, grid, grad = make((4, 8, 16, 16), (40, 40), seed=23)
    want = ops.cudnn_grid_sampler_backward(x, grid, grad)
    torch.use_deterministic_algorithms(True)
    with detops.mode("auto"):
        got = aten.cudnn_grid_sampler_backward(x.cuda(), grid.cuda(), grad.cuda())
        xc = x.cuda().requires_grad_()
        gc = grid.cuda().requires_grad_()
        F.grid_sample(xc, gc, mode="bilinear", padding_mode="zeros", align_corners=True).backward(grad.cuda())
    for a, b in zip(got, want):
        assert_bitwise_equal(a, b, "cudnn override")
    assert_bitwise_equal(xc.grad, want[0], "F.grid_sample input gradient")
    assert_bitwise_equal(gc.grad, want[1], "F.grid_sample grid gradient")


@pytest.mark.gpu
def test_gpu_100_reruns_identical():
    x, grid, grad = make((4, 16, 8, 8), (64, 64), seed=24)
    xc, gc, goc = x.cuda(), grid.cuda(), grad.cuda()
    first = ops.grid_sampler_2d_backward(goc, xc, gc, 2, 2, False, [True, True])
    for _ in range(100):
        again = ops.grid_sampler_2d_backward(goc, xc, gc, 2, 2, False, [True, True])
        for a, b in zip(again, first):
            assert torch.equal(a, b)


_STN_SCRIPT = textwrap.dedent("""
    import hashlib, sys, torch, torch.nn as nn, torch.nn.functional as F
    import detops
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    align = sys.argv[1] == "1"
    loc = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 6)).cuda()
    head = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 12 * 12, 10)).cuda()
    params = list(loc.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=0.05)
    g = torch.Generator(device="cuda").manual_seed(1)
    for step in range(20):
        x = torch.randn(32, 3, 16, 16, device="cuda", generator=g)
        y = torch.randint(0, 10, (32,), device="cuda", generator=g)
        theta = loc(x).view(-1, 2, 3) + torch.eye(2, 3, device="cuda")
        grid = F.affine_grid(theta, [32, 3, 12, 12], align_corners=align)
        loss = F.cross_entropy(head(F.grid_sample(x, grid, align_corners=align)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    h = hashlib.sha256()
    for p in params:
        h.update(p.detach().cpu().numpy().tobytes())
    print(h.hexdigest())
""")


@pytest.mark.gpu
@pytest.mark.parametrize("align", ["0", "1"], ids=["native", "cudnn"])
def test_gpu_spatial_transformer_trains_to_identical_weights_in_two_processes(align):
    """align_corners=False takes the native kernel, True the cuDNN route (both throw or use atomics in stock)."""
    digests = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", _STN_SCRIPT, align], capture_output=True, text=True,
                              timeout=300, env=dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8"))
        assert proc.returncode == 0, proc.stderr
        digests.append(proc.stdout.strip())
    assert digests[0] == digests[1] and len(digests[0]) == 64
