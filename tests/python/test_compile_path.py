"""The torch.compile path: detops.audit_compiled over the graphs inductor compiles, and detops.route_compile,
which keeps the covered aten overloads in those graphs (inductor decomposes index_add into index_put) so the
overrides catch them, and restores inductor's stock table exactly when turned off. On a GPU (marker gpu): a
compiled model's backward runs detops' kernels and gives the same bits in two processes."""

import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import detops
from detops.audit import COVERED, DETERMINISTIC, LOWERED_BY_INDUCTOR
from detops import routing
from conftest import assert_bitwise_equal

import torch._inductor.decomposition as inductor_decomposition  # noqa: E402  (after detops: the routed import)


class Model(nn.Module):
    """EmbeddingBag (max), index_add, scatter_add and pooling: each has a covered CUDA backward or forward."""

    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(50, 8, mode="max")
        self.conv = nn.Conv3d(1, 2, 3)

    def forward(self, idx, offsets, volume, target):
        e = self.emb(idx, offsets)  # [10, 8]
        summed = e.new_zeros(6, 8).index_add(0, target, e)
        scattered = e.new_zeros(6, 8).scatter_add(0, target[:, None].expand_as(e), e)
        pooled = F.adaptive_avg_pool3d(self.conv(volume), 2)
        pooled = F.max_pool3d(pooled, 2).flatten(1)
        return summed.square().sum() + scattered.sum() + pooled.sum()


def model_and_inputs():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    inputs = (torch.randint(0, 50, (40,), generator=g), torch.arange(0, 40, 4), torch.randn(10, 1, 6, 6, 6, generator=g),
              torch.randint(0, 6, (10,), generator=g))
    return Model(), inputs


def covered_aten_overloads():
    return routing._covered_aten_overloads()


def test_audit_compiled_lists_the_compiled_calls_with_the_switch_on():
    assert detops.get_mode() == "auto" and detops.compile_routed()
    model, inputs = model_and_inputs()
    result = detops.audit_compiled(model, *inputs)
    assert result.complete and result.ran_backward and result.ok, result.format()
    assert "route_compile on" in result.compiled and "route_compile on" in result.format()
    assert result["aten::index_add"].covered and result["aten::index_add"].phases == ["forward"]
    assert "aten::index_put" not in result  # inductor's index_add decomposition was not applied
    assert result["aten::scatter_add"].covered
    for op in ("aten::_embedding_bag_backward", "aten::_adaptive_avg_pool3d_backward",
               "aten::max_pool3d_with_indices_backward"):
        assert result[op].category == COVERED and result[op].phases == ["backward"], op
    assert result.as_dict()["compiled"] == result.compiled
    # Parameters got their gradients, as in a training step; the flag is left as it was.
    assert model.emb.weight.grad is not None and not torch.are_deterministic_algorithms_enabled()


def test_audit_compiled_with_mode_off_sees_stocks_graph():
    model, inputs = model_and_inputs()
    with detops.mode("off"):
        assert not detops.compile_routed()
        result = detops.audit_compiled(model, *inputs)
    assert "route_compile off" in result.compiled
    assert "aten::index_add" not in result and "aten::index_put" in result
    assert result["aten::index_put"].category == DETERMINISTIC  # accumulate=True: stock sorts
    assert detops.compile_routed()


def test_audit_compiled_notes_what_inductor_lowers_itself():
    def f(x, index):
        return torch.zeros(4, 3).index_add(0, index, x) + x[:4].sigmoid()

    result = detops.audit_compiled(f, torch.randn(6, 3), torch.tensor([0, 1, 1, 3, 2, 0]))
    assert LOWERED_BY_INDUCTOR in result["aten::sigmoid"].note
    assert LOWERED_BY_INDUCTOR not in result["aten::index_add"].note


def test_audit_compiled_reports_what_fn_raised():
    def f(x):
        return x.index_add(0, torch.tensor([5]), x[:1])  # index out of range: raises when the graph runs

    result = detops.audit_compiled(f, torch.zeros(2, 3))
    assert not result.complete and not result.ok and result.error
    with pytest.raises(Exception):
        detops.audit_compiled(f, torch.zeros(2, 3), raise_errors=True)
    assert not torch.are_deterministic_algorithms_enabled()


def test_route_compile_restores_inductors_table_exactly():
    detops.route_compile(False)
    stock = dict(inductor_decomposition.decompositions)
    assert torch.ops.aten.index_add.default in stock and torch.ops.aten.put_.default in stock
    assert detops.route_compile(True) is False
    routed = inductor_decomposition.select_decomp_table()
    assert not any(op in routed for op in covered_aten_overloads())
    assert set(stock) - set(inductor_decomposition.decompositions) == {
        op for op in covered_aten_overloads() if op in stock}
    detops.route_compile(True)  # twice: nothing more taken
    assert detops.route_compile(False) is True
    now = inductor_decomposition.decompositions
    assert set(now) == set(stock) and all(now[op] is stock[op] for op in stock)
    assert torch.ops.aten.index_add.default in inductor_decomposition.select_decomp_table()


def test_route_compile_marks_the_compile_cache_key():
    config = torch.compiler.config
    detops.route_compile(False)
    previous = config.cache_key_tag
    try:
        config.cache_key_tag = "mine"
        detops.route_compile(True)
        assert config.cache_key_tag == "mine+" + routing.COMPILE_CACHE_TAG
        detops.route_compile(False)
        assert config.cache_key_tag == "mine"
        config.cache_key_tag = ""
        detops.route_compile(True)
        assert config.cache_key_tag == routing.COMPILE_CACHE_TAG
        # A tag the user sets while routing is on is kept through the mode switches.
        config.cache_key_tag = "experiment-7"
        with detops.mode("off"):
            assert config.cache_key_tag == "experiment-7"
        assert config.cache_key_tag == "experiment-7+" + routing.COMPILE_CACHE_TAG
        with detops.mode("always"):
            assert config.cache_key_tag == "experiment-7+" + routing.COMPILE_CACHE_TAG
        detops.route_compile(False)
        assert config.cache_key_tag == "experiment-7"
    finally:
        detops.route_compile(False)
        config.cache_key_tag = previous
        detops.route_compile(True)


@pytest.mark.parametrize("mode, kept", [("auto", True), ("off", False)])
def test_inductor_imported_after_detops_is_routed_on_import(mode, kept):
    code = (
        "import sys, torch, detops\n"
        "assert 'torch._inductor.decomposition' not in sys.modules\n"
        "import torch._inductor.decomposition as d\n"
        "print(torch.ops.aten.index_add.default in d.select_decomp_table(), "
        "torch.compiler.config.cache_key_tag)\n")
    env = dict(os.environ, DETOPS_MODE=mode)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    decomposed, _, tag = out.stdout.strip().partition(" ")
    assert decomposed == str(not kept)
    assert (tag == routing.COMPILE_CACHE_TAG) == kept


def test_inductor_calls_the_aten_op_and_gives_the_eager_bits():
    from torch._inductor.utils import run_and_get_code

    index = torch.randint(0, 10, (40,), generator=torch.Generator().manual_seed(2))

    def f(table, rows):
        return table.index_add(0, index, rows * 2.0).relu()

    table, rows = torch.randn(10, 8), torch.randn(40, 8)
    torch._dynamo.reset()
    compiled, code = run_and_get_code(torch.compile(f, fullgraph=True), table, rows)
    assert re.search(r"aten\.index_add", "\n".join(code))
    assert_bitwise_equal(compiled, f(table, rows))
    with detops.mode("off"):
        torch._dynamo.reset()
        _, code = run_and_get_code(torch.compile(f, fullgraph=True), table, rows)
    assert not re.search(r"aten\.index_add", "\n".join(code))
    torch._dynamo.reset()


# A compiled training step on CUDA under the flag: prints a hash of every gradient's bits.
_TRAIN_STEP = r"""
import hashlib, sys
sys.path.insert(0, {tests!r})
import torch, detops
from test_compile_path import model_and_inputs

detops.enable_determinism(0)
model, inputs = model_and_inputs()
model = model.cuda()
inputs = [x.cuda() for x in inputs]
loss = torch.compile(model)(*inputs)
loss.backward()
digest = hashlib.sha256()
for name, p in sorted(model.named_parameters()):
    digest.update(p.grad.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
print(digest.hexdigest())
"""


@pytest.mark.gpu
def test_compiled_backward_on_cuda_runs_detops_kernels():
    from torch.profiler import ProfilerActivity, profile

    model, inputs = model_and_inputs()
    model = model.cuda()
    inputs = [x.cuda() for x in inputs]
    torch.use_deterministic_algorithms(True)
    torch._dynamo.reset()
    compiled = torch.compile(model)
    compiled(*inputs).backward()  # compile outside the profiled region
    model.zero_grad()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        compiled(*inputs).backward()
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert any("detops::cuda::" in k for k in kernels), sorted(set(kernels))
    torch._dynamo.reset()


@pytest.mark.gpu
def test_compiled_backward_on_cuda_gives_the_same_bits_in_two_processes():
    script = _TRAIN_STEP.format(tests=os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8")
    digests = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                              check=True).stdout.strip().splitlines()[-1] for _ in range(2)]
    assert digests[0] == digests[1] and len(digests[0]) == 64, digests


def test_cli_audit_compiled(tmp_path):
    (tmp_path / "mymodel.py").write_text(
        "import torch\n\n"
        "def main():\n"
        "    rows = torch.randn(6, 4, requires_grad=True)\n"
        "    return torch.zeros(3, 4).index_add(0, torch.tensor([0, 2, 2, 1, 0, 1]), rows).square().sum()\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path)] + sys.path))
    proc = subprocess.run([sys.executable, "-m", "detops", "audit", "--compiled", "mymodel:main"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "graphs inductor compiles (detops.route_compile on)" in proc.stdout
    assert "aten::index_add " in proc.stdout and "index_put" not in proc.stdout
