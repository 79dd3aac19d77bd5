"""Fake kernels of the twins: torch.library.opcheck on every covered twin with the benchmark/report cases'
small inputs, and torch.compile(fullgraph=True) over functional twins, bitwise equal to eager."""

import pytest
import torch

import detops
from detops import _fake
from detops import cases as C
from conftest import assert_bitwise_equal

COVERED = detops.covered_ops()
ALL_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
# torch 2.11 functionalizes no custom operator whose result aliases an argument (aten's in-place and out
# schemas, which the twins keep).
ALIASED_RESULT = "We only support functionalizing operators whose outputs do not have alias annotations"


def one_case(op):
    case = next(c for c in C.cases(COVERED) if c.op == op)
    call = case.build(torch.device("cpu"), torch.Generator().manual_seed(5), False)
    return call.args, call.kwargs


def aliased_result(op):
    return any(r.alias_info is not None for r in C.twin_op(op)._schema.returns)


def test_every_covered_twin_has_a_fake_kernel():
    assert _fake.register_all(COVERED) == []


@pytest.mark.parametrize("op", COVERED)
def test_opcheck(op):
    args, kwargs = one_case(op)
    twin = C.twin_op(op)
    if not aliased_result(op):
        torch.library.opcheck(twin, args, kwargs, test_utils=ALL_TESTS)
        return
    torch.library.opcheck(twin, args, kwargs, test_utils=ALL_TESTS[:3])
    with pytest.raises(Exception, match=ALIASED_RESULT):
        torch.library.opcheck(twin, args, kwargs, test_utils=("test_aot_dispatch_dynamic",))


def test_fake_results_match_real_results_in_strides():
    # Channels-last self: the 2-d adaptive pools keep the format, as stock's kernels do.
    self = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    grad = torch.randn(2, 3, 4, 4)
    real = torch.ops.detops._adaptive_avg_pool2d_backward(grad, self)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = torch.ops.detops._adaptive_avg_pool2d_backward(mode.from_tensor(grad), mode.from_tensor(self))
    assert fake.shape == real.shape and fake.stride() == real.stride() and fake.dtype == real.dtype


@pytest.mark.parametrize("op", ["aten::index_add", "aten::scatter_add", "aten::bincount",
                                "aten::_adaptive_avg_pool2d_backward", "aten::_ctc_loss_backward"])
def test_compiled_functional_twins_give_the_eager_bits(op):
    torch._dynamo.reset()
    args, kwargs = one_case(op)
    twin = C.twin_op(op)

    def f(*a, **k):
        return twin(*a, **k)

    eager = f(*args, **kwargs)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=False)(*args, **kwargs)
    assert_bitwise_equal(compiled, eager, op)


def test_inductor_compiles_a_training_step_that_calls_a_twin():
    torch._dynamo.reset()
    torch.manual_seed(0)
    index = torch.randint(0, 50, (400,))

    def step(table, rows):
        # rows * 2.0 is exact, so inductor's fused code and eager agree; the twin runs as an extern call.
        return torch.ops.detops.index_add(table, 0, index, rows * 2.0).relu()

    table, rows = torch.randn(50, 8), torch.randn(400, 8)
    assert_bitwise_equal(torch.compile(step, fullgraph=True)(table, rows), step(table, rows))
