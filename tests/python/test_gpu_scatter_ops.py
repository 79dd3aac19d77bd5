"""GPU checks for index_add and scatter_add (marker `gpu`; skipped without a CUDA device)."""

import random

import pytest
import torch
from conftest import FLOAT_DTYPES, assert_bitwise_equal
from test_scatter_ops import random_index_add_case, random_scatter_add_case

import detops

pytestmark = pytest.mark.gpu
detops_ops = torch.ops.detops


def cuda(*tensors):
    return [t.cuda() if isinstance(t, torch.Tensor) else t for t in tensors]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_cuda_twin_equals_cpu_twin_bitwise(dtype):
    rng = random.Random(10 + FLOAT_DTYPES.index(dtype))
    for case in range(100):
        self, dim, index, source, alpha = random_index_add_case(rng, dtype)
        cpu = detops_ops.index_add(self, dim, index, source, alpha=alpha)
        gpu = detops_ops.index_add(*cuda(self, dim, index, source), alpha=alpha)
        assert_bitwise_equal(cpu, gpu, f"index_add case {case}")
        self, dim, index, src = random_scatter_add_case(rng, dtype)
        assert_bitwise_equal(
            detops_ops.scatter_add(self, dim, index, src), detops_ops.scatter_add(*cuda(self, dim, index, src)),
            f"scatter_add case {case}",
        )


@pytest.mark.parametrize("shape", ["low", "high", "hot", "wide"])
def test_engine_shapes_cuda_equals_cpu(shape):
    torch.manual_seed(11)
    if shape == "wide":
        table, index, rows = torch.randn(100_000, 256), torch.randint(0, 100_000, (20_000,)), torch.randn(20_000, 256)
        assert_bitwise_equal(detops_ops.index_add(table, 0, index, rows), detops_ops.index_add(*cuda(table, 0, index, rows)))
        return
    n = 1 << 20
    dests = {"low": n, "high": 1000, "hot": 1}[shape]
    src, index = torch.rand(n), torch.randint(0, dests, (n,))
    self = torch.zeros(dests)
    assert_bitwise_equal(detops_ops.scatter_add(self, 0, index, src), detops_ops.scatter_add(*cuda(self, 0, index, src)))


def test_overrides_under_the_flag_match_stock_and_repeat():
    torch.manual_seed(12)
    self, index, source = torch.randn(1000, 64, device="cuda"), torch.randint(0, 1000, (50_000,), device="cuda"), torch.randn(50_000, 64, device="cuda")
    sindex = torch.randint(0, 1000, (50_000, 64), device="cuda")
    with detops.mode("off"):
        stock_ia = torch.index_add(self, 0, index, source)
        stock_sa = torch.scatter_add(self, 0, sindex, source)
    torch.use_deterministic_algorithms(True)
    first_ia = torch.index_add(self, 0, index, source)
    first_sa = self.clone().scatter_add_(0, sindex, source)
    torch.testing.assert_close(first_ia, stock_ia, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(first_sa, stock_sa, rtol=1e-4, atol=1e-4)
    assert_bitwise_equal(first_ia, detops_ops.index_add(self.cpu(), 0, index.cpu(), source.cpu()).cuda())
    for i in range(1000):
        assert_bitwise_equal(torch.index_add(self, 0, index, source), first_ia, f"rerun {i}")
        assert_bitwise_equal(torch.scatter_add(self, 0, sindex, source), first_sa, f"rerun {i}")


def test_autograd_through_index_add_under_the_flag():
    torch.use_deterministic_algorithms(True)
    weight = torch.randn(100, 8, device="cuda", requires_grad=True)
    index = torch.randint(0, 100, (1000,), device="cuda")
    out = torch.zeros(100, 8, device="cuda").index_add(0, index, weight[index % 100])
    out.sum().backward()
    assert weight.grad is not None and torch.isfinite(weight.grad).all()


def test_strict_mode_raises_and_leaves_the_context_usable():
    detops.set_strict(True)
    self = torch.zeros(5, 3, device="cuda")
    with pytest.raises(RuntimeError, match="index 9 at position 1"):
        detops_ops.index_add_(self, 0, torch.tensor([0, 9], device="cuda"), torch.ones(2, 3, device="cuda"))
    torch.use_deterministic_algorithms(True)
    with pytest.raises(RuntimeError, match="index -1"):
        self.scatter_add_(0, torch.tensor([[0, -1, 2]], device="cuda"), torch.ones(1, 3, device="cuda"))
    assert torch.equal(self, torch.zeros(5, 3, device="cuda"))
    assert torch.ones(4, device="cuda").sum().item() == 4


def test_device_mix_is_a_clear_error():
    with pytest.raises(RuntimeError, match="expected index on the same device as self"):
        detops_ops.index_add(torch.zeros(5, 3, device="cuda"), 0, torch.tensor([0]), torch.ones(1, 3, device="cuda"))
