"""nll_loss2d_forward: the twins torch.ops.detops.nll_loss2d_forward(.output) against stock CPU and a float64
reference (random cases, every dtype and reduction, weights, ignore_index, empty and non-contiguous inputs,
OpInfo and ModuleInfo samples, F.cross_entropy with label smoothing through the twin), against a Python model
of the order contract (bits), across reruns and thread counts (bits), bad inputs; and on CUDA (marker gpu):
CUDA twin == CPU twin bitwise, F.cross_entropy under the deterministic flag, a segmentation training run
identical in two processes."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import detops
from conftest import FLOAT_DTYPES, assert_bitwise_equal, assert_close_to_f64
from contract_ref import tree_sum

twin = torch.ops.detops.nll_loss2d_forward
stock = torch.ops.aten.nll_loss2d_forward
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
# Stock CPU accumulates half and bfloat16 in their own dtype (a cascade of partial sums), detops in float.
STOCK_RTOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def make(n, c, h, w, dtype=torch.float32, seed=0, weighted=True, ignore_index=-100, ignore_frac=0.1,
         log_probs=True):
    """input [n, c, h, w] (log-probabilities, or randn), target [n, h, w] with about ignore_frac of the pixels
    set to ignore_index, class weights in [0.5, 1.5) or None."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g, dtype=torch.float64)
    x = (x.log_softmax(1) if log_probs else x).to(dtype)
    t = torch.randint(0, max(c, 1), (n, h, w), generator=g)
    if ignore_frac:
        t = t.masked_fill(torch.rand(n, h, w, generator=g) < ignore_frac, ignore_index)
    wt = (torch.rand(c, generator=g, dtype=torch.float64) + 0.5).to(dtype) if weighted else None
    return x, t, wt


def f64(w):
    return None if w is None else w.double()


def test_covered():
    covered = detops.covered_ops()
    for overload in ("default", "output"):
        key = "aten::nll_loss2d_forward" + ("" if overload == "default" else "." + overload)
        assert key in covered
        ours = getattr(twin, overload)._schema
        theirs = getattr(stock, overload)._schema
        assert str(ours).replace("detops::", "aten::") == str(theirs)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("reduction", list(REDUCTIONS), ids=str)
@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("ignore_index", [-100, 1, 255])
def test_matches_stock_cpu_and_float64(dtype, reduction, weighted, ignore_index):
    x, t, w = make(3, 5, 9, 11, dtype, seed=ignore_index + 7 * weighted, weighted=weighted,
                   ignore_index=ignore_index)
    r = REDUCTIONS[reduction]
    out, tw = twin(x, t, w, r, ignore_index)
    ref_out, ref_tw = stock(x, t, w, r, ignore_index)
    ref64_out, ref64_tw = stock(x.double(), t, f64(w), r, ignore_index)
    assert out.dtype == ref_out.dtype == dtype and out.shape == ref_out.shape
    assert tw.dtype == ref_tw.dtype == dtype and tw.shape == ref_tw.shape == ()
    assert out.is_contiguous()
    if reduction == "none":
        # One rounded product per pixel, as stock: the same bits.
        assert_bitwise_equal(out, ref_out, "none")
        assert tw.item() == 0
    else:
        assert_close_to_f64(out, ref64_out, "output")
        assert_close_to_f64(tw, ref64_tw, "total_weight")
        rtol = STOCK_RTOL[dtype]
        torch.testing.assert_close(out, ref_out, rtol=rtol, atol=rtol)
        torch.testing.assert_close(tw, ref_tw, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("reduction", list(REDUCTIONS), ids=str)
def test_output_overload(dtype, reduction):
    x, t, w = make(2, 4, 6, 7, dtype, seed=3)
    r = REDUCTIONS[reduction]
    want_out, want_tw = twin(x, t, w, r, -100)
    output, total_weight = torch.empty(5, dtype=dtype), torch.empty(0, dtype=dtype)
    got_out, got_tw = twin.output(x, t, w, r, -100, output=output, total_weight=total_weight)
    assert got_out.data_ptr() == output.data_ptr() and got_tw.data_ptr() == total_weight.data_ptr()
    assert_bitwise_equal(output, want_out, "output")
    assert_bitwise_equal(total_weight, want_tw, "total_weight")
    # Stock's .output resizes the same way.
    s_out, s_tw = torch.empty(5, dtype=dtype), torch.empty(0, dtype=dtype)
    stock.output(x, t, w, r, -100, output=s_out, total_weight=s_tw)
    assert s_out.shape == output.shape and s_tw.shape == total_weight.shape


def contract_model(x, t, w, reduction, ignore_index):
    """(output, total_weight) by the contract: contributions -(x * w[t]) and w[t] of the non-ignored pixels in
    row-major (n, h, w) order, each summed by the tree in the accumulate type, 0 + S, the mean divided in the
    accumulate type, each rounded once to x's dtype."""
    acc, acc_dtype = (np.float64, torch.float64) if x.dtype == torch.float64 else (np.float32, torch.float32)
    xa = x.to(acc_dtype).numpy()
    wa = w.to(acc_dtype).numpy() if w is not None else np.ones(x.shape[1], dtype=acc)
    losses, weights = [], []
    for (n, h, ww), cls in np.ndenumerate(t.numpy()):
        if cls == ignore_index:
            continue
        losses.append(acc(-acc(xa[n, cls, h, ww] * wa[cls])))
        weights.append(acc(wa[cls]))
    loss = acc(acc(0) + tree_sum(losses, acc)) if losses else acc(0)
    weight = acc(acc(0) + tree_sum(weights, acc)) if weights else acc(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = acc(loss / weight) if reduction == "mean" else loss
    return torch.tensor(out).to(x.dtype), torch.tensor(weight).to(x.dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("shape", [(2, 3, 40, 41), (1, 2, 3, 11)], ids=["three_levels", "33_pixels"])
def test_bits_follow_the_contract(dtype, reduction, shape):
    # 3280 pixels (about 2950 counted: a tree of three levels); 33 pixels with none ignored: two blocks.
    frac = 0.1 if shape[2] > 3 else 0.0
    x, t, w = make(*shape, dtype, seed=11, ignore_frac=frac, log_probs=False)
    got_out, got_tw = twin(x, t, w, REDUCTIONS[reduction], -100)
    want_out, want_tw = contract_model(x, t, w, reduction, -100)
    assert_bitwise_equal(got_out, want_out, "output")
    assert_bitwise_equal(got_tw, want_tw, "total_weight")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_every_pixel_ignored_and_empty_inputs(dtype):
    x, t, w = make(2, 3, 4, 5, dtype)
    t = torch.full_like(t, -100)
    out, tw = twin(x, t, w, 1, -100)
    assert torch.isnan(out) and tw.item() == 0
    assert_bitwise_equal(out, torch.tensor(float("nan"), dtype=dtype), "positive quiet NaN")
    out, tw = twin(x, t, w, 2, -100)
    assert out.item() == 0 and tw.item() == 0
    for shape in [(0, 3, 4, 5), (2, 3, 0, 5), (2, 3, 4, 0)]:
        x, t, w = make(*shape, dtype)
        for r in REDUCTIONS.values():
            got, ref = twin(x, t, w, r, -100), stock(x, t, w, r, -100)
            for a, b in zip(got, ref):
                assert a.shape == b.shape and a.dtype == b.dtype
                torch.testing.assert_close(a, b, equal_nan=True)
    # No classes: every pixel must be ignored.
    x = torch.empty(2, 0, 3, 3, dtype=dtype)
    t = torch.full((2, 3, 3), -100)
    for r in REDUCTIONS.values():
        for a, b in zip(twin(x, t, None, r, -100), stock(x, t, None, r, -100)):
            torch.testing.assert_close(a, b, equal_nan=True)


def test_non_finite_inputs():
    x, t, w = make(2, 3, 5, 5, torch.float32, seed=2)
    t[0, 0, 0] = 1
    x[0, 1, 0, 0] = -float("nan")
    for r in (1, 2):
        out, _ = twin(x, t, w, r, -100)
        assert_bitwise_equal(out, torch.tensor(float("nan")), "a NaN input gives the positive quiet NaN")
    assert_bitwise_equal(twin(x, t, w, 0, -100)[0][0, 0, 0], torch.tensor(float("nan")), "none")
    x[0, 1, 0, 0] = float("-inf")
    assert twin(x, t, w, 2, -100)[0].item() == float("inf")


@pytest.mark.parametrize("reduction", list(REDUCTIONS), ids=str)
def test_non_contiguous_inputs(reduction):
    x, t, w = make(2, 4, 6, 8, torch.float32, seed=5)
    r = REDUCTIONS[reduction]
    want = twin(x, t, w, r, -100)
    x_cl = x.to(memory_format=torch.channels_last)
    x_t = x.transpose(2, 3).contiguous().transpose(2, 3)
    t_t = t.transpose(1, 2).contiguous().transpose(1, 2)
    w_s = torch.stack([w, w], 1)[:, 0]
    assert not (x_cl.is_contiguous() or x_t.is_contiguous() or t_t.is_contiguous() or w_s.is_contiguous())
    for xi, ti, wi in [(x_cl, t, w), (x_t, t_t, w_s), (x, t, w.reshape(2, 2))]:
        got = twin(xi, ti, wi, r, -100)
        for a, b in zip(got, want):
            assert_bitwise_equal(a, b, reduction)
        ref = stock(xi, ti, wi, r, -100)
        torch.testing.assert_close(got[0], ref[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduction", list(REDUCTIONS), ids=str)
def test_bitwise_across_reruns_and_thread_counts(reduction):
    x, t, w = make(4, 7, 64, 65, torch.float32, seed=9, log_probs=False)
    r = REDUCTIONS[reduction]
    first = twin(x, t, w, r, -100)
    for _ in range(3):
        for a, b in zip(twin(x, t, w, r, -100), first):
            assert_bitwise_equal(a, b, "rerun")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for a, b in zip(twin(x, t, w, r, -100), first):
            assert_bitwise_equal(a, b, f"{threads} threads")


def test_other_reduction_values_sum_as_stock():
    x, t, w = make(2, 3, 4, 4, torch.float64, seed=1)
    for r in (3, -1):
        for a, b in zip(twin(x, t, w, r, -100), twin(x, t, w, 2, -100)):
            assert_bitwise_equal(a, b, str(r))
        torch.testing.assert_close(twin(x, t, w, r, -100)[0], stock(x, t, w, r, -100)[0], rtol=1e-12, atol=0)


def test_ignore_index_names_a_class():
    x, t, w = make(2, 4, 5, 5, torch.float64, ignore_frac=0.0, seed=4)
    got = twin(x, t, w, 1, 2)
    ref = stock(x, t, w, 1, 2)
    keep = t != 2
    manual = -(x.permute(0, 2, 3, 1)[keep].gather(1, t[keep][:, None])[:, 0] * w[t[keep]]).sum() / w[t[keep]].sum()
    torch.testing.assert_close(got[0], ref[0], rtol=1e-12, atol=0)
    torch.testing.assert_close(got[0], manual, rtol=1e-12, atol=0)


# ---- bad inputs ----

def _x(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


def _t(*shape, high=3):
    return torch.randint(0, high, shape)


BAD = [
    ("target_dim", lambda: (_x(2, 3, 4, 5), _t(2, 4), None), RuntimeError,
     r"only batches of spatial targets supported \(3D tensors\) but got targets of dimension: 2"),
    ("input_dim", lambda: (_x(2, 3, 4), _t(2, 4, 5), None), RuntimeError,
     r"only batches of spatial inputs supported \(4D tensors\), but got input of dimension: 3"),
    ("input_dim_5", lambda: (_x(2, 3, 4, 5, 6), _t(2, 4, 5), None), RuntimeError,
     r"only batches of spatial inputs supported \(4D tensors\), but got input of dimension: 5"),
    ("weight_size", lambda: (_x(2, 3, 4, 5), _t(2, 4, 5), torch.ones(4)), RuntimeError,
     "weight tensor should be defined either for all or no classes"),
    ("size_mismatch", lambda: (_x(2, 3, 4, 5), _t(2, 3, 5), None), RuntimeError,
     r"size mismatch \(got input: \[2, 3, 4, 5\] , target: \[2, 3, 5\]"),
    ("batch_mismatch", lambda: (_x(2, 3, 4, 5), _t(3, 4, 5), None), RuntimeError, r"size mismatch"),
    ("integer_input", lambda: (_x(2, 3, 4, 5).long(), _t(2, 4, 5), None), NotImplementedError,
     "not implemented for 'Long'"),
    ("complex_input", lambda: (_x(2, 3, 4, 5).to(torch.complex64), _t(2, 4, 5), None), NotImplementedError,
     "not implemented for 'ComplexFloat'"),
    ("weight_dtype", lambda: (_x(2, 3, 4, 5), _t(2, 4, 5), torch.ones(3, dtype=torch.float64)), RuntimeError,
     "expected scalar type Float"),
    ("target_int32", lambda: (_x(2, 3, 4, 5), _t(2, 4, 5).int(), None), RuntimeError,
     "expected scalar type Long"),
    ("target_float", lambda: (_x(2, 3, 4, 5), _t(2, 4, 5).float(), None), RuntimeError,
     "expected scalar type Long"),
]


@pytest.mark.parametrize("name,build,exc,match", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("reduction", [0, 1])
def test_bad_inputs_raise_as_stock(name, build, exc, match, reduction):
    x, t, w = build()
    with pytest.raises(exc, match=match):
        stock(x, t, w, reduction, -100)
    with pytest.raises(exc, match=match) as info:
        twin(x, t, w, reduction, -100)
    assert "nll_loss2d_forward()" in str(info.value)


@pytest.mark.parametrize("bad", [3, -1, 100])
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_target_out_of_range(bad, reduction):
    x, t, w = make(2, 3, 4, 5, torch.float32, seed=8, ignore_frac=0.0)
    t[1, 2, 3] = bad
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
        stock(x, t, w, reduction, -100)
    position = 1 * 20 + 2 * 5 + 3
    with pytest.raises(RuntimeError, match=rf"nll_loss2d_forward\(\): target {bad} at position {position} is out of "
                                           r"bounds of \[0, 3\) and is not ignore_index \(-100\)"):
        twin(x, t, w, reduction, -100)
    # The same value as ignore_index is fine.
    twin(x, t, w, reduction, bad)


def test_output_overload_checks_before_writing():
    x, t, w = make(2, 3, 4, 5, torch.float32)
    output, total_weight = torch.full((2,), 7.0, dtype=torch.float64), torch.full((3,), 7.0)
    for o, tw in [(output.clone(), total_weight.clone()), (torch.empty(0), total_weight.double())]:
        with pytest.raises(RuntimeError, match="expected scalar type Float"):
            stock.output(x, t, w, 1, -100, output=o, total_weight=tw)
    with pytest.raises(RuntimeError, match=r"nll_loss2d_forward\(\): expected output of scalar type Float"):
        twin.output(x, t, w, 1, -100, output=output, total_weight=total_weight)
    with pytest.raises(RuntimeError, match=r"nll_loss2d_forward\(\): expected total_weight of scalar type Float"):
        twin.output(x, t, w, 1, -100, output=torch.empty(0), total_weight=total_weight.double())
    bad_target = t.clone()
    bad_target[0, 0, 0] = 9
    with pytest.raises(RuntimeError, match="out of bounds"):
        twin.output(x, bad_target, w, 1, -100, output=output.float(), total_weight=total_weight)
    assert (total_weight == 7).all() and total_weight.shape == (3,)


# ---- OpInfo / ModuleInfo samples and F.cross_entropy, with the twin in place of stock's kernel ----

class TwinMode(TorchDispatchMode):
    """Runs the detops twin wherever aten.nll_loss2d_forward is called (both overloads); counts the calls."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.nll_loss2d_forward.default:
            self.calls += 1
            return twin.default(*args, **kwargs)
        if func is torch.ops.aten.nll_loss2d_forward.output:
            self.calls += 1
            return twin.output(*args, **kwargs)
        return func(*args, **kwargs)


def through_twin_and_stock(fn, inputs):
    """fn's result and the gradients of its sum w.r.t. inputs, with stock's kernel and with the twin's; and
    the number of twin calls."""
    results = []
    mode = TwinMode()
    for use_twin in (False, True):
        leaves = [i.detach().clone().requires_grad_(i.requires_grad) for i in inputs]
        if use_twin:
            with mode:
                out = fn(*leaves)
        else:
            out = fn(*leaves)
        wrt = [leaf for leaf in leaves if leaf.requires_grad]
        grads = torch.autograd.grad(out.sum(), wrt) if out.requires_grad and wrt else ()
        results.append((out.detach(), grads))
    return results, mode.calls


def assert_same_results(results, tol):
    (out_s, g_s), (out_t, g_t) = results
    torch.testing.assert_close(out_t, out_s, rtol=tol, atol=tol, equal_nan=True)
    for a, b in zip(g_t, g_s):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol, equal_nan=True)


def opinfo_cases():
    from torch.testing._internal.common_methods_invocations import op_db

    return [o for o in op_db if o.name in ("nn.functional.nll_loss", "nn.functional.cross_entropy")]


@pytest.mark.parametrize("opinfo", opinfo_cases(), ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_opinfo_samples_with_4d_input(opinfo, dtype):
    checked = 0
    for sample in opinfo.sample_inputs("cpu", dtype, requires_grad=True):
        if sample.input.dim() != 4:
            continue
        def fn(x, s=sample):
            return opinfo(x, *s.args, **s.kwargs)

        results, calls = through_twin_and_stock(fn, [sample.input])
        assert_same_results(results, 1e-12 if dtype == torch.float64 else 1e-5)
        checked += calls > 0  # cross_entropy with class probabilities as targets calls no nll_loss
    assert checked > 0


def moduleinfo_cases():
    from torch.testing._internal.common_modules import module_db

    return [m for m in module_db if m.module_cls.__name__ in ("CrossEntropyLoss", "NLLLoss")]


@pytest.mark.parametrize("module_info", moduleinfo_cases(), ids=lambda m: m.module_cls.__name__)
def test_moduleinfo_samples_with_4d_input(module_info):
    checked = 0
    inputs = module_info.module_inputs_func(module_info, device="cpu", dtype=torch.float64, requires_grad=True,
                                            training=True)
    for module_input in inputs:
        if module_input.forward_input is None:
            continue
        c, f = module_input.constructor_input, module_input.forward_input
        if f.args[0].dim() != 4:
            continue
        module = module_info.module_cls(*c.args, **c.kwargs)

        def fn(x, m=module, rest=f.args[1:], kw=f.kwargs):
            return m(x, *rest, **kw)

        results, calls = through_twin_and_stock(fn, [f.args[0]])
        assert_same_results(results, 1e-12)
        checked += calls > 0
    assert checked > 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("reduction", list(REDUCTIONS))
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no_weight"])
def test_cross_entropy_through_the_twin(dtype, reduction, label_smoothing, weighted):
    g = torch.Generator().manual_seed(21)
    logits = torch.randn(3, 6, 10, 9, generator=g, dtype=dtype, requires_grad=True)
    target = torch.randint(0, 6, (3, 10, 9), generator=g).masked_fill(torch.rand(3, 10, 9, generator=g) < 0.1, 4)
    weight = torch.rand(6, generator=g, dtype=dtype) + 0.5 if weighted else None

    def fn(x):
        return F.cross_entropy(x, target, weight=weight, ignore_index=4, reduction=reduction,
                               label_smoothing=label_smoothing)

    results, calls = through_twin_and_stock(fn, [logits])
    assert calls == 1
    assert_same_results(results, 1e-12 if dtype == torch.float64 else 1e-5)


def test_audit_finds_cross_entropy_2d_covered():
    x = torch.randn(2, 3, 4, 4, requires_grad=True)
    t = torch.randint(0, 3, (2, 4, 4))
    result = detops.audit(lambda x: F.cross_entropy(x, t, label_smoothing=0.1), x)
    assert result["aten::nll_loss2d_forward"].covered
    assert result.ok, result.format()


# ---- GPU ----

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("reduction", list(REDUCTIONS), ids=str)
@pytest.mark.parametrize("shape", [(2, 5, 9, 11), (4, 21, 96, 97), (1, 3, 1, 33)], ids=["small", "large", "tiny"])
def test_gpu_cuda_twin_equals_cpu_twin_bitwise(dtype, reduction, shape):
    for weighted in (True, False):
        x, t, w = make(*shape, dtype, seed=13, weighted=weighted, ignore_index=255, log_probs=False)
        r = REDUCTIONS[reduction]
        cpu = twin(x, t, w, r, 255)
        wc = None if w is None else w.cuda()
        cuda = twin(x.cuda(), t.cuda(), wc, r, 255)
        for a, b in zip(cuda, cpu):
            assert a.is_cuda
            assert_bitwise_equal(a.cpu(), b, f"{shape} {reduction} weighted={weighted}")
        output, total_weight = torch.empty(0, dtype=dtype, device="cuda"), torch.empty(0, dtype=dtype, device="cuda")
        twin.output(x.cuda(), t.cuda(), wc, r, 255, output=output, total_weight=total_weight)
        assert_bitwise_equal(output.cpu(), cpu[0], ".output")
        assert_bitwise_equal(total_weight.cpu(), cpu[1], ".output total_weight")
    # Every pixel ignored (mean 0 / 0) and an empty batch.
    x, t, w = make(*shape, dtype, seed=14, ignore_index=255, ignore_frac=1.0)
    for xi, ti in [(x, t), (x[:0], t[:0])]:
        cpu = twin(xi, ti, w, REDUCTIONS[reduction], 255)
        cuda = twin(xi.cuda(), ti.cuda(), w.cuda(), REDUCTIONS[reduction], 255)
        for a, b in zip(cuda, cpu):
            assert_bitwise_equal(a.cpu(), b, "ignored / empty")


@pytest.mark.gpu
@pytest.mark.parametrize("reduction", list(REDUCTIONS), ids=str)
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_gpu_cross_entropy_under_the_flag(reduction, label_smoothing):
    g = torch.Generator().manual_seed(31)
    logits = torch.randn(4, 19, 64, 64, generator=g).cuda().requires_grad_()
    target = torch.randint(0, 19, (4, 64, 64), generator=g).masked_fill(torch.rand(4, 64, 64, generator=g) < 0.05, 255)
    target, weight = target.cuda(), (torch.rand(19, generator=g) + 0.5).cuda()
    with detops.mode("auto"):
        torch.use_deterministic_algorithms(True)
        loss = F.cross_entropy(logits, target, weight=weight, ignore_index=255, reduction=reduction,
                               label_smoothing=label_smoothing)
        loss.sum().backward()
        log_probs = F.log_softmax(logits.detach(), 1)
        nll = F.nll_loss(log_probs, target, weight=weight, ignore_index=255, reduction=reduction)
        torch.cuda.synchronize()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    want = twin(log_probs.cpu(), target.cpu(), weight.cpu(), REDUCTIONS[reduction], 255)[0]
    assert_bitwise_equal(nll.cpu(), want, "F.nll_loss on CUDA under the flag vs the CPU twin")
    if label_smoothing == 0.0:
        assert_bitwise_equal(loss.detach().cpu(), want, "F.cross_entropy on CUDA under the flag vs the CPU twin")
    else:
        torch.testing.assert_close(loss.detach().cpu(), F.cross_entropy(
            logits.detach().cpu(), target.cpu(), weight=weight.cpu(), ignore_index=255, reduction=reduction,
            label_smoothing=label_smoothing), rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_gpu_strict_mode_reports_a_bad_target():
    x, t, w = make(2, 3, 4, 5, torch.float32)
    t[1, 0, 2] = 7
    detops.set_strict(True)
    with pytest.raises(RuntimeError, match=r"nll_loss2d_forward\(\): target 7 at position 22 is out of bounds"):
        twin(x.cuda(), t.cuda(), w.cuda(), 1, -100)
    torch.cuda.synchronize()
    t[1, 0, 2] = 1
    assert_bitwise_equal(twin(x.cuda(), t.cuda(), w.cuda(), 1, -100)[0].cpu(), twin(x, t, w, 1, -100)[0])


TRAIN_SCRIPT = r"""
import hashlib, torch, torch.nn as nn, torch.nn.functional as F
import detops

torch.manual_seed(0)
torch.cuda.manual_seed(0)
torch.backends.cudnn.benchmark = False
torch.use_deterministic_algorithms(True)
classes = 5
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
                      nn.Conv2d(16, classes, 1)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
weight = torch.linspace(0.5, 1.5, classes).cuda()
g = torch.Generator().manual_seed(1)
for _ in range(20):
    x = torch.randn(4, 3, 32, 32, generator=g).cuda()
    target = torch.randint(0, classes, (4, 32, 32), generator=g)
    target = target.masked_fill(torch.rand(4, 32, 32, generator=g) < 0.05, 255).cuda()
    logits = F.interpolate(model(x), size=(32, 32), mode="bilinear", align_corners=False)
    loss = F.cross_entropy(logits, target, weight=weight, ignore_index=255, label_smoothing=0.05)
    opt.zero_grad()
    loss.backward()
    opt.step()
h = hashlib.sha256()
for p in model.parameters():
    h.update(p.detach().cpu().contiguous().numpy().tobytes())
print(h.hexdigest(), float(loss))
"""


@pytest.mark.gpu
def test_gpu_segmentation_training_identical_in_two_processes():
    env = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8")
    outputs = []
    for _ in range(2):
        result = subprocess.run([sys.executable, "-c", TRAIN_SCRIPT], capture_output=True, text=True, timeout=300,
                                env=env)
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout.split())
    assert outputs[0] == outputs[1], outputs
    assert np.isfinite(float(outputs[0][1]))
