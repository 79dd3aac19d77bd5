"""scatter (src, value, reduce and value_reduce overloads; functional, in place, .out): the twins against a
Python loop over the index in source order (src and value: the last writer wins, bit for bit, every dtype),
against stock CPU (reduce add and multiply: within accumulation error in floating dtypes, integers and bool
exactly; complex goes to stock), the reduce overloads bit for bit against scatter_reduce's sum and prod with
self included (one engine, one tree), OpInfo samples, empty, 0-d and non-contiguous tensors, every bad
argument, reruns and thread counts; and on CUDA (marker gpu): CUDA twin == CPU twin bitwise, the overrides
under the flag."""

import itertools
import random
import warnings

import pytest
import torch

import detops
from conftest import FLOAT_DTYPES, assert_bitwise_equal, rtol_for
from test_put import noncontiguous

OVERLOADS = [f"aten::{name}.{overload}" for overload in ("src", "value", "reduce", "value_reduce")
             for name in ("scatter", "scatter_")] + [
    "aten::scatter.src_out", "aten::scatter.value_out", "aten::scatter.reduce_out", "aten::scatter.value_reduce_out"]
INT_DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + [torch.bool, torch.complex64, torch.complex128]
D = torch.ops.detops


def test_covered():
    for op in OVERLOADS:
        assert op in detops.covered_ops(), op


def make(shape, dtype, g, reduce=None):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point or dtype.is_complex:
        if reduce == "multiply":  # magnitudes near 1: long products stay in range
            mag = torch.rand(shape, generator=g, dtype=torch.float64) * 0.5 + 0.75
            return (mag * (torch.randint(0, 2, shape, generator=g) * 2 - 1)).to(dtype)
        return torch.randn(shape, generator=g, dtype=torch.complex128 if dtype.is_complex else torch.float64).to(dtype)
    return torch.randint(-100, 100, shape, generator=g).to(dtype)


def random_case(rng, dtype, g, reduce=None):
    rank = rng.randint(1, 3)
    shape = [rng.randint(1, 6) for _ in range(rank)]
    dim = rng.randrange(-rank, rank)
    index_shape = [rng.randint(0 if rng.random() < 0.05 else 1, s) for s in shape]
    index_shape[dim] = rng.choice([1, 5, 12, 40])
    src_shape = [s + rng.randint(0, 2) for s in index_shape]
    if rng.random() < 0.2:
        index = torch.zeros(index_shape, dtype=torch.long)  # one hot destination per slice
    else:
        index = torch.randint(0, shape[dim], index_shape, generator=g)
    index = index.to(rng.choice([torch.int32, torch.int64]))
    self = make(tuple(shape), dtype, g, reduce)
    src = make(tuple(src_shape), dtype, g, reduce)
    return noncontiguous(self, rng), dim, noncontiguous(index, rng), noncontiguous(src, rng)


def reference_last(self, dim, index, src):
    """src or value: a loop over the index's elements in row-major (source) order; the last writer wins."""
    out = self.clone()
    flat = out.view(1) if out.dim() == 0 else out  # 0-d tensors as 1-d ones, as stock treats them
    index = index.reshape(1) if index.dim() == 0 else index
    if isinstance(src, torch.Tensor) and src.dim() == 0:
        src = src.reshape(1)
    dim = dim % max(self.dim(), 1)
    for coords in itertools.product(*[range(s) for s in index.shape]):
        dest = list(coords)
        dest[dim] = int(index[coords])
        flat[tuple(dest)] = src[coords] if isinstance(src, torch.Tensor) else src
    return out


def every_overload(kind, self, dim, index, src, **kw):
    """The functional, in-place and .out twins of one overload; all must agree bit for bit."""
    a = getattr(D.scatter, kind)(self, dim, index, src, **kw)
    b = self.clone()
    assert getattr(D.scatter_, kind)(b, dim, index, src, **kw) is b
    c = torch.empty(0, dtype=self.dtype)
    assert getattr(D.scatter, f"{kind}_out")(self, dim, index, src, **kw, out=c) is c
    assert_bitwise_equal(b, a, f"{kind}: in place vs functional")
    assert_bitwise_equal(c, a, f"{kind}: .out vs functional")
    return a


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_last_writer_wins_bitwise(dtype):
    rng = random.Random(f"scatter {dtype}")
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for case in range(40):
        self, dim, index, src = random_case(rng, dtype, g)
        msg = f"case {case}: self {tuple(self.shape)} dim {dim} index {tuple(index.shape)}"
        assert_bitwise_equal(every_overload("src", self, dim, index, src), reference_last(self, dim, index, src), msg)
        value = make((), dtype, g).item()
        assert_bitwise_equal(every_overload("value", self, dim, index, value),
                             reference_last(self, dim, index, value), msg)
        assert_bitwise_equal(every_overload("value", self, dim, index, value),
                             torch.scatter(self, dim, index, value), msg)  # one value: stock agrees


def test_unique_destinations_match_stock_and_nan_payloads_are_copied():
    g = torch.Generator().manual_seed(3)
    self = torch.randn(6, 5, generator=g)
    index = torch.stack([torch.randperm(6, generator=g)[:4] for _ in range(5)], 1)
    src = torch.randn(4, 5, generator=g)
    assert_bitwise_equal(D.scatter.src(self, 0, index, src), torch.scatter(self, 0, index, src))
    payload = torch.tensor([0x7FC00001, 0xFFC12345, 0x7F800000], dtype=torch.int64).to(torch.int32).view(torch.float32)
    got = D.scatter.src(torch.zeros(3), 0, torch.tensor([2, 0, 1]), payload)
    assert torch.equal(got.view(torch.int32), payload[[1, 2, 0]].view(torch.int32))


def stock_reduce(self, dim, index, src, reduce):
    """Stock CPU (the deprecation warning silenced); floating dtypes in float64, rounded at the end."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if self.dtype.is_floating_point:
            s = src.double() if isinstance(src, torch.Tensor) else src
            return torch.scatter(self.double(), dim, index, s, reduce=reduce).to(self.dtype)
        return torch.scatter(self, dim, index, src, reduce=reduce)


@pytest.mark.parametrize("reduce", ["add", "multiply"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + INT_DTYPES + [torch.bool])
def test_reduce_matches_stock(dtype, reduce):
    rng = random.Random(f"scatter {dtype} {reduce}")
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for case in range(30):
        self, dim, index, src = random_case(rng, dtype, g, reduce)
        msg = f"case {case}: self {tuple(self.shape)} dim {dim} index {tuple(index.shape)}"
        value = make((), dtype, g, reduce).item()
        for kind, s in (("reduce", src), ("value_reduce", value)):
            got = every_overload(kind, self, dim, index, s, reduce=reduce)
            want = stock_reduce(self, dim, index, s, reduce)
            if dtype.is_floating_point:
                rtol = rtol_for(dtype) * (2 if reduce == "multiply" else 1)
                torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=1e-5, msg=msg)
            else:
                assert_bitwise_equal(got, want, f"{kind} {msg}")


@pytest.mark.parametrize("reduce,name", [("add", "sum"), ("multiply", "prod")])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_reduce_is_scatter_reduce_with_self_bitwise(dtype, reduce, name):
    g = torch.Generator().manual_seed(4)
    self = make((7, 3), dtype, g, reduce)
    index = torch.randint(0, 7, (3000, 3), generator=g)
    src = make((3000, 3), dtype, g, reduce)
    want = D.scatter_reduce.two(self, 0, index, src, name, include_self=True)
    assert_bitwise_equal(D.scatter.reduce(self, 0, index, src, reduce=reduce), want)


@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_complex_reduce_goes_to_stock(reduce):
    g = torch.Generator().manual_seed(8)
    self = torch.randn(5, 3, generator=g, dtype=torch.complex64)
    index, src = torch.randint(0, 5, (8, 3), generator=g), torch.randn(8, 3, generator=g, dtype=torch.complex64)
    torch.testing.assert_close(D.scatter.reduce(self, 0, index, src, reduce=reduce),
                               stock_reduce(self, 0, index, src, reduce))


def opinfo_samples():
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [op for op in op_db if op.name == "scatter"]
    assert ops
    for dtype in FLOAT_DTYPES + [torch.int64, torch.bool, torch.complex64]:
        for sample in ops[0].sample_inputs("cpu", dtype):
            yield dtype, sample


def test_opinfo_samples():
    count = 0
    for dtype, sample in opinfo_samples():
        dim, index, src = sample.args[:3]
        reduce = sample.kwargs.get("reduce")
        if reduce is None:
            kind = "src" if isinstance(src, torch.Tensor) else "value"
            got = every_overload(kind, sample.input, dim, index, src)
            assert_bitwise_equal(got, reference_last(sample.input, dim, index, src), f"{dtype} {sample}")
        else:
            kind = "reduce" if isinstance(src, torch.Tensor) else "value_reduce"
            got = every_overload(kind, sample.input, dim, index, src, reduce=reduce)
            torch.testing.assert_close(got, stock_reduce(sample.input, dim, index, src, reduce), rtol=2e-2, atol=1e-2)
        count += 1
    assert count >= 30


def test_empty_zero_dim_and_negative_dims():
    x = torch.randn(4, 3)
    empty = torch.empty(0, 3, dtype=torch.long)
    assert_bitwise_equal(D.scatter.src(x, 0, empty, torch.empty(0, 3)), x)
    assert_bitwise_equal(D.scatter.value_reduce(x, 0, empty, 2.0, reduce="add"), x)
    s = torch.tensor(1.5)
    assert torch.equal(D.scatter.src(s, 0, torch.tensor(0), torch.tensor(2.0)), torch.tensor(2.0))
    assert torch.equal(D.scatter.value_reduce(s, 0, torch.tensor([0]), 3.0, reduce="multiply"), torch.tensor(4.5))
    index = torch.tensor([[0, 2], [1, 1]])
    src = torch.arange(4.0).reshape(2, 2) + 1
    assert torch.equal(D.scatter.src(x, -1, index, src), torch.scatter(x, 1, index, src))
    assert D.scatter.src(torch.empty(0, 3), 0, empty, torch.empty(0, 3)).shape == (0, 3)


def test_non_contiguous_self_is_written_in_place():
    base = torch.zeros(4, 6)
    view = base[:, ::2]
    index = torch.tensor([[2, 0, 2], [1, 1, 1]])
    src = torch.arange(6.0).reshape(2, 3) + 1
    assert D.scatter_.src(view, 0, index, src) is view
    assert torch.equal(base[:, ::2], torch.tensor([[0, 2.0, 0], [4.0, 5.0, 6.0], [1.0, 0, 3.0], [0, 0, 0]]))
    assert torch.equal(base[:, 1::2], torch.zeros(4, 3))
    assert D.scatter_.value_reduce(view, 1, index, 10.0, reduce="add") is view
    assert torch.equal(base[1, ::2], torch.tensor([4.0, 35.0, 6.0]))


@pytest.mark.parametrize(
    "args,error,match",
    [
        ((torch.zeros(5, 3), 0, torch.tensor([[0, 5]]), torch.ones(1, 3)), RuntimeError,
         r"scatter\(\): index 5 at position 1 is out of bounds for dimension 0 with size 5"),
        ((torch.zeros(5, 3), 1, torch.tensor([[-1]]), torch.ones(1, 3)), RuntimeError,
         "index -1 at position 0 is out of bounds for dimension 1 with size 3"),
        ((torch.zeros(5, 3), 0, torch.tensor([[0.0]]), torch.ones(1, 3)), RuntimeError,
         r"scatter\(\): Expected dtype int32/int64 for index, but got: Float"),
        ((torch.zeros(5, 3), 0, torch.tensor([0]), torch.ones(1, 3)), RuntimeError,
         "Index tensor must have the same number of dimensions as self tensor"),
        ((torch.zeros(5, 3), 0, torch.tensor([[0, 1, 2, 0]]), torch.ones(1, 3)), RuntimeError,
         r"Expected index \[1, 4\] to be no larger than self \[5, 3\] apart from dimension 0"),
        ((torch.zeros(5, 3), 2, torch.tensor([[0]]), torch.ones(1, 3)), IndexError, "Dimension out of range"),
    ],
)
@pytest.mark.parametrize("kind", ["src", "value", "reduce", "value_reduce"])
def test_bad_arguments(args, error, match, kind):
    self, dim, index, src = args
    src = src if kind in ("src", "reduce") else 2.0
    kw = {"reduce": "add"} if "reduce" in kind else {}
    x = self.clone()
    with pytest.raises(error, match=match):
        getattr(D.scatter_, kind)(x, dim, index, src, **kw)
    assert torch.equal(x, self)
    out = torch.full((2,), 7.0)
    with pytest.raises(error, match=match):
        getattr(D.scatter, f"{kind}_out")(self, dim, index, src, **kw, out=out)
    with pytest.raises(Exception):
        torch.scatter(self, dim, index, src, **kw)  # stock rejects them too


def test_bad_reduce_dtype_and_overlap():
    x = torch.zeros(4, 3)
    index = torch.zeros(1, 3, dtype=torch.long)
    for kind, src in (("reduce", torch.ones(1, 3)), ("value_reduce", 1.0)):
        with pytest.raises(RuntimeError, match="reduce argument must be either add or multiply"):
            getattr(D.scatter_, kind)(x, 0, index, src, reduce="mean")
    with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
        D.scatter_.src(x, 0, index, torch.ones(1, 3).double())
    with pytest.raises(RuntimeError, match="unsupported operation"):
        D.scatter_.src(x, 0, index, x[2:])
    with pytest.raises(RuntimeError, match="unsupported operation"):
        D.scatter_.value(torch.zeros(1, 3).expand(4, 3), 0, index, 1.0)
    with pytest.raises(RuntimeError, match="out"):
        D.scatter.src_out(x, 0, index, torch.ones(1, 3), out=torch.empty(0, dtype=torch.float64))


@pytest.mark.parametrize("kind", ["value", "value_reduce"])
def test_a_value_the_dtype_cannot_hold_raises_as_stock(kind):
    # Stock's kernels convert the value with Scalar::to<scalar_t>(), which raises on overflow; an empty index
    # converts nothing.
    x = torch.zeros(3, dtype=torch.half)
    kwargs = {"reduce": "add"} if kind == "value_reduce" else {}
    for op in (getattr(torch.ops.aten.scatter, kind), getattr(D.scatter, kind)):
        with pytest.raises(RuntimeError, match="cannot be converted to type c10::Half without overflow"):
            op(x, 0, torch.tensor([0, 1]), 1e6, **kwargs)
        assert torch.equal(op(x, 0, torch.tensor([], dtype=torch.long), 1e6, **kwargs), x)
    assert torch.equal(D.scatter.value_reduce(x, 0, torch.tensor([0, 0]), 1e4, reduce="add"),
                       torch.tensor([2e4, 0, 0], dtype=torch.half))


@pytest.mark.parametrize("kind", ["src", "reduce"])
def test_bitwise_reruns_and_thread_counts(kind):
    g = torch.Generator().manual_seed(12)
    self = torch.randn(100, 8, generator=g)
    index = torch.randint(0, 100, (40_000, 8), generator=g)
    src = torch.randn(40_000, 8, generator=g)
    kw = {"reduce": "add"} if kind == "reduce" else {}
    run = getattr(D.scatter, kind)
    torch.set_num_threads(1)
    a = run(self, 0, index, src, **kw)
    torch.set_num_threads(2)
    b, c = run(self, 0, index, src, **kw), run(self, 0, index, src, **kw)
    assert_bitwise_equal(a, b, "threads 1 vs 2")
    assert_bitwise_equal(b, c, "rerun")
    if kind == "src":  # the last writer of each destination: its last occurrence in source order
        last = torch.full((100, 8), -1, dtype=torch.long)
        order = torch.arange(40_000).unsqueeze(1).expand(40_000, 8)
        last.scatter_reduce_(0, index, order, "amax")
        want = torch.where(last >= 0, src.gather(0, last.clamp(min=0)), self)
        assert_bitwise_equal(a, want, "last writer")


# ---------------------------------------------------------------- CUDA (marker gpu)


def cuda(*values):
    return [v.cuda() if isinstance(v, torch.Tensor) else v for v in values]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_cuda_twin_equals_cpu_twin_bitwise(dtype):
    rng = random.Random(f"scatter {dtype} cuda")
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for case in range(30):
        kinds = [("src", {}), ("value", {})]
        if not dtype.is_complex:
            kinds += [("reduce", {"reduce": "add"}), ("reduce", {"reduce": "multiply"}),
                      ("value_reduce", {"reduce": "multiply"})]
        for kind, kw in kinds:
            self, dim, index, src = random_case(rng, dtype, g, kw.get("reduce"))
            s = src if kind in ("src", "reduce") else make((), dtype, g, kw.get("reduce")).item()
            want = getattr(D.scatter, kind)(self, dim, index, s, **kw)
            got = getattr(D.scatter, kind)(*cuda(self, dim, index, s), **kw)
            assert_bitwise_equal(got, want, f"case {case} {kind} {kw}")


@pytest.mark.gpu
def test_cuda_overrides_under_the_flag():
    g = torch.Generator().manual_seed(10)
    self = torch.randn(1000, 64, generator=g)
    index = torch.randint(0, 1000, (20_000, 64), generator=g)
    src = torch.randn(20_000, 64, generator=g)
    torch.use_deterministic_algorithms(True)
    s, i, v = cuda(self, index, src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kw in ({}, {"reduce": "add"}, {"reduce": "multiply"}):
            kind = "reduce" if kw else "src"
            want = getattr(D.scatter, kind)(self, 0, index, src, **kw)
            got = s.clone().scatter_(0, i, v, **kw)
            assert_bitwise_equal(got, want, f"scatter_ {kw} under the flag vs CPU twin")
            assert_bitwise_equal(torch.scatter(s, 0, i, v, **kw), want, f"scatter {kw}")
            for rerun in range(20):
                assert torch.equal(s.clone().scatter_(0, i, v, **kw), got), f"rerun {rerun}"
            vwant = getattr(D.scatter, "value_reduce" if kw else "value")(self, 0, index, 1.5, **kw)
            assert_bitwise_equal(s.clone().scatter_(0, i, 1.5, **kw), vwant, f"value {kw}")
