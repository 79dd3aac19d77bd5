"""Fake and Functionalize kernels of the twins: torch.library.opcheck (all four checks) on every covered twin
with the benchmark/report cases' small inputs, and torch.compile(fullgraph=True) over functional, in-place and
out twins, bitwise equal to eager."""

import pytest
import torch

import detops
from detops import _fake, _functionalize
from detops import cases as C
from conftest import assert_bitwise_equal

COVERED = detops.covered_ops()
ALL_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
WRITING = [op for op in COVERED if _functionalize.written_arguments(C.twin_op(op))]


def one_case(op):
    case = next(c for c in C.cases(COVERED) if c.op == op)
    call = case.build(torch.device("cpu"), torch.Generator().manual_seed(5), False)
    return call.args, call.kwargs


def test_every_covered_twin_has_a_fake_kernel():
    assert _fake.register_all(COVERED) == []


def test_every_writing_twin_has_a_functionalize_kernel():
    assert WRITING, "covered_ops() has in-place and out overloads"
    assert _functionalize.register_all(COVERED) == [], "a writing twin without a FUNCTIONAL_OVERLOADS line"
    assert sorted(_functionalize.registered()) == sorted(WRITING)
    for op in WRITING:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(C.twin_op(op).name(), "Functionalize"), op
    assert sorted(_fake.FUNCTIONAL_OVERLOADS) == sorted(WRITING), "one FUNCTIONAL_OVERLOADS line per writing twin"


@pytest.mark.parametrize("op", WRITING)
def test_functional_overload_takes_the_writing_overloads_other_arguments(op):
    writing, functional = C.twin_op(op)._schema, _functionalize.functional_overload(op)._schema
    written = _functionalize.written_arguments(C.twin_op(op))
    assert not any(a.alias_info for a in functional.arguments) and not any(r.alias_info for r in functional.returns)
    expected = [(a.name, str(a.type)) for a in writing.arguments if not (a.kwarg_only and a.name in written)]
    assert [(a.name, str(a.type)) for a in functional.arguments] == expected
    assert len(functional.returns) == len(written)


def test_a_writing_twin_without_its_overload_in_the_table_is_named():
    with pytest.raises(KeyError, match="aten::no_such_op_ writes an argument but has no entry"):
        _functionalize.functional_overload("aten::no_such_op_")


@pytest.mark.parametrize("op", COVERED)
def test_opcheck(op):
    args, kwargs = one_case(op)
    torch.library.opcheck(C.twin_op(op), args, kwargs, test_utils=ALL_TESTS)


def _requiring_grad(args, kwargs, op):
    """The case's floating-point inputs (not its written arguments) set to require grad."""
    written = _functionalize.written_arguments(C.twin_op(op))
    schema = C.twin_op(op)._schema
    names = [a.name for a in schema.arguments]

    def grad(v, name):
        if isinstance(v, torch.Tensor) and v.is_floating_point() and name not in written:
            return v.detach().clone().requires_grad_(True)
        return v

    return (tuple(grad(v, names[i]) for i, v in enumerate(args)),
            {k: grad(v, k) for k, v in kwargs.items()})


@pytest.mark.parametrize("op", [op for op in COVERED if op not in WRITING])
def test_twins_raise_on_backward_instead_of_leaving_gradients_out(op):
    # No derivatives of their own: where an input requires grad, backward raises (the aten overrides are the ones
    # to differentiate) instead of the gradients of an op without an autograd kernel going silently missing.
    args, kwargs = _requiring_grad(*one_case(op), op)
    if not any(isinstance(v, torch.Tensor) and v.requires_grad for v in (*args, *kwargs.values())):
        pytest.skip("no floating-point input")
    torch.library.opcheck(C.twin_op(op), args, kwargs, test_utils=("test_autograd_registration",))
    outputs = [t for t in C.output_tensors(C.twin_op(op)(*args, **kwargs)) if t.requires_grad]
    assert outputs, op
    with pytest.raises(RuntimeError, match="derivative for detops::.* is not implemented"):
        sum(t.double().sum() for t in outputs).backward()


def test_in_place_twins_keep_autograd_rules():
    index = torch.tensor([0, 1, 1])
    leaf = torch.zeros(5, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        torch.ops.detops.index_add_(leaf, 0, index, torch.ones(3, 3))
    x = torch.zeros(5, 3)
    version = x._version
    assert torch.ops.detops.index_add_(x, 0, index, torch.ones(3, 3)) is x and x._version > version


def test_fake_results_match_real_results_in_strides():
    # Channels-last self: the 2-d adaptive pools keep the format, as stock's kernels do.
    self = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    grad = torch.randn(2, 3, 4, 4)
    real = torch.ops.detops._adaptive_avg_pool2d_backward(grad, self)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = torch.ops.detops._adaptive_avg_pool2d_backward(mode.from_tensor(grad), mode.from_tensor(self))
    assert fake.shape == real.shape and fake.stride() == real.stride() and fake.dtype == real.dtype


@pytest.mark.parametrize("name", ["median", "nanmedian"])
def test_fake_median_checks_dim_as_the_twin(name):
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = getattr(torch.ops.detops, name).dim_values
    x = torch.randn(3, 4)
    for dim in (5, -3, 2):
        with pytest.raises(IndexError, match="Dimension out of range"):
            op(x, dim, False, values=torch.empty(0), indices=torch.empty(0, dtype=torch.long))
        with FakeTensorMode() as mode, pytest.raises(IndexError, match="Dimension out of range"):
            op(mode.from_tensor(x), dim, False, values=mode.from_tensor(torch.empty(0)),
               indices=mode.from_tensor(torch.empty(0, dtype=torch.long)))
    with FakeTensorMode() as mode:
        values, _ = op(mode.from_tensor(x), -2, True, values=mode.from_tensor(torch.empty(0)),
                       indices=mode.from_tensor(torch.empty(0, dtype=torch.long)))
    assert values.shape == (1, 4)


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


def _compile_aot(fn, graphs):
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def keep(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    return torch.compile(fn, fullgraph=True, backend=aot_autograd(fw_compiler=keep), dynamic=False)


@pytest.mark.parametrize("op", WRITING)
def test_compiled_writing_twins_give_the_eager_bits_and_trace_their_functional_overload(op):
    torch._dynamo.reset()
    args, kwargs = one_case(op)
    twin = C.twin_op(op)

    def f(*a, **k):
        return twin(*a, **k)

    eager_args, eager_kwargs = C.fresh_args(C.Call(args, kwargs, 0))
    compiled_args, compiled_kwargs = C.fresh_args(C.Call(args, kwargs, 0))
    eager = C.output_tensors(f(*eager_args, **eager_kwargs))
    graphs = []
    compiled = C.output_tensors(_compile_aot(f, graphs)(*compiled_args, **compiled_kwargs))
    for got, want in zip(compiled, eager):
        assert_bitwise_equal(got, want, op)
    # The written arguments hold the results too, as in eager.
    arguments = [C.output_tensors(list(a) + list(k.values()))
                 for a, k in ((compiled_args, compiled_kwargs), (eager_args, eager_kwargs))]
    for got, want in zip(*arguments):
        assert_bitwise_equal(got, want, op)
    called = {str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"}
    assert str(_functionalize.functional_overload(op)) in called, called
    assert str(twin) not in called


def test_inductor_compiles_an_inplace_twin_into_a_training_step():
    torch._dynamo.reset()
    torch.manual_seed(0)
    index = torch.randint(0, 50, (400,))

    def step(table, rows):
        torch.ops.detops.index_add_(table, 0, index, rows * 2.0)
        torch.ops.detops.put_(table, index, rows[:, 0], True)
        return table.relu()

    table, rows = torch.randn(50, 8), torch.randn(400, 8)
    eager_table, compiled_table = table.clone(), table.clone()
    eager = step(eager_table, rows)
    compiled = torch.compile(step, fullgraph=True)(compiled_table, rows)
    assert_bitwise_equal(compiled, eager)
    assert_bitwise_equal(compiled_table, eager_table, "the mutated input")


def test_functionalize_transform_removes_the_mutation():
    from torch.fx.experimental.proxy_tensor import make_fx

    index = torch.tensor([0, 2, 2, 1])

    def f(table, rows):
        torch.ops.detops.index_copy_(table, 0, index, rows)
        return table

    graph = make_fx(torch.func.functionalize(f))(torch.zeros(3, 2), torch.randn(4, 2))
    targets = [n.target for n in graph.graph.nodes if n.op == "call_function"]
    assert torch.ops.detops.index_copy.default in targets and torch.ops.detops.index_copy_.default not in targets


def test_functionalize_writes_a_captured_tensor_in_place():
    # A written argument from outside the functionalized function is not a functional tensor: the writing
    # twin runs on it, as aten's functionalization does for its own out operators.
    out, index, rows = torch.zeros(3, 2), torch.tensor([0, 2, 2, 1]), torch.randn(4, 2)

    def f(r):
        torch.ops.detops.index_add.out(torch.ones(3, 2), 0, index, r, out=out)
        return r * 2

    assert_bitwise_equal(torch.func.functionalize(f)(rows), rows * 2)
    assert_bitwise_equal(out, torch.ops.detops.index_add(torch.ones(3, 2), 0, index, rows))
