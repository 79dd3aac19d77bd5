"""scatter_reduce.two (functional, in place, .out): the twin against stock CPU over random cases (every reduction,
include_self both ways, duplicate and hot indices, every dtype: floating within accumulation error, amax/amin and
integers exactly), OpInfo samples, the contract's tree bit for bit (sum, prod, mean), NaN and signed zeros, empty,
0-d and non-contiguous tensors, negative dims, every bad argument, reruns and thread counts; and on CUDA (marker
gpu): CUDA twin == CPU twin bitwise, the overrides under the flag."""

import random

import numpy as np
import pytest
import torch

import detops
from conftest import FLOAT_DTYPES, assert_bitwise_equal, rtol_for
from contract_ref import tree_prod, tree_sum
from test_put import noncontiguous

twin = torch.ops.detops.scatter_reduce
REDUCES = ["sum", "prod", "mean", "amax", "amin"]
INT_DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
OVERLOADS = ("aten::scatter_reduce.two", "aten::scatter_reduce_.two", "aten::scatter_reduce.two_out")


def test_covered():
    for op in OVERLOADS:
        assert op in detops.covered_ops()


def make(shape, dtype, g, reduce="sum"):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        if reduce == "prod":  # magnitudes near 1: long products stay in range
            mag = torch.rand(shape, generator=g, dtype=torch.float64) * 0.5 + 0.75
            sign = torch.randint(0, 2, shape, generator=g) * 2 - 1
            return (mag * sign).to(dtype)
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return torch.randint(-100, 100, shape, generator=g).to(dtype)


def random_case(rng, dtype, g, reduce):
    rank = rng.randint(1, 4)
    shape = [rng.randint(1, 6) for _ in range(rank)]
    dim = rng.randrange(-rank, rank)
    index_shape = [rng.randint(0 if rng.random() < 0.05 else 1, s) for s in shape]
    index_shape[dim] = rng.choice([1, 5, 12, 40, 300])
    src_shape = [s + rng.randint(0, 2) for s in index_shape]
    if rng.random() < 0.2:
        index = torch.zeros(index_shape, dtype=torch.long)  # one hot destination per slice
    else:
        index = torch.randint(0, shape[dim], index_shape, generator=g)
    index = index.to(rng.choice([torch.int32, torch.int64]))
    self = make(tuple(shape), dtype, g, reduce)
    src = make(tuple(src_shape), dtype, g, reduce)
    return noncontiguous(self, rng), dim, noncontiguous(index, rng), noncontiguous(src, rng)


def stock(self, dim, index, src, reduce, include_self):
    """Stock CPU; floating dtypes in float64, rounded to the dtype at the end."""
    if self.dtype.is_floating_point and reduce not in ("amax", "amin"):
        ref = torch.scatter_reduce(self.double(), dim, index, src.double(), reduce, include_self=include_self)
        return ref.to(self.dtype)
    return torch.scatter_reduce(self, dim, index, src, reduce, include_self=include_self)


def check(got, want, reduce, msg):
    if got.dtype.is_floating_point and reduce not in ("amax", "amin"):
        rtol = rtol_for(got.dtype) * (2 if reduce == "prod" else 1)
        torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=1e-5, equal_nan=True, msg=msg)
    else:  # selections and integers: exact
        assert_bitwise_equal(got, want, msg)


def every_overload(self, dim, index, src, reduce, include_self):
    """The functional, in-place and .out twins on the same arguments; all must agree bit for bit."""
    a = twin.two(self, dim, index, src, reduce, include_self=include_self)
    b = self.clone()
    assert torch.ops.detops.scatter_reduce_.two(b, dim, index, src, reduce, include_self=include_self) is b
    c = torch.empty(0, dtype=self.dtype)
    assert twin.two_out(self, dim, index, src, reduce, include_self=include_self, out=c) is c
    assert_bitwise_equal(b, a, "in place vs functional")
    assert_bitwise_equal(c, a, ".out vs functional")
    return a


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + INT_DTYPES)
def test_random_cases_match_stock(dtype, reduce):
    rng = random.Random(f"{dtype} {reduce}")
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for case in range(40):
        self, dim, index, src = random_case(rng, dtype, g, reduce)
        for include_self in (True, False):
            msg = (f"case {case} include_self={include_self}: self {tuple(self.shape)} dim {dim} "
                   f"index {tuple(index.shape)}")
            got = every_overload(self, dim, index, src, reduce, include_self)
            check(got, stock(self, dim, index, src, reduce, include_self), reduce, msg)


@pytest.mark.parametrize("reduce", ["sum", "prod", "amax", "amin"])
def test_bool_matches_stock_and_mean_is_stocks_error(reduce):
    g = torch.Generator().manual_seed(7)
    self, index, src = make((6, 4), torch.bool, g), torch.randint(0, 6, (20, 4), generator=g), make((20, 4), torch.bool, g)
    for include_self in (True, False):
        assert_bitwise_equal(twin.two(self, 0, index, src, reduce, include_self=include_self),
                             torch.scatter_reduce(self, 0, index, src, reduce, include_self=include_self))
    with pytest.raises(NotImplementedError, match="Bool"):
        twin.two(self, 0, index, src, "mean")


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean"])
def test_complex_goes_to_stock(reduce):
    g = torch.Generator().manual_seed(8)
    self = torch.randn(5, 3, generator=g, dtype=torch.complex64)
    index, src = torch.randint(0, 5, (8, 3), generator=g), torch.randn(8, 3, generator=g, dtype=torch.complex64)
    torch.testing.assert_close(twin.two(self, 0, index, src, reduce),
                               torch.scatter_reduce(self, 0, index, src, reduce))


def test_integer_wrapping_and_floor_mean_are_stocks():
    self = torch.tensor([100, -7, 0, 5], dtype=torch.int8)
    index = torch.tensor([0, 0, 1, 1, 1, 3] * 50)
    src = torch.tensor([100, 3, -3, 1, 2, 7] * 50, dtype=torch.int8)
    for dtype in INT_DTYPES:
        for reduce in REDUCES:
            for include_self in (True, False):
                s, v = self.to(dtype), src.to(dtype)
                assert_bitwise_equal(twin.two(s, 0, index, v, reduce, include_self=include_self),
                                     torch.scatter_reduce(s, 0, index, v, reduce, include_self=include_self),
                                     f"{dtype} {reduce} {include_self}")


def opinfo_samples():
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [op for op in op_db if op.name == "scatter_reduce"]
    assert {op.variant_test_name for op in ops} >= set(REDUCES)
    for op in ops:
        for dtype in FLOAT_DTYPES + [torch.int64, torch.uint8]:
            for sample in op.sample_inputs("cpu", dtype):
                yield dtype, sample


def test_opinfo_samples_match_stock():
    count = 0
    for dtype, sample in opinfo_samples():
        dim, index, src, reduce = sample.args
        include_self = sample.kwargs.get("include_self", True)
        got = every_overload(sample.input, dim, index, src, reduce, include_self)
        check(got, stock(sample.input, dim, index, src, reduce, include_self), reduce, f"{dtype} {sample}")
        count += 1
    assert count >= 100


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean"])
@pytest.mark.parametrize("wdtype,acc", [(torch.float32, np.float32), (torch.float64, np.float64),
                                        (torch.bfloat16, np.float32)])
def test_bits_follow_the_contract(reduce, wdtype, acc):
    g = torch.Generator().manual_seed(11)
    index = torch.randint(0, 4, (2500,), generator=g)
    src = make((2500,), wdtype, g, "prod")
    self = make((4,), wdtype, g, "prod")
    sv = src.float().numpy() if acc == np.float32 else src.numpy()
    iv = index.numpy()
    for include_self in (True, False):
        got = twin.two(self, 0, index, src, reduce, include_self=include_self)
        expected = []
        for k in range(4):
            vals = sv[iv == k]
            y0 = acc(self[k].item())
            if reduce == "prod":
                s = tree_prod(vals, acc)
                y = acc(y0 * s) if include_self else s
            else:
                s = tree_sum(vals, acc)
                y = acc(y0 + s) if include_self else acc(acc(0) + s)
                if reduce == "mean":
                    y = acc(y / acc(len(vals) + include_self))
            expected.append(y)
        want = torch.tensor(np.array(expected, dtype=acc)).to(wdtype)
        assert_bitwise_equal(got, want, f"{reduce} include_self={include_self}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_signed_zeros_follow_stock(dtype):
    # amax/amin: the earlier of tied values stays (self first); sum/mean over an excluded self start from +0.
    self = torch.tensor([0.0, -0.0, 0.0, -0.0, -0.0], dtype=dtype)
    index = torch.tensor([0, 0, 1, 1, 2, 3, 4, 4])
    src = torch.tensor([-0.0, 0.0, 0.0, -0.0, -0.0, 0.0, -0.0, -0.0], dtype=dtype)
    for reduce in REDUCES:
        for include_self in (True, False):
            assert_bitwise_equal(twin.two(self, 0, index, src, reduce, include_self=include_self),
                                 torch.scatter_reduce(self, 0, index, src, reduce, include_self=include_self),
                                 f"{reduce} include_self={include_self}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_nan_propagates_as_the_positive_quiet_nan(dtype):
    nan = float("nan")
    self = torch.tensor([5.0, nan, 1.0, 2.0], dtype=dtype)
    index = torch.tensor([0, 0, 0, 1, 2, 2])
    src = torch.tensor([1.0, -nan, 7.0, 3.0, 4.0, 0.5], dtype=dtype)
    quiet = torch.tensor(nan, dtype=dtype)
    for reduce in REDUCES:
        for include_self in (True, False):
            got = twin.two(self, 0, index, src, reduce, include_self=include_self)
            want = torch.scatter_reduce(self, 0, index, src, reduce, include_self=include_self)
            torch.testing.assert_close(got, want, equal_nan=True, msg=f"{reduce} {include_self}")
            for v in got[torch.isnan(got)]:
                assert_bitwise_equal(v, quiet, "NaN bits")


def test_empty_zero_dim_and_negative_dims():
    x = torch.randn(4, 3)
    for reduce in REDUCES:
        assert torch.equal(twin.two(x, 0, torch.empty(0, 3, dtype=torch.long), torch.randn(2, 3), reduce), x)
        assert twin.two(torch.empty(0, 3), 1, torch.empty(0, 3, dtype=torch.long), torch.empty(0, 3),
                        reduce).shape == (0, 3)
        s = torch.tensor(1.5)
        for include_self in (True, False):
            for index in (torch.tensor(0), torch.tensor([0, 0])):
                src = torch.tensor([2.0, 4.0]) if index.dim() else torch.tensor(2.0)
                check(twin.two(s, 0, index, src, reduce, include_self=include_self),
                      torch.scatter_reduce(s, -1, index, src, reduce, include_self=include_self), reduce, "0-d")
        index = torch.randint(0, 4, (5, 3))
        src = torch.randn(5, 3)
        assert_bitwise_equal(twin.two(x, -2, index, src, reduce), twin.two(x, 0, index, src, reduce), "dim -2")


def test_untouched_destinations_keep_self_bitwise():
    self = torch.tensor([float("nan"), -0.0, 3.0, 1e-40])
    for reduce in REDUCES:
        for include_self in (True, False):
            got = twin.two(self, 0, torch.tensor([2]), torch.tensor([1.0]), reduce, include_self=include_self)
            assert_bitwise_equal(got[[0, 1, 3]], self[[0, 1, 3]], f"{reduce} {include_self}")


def test_non_contiguous_self_is_written_in_place():
    base = torch.zeros(4, 6)
    view = base[:, ::2]
    index = torch.tensor([[2, 0, 2], [1, 1, 1]])
    src = torch.arange(6.0).reshape(2, 3) + 1
    got = torch.ops.detops.scatter_reduce_.two(view, 1, index, src, "sum")
    assert got is view
    assert torch.equal(base[:, ::2], torch.tensor([[2.0, 0, 4], [0, 15, 0], [0, 0, 0], [0, 0, 0]]))
    assert torch.equal(base[:, 1::2], torch.zeros(4, 3))


@pytest.mark.parametrize(
    "args,error,match",
    [
        ((torch.zeros(5, 3), 0, torch.tensor([[0, 5]]), torch.ones(1, 3), "sum"), RuntimeError,
         r"scatter_reduce_\(\): index 5 at position 1 is out of bounds for dimension 0 with size 5"),
        ((torch.zeros(5, 3), 1, torch.tensor([[-1]]), torch.ones(1, 3), "amax"), RuntimeError,
         "index -1 at position 0 is out of bounds for dimension 1 with size 3"),
        ((torch.zeros(5, 3), 0, torch.tensor([[0, 1]]), torch.ones(1, 3), "add"), RuntimeError,
         r"scatter_reduce_\(\): reduce argument must be either sum, prod, mean, amax or amin, got add"),
        ((torch.zeros(5, 3), 0, torch.tensor([[0.0]]), torch.ones(1, 3), "sum"), RuntimeError,
         "Expected dtype int32/int64 for index, but got: Float"),
        ((torch.zeros(5, 3), 0, torch.tensor([[0]]), torch.ones(1, 3).double(), "sum"), RuntimeError,
         "Expected self.dtype to be equal to src.dtype"),
        ((torch.zeros(5, 3), 0, torch.tensor([0]), torch.ones(1, 3), "sum"), RuntimeError,
         "Index tensor must have the same number of dimensions as self tensor"),
        ((torch.zeros(5, 3), 0, torch.tensor([[0, 1, 2, 0]]), torch.ones(1, 3), "sum"), RuntimeError,
         r"Expected index \[1, 4\] to be no larger than self \[5, 3\] apart from dimension 0"),
        ((torch.zeros(5, 3), 2, torch.tensor([[0]]), torch.ones(1, 3), "sum"), IndexError, "Dimension out of range"),
    ],
)
def test_bad_arguments(args, error, match):
    self = args[0].clone()
    with pytest.raises(error, match=match):
        torch.ops.detops.scatter_reduce_.two(self, *args[1:])
    assert torch.equal(self, args[0])
    out = torch.full((2,), 7.0)
    with pytest.raises(error, match=match):
        twin.two_out(*args, out=out)
    with pytest.raises(Exception):
        torch.scatter_reduce(*args)  # stock rejects them too


def test_max_and_min_are_stocks_aliases_of_amax_and_amin():
    g = torch.Generator().manual_seed(9)
    self, index, src = torch.randn(6, 2, generator=g), torch.randint(0, 6, (30, 2), generator=g), \
        torch.randn(30, 2, generator=g)
    for alias, name in (("max", "amax"), ("min", "amin")):
        for include_self in (True, False):
            want = torch.scatter_reduce(self, 0, index, src, alias, include_self=include_self)
            assert_bitwise_equal(twin.two(self, 0, index, src, alias, include_self=include_self), want, alias)
            assert_bitwise_equal(twin.two(self, 0, index, src, name, include_self=include_self), want, name)


def test_overlap_and_out_dtype():
    x = torch.zeros(4, 3)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        torch.ops.detops.scatter_reduce_.two(x, 0, torch.zeros(1, 3, dtype=torch.long), x[2:], "prod")
    with pytest.raises(RuntimeError, match="unsupported operation"):
        torch.ops.detops.scatter_reduce_.two(torch.zeros(1, 3).expand(4, 3), 0, torch.zeros(1, 3, dtype=torch.long),
                                             torch.ones(1, 3), "amax")
    with pytest.raises(RuntimeError, match="out"):
        twin.two_out(x, 0, torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3), "sum",
                     out=torch.empty(0, dtype=torch.float64))


@pytest.mark.parametrize("reduce", REDUCES)
def test_bitwise_reruns_and_thread_counts(reduce):
    g = torch.Generator().manual_seed(12)
    self = make((100, 8), torch.float32, g, reduce)
    index = torch.randint(0, 100, (40_000, 8), generator=g)
    src = make((40_000, 8), torch.float32, g, reduce)
    torch.set_num_threads(1)
    a = twin.two(self, 0, index, src, reduce, include_self=False)
    torch.set_num_threads(2)
    b, c = twin.two(self, 0, index, src, reduce, include_self=False), twin.two(self, 0, index, src, reduce,
                                                                                include_self=False)
    assert_bitwise_equal(a, b, "threads 1 vs 2")
    assert_bitwise_equal(b, c, "rerun")


# ---------------------------------------------------------------- CUDA (marker gpu)


def cuda(*values):
    return [v.cuda() if isinstance(v, torch.Tensor) else v for v in values]


@pytest.mark.gpu
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + INT_DTYPES + [torch.bool])
def test_cuda_twin_equals_cpu_twin_bitwise(dtype, reduce):
    if dtype == torch.bool and reduce == "mean":
        pytest.skip("stock has no bool mean")
    rng = random.Random(f"{dtype} {reduce} cuda")
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for case in range(30):
        self, dim, index, src = random_case(rng, dtype, g, reduce)
        for include_self in (True, False):
            want = twin.two(self, dim, index, src, reduce, include_self=include_self)
            got = twin.two(*cuda(self, dim, index, src, reduce), include_self=include_self)
            assert_bitwise_equal(got, want, f"case {case} include_self={include_self}")


@pytest.mark.gpu
@pytest.mark.parametrize("reduce", REDUCES)
def test_cuda_overrides_under_the_flag(reduce):
    g = torch.Generator().manual_seed(13)
    self = make((1000, 16), torch.float32, g, reduce)
    index = torch.randint(0, 1000, (50_000, 16), generator=g)
    src = make((50_000, 16), torch.float32, g, reduce)
    s, i, v = cuda(self, index, src)
    torch.use_deterministic_algorithms(True)
    for include_self in (True, False):
        want = twin.two(self, 0, index, src, reduce, include_self=include_self)
        got = torch.scatter_reduce(s, 0, i, v, reduce, include_self=include_self)
        assert_bitwise_equal(got, want, f"scatter_reduce under the flag include_self={include_self}")
        inplace = s.clone()
        assert inplace.scatter_reduce_(0, i, v, reduce, include_self=include_self) is inplace
        assert_bitwise_equal(inplace, want, "scatter_reduce_")
        out = torch.empty(0, device="cuda")
        torch.scatter_reduce(s, -2, i, v, reduce, include_self=include_self, out=out)
        assert_bitwise_equal(out, want, "scatter_reduce.two_out, negative dim")
        for rerun in range(20):
            assert torch.equal(torch.scatter_reduce(s, 0, i, v, reduce, include_self=include_self), got), rerun


@pytest.mark.gpu
def test_cuda_integer_prod_under_the_flag_does_not_throw():
    torch.use_deterministic_algorithms(True)
    g = torch.Generator().manual_seed(14)
    self, index, src = make((50,), torch.int32, g), torch.randint(0, 50, (5000,), generator=g), make((5000,), torch.int32, g)
    got = torch.scatter_reduce(self.cuda(), 0, index.cuda(), src.cuda(), "prod")
    assert torch.equal(got.cpu(), torch.scatter_reduce(self, 0, index, src, "prod"))
