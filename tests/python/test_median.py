"""median / nanmedian along a dim: the twins torch.ops.detops.{median,nanmedian}.dim_values against stock CPU
(values bit for bit, the same indices: ties, -0.0/+0.0, NaN), every dtype, 0-d, empty, negative dims, keepdim,
non-contiguous inputs, out tensors resized as stock, every bad argument, reruns and thread counts; and on CUDA
(marker gpu): torch.median / torch.nanmedian with a dim under the flag, CUDA == CPU twin bitwise."""

import random

import pytest
import torch

import detops
from conftest import FLOAT_DTYPES, assert_bitwise_equal

INT_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
DTYPES = FLOAT_DTYPES + INT_DTYPES
OPS = {"median": torch.median, "nanmedian": torch.nanmedian}


def twin(name, self, dim, keepdim=False, values=None, indices=None):
    values = torch.empty(0, dtype=self.dtype, device=self.device) if values is None else values
    indices = torch.empty(0, dtype=torch.long, device=self.device) if indices is None else indices
    return getattr(torch.ops.detops, name).dim_values(self, dim, keepdim, values=values, indices=indices)


def test_covered():
    covered = detops.covered_ops()
    assert "aten::median.dim_values" in covered and "aten::nanmedian.dim_values" in covered


def make(shape, dtype, g, rng):
    """Values with many ties (a few distinct values), both zeros, and NaN in about a third of the cases."""
    if dtype.is_floating_point:
        pool = torch.tensor([-2.5, -1.0, -0.0, 0.0, 0.5, 3.0, float("inf"), -float("inf")], dtype=torch.float64)
        if rng.random() < 0.5:
            t = pool[torch.randint(0, len(pool), shape, generator=g)]
        else:
            t = torch.randn(shape, generator=g, dtype=torch.float64)
        if rng.random() < 0.35:
            t = t.masked_fill(torch.rand(shape, generator=g) < rng.choice([0.1, 0.5, 1.0]), float("nan"))
        return t.to(dtype)
    lo, hi = (0, 6) if dtype == torch.uint8 else (-3, 3)
    if rng.random() < 0.3:
        info = torch.iinfo(dtype)
        return torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64).to(dtype)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def noncontiguous(t, rng):
    if t.dim() < 2 or rng.random() < 0.5:
        return t
    return t.transpose(0, -1).contiguous().transpose(0, -1)


def assert_same(got, want, msg):
    assert_bitwise_equal(got[0], want[0], msg + " values")
    assert torch.equal(got[1], want[1]), f"{msg} indices: {got[1]} vs {want[1]}"


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_twin_matches_stock_cpu(name, dtype):
    rng = random.Random(hash((name, str(dtype))) & 0xffff)
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for _ in range(60):
        shape = rng.choice([(), (1,), (9,), (4, 7), (3, 1, 6), (2, 5, 4), (6, 33)])
        self = noncontiguous(make(shape, dtype, g, rng), rng)
        dim = rng.randrange(-max(self.dim(), 1), max(self.dim(), 1))
        keepdim = rng.random() < 0.5
        want = OPS[name](self, dim, keepdim)
        got = twin(name, self, dim, keepdim)
        assert_same(got, want, f"{name} {dtype} {tuple(shape)} dim={dim} keepdim={keepdim}")


def test_tie_and_nan_rules():
    x = torch.tensor([[1.0, 2, 2, 2, 3, float("nan"), 0, float("nan")],
                      [2, 1, 1, 2, -0.0, 0.0, 0.0, -0.0]])
    v, i = twin("median", x, 1)
    assert torch.isnan(v[0]) and i.tolist() == [5, 7]  # the first NaN; row 1: 4th of 8 by (value, index)
    assert v[1].item() == 0.0 and torch.signbit(v[1])  # the element itself (-0.0), copied
    v, i = twin("nanmedian", x, 1)
    assert v.tolist()[0] == 2.0 and i.tolist() == [1, 7]
    v, i = twin("nanmedian", torch.full((2, 3), float("nan")), 1)
    assert torch.isnan(v).all() and i.tolist() == [0, 0]


def test_nanmedian_of_nan_rows_gives_stocks_index():
    # Stock's index for a row of NaN is where its selection algorithm leaves equal elements: a function of
    # the row length only (ops/median_op.h, nan_row_index).
    for n in list(range(1, 300)) + [1000, 4097, 65536, 100003]:
        x = torch.full((n,), float("nan"))
        assert twin("nanmedian", x, 0)[1].item() == torch.nanmedian(x, 0).indices.item(), n
    x = torch.full((1 << 24,), float("nan"), dtype=torch.float16)
    assert twin("nanmedian", x, 0)[1].item() == torch.nanmedian(x, 0).indices.item()


@pytest.mark.parametrize("name", sorted(OPS))
def test_zero_dim_and_empty(name):
    x = torch.tensor(3.5)
    for dim in (0, -1):
        for keepdim in (False, True):
            assert_same(twin(name, x, dim, keepdim), OPS[name](x, dim, keepdim), f"0-d dim={dim}")
    e = torch.empty(0, 4)
    for keepdim in (False, True):
        got, want = twin(name, e, 1, keepdim), OPS[name](e, 1, keepdim)
        assert got[0].shape == want[0].shape and got[1].shape == want[1].shape


@pytest.mark.parametrize("name", sorted(OPS))
def test_out_tensors_resized_as_stock(name):
    x = torch.randn(5, 6)
    values, indices = torch.empty(5), torch.empty(5, dtype=torch.long)
    got = twin(name, x, 0, False, values, indices)
    assert got[0] is values and got[1] is indices
    assert_same((values, indices), OPS[name](x, 0), "out")
    # A non-empty out of another shape is resized too, as stock's resize_output does (with its warning).
    values, indices = torch.empty(2), torch.empty(2, dtype=torch.long)
    twin(name, x, 0, False, values, indices)
    assert values.shape == indices.shape == (6,)


@pytest.mark.parametrize("name", sorted(OPS))
def test_bad_arguments(name):
    x = torch.randn(3, 4)
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"):
        twin(name, x, 2)
    with pytest.raises(IndexError, match=r"median\(\): Expected reduction dim 1 to have non-zero size"):
        twin(name, torch.empty(2, 0), 1)
    with pytest.raises(RuntimeError, match="Expected tensor for argument #1 'indices' to have scalar type Long"):
        twin(name, x, 0, indices=torch.empty(0, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="Expected tensor for 'values' to have the same type as tensor for argument #2 'self'"):
        twin(name, x, 0, values=torch.empty(0, dtype=torch.float64))
    for dtype, spelled in ((torch.bool, "Bool"), (torch.complex64, "ComplexFloat")):
        with pytest.raises(NotImplementedError, match=f"\"median_out\" not implemented for '{spelled}'"):
            twin(name, torch.ones(3, dtype=dtype), 0)


@pytest.mark.parametrize("name", sorted(OPS))
def test_bitwise_across_reruns_and_threads(name):
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-20, 20, (700, 301), generator=g).float()
    x = x.masked_fill(torch.rand(x.shape, generator=g) < 0.05, float("nan"))
    torch.set_num_threads(1)
    one = twin(name, x, 1)
    torch.set_num_threads(2)
    for _ in range(3):
        assert_same(twin(name, x, 1), one, "threads 1 vs 2")
    assert_same(one, OPS[name](x, 1), "stock")


def test_cpu_aten_call_is_stock():
    # detops overrides median.dim_values on CUDA only: the CPU aten op is stock's, deterministic already.
    torch.use_deterministic_algorithms(True)
    x = torch.randn(4, 5)
    assert_same(torch.median(x, 1), twin("median", x, 1), "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_equals_cpu_twin_and_runs_under_the_flag(name, dtype):
    rng = random.Random(7)
    g = torch.Generator().manual_seed(11)
    for shape, dim in (((4, 7), 1), ((3, 1, 6), -1), ((2, 5, 4), 0), ((6, 33), 1), ((), 0), ((64, 5000), 1),
                       ((5000, 3), 1), ((700, 32), 1), ((700, 33), 1), ((3, 70000), 1)):
        x = make(shape, dtype, g, rng)
        want = twin(name, x, dim)
        got = twin(name, x.cuda(), dim)
        assert_same((got[0].cpu(), got[1].cpu()), want, f"twin {shape}")
        with detops.mode("auto"):
            torch.use_deterministic_algorithms(True)
            got = OPS[name](x.cuda(), dim, True)
        assert_same((got[0].cpu(), got[1].cpu()), twin(name, x, dim, True), f"aten {shape}")
        assert_same(got, OPS[name](x.cuda(), dim, True), f"rerun {shape}")
