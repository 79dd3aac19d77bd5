"""index_add's CPU row path (ops/index_add.cpp, IndexAddRowOp: self with no outer slice before `dim`) against
the general op (IndexAddOp over several outer slices), bit for bit: the same problem placed in each slice of a
self with two outer slices must give each slice the row path's bits; at 1 and 2 threads, every float dtype, int32
and int64 indices, one and several contributions per destination (the tree's levels past the first block)."""

import pytest
import torch
from conftest import FLOAT_DTYPES, assert_bitwise_equal

D = torch.ops.detops

# (rows of self, contributions, columns): wide rows, a hot destination past kBlock * kBlock, one column.
SHAPES = [(4096, 2000, 256), (100, 8192, 16), (3, 5000, 40), (50, 3000, 1)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_row_path_equals_general_op(dtype, shape):
    m, n, d = shape
    g = torch.Generator().manual_seed(m + n + d)
    self = torch.randn(m, d, generator=g).to(dtype)
    source = torch.randn(n, d, generator=g).to(dtype)
    index = torch.randint(0, m, (n,), generator=g)
    index[: min(n, 1100)] = 0  # one destination with more than kBlock * kBlock contributions where n allows
    index = index[torch.randperm(n, generator=g)]
    for index_dtype in (torch.int64, torch.int32):
        idx = index.to(index_dtype)
        threads = torch.get_num_threads()
        try:
            torch.set_num_threads(1)
            rows = D.index_add.default(self, 0, idx, source, alpha=0.5)
            general = D.index_add.default(torch.stack([self, self]), 1, idx, torch.stack([source, source]), alpha=0.5)
            torch.set_num_threads(2)
            rows2 = D.index_add.default(self, 0, idx, source, alpha=0.5)
        finally:
            torch.set_num_threads(threads)
        msg = f"{shape} {index_dtype}"
        assert_bitwise_equal(rows, general[0], msg + ": row path vs general op, slice 0")
        assert_bitwise_equal(rows, general[1], msg + ": row path vs general op, slice 1")
        assert_bitwise_equal(rows, rows2, msg + ": 1 vs 2 threads")
        inplace = self.clone()
        D.index_add_.default(inplace, 0, idx, source, alpha=0.5)
        assert_bitwise_equal(inplace, rows, msg + ": in place vs functional")


def test_row_path_with_leading_size_one_dims_and_strided_source():
    g = torch.Generator().manual_seed(8)
    self = torch.randn(1, 300, 7, generator=g)
    source = torch.randn(1, 900, 14, generator=g)[:, :, ::2]
    index = torch.randint(0, 300, (900,), generator=g)
    got = D.index_add.default(self, 1, index, source, alpha=2.0)
    want = D.index_add.default(self[0], 0, index, source[0].contiguous(), alpha=2.0)
    assert_bitwise_equal(got[0], want)
    general = D.index_add.default(torch.cat([self, self]), 1, index, torch.cat([source, source]), alpha=2.0)
    assert_bitwise_equal(got[0], general[1])
