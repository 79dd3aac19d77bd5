"""Upsample backwards, linear family (linear1d, bilinear2d, bicubic2d, trilinear3d; functional and
.grad_input): the twins against stock CPU and a float64 reference (random cases: up and down sampling,
align_corners both ways, explicit scales, same sizes, one-pixel inputs and outputs; OpInfo samples and
nn.Upsample through autograd), the contract's bits (a Python reference of the index maps and the tree, reruns,
thread counts), layouts, empty inputs, bad inputs with stock's messages, the routing of F.interpolate's
bilinear and trilinear modes; on a GPU: CUDA == CPU twin bitwise, the override under the flag, nn.Upsample
backward under the flag."""

import re

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import detops
import detops.routing as routing
from conftest import (FLOAT_DTYPES, assert_bitwise_equal, assert_close_to_f64, assert_twin_schemas_equal_aten,
                      cpu_bytes_allocated)
from contract_ref import tree_sum

ops = torch.ops.detops
aten = torch.ops.aten

NAMES = {1: "upsample_linear1d_backward", 2: "upsample_bilinear2d_backward", "cubic": "upsample_bicubic2d_backward",
         3: "upsample_trilinear3d_backward"}
KINDS = ("linear1d", "bilinear2d", "bicubic2d", "trilinear3d")
OVERLOADS = [f"aten::upsample_{k}_backward{s}" for k in KINDS for s in ("", ".grad_input")]
NSPATIAL = {"linear1d": 1, "bilinear2d": 2, "bicubic2d": 2, "trilinear3d": 3}
MODES = {"linear1d": "linear", "bilinear2d": "bilinear", "bicubic2d": "bicubic", "trilinear3d": "trilinear"}


def twin(kind):
    return getattr(ops, f"upsample_{kind}_backward")


def stock(kind):
    return getattr(aten, f"upsample_{kind}_backward")


# (id, kind, input shape, output size, align_corners, scales (one per spatial axis, None = from the sizes))
CASES = [
    ("linear_up", "linear1d", (2, 3, 5), (13,), False, None),
    ("linear_up_align", "linear1d", (2, 3, 5), (13,), True, None),
    ("linear_down", "linear1d", (2, 2, 17), (6,), False, None),
    ("linear_down_align", "linear1d", (2, 2, 17), (6,), True, None),
    ("linear_scale", "linear1d", (1, 3, 6), (15,), False, (2.5,)),
    ("linear_odd_scale", "linear1d", (1, 2, 6), (15,), False, (3.0,)),
    ("linear_same", "linear1d", (2, 3, 7), (7,), False, None),
    ("linear_same_scale", "linear1d", (2, 3, 7), (7,), False, (0.5,)),
    ("linear_in1", "linear1d", (2, 3, 1), (5,), False, None),
    ("linear_out1", "linear1d", (2, 3, 6), (1,), False, None),
    ("linear_out1_align", "linear1d", (2, 3, 6), (1,), True, None),
    ("linear_x40", "linear1d", (1, 2, 3), (120,), False, None),
    ("bilinear_up", "bilinear2d", (2, 3, 4, 5), (9, 11), False, None),
    ("bilinear_up_align", "bilinear2d", (2, 3, 4, 5), (9, 11), True, None),
    ("bilinear_down", "bilinear2d", (2, 2, 13, 11), (5, 4), False, None),
    ("bilinear_mixed", "bilinear2d", (1, 3, 4, 12), (10, 5), True, None),
    ("bilinear_scales", "bilinear2d", (2, 2, 5, 4), (10, 12), False, (2.0, 3.0)),
    ("bilinear_scales_inexact", "bilinear2d", (1, 2, 5, 7), (8, 11), False, (1.7, 1.6)),
    ("bilinear_same_h", "bilinear2d", (2, 2, 6, 5), (6, 9), False, (1.5, None)),
    ("bilinear_same", "bilinear2d", (2, 3, 4, 5), (4, 5), False, None),
    ("bilinear_one_pixel_in", "bilinear2d", (2, 2, 1, 1), (3, 4), False, None),
    ("bilinear_one_pixel_out", "bilinear2d", (2, 2, 5, 6), (1, 1), True, None),
    ("bilinear_x8", "bilinear2d", (1, 2, 3, 3), (24, 24), False, None),
    ("bicubic_up", "bicubic2d", (2, 3, 4, 5), (9, 11), False, None),
    ("bicubic_up_align", "bicubic2d", (2, 3, 4, 5), (9, 11), True, None),
    ("bicubic_down", "bicubic2d", (2, 2, 13, 11), (5, 4), False, None),
    ("bicubic_scales", "bicubic2d", (1, 2, 5, 4), (10, 12), False, (2.0, 3.0)),
    ("bicubic_same_h", "bicubic2d", (2, 2, 6, 5), (6, 9), False, None),
    ("bicubic_same", "bicubic2d", (2, 3, 4, 5), (4, 5), True, None),
    ("bicubic_one_pixel_in", "bicubic2d", (1, 2, 1, 2), (4, 5), False, None),
    ("bicubic_one_pixel_out", "bicubic2d", (2, 2, 5, 6), (1, 1), False, None),
    ("bicubic_x6", "bicubic2d", (1, 1, 3, 3), (18, 18), True, None),
    ("trilinear_up", "trilinear3d", (2, 2, 3, 4, 5), (5, 7, 9), False, None),
    ("trilinear_up_align", "trilinear3d", (2, 2, 3, 4, 5), (5, 7, 9), True, None),
    ("trilinear_down", "trilinear3d", (1, 2, 7, 8, 9), (3, 4, 4), False, None),
    ("trilinear_scales", "trilinear3d", (1, 2, 2, 3, 4), (4, 6, 10), False, (2.0, 2.0, 2.5)),
    ("trilinear_same_d", "trilinear3d", (1, 2, 3, 4, 3), (3, 8, 5), False, None),
    ("trilinear_same_d_scale", "trilinear3d", (1, 2, 3, 4, 3), (3, 8, 5), False, (1.5, 2.0, 1.7)),
    ("trilinear_same", "trilinear3d", (1, 2, 3, 4, 3), (3, 4, 3), False, None),
    ("trilinear_one_voxel_in", "trilinear3d", (1, 2, 1, 1, 1), (2, 3, 4), True, None),
    ("trilinear_x5", "trilinear3d", (1, 1, 2, 2, 2), (10, 10, 10), False, None),
]
CASE_IDS = [c[0] for c in CASES]


def scale_args(kind, scales):
    """The op's scales_* arguments: one per spatial axis."""
    return list(scales) if scales is not None else [None] * NSPATIAL[kind]


def make(shape, out_size, dtype=torch.float32, seed=0):
    """grad_output [N, C, out...] in `dtype`, drawn in float64."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape[:2], *out_size, generator=g, dtype=torch.float64).to(dtype)


def call(op, kind, grad, out_size, shape, align, scales, **kw):
    return op(grad, list(out_size), list(shape), align, *scale_args(kind, scales), **kw)


def reference64(kind, grad, out_size, shape, align, scales):
    if stock_cpu_differs(kind, shape, out_size, align, scales):
        return tree_ref(kind, grad.double(), out_size, shape, align, scales, acc=np.float64)
    return call(stock(kind), kind, grad.double(), out_size, shape, align, scales)


def stock_cpu_ref(kind, grad, out_size, shape, align, scales):
    """Stock CPU's result, or where stock CPU's maps differ from stock CUDA's (which the twin follows), the
    float64 model's."""
    if stock_cpu_differs(kind, shape, out_size, align, scales):
        return reference64(kind, grad, out_size, shape, align, scales).to(grad.dtype)
    return call(stock(kind), kind, grad, out_size, shape, align, scales)


# ---- a Python model of the index maps and the contract (docs/upsample.md) ----

def axis_taps(kind_map, n_in, n_out, align, scale_arg, acc):
    """Per output position: [(input position, weight)] in stock's tap order, in the accumulate type."""
    if kind_map == "identity":
        return [[(o, acc(1))] for o in range(n_out)]
    if align:
        scale = acc(n_in - 1) / acc(n_out - 1) if n_out > 1 else acc(0)
    elif scale_arg is not None and scale_arg > 0:
        scale = acc(1.0 / scale_arg)
    else:
        scale = acc(n_in) / acc(n_out)
    taps = []
    for o in range(n_out):
        if align:
            r = scale * acc(o)
        else:
            r = scale * (acc(o) + acc(0.5)) - acc(0.5)
            if kind_map == "linear" and r < 0:
                r = acc(0)
        i0 = min(int(np.floor(np.float32(r))), n_in - 1)
        t = r - acc(i0)
        t = acc(0) if t < 0 else (acc(1) if t > 1 else t)
        if kind_map == "linear":
            taps.append([(i0, acc(1) - t), (i0 + (1 if i0 < n_in - 1 else 0), t)])
            continue
        a = acc(-0.75)

        def c1(x):
            return ((a + acc(2)) * x - (a + acc(3))) * x * x + acc(1)

        def c2(x):
            return ((a * x - acc(5) * a) * x + acc(8) * a) * x - acc(4) * a

        x2 = acc(1) - t
        w = [c2(t + acc(1)), c1(t), c1(x2), c2(x2 + acc(1))]
        taps.append([(min(max(i0 - 1 + k, 0), n_in - 1), w[k]) for k in range(4)])
    return taps


def axis_maps(kind, shape, out_size, align, scales):
    """Stock CUDA's map per axis: linear1d copies an axis that keeps its size, trilinear3d and bicubic2d a
    call whose axes all do; any other axis that keeps its size maps through its scale (a copy unless an
    explicit scale other than 1 is given without align_corners)."""
    n = NSPATIAL[kind]
    same = [shape[2 + k] == out_size[k] for k in range(n)]
    if kind == "bicubic2d":
        return ["identity" if all(same) else "cubic"] * n
    copies = kind == "linear1d" or (kind == "trilinear3d" and all(same))
    sc = scale_args(kind, scales)
    unit = [align or sc[k] is None or sc[k] <= 0 or sc[k] == 1.0 for k in range(n)]
    return ["identity" if same[k] and (copies or unit[k]) else "linear" for k in range(n)]


def stock_cpu_differs(kind, shape, out_size, align, scales):
    """Stock's CPU kernels copy every linear axis that keeps its size, whatever its scale."""
    maps = axis_maps(kind, shape, out_size, align, scales)
    return kind != "bicubic2d" and any(m == "linear" and shape[2 + k] == out_size[k] for k, m in enumerate(maps))


def tree_ref(kind, grad, out_size, shape, align, scales, acc=np.float32):
    """Each input element: the outputs that read it in ascending linear position, weight (w_d * w_h) * w_w
    (each w the sum of that output's taps on the element, in tap order) times grad_output, the contract's
    tree, 0 + S, rounded once."""
    n = NSPATIAL[kind]
    maps = axis_maps(kind, shape, out_size, align, scales)
    sc = scale_args(kind, scales)
    axes = []
    for k in range(n):
        taps = axis_taps(maps[k], shape[2 + k], out_size[k], align, sc[k], acc)
        readers = []
        for i in range(shape[2 + k]):
            lst = []
            for o, tp in enumerate(taps):
                ws = [w for p, w in tp if p == i]
                if ws:
                    s = ws[0]
                    for w in ws[1:]:
                        s = s + w
                    lst.append((o, s))
            readers.append(lst)
        axes.append(readers)
    while len(axes) < 3:
        axes.insert(0, [[(0, acc(1))]])
    ins = [1] * (3 - n) + list(shape[2:])
    g = grad.reshape(shape[0] * shape[1], *([1] * (3 - n)), *out_size).numpy().astype(acc)
    ref = np.zeros((shape[0] * shape[1], *ins), dtype=np.float64)
    for p in range(ref.shape[0]):
        for idx in np.ndindex(*ins):
            vals = []
            for od, wd in axes[0][idx[0]]:
                for oh, wh in axes[1][idx[1]]:
                    wdh = wd * wh
                    for ow, ww in axes[2][idx[2]]:
                        vals.append((wdh * ww) * g[p, od, oh, ow])
            ref[(p, *idx)] = acc(acc(0) + tree_sum(vals, acc)) if vals else 0.0
    return torch.from_numpy(ref).to(grad.dtype).reshape(shape)


# ---- the table and the schemas ----

def test_covered_ops_lists_every_upsample_overload():
    covered = detops.covered_ops()
    for name in OVERLOADS:
        assert name in covered, name


def test_twin_schemas_equal_aten():
    assert_twin_schemas_equal_aten(OVERLOADS)


# ---- values ----

@pytest.mark.parametrize("name,kind,shape,out_size,align,scales", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_twin_matches_stock_cpu(name, kind, shape, out_size, align, scales, dtype):
    grad = make(shape, out_size, dtype)
    got = call(twin(kind), kind, grad, out_size, shape, align, scales)
    want = stock_cpu_ref(kind, grad, out_size, shape, align, scales)
    assert got.shape == want.shape == torch.Size(shape) and got.dtype == dtype
    assert got.stride() == want.stride(), name
    if dtype in (torch.float32, torch.float64):
        tol = 1e-12 if dtype == torch.float64 else 2e-5
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=name)
    else:  # stock rounds each contribution (or the running sum) to half/bfloat16: compare with float64
        ref = reference64(kind, grad, out_size, shape, align, scales)
        tol = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}[dtype]
        torch.testing.assert_close(got.double(), ref, rtol=tol, atol=1e-4, msg=name)


@pytest.mark.parametrize("name,kind,shape,out_size,align,scales", CASES, ids=CASE_IDS)
def test_float32_close_to_float64(name, kind, shape, out_size, align, scales):
    grad = make(shape, out_size, torch.float32, seed=3)
    got = call(twin(kind), kind, grad, out_size, shape, align, scales)
    assert_close_to_f64(got, reference64(kind, grad, out_size, shape, align, scales), name)


def test_random_shapes_against_stock():
    rng = np.random.default_rng(7)
    for trial in range(60):
        kind = KINDS[trial % 4]
        n = NSPATIAL[kind]
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), *[int(rng.integers(1, 9)) for _ in range(n)])
        out_size = tuple(int(rng.integers(1, 17)) for _ in range(n))
        align = bool(rng.integers(0, 2))
        scales = None
        if rng.integers(0, 3) == 0:
            scales = tuple(float(o) / i * float(rng.choice([1.0, 0.9, 1.1])) for o, i in zip(out_size, shape[2:]))
        grad = make(shape, out_size, torch.float64, seed=trial)
        got = call(twin(kind), kind, grad, out_size, shape, align, scales)
        want = stock_cpu_ref(kind, grad, out_size, shape, align, scales)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12,
                                   msg=f"{kind} {shape} -> {out_size} align={align} scales={scales}")


# ---- the contract's bits ----

@pytest.mark.parametrize("name,kind,shape,out_size,align,scales", CASES, ids=CASE_IDS)
def test_bits_equal_python_model(name, kind, shape, out_size, align, scales):
    grad = make(shape, out_size, torch.float32, seed=5)
    got = call(twin(kind), kind, grad, out_size, shape, align, scales)
    assert_bitwise_equal(got, tree_ref(kind, grad, out_size, shape, align, scales), name)


def test_more_than_one_block_of_contributions():
    # Bilinear x8: an input element is read by up to 16 outputs per axis, 256 in all (8 blocks of the tree).
    shape, out_size = (1, 1, 3, 3), (24, 24)
    grad = make(shape, out_size, torch.float32, seed=9)
    got = ops.upsample_bilinear2d_backward(grad, list(out_size), list(shape), False)
    want = tree_ref("bilinear2d", grad, out_size, shape, False, None)
    assert_bitwise_equal(got, want)


@pytest.mark.parametrize("name,kind,shape,out_size,align,scales", CASES, ids=CASE_IDS)
def test_bitwise_across_reruns_and_threads(name, kind, shape, out_size, align, scales):
    big = (max(shape[0], 4), shape[1] * 3, *shape[2:])
    grad = make(big, out_size, torch.float32, seed=2)
    torch.set_num_threads(1)
    one = call(twin(kind), kind, grad, out_size, big, align, scales)
    torch.set_num_threads(2)
    two = call(twin(kind), kind, grad, out_size, big, align, scales)
    again = call(twin(kind), kind, grad, out_size, big, align, scales)
    assert_bitwise_equal(one, two, name)
    assert_bitwise_equal(two, again, name)


def test_nan_and_inf_gradients_write_the_positive_quiet_nan():
    grad = torch.zeros(1, 1, 8, 8)
    grad[0, 0, 3, 3] = float("inf")
    grad[0, 0, 5, 5] = float("-inf")
    got = ops.upsample_bilinear2d_backward(grad, [8, 8], [1, 1, 4, 4], False)
    nan = got[torch.isnan(got)]
    assert nan.numel() > 0
    assert torch.all(nan.view(torch.int32) == 0x7FC00000)


# ---- overloads, layouts, empty inputs ----

@pytest.mark.parametrize("name,kind,shape,out_size,align,scales", CASES, ids=CASE_IDS)
def test_grad_input_overload(name, kind, shape, out_size, align, scales):
    grad = make(shape, out_size)
    want = call(twin(kind), kind, grad, out_size, shape, align, scales)
    buf = torch.empty(0)
    res = call(twin(kind).grad_input, kind, grad, out_size, shape, align, scales, grad_input=buf)
    assert res.data_ptr() == buf.data_ptr()
    assert_bitwise_equal(buf, want, name)
    strided = torch.full([*shape[:-1], 2 * shape[-1]], 7.0)[..., ::2]
    call(twin(kind).grad_input, kind, grad, out_size, shape, align, scales, grad_input=strided)
    assert not strided.is_contiguous()
    assert_bitwise_equal(strided, want, name)
    with pytest.raises(RuntimeError, match="expected grad_input of dtype Float, but got Double"):
        call(twin(kind).grad_input, kind, grad, out_size, shape, align, scales,
             grad_input=torch.empty(0, dtype=torch.float64))


@pytest.mark.parametrize("name,kind,shape,out_size,align,scales", CASES, ids=CASE_IDS)
def test_grad_input_computed_in_place_or_aside_same_bits(name, kind, shape, out_size, align, scales):
    grad = make(shape, out_size)
    want = call(twin(kind), kind, grad, out_size, shape, align, scales)
    # Contiguous and of the input's size: written in place, over what it held, allocating grad_input's bytes less
    # than the functional overload.
    buf = torch.full(shape, 7.0)
    run = lambda: call(twin(kind).grad_input, kind, grad, out_size, shape, align, scales, grad_input=buf)
    assert run().data_ptr() == buf.data_ptr()
    assert_bitwise_equal(buf, want, name)
    functional = lambda: call(twin(kind), kind, grad, out_size, shape, align, scales)
    assert cpu_bytes_allocated(run) + buf.nbytes <= cpu_bytes_allocated(functional), name
    # Over grad_output's memory: computed aside from the unchanged grad_output, then copied.
    n = buf.numel()
    store = torch.empty(max(grad.numel(), n))
    g = store[:grad.numel()].view(grad.shape).copy_(grad)
    call(twin(kind).grad_input, kind, g, out_size, shape, align, scales, grad_input=store[:n].view(shape))
    assert_bitwise_equal(store[:n].view(shape), want, name)
    if len(shape) >= 4:
        # A channels-last grad_output into a contiguous grad_input, and into a channels-last one.
        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
        gradc = grad.contiguous(memory_format=fmt)
        for into in (torch.full(shape, 7.0), torch.full(shape, 7.0).contiguous(memory_format=fmt)):
            call(twin(kind).grad_input, kind, gradc, out_size, shape, align, scales, grad_input=into)
            assert_bitwise_equal(into, want, name)


@pytest.mark.parametrize("name,kind,shape,out_size,align,scales", CASES, ids=CASE_IDS)
def test_non_contiguous_grad_output(name, kind, shape, out_size, align, scales):
    grad = make(shape, out_size)
    want = call(twin(kind), kind, grad, out_size, shape, align, scales)
    strided = torch.empty([*grad.shape[:-1], 3 * grad.shape[-1]])[..., ::3]
    strided.copy_(grad)
    transposed = grad.transpose(0, -1).contiguous().transpose(0, -1)
    assert not strided.is_contiguous()
    assert_bitwise_equal(call(twin(kind), kind, strided, out_size, shape, align, scales), want, name)
    assert_bitwise_equal(call(twin(kind), kind, transposed, out_size, shape, align, scales), want, name)


@pytest.mark.parametrize("name,kind,shape,out_size,align,scales", [c for c in CASES if c[1] != "linear1d"],
                         ids=[c[0] for c in CASES if c[1] != "linear1d"])
def test_channels_last_same_bits_and_stock_layout(name, kind, shape, out_size, align, scales):
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    grad = make((max(shape[0], 2), max(shape[1], 2), *shape[2:]), out_size)
    shape = tuple(grad.shape[:2]) + tuple(shape[2:])
    gradc = grad.contiguous(memory_format=fmt)
    got = call(twin(kind), kind, grad, out_size, shape, align, scales)
    gotc = call(twin(kind), kind, gradc, out_size, shape, align, scales)
    stockc = call(stock(kind), kind, gradc, out_size, shape, align, scales)
    assert_bitwise_equal(got, gotc, name)
    assert gotc.stride() == stockc.stride(), f"{name}: {gotc.stride()} vs stock {stockc.stride()}"
    torch.testing.assert_close(gotc, stock_cpu_ref(kind, gradc, out_size, shape, align, scales), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_empty_inputs(kind):
    n = NSPATIAL[kind]
    for lead in ((0, 3), (2, 0)):
        shape = (*lead, *([4] * n))
        out_size = [6] * n
        grad = torch.randn(*lead, *out_size)
        got = twin(kind)(grad, out_size, list(shape), False, *([None] * n))
        want = stock(kind)(grad, out_size, list(shape), False, *([None] * n))
        assert got.shape == want.shape == torch.Size(shape) and got.dtype == want.dtype
        buf = torch.empty(5)
        twin(kind).grad_input(grad, out_size, list(shape), False, *([None] * n), grad_input=buf)
        assert buf.shape == torch.Size(shape)


@pytest.mark.parametrize("kind", KINDS)
def test_integer_dtypes_go_to_stock(kind):
    n = NSPATIAL[kind]
    name = f"upsample_{kind}_backward"
    grad = torch.ones(2, 3, *([4] * n), dtype=torch.long)
    for op in (stock(kind), twin(kind)):
        with pytest.raises(NotImplementedError, match=re.escape(f'"{name}" not implemented for \'Long\'')):
            op(grad, [4] * n, [2, 3] + [2] * n, False, *([None] * n))


# ---- bad inputs ----

@pytest.mark.parametrize("kind", KINDS)
def test_bad_inputs_raise_stock_messages(kind):
    n = NSPATIAL[kind]
    name = f"upsample_{kind}_backward"
    sc = [None] * n
    shape, out_size = [2, 3] + [4] * n, [6] * n
    grad = torch.randn(2, 3, *out_size)

    def both(pattern, *args):
        for op in (stock(kind), twin(kind)):
            with pytest.raises(RuntimeError, match=pattern):
                op(*args)
        with pytest.raises(RuntimeError, match=rf"^{name}\(\): {pattern}"):
            twin(kind)(*args)

    both(re.escape(f"It is expected output_size equals to {n}, but got size {n + 1}"), grad, out_size + [6], shape,
         False, *sc)
    both(re.escape(f"It is expected input_size equals to {n + 2}, but got size {n + 1}"), grad, out_size, shape[1:],
         False, *sc)
    axes = {1: ["W"], 2: ["H", "W"], 3: ["D", "H", "W"]}[n]
    zero_in = ", ".join(f"{a}: {0 if k == n - 1 else 4}" for k, a in enumerate(axes))
    outs = ", ".join(f"{a}: 6" for a in axes)
    join = " and output (" if n == 1 else " output ("
    both(re.escape(f"Input and output sizes should be greater than 0, but got input ({zero_in}){join}{outs})"),
         grad, out_size, shape[:-1] + [0], False, *sc)
    zero_out = ", ".join(f"{a}: {0 if k == 0 else 6}" for k, a in enumerate(axes))
    ins = ", ".join(f"{a}: 4" for a in axes)
    both(re.escape(f"Input and output sizes should be greater than 0, but got input ({ins}){join}{zero_out})"),
         grad, [0] + out_size[1:], shape, False, *sc)
    bad = grad.narrow(-1, 0, 5)
    if n == 1:
        both(re.escape("Expected a tensor of dimension 3 and tensor.size[2] == 6 but got: dimension 3 and "
                       "tensor.size[2] = 5"), bad, out_size, shape, False, *sc)
        both(re.escape("Expected a tensor of dimension 3 and tensor.size[0] == 2 but got: dimension 3 and "
                       "tensor.size[0] = 1"), grad[:1], out_size, shape, False, *sc)
    else:
        both(re.escape(f"Expected grad_output to have the same shape as output; output.size({n + 1}) = 6 but got "
                       f"grad_output.size({n + 1}) = 5"), bad, out_size, shape, False, *sc)
        both(re.escape("Expected grad_output to have the same shape as output; output.size(1) = 3 but got "
                       "grad_output.size(1) = 2"), grad[:, :2], out_size, shape, False, *sc)
        both(re.escape(f"Expected grad_output to be a tensor of dimension {n + 2} but got: dimension {n + 1}"),
             grad[0], out_size, shape, False, *sc)


# ---- through autograd: OpInfo samples, nn.Upsample ----

SAVED_SCALES = {"UpsampleLinear1DBackward0": ["_saved_scales"],
                "UpsampleBilinear2DBackward0": ["_saved_scales_h", "_saved_scales_w"],
                "UpsampleBicubic2DBackward0": ["_saved_scales_h", "_saved_scales_w"],
                "UpsampleTrilinear3DBackward0": ["_saved_scales_d", "_saved_scales_h", "_saved_scales_w"]}
NODE_KIND = {"UpsampleLinear1DBackward0": "linear1d", "UpsampleBilinear2DBackward0": "bilinear2d",
             "UpsampleBicubic2DBackward0": "bicubic2d", "UpsampleTrilinear3DBackward0": "trilinear3d"}


def twin_of_node(out, grad):
    """The twin called with the arguments autograd saved for the forward that made `out`."""
    fn = out.grad_fn
    kind = NODE_KIND[type(fn).__name__]
    scales = [getattr(fn, a) for a in SAVED_SCALES[type(fn).__name__]]
    return twin(kind)(grad, list(fn._saved_output_size), list(fn._saved_self_sym_sizes), fn._saved_align_corners,
                      *scales)


def _opinfo_samples():
    from torch.testing._internal.common_methods_invocations import op_db
    found = []
    for info in op_db:
        if (info.name, info.variant_test_name) in (("nn.functional.interpolate", "linear"),
                                                   ("nn.functional.interpolate", "bilinear"),
                                                   ("nn.functional.interpolate", "bicubic"),
                                                   ("nn.functional.interpolate", "trilinear"),
                                                   ("nn.functional.upsample_bilinear", "")):
            for dtype in (torch.float32, torch.float64):
                for sample in info.sample_inputs("cpu", dtype, requires_grad=True):
                    found.append((info, sample))
    return found


def test_opinfo_samples_through_autograd():
    samples = _opinfo_samples()
    assert len(samples) > 20
    compared = 0
    for info, sample in samples:
        out = info.op(sample.input, *sample.args, **sample.kwargs)
        if type(out.grad_fn).__name__ not in NODE_KIND or out.numel() == 0:
            continue
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(compared), dtype=out.dtype)
        (want,) = torch.autograd.grad(out, sample.input, grad)
        got = twin_of_node(out, grad)
        tol = 1e-12 if out.dtype == torch.float64 else 2e-5
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=f"{info.name} {info.variant_test_name} "
                                   f"{list(sample.input.shape)} {sample.args} {sample.kwargs}")
        compared += 1
    assert compared > 20


@pytest.mark.parametrize("mode,shape,kwargs", [
    ("linear", (2, 3, 7), {"scale_factor": 2.5}),
    ("bilinear", (2, 3, 5, 6), {"scale_factor": 2}),
    ("bilinear", (2, 3, 5, 6), {"size": (11, 4), "align_corners": True}),
    ("bicubic", (1, 2, 5, 6), {"scale_factor": 1.5}),
    ("trilinear", (1, 2, 3, 4, 5), {"scale_factor": (2, 1, 1.5)}),
], ids=str)
def test_nn_upsample_autograd_on_cpu(mode, shape, kwargs):
    torch.manual_seed(1)
    m = nn.Upsample(mode=mode, **kwargs)
    x = torch.randn(shape, requires_grad=True)
    out = m(x)
    grad = torch.randn_like(out)
    (want,) = torch.autograd.grad(out, x, grad)
    got = twin_of_node(out, grad)
    torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5)


# ---- routing of F.interpolate ----

class _LooksLikeCuda(torch.Tensor):
    """A CPU tensor that F.interpolate and the routed decomposition take for a CUDA tensor (no
    __torch_function__, so results are plain tensors with the real autograd nodes)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def is_cpu(self):
        return False

    @property
    def is_cuda(self):
        return True


INTERP = [
    ("bilinear", (2, 3, 5, 6), {"scale_factor": 2}),
    ("bilinear", (2, 3, 5, 6), {"size": (9, 4), "align_corners": True}),
    ("bilinear", (1, 2, 5, 6), {"scale_factor": (1.7, 0.6), "recompute_scale_factor": False}),
    ("bilinear", (1, 2, 5, 6), {"scale_factor": 1.5, "recompute_scale_factor": True}),
    ("trilinear", (1, 2, 3, 4, 5), {"scale_factor": 2}),
    ("trilinear", (1, 2, 3, 4, 5), {"size": (4, 4, 9), "align_corners": False}),
]
NODE = {"bilinear": "UpsampleBilinear2DBackward0", "trilinear": "UpsampleTrilinear3DBackward0"}


@pytest.mark.parametrize("mode,shape,kwargs", INTERP, ids=str)
def test_routing_sends_interpolate_to_the_aten_op(mode, shape, kwargs):
    x = torch.randn(shape)
    plain = x.clone().requires_grad_(True)
    want = F.interpolate(plain, mode=mode, **kwargs)  # CPU: the aten op, whatever the flag
    assert type(want.grad_fn).__name__ == NODE[mode]
    fake = x.clone().as_subclass(_LooksLikeCuda).requires_grad_(True)
    torch.use_deterministic_algorithms(True)
    detops.set_mode("auto")
    assert detops.upsample_routed()
    got = F.interpolate(fake, mode=mode, **kwargs)
    assert type(got.grad_fn).__name__ == NODE[mode]
    assert_bitwise_equal(got, want, "routed forward")
    for a in ("_saved_output_size", "_saved_align_corners", *SAVED_SCALES[NODE[mode]]):
        assert getattr(got.grad_fn, a) == getattr(want.grad_fn, a), a
    grad = torch.randn(want.shape)
    (gw,) = torch.autograd.grad(want, plain, grad)
    (gg,) = torch.autograd.grad(got, fake, grad)
    assert_bitwise_equal(gg, gw, "routed backward (stock CPU kernel)")


def test_mode_off_restores_stock_routing_exactly():
    import torch._decomp.decompositions as decompositions
    stock_fn = routing._STOCK_UPSAMPLE_LINEAR_VEC
    assert stock_fn is torch._decomp.decomposition_table[aten.upsample_bilinear2d.vec]
    detops.set_mode("auto")
    assert decompositions._upsample_linear_vec is routing._routed_upsample_linear_vec
    detops.set_mode("off")
    assert not detops.upsample_routed()
    assert decompositions._upsample_linear_vec is stock_fn
    torch.use_deterministic_algorithms(True)
    fake = torch.randn(1, 2, 4, 4).as_subclass(_LooksLikeCuda).requires_grad_(True)
    out = F.interpolate(fake, scale_factor=2, mode="bilinear")
    assert type(out.grad_fn).__name__ not in NODE.values()  # stock's decomposition
    with detops.mode("always"):
        assert detops.upsample_routed()
    assert not detops.upsample_routed() and decompositions._upsample_linear_vec is stock_fn
    assert detops.route_upsample(True) is False
    assert detops.route_upsample(False) is True
    detops.set_mode("auto")
    assert detops.upsample_routed()


def test_routing_leaves_cpu_and_other_modes_alone():
    detops.route_upsample(True)
    torch.use_deterministic_algorithms(True)
    x = torch.randn(1, 2, 4, 4, requires_grad=True)
    assert type(F.interpolate(x, scale_factor=2, mode="bilinear").grad_fn).__name__ == NODE["bilinear"]
    fake = torch.randn(1, 2, 4, 4).as_subclass(_LooksLikeCuda).requires_grad_(True)
    out = F.interpolate(fake, scale_factor=2, mode="bicubic")  # bicubic never takes the decomposition
    assert type(out.grad_fn).__name__ == "UpsampleBicubic2DBackward0"
    out = F.interpolate(fake, scale_factor=2, mode="bilinear", antialias=True)
    assert type(out.grad_fn).__name__ == "UpsampleBilinear2DAaBackward0"


# ---- GPU ----

@pytest.mark.gpu
@pytest.mark.parametrize("name,kind,shape,out_size,align,scales", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_gpu_cuda_twin_equals_cpu_twin_bitwise(name, kind, shape, out_size, align, scales, dtype):
    grad = make(shape, out_size, dtype, seed=4)
    cpu = call(twin(kind), kind, grad, out_size, shape, align, scales)
    cuda = call(twin(kind), kind, grad.cuda(), out_size, shape, align, scales)
    assert cuda.is_cuda and cuda.dtype == dtype
    assert_bitwise_equal(cuda.cpu(), cpu, name)
    buf = torch.empty(0, dtype=dtype, device="cuda")
    call(twin(kind).grad_input, kind, grad.cuda(), out_size, shape, align, scales, grad_input=buf)
    assert_bitwise_equal(buf.cpu(), cpu, name + " .grad_input")
    if kind != "linear1d":
        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
        cl = call(twin(kind), kind, grad.cuda().contiguous(memory_format=fmt), out_size, shape, align, scales)
        assert_bitwise_equal(cl.cpu(), cpu, name + " channels-last")


@pytest.mark.gpu
@pytest.mark.parametrize("name,kind,shape,out_size,align,scales", CASES, ids=CASE_IDS)
def test_gpu_override_under_flag_equals_cpu_twin(name, kind, shape, out_size, align, scales):
    grad = make(shape, out_size, torch.float32, seed=6)
    want = call(twin(kind), kind, grad, out_size, shape, align, scales)
    gc = grad.cuda()
    with detops.mode("auto"):
        torch.use_deterministic_algorithms(True)
        got = call(stock(kind), kind, gc, out_size, shape, align, scales)
        buf = torch.empty(0, device="cuda")
        call(stock(kind).grad_input, kind, gc, out_size, shape, align, scales, grad_input=buf)
        torch.cuda.synchronize()
    assert_bitwise_equal(got.cpu(), want, name)
    assert_bitwise_equal(buf.cpu(), want, name + " .grad_input")
    with detops.mode("off"):
        torch.use_deterministic_algorithms(False)
        stock_grad = call(stock(kind), kind, gc, out_size, shape, align, scales)
    torch.testing.assert_close(got, stock_grad, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("mode,shape,kwargs", [
    ("bilinear", (2, 8, 16, 16), {"scale_factor": 2}),
    ("bilinear", (2, 8, 16, 16), {"size": (37, 23), "align_corners": True}),
    ("trilinear", (1, 4, 6, 8, 8), {"scale_factor": 2}),
    ("bicubic", (2, 4, 9, 9), {"scale_factor": 3}),
    ("linear", (2, 4, 50), {"scale_factor": 4}),
], ids=str)
def test_gpu_nn_upsample_backward_under_flag_runs_detops(mode, shape, kwargs):
    torch.manual_seed(2)
    m = nn.Upsample(mode=mode, **kwargs)
    x = torch.randn(shape, device="cuda", requires_grad=True)
    torch.use_deterministic_algorithms(True)
    out = m(x)
    # Routing (on by import in mode auto) sends bilinear and trilinear to the aten op as well.
    assert type(out.grad_fn).__name__ in NODE_KIND, type(out.grad_fn).__name__
    grad = torch.randn_like(out)
    (ours,) = torch.autograd.grad(out, x, grad, retain_graph=True)
    again = [torch.autograd.grad(out, x, grad, retain_graph=True)[0] for _ in range(3)]
    torch.use_deterministic_algorithms(False)
    for a in again:
        assert_bitwise_equal(a, ours, "rerun")
    cpu_twin = twin_of_node(out, grad.cpu())
    assert_bitwise_equal(ours.cpu(), cpu_twin, "CUDA under the flag vs the CPU twin")
    (stock_grad,) = torch.autograd.grad(m(x), x, grad)  # flag off: stock's atomics
    torch.testing.assert_close(ours, stock_grad, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_gpu_mode_off_restores_the_decomposition():
    x = torch.randn(2, 3, 6, 7, device="cuda", requires_grad=True)
    torch.use_deterministic_algorithms(True)
    with detops.mode("off"):
        out = F.interpolate(x, scale_factor=2, mode="bilinear")
        assert type(out.grad_fn).__name__ != "UpsampleBilinear2DBackward0"
        with pytest.raises(RuntimeError, match="does not have a deterministic implementation"):
            aten.upsample_bicubic2d_backward(torch.ones(2, 3, 12, 14, device="cuda"), [12, 14], [2, 3, 6, 7], False)
    out = F.interpolate(x, scale_factor=2, mode="bilinear")
    assert type(out.grad_fn).__name__ == "UpsampleBilinear2DBackward0"


@pytest.mark.gpu
def test_gpu_100_reruns_identical():
    grad = make((4, 16, 8, 8), (64, 64), seed=8).cuda()
    first = ops.upsample_bilinear2d_backward(grad, [64, 64], [4, 16, 8, 8], False)
    for _ in range(100):
        assert torch.equal(ops.upsample_bilinear2d_backward(grad, [64, 64], [4, 16, 8, 8], False), first)
