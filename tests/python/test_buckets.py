"""The CUDA engine's buckets (docs/engine.md, "Buckets"): calls with about as many destinations as contributions put
each contribution in its destination's bucket instead of sorting. The plan (counted on the CPU) shows which calls
take them; on a GPU, CUDA == CPU twin bit for bit, with and without the cooperative launch, captured into a CUDA
graph, and where a hot destination sends the call to the gated multi-block path."""

import pytest
import torch

from conftest import FLOAT_DTYPES, assert_bitwise_equal
from detops import plan as P

ops = torch.ops.detops

N = 50000


def _scatter_reduce_args(n, keys, dtype, reduce, include_self, hot=0, seed=0):
    g = torch.Generator().manual_seed(seed)
    index = torch.randint(0, keys, (n,), generator=g)
    if hot:
        index[index == 3] = 4
        index[torch.randperm(n, generator=g)[:hot]] = 3
    if dtype == torch.int64:
        self_, src = torch.randint(-50, 50, (keys,), generator=g), torch.randint(-50, 50, (n,), generator=g)
    else:
        # Products near 1; signed zeros, infinities and NaNs among the sums' and selections' values.
        scale = 0.01 if reduce == "prod" else 1.0
        self_ = (1 + scale * torch.randn(keys, generator=g, dtype=torch.float64)).to(dtype)
        src = (1 + scale * torch.randn(n, generator=g, dtype=torch.float64))
        src[:6] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), -0.0], dtype=torch.float64)
        src = src.to(dtype)
    return self_, index, src


def test_low_contention_calls_plan_the_buckets():
    """The shapes below take the buckets (one cooperative launch before the gated multi-block path); a hot
    destination does not change the plan (it is counted from sizes), and a high-contention call does not take them."""
    for dtype in (torch.float32, torch.float16, torch.float64, torch.int64):
        self_, index, src = _scatter_reduce_args(N, N, dtype, "sum", True)
        plan = P.plan_summary(ops.scatter_reduce.two, self_, 0, index, src, "sum", plan_only=True)
        assert [c.summary["path"] for c in plan.calls] == ["buckets"], dtype
        assert plan.totals["stream_ops"] == 6 and plan.totals["allocations"] == 1
    self_, index, src = _scatter_reduce_args(N, 1000, torch.float32, "sum", True)
    plan = P.plan_summary(ops.scatter_reduce.two, self_, 0, index, src, "sum", plan_only=True)
    assert [c.summary["path"] for c in plan.calls] == ["multi"]
    # Rows: carried (two float columns, 8 bytes) or not (two double columns, 16 floats).
    for dtype, width in ((torch.float32, 2), (torch.float64, 2), (torch.float32, 16)):
        plan = P.plan_summary(ops.index_add, torch.zeros(N, width, dtype=dtype), 0, torch.randint(0, N, (N,)),
                              torch.ones(N, width, dtype=dtype), plan_only=True)
        assert [c.summary["path"] for c in plan.calls] == ["buckets"], (dtype, width)
        assert plan.calls[0].summary["value_bytes"] == (8 if width * dtype.itemsize == 8 else 4)


REDUCES = ["sum", "prod", "mean", "amax", "amin"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + [torch.int64], ids=str)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("keys", [N, N // 3, 4 * N])
def test_gpu_buckets_equal_cpu_twin(dtype, reduce, include_self, keys):
    self_, index, src = _scatter_reduce_args(N, keys, dtype, reduce, include_self, seed=keys)
    cpu = ops.scatter_reduce.two(self_, 0, index, src, reduce, include_self=include_self)
    cuda = ops.scatter_reduce.two(self_.cuda(), 0, index.cuda(), src.cuda(), reduce, include_self=include_self)
    assert_bitwise_equal(cuda.cpu(), cpu, f"{reduce} {dtype}")
    for _ in range(5):
        again = ops.scatter_reduce.two(self_.cuda(), 0, index.cuda(), src.cuda(), reduce, include_self=include_self)
        assert_bitwise_equal(again.cpu(), cuda.cpu(), "rerun")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("width", [1, 2, 16, 40])
def test_gpu_buckets_of_index_add_and_scatter_add_equal_cpu_twin(dtype, width):
    g = torch.Generator().manual_seed(width)
    index = torch.randint(0, N + 17, (N,), generator=g)
    self_ = torch.randn(N + 17, width, generator=g).to(dtype)
    source = torch.randn(N, width, generator=g).to(dtype)
    cpu = ops.index_add(self_, 0, index, source, alpha=0.5)
    cuda = ops.index_add(self_.cuda(), 0, index.cuda(), source.cuda(), alpha=0.5)
    assert_bitwise_equal(cuda.cpu(), cpu, "index_add")
    cpu = ops.scatter_add(self_[:, 0].contiguous(), 0, index[:N // 2] % N, source[:N // 2, 0].contiguous())
    cuda = ops.scatter_add(self_[:, 0].contiguous().cuda(), 0, (index[:N // 2] % N).cuda(),
                           source[:N // 2, 0].contiguous().cuda())
    assert_bitwise_equal(cuda.cpu(), cpu, "scatter_add")


@pytest.mark.gpu
@pytest.mark.parametrize("hot", [32, 33, 5000])
def test_gpu_a_hot_destination_takes_the_gated_path(hot):
    """A destination of more than 32 contributions raises the buckets' flag: the multi-block path recomputes every
    destination. 32 stays in the buckets. Both give the CPU twin's bits."""
    self_, index, src = _scatter_reduce_args(N, N, torch.float32, "sum", True, hot=hot)
    assert int((index == 3).sum()) == hot
    cpu = ops.scatter_add(self_, 0, index, src)
    cuda = ops.scatter_add(self_.cuda(), 0, index.cuda(), src.cuda())
    assert_bitwise_equal(cuda.cpu(), cpu, f"hot {hot}")


@pytest.mark.gpu
def test_gpu_buckets_without_the_cooperative_launch(monkeypatch):
    """One launch per step (DETOPS_COOPERATIVE=0): the same bits."""
    self_, index, src = _scatter_reduce_args(N, N, torch.float32, "sum", True)
    eager = ops.scatter_add(self_.cuda(), 0, index.cuda(), src.cuda())
    monkeypatch.setenv("DETOPS_COOPERATIVE", "0")
    steps = ops.scatter_add(self_.cuda(), 0, index.cuda(), src.cuda())
    assert_bitwise_equal(steps.cpu(), eager.cpu(), "per step")
    self_, index, src = _scatter_reduce_args(N, N, torch.float32, "sum", True, hot=40)
    assert_bitwise_equal(ops.scatter_add(self_.cuda(), 0, index.cuda(), src.cuda()).cpu(),
                         ops.scatter_add(self_, 0, index, src), "per step, gated")


@pytest.mark.gpu
def test_gpu_buckets_replay_in_a_cuda_graph():
    """Captured (one launch per step: a capture takes no cooperative launch) and replayed: the eager bits."""
    self_, index, src = _scatter_reduce_args(N, N, torch.float32, "sum", True)
    self_, index, src = self_.cuda(), index.cuda(), src.cuda()
    eager = ops.scatter_add(self_, 0, index, src)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ops.scatter_add(self_, 0, index, src)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ops.scatter_add(self_, 0, index, src)
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert_bitwise_equal(captured.cpu(), eager.cpu(), "replayed")
