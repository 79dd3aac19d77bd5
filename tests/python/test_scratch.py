"""Scratch buffers skip torch's deterministic fill: under torch.use_deterministic_algorithms(True) torch fills
every at::empty (torch.utils.deterministic.fill_uninitialized_memory), a whole pass over the bytes. detops'
internal scratch (the CUDA engine's workspace, histc's bins, grid_sampler's taps) is written before it is
read, so it is allocated without that fill (detops::empty_scratch): the flag adds no fill_ to a detops call."""

import math

import pytest
import torch

import detops

HAS_CUDA = torch.cuda.is_available()


def _filled(fn, flag: bool) -> int:
    """Elements written by aten::fill_ during one call of fn."""
    torch.use_deterministic_algorithms(flag)
    fn()
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, record_shapes=True, acc_events=True) as prof:
        fn()
        if HAS_CUDA:
            torch.cuda.synchronize()
    total = 0
    for e in prof.key_averages(group_by_input_shape=True):
        if e.key == "aten::fill_":
            total += e.count * math.prod(e.input_shapes[0])
    return total


def _outputs(result) -> int:
    tensors = result if isinstance(result, (tuple, list)) else [result]
    return sum(t.numel() for t in tensors if isinstance(t, torch.Tensor))


def _histc(device):
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(0)).to(device)
    return lambda: torch.ops.detops.histc.default(x, 100, -2.0, 2.0)


def _grid_sampler(device):
    g = torch.Generator().manual_seed(0)
    # Many sample points into a small input: the taps' keys and weights (scratch) outnumber the outputs.
    grad = torch.randn(1, 1, 64, 64, generator=g).to(device)
    inp = torch.randn(1, 1, 4, 4, generator=g).to(device)
    grid = (torch.rand(1, 64, 64, 2, generator=g) * 2 - 1).to(device)
    return lambda: torch.ops.detops.grid_sampler_2d_backward.default(grad, inp, grid, 0, 0, False, [True, True])


def _scatter_add(device):
    g = torch.Generator().manual_seed(0)
    self_ = torch.zeros(1000).to(device)
    index = torch.randint(0, 1000, (100_000,), generator=g).to(device)
    src = torch.randn(100_000, generator=g).to(device)
    # In place: no output allocation, so every fill would be the engine's.
    return lambda: torch.ops.detops.scatter_add_.default(self_, 0, index, src)


def test_the_flag_fills_empty_tensors():
    # What the tests below guard against: without this, they could not fail.
    assert torch.utils.deterministic.fill_uninitialized_memory
    assert _filled(lambda: torch.empty(10), True) == 10
    assert _filled(lambda: torch.empty(10), False) == 0


# The flag may fill what is allocated for the outputs (at::zeros and at::empty, as for stock's kernels; histc
# also converts its int64 counts to the input dtype: two tensors of the output's size), never more: the
# scratch is as large as the input here, far larger than the outputs.
def _check(fn):
    extra = _filled(fn, True) - _filled(fn, False)
    assert 0 <= extra <= 2 * _outputs(fn())


@pytest.mark.parametrize("make", [_histc, _grid_sampler], ids=["histc", "grid_sampler_2d_backward"])
def test_cpu_twin_adds_no_fill_under_the_flag(make):
    _check(make("cpu"))


@pytest.mark.gpu
@pytest.mark.parametrize("make", [_histc, _grid_sampler, _scatter_add],
                         ids=["histc", "grid_sampler_2d_backward", "scatter_add"])
def test_cuda_adds_no_fill_under_the_flag(make):
    detops.set_mode("always")
    _check(make("cuda"))
