"""The scatter family's row layout (ops/scatter_add_op.h, ScatterRows): an index broadcast along every
dimension but `dim` (message passing's `edge_index[:, None].expand(E, F)`) runs the engine over its rows.
Every overload, on such an index, must give the bits of the same call with a materialized (contiguous) copy
of the index, which takes the general per-element layout (docs/order_contract.md). That the row layout is
the one taken is checked in tests/cpp/test_scatter_rows.cpp through the engine call's n and D."""

import pytest
import torch
from conftest import FLOAT_DTYPES, assert_bitwise_equal, assert_close_to_f64

detops_ops = torch.ops.detops

REDUCES = ["sum", "prod", "mean", "amax", "amin"]


def broadcast_index(self_shape, dim, index_shape, hot=False, generator=None):
    """An index of `index_shape`, broadcast (stride 0) along every dimension but `dim`."""
    n = index_shape[dim]
    if hot:
        rows = torch.zeros(n, dtype=torch.long)
    else:
        rows = torch.randint(0, self_shape[dim], (n,), generator=generator)
    view = [1] * len(index_shape)
    view[dim] = n
    index = rows.view(view).expand(index_shape)
    assert all(index.stride(d) == 0 for d in range(index.dim()) if d != dim % index.dim() and index.size(d) > 1)
    return index


def noncontiguous(t):
    """The same values, every stride doubled."""
    big = torch.empty([s * 2 for s in t.shape], dtype=t.dtype)
    view = big[tuple(slice(None, None, 2) for _ in t.shape)]
    view.copy_(t)
    return view


# (self shape, dim, index shape, src shape): 2-D and 3-D, dims 0, 1 and -1, an index smaller than self and
# src along the other dims, a hot destination (tree levels above level 0), empty ones.
SHAPES = [
    ((5, 6), 0, (40, 6), (40, 6)),
    ((5, 6), 0, (40, 4), (41, 7)),
    ((3, 8), 1, (2, 50), (3, 50)),
    ((4, 7), -1, (4, 30), (5, 31)),
    ((4, 3, 5), 0, (60, 2, 5), (60, 3, 6)),
    ((4, 6, 5), 1, (3, 70, 4), (4, 71, 5)),
    ((4, 3, 5), -1, (4, 3, 40), (4, 3, 40)),
    ((2, 5), 0, (1200, 5), (1200, 5)),
    ((5, 6), 0, (0, 6), (0, 6)),
    ((5, 0), 0, (7, 0), (7, 0)),
]


def cases(dtype, seed):
    g = torch.Generator().manual_seed(seed)
    for i, (self_shape, dim, index_shape, src_shape) in enumerate(SHAPES):
        for strided in (False, True):
            hot = self_shape[dim] == 2 and not strided
            index = broadcast_index(self_shape, dim, index_shape, hot=hot, generator=g)
            self = torch.randn(self_shape, generator=g).to(dtype)
            src = torch.randn(src_shape, generator=g).to(dtype)
            if strided:
                src = noncontiguous(src)
                self = noncontiguous(self)
            yield f"shape {i} strided {strided}", self, dim, index, src


def check_overloads(functional, inplace, out, self, dim, index, src, msg, **kw):
    """The three forms of one overload on the broadcast index against the materialized one, bit for bit."""
    materialized = index.contiguous()
    want = functional(self, dim, materialized, src, **kw)
    assert_bitwise_equal(functional(self, dim, index, src, **kw), want, msg)
    a = self.clone()
    assert inplace(a, dim, index, src, **kw) is a
    b = self.clone()
    inplace(b, dim, materialized, src, **kw)
    assert_bitwise_equal(a, b, msg + " (in place)")
    assert_bitwise_equal(a, want, msg + " (in place vs functional)")
    o = torch.empty(0, dtype=self.dtype)
    out(self, dim, index, src, out=o, **kw)
    assert_bitwise_equal(o, want, msg + " (out)")
    return want


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_scatter_add_broadcast_index_bits_equal_materialized(dtype):
    for msg, self, dim, index, src in cases(dtype, 1):
        want = check_overloads(detops_ops.scatter_add.default, detops_ops.scatter_add_.default,
                               detops_ops.scatter_add.out, self, dim, index, src, msg)
        assert_close_to_f64(want, torch.scatter_add(self.double(), dim, index, src.double()), msg)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_broadcast_index_bits_equal_materialized(dtype, reduce, include_self):
    for msg, self, dim, index, src in cases(dtype, 2):
        if reduce == "prod":  # values near 1, so that long products stay finite and nonzero
            src = src.mul(0.01).add(1.0)
        check_overloads(detops_ops.scatter_reduce.two, detops_ops.scatter_reduce_.two,
                        detops_ops.scatter_reduce.two_out, self, dim, index, src, f"{msg} {reduce} {include_self}",
                        reduce=reduce, include_self=include_self)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce_broadcast_index_integers(dtype, reduce):
    g = torch.Generator().manual_seed(3)
    self = torch.randint(0, 9, (4, 6), generator=g).to(dtype)
    src = torch.randint(0, 9, (50, 6), generator=g).to(dtype)
    index = broadcast_index((4, 6), 0, (50, 5), generator=g)
    for include_self in (True, False):
        check_overloads(detops_ops.scatter_reduce.two, detops_ops.scatter_reduce_.two,
                        detops_ops.scatter_reduce.two_out, self, 0, index, src, f"{dtype} {reduce}",
                        reduce=reduce, include_self=include_self)
        want = torch.scatter_reduce(self, 0, index.contiguous(), src, reduce, include_self=include_self)
        assert torch.equal(detops_ops.scatter_reduce.two(self, 0, index, src, reduce, include_self=include_self),
                           want)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + [torch.int64, torch.bool])
def test_scatter_src_broadcast_index_bits_equal_materialized(dtype):
    for msg, self, dim, index, src in cases(torch.float32, 4):
        self, src = self.to(dtype), src.to(dtype)
        want = check_overloads(detops_ops.scatter.src, detops_ops.scatter_.src, detops_ops.scatter.src_out,
                               self, dim, index, src, msg)
        if index.numel():
            # The last writer of each row is stock CPU's (its serial loop runs in source order).
            assert torch.equal(want, torch.scatter(self, dim, index.contiguous(), src)), msg


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_scatter_value_broadcast_index_bits_equal_materialized(dtype):
    for msg, self, dim, index, _ in cases(dtype, 5):
        check_overloads(detops_ops.scatter.value, detops_ops.scatter_.value, detops_ops.scatter.value_out,
                        self, dim, index, 2.5, msg)


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_reduce_overloads_broadcast_index_bits_equal_materialized(dtype, reduce):
    for msg, self, dim, index, src in cases(dtype, 6):
        if reduce == "multiply":
            src = src.mul(0.01).add(1.0)
        check_overloads(detops_ops.scatter.reduce, detops_ops.scatter_.reduce, detops_ops.scatter.reduce_out,
                        self, dim, index, src, f"{msg} {reduce}", reduce=reduce)
        check_overloads(detops_ops.scatter.value_reduce, detops_ops.scatter_.value_reduce,
                        detops_ops.scatter.value_reduce_out, self, dim, index, 1.01, f"{msg} {reduce} value",
                        reduce=reduce)


def test_int32_broadcast_index_bits_equal_materialized():
    g = torch.Generator().manual_seed(8)
    self = torch.randn(5, 6, generator=g)
    src = torch.randn(60, 6, generator=g)
    index = broadcast_index((5, 6), 0, (60, 6), generator=g).to(torch.int32)
    index = index[:, :1].expand(60, 6)
    for reduce in REDUCES:
        check_overloads(detops_ops.scatter_reduce.two, detops_ops.scatter_reduce_.two,
                        detops_ops.scatter_reduce.two_out, self, 0, index, src, reduce, reduce=reduce)
    check_overloads(detops_ops.scatter.src, detops_ops.scatter_.src, detops_ops.scatter.src_out, self, 0, index, src,
                    "src")
    check_overloads(detops_ops.scatter_add.default, detops_ops.scatter_add_.default, detops_ops.scatter_add.out,
                    self, 0, index, src, "add")


def error_of(fn):
    with pytest.raises(RuntimeError) as info:
        fn()
    return str(info.value).splitlines()[0]


def test_broadcast_index_errors_equal_the_general_path():
    """The distinct values of a broadcast index are validated; the message (first bad position) is unchanged."""
    self = torch.zeros(3, 4)
    for dim, index in ((0, torch.tensor([0, 1, 3, 1]).view(4, 1).expand(4, 4)),
                       (1, torch.tensor([0, -1, 2, 5]).view(1, 4).expand(3, 4))):
        src = torch.ones(4, 4)
        calls = [
            lambda i: detops_ops.scatter_add.default(self, dim, i, src),
            lambda i: detops_ops.scatter_reduce.two(self, dim, i, src, "mean"),
            lambda i: detops_ops.scatter.src(self, dim, i, src),
            lambda i: detops_ops.scatter.value(self, dim, i, 1.0),
            lambda i: detops_ops.scatter.value_reduce(self, dim, i, 1.0, reduce="add"),
        ]
        for call in calls:
            got = error_of(lambda: call(index))
            assert got == error_of(lambda: call(index.contiguous()))
            assert "is out of bounds for dimension" in got and "at position" in got, got


def test_message_passing_shape_matches_stock():
    """scatter_add_(0, edge_index[:, None].expand(E, F), messages), as message passing calls it."""
    g = torch.Generator().manual_seed(7)
    num_nodes, num_edges, features = 50, 700, 16
    dst = torch.randint(0, num_nodes, (num_edges,), generator=g)
    messages = torch.randn(num_edges, features, generator=g)
    index = dst[:, None].expand(num_edges, features)
    got = torch.zeros(num_nodes, features)
    detops_ops.scatter_add_.default(got, 0, index, messages)
    want = torch.zeros(num_nodes, features)
    detops_ops.scatter_add_.default(want, 0, index.contiguous(), messages)
    assert_bitwise_equal(got, want)
    assert_close_to_f64(got, torch.zeros(num_nodes, features, dtype=torch.float64).index_add_(0, dst, messages.double()))
