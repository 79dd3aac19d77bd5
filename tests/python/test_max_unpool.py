"""max_unpool2d / max_unpool3d: the twins against a Python loop (the last writer in source order wins, bit for
bit, every dtype, repeated indices), against stock CPU (no repeats), channels-last and non-contiguous inputs,
batched and unbatched, empty batches and output sizes, out tensors, every bad argument with stock's message,
reruns and thread counts; the CPU overrides (nn.MaxUnpool1d/2d/3d under the flag with detops loaded); and on
CUDA (marker gpu): the overrides under the flag, CUDA == CPU twin bitwise."""

import random

import pytest
import torch
import torch.nn.functional as F

import detops
from conftest import FLOAT_DTYPES, assert_bitwise_equal

aten = torch.ops.aten
unpool2d = torch.ops.detops.max_unpool2d
unpool3d = torch.ops.detops.max_unpool3d


def test_covered():
    for op in ("aten::max_unpool2d", "aten::max_unpool2d.out", "aten::max_unpool3d", "aten::max_unpool3d.out"):
        assert op in detops.covered_ops() and op in detops.covered_cpu_ops()


def reference(x, indices, output_size):
    """A Python loop over each plane's elements in source order: the later write wins."""
    spatial = len(output_size)
    lead = x.shape[:-spatial]
    planes = x.reshape(-1, int(torch.tensor(x.shape[-spatial:]).prod()))
    idx = indices.reshape(planes.shape)
    plane_out = int(torch.tensor(output_size).prod())
    out = torch.zeros(planes.shape[0], plane_out, dtype=x.dtype)
    for p in range(planes.shape[0]):
        for j in range(planes.shape[1]):
            out[p, idx[p, j]] = planes[p, j]
    return out.reshape(*lead, *output_size)


def make_case(rng, g, dims, dtype, repeats):
    batch = rng.choice([(), (1,), (2,)])
    channels = rng.choice([1, 3])
    in_sp = [rng.randint(1, 4) for _ in range(dims)]
    out_sp = [s * 2 + rng.randint(0, 1) for s in in_sp]
    shape = (*batch, channels, *in_sp)
    x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    plane_out = int(torch.tensor(out_sp).prod())
    if repeats:
        indices = torch.randint(0, min(plane_out, 3), shape, generator=g)
    else:
        n = int(torch.tensor(in_sp).prod())
        planes = [torch.randperm(plane_out, generator=g)[:n] for _ in range(int(torch.tensor(shape[:-dims]).prod()))]
        indices = torch.stack(planes).reshape(shape)
    return x, indices, out_sp


def call(dims, x, indices, output_size, out=None):
    if dims == 2:
        return unpool2d.default(x, indices, output_size) if out is None else unpool2d.out(x, indices, output_size, out=out)
    args = (x, indices, output_size, [2, 2, 2], [0, 0, 0])
    return unpool3d.default(*args) if out is None else unpool3d.out(*args, out=out)


def stock(dims, x, indices, output_size):
    with detops.mode("off"):
        if dims == 2:
            return aten.max_unpool2d(x, indices, output_size)
        return aten.max_unpool3d(x, indices, output_size, [2, 2, 2], [0, 0, 0])


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_twin_is_the_last_writer_and_matches_stock(dims, dtype):
    rng = random.Random(dims * 10 + FLOAT_DTYPES.index(dtype))
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    for k in range(40):
        repeats = k % 2 == 0
        x, indices, out_sp = make_case(rng, g, dims, dtype, repeats)
        if rng.random() < 0.3 and x.dim() == dims + 2:
            fmt = torch.channels_last if dims == 2 else torch.channels_last_3d
            x, indices = x.contiguous(memory_format=fmt), indices.contiguous(memory_format=fmt)
        elif rng.random() < 0.3:
            x = x.transpose(-1, -2).contiguous().transpose(-1, -2)
        got = call(dims, x, indices, out_sp)
        assert_bitwise_equal(got, reference(x, indices, out_sp), f"{dims}d {dtype} {tuple(x.shape)}")
        want = stock(dims, x, indices, out_sp)
        assert got.stride() == want.stride(), "layout as stock"
        if not repeats:
            assert_bitwise_equal(got, want, "stock")


def test_channels_last_out_and_out_overloads():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 4, generator=g).contiguous(memory_format=torch.channels_last)
    indices = torch.randint(0, 64, (2, 3, 4, 4), generator=g).contiguous(memory_format=torch.channels_last)
    got = unpool2d.default(x, indices, [8, 8])
    assert got.is_contiguous(memory_format=torch.channels_last)
    out = torch.empty(0)
    assert unpool2d.out(x, indices, [8, 8], out=out) is out
    assert_bitwise_equal(out, got) and out.is_contiguous(memory_format=torch.channels_last)
    out = torch.full((2, 3, 8, 8), 7.0).contiguous(memory_format=torch.channels_last)
    unpool2d.out(x.contiguous(), indices.contiguous(), [8, 8], out=out)
    assert_bitwise_equal(out, got)
    x3, i3 = torch.randn(1, 2, 2, 2, 2, generator=g), torch.randint(0, 64, (1, 2, 2, 2, 2), generator=g)
    out3 = torch.full((5,), 7.0)
    unpool3d.out(x3, i3, [4, 4, 4], [2, 2, 2], [0, 0, 0], out=out3)
    assert_bitwise_equal(out3, reference(x3, i3, [4, 4, 4]))


def test_values_copied_as_bits():
    x = torch.tensor([float("nan"), -0.0, float("inf"), 1.0]).view(1, 1, 2, 2)
    x.view(torch.int32)[0, 0, 0, 0] = 0x7fc00123  # a NaN with a payload
    indices = torch.tensor([0, 1, 2, 3]).view(1, 1, 2, 2)
    assert_bitwise_equal(unpool2d.default(x, indices, [2, 2]), x)


def test_empty_batch_and_output():
    x, i = torch.randn(0, 3, 2, 2), torch.zeros(0, 3, 2, 2, dtype=torch.long)
    assert unpool2d.default(x, i, [4, 4]).shape == (0, 3, 4, 4)
    x, i = torch.randn(2, 3, 2, 2), torch.zeros(2, 3, 2, 2, dtype=torch.long)
    assert unpool2d.default(x, i, [0, 4]).shape == (2, 3, 0, 4)  # no element to write: no index check either
    x, i = torch.randn(0, 3, 1, 2, 2), torch.zeros(0, 3, 1, 2, 2, dtype=torch.long)
    assert unpool3d.default(x, i, [2, 4, 4], [2, 2, 2], [0, 0, 0]).shape == (0, 3, 2, 4, 4)


def test_bitwise_across_reruns_and_threads():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 16, 32, 32, generator=g)
    indices = torch.randint(0, 50, x.shape, generator=g)  # many repeats
    torch.set_num_threads(1)
    one = unpool2d.default(x, indices, [64, 64])
    torch.set_num_threads(2)
    for _ in range(3):
        assert_bitwise_equal(unpool2d.default(x, indices, [64, 64]), one, "threads 1 vs 2")
    assert_bitwise_equal(one, reference(x, indices, [64, 64]))


def test_bad_arguments_2d():
    x, i = torch.randn(2, 3, 4, 4), torch.zeros(2, 3, 4, 4, dtype=torch.long)
    cases = [
        ((x, i.int(), [8, 8]), RuntimeError, "elements in indices should be type int64 but got: Int"),
        ((x, i, [8]), RuntimeError, r"There should be exactly two elements \(height, width\) in output_size, but got 1"),
        ((x[0, 0], i[0, 0], [8, 8]), RuntimeError, "Input to max_unpooling2d should be a 3d or 4d Tensor, but got a tensor with 2"),
        ((x, i[:, :, :3], [8, 8]), RuntimeError, r"Expected shape of indices to be same as that of the input tensor \(\[2, 3, 4, 4\]\) but got indices tensor with shape: \[2, 3, 3, 4\]"),
        ((torch.randn(2, 0, 4, 4), torch.zeros(2, 0, 4, 4, dtype=torch.long), [8, 8]), RuntimeError,
         r"max_unpooling2d_forward_out_cpu\(\): Expected input to have non-zero size for non-batch dimensions, but got \[2, 0, 4, 4\] with dimension 1 being empty"),
        ((x, i + 64, [8, 8]), RuntimeError, r"Found an invalid max index: 64 \(output volumes are of size 8x8\)"),
        ((x, i - 1, [8, 8]), RuntimeError, r"Found an invalid max index: -1 \(output volumes are of size 8x8\)"),
        ((x.int(), i, [8, 8]), NotImplementedError, "\"max_unpool2d\" not implemented for 'Int'"),
    ]
    for args, exc, match in cases:
        with pytest.raises(exc, match=match):
            unpool2d.default(*args)
        with detops.mode("off"), pytest.raises(exc, match=match):
            aten.max_unpool2d(*args)
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
        unpool2d.out(x, i, [8, 8], out=torch.empty(0, dtype=torch.float64))


def test_bad_arguments_3d():
    y, j = torch.randn(2, 3, 2, 4, 4), torch.zeros(2, 3, 2, 4, 4, dtype=torch.long)
    S, P = [2, 2, 2], [0, 0, 0]
    cases = [
        ((y, j.int(), [4, 8, 8], S, P), RuntimeError, "elements in indices should be type int64"),
        ((y[0, 0], j[0, 0], [4, 8, 8], S, P), RuntimeError, "Input to max_unpooling3d should be a 4d or 5d Tensor, but got a tensor with 3"),
        ((y, j, [4, 8], S, P), RuntimeError, r"exactly three elements \(depth, height, width\) in output_size, but got 2"),
        ((y, j, [4, 8, 8], [2, 2], P), RuntimeError, r"exactly three elements \(depth, height, width\) in stride, but got: 2"),
        ((y, j, [4, 8, 8], S, [0]), RuntimeError, r"exactly three elements \(depth, height, width\) in padding, but got: 1"),
        ((y, j[:, :, :1], [4, 8, 8], S, P), RuntimeError, "Expected shape of indices to be same as that of the input tensor"),
        ((torch.randn(2, 3, 0, 4, 4), torch.zeros(2, 3, 0, 4, 4, dtype=torch.long), [4, 8, 8], S, P), RuntimeError,
         r"max_unpooling3d_forward_out_cpu\(\): Expected input to have non-zero size for non-batch dimensions"),
        ((y, j, [4, 8, 8], [0, 2, 2], P), RuntimeError, r"strides should be greater than zero, but got stride: \[0, 2, 2\]"),
        ((y, j + 256, [4, 8, 8], S, P), RuntimeError, r"Found an invalid max index: 256 \(output volumes are of size 4x8x8\)"),
        ((y.int(), j, [4, 8, 8], S, P), NotImplementedError, "\"max_unpool3d\" not implemented for 'Int'"),
    ]
    for args, exc, match in cases:
        with pytest.raises(exc, match=match):
            unpool3d.default(*args)
        with detops.mode("off"), pytest.raises(exc, match=match):
            aten.max_unpool3d(*args)


def test_first_invalid_index_in_source_order_is_reported():
    x, i = torch.randn(1, 1, 2, 2), torch.tensor([0, 70, 1, 99]).view(1, 1, 2, 2)
    with pytest.raises(RuntimeError, match="Found an invalid max index: 70 "):
        unpool2d.default(x, i, [8, 8])


def test_nn_modules_under_the_flag_on_cpu():
    torch.use_deterministic_algorithms(True)
    g = torch.Generator().manual_seed(2)
    for dims, pool, unpool in ((1, torch.nn.MaxPool1d, torch.nn.MaxUnpool1d), (2, torch.nn.MaxPool2d, torch.nn.MaxUnpool2d),
                               (3, torch.nn.MaxPool3d, torch.nn.MaxUnpool3d)):
        x = torch.randn(2, 3, *([8] * dims), generator=g, requires_grad=True)
        values, indices = pool(3, stride=1, return_indices=True)(x)  # overlapping windows: repeated indices
        out = unpool(3, stride=1)(values, indices, output_size=x.shape)
        assert_bitwise_equal(out.detach(), reference(values.detach(), indices, list(x.shape[2:])), f"MaxUnpool{dims}d")
        out.sum().backward()  # the backward is a gather, deterministic in stock


@pytest.mark.gpu
@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_cuda_equals_cpu_twin_and_runs_under_the_flag(dims, dtype):
    rng = random.Random(5)
    g = torch.Generator().manual_seed(6)
    for k in range(10):
        x, indices, out_sp = make_case(rng, g, dims, dtype, repeats=k % 2 == 0)
        want = call(dims, x, indices, out_sp)
        assert_bitwise_equal(call(dims, x.cuda(), indices.cuda(), out_sp), want, "twin")
        torch.use_deterministic_algorithms(True)
        if dims == 2:
            got = aten.max_unpool2d(x.cuda(), indices.cuda(), out_sp)
        else:
            got = aten.max_unpool3d(x.cuda(), indices.cuda(), out_sp, [2, 2, 2], [0, 0, 0])
        torch.use_deterministic_algorithms(False)
        assert_bitwise_equal(got, want, "aten under the flag")
    x = torch.randn(8, 64, 56, 56, generator=g)
    indices = torch.randint(0, 100, x.shape, generator=g)  # heavy repeats
    want = unpool2d.default(x, indices, [112, 112])
    for _ in range(5):
        assert_bitwise_equal(unpool2d.default(x.cuda(), indices.cuda(), [112, 112]), want, "rerun")
    xc = x.cuda().contiguous(memory_format=torch.channels_last)
    got = unpool2d.default(xc, indices.cuda().contiguous(memory_format=torch.channels_last), [112, 112])
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert_bitwise_equal(got, want, "channels-last")
    # Planes of 224 x 224 (the plane kernel, one chunk: 196 KB of shared memory per block), 240 x 240 (two chunks)
    # and 1000 x 1000 (18 chunks: the winner table), with repeats.
    for side in (224, 240, 1000):
        x = torch.randn(2, 3, side // 2, side // 2, generator=g)
        indices = torch.randint(0, side * side // 3, x.shape, generator=g)
        want = unpool2d.default(x, indices, [side, side])
        assert_bitwise_equal(unpool2d.default(x.cuda(), indices.cuda(), [side, side]), want, f"planes of {side}^2")
