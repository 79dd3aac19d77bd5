"""The order contract (docs/order_contract.md), checked bit for bit against an independent Python
statement of it, and across reruns and CPU thread counts."""

import numpy as np
import pytest
import torch
from conftest import FLOAT_DTYPES, assert_bitwise_equal

detops_ops = torch.ops.detops
BLOCK = 32


def tree(values):
    """Blocks of 32 folded left to right, then the same over the block sums, in numpy's exact arithmetic."""
    while len(values) > 1:
        nxt = []
        for b in range(0, len(values), BLOCK):
            s = values[b]
            for v in values[b + 1 : b + BLOCK]:
                s = s + v
            nxt.append(s)
        values = nxt
    return values[0]


def reference_index_add(self, index, source, alpha):
    """index_add_ along dim 0 by the contract: float accumulation (double for double), one rounding."""
    acc = np.float64 if self.dtype == torch.float64 else np.float32
    out = self.to(torch.float64 if acc is np.float64 else torch.float32).numpy().copy()
    src = source.to(torch.float64 if acc is np.float64 else torch.float32).numpy()
    a = acc(torch.tensor(alpha, dtype=self.dtype).item())
    idx = index.tolist()
    for d in sorted(set(idx)):
        rows = [i for i, k in enumerate(idx) if k == d]
        for c in range(out.shape[1]):
            total = tree([acc(src[i, c]) * a for i in rows])
            out[d, c] = acc(out[d, c]) + total
    return torch.from_numpy(out).to(self.dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("n", [1, 31, 33, 1100, 40000])
def test_index_add_bits_equal_the_reference_tree(dtype, n):
    torch.manual_seed(n)
    self = torch.randn(3, 2).to(dtype)
    index = torch.randint(0, 3, (n,))
    index[: n // 2] = 1  # one destination with at least half the contributions
    source = (torch.randn(n, 2) * 100).to(dtype)
    got = detops_ops.index_add(self, 0, index, source, alpha=0.7)
    assert_bitwise_equal(got, reference_index_add(self, index, source, 0.7), f"{dtype} n={n}")


def test_scatter_add_bits_equal_the_reference_tree():
    torch.manual_seed(5)
    src = torch.randn(5000) * 1000
    index = torch.randint(0, 2, (5000,))
    got = detops_ops.scatter_add(torch.zeros(2), 0, index, src)
    expected = [np.float32(0) + tree([np.float32(v) for v, k in zip(src.tolist(), index.tolist()) if k == d]) for d in (0, 1)]
    assert_bitwise_equal(got, torch.tensor(expected, dtype=torch.float32))


def test_hot_destination_accuracy():
    torch.manual_seed(6)
    src = torch.rand(200_000)
    got = detops_ops.scatter_add(torch.zeros(1), 0, torch.zeros(200_000, dtype=torch.long), src)
    exact = src.double().sum().item()
    assert abs(got.item() - exact) / exact < 2e-6


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_bits_do_not_depend_on_threads_or_reruns(dtype):
    torch.manual_seed(7)
    self = torch.randn(20000, 4).to(dtype)
    index = torch.randint(0, 20000, (80000,))
    index[:5000] = 17
    source = torch.randn(80000, 4).to(dtype)
    sindex = torch.randint(0, 20000, (80000, 4))
    torch.set_num_threads(1)
    a = detops_ops.index_add(self, 0, index, source, alpha=1.5)
    b = detops_ops.scatter_add(self, 0, sindex, source)
    torch.set_num_threads(2)
    for _ in range(3):
        assert_bitwise_equal(detops_ops.index_add(self, 0, index, source, alpha=1.5), a, "index_add")
        assert_bitwise_equal(detops_ops.scatter_add(self, 0, sindex, source), b, "scatter_add")


def test_negative_zero_and_nan_propagate():
    self = torch.tensor([-0.0, 0.0, 1.0])
    got = detops_ops.index_add(self, 0, torch.tensor([2, 2]), torch.tensor([float("nan"), 1.0]))
    assert torch.isnan(got[2]) and torch.equal(got[:2], self[:2]) and torch.signbit(got[0])
    got = detops_ops.index_add(torch.tensor([1.0]), 0, torch.tensor([0]), torch.tensor([float("inf")]))
    assert got.item() == float("inf")
