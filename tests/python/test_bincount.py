"""bincount: the twin torch.ops.detops.bincount against stock CPU (dtypes, shapes, values, errors),
against a Python model of the order contract (bits), across reruns and thread counts (bits), and on
CUDA (marker gpu): the aten override under the deterministic flag, CUDA == CPU twin bitwise."""

import numpy as np
import pytest
import torch

import detops
from conftest import HAS_CUDA, assert_bitwise_equal
from contract_ref import tree_sum

twin = torch.ops.detops.bincount
INPUT_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
WEIGHT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool]


def rand_case(n, high, wdtype, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, high, (n,), generator=g)
    if wdtype is None:
        w = None
    elif wdtype.is_floating_point:
        w = (torch.randn(n, generator=g, dtype=torch.float64) * 3).to(wdtype)
    elif wdtype == torch.bool:
        w = torch.randint(0, 2, (n,), generator=g).bool()
    else:
        w = torch.randint(-5, 6, (n,), generator=g).to(wdtype)
    return x.to(device), (w.to(device) if w is not None else None)


def test_covered():
    assert "aten::bincount" in detops.covered_ops()
    assert str(torch.ops.detops.bincount.default._schema).replace("detops::", "aten::") == str(
        torch.ops.aten.bincount.default._schema)


@pytest.mark.parametrize("wdtype", [None] + WEIGHT_DTYPES)
@pytest.mark.parametrize("minlength", [0, 3, 50])
def test_dtype_shape_and_values_match_stock_cpu(wdtype, minlength):
    x, w = rand_case(500, 20, wdtype, seed=minlength)
    got = twin(x, w, minlength)
    ref = torch.bincount(x, w, minlength)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    if wdtype is None or not (wdtype.is_floating_point):
        assert torch.equal(got, ref)
    else:
        ref64 = torch.bincount(x, w.double(), minlength)
        rtol = 1e-5 if got.dtype == torch.float32 else 1e-12
        torch.testing.assert_close(got.double(), ref64, rtol=rtol, atol=1e-5)
        torch.testing.assert_close(got, ref, rtol=rtol, atol=1e-4)


@pytest.mark.parametrize("input_dtype", INPUT_DTYPES)
def test_input_dtypes(input_dtype):
    x, w = rand_case(300, 100, torch.float32, seed=3)
    x = x.to(input_dtype)
    assert_bitwise_equal(twin(x, w, 0), twin(x.long(), w, 0), str(input_dtype))
    torch.testing.assert_close(twin(x, w, 0), torch.bincount(x, w))


@pytest.mark.parametrize("wdtype,acc", [(torch.float32, np.float32), (torch.float64, np.float64),
                                        (torch.float16, np.float64), (torch.bfloat16, np.float64)])
def test_bits_follow_the_contract(wdtype, acc):
    # 3 bins with > 32^2 contributions each, so the tree has three levels; one bin with exactly 33.
    g = torch.Generator().manual_seed(7)
    x = torch.cat([torch.randint(0, 3, (4000,), generator=g), torch.full((33,), 5)])
    x = x[torch.randperm(x.numel(), generator=g)]
    w = torch.randn(x.numel(), generator=g, dtype=torch.float64).to(wdtype)
    got = twin(x, w)
    wv = w.double().numpy() if wdtype != torch.float32 else w.numpy()
    xv = x.numpy()
    expected = []
    for b in range(got.numel()):
        vals = wv[xv == b]
        expected.append(acc(0) + tree_sum(vals, acc) if len(vals) else acc(0))
    exp = torch.tensor(np.array(expected, dtype=acc))
    assert_bitwise_equal(got, exp, f"{wdtype}")


def test_bitwise_reruns_and_thread_counts():
    x, w = rand_case(200_000, 7, torch.float32, seed=11)
    torch.set_num_threads(1)
    a = twin(x, w, 0)
    torch.set_num_threads(2)
    b = twin(x, w, 0)
    c = twin(x, w, 0)
    assert_bitwise_equal(a, b, "threads 1 vs 2")
    assert_bitwise_equal(b, c, "rerun")
    # Source order matters: a permutation of the same data is allowed to differ, but the result stays
    # within float32 accumulation error of the float64 sum.
    torch.testing.assert_close(a.double(), torch.bincount(x, w.double()), rtol=1e-5, atol=1e-3)


def test_non_contiguous():
    x, w = rand_case(400, 30, torch.float64, seed=5)
    xs, ws = x[::2], w[1::2]
    assert not xs.is_contiguous() and not ws.is_contiguous()
    assert_bitwise_equal(twin(xs, ws, 0), twin(xs.contiguous(), ws.contiguous(), 0))
    torch.testing.assert_close(twin(xs, ws, 0), torch.bincount(xs, ws), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("wdtype", [None, torch.float32, torch.float16])
@pytest.mark.parametrize("minlength", [0, 4])
def test_empty_input(wdtype, minlength):
    x = torch.empty(0, dtype=torch.long)
    w = None if wdtype is None else torch.empty(0, dtype=wdtype)
    got, ref = twin(x, w, minlength), torch.bincount(x, w, minlength)
    assert got.dtype == ref.dtype == torch.long and torch.equal(got, ref)


def test_special_values():
    x = torch.tensor([0, 0, 1, 1, 2, 3, 3])
    w = torch.tensor([float("inf"), 1.0, float("nan"), 2.0, -0.0, float("inf"), float("-inf")])
    got, ref = twin(x, w), torch.bincount(x, w)
    torch.testing.assert_close(got, ref, equal_nan=True)
    assert not torch.signbit(got[2])  # 0 + (-0) = +0, as stock's zero-filled output


def test_large_values_and_minlength():
    x = torch.tensor([100_000, 3, 3])
    w = torch.tensor([1.5, 2.0, 0.25])
    got = twin(x, w, 200_000)
    assert got.shape == (200_000,)
    torch.testing.assert_close(got, torch.bincount(x, w, 200_000))


def test_opinfo_samples():
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [op for op in op_db if op.name == "bincount"]
    assert ops
    count = 0
    for op in ops:
        for dtype in [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]:
            for sample in op.sample_inputs("cpu", dtype):
                kwargs = dict(sample.kwargs)
                weights = kwargs.pop("weights", sample.args[0] if sample.args else None)
                minlength = kwargs.pop("minlength", 0)
                ref = torch.bincount(sample.input, weights, minlength)
                got = twin(sample.input, weights, minlength)
                assert got.dtype == ref.dtype and got.shape == ref.shape
                torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
                count += 1
    assert count > 0


@pytest.mark.parametrize(
    "args,match",
    [
        ((torch.tensor([1, -1, 2]), torch.ones(3)), "non-negative"),
        ((torch.tensor([1, -1, 2]), None), "non-negative"),
        ((torch.tensor([[1, 2]]), torch.ones(2)), "1-d"),
        ((torch.tensor([1, 2]), torch.ones(3)), "same length"),
        ((torch.tensor([1, 2]), torch.ones(2, 1)), "1-d"),
    ],
)
def test_bad_inputs(args, match):
    with pytest.raises(RuntimeError, match=match):
        twin(*args)


def test_bad_minlength_and_dtype():
    with pytest.raises(RuntimeError, match="minlength"):
        twin(torch.tensor([1]), None, -1)
    with pytest.raises(NotImplementedError, match="integral"):
        twin(torch.tensor([1.0]), None, 0)


# ---------------------------------------------------------------- CUDA (marker gpu)


@pytest.mark.gpu
@pytest.mark.parametrize("wdtype", [None] + WEIGHT_DTYPES)
def test_cuda_override_under_flag_matches_cpu_twin(wdtype):
    x, w = rand_case(100_000, 50, wdtype, seed=1)
    stock = torch.bincount(x.cuda(), None if w is None else w.cuda(), minlength=60)  # flag off: stock
    torch.use_deterministic_algorithms(True)
    got = torch.bincount(x.cuda(), None if w is None else w.cuda(), minlength=60)
    assert got.is_cuda and got.dtype == stock.dtype and got.shape == stock.shape
    assert_bitwise_equal(got, twin(x, w, 60), "CUDA vs CPU twin")
    assert_bitwise_equal(got, twin(x.cuda(), None if w is None else w.cuda(), 60), "override vs CUDA twin")
    torch.testing.assert_close(got, stock, rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
def test_cuda_reruns_bitwise():
    x, w = rand_case(1_000_000, 10, torch.float32, seed=2, device="cuda")
    torch.use_deterministic_algorithms(True)
    first = torch.bincount(x, w)
    for _ in range(1000):
        assert torch.equal(bits_cuda(torch.bincount(x, w)), bits_cuda(first))


def bits_cuda(t):
    return t.view(torch.int32)


@pytest.mark.gpu
def test_cuda_errors_and_empty():
    torch.use_deterministic_algorithms(True)
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([1, -2], device="cuda"), torch.ones(2, device="cuda"))
    got = torch.bincount(torch.empty(0, dtype=torch.long, device="cuda"), torch.empty(0, device="cuda"), minlength=3)
    assert got.dtype == torch.long and got.is_cuda and torch.equal(got.cpu(), torch.zeros(3, dtype=torch.long))


@pytest.mark.gpu
def test_cuda_modes():
    x, w = rand_case(1000, 5, torch.float32, seed=4, device="cuda")
    torch.use_deterministic_algorithms(True)
    with detops.mode("off"):
        with pytest.raises(RuntimeError, match="deterministic"):
            torch.bincount(x, w)
    torch.use_deterministic_algorithms(False)
    with detops.mode("always"):
        assert_bitwise_equal(torch.bincount(x, w), twin(x.cpu(), w.cpu(), 0))
