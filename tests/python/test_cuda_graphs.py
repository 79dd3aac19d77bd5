"""CUDA graph capture (marker gpu): every benchmark case of every covered overload, run through its twin on
CUDA inside ``torch.cuda.graph`` and replayed once, gives the bits of the same call run eagerly. After the
capture, pinned host memory is allocated and overwritten before the replay: the tables some ops build on the
host and copy to the device (upsample backwards, CTC) must still be read as they were at capture. The ops
whose CUDA path reads device values on the host, as stock's kernels of those ops do, cannot be captured and
are left out (HOST_READS). Among the cases, median_filter (1,024 rows of 9) is the one that CUB's segmented
sort, with its host synchronisation above 500 rows, kept out of a graph before short rows took one thread
each (docs/median.md)."""

import pytest
import torch
from conftest import assert_bitwise_equal

import detops
from detops import cases as C

pytestmark = pytest.mark.gpu

# Their CUDA paths copy device values to the host and wait for them, as stock's kernels do: bincount sizes its
# result from the largest value; the CTC overload with Tensor lengths reads the lengths.
HOST_READS = {"aten::bincount", "aten::_ctc_loss_backward.Tensor"}

CASES = C.cases(detops.covered_ops())


def _eager_and_captured(case: C.Case):
    call = case.build(torch.device("cpu"), torch.Generator().manual_seed(0), False)
    twin = C.twin_op(case.op)
    args, kwargs = C.fresh_args(call, "cuda")
    eager = [t.clone() for t in C.output_tensors(twin(*args, **kwargs))]
    # Warm-up on a side stream, as torch.cuda.graphs advises: the caching allocator and CUB's temp sizes.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        args, kwargs = C.fresh_args(call, "cuda")
        twin(*args, **kwargs)
    torch.cuda.current_stream().wait_stream(side)
    args, kwargs = C.fresh_args(call, "cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = C.output_tensors(twin(*args, **kwargs))
    junk = [torch.full((1 << 16,), -1, dtype=torch.int64).pin_memory() for _ in range(8)]
    graph.replay()
    torch.cuda.synchronize()
    del junk
    return eager, captured


@pytest.mark.parametrize("case", [c for c in CASES if c.op not in HOST_READS], ids=lambda c: f"{c.op}[{c.shape}]")
def test_replay_gives_the_eager_bits(case):
    eager, captured = _eager_and_captured(case)
    assert len(eager) == len(captured) > 0
    for i, (want, got) in enumerate(zip(eager, captured)):
        assert_bitwise_equal(got, want, f"{case.op} [{case.shape}] output {i}")
