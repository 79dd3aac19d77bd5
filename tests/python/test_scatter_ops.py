"""index_add and scatter_add twins (CPU) against stock CPU ops: random cases over dtypes, ranks, dims,
layouts and index dtypes; PyTorch's own OpInfo samples; integer dtypes; empty and 0-d tensors."""

import random

import pytest
import torch
from conftest import FLOAT_DTYPES, assert_close_to_f64

detops_ops = torch.ops.detops


def f64(t):
    return t.double() if t.is_floating_point() else t


def maybe_noncontiguous(t, rng):
    """Half the time, the same values in a non-contiguous layout."""
    if t.dim() == 0 or rng.random() < 0.5:
        return t
    big = torch.empty([s * 2 for s in t.shape], dtype=t.dtype)
    view = big[tuple(slice(None, None, 2) for _ in t.shape)]
    view.copy_(t)
    return view


def random_index_add_case(rng, dtype):
    rank = rng.randint(1, 4)
    shape = [rng.randint(1, 6) for _ in range(rank)]
    dim = rng.randrange(-rank, rank)
    n = rng.choice([0, 1, 5, 40, 300])
    dests = shape[dim]
    if rng.random() < 0.2:
        index = torch.zeros(n, dtype=torch.long)  # one hot destination
    else:
        index = torch.randint(0, dests, (n,))
    index = index.to(rng.choice([torch.int32, torch.int64]))
    source_shape = list(shape)
    source_shape[dim] = n
    self = torch.randn(shape).to(dtype)
    source = torch.randn(source_shape).to(dtype)
    alpha = rng.choice([1, 2, -0.5, 1.25])
    return maybe_noncontiguous(self, rng), dim, maybe_noncontiguous(index, rng), maybe_noncontiguous(source, rng), alpha


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_index_add_random_cases_match_stock(dtype):
    rng = random.Random(1000 + FLOAT_DTYPES.index(dtype))
    torch.manual_seed(rng.randrange(1 << 30))
    for case in range(100):
        self, dim, index, source, alpha = random_index_add_case(rng, dtype)
        ref = torch.index_add(f64(self), dim, index, f64(source), alpha=alpha)
        msg = f"case {case}: self {tuple(self.shape)} dim {dim} n {index.numel()} alpha {alpha}"
        assert_close_to_f64(detops_ops.index_add(self, dim, index, source, alpha=alpha), ref, msg)
        inplace = self.clone()
        assert detops_ops.index_add_(inplace, dim, index, source, alpha=alpha) is inplace
        assert_close_to_f64(inplace, ref, msg)
        out = torch.empty(0, dtype=dtype)
        detops_ops.index_add.out(self, dim, index, source, alpha=alpha, out=out)
        assert_close_to_f64(out, ref, msg)


def random_scatter_add_case(rng, dtype):
    rank = rng.randint(1, 4)
    shape = [rng.randint(1, 6) for _ in range(rank)]
    dim = rng.randrange(-rank, rank)
    index_shape = [rng.randint(0 if rng.random() < 0.05 else 1, s) for s in shape]
    index_shape[dim] = rng.randint(1, 12)
    src_shape = [s + rng.randint(0, 2) for s in index_shape]
    hot = rng.random() < 0.2
    index = torch.zeros(index_shape, dtype=torch.long) if hot else torch.randint(0, shape[dim], index_shape)
    index = index.to(rng.choice([torch.int32, torch.int64]))
    self = torch.randn(shape).to(dtype)
    src = torch.randn(src_shape).to(dtype)
    return maybe_noncontiguous(self, rng), dim, maybe_noncontiguous(index, rng), maybe_noncontiguous(src, rng)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_scatter_add_random_cases_match_stock(dtype):
    rng = random.Random(2000 + FLOAT_DTYPES.index(dtype))
    torch.manual_seed(rng.randrange(1 << 30))
    for case in range(100):
        self, dim, index, src = random_scatter_add_case(rng, dtype)
        ref = torch.scatter_add(f64(self), dim, index, f64(src))
        msg = f"case {case}: self {tuple(self.shape)} dim {dim} index {tuple(index.shape)} src {tuple(src.shape)}"
        assert_close_to_f64(detops_ops.scatter_add(self, dim, index, src), ref, msg)
        inplace = self.clone()
        assert detops_ops.scatter_add_(inplace, dim, index, src) is inplace
        assert_close_to_f64(inplace, ref, msg)
        out = torch.empty(0, dtype=dtype)
        detops_ops.scatter_add.out(self, dim, index, src, out=out)
        assert_close_to_f64(out, ref, msg)


def test_large_hot_and_wide_cases_match_stock():
    torch.manual_seed(3)
    table = torch.randn(1000, 256)
    index = torch.randint(0, 1000, (5000,))
    rows = torch.randn(5000, 256)
    assert_close_to_f64(detops_ops.index_add(table, 0, index, rows), torch.index_add(f64(table), 0, index, f64(rows)))
    src = torch.rand(100000)
    assert_close_to_f64(
        detops_ops.scatter_add(torch.zeros(3), 0, torch.zeros(100000, dtype=torch.long), src),
        torch.zeros(3, dtype=torch.float64).scatter_add(0, torch.zeros(100000, dtype=torch.long), f64(src)),
    )


def opinfo_samples(name):
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [op for op in op_db if op.name == name and op.variant_test_name == ""]
    assert ops, f"no OpInfo named {name}"
    for dtype in FLOAT_DTYPES:
        for sample in ops[0].sample_inputs("cpu", dtype):
            yield dtype, sample


@pytest.mark.parametrize("name", ["index_add", "scatter_add"])
def test_opinfo_samples_match_stock(name):
    count = 0
    for dtype, sample in opinfo_samples(name):
        args = [f64(a) if isinstance(a, torch.Tensor) else a for a in sample.args]
        ref = getattr(torch, name)(f64(sample.input), *args, **sample.kwargs)
        got = getattr(detops_ops, name)(sample.input, *sample.args, **sample.kwargs)
        assert_close_to_f64(got, ref, f"{name} {dtype} {sample}")
        count += 1
    assert count >= 20


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool, torch.complex64])
def test_other_dtypes_follow_stock_exactly(dtype):
    torch.manual_seed(4)
    self = torch.randint(0, 3, (6, 4)).to(dtype)
    index = torch.randint(0, 6, (20,))
    source = torch.randint(0, 3, (20, 4)).to(dtype)
    alpha = True if dtype == torch.bool else 2
    assert torch.equal(
        detops_ops.index_add(self, 0, index, source, alpha=alpha), torch.index_add(self, 0, index, source, alpha=alpha)
    )
    sindex = torch.randint(0, 6, (5, 4))
    assert torch.equal(detops_ops.scatter_add(self, 0, sindex, source), torch.scatter_add(self, 0, sindex, source))


def test_empty_and_zero_dim_tensors():
    x = torch.randn(4, 3)
    assert torch.equal(detops_ops.index_add(x, 0, torch.empty(0, dtype=torch.long), torch.empty(0, 3)), x)
    assert torch.equal(detops_ops.index_add(x, 1, torch.empty(0, dtype=torch.long), torch.empty(4, 0)), x)
    assert torch.equal(detops_ops.scatter_add(x, 0, torch.empty(0, 3, dtype=torch.long), torch.randn(2, 3)), x)
    assert detops_ops.index_add(torch.empty(0, 3), 1, torch.tensor([0, 2]), torch.empty(0, 2)).shape == (0, 3)
    s = torch.tensor(1.5)
    for index in (torch.tensor([0]), torch.tensor(0)):
        assert_close_to_f64(
            detops_ops.index_add(s, 0, index, torch.tensor(2.0), alpha=3),
            torch.index_add(s.double(), 0, index, torch.tensor(2.0).double(), alpha=3),
        )
    assert_close_to_f64(detops_ops.scatter_add(s, 0, torch.tensor(0), torch.tensor(2.0)), torch.tensor(3.5))
    assert_close_to_f64(detops_ops.scatter_add(s, -1, torch.tensor(0), torch.tensor(2.0)), torch.tensor(3.5))


def test_self_aliasing_and_overlap_are_rejected_like_stock():
    x = torch.zeros(4, 3)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        detops_ops.index_add_(x, 0, torch.tensor([0, 1]), x[:2])
    expanded = torch.zeros(1, 3).expand(4, 3)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        detops_ops.scatter_add_(expanded, 0, torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3))


@pytest.mark.parametrize("layout", ["contiguous", "transposed_index", "wide_self"])
def test_scatter_add_of_forty_dims_matches_stock_and_the_flattened_call(layout):
    # torch allows 64 dims; the engine's map holds 25 after merging the dims whose strides compose, which
    # keeps the source order: the bits equal those of the same data flattened to 3-d.
    from conftest import assert_bitwise_equal

    torch.manual_seed(40)
    shape = [1] * 17 + [2] * 20 + [1, 3, 1]  # 40 dims, 3 * 2^20 elements
    self = torch.randn(shape[:-3] + [5, 3, 1])
    index = torch.randint(0, 5, shape)
    src = torch.randn(shape)
    if layout == "transposed_index":
        index = index.transpose(17, 18).contiguous().transpose(17, 18)
    if layout == "wide_self":
        self = torch.randn(shape[:-3] + [5, 4, 2])
    got = torch.ops.detops.scatter_add(self, -3, index, src)
    torch.testing.assert_close(got, torch.scatter_add(self, -3, index, src), rtol=1e-5, atol=1e-5)
    if layout != "wide_self":
        flat = torch.ops.detops.scatter_add(self.reshape(-1, 5, 3), 1, index.reshape(-1, 1, 3), src.reshape(-1, 1, 3))
        assert_bitwise_equal(got.reshape(-1, 5, 3), flat)
