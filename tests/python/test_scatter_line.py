"""The scatter family on an index that runs along `dim` only (a 1-D index, or one of size 1 along every other
dimension): the CPU path with the flat layout (ops/scatter_cpu.h, ScatterLine) must give the bits of the same
data laid out as two identical columns of a 2-D problem, which takes the general per-element layout; at 1 and
2 threads, contiguous and strided, with hot destinations past the tree's first levels (docs/order_contract.md).
scatter without a reduction runs the last writer's pass there, checked the same way."""

import pytest
import torch
from conftest import FLOAT_DTYPES, assert_bitwise_equal

D = torch.ops.detops

REDUCES = [("sum", True), ("sum", False), ("prod", True), ("mean", True), ("mean", False), ("amax", False),
           ("amin", True)]


def line_case(dtype, n, m, seed, strided=False, reduce=None):
    """self [m], index [n] (hot destinations 0 and 1 with 33 and 1100 contributions), src [n]."""
    g = torch.Generator().manual_seed(seed)
    index = torch.randint(0, m, (n,), generator=g)
    index[torch.randperm(n, generator=g)[:33]] = 0
    index[torch.randperm(n, generator=g)[:1100]] = 1
    if reduce == "prod":
        src = 1 + (torch.rand(n, generator=g, dtype=torch.float64) - 0.5) * 1e-2
        self = 1 + (torch.rand(m, generator=g, dtype=torch.float64) - 0.5) * 1e-2
    else:
        src = torch.randn(n, generator=g, dtype=torch.float64)
        self = torch.randn(m, generator=g, dtype=torch.float64)
    self, src = self.to(dtype), src.to(dtype)
    if strided:
        index = torch.stack([index, index], 1)[:, 1]
        src = torch.stack([src, src, src], 1)[:, 2]
        self = torch.stack([self, self], 1)[:, 0]
        assert index.stride(0) == 2 and src.stride(0) == 3 and self.stride(0) == 2
    return self, index, src


def as_columns(self, index, src):
    """The same problem twice side by side: a 2-D index that is not broadcast takes the general layout."""
    return (torch.stack([self, self], 1), torch.stack([index, index], 1).contiguous(),
            torch.stack([src, src], 1))


def check(run, self, index, src, msg):
    """run(self, index, src) -> result; the 1-D result against column 0 and 1 of the 2-D one, 1 and 2 threads."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run(self, index, src)
        wide = run(*as_columns(self, index, src))
        torch.set_num_threads(2)
        two = run(self, index, src)
    finally:
        torch.set_num_threads(threads)
    assert_bitwise_equal(one, wide[:, 0].contiguous(), msg + ": 1-D vs general layout")
    assert_bitwise_equal(one, wide[:, 1].contiguous(), msg + ": 1-D vs general layout, column 1")
    assert_bitwise_equal(one, two, msg + ": 1 vs 2 threads")


SIZES = [(5000, 300), (70_000, 4000), (70_000, 300_000)]  # dense keys, and a sparse key space


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("strided", [False, True])
def test_scatter_add_line_equals_general_layout(dtype, strided):
    for i, (n, m) in enumerate(SIZES):
        self, index, src = line_case(dtype, n, m, seed=10 + i, strided=strided)
        for index_dtype in (torch.int64, torch.int32):
            idx = index.to(index_dtype)
            check(lambda s, x, v: D.scatter_add.default(s, 0, x, v), self, idx, src, f"n {n} m {m} {index_dtype}")
            inplace = self.clone()
            D.scatter_add_.default(inplace, 0, idx, src)
            assert_bitwise_equal(inplace, D.scatter_add.default(self, 0, idx, src), "in place vs functional")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + [torch.int32])
@pytest.mark.parametrize("reduce,include_self", REDUCES)
def test_scatter_reduce_line_equals_general_layout(dtype, reduce, include_self):
    if dtype == torch.int32 and reduce == "mean":
        pytest.skip("integer mean is covered by test_scatter_reduce.py")
    for i, (n, m) in enumerate(SIZES):
        for strided in (False, True):
            self, index, src = line_case(torch.float64, n, m, seed=20 + i, strided=strided, reduce=reduce)
            if dtype == torch.int32:
                self, src = (self * 100).to(dtype), (src * 100).to(dtype)
            else:
                self, src = self.to(dtype), src.to(dtype)
            check(lambda s, x, v: D.scatter_reduce.two(s, 0, x, v, reduce, include_self=include_self),
                  self, index, src, f"{reduce} include_self={include_self} n {n} m {m} strided {strided}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + [torch.int64, torch.bool, torch.complex64])
def test_scatter_line_equals_general_layout(dtype):
    for i, (n, m) in enumerate(SIZES):
        for strided in (False, True):
            self, index, src = line_case(torch.float64, n, m, seed=30 + i, strided=strided)
            self, src = (self > 0, src > 0) if dtype == torch.bool else (self.to(dtype), src.to(dtype))
            msg = f"n {n} m {m} strided {strided}"
            check(lambda s, x, v: D.scatter.src(s, 0, x, v), self, index, src, msg + " src")
            check(lambda s, x, v: D.scatter.value(s, 0, x, 3), self, index, src, msg + " value")
            if dtype.is_floating_point:
                check(lambda s, x, v: D.scatter.reduce(s, 0, x, v, reduce="multiply"), self, index, src,
                      msg + " reduce")
            # the last writer: each destination's last occurrence in source order
            last = torch.full((m,), -1, dtype=torch.long).scatter_reduce_(0, index, torch.arange(n), "amax")
            want = torch.where(last >= 0, src[last.clamp(min=0)], self)
            assert_bitwise_equal(D.scatter.src(self, 0, index, src), want, msg + " last writer")


def test_index_of_size_one_along_other_dims_takes_the_line():
    g = torch.Generator().manual_seed(5)
    self = torch.randn(300, 1, 4, generator=g)
    index = torch.randint(0, 300, (5000, 1, 1), generator=g)
    src = torch.randn(5000, 1, 1, generator=g)
    got = D.scatter_add.default(self, 0, index, src)
    want = self.clone()
    want[:, :, :1] = D.scatter_add.default(self[:, :, :1].contiguous().flatten(), 0, index.flatten(),
                                           src.flatten()).view(300, 1, 1)
    assert_bitwise_equal(got, want)
