"""put_: the twin torch.ops.detops.put_ against a Python loop (accumulate=False: the last writer in source
order wins, bit for bit, every dtype), against stock CPU (accumulate=True: within float accumulation error;
integers exactly), against the order contract's tree (bits), negative indices, empty, 0-d and non-contiguous
tensors, every bad argument, reruns and thread counts; and on CUDA (marker gpu): the overrides of put_, put
and put.out under the flag, CUDA == CPU twin bitwise."""

import random

import numpy as np
import pytest
import torch

import detops
from conftest import FLOAT_DTYPES, assert_bitwise_equal, assert_close_to_f64
from contract_ref import tree_sum

twin = torch.ops.detops.put_
ALL_DTYPES = FLOAT_DTYPES + [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
                             torch.complex64, torch.complex128]
INT_DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def test_covered():
    assert "aten::put_" in detops.covered_ops()


def make(shape, dtype, g):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex or dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.complex128 if dtype.is_complex else torch.float64).to(dtype)
    return torch.randint(-100, 100, shape, generator=g).to(dtype)


def noncontiguous(t, rng):
    if t.dim() == 0 or t.numel() == 0 or rng.random() < 0.5:
        return t
    big = torch.empty([s * 2 for s in t.shape], dtype=t.dtype)
    view = big[tuple(slice(None, None, 2) for _ in t.shape)]
    view.copy_(t)
    return view


def random_case(rng, dtype, g):
    self_shape = rng.choice([(), (1,), (7,), (5, 4), (3, 4, 5)])
    numel = int(np.prod(self_shape)) if self_shape else 1
    n = rng.choice([0, 1, 6, 40, 300])
    index_shape = rng.choice([(n,), (1, n), (n, 1)]) if n else (0,)
    source_shape = rng.choice([(n,), index_shape]) if n else rng.choice([(0,), (0, 3)])
    if rng.random() < 0.2:
        index = torch.full(index_shape, rng.randrange(-numel, numel), dtype=torch.long)  # one hot destination
    else:
        index = torch.randint(-numel, numel, index_shape, generator=g)
    self = make(self_shape, dtype, g)
    source = make(source_shape, dtype, g)
    return noncontiguous(self, rng), noncontiguous(index, rng), noncontiguous(source, rng)


def reference_last(self, index, source):
    """accumulate=False: a Python loop over the contributions in source order."""
    flat = self.flatten().clone()
    for k, v in zip(index.flatten().tolist(), source.flatten()):
        flat[k + flat.numel() if k < 0 else k] = v
    return flat.reshape(self.shape)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_last_writer_wins_bitwise(dtype):
    rng = random.Random(100 + ALL_DTYPES.index(dtype))
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for case in range(60):
        self, index, source = random_case(rng, dtype, g)
        want = reference_last(self, index, source)
        got = self.clone()
        assert twin(got, index, source) is got
        assert_bitwise_equal(got, want, f"case {case}: self {tuple(self.shape)} index {tuple(index.shape)}")
        if index.unique().numel() == index.numel() and (index >= 0).all():
            assert torch.equal(self.clone().put_(index, source), want)  # unique indices: stock agrees


def test_nan_payloads_are_copied():
    payload = torch.tensor([0x7FC00001, 0xFFC12345, 0x7F800000], dtype=torch.int64).to(torch.int32).view(torch.float32)
    got = twin(torch.zeros(3), torch.tensor([2, 0, 1]), payload)
    assert torch.equal(got.view(torch.int32), payload[[1, 2, 0]].view(torch.int32))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_accumulate_matches_stock(dtype):
    rng = random.Random(200 + FLOAT_DTYPES.index(dtype))
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for case in range(60):
        self, index, source = random_case(rng, dtype, g)
        ref = self.double().clone().put_(index, source.double(), accumulate=True)
        got = twin(self.clone(), index, source, True)
        assert_close_to_f64(got, ref, f"case {case}")


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_accumulate_is_exact(dtype):
    g = torch.Generator().manual_seed(5)
    self = make((6, 5), dtype, g)
    index = torch.randint(-30, 30, (2000,), generator=g)
    source = make((2000,), dtype, g)
    assert torch.equal(twin(self.clone(), index, source, True), self.clone().put_(index, source, accumulate=True))


@pytest.mark.parametrize("dtype", [torch.bool, torch.complex64])
def test_accumulate_of_other_dtypes_is_stocks(dtype):
    g = torch.Generator().manual_seed(6)
    self, index, source = make((4, 3), dtype, g), torch.randint(0, 12, (30,), generator=g), make((30,), dtype, g)
    got = twin(self.clone(), index, source, True)
    torch.testing.assert_close(got, self.clone().put_(index, source, accumulate=True))


@pytest.mark.parametrize("wdtype,acc", [(torch.float32, np.float32), (torch.float64, np.float64),
                                        (torch.float16, np.float32), (torch.bfloat16, np.float32)])
def test_accumulate_bits_follow_the_contract(wdtype, acc):
    g = torch.Generator().manual_seed(8)
    index = torch.cat([torch.randint(0, 3, (3000,), generator=g), torch.full((33,), -1)])
    index = index[torch.randperm(index.numel(), generator=g)]
    source = torch.randn(index.numel(), generator=g, dtype=torch.float64).to(wdtype)
    self = torch.randn(6, generator=g, dtype=torch.float64).to(wdtype)
    got = twin(self.clone(), index, source, True)
    sv = source.float().numpy() if acc == np.float32 else source.numpy()
    iv = index.numpy() % 6
    expected = []
    for k in range(6):
        vals = sv[iv == k]
        y0 = acc(self[k].item())
        expected.append(acc(y0 + tree_sum(vals, acc)) if len(vals) else y0)
    want = torch.tensor(np.array(expected, dtype=acc)).to(wdtype)
    assert_bitwise_equal(got, want, str(wdtype))


def test_negative_indices_and_shapes():
    self = torch.arange(6.0).reshape(2, 3)
    got = twin(self.clone(), torch.tensor([[-1, 0], [-6, 5]]), torch.tensor([10.0, 11.0, 12.0, 13.0]))
    assert torch.equal(got, torch.tensor([[12.0, 1.0, 2.0], [3.0, 4.0, 13.0]]))
    s = torch.tensor(1.5)
    assert torch.equal(twin(s.clone(), torch.tensor([0, -1]), torch.tensor([2.0, 3.0])), torch.tensor(3.0))
    assert torch.equal(twin(s.clone(), torch.tensor(0), torch.tensor(2.0), True), torch.tensor(3.5))


def test_empty_inputs():
    x = torch.randn(4)
    assert torch.equal(twin(x.clone(), torch.empty(0, dtype=torch.long), torch.empty(0)), x)
    assert torch.equal(twin(x.clone(), torch.empty(0, 2, dtype=torch.long), torch.empty(0, 3), True), x)
    e = torch.empty(0, 3)
    assert twin(e, torch.empty(0, dtype=torch.long), torch.empty(0)).shape == (0, 3)


def test_non_contiguous_self_is_written_in_place():
    base = torch.zeros(4, 6)
    view = base[:, ::2]
    got = twin(view, torch.tensor([0, 5, 5, -1]), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert got is view
    assert torch.equal(base[:, ::2], torch.tensor([[1.0, 0, 0], [0, 0, 3.0], [0, 0, 0], [0, 0, 4.0]]))
    assert torch.equal(base[:, 1::2], torch.zeros(4, 3))


@pytest.mark.parametrize(
    "args,error,match",
    [
        ((torch.zeros(5), torch.tensor([0, 7]), torch.ones(2)), RuntimeError,
         r"put_\(\): index 7 at position 1 is out of bounds for a tensor of 5 elements"),
        ((torch.zeros(5), torch.tensor([0, -6]), torch.ones(2)), RuntimeError, "index -6 at position 1"),
        ((torch.zeros(5), torch.tensor([0, 1]).int(), torch.ones(2)), RuntimeError,
         r"put_\(\): Expected a long tensor for index, but got Int"),
        ((torch.zeros(5), torch.tensor([0, 1]), torch.ones(2).double()), RuntimeError,
         "self and source expected to have the same dtype"),
        ((torch.zeros(5), torch.tensor([0, 1]), torch.ones(3)), IndexError,
         "Expected source and index to have the same number of elements"),
        ((torch.zeros(0), torch.tensor([0]), torch.ones(1)), IndexError, "Tried to put elements into an empty tensor"),
    ],
)
@pytest.mark.parametrize("accumulate", [False, True])
def test_bad_arguments(args, error, match, accumulate):
    self = args[0].clone()
    with pytest.raises(error, match=match):
        twin(self, args[1], args[2], accumulate)
    assert torch.equal(self, args[0])
    with pytest.raises(Exception):
        args[0].clone().put_(args[1], args[2], accumulate=accumulate)  # stock rejects them too


def test_overlap_is_rejected_like_stock():
    x = torch.zeros(5)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        twin(x, torch.tensor([0]), x[1:2])
    with pytest.raises(RuntimeError, match="unsupported operation"):
        twin(torch.zeros(1, 3).expand(2, 3), torch.tensor([0]), torch.ones(1))


@pytest.mark.parametrize("accumulate", [False, True])
def test_bitwise_reruns_and_thread_counts(accumulate):
    g = torch.Generator().manual_seed(9)
    self = torch.randn(1000, generator=g)
    index = torch.randint(-1000, 1000, (300_000,), generator=g)
    source = torch.randn(300_000, generator=g)
    torch.set_num_threads(1)
    a = twin(self.clone(), index, source, accumulate)
    torch.set_num_threads(2)
    b, c = twin(self.clone(), index, source, accumulate), twin(self.clone(), index, source, accumulate)
    assert_bitwise_equal(a, b, "threads 1 vs 2")
    assert_bitwise_equal(b, c, "rerun")
    if not accumulate:
        assert_bitwise_equal(a, reference_last(self, index, source))


def test_opinfo_samples():
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [op for op in op_db if op.name == "put"]
    assert ops
    count = 0
    for dtype in FLOAT_DTYPES + [torch.int64, torch.bool, torch.complex64]:
        for sample in ops[0].sample_inputs("cpu", dtype):
            index, source = sample.args[0], sample.args[1]
            accumulate = sample.args[2] if len(sample.args) > 2 else sample.kwargs.get("accumulate", False)
            got = twin(sample.input.clone(), index, source, accumulate)
            if accumulate:
                want = sample.input.clone().put_(index, source, accumulate=True)
                torch.testing.assert_close(got, want, rtol=2e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-5,
                                           atol=1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-5)
            else:
                assert_bitwise_equal(got, reference_last(sample.input, index, source), f"{dtype} {sample}")
            count += 1
    assert count >= 100


# ---------------------------------------------------------------- CUDA (marker gpu)


def cuda(*tensors):
    return [t.cuda() for t in tensors]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_cuda_twin_equals_cpu_twin_bitwise(dtype):
    rng = random.Random(300 + ALL_DTYPES.index(dtype))
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for case in range(60):
        self, index, source = random_case(rng, dtype, g)
        for accumulate in (False, True):
            if accumulate and dtype in (torch.bool, torch.complex64, torch.complex128):
                continue
            want = twin(self.clone(), index, source, accumulate)
            got = twin(*cuda(self, index, source), accumulate)
            assert_bitwise_equal(got, want, f"case {case} accumulate={accumulate}")


@pytest.mark.gpu
@pytest.mark.parametrize("accumulate", [False, True])
def test_cuda_overrides_under_the_flag(accumulate):
    g = torch.Generator().manual_seed(10)
    self = torch.randn(1000, 64, generator=g)
    index = torch.randint(-64_000, 64_000, (500_000,), generator=g)
    source = torch.randn(500_000, generator=g)
    want = twin(self.clone(), index, source, accumulate)
    torch.use_deterministic_algorithms(True)
    s, i, src = cuda(self, index, source)
    inplace = s.clone()
    assert inplace.put_(i, src, accumulate=accumulate) is inplace
    assert_bitwise_equal(inplace, want, "put_ under the flag vs CPU twin")
    assert_bitwise_equal(torch.put(s, i, src, accumulate), want, "put (composite, via put_)")
    out = torch.empty(0, device="cuda")
    torch.ops.aten.put.out(s, i, src, accumulate, out=out)
    assert_bitwise_equal(out, want, "put.out (composite, via put_)")
    for rerun in range(100):
        assert torch.equal(s.clone().put_(i, src, accumulate=accumulate), inplace), f"rerun {rerun}"


@pytest.mark.gpu
def test_cuda_integer_accumulate_under_the_flag():
    torch.use_deterministic_algorithms(True)
    self = torch.randint(-5, 5, (100,), dtype=torch.int32)
    index = torch.randint(0, 100, (10_000,))
    source = torch.randint(-5, 5, (10_000,), dtype=torch.int32)
    got = torch.put(self.cuda(), index.cuda(), source.cuda(), True)
    assert torch.equal(got.cpu(), self.clone().put_(index, source, accumulate=True))


@pytest.mark.gpu
def test_cuda_strict_mode_raises_and_leaves_self_untouched():
    detops.set_strict(True)
    torch.use_deterministic_algorithms(True)
    self = torch.zeros(5, device="cuda")
    with pytest.raises(RuntimeError, match="index -9 at position 1"):
        self.put_(torch.tensor([0, -9], device="cuda"), torch.ones(2, device="cuda"))
    assert torch.equal(self.cpu(), torch.zeros(5))
    assert torch.ones(4, device="cuda").sum().item() == 4
