"""index_copy (functional, in place, .out): the twin against a Python loop (the last source row in source
order wins, bit for bit, every dtype) and against stock CPU where the indices are unique, OpInfo samples,
negative dims, empty, 0-d and non-contiguous tensors, every bad argument, reruns and thread counts; and on
CUDA (marker gpu): the overrides under the flag, CUDA == CPU twin bitwise."""

import random

import pytest
import torch

import detops
from conftest import FLOAT_DTYPES, assert_bitwise_equal
from test_put import make, noncontiguous

detops_ops = torch.ops.detops
ALL_DTYPES = FLOAT_DTYPES + [torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool, torch.complex64,
                             torch.complex128]


def test_covered():
    for op in ("aten::index_copy", "aten::index_copy_", "aten::index_copy.out"):
        assert op in detops.covered_ops()


def random_case(rng, dtype, g, unique=False):
    rank = rng.randint(1, 4)
    shape = [rng.randint(1, 6) for _ in range(rank)]
    dim = rng.randrange(-rank, rank)
    dests = shape[dim]
    if unique:
        n = rng.randint(0, dests)
        index = torch.randperm(dests, generator=g)[:n]
    else:
        n = rng.choice([0, 1, 5, 40, 300])
        index = torch.zeros(n, dtype=torch.long) if rng.random() < 0.2 else torch.randint(0, dests, (n,), generator=g)
    source_shape = list(shape)
    source_shape[dim] = n
    self = make(tuple(shape), dtype, g)
    source = make(tuple(source_shape), dtype, g)
    return noncontiguous(self, rng), dim, noncontiguous(index, rng), noncontiguous(source, rng)


def reference(self, dim, index, source):
    """A Python loop over the source rows in source order: the last one written to a row stays."""
    result = self.clone()
    if self.dim() == 0:
        for _ in index.flatten().tolist():
            result.copy_(source.reshape(()))
        return result
    src = source if source.dim() else source.reshape(1)
    for i, k in enumerate(index.flatten().tolist()):
        result.select(dim, k).copy_(src.select(dim, i))
    return result


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_last_writer_wins_bitwise_in_every_overload(dtype):
    rng = random.Random(400 + ALL_DTYPES.index(dtype))
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for case in range(60):
        self, dim, index, source = random_case(rng, dtype, g)
        want = reference(self, dim, index, source)
        msg = f"case {case}: self {tuple(self.shape)} dim {dim} n {index.numel()}"
        assert_bitwise_equal(detops_ops.index_copy(self, dim, index, source), want, msg)
        inplace = self.clone()
        assert detops_ops.index_copy_(inplace, dim, index, source) is inplace
        assert_bitwise_equal(inplace, want, msg)
        out = torch.empty(0, dtype=dtype)
        assert detops_ops.index_copy.out(self, dim, index, source, out=out) is out
        assert_bitwise_equal(out, want, msg)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_unique_indices_match_stock_exactly(dtype):
    rng = random.Random(500 + ALL_DTYPES.index(dtype))
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for case in range(40):
        self, dim, index, source = random_case(rng, dtype, g, unique=True)
        assert_bitwise_equal(detops_ops.index_copy(self, dim, index, source),
                             torch.index_copy(self, dim, index, source), f"case {case}")


def test_opinfo_samples():
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [op for op in op_db if op.name == "index_copy"]
    assert ops
    count = 0
    for dtype in ALL_DTYPES:
        for sample in ops[0].sample_inputs("cpu", dtype):
            dim, index, source = sample.args
            want = reference(sample.input, dim, index, source)
            assert_bitwise_equal(detops_ops.index_copy(sample.input, dim, index, source), want, f"{dtype} {sample}")
            count += 1
    assert count >= 20


def test_zero_dim_empty_and_wide():
    s = torch.tensor(1.5)
    assert torch.equal(detops_ops.index_copy(s, 0, torch.tensor([0]), torch.tensor(2.0)), torch.tensor(2.0))
    assert torch.equal(detops_ops.index_copy(s, -1, torch.tensor(0), torch.tensor([3.0])), torch.tensor(3.0))
    assert torch.equal(detops_ops.index_copy(torch.zeros(3), 0, torch.tensor([1]), torch.tensor(4.0)),
                       torch.tensor([0.0, 4.0, 0.0]))
    x = torch.randn(4, 3)
    assert torch.equal(detops_ops.index_copy(x, 0, torch.empty(0, dtype=torch.long), torch.empty(0, 3)), x)
    assert torch.equal(detops_ops.index_copy(x, 1, torch.empty(0, dtype=torch.long), torch.empty(4, 0)), x)
    assert detops_ops.index_copy(torch.empty(0, 3), 1, torch.tensor([0, 2]), torch.empty(0, 2)).shape == (0, 3)
    g = torch.Generator().manual_seed(1)
    table, index, rows = torch.randn(1000, 256, generator=g), torch.randint(0, 1000, (5000,), generator=g), \
        torch.randn(5000, 256, generator=g)
    assert_bitwise_equal(detops_ops.index_copy(table, 0, index, rows), reference(table, 0, index, rows))


def test_non_contiguous_self_is_written_in_place():
    base = torch.zeros(4, 6)
    view = base[:, ::2]
    got = detops_ops.index_copy_(view, 1, torch.tensor([2, 0, 2]), torch.arange(12.0).reshape(4, 3))
    assert got is view
    assert torch.equal(base[:, ::2], torch.tensor([[1.0, 0, 2], [4, 0, 5], [7, 0, 8], [10, 0, 11]]))
    assert torch.equal(base[:, 1::2], torch.zeros(4, 3))


@pytest.mark.parametrize(
    "args,error,match",
    [
        ((torch.zeros(5, 3), 0, torch.tensor([0, 5]), torch.ones(2, 3)), RuntimeError,
         r"index_copy_\(\): index 5 at position 1 is out of bounds for dimension 0 with size 5"),
        ((torch.zeros(5, 3), 1, torch.tensor([-1]), torch.ones(5, 1)), RuntimeError,
         "index -1 at position 0 is out of bounds for dimension 1 with size 3"),
        ((torch.zeros(5, 3), 0, torch.tensor([[0, 1]]), torch.ones(2, 3)), IndexError,
         r"index_copy_\(\): Index should have dimension 1 or 0 \(got 2\)"),
        ((torch.zeros(5, 3), 0, torch.tensor([0, 1]), torch.tensor(1.0)), IndexError,
         "When source is scalar, index should have one element"),
        ((torch.zeros(5, 3), 0, torch.tensor([0, 1]), torch.ones(2, 3, 1)), IndexError,
         "their dimensionality must match"),
        ((torch.zeros(5, 3), 0, torch.tensor([0, 1]).int(), torch.ones(2, 3)), RuntimeError,
         "Expected a long tensor for index, but got Int"),
        ((torch.zeros(5, 3), 0, torch.tensor([0, 1]), torch.ones(2, 3).double()), RuntimeError,
         "self and source expected to have the same dtype"),
        ((torch.zeros(5, 3), 0, torch.tensor([0, 1]), torch.ones(2, 4)), RuntimeError,
         r"Source/destination tensor must have same slice shapes. Destination slice shape: \[3\] at dimension 0"),
        ((torch.zeros(5, 3), 0, torch.tensor([0, 1, 2]), torch.ones(2, 3)), IndexError,
         r"Number of indices \(3\) should be equal to source.size\(dim\) \(2\)"),
        ((torch.zeros(5, 3), 2, torch.tensor([0]), torch.ones(5, 1)), IndexError, "Dimension out of range"),
    ],
)
def test_bad_arguments(args, error, match):
    self = args[0].clone()
    with pytest.raises(error, match=match):
        detops_ops.index_copy_(self, *args[1:])
    assert torch.equal(self, args[0])
    out = torch.full((2,), 7.0)
    with pytest.raises(error, match=match):
        detops_ops.index_copy.out(args[0], *args[1:], out=out)
    with pytest.raises(Exception):
        torch.index_copy(*args)  # stock rejects them too


def test_overlap_and_out_dtype():
    x = torch.zeros(4, 3)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        detops_ops.index_copy_(x, 0, torch.tensor([0, 1]), x[2:])
    with pytest.raises(RuntimeError, match="unsupported operation"):
        detops_ops.index_copy_(torch.zeros(1, 3).expand(4, 3), 0, torch.tensor([0]), torch.ones(1, 3))
    with pytest.raises(RuntimeError, match="out"):
        detops_ops.index_copy.out(x, 0, torch.tensor([0]), torch.ones(1, 3), out=torch.empty(0, dtype=torch.float64))


def test_bitwise_reruns_and_thread_counts():
    g = torch.Generator().manual_seed(2)
    self = torch.randn(100, 64, generator=g)
    index = torch.randint(0, 100, (20_000,), generator=g)
    source = torch.randn(20_000, 64, generator=g)
    torch.set_num_threads(1)
    a = detops_ops.index_copy(self, 0, index, source)
    torch.set_num_threads(2)
    b, c = detops_ops.index_copy(self, 0, index, source), detops_ops.index_copy(self, 0, index, source)
    assert_bitwise_equal(a, b, "threads 1 vs 2")
    assert_bitwise_equal(b, c, "rerun")
    assert_bitwise_equal(a, reference(self, 0, index, source))


# ---------------------------------------------------------------- CUDA (marker gpu)


def cuda(*values):
    return [v.cuda() if isinstance(v, torch.Tensor) else v for v in values]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_cuda_twin_equals_cpu_twin_bitwise(dtype):
    rng = random.Random(600 + ALL_DTYPES.index(dtype))
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for case in range(60):
        self, dim, index, source = random_case(rng, dtype, g)
        want = detops_ops.index_copy(self, dim, index, source)
        assert_bitwise_equal(detops_ops.index_copy(*cuda(self, dim, index, source)), want, f"case {case}")


@pytest.mark.gpu
def test_cuda_overrides_under_the_flag():
    g = torch.Generator().manual_seed(3)
    self, index, source = torch.randn(1000, 64, generator=g), torch.randint(0, 1000, (50_000,), generator=g), \
        torch.randn(50_000, 64, generator=g)
    want = reference(self, 0, index, source)
    s, i, src = cuda(self, index, source)
    torch.use_deterministic_algorithms(True)
    assert_bitwise_equal(torch.index_copy(s, 0, i, src), want, "index_copy under the flag vs the loop")
    inplace = s.clone()
    assert inplace.index_copy_(0, i, src) is inplace
    assert_bitwise_equal(inplace, want, "index_copy_")
    out = torch.empty(0, device="cuda")
    torch.index_copy(s, 0, i, src, out=out)
    assert_bitwise_equal(out, want, "index_copy.out")
    assert_bitwise_equal(s.clone().index_copy_(-2, i, src), want, "negative dim")
    for rerun in range(100):
        assert torch.equal(torch.index_copy(s, 0, i, src), inplace), f"rerun {rerun}"


@pytest.mark.gpu
def test_cuda_strict_mode_and_device_mix():
    detops.set_strict(True)
    torch.use_deterministic_algorithms(True)
    self = torch.zeros(5, 3, device="cuda")
    with pytest.raises(RuntimeError, match="index 9 at position 1"):
        self.index_copy_(0, torch.tensor([0, 9], device="cuda"), torch.ones(2, 3, device="cuda"))
    assert torch.equal(self.cpu(), torch.zeros(5, 3))
    with pytest.raises(RuntimeError, match="same device"):
        detops_ops.index_copy(self, 0, torch.tensor([0]), torch.ones(1, 3, device="cuda"))
