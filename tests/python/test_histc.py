"""histc: the twin torch.ops.detops.histc against stock CPU (float and double give stock's counts exactly:
stock CPU and stock CUDA compute the same bin for them), against a numpy model of stock CUDA's bin
arithmetic, NaN/inf, empty, 0-d and non-contiguous inputs, every bad argument, reruns and thread counts;
and on CUDA (marker gpu): the override under the flag, CUDA == CPU twin bitwise."""

import numpy as np
import pytest
import torch

import detops
from conftest import assert_bitwise_equal

twin = torch.ops.detops.histc
twin_out = torch.ops.detops.histc.out
ENGINE_DTYPES = [torch.float32, torch.float64]


def test_covered():
    for op in ("aten::histc", "aten::histc.out"):
        assert op in detops.covered_ops()


def random_case(rng, dtype):
    shape = rng.choice([(), (0,), (1,), (7,), (300,), (20, 30), (4, 5, 6)])
    x = (torch.randn(shape, dtype=torch.float64) * rng.choice([1.0, 10.0, 1e-3])).to(dtype)
    if rng.random() < 0.3 and x.dim() > 0 and x.numel() > 1:
        x = x.transpose(0, -1) if x.dim() > 1 else x[::2]
    bins = rng.choice([1, 2, 3, 10, 100, 257])
    lo_hi = rng.choice([(0, 0), (-1, 1), (-2.5, 0.5), (0, 1e-3), (-1e-3, 1e-3), (0.1, 0.7), (3, 3)])
    return x, bins, lo_hi[0], lo_hi[1]


@pytest.mark.parametrize("dtype", ENGINE_DTYPES)
def test_random_cases_match_stock_cpu_exactly(dtype):
    import random

    rng = random.Random(7 + ENGINE_DTYPES.index(dtype))
    torch.manual_seed(rng.randrange(1 << 30))
    for case in range(300):
        x, bins, lo, hi = random_case(rng, dtype)
        ref = torch.histc(x, bins, lo, hi)
        got = twin(x, bins, lo, hi)
        msg = f"case {case}: x {tuple(x.shape)} bins {bins} range ({lo}, {hi})"
        assert got.dtype == ref.dtype and got.shape == ref.shape, msg
        assert torch.equal(got, ref), msg
        out = torch.empty(0, dtype=dtype)
        assert twin_out(x, bins, lo, hi, out=out) is out
        assert torch.equal(out, ref), msg


@pytest.mark.parametrize("dtype", ENGINE_DTYPES)
def test_bins_follow_stock_cuda_arithmetic(dtype):
    # Values on and next to the bin edges: the bin is trunc((x - lo) * bins / (hi - lo)), each operation
    # rounded in the input's dtype (float's accumulate type is float), and hi itself goes in the last bin.
    npt = np.float32 if dtype == torch.float32 else np.float64
    bins, lo, hi = 7, npt(-0.3), npt(1.1)
    edges = np.linspace(np.float64(lo), np.float64(hi), bins + 1).astype(npt)
    x = np.concatenate([edges, np.nextafter(edges, npt(-np.inf)), np.nextafter(edges, npt(np.inf)),
                        np.random.default_rng(0).uniform(-0.5, 1.3, 5000).astype(npt)]).astype(npt)
    inside = x[(x >= lo) & (x <= hi)]
    q = ((inside - lo) * npt(bins)) / (hi - lo)
    assert q.dtype == npt
    b = np.minimum(np.trunc(q).astype(np.int64), bins - 1)
    want = torch.from_numpy(np.bincount(b, minlength=bins).astype(npt))
    got = twin(torch.from_numpy(x), bins, float(lo), float(hi))
    assert torch.equal(got, want)


def test_range_from_the_data_and_widening():
    x = torch.tensor([2.0, 2.0, 2.0])
    got = twin(x, 4)  # min == max == 0: the data's range, [2, 2], widened to [1, 3]
    assert torch.equal(got, torch.histc(x, 4)) and torch.equal(got, torch.tensor([0.0, 0.0, 3.0, 0.0]))
    assert torch.equal(twin(x, 4, 5, 5), torch.histc(x, 4, 5, 5))  # min == max != 0: the data's range too
    s = torch.tensor(3.0)
    assert torch.equal(twin(s, 3), torch.histc(s, 3))
    assert torch.equal(twin(torch.tensor([1.0, 5.0]), 4), torch.tensor([1.0, 0.0, 0.0, 1.0]))


def test_bounds_rounded_to_float_as_stock_cuda():
    # Distinct doubles that round to the same float: stock CUDA (and detops) compare them as floats, find
    # min == max and take the data's range; stock CPU compares doubles. Documented in ops/histc.cpp.
    x = torch.tensor([0.0, 0.5, 1.0])
    lo, hi = 1.0, 1.0 + 1e-12
    assert torch.equal(twin(x, 2, lo, hi), torch.tensor([1.0, 2.0]))
    assert torch.equal(twin(x.double(), 2, lo, hi), torch.histc(x.double(), 2, lo, hi))


def test_nan_and_inf():
    x = torch.tensor([0.5, float("nan"), float("inf"), -float("inf"), 1.0, 0.0, 2.0])
    for bins in (1, 3):
        assert torch.equal(twin(x, bins, 0, 1), torch.histc(x, bins, 0, 1))
    assert torch.equal(twin(x, 3, 0, 1), torch.tensor([1.0, 1.0, 1.0]))  # NaN, inf and 2 dropped
    with pytest.raises(RuntimeError, match=r"histc\(\): range of \[.*nan.*\] is not finite"):
        twin(x, 3)
    with pytest.raises(RuntimeError, match=r"range of \[1, inf\] is not finite"):
        twin(torch.tensor([1.0, float("inf")]), 3)


@pytest.mark.parametrize("dtype", ENGINE_DTYPES)
def test_empty_zero_dim_and_non_contiguous(dtype):
    empty = torch.empty(0, 3, dtype=dtype)
    for lo, hi in ((0, 0), (1, 2)):
        got = twin(empty, 5, lo, hi)
        assert got.dtype == dtype and torch.equal(got, torch.histc(empty, 5, lo, hi))
    x = torch.randn(40, 30, dtype=dtype)
    t = x.t()
    assert not t.is_contiguous()
    assert_bitwise_equal(twin(t, 17), twin(t.contiguous(), 17))
    assert torch.equal(twin(t, 17), torch.histc(t, 17))
    assert torch.equal(twin(torch.tensor(0.25, dtype=dtype), 4, 0, 1), torch.tensor([0, 1, 0, 0], dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_and_bfloat16_are_counted_as_float_on_the_cpu(dtype):
    # Stock CUDA rejects them (half: "HalfTensor is not supported"; bfloat16 is not dispatched); on the CPU
    # the twin counts the values converted exactly to float and rounds the counts to the input dtype.
    x = torch.randn(500).to(dtype)
    for args in ((10,), (10, -1, 1), (1000, -3, 3)):
        assert_bitwise_equal(twin(x, *args), twin(x.float(), *args).to(dtype))
    out = torch.empty(0, dtype=dtype)
    assert twin_out(x, 10, -1, 1, out=out) is out
    assert_bitwise_equal(out, twin(x.float(), 10, -1, 1).to(dtype))


def test_bfloat16_on_the_cpu_lands_in_the_right_bin():
    # Stock CPU (2.11) bins bfloat16 against bfloat16-rounded edges: 2.984375 with 1000 bins over [-3, 3]
    # lands in bin 4, and repeated calls write past the histogram (heap corruption). Bin 997 is the float one.
    x = torch.tensor([2.984375], dtype=torch.bfloat16)
    for _ in range(50):
        got = twin(x, 1000, -3, 3)
        assert got.dtype == torch.bfloat16
        assert got.nonzero().flatten().tolist() == [997] and got.sum().item() == 1


def test_integer_input_goes_to_stock():
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        twin(torch.tensor([1, 2, 3]), 3)


def test_out_takes_stock_cudas_rules():
    x = torch.randn(100)
    out = torch.full((3,), 7.0)
    assert twin_out(x, 10, -1, 1, out=out) is out
    assert out.shape == (10,) and torch.equal(out, torch.histc(x, 10, -1, 1))
    out64 = torch.empty(0, dtype=torch.float64)  # stock CUDA copies into any dtype
    twin_out(x, 10, -1, 1, out=out64)
    assert torch.equal(out64, torch.histc(x, 10, -1, 1).double())


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(bins=0), r"histc\(\): bins must be > 0, but got 0"),
        (dict(bins=-3), "bins must be > 0"),
        (dict(bins=3, min=2, max=1), r"histc\(\): max must be larger than min"),
        (dict(bins=3, min=float("nan"), max=1), "is not finite"),
        (dict(bins=3, min=0, max=float("inf")), r"range of \[0, inf\] is not finite"),
        (dict(bins=3, min=0, max=1e300), "cannot be converted to type float without overflow"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(RuntimeError, match=match):
        twin(torch.tensor([0.5, 1.5]), **kwargs)
    with pytest.raises(RuntimeError):
        torch.histc(torch.tensor([0.5, 1.5]), **kwargs)  # stock rejects them too


def test_bitwise_reruns_and_thread_counts():
    x = torch.randn(1_000_000)
    torch.set_num_threads(1)
    a = twin(x, 1000)
    torch.set_num_threads(2)
    b, c = twin(x, 1000), twin(x, 1000)
    assert_bitwise_equal(a, b, "threads 1 vs 2")
    assert_bitwise_equal(b, c, "rerun")
    assert torch.equal(a, torch.histc(x, 1000)) and int(a.sum()) == x.numel()


def test_opinfo_samples_match_stock():
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [op for op in op_db if op.name == "histc"]
    assert ops
    count = 0
    for dtype in ENGINE_DTYPES + [torch.float16, torch.bfloat16]:
        for sample in ops[0].sample_inputs("cpu", dtype):
            # Half and bfloat16: against float (stock CPU's own reduced-precision bins are not float's).
            x = sample.input.float() if dtype in (torch.float16, torch.bfloat16) else sample.input
            ref = torch.histc(x, *sample.args, **sample.kwargs).to(dtype)
            got = twin(sample.input, *sample.args, **sample.kwargs)
            assert got.dtype == ref.dtype and torch.equal(got, ref), f"{dtype} {sample}"
            count += 1
    assert count >= 100


# ---------------------------------------------------------------- CUDA (marker gpu)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ENGINE_DTYPES)
def test_cuda_twin_equals_cpu_twin_and_stock(dtype):
    import random

    rng = random.Random(70 + ENGINE_DTYPES.index(dtype))
    for case in range(200):
        x, bins, lo, hi = random_case(rng, dtype)
        want = twin(x, bins, lo, hi)
        assert_bitwise_equal(twin(x.cuda(), bins, lo, hi), want, f"case {case}")
        with detops.mode("off"):
            stock = torch.histc(x.cuda(), bins, lo, hi)  # flag off: stock's atomics, exact counts
        assert torch.equal(stock.cpu(), want), f"case {case}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ENGINE_DTYPES)
def test_cuda_override_under_the_flag(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2_000_000, generator=g, dtype=torch.float64).to(dtype)
    x[::1000] = float("nan")
    want = twin(x, 1000, -2, 2)
    torch.use_deterministic_algorithms(True)
    xc = x.cuda()
    first = torch.histc(xc, 1000, -2, 2)
    assert first.is_cuda and first.dtype == dtype
    assert_bitwise_equal(first, want, "override vs CPU twin")
    out = torch.empty(0, dtype=dtype, device="cuda")
    torch.histc(xc, 1000, -2, 2, out=out)
    assert_bitwise_equal(out, want, "histc.out vs CPU twin")
    assert_bitwise_equal(torch.histc(xc[~torch.isnan(xc)], 50), twin(x[~torch.isnan(x)], 50), "data range")
    for i in range(100):
        assert torch.equal(torch.histc(xc, 1000, -2, 2), first), f"rerun {i}"


@pytest.mark.gpu
def test_cuda_other_dtypes_behave_as_stock():
    torch.use_deterministic_algorithms(True)
    xi = torch.randint(0, 10, (1000,), device="cuda")
    assert torch.equal(torch.histc(xi, 10, 0, 9).cpu(), torch.histc(xi.cpu().double(), 10, 0, 9).long())
    with pytest.raises(RuntimeError, match="HalfTensor is not supported"):
        torch.histc(torch.ones(3, device="cuda", dtype=torch.float16), 3)
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(torch.ones(3, device="cuda"), 3, 2, 1)
    got = torch.histc(torch.empty(0, device="cuda"), 4)
    assert got.is_cuda and torch.equal(got.cpu(), torch.zeros(4))
