"""index_reduce (functional, in place, .out): the twin against stock CPU over random cases (prod, mean, amax, amin,
include_self both ways, duplicate and hot indices, every dtype: floating within accumulation error, amax/amin and
integers exactly), OpInfo samples, the contract's tree bit for bit (prod, mean), NaN and signed zeros, empty, 0-d
and non-contiguous tensors, negative dims, every bad argument, reruns and thread counts; and on CUDA (marker gpu):
CUDA twin == CPU twin bitwise, the overrides under the flag (stock throws for every reduction)."""

import random

import numpy as np
import pytest
import torch

import detops
from conftest import FLOAT_DTYPES, assert_bitwise_equal
from contract_ref import tree_prod, tree_sum
from test_put import noncontiguous
from test_scatter_reduce import INT_DTYPES, check, make

twin = torch.ops.detops.index_reduce
REDUCES = ["prod", "mean", "amax", "amin"]
OVERLOADS = ("aten::index_reduce", "aten::index_reduce_", "aten::index_reduce.out")


def test_covered():
    for op in OVERLOADS:
        assert op in detops.covered_ops()


def random_case(rng, dtype, g, reduce):
    rank = rng.randint(1, 4)
    shape = [rng.randint(1, 6) for _ in range(rank)]
    dim = rng.randrange(-rank, rank)
    n = rng.choice([0, 1, 5, 40, 300])
    if rng.random() < 0.2:
        index = torch.zeros(n, dtype=torch.long)  # one hot destination
    else:
        index = torch.randint(0, shape[dim], (n,), generator=g)
    index = index.to(rng.choice([torch.int32, torch.int64]))
    source_shape = list(shape)
    source_shape[dim] = n
    self = make(tuple(shape), dtype, g, reduce)
    source = make(tuple(source_shape), dtype, g, reduce)
    return noncontiguous(self, rng), dim, noncontiguous(index, rng), noncontiguous(source, rng)


def stock(self, dim, index, source, reduce, include_self):
    """Stock CPU; floating dtypes in float64, rounded to the dtype at the end."""
    if self.dtype.is_floating_point and reduce not in ("amax", "amin"):
        ref = self.double().index_reduce(dim, index, source.double(), reduce, include_self=include_self)
        return ref.to(self.dtype)
    return self.index_reduce(dim, index, source, reduce, include_self=include_self)


def every_overload(self, dim, index, source, reduce, include_self):
    """The functional, in-place and .out twins on the same arguments; all must agree bit for bit."""
    a = twin(self, dim, index, source, reduce, include_self=include_self)
    b = self.clone()
    assert torch.ops.detops.index_reduce_(b, dim, index, source, reduce, include_self=include_self) is b
    c = torch.empty(0, dtype=self.dtype)
    assert twin.out(self, dim, index, source, reduce, include_self=include_self, out=c) is c
    assert_bitwise_equal(b, a, "in place vs functional")
    assert_bitwise_equal(c, a, ".out vs functional")
    return a


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + INT_DTYPES)
def test_random_cases_match_stock(dtype, reduce):
    rng = random.Random(f"{dtype} {reduce} index")
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for case in range(40):
        self, dim, index, source = random_case(rng, dtype, g, reduce)
        for include_self in (True, False):
            msg = f"case {case} include_self={include_self}: self {tuple(self.shape)} dim {dim} n {index.numel()}"
            got = every_overload(self, dim, index, source, reduce, include_self)
            check(got, stock(self, dim, index, source, reduce, include_self), reduce, msg)


def test_integer_wrapping_and_floor_mean_are_stocks():
    self = torch.tensor([[100], [-7], [0], [5]], dtype=torch.int8).expand(4, 3).contiguous()
    index = torch.tensor([0, 0, 1, 1, 1, 3] * 50)
    source = torch.tensor([100, 3, -3, 1, 2, 7] * 50, dtype=torch.int8)[:, None].expand(300, 3).contiguous()
    for dtype in INT_DTYPES:
        for reduce in REDUCES:
            for include_self in (True, False):
                s, v = self.to(dtype), source.to(dtype)
                assert_bitwise_equal(twin(s, 0, index, v, reduce, include_self=include_self),
                                     s.index_reduce(0, index, v, reduce, include_self=include_self),
                                     f"{dtype} {reduce} {include_self}")


@pytest.mark.parametrize("dtype", [torch.bool, torch.complex64])
def test_dtypes_stock_rejects_get_stocks_error(dtype):
    self, source = torch.ones(3, dtype=dtype), torch.ones(2, dtype=dtype)
    with pytest.raises(NotImplementedError):
        twin(self, 0, torch.tensor([0, 0]), source, "prod", include_self=False)


def test_opinfo_samples_match_stock():
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [op for op in op_db if op.name == "index_reduce"]
    assert {op.variant_test_name for op in ops} >= set(REDUCES)
    count = 0
    for op in ops:
        for dtype in FLOAT_DTYPES + [torch.int64, torch.uint8]:
            for sample in op.sample_inputs("cpu", dtype):
                dim, index, source, reduce = sample.args
                include_self = sample.kwargs.get("include_self", True)
                got = every_overload(sample.input, dim, index, source, reduce, include_self)
                check(got, stock(sample.input, dim, index, source, reduce, include_self), reduce, f"{dtype} {sample}")
                count += 1
    assert count >= 50


@pytest.mark.parametrize("reduce", ["prod", "mean"])
@pytest.mark.parametrize("wdtype,acc", [(torch.float32, np.float32), (torch.float64, np.float64),
                                        (torch.float16, np.float32)])
def test_bits_follow_the_contract(reduce, wdtype, acc):
    g = torch.Generator().manual_seed(21)
    index = torch.randint(0, 4, (2500,), generator=g)
    source = make((2500, 2), wdtype, g, "prod")
    self = make((4, 2), wdtype, g, "prod")
    sv = source.float().numpy() if acc == np.float32 else source.numpy()
    iv = index.numpy()
    for include_self in (True, False):
        got = twin(self, 0, index, source, reduce, include_self=include_self)
        expected = np.zeros((4, 2), dtype=acc)
        for k in range(4):
            for c in range(2):
                vals = sv[iv == k, c]
                y0 = acc(self[k, c].item())
                if reduce == "prod":
                    s = tree_prod(vals, acc)
                    y = acc(y0 * s) if include_self else s
                else:
                    s = tree_sum(vals, acc)
                    y = acc(y0 + s) if include_self else acc(acc(0) + s)
                    y = acc(y / acc(len(vals) + include_self))
                expected[k, c] = y
        assert_bitwise_equal(got, torch.tensor(expected).to(wdtype), f"{reduce} include_self={include_self}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_signed_zeros_follow_stocks_serial_loop(dtype):
    # amax/amin: the earlier of tied values stays (self first), as in stock's loop over a 1-d self; mean over
    # an excluded self starts from +0. Stock's TensorIterator path for wider rows (maximum/minimum, vectorized
    # once a row fills a vector) keeps the later one instead; detops keeps the earlier one at every width.
    self = torch.tensor([0.0, -0.0, 0.0, -0.0, -0.0], dtype=dtype)
    index = torch.tensor([0, 0, 1, 1, 2, 3, 4, 4])
    source = torch.tensor([-0.0, 0.0, 0.0, -0.0, -0.0, 0.0, -0.0, -0.0], dtype=dtype)
    for reduce in REDUCES:
        for include_self in (True, False):
            want = self.index_reduce(0, index, source, reduce, include_self=include_self)
            msg = f"{reduce} include_self={include_self}"
            assert_bitwise_equal(twin(self, 0, index, source, reduce, include_self=include_self), want, msg)
            wide = twin(self[:, None].expand(5, 64).contiguous(), 0, index, source[:, None].expand(8, 64).contiguous(),
                        reduce, include_self=include_self)
            assert_bitwise_equal(wide, want[:, None].expand(5, 64), f"64 wide: {msg}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_nan_propagates_as_the_positive_quiet_nan(dtype):
    nan = float("nan")
    self = torch.tensor([5.0, nan, 1.0, 2.0], dtype=dtype)
    index = torch.tensor([0, 0, 0, 1, 2, 2])
    source = torch.tensor([1.0, -nan, 7.0, 3.0, 4.0, 0.5], dtype=dtype)
    quiet = torch.tensor(nan, dtype=dtype)
    for reduce in REDUCES:
        for include_self in (True, False):
            got = twin(self, 0, index, source, reduce, include_self=include_self)
            want = self.index_reduce(0, index, source, reduce, include_self=include_self)
            torch.testing.assert_close(got, want, equal_nan=True, msg=f"{reduce} {include_self}")
            for v in got[torch.isnan(got)]:
                assert_bitwise_equal(v, quiet, "NaN bits")


def test_empty_zero_dim_and_negative_dims():
    x = torch.randn(4, 3)
    for reduce in REDUCES:
        assert torch.equal(twin(x, 0, torch.empty(0, dtype=torch.long), torch.empty(0, 3), reduce), x)
        assert torch.equal(twin(x, 1, torch.empty(0, dtype=torch.long), torch.empty(4, 0), reduce), x)
        assert twin(torch.empty(0, 3), 1, torch.tensor([0, 2]), torch.empty(0, 2), reduce).shape == (0, 3)
        s = torch.tensor(1.5)
        for include_self in (True, False):
            for index in (torch.tensor([0]), torch.tensor(0)):
                check(twin(s, 0, index, torch.tensor(2.0), reduce, include_self=include_self),
                      s.index_reduce(-1, index, torch.tensor(2.0), reduce, include_self=include_self), reduce, "0-d")
        index = torch.randint(0, 3, (5,))
        source = torch.randn(4, 5)
        assert_bitwise_equal(twin(x, -1, index, source, reduce), twin(x, 1, index, source, reduce), "dim -1")


def test_untouched_rows_keep_self_bitwise():
    self = torch.tensor([[float("nan")], [-0.0], [3.0], [1e-40]])
    for reduce in REDUCES:
        for include_self in (True, False):
            got = twin(self, 0, torch.tensor([2]), torch.tensor([[1.0]]), reduce, include_self=include_self)
            assert_bitwise_equal(got[[0, 1, 3]], self[[0, 1, 3]], f"{reduce} {include_self}")


def test_non_contiguous_self_is_written_in_place():
    base = torch.ones(4, 6)
    view = base[:, ::2]
    got = torch.ops.detops.index_reduce_(view, 1, torch.tensor([2, 0, 2]), torch.arange(12.0).reshape(4, 3) + 1,
                                         "prod")
    assert got is view
    assert torch.equal(base[:, ::2], torch.tensor([[2.0, 1, 3], [5, 1, 24], [8, 1, 63], [11, 1, 120]]))
    assert torch.equal(base[:, 1::2], torch.ones(4, 3))


@pytest.mark.parametrize(
    "args,error,match",
    [
        ((torch.zeros(5, 3), 0, torch.tensor([0, 5]), torch.ones(2, 3), "prod"), RuntimeError,
         r"index_reduce_\(\): index 5 at position 1 is out of bounds for dimension 0 with size 5"),
        ((torch.zeros(5, 3), 1, torch.tensor([-1]), torch.ones(5, 1), "amax"), RuntimeError,
         "index -1 at position 0 is out of bounds for dimension 1 with size 3"),
        ((torch.zeros(5, 3), 0, torch.tensor([0, 1]), torch.ones(2, 3), "sum"), RuntimeError,
         r"index_reduce_\(\): Expected reduce to be one of prod, mean, amax or amin but got sum."),
        ((torch.zeros(5, 3), 0, torch.tensor([[0, 1]]), torch.ones(2, 3), "prod"), IndexError,
         r"index_reduce_\(\): Index is supposed to be a vector, but got dim: 2"),
        ((torch.zeros(5, 3), 0, torch.tensor([0.0, 1.0]), torch.ones(2, 3), "prod"), RuntimeError,
         "Expected dtype int32/int64 for index but got: Float"),
        ((torch.zeros(5, 3), 0, torch.tensor([0, 1]), torch.ones(2, 3).double(), "mean"), RuntimeError,
         r"self \(Float\) and source \(Double\) must have the same scalar type"),
        ((torch.zeros(5, 3), 0, torch.tensor([0, 1, 2]), torch.ones(2, 3), "amin"), RuntimeError,
         r"Number of indices \(3\) should be equal to source.size\(dim\): \(2\), for dim: 0"),
        ((torch.zeros(5, 3), 0, torch.tensor([0, 1]), torch.ones(2, 4), "prod"), RuntimeError,
         "source tensor shape must match self tensor shape"),
        ((torch.zeros(5, 3), 2, torch.tensor([0]), torch.ones(5, 1), "prod"), IndexError, "Dimension out of range"),
    ],
)
def test_bad_arguments(args, error, match):
    self = args[0].clone()
    with pytest.raises(error, match=match):
        torch.ops.detops.index_reduce_(self, *args[1:])
    assert torch.equal(self, args[0])
    out = torch.full((2,), 7.0)
    with pytest.raises(error, match=match):
        twin.out(*args, out=out)
    with pytest.raises(Exception):
        args[0].clone().index_reduce_(*args[1:])  # stock rejects them too


def test_overlap_and_out_dtype():
    x = torch.zeros(4, 3)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        torch.ops.detops.index_reduce_(x, 0, torch.tensor([0, 1]), x[2:], "prod")
    with pytest.raises(RuntimeError, match="unsupported operation"):
        torch.ops.detops.index_reduce_(torch.zeros(1, 3).expand(4, 3), 0, torch.tensor([0]), torch.ones(1, 3), "amax")
    with pytest.raises(RuntimeError, match="out"):
        twin.out(x, 0, torch.tensor([0]), torch.ones(1, 3), "mean", out=torch.empty(0, dtype=torch.float64))


@pytest.mark.parametrize("reduce", REDUCES)
def test_bitwise_reruns_and_thread_counts(reduce):
    g = torch.Generator().manual_seed(22)
    self = make((100, 64), torch.float32, g, reduce)
    index = torch.randint(0, 100, (20_000,), generator=g)
    source = make((20_000, 64), torch.float32, g, reduce)
    torch.set_num_threads(1)
    a = twin(self, 0, index, source, reduce, include_self=False)
    torch.set_num_threads(2)
    b, c = twin(self, 0, index, source, reduce, include_self=False), twin(self, 0, index, source, reduce,
                                                                           include_self=False)
    assert_bitwise_equal(a, b, "threads 1 vs 2")
    assert_bitwise_equal(b, c, "rerun")


# ---------------------------------------------------------------- CUDA (marker gpu)


def cuda(*values):
    return [v.cuda() if isinstance(v, torch.Tensor) else v for v in values]


@pytest.mark.gpu
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + INT_DTYPES)
def test_cuda_twin_equals_cpu_twin_bitwise(dtype, reduce):
    rng = random.Random(f"{dtype} {reduce} index cuda")
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for case in range(30):
        self, dim, index, source = random_case(rng, dtype, g, reduce)
        for include_self in (True, False):
            want = twin(self, dim, index, source, reduce, include_self=include_self)
            got = twin(*cuda(self, dim, index, source, reduce), include_self=include_self)
            assert_bitwise_equal(got, want, f"case {case} include_self={include_self}")


@pytest.mark.gpu
@pytest.mark.parametrize("reduce", REDUCES)
def test_cuda_overrides_under_the_flag(reduce):
    g = torch.Generator().manual_seed(23)
    self = make((1000, 64), torch.float32, g, reduce)
    index = torch.randint(0, 1000, (50_000,), generator=g)
    source = make((50_000, 64), torch.float32, g, reduce)
    s, i, v = cuda(self, index, source)
    torch.use_deterministic_algorithms(True)
    for include_self in (True, False):
        want = twin(self, 0, index, source, reduce, include_self=include_self)
        got = torch.index_reduce(s, 0, i, v, reduce, include_self=include_self)
        assert_bitwise_equal(got, want, f"index_reduce under the flag include_self={include_self}")
        inplace = s.clone()
        assert inplace.index_reduce_(0, i, v, reduce, include_self=include_self) is inplace
        assert_bitwise_equal(inplace, want, "index_reduce_")
        out = torch.empty(0, device="cuda")
        torch.index_reduce(s, -2, i, v, reduce, include_self=include_self, out=out)
        assert_bitwise_equal(out, want, "index_reduce.out, negative dim")
        for rerun in range(20):
            assert torch.equal(torch.index_reduce(s, 0, i, v, reduce, include_self=include_self), got), rerun


@pytest.mark.gpu
def test_cuda_integer_index_reduce_under_the_flag_does_not_throw():
    torch.use_deterministic_algorithms(True)
    g = torch.Generator().manual_seed(24)
    self, index, source = make((50, 3), torch.int32, g), torch.randint(0, 50, (5000,), generator=g), \
        make((5000, 3), torch.int32, g)
    for reduce in REDUCES:
        got = torch.index_reduce(self.cuda(), 0, index.cuda(), source.cuda(), reduce)
        assert torch.equal(got.cpu(), self.index_reduce(0, index, source, reduce)), reduce
