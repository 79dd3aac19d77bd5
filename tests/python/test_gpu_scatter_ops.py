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


@pytest.mark.parametrize("columns", [1, 16])
def test_segments_finishing_at_every_level_cuda_equals_cpu(columns):
    """One call whose segments finish at levels 1 to 4 (32^L + 1 contributions need L + 1 levels above level 0), all
    in the levels' one cooperative launch: the thread form for one column, the warp form for 16."""
    torch.manual_seed(13)
    lengths = [1, 31, 32, 33, 1024, 1025, 32 * 1024, 32 * 1024 + 1, 1 << 20 if columns == 1 else 40_000, 5]
    index = torch.cat([torch.full((m,), d) for d, m in enumerate(lengths)])
    index = index[torch.randperm(index.numel())]
    self = torch.zeros(len(lengths), columns)
    source = torch.randn(index.numel(), columns)
    cpu = detops_ops.index_add(self, 0, index, source)
    assert_bitwise_equal(cpu, detops_ops.index_add(*cuda(self, 0, index, source)))
    torch.testing.assert_close(cpu.double(), torch.zeros(len(lengths), columns, dtype=torch.double).index_add_(
        0, index, source.double()), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("num_keys,columns,n", [(1000, 1, 300_000), (1000, 16, 300_000), (1024, 1, 300_000),
                                                 (1024, 2, 300_000), (50_000, 2, 300_000), (50_000, 16, 300_000),
                                                 (1 << 20, 1, 300_000), (1 << 20, 16, 300_000),
                                                 ((1 << 25) + 3, 1, 300_000), ((1 << 25) + 3, 2, 300_000),
                                                 (1000, 1, 3_000_000), (1 << 20, 2, 3_000_000)])
def test_counting_sort_passes_cuda_equals_cpu(num_keys, columns, n):
    """The counting sort's passes (1,000 keys: one of 10 bits; 1,024: two of 6; 50,000: two of 8; 2^20: three of 7;
    2^25 + 3: three of 9), carrying 4-byte contributions (one column), 8-byte ones (two) or the positions (16): a
    sort that lost the source order of one key's contributions, or misplaced one, changes the bits. Every 7th
    contribution goes to one key, so the call has long segments and levels. 300,000 contributions are 74 tiles,
    one per block at most (the scatter takes the count's rows); 3M are 733, several per block on an H100 or H200
    (the scatter counts again)."""
    torch.manual_seed(num_keys % 997 + columns)
    index = torch.randint(0, num_keys, (n,))
    index[::7] = num_keys - 1
    self = torch.zeros(num_keys, columns)
    source = torch.randn(n, columns)
    cpu = detops_ops.index_add(self, 0, index, source)
    assert_bitwise_equal(cpu, detops_ops.index_add(*cuda(self, 0, index, source)))
    hot = source[index == num_keys - 1].double().sum(0)
    torch.testing.assert_close(cpu[num_keys - 1].double(), hot, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("num_keys", [1000, 1 << 20])
def test_one_launch_per_step_gives_the_same_bits(num_keys, monkeypatch):
    """DETOPS_COOPERATIVE=0: the counting sort's steps and the tree's levels run one launch per step, the path of
    a device without cooperative launch; the bits are the cooperative launch's and the CPU twin's."""
    torch.manual_seed(17)
    n = 1 << 20
    index = torch.randint(0, num_keys, (n,))
    index[::3] = 7
    self, source = torch.zeros(num_keys, 2), torch.randn(n, 2)
    cpu = detops_ops.index_add(self, 0, index, source)
    together = detops_ops.index_add(*cuda(self, 0, index, source))
    monkeypatch.setenv("DETOPS_COOPERATIVE", "0")
    apart = detops_ops.index_add(*cuda(self, 0, index, source))
    assert_bitwise_equal(cpu, together)
    assert_bitwise_equal(cpu, apart)


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
    # About 50 contributions per element (two blocks of the tree): stock's deterministic fallback (a sorted
    # index_put_ that accumulates one contribution at a time) does not give these bits; the detops kernel
    # gives the CPU twin's, for each of the three overloads.
    cpu_self, cpu_index, cpu_sindex, cpu_source = self.cpu(), index.cpu(), sindex.cpu(), source.cpu()
    want_ia = detops_ops.index_add(cpu_self, 0, cpu_index, cpu_source)
    want_sa = detops_ops.scatter_add(cpu_self, 0, cpu_sindex, cpu_source)
    assert_bitwise_equal(first_ia, want_ia, "index_add under the flag vs CPU twin")
    assert_bitwise_equal(first_sa, want_sa, "scatter_add_ under the flag vs CPU twin")
    inplace_ia = self.clone()
    assert inplace_ia.index_add_(0, index, source) is inplace_ia
    assert_bitwise_equal(inplace_ia, want_ia, "index_add_ under the flag vs CPU twin")
    out_ia, out_sa = torch.empty(0, device="cuda"), torch.empty(0, device="cuda")
    torch.index_add(self, 0, index, source, out=out_ia)
    torch.scatter_add(self, 0, sindex, source, out=out_sa)
    assert_bitwise_equal(out_ia, want_ia, "index_add.out under the flag vs CPU twin")
    assert_bitwise_equal(out_sa, want_sa, "scatter_add.out under the flag vs CPU twin")
    assert_bitwise_equal(torch.scatter_add(self, 0, sindex, source), want_sa, "scatter_add under the flag vs CPU twin")
    for i in range(1000):
        assert_bitwise_equal(torch.index_add(self, 0, index, source), first_ia, f"rerun {i}")
        assert_bitwise_equal(torch.scatter_add(self, 0, sindex, source), first_sa, f"rerun {i}")


def test_autograd_through_index_add_under_the_flag():
    """index_add forward, and index_select's backward (an index_add into zeros), on CUDA under the flag."""
    g = torch.Generator().manual_seed(13)
    weight_cpu = torch.randn(20, 8, generator=g)
    rows = torch.randint(0, 20, (2000,), generator=g)  # about 100 contributions per row of weight.grad
    dest = torch.randint(0, 10, (2000,), generator=g)  # about 200 contributions per row of out
    grad_out = torch.randn(10, 8, generator=g)
    weight = weight_cpu.cuda().requires_grad_()
    torch.use_deterministic_algorithms(True)
    picked = weight.index_select(0, rows.cuda())
    assert type(picked.grad_fn).__name__ == "IndexSelectBackward0"  # its backward is an index_add
    out = torch.zeros(10, 8, device="cuda").index_add(0, dest.cuda(), picked)
    assert type(out.grad_fn).__name__ == "IndexAddBackward0"
    # Forward: the detops kernel's bits (the CPU twin's), over trees of several blocks.
    assert_bitwise_equal(out, detops_ops.index_add(torch.zeros(10, 8), 0, dest, weight_cpu.index_select(0, rows)),
                         "forward vs CPU twin")
    # d(out.sum())/d(weight) is exact: row r of the gradient is the number of times r occurs in `rows`.
    (counts,) = torch.autograd.grad(out.sum(), weight, retain_graph=True)
    want = torch.bincount(rows, minlength=20).to(torch.float32)[:, None].expand(20, 8)
    assert counts.is_cuda and counts.dtype == torch.float32
    assert torch.equal(counts.cpu(), want), (counts.cpu() - want).abs().max()
    # With a random upstream gradient: the bits of the CPU twin's index_add of grad_out[dest] into zeros.
    (grad,) = torch.autograd.grad(out, weight, grad_out.cuda())
    want = detops_ops.index_add(torch.zeros(20, 8), 0, rows, grad_out.index_select(0, dest))
    assert_bitwise_equal(grad, want, "weight.grad vs CPU twin")


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
