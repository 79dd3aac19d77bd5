"""Padding backwards (reflection and replication, 1-D to 3-D, functional and .grad_input): the twins against
a float64 reference and stock CPU (random cases, negative padding, OpInfo and ModuleInfo samples, nn modules
and torch.stft through autograd), the contract's bits (a Python reference of the tree, reruns, thread
counts), layouts, empty inputs, every bad input, the routing of F.pad(mode='replicate'); on a GPU: CUDA ==
CPU twin bitwise, the override under the flag, modules forward and backward under the flag, and what stock's
deterministic reflection_pad2d backward gives where a row lies in both reflection zones (printed)."""

import copy
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import detops
from conftest import (FLOAT_DTYPES, assert_bitwise_equal, assert_close_to_f64, assert_twin_schemas_equal_aten,
                      cpu_bytes_allocated)
from contract_ref import tree_sum

ops = torch.ops.detops
aten = torch.ops.aten

KINDS = ("reflection", "replication")
OVERLOADS = [f"aten::{kind}_pad{n}d_backward{suffix}" for kind in KINDS for n in (1, 2, 3)
             for suffix in ("", ".grad_input")]

# autograd node -> (kind, number of padded dims)
PAD_NODES = {f"{'Reflection' if kind == 'reflection' else 'Replication'}Pad{n}DBackward0": (kind, n)
             for kind in KINDS for n in (1, 2, 3)}


def twin(kind, n):
    return getattr(ops, f"{kind}_pad{n}d_backward")


def stock(kind, n):
    return getattr(aten, f"{kind}_pad{n}d_backward")


def out_shape(shape, padding):
    shape = list(shape)
    for a in range(len(padding) // 2):
        shape[-1 - a] += padding[2 * a] + padding[2 * a + 1]
    return shape


# (id, kind, input shape, padding): batched and unbatched, asymmetric, negative (cropping), rows in both
# reflection zones, replicate borders with more than one block (32) of contributions.
CASES = [
    ("reflect1d", "reflection", (2, 3, 7), [2, 3]),
    ("reflect1d_unbatched", "reflection", (3, 5), [4, 1]),
    ("reflect1d_negative", "reflection", (2, 2, 9), [-2, 3]),
    ("reflect1d_crop", "reflection", (2, 9), [-3, -2]),
    ("reflect1d_width2", "reflection", (2, 2, 2), [1, 1]),
    ("reflect2d_both_zones", "reflection", (1, 2, 3, 3), [1, 1, 1, 1]),
    ("reflect2d", "reflection", (2, 3, 6, 5), [2, 1, 0, 3]),
    ("reflect2d_unbatched", "reflection", (3, 4, 7), [3, 3, 2, 1]),
    ("reflect2d_negative", "reflection", (2, 2, 6, 7), [-2, 3, 1, -1]),
    ("reflect2d_thin", "reflection", (1, 1, 2, 5), [4, 4, 1, 1]),
    ("reflect3d", "reflection", (2, 2, 4, 5, 3), [1, 2, 2, 1, 3, 1]),
    ("reflect3d_unbatched", "reflection", (2, 3, 3, 3), [1, 1, 1, 1, 1, 1]),
    ("reflect3d_negative", "reflection", (1, 2, 5, 4, 6), [-1, 2, 1, -2, 2, -1]),
    ("replicate1d", "replication", (2, 3, 5), [3, 2]),
    ("replicate1d_unbatched", "replication", (3, 4), [0, 6]),
    ("replicate1d_negative", "replication", (2, 2, 8), [-3, 2]),
    ("replicate1d_wide", "replication", (1, 2, 3), [40, 35]),
    ("replicate1d_width1", "replication", (2, 1), [3, 4]),
    ("replicate2d", "replication", (2, 3, 5, 4), [2, 1, 3, 2]),
    ("replicate2d_unbatched", "replication", (2, 4, 3), [1, 2, 0, 1]),
    ("replicate2d_negative", "replication", (2, 2, 7, 6), [-2, 3, 2, -3]),
    ("replicate2d_corner_tree", "replication", (1, 2, 3, 3), [6, 5, 4, 7]),
    ("replicate2d_huge_pad", "replication", (1, 1, 2, 2), [30, 30, 30, 30]),
    ("replicate2d_warp_corners", "replication", (1, 2, 4, 40), [20, 17, 21, 0]),  # corners of 441 and 396
    ("replicate3d_warp_corners", "replication", (1, 2, 3, 3, 3), [7, 6, 8, 5, 7, 9]),  # corners of up to 720
    ("replicate3d", "replication", (2, 2, 3, 4, 5), [1, 2, 2, 1, 1, 1]),
    ("replicate3d_unbatched", "replication", (2, 3, 3, 3), [2, 2, 1, 1, 0, 1]),
    ("replicate3d_negative", "replication", (1, 2, 5, 5, 5), [-1, 2, 2, -2, 1, 1]),
    ("replicate3d_corner_tree", "replication", (1, 1, 2, 2, 2), [3, 3, 3, 3, 3, 3]),
]
CASE_IDS = [c[0] for c in CASES]


def make(kind, shape, padding, dtype=torch.float32, seed=0):
    """Input and grad_output in `dtype` (drawn in float64, quarter-rounded input)."""
    g = torch.Generator().manual_seed(seed)
    x = ((torch.randn(shape, generator=g, dtype=torch.float64) * 4).round() / 4).to(dtype)
    grad = torch.randn(out_shape(shape, padding), generator=g, dtype=torch.float64).to(dtype)
    return x, grad


def source_index(kind, o, n, before):
    """The input position output `o` reads along one axis (the forward's mapping)."""
    j = o - before
    if kind == "replication":
        return min(max(j, 0), n - 1)
    return -j if j < 0 else (2 * (n - 1) - j if j > n - 1 else j)


def axis_index(kind, n, before, after):
    return torch.tensor([source_index(kind, o, n, before) for o in range(n + before + after)], dtype=torch.long)


def pad_forward_ref(kind, x, padding):
    """The forward as index_select per padded axis: its autograd (index_add in float64) is the reference,
    independent of stock's padding kernels."""
    for a in range(len(padding) // 2):
        dim = x.dim() - 1 - a
        x = x.index_select(dim, axis_index(kind, x.shape[dim], padding[2 * a], padding[2 * a + 1]))
    return x


def reference64(kind, x, grad, padding):
    x64 = x.detach().double().requires_grad_(True)
    (ref,) = torch.autograd.grad(pad_forward_ref(kind, x64, padding), x64, grad.double())
    return ref


# ---- the table and the schemas ----

def test_covered_ops_lists_every_padding_overload():
    covered = detops.covered_ops()
    for name in OVERLOADS:
        assert name in covered, name


def test_twin_schemas_equal_aten():
    assert_twin_schemas_equal_aten(OVERLOADS)


def test_forward_reference_is_stock_forward():
    for _, kind, shape, padding in CASES:
        x, _ = make(kind, shape, padding, torch.float64)
        stock_forward = getattr(aten, f"{kind}_pad{len(padding) // 2}d")
        assert torch.equal(pad_forward_ref(kind, x, padding), stock_forward(x, padding)), (kind, shape, padding)


# ---- values ----

@pytest.mark.parametrize("name,kind,shape,padding", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_twin_matches_reference_and_stock_cpu(name, kind, shape, padding, dtype):
    n = len(padding) // 2
    x, grad = make(kind, shape, padding, dtype)
    got = twin(kind, n)(grad, x, padding)
    assert got.shape == x.shape and got.dtype == dtype and got.is_contiguous()
    assert_close_to_f64(got, reference64(kind, x, grad, padding), name)
    want = stock(kind, n)(grad, x, padding)
    if dtype in (torch.float32, torch.float64):  # stock's CPU kernels accumulate half and bfloat16 in place
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    else:
        assert want.dtype == dtype and want.shape == got.shape


@pytest.mark.parametrize("shape,padding", [((3, 3), [1, 1, 1, 1]), ((2, 5), [1, 1, 1, 1]), ((4, 3), [2, 2, 1, 1]),
                                           ((3, 4), [1, 2, 2, 1]), ((2, 2), [1, 1, 1, 1]), ((3, 3), [2, 2, 2, 2])],
                         ids=str)
def test_reflect2d_rows_in_both_zones_match_autograd_f64(shape, padding):
    """Where a row or column lies in both reflection zones (the case stock 2.11's deterministic CUDA kernel
    drops a contribution in): the twin against CPU autograd in float64."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2, 3, *shape, generator=g, dtype=torch.float64, requires_grad=True)
    out = F.pad(x, padding, mode="reflect")
    grad = torch.randn(out.shape, generator=g, dtype=torch.float64)
    (autograd,) = torch.autograd.grad(out, x, grad)
    torch.testing.assert_close(ops.reflection_pad2d_backward(grad, x.detach(), padding), autograd, rtol=1e-12,
                               atol=1e-12)
    got32 = ops.reflection_pad2d_backward(grad.float(), x.detach().float(), padding)
    assert_close_to_f64(got32, autograd)


# ---- the contract's bits ----

def tree_ref(kind, x, grad, padding, acc=np.float32):
    """Per input element: its contributions in ascending output linear position (row-major over the padded
    axes, per plane), 0 + the contract's tree, rounded once (docs/order_contract.md)."""
    n = len(padding) // 2
    lead = x.shape[:x.dim() - n]
    planes = int(np.prod(lead)) if lead else 1
    isz = list(x.shape[x.dim() - n:])
    osz = list(grad.shape[grad.dim() - n:])
    before = [padding[2 * (n - 1 - k)] for k in range(n)]  # per axis, outermost first
    g = grad.reshape(planes, -1).numpy()
    ref = np.zeros((planes, int(np.prod(isz))), dtype=np.float64)
    for p in range(planes):
        buckets = {}
        for o_flat, o in enumerate(np.ndindex(*osz)):
            i = [source_index(kind, o[k], isz[k], before[k]) for k in range(n)]
            buckets.setdefault(int(np.ravel_multi_index(i, isz)), []).append(g[p, o_flat])
        for i_flat, vals in buckets.items():
            ref[p, i_flat] = acc(acc(0) + tree_sum(vals, acc))
    return torch.from_numpy(ref).to(x.dtype).reshape(x.shape)


@pytest.mark.parametrize("name,kind,shape,padding", CASES, ids=CASE_IDS)
def test_bits_equal_python_tree(name, kind, shape, padding):
    x, grad = make(kind, shape, padding, torch.float32, seed=5)
    got = twin(kind, len(padding) // 2)(grad, x, padding)
    assert_bitwise_equal(got, tree_ref(kind, x, grad, padding), name)


def test_replicate_corner_takes_more_than_one_block():
    # The corner of a 2x2 input padded by 30 on every side collects 31 * 31 = 961 contributions.
    x, grad = make("replication", (1, 1, 2, 2), [30] * 4, torch.float32, seed=9)
    got = ops.replication_pad2d_backward(grad, x, [30] * 4)
    corner = grad[0, 0, :31, :31].flatten().numpy()
    assert corner.size == 961
    assert got[0, 0, 0, 0].item() == np.float32(np.float32(0) + tree_sum(corner, np.float32))


@pytest.mark.parametrize("name,kind,shape,padding", CASES, ids=CASE_IDS)
def test_bitwise_across_reruns_and_threads(name, kind, shape, padding):
    big = [s * 3 if i >= len(shape) - len(padding) // 2 else s for i, s in enumerate(shape)]
    big[0] = max(big[0], 4)
    x, grad = make(kind, big, padding, torch.float32, seed=2)
    op = twin(kind, len(padding) // 2)
    torch.set_num_threads(1)
    one = op(grad, x, padding)
    torch.set_num_threads(2)
    two = op(grad, x, padding)
    again = op(grad, x, padding)
    assert_bitwise_equal(one, two, name)
    assert_bitwise_equal(two, again, name)


# ---- overloads, layouts, empty inputs ----

@pytest.mark.parametrize("name,kind,shape,padding", CASES, ids=CASE_IDS)
def test_grad_input_overload(name, kind, shape, padding):
    x, grad = make(kind, shape, padding)
    n = len(padding) // 2
    want = twin(kind, n)(grad, x, padding)
    buf = torch.empty(0)
    res = twin(kind, n).grad_input(grad, x, padding, grad_input=buf)
    assert res.data_ptr() == buf.data_ptr()
    assert_bitwise_equal(buf, want, name)
    # A correctly sized, strided grad_input keeps its strides.
    strided = torch.full([*x.shape[:-1], 2 * x.shape[-1]], 7.0)[..., ::2]
    twin(kind, n).grad_input(grad, x, padding, grad_input=strided)
    assert not strided.is_contiguous()
    assert_bitwise_equal(strided, want, name)
    with pytest.raises(RuntimeError, match="expected grad_input of dtype Float, but got Double"):
        twin(kind, n).grad_input(grad, x, padding, grad_input=torch.empty(0, dtype=torch.float64))


@pytest.mark.parametrize("name,kind,shape,padding", CASES, ids=CASE_IDS)
def test_grad_input_computed_in_place_or_aside_same_bits(name, kind, shape, padding):
    x, grad = make(kind, shape, padding)
    n = len(padding) // 2
    want = twin(kind, n)(grad, x, padding)
    # Contiguous and of self's size: written in place, allocating grad_input's bytes less than the functional
    # overload.
    buf = torch.full(x.shape, 7.0)
    run = lambda: twin(kind, n).grad_input(grad, x, padding, grad_input=buf)
    assert run().data_ptr() == buf.data_ptr()
    assert_bitwise_equal(buf, want, name)
    assert cpu_bytes_allocated(run) + buf.nbytes <= cpu_bytes_allocated(lambda: twin(kind, n)(grad, x, padding)), name
    # Over grad_output's memory: computed aside from the unchanged grad_output, then copied.
    store = torch.empty(max(grad.numel(), x.numel()))
    g = store[:grad.numel()].view(grad.shape).copy_(grad)
    twin(kind, n).grad_input(g, x, padding, grad_input=store[:x.numel()].view(x.shape))
    assert_bitwise_equal(store[:x.numel()].view(x.shape), want, name)


@pytest.mark.parametrize("name,kind,shape,padding", CASES, ids=CASE_IDS)
def test_non_contiguous_grad_output_and_self(name, kind, shape, padding):
    x, grad = make(kind, shape, padding)
    op = twin(kind, len(padding) // 2)
    want = op(grad, x, padding)
    strided = torch.empty([*grad.shape[:-1], 3 * grad.shape[-1]])[..., ::3]
    strided.copy_(grad)
    transposed = grad.transpose(0, -1).contiguous().transpose(0, -1)
    assert not strided.is_contiguous() and not transposed.is_contiguous()
    assert_bitwise_equal(op(strided, x, padding), want, name)
    assert_bitwise_equal(op(transposed, x, padding), want, name)
    x_strided = torch.empty([*x.shape[:-1], 2 * x.shape[-1]])[..., ::2]
    x_strided.copy_(x)
    assert_bitwise_equal(op(grad, x_strided, padding), want, name)


@pytest.mark.parametrize("name,kind,shape,padding", [c for c in CASES if len(c[2]) in (4, 5)], ids=lambda v: v
                         if isinstance(v, str) else "")
def test_channels_last_same_bits_and_stock_layout(name, kind, shape, padding):
    n = len(padding) // 2
    if len(shape) != n + 2:
        pytest.skip("unbatched input")
    x, grad = make(kind, shape, padding)
    fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
    xc, gradc = x.contiguous(memory_format=fmt), grad.contiguous(memory_format=fmt)
    got = twin(kind, n)(grad, x, padding)
    gotc = twin(kind, n)(gradc, xc, padding)
    stockc = stock(kind, n)(gradc, xc, padding)
    assert_bitwise_equal(got, gotc, name)
    assert gotc.stride() == stockc.stride(), f"{name}: {gotc.stride()} vs stock {stockc.stride()}"
    assert gotc.is_contiguous(memory_format=fmt)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_empty_inputs(kind, n):
    sp = [4] * n
    pad = [1] * (2 * n)
    for shape in ([0, 3, *sp], [2, 0, *sp], [0, *sp]):
        x = torch.randn(shape)
        grad = torch.randn(out_shape(shape, pad))
        if kind == "replication" and n == 3 and shape[-4] == 0:
            # Stock's replication_pad3d takes an empty batch only.
            for fn in (twin(kind, n), stock(kind, n)):
                with pytest.raises(RuntimeError, match="possibly 0 batch size and other non-zero dimensions"):
                    fn(grad, x, pad)
            continue
        got = twin(kind, n)(grad, x, pad)
        assert got.shape == x.shape and got.dtype == x.dtype
        buf = torch.empty(5)
        twin(kind, n).grad_input(grad, x, pad, grad_input=buf)
        assert buf.shape == x.shape
    # Every output cropped away: the gradient is zero. Stock's CPU reflection_pad1d/3d backwards return
    # their result unwritten (uninitialised) here, so only the others are compared.
    x = torch.randn(2, 3, *sp)
    crop = [-2] * (2 * n)
    grad = torch.randn(out_shape(x.shape, crop))
    assert grad.numel() == 0
    got = twin(kind, n)(grad, x, crop)
    assert torch.equal(got, torch.zeros_like(x))
    if kind == "replication" or n == 2:
        assert torch.equal(got, stock(kind, n)(grad, x, crop))
    if kind == "replication":
        # An empty padded dimension with positive padding: stock returns an empty gradient too (3-D: stock rejects
        # it, and so does the twin).
        x = torch.randn(2, 3, *([2] * (n - 1)), 0)
        grad = torch.randn(out_shape(x.shape, pad))
        for fn in (twin(kind, n), stock(kind, n)):
            if n < 3:
                assert fn(grad, x, pad).shape == x.shape
            else:
                with pytest.raises(RuntimeError, match="possibly 0 batch size and other non-zero dimensions"):
                    fn(grad, x, pad)


def test_negative_padding_crops_as_stock():
    for name, kind, shape, padding in CASES:
        if min(padding) >= 0:
            continue
        x, grad = make(kind, shape, padding, torch.float64)
        n = len(padding) // 2
        torch.testing.assert_close(twin(kind, n)(grad, x, padding), stock(kind, n)(grad, x, padding), rtol=1e-12,
                                   atol=1e-12, msg=name)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_complex_and_integer_dtypes_go_to_stock(kind, n):
    x, grad = make(kind, [2, 3] + [4] * n, [1] * (2 * n), torch.float64)
    pad = [1] * (2 * n)
    xc, gradc = x.to(torch.complex128) * (1 + 2j), grad.to(torch.complex128) * (3 - 1j)
    want = stock(kind, n)(gradc, xc, pad)
    assert torch.equal(twin(kind, n)(gradc, xc, pad), want)
    buf = torch.empty(0, dtype=torch.complex128)
    twin(kind, n).grad_input(gradc, xc, pad, grad_input=buf)
    assert torch.equal(buf, want)
    name = f"{kind}_pad{n}d_backward"
    for op in (stock(kind, n), twin(kind, n)):
        with pytest.raises(NotImplementedError, match=re.escape(f'"{name}" not implemented for \'Long\'')):
            op(grad.long(), x.long(), pad)
    # Every output cropped away: a zero gradient (stock's CPU reflection 1-D and 3-D backwards leave theirs
    # unwritten), from the functional and the .grad_input overloads, over a buffer of 7s.
    crop = [-2] * (2 * n)
    empty = torch.zeros(out_shape(xc.shape, crop), dtype=torch.complex128)
    assert empty.numel() == 0
    assert torch.equal(twin(kind, n)(empty, xc, crop), torch.zeros_like(xc))
    buf = torch.full_like(xc, 7)
    assert torch.equal(twin(kind, n).grad_input(empty, xc, crop, grad_input=buf), torch.zeros_like(xc))
    assert torch.equal(buf, torch.zeros_like(xc))


# ---- bad inputs ----

def _raises_both(twin_call, stock_call, pattern):
    """The twin raises `pattern`; so does stock's CPU op where it checks (stock_call may be None)."""
    with pytest.raises(RuntimeError, match=pattern):
        twin_call()
    if stock_call is not None:
        with pytest.raises(RuntimeError, match=pattern):
            stock_call()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_bad_inputs_raise_clear_errors(kind, n):
    op, st = twin(kind, n), stock(kind, n)
    name = f"{kind}_pad{n}d_backward"
    torch.manual_seed(0)
    x = torch.randn(2, 3, *([4] * n))
    pad = [1] * (2 * n)
    g = torch.randn(out_shape(x.shape, pad))
    # grad_output's padded sizes, one axis at a time; stock checks them too (its spelling varies).
    for a, axis in enumerate(["width", "height", "depth"][:n]):
        bad = g.narrow(g.dim() - 1 - a, 0, 5)
        _raises_both(lambda: op(bad, x, pad), lambda: st(bad, x, pad),
                     rf"(grad_output|gradOutput) {axis} unexpected\. Expected: 6,? Got: 5")
    with pytest.raises(RuntimeError, match=rf"{name}\(\): grad_output width unexpected\. Expected: 6, Got: 5"):
        op(g.narrow(-1, 0, 5), x, pad)
    # The padding's length.
    with pytest.raises(RuntimeError, match=re.escape(f"{name}(): padding size is expected to be {2 * n}, but got "
                                                     f"{2 * n + 1} values")):
        op(g, x, pad + [1])
    if kind == "replication" or n == 3:
        with pytest.raises(RuntimeError, match=f"padding size is expected to be {2 * n}"):
            st(g, x, pad + [1])
    # Ranks.
    with pytest.raises(RuntimeError, match=re.escape(f"{name}(): expected a {n + 1}D or {n + 2}D (batch mode) self, "
                                                     f"but got sizes {list(x[0, 0].shape)}")):
        op(g[0, 0], x[0, 0], pad)
    with pytest.raises(RuntimeError, match=re.escape(f"expected a {n + 1}D or {n + 2}D (batch mode) self, but got "
                                                     f"sizes {[1] + list(x.shape)}")):
        op(g[None], x[None], pad)
    with pytest.raises(RuntimeError, match=re.escape(f"{name}(): expected grad_output with {n + 2} dimensions like "
                                                     f"self, but got sizes {list(g[0].shape)}")):
        op(g[0], x, pad)
    # dtypes.
    with pytest.raises(RuntimeError, match=re.escape(f"{name}(): expected grad_output of dtype Float like self, "
                                                     "but got Double")):
        op(g.double(), x, pad)
    with pytest.raises(RuntimeError, match="expected scalar type Double but found Float"):
        st(g.double(), x, pad)
    # grad_output's leading dims must be self's (stock's CPU kernels mostly do not check, and read past
    # grad_output's end).
    with pytest.raises(RuntimeError, match=re.escape(f"{name}(): grad_output sizes {[1] + list(g.shape[1:])} do not "
                                                     f"match self sizes {list(x.shape)} in dimension 0")):
        op(g[:1], x, pad)
    with pytest.raises(RuntimeError, match="do not match self sizes .* in dimension 1"):
        op(g[:, :2], x, pad)
    if kind == "reflection":
        # Padding must be smaller than the input (the forward's check; stock's backward checks it for 1-D
        # only, and its 2-D and 3-D CPU kernels write out of bounds without it: not called here).
        for a in range(n):
            big = list(pad)
            big[2 * a + 1] = 4
            gb = torch.randn(out_shape(x.shape, big))
            dim = x.dim() - 1 - a
            pattern = (r"Padding size should be less than the corresponding input dimension, but got: padding "
                       rf"\(1, 4\) at dimension {dim} of input \[2, 3(, 4)+\]")
            _raises_both(lambda: op(gb, x, big), (lambda: st(gb, x, big)) if n == 1 else None, pattern)
            with pytest.raises(RuntimeError, match=rf"^{name}\(\): {pattern}"):
                op(gb, x, big)
    else:
        # Replicate padding may exceed the input.
        big = [7] * (2 * n)
        gb = torch.randn(out_shape(x.shape, big), dtype=torch.float64)
        torch.testing.assert_close(op(gb, x.double(), big), st(gb, x.double(), big), rtol=1e-12, atol=1e-12)


# ---- OpInfo and ModuleInfo samples ----

def saved_padding(fn):
    """The node's padding; negative values (saved as int64) read back unsigned."""
    return [p - 2**64 if p >= 2**63 else p for p in fn._saved_padding]


def twin_from_node(fn, grad):
    kind, n = PAD_NODES[type(fn).__name__]
    return twin(kind, n)(grad, fn._saved_self, saved_padding(fn))


def opinfo_cases():
    from torch.testing._internal.common_methods_invocations import op_db

    return [o for o in op_db if o.name == "nn.functional.pad" and o.variant_test_name in
            ("reflect", "replicate", "replicate_negative")]


@pytest.mark.parametrize("opinfo", opinfo_cases(), ids=lambda o: o.variant_test_name)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_opinfo_samples(opinfo, dtype):
    checked = 0
    for sample in opinfo.sample_inputs("cpu", dtype, requires_grad=True):
        out = opinfo(sample.input, *sample.args, **sample.kwargs)
        if out.grad_fn is None or type(out.grad_fn).__name__ not in PAD_NODES:
            continue
        torch.manual_seed(checked)
        grad = torch.randn_like(out)
        (want,) = torch.autograd.grad(out, sample.input, grad, retain_graph=True)
        got = twin_from_node(out.grad_fn, grad)
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
        checked += 1
    assert checked > 0


PAD_MODULES = ["ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
               "ReplicationPad3d"]


def moduleinfo_cases():
    from torch.testing._internal.common_modules import module_db

    return [m for m in module_db if m.module_cls.__name__ in PAD_MODULES]


@pytest.mark.parametrize("module_info", moduleinfo_cases(), ids=lambda m: m.module_cls.__name__)
def test_moduleinfo_samples(module_info):
    checked = 0
    inputs = module_info.module_inputs_func(module_info, device="cpu", dtype=torch.float64, requires_grad=True,
                                            training=True)
    for module_input in inputs:
        if module_input.forward_input is None:
            continue
        c, f = module_input.constructor_input, module_input.forward_input
        module = module_info.module_cls(*c.args, **c.kwargs)
        out = module(*f.args, **f.kwargs)
        if out.grad_fn is None or type(out.grad_fn).__name__ not in PAD_NODES:
            continue
        torch.manual_seed(checked)
        grad = torch.randn_like(out)
        (want,) = torch.autograd.grad(out, f.args[0], grad, retain_graph=True)
        torch.testing.assert_close(twin_from_node(out.grad_fn, grad), want, rtol=1e-12, atol=1e-12)
        checked += 1
    assert checked > 0


# ---- nn modules and torch.stft through autograd, with the twin in place of stock's backward ----

def grad_through_twin(out, inputs, grad):
    """torch.autograd.grad(out, inputs, grad) with every padding backward node of the graph replaced by the
    detops twin (a node hook returning the twin's result); returns the gradients and the twin call count."""
    calls, handles, seen, stack = [0], [], set(), [out.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        stack.extend(f for f, _ in fn.next_functions)
        if type(fn).__name__ in PAD_NODES:
            def hook(grad_inputs, grad_outputs, fn=fn):
                calls[0] += 1
                return (twin_from_node(fn, grad_outputs[0]),)
            handles.append(fn.register_hook(hook))
    try:
        return torch.autograd.grad(out, inputs, grad, retain_graph=True), calls[0]
    finally:
        for h in handles:
            h.remove()


MODULES = [
    (nn.ReflectionPad1d(3), (4, 5, 11)),
    (nn.ReflectionPad1d((2, 1)), (3, 6)),
    (nn.ReflectionPad2d((2, 1, 2, 2)), (2, 3, 3, 5)),
    (nn.ReflectionPad2d(1), (2, 4, 3, 3)),
    (nn.ReflectionPad3d((1, 2, 1, 1, 2, 0)), (2, 2, 3, 4, 5)),
    (nn.ReplicationPad1d((4, 2)), (4, 5, 6)),
    (nn.ReplicationPad2d((3, 1, 0, 5)), (2, 3, 4, 5)),
    (nn.ReplicationPad2d(20), (1, 2, 3, 3)),
    (nn.ReplicationPad3d((1, 2, 2, 1, 3, 1)), (2, 2, 3, 4, 3)),
]


def module_id(v):
    return f"{type(v).__name__}{tuple(v.padding)}" if isinstance(v, nn.Module) else str(v)


@pytest.mark.parametrize("module,shape", MODULES, ids=module_id)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_modules_autograd_through_twin(module, shape, dtype):
    torch.manual_seed(1)
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    padded = module(x)
    out = (padded * torch.linspace(-1, 2, padded.numel(), dtype=dtype).view(padded.shape)).tanh()
    grad = torch.randn_like(out)
    (want,) = torch.autograd.grad(out, x, grad, retain_graph=True)
    (got,), calls = grad_through_twin(out, x, grad)
    assert calls == 1
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_stft_center_reflect_through_twin(dtype):
    torch.manual_seed(3)
    x = torch.randn(2, 400, dtype=dtype, requires_grad=True)
    window = torch.hann_window(64, dtype=dtype)
    spec = torch.stft(x, 64, hop_length=16, window=window, center=True, pad_mode="reflect", return_complex=True)
    out = spec.abs()
    grad = torch.randn_like(out)
    (want,) = torch.autograd.grad(out, x, grad, retain_graph=True)
    (got,), calls = grad_through_twin(out, x, grad)
    assert calls == 1  # stft's center padding is reflection_pad1d
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


# ---- routing of F.pad(mode='replicate') ----

class FakeCuda(torch.Tensor):
    """A CPU or meta tensor that F.pad takes for a CUDA tensor (is_cuda), to see its routing without a GPU."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def is_cuda(self):
        return True


class Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(".".join(str(func).split(".")[:2]))
        return func(*args, **(kwargs or {}))


def record_replicate_pad(device, padding=(1, 2, 2, 1), shape=(1, 2, 4, 5)):
    x = torch.randn(shape, device=device).as_subclass(FakeCuda).requires_grad_(True)
    with Recorder() as rec:
        out = F.pad(x, padding, mode="replicate")
        out.sum().backward()
    return rec.ops, out


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_routing_sends_replicate_pad_to_the_aten_op(device):
    import torch._decomp.decompositions as decompositions

    assert detops.get_mode() == "auto" and detops.padding_routed()  # import's default
    torch.use_deterministic_algorithms(True)
    recorded, out = record_replicate_pad(device)
    assert "aten.replication_pad2d" in recorded and "aten.replication_pad2d_backward" in recorded, recorded
    assert "aten._unsafe_index" not in recorded
    assert type(out.grad_fn).__name__ == "ReplicationPad2DBackward0"
    for n, padding, shape in ((1, (2, 1), (2, 5)), (3, (1, 1, 2, 0, 1, 1), (1, 2, 3, 3, 3))):
        recorded, _ = record_replicate_pad(device, padding, shape)
        assert f"aten.replication_pad{n}d_backward" in recorded, recorded
    # Mode off: stock's decomposition again, the very function object stock had.
    with detops.mode("off"):
        assert not detops.padding_routed()
        assert decompositions._replication_pad is detops.routing._STOCK_REPLICATION_PAD
        recorded, out = record_replicate_pad(device)
        assert "aten._unsafe_index" in recorded and "aten.replication_pad2d" not in recorded, recorded
    assert detops.padding_routed()
    recorded, _ = record_replicate_pad(device)
    assert "aten.replication_pad2d_backward" in recorded


def test_routing_switch_is_explicit_and_restorable():
    import torch._decomp.decompositions as decompositions

    stock_fn = detops.routing._STOCK_REPLICATION_PAD
    assert detops.route_padding(False) is True
    assert decompositions._replication_pad is stock_fn and not detops.padding_routed()
    assert detops.route_padding(False) is False
    assert detops.route_padding(True) is False and detops.padding_routed()
    detops.set_mode("off")
    assert not detops.padding_routed()
    detops.set_mode("always")
    assert detops.padding_routed()
    detops.route_padding(False)
    with detops.mode("auto"):  # a mode turns routing on for its block, then the previous state returns
        assert detops.padding_routed()
    assert not detops.padding_routed() and detops.get_mode() == "always"
    detops.set_mode("auto")
    assert detops.padding_routed()


def test_import_sets_routing_from_the_mode():
    code = "import detops; print(detops.get_mode(), detops.padding_routed())"
    for mode, want in (("", "auto True"), ("always", "always True"), ("off", "off False")):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                                env=dict(os.environ, DETOPS_MODE=mode))
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == want.split(), (mode, result.stdout)


def test_routing_changes_nothing_else():
    torch.use_deterministic_algorithms(True)
    x = torch.randn(1, 2, 4, 5, requires_grad=True)
    for mode in ("replicate", "reflect", "constant", "circular"):
        with Recorder() as rec:  # plain CPU tensors never take the decomposition
            F.pad(x, (1, 1, 1, 1), mode=mode).sum().backward()
        assert "aten._unsafe_index" not in rec.ops, (mode, rec.ops)
    # Non-CUDA tensors that reach the routed function get stock's decomposition.
    with Recorder() as rec:
        detops.routing._routed_replication_pad(torch.randn(1, 2, 4, 5), (1, 1, 1, 1))
    assert "aten._unsafe_index" in rec.ops
    torch.use_deterministic_algorithms(False)
    recorded, _ = record_replicate_pad("cpu")  # flag off: F.pad's aten path, routing or not
    assert "aten.replication_pad2d_backward" in recorded


# ---- GPU ----

@pytest.mark.gpu
@pytest.mark.parametrize("name,kind,shape,padding", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_gpu_cuda_twin_equals_cpu_twin_bitwise(name, kind, shape, padding, dtype):
    x, grad = make(kind, shape, padding, dtype, seed=4)
    n = len(padding) // 2
    cpu = twin(kind, n)(grad, x, padding)
    cuda = twin(kind, n)(grad.cuda(), x.cuda(), padding)
    assert cuda.is_cuda and cuda.dtype == dtype
    assert_bitwise_equal(cuda.cpu(), cpu, name)
    buf = torch.empty(0, dtype=dtype, device="cuda")
    twin(kind, n).grad_input(grad.cuda(), x.cuda(), padding, grad_input=buf)
    assert_bitwise_equal(buf.cpu(), cpu, name + " .grad_input")


@pytest.mark.gpu
@pytest.mark.parametrize("name,kind,shape,padding", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_gpu_override_under_flag_equals_cpu_twin(name, kind, shape, padding, dtype):
    x, grad = make(kind, shape, padding, dtype, seed=6)
    n = len(padding) // 2
    want = twin(kind, n)(grad, x, padding)
    xc, gc = x.cuda(), grad.cuda()
    with detops.mode("auto"):
        torch.use_deterministic_algorithms(True)
        got = stock(kind, n)(gc, xc, padding)
        buf = torch.empty(0, dtype=dtype, device="cuda")
        stock(kind, n).grad_input(gc, xc, padding, grad_input=buf)
        torch.cuda.synchronize()
    assert_bitwise_equal(got.cpu(), want, name)
    assert_bitwise_equal(buf.cpu(), want, name + " .grad_input")
    with detops.mode("always"):
        torch.use_deterministic_algorithms(False)
        assert_bitwise_equal(stock(kind, n)(gc, xc, padding).cpu(), want, name + " (always)")


@pytest.mark.gpu
@pytest.mark.parametrize("module,shape", MODULES, ids=module_id)
def test_gpu_module_forward_backward_under_flag(module, shape):
    torch.manual_seed(2)
    m = copy.deepcopy(module).cuda()
    x = torch.randn(shape, device="cuda", requires_grad=True)
    torch.use_deterministic_algorithms(True)
    out = m(x)
    # Routing (on by import in mode auto) sends ReplicationPad*d to the aten op too: its backward is detops'.
    assert type(out.grad_fn).__name__ in PAD_NODES, type(out.grad_fn).__name__
    grad = torch.randn_like(out)
    (ours,) = torch.autograd.grad(out, x, grad, retain_graph=True)
    again = [torch.autograd.grad(out, x, grad, retain_graph=True)[0] for _ in range(3)]
    torch.use_deterministic_algorithms(False)
    for a in again:
        assert_bitwise_equal(a, ours, "rerun")
    kind, n = PAD_NODES[type(out.grad_fn).__name__]
    cpu_twin = twin(kind, n)(grad.cpu(), x.detach().cpu(), list(m.padding))
    assert_bitwise_equal(ours.cpu(), cpu_twin, "CUDA under the flag vs the CPU twin")
    assert_bitwise_equal(twin(kind, n)(grad, x.detach(), list(m.padding)), ours, "CUDA twin vs override")
    (stock_grad,) = torch.autograd.grad(m(x), x, grad)  # flag off: stock's atomics
    torch.testing.assert_close(ours, stock_grad, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_gpu_replicate_pad_routing_reaches_detops_and_mode_off_restores_stock():
    x = torch.randn(2, 3, 6, 7, device="cuda", requires_grad=True)
    torch.use_deterministic_algorithms(True)
    out = F.pad(x, (3, 2, 1, 4), mode="replicate")
    assert type(out.grad_fn).__name__ == "ReplicationPad2DBackward0"
    grad = torch.randn_like(out)
    (ours,) = torch.autograd.grad(out, x, grad)
    want = ops.replication_pad2d_backward(grad.cpu(), x.detach().cpu(), [3, 2, 1, 4])
    assert_bitwise_equal(ours.cpu(), want, "F.pad replicate backward vs the CPU twin")
    with detops.mode("off"):
        out = F.pad(x, (3, 2, 1, 4), mode="replicate")  # stock's decomposition, no aten backward to throw
        assert type(out.grad_fn).__name__ not in PAD_NODES
        (decomposed,) = torch.autograd.grad(out, x, grad)
        with pytest.raises(RuntimeError, match="does not have a deterministic implementation"):
            aten.replication_pad2d_backward(grad, x.detach(), [3, 2, 1, 4])
    torch.testing.assert_close(decomposed, ours, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_gpu_stft_backward_under_flag():
    torch.manual_seed(4)
    x = torch.randn(2, 4000, device="cuda", requires_grad=True)
    window = torch.hann_window(256, device="cuda")
    torch.use_deterministic_algorithms(True)
    out = torch.stft(x, 256, hop_length=64, window=window, center=True, pad_mode="reflect",
                     return_complex=True).abs()
    grad = torch.randn_like(out)
    (ours,) = torch.autograd.grad(out, x, grad)
    torch.use_deterministic_algorithms(False)
    xc = x.detach().cpu().requires_grad_(True)
    outc = torch.stft(xc, 256, hop_length=64, window=window.cpu(), center=True, pad_mode="reflect",
                      return_complex=True).abs()
    (cpu,) = torch.autograd.grad(outc, xc, grad.cpu())
    torch.testing.assert_close(ours.cpu(), cpu, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_gpu_100_reruns_identical():
    x, grad = make("replication", (4, 8, 16, 16), [9, 9, 9, 9], seed=8)
    xc, gc = x.cuda(), grad.cuda()
    first = ops.replication_pad2d_backward(gc, xc, [9] * 4)
    for _ in range(100):
        assert torch.equal(ops.replication_pad2d_backward(gc, xc, [9] * 4), first)


@pytest.mark.gpu
@pytest.mark.parametrize("shape,padding", [((3, 3), [1, 1, 1, 1]), ((2, 5), [1, 1, 1, 1]), ((4, 3), [2, 2, 1, 1]),
                                           ((3, 4), [1, 2, 2, 1]), ((2, 2), [1, 1, 1, 1]), ((5, 5), [1, 1, 1, 1])],
                         ids=str)
def test_gpu_stock_reflection_pad2d_under_the_flag_vs_cpu_autograd(shape, padding):
    """Reports (prints) whether stock's deterministic CUDA kernel (mode off, flag on) agrees with CPU autograd
    in float64 where a row or column lies in both reflection zones; asserts only detops' result."""
    g = torch.Generator().manual_seed(12)
    x = torch.randn(2, 3, *shape, generator=g, dtype=torch.float64, requires_grad=True)
    out = F.pad(x, padding, mode="reflect")
    grad = torch.randn(out.shape, generator=g, dtype=torch.float64)
    (reference,) = torch.autograd.grad(out, x, grad)
    xc, gc = x.detach().cuda(), grad.cuda()
    label = f"stock reflection_pad2d_backward (CUDA, deterministic flag) input {list(x.shape)} padding {padding}"
    with detops.mode("off"):
        torch.use_deterministic_algorithms(True)
        try:
            stock_det = aten.reflection_pad2d_backward(gc, xc, padding).cpu()
        except RuntimeError as exc:  # reported, not asserted
            stock_det = None
            print(f"\n{label}: raises {str(exc).splitlines()[0]}")
        torch.use_deterministic_algorithms(False)
    if stock_det is not None:
        wrong = (stock_det - reference).abs() > 1e-9
        print(f"\n{label}: {int(wrong.sum())} of {wrong.numel()} elements differ from CPU autograd (float64), "
              f"max abs error {float((stock_det - reference).abs().max()):.3g}")
    with detops.mode("auto"):
        torch.use_deterministic_algorithms(True)
        ours = aten.reflection_pad2d_backward(gc, xc, padding).cpu()
    torch.testing.assert_close(ours, reference, rtol=1e-12, atol=1e-12)
