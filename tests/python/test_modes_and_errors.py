"""The mode API, the dispatcher's table in each mode, strict mode, loading, and error messages."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

import detops

detops_ops = torch.ops.detops
REPO = pathlib.Path(__file__).resolve().parents[2]
COVERED = detops.covered_ops()


def table_rows():
    """The one table, read as text: aten overloads of registration/ops.def, in order."""
    rows = re.findall(r"^DETOPS_OP\((\w+), *(\w+), *(\w*),", (REPO / "registration/ops.def").read_text(), re.M)
    return [f"aten::{name}.{overload}" if overload else f"aten::{name}" for _, name, overload in rows]


def cpu_table_rows():
    """The CPU table, read as text: aten overloads of registration/cpu_ops.def, in order."""
    rows = re.findall(r"^DETOPS_OP\((\w+), *(\w+), *(\w*),", (REPO / "registration/cpu_ops.def").read_text(), re.M)
    return [f"aten::{name}.{overload}" if overload else f"aten::{name}" for _, name, overload in rows]


def kernel_line(name, key):
    dump = torch._C._dispatch_dump(name)
    lines = [line for line in dump.splitlines() if line.startswith(f"{key}:")]
    assert len(lines) == 1, dump
    return lines[0]


def cuda_kernel_line(name):
    return kernel_line(name, "CUDA")


def test_covered_ops_are_the_table():
    assert detops.covered_ops() == table_rows()
    assert len(set(COVERED)) == len(COVERED) >= 25
    for name in ["aten::index_add_", "aten::scatter_add.out", "aten::_ctc_loss_backward.Tensor"]:
        assert name in COVERED


def test_covered_cpu_ops_are_the_cpu_table():
    cpu = detops.covered_cpu_ops()
    assert cpu == cpu_table_rows()
    assert {"aten::max_unpool2d", "aten::max_unpool2d.out", "aten::max_unpool3d", "aten::max_unpool3d.out",
            "aten::put_"} <= set(cpu)
    assert set(cpu) <= set(COVERED)  # each has its twin from the CUDA table


@pytest.mark.parametrize("name", detops.covered_cpu_ops())
def test_cpu_dispatcher_table_follows_the_mode(name):
    detops.set_mode("auto")
    assert "registration/overrides.cpp" in kernel_line(name, "CPU")
    detops.set_mode("off")
    line = kernel_line(name, "CPU")
    assert "registration/overrides.cpp" not in line and "RegisterCPU" in line
    detops.set_mode("always")
    assert "registration/overrides.cpp" in kernel_line(name, "CPU")


def test_cpu_overrides_follow_the_flag_and_the_mode():
    x = torch.randn(1, 1, 2, 2)
    indices = torch.tensor([[[[0, 0], [3, 3]]]])  # repeated: the later element of each pair wins
    want = torch.zeros(4)
    want[0], want[3] = x[0, 0, 0, 1], x[0, 0, 1, 1]
    want = want.view(1, 1, 2, 2)
    torch.use_deterministic_algorithms(True)
    detops.set_mode("auto")
    assert torch.equal(torch.nn.functional.max_unpool2d(x, indices, 1, output_size=(2, 2)), want)
    assert torch.equal(torch.zeros(4).put_(torch.tensor([1, 1]), torch.tensor([2.0, 5.0])),
                       torch.tensor([0.0, 5.0, 0.0, 0.0]))
    # accumulate=True: stock's CPU kernel (no throw in stock), a serial sum.
    assert torch.equal(torch.zeros(4).put_(torch.tensor([1, 1]), torch.tensor([2.0, 5.0]), accumulate=True),
                       torch.tensor([0.0, 7.0, 0.0, 0.0]))
    with detops.mode("off"):
        with pytest.raises(RuntimeError, match="max_unpooling2d_forward_out does not have a deterministic"):
            torch.nn.functional.max_unpool2d(x, indices, 1, output_size=(2, 2))
        with pytest.raises(RuntimeError, match="put_ does not have a deterministic"):
            torch.zeros(4).put_(torch.tensor([1]), torch.tensor([2.0]))
    torch.use_deterministic_algorithms(False)
    with detops.mode("always"):
        assert torch.equal(torch.nn.functional.max_unpool2d(x, indices, 1, output_size=(2, 2)), want)


def test_version_has_one_source():
    from detops import _version

    assert re.fullmatch(r"\d+\.\d+\.\d+", _version.__version__)
    assert detops.__version__ == torch.ops.detops.version() == _version.__version__
    for path in ["CMakeLists.txt", "python_shim/pyproject.toml", "python_shim/detops/__init__.py"]:
        assert _version.__version__ not in (REPO / path).read_text(), path


@pytest.mark.parametrize("name", COVERED)
def test_dispatcher_table_follows_the_mode(name):
    detops.set_mode("auto")
    assert "registration/overrides.cpp" in cuda_kernel_line(name)
    detops.set_mode("off")
    assert detops.get_mode() == "off"
    line = cuda_kernel_line(name)
    assert "registration/overrides.cpp" not in line and "RegisterCUDA" in line
    detops.set_mode("always")
    assert "registration/overrides.cpp" in cuda_kernel_line(name)


def test_mode_context_manager_restores():
    detops.set_mode("auto")
    with detops.mode("off"):
        assert detops.get_mode() == "off"
        with detops.mode("always"):
            assert detops.get_mode() == "always"
        assert detops.get_mode() == "off"
    assert detops.get_mode() == "auto"
    with pytest.raises(RuntimeError):
        with detops.mode("always"):
            raise RuntimeError("boom")
    assert detops.get_mode() == "auto"


def test_enable_disable():
    detops.disable()
    assert detops.get_mode() == "off"
    detops.enable()
    assert detops.get_mode() == "auto"
    detops.enable("always")
    assert detops.get_mode() == "always"


def test_unknown_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown mode 'sometimes'"):
        detops.set_mode("sometimes")
    with pytest.raises(RuntimeError, match="unknown mode 'sometimes'"):
        torch.ops.detops.set_mode("sometimes")
    assert detops.get_mode() == "auto"


def test_strict_api_and_context_manager():
    detops.set_strict(False)
    with detops.strict():
        assert detops.get_strict()
    assert not detops.get_strict()


def test_strict_takes_true_or_false_only():
    detops.set_strict(False)
    for bad in ("0", "off", 2, None):
        with pytest.raises(TypeError, match="expected True or False"):
            detops.set_strict(bad)
        with pytest.raises(TypeError, match="expected True or False"):
            with detops.strict(bad):
                pass
        assert not detops.get_strict()
    detops.set_strict(1)
    assert detops.get_strict()
    detops.set_strict(0)
    assert not detops.get_strict()


def run_python(code, **env):
    full_env = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)


def test_loading_prints_at_most_one_line_of_warnings():
    result = run_python("import detops")
    assert result.returncode == 0, result.stderr
    assert len(result.stderr.strip().splitlines()) <= 1, result.stderr
    assert result.stdout == ""


def test_environment_sets_initial_mode_and_strict():
    result = run_python("import detops; print(detops.get_mode(), detops.get_strict())", DETOPS_MODE="off", DETOPS_STRICT="1")
    assert result.stdout.split() == ["off", "True"], result.stderr


def test_bad_environment_is_a_python_error_at_import():
    result = run_python("import detops", DETOPS_MODE="bogus")
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "ValueError: DETOPS_MODE='bogus': unknown mode" in result.stderr
    result = run_python("import detops", DETOPS_STRICT="yes")
    assert result.returncode == 1 and "ValueError: DETOPS_STRICT='yes'" in result.stderr, result.stderr


def test_loading_the_library_with_a_bad_mode_warns_and_never_kills_the_process():
    # Loading libdetops.so directly (a LibTorch app, torch.ops.load_library) never stops the host process:
    # a bad DETOPS_MODE warns and keeps "auto", a bad DETOPS_STRICT warns and keeps strict mode off.
    code = ("import torch; torch.ops.load_library(%r); "
            "print(torch.ops.detops.get_mode(), torch.ops.detops.get_strict())" % detops.library_path())
    result = run_python(code, DETOPS_MODE="bogus", DETOPS_STRICT="yes")
    assert result.returncode == 0, (result.returncode, result.stderr)
    assert result.stdout.split() == ["auto", "False"]
    assert "DETOPS_MODE='bogus' is not a mode" in result.stderr
    assert "DETOPS_STRICT='yes' is neither" in result.stderr


def test_missing_library_path_is_a_clear_error():
    result = run_python("import detops", DETOPS_LIBRARY="/nonexistent/libdetops.so")
    assert result.returncode != 0 and "DETOPS_LIBRARY" in result.stderr


def test_one_copy_of_the_library_per_process(tmp_path):
    # A second copy would register the detops ops twice, which aborts the process in torch.ops.load_library:
    # load_library and import detops raise ImportError instead, and take a copy already loaded where it is the
    # one asked for (or none is).
    lib = detops.library_path()
    copy = tmp_path / "libdetops.so"
    shutil.copy2(lib, copy)
    env = {k: v for k, v in os.environ.items() if k != "DETOPS_LIBRARY"}
    cases = [
        # (code, DETOPS_LIBRARY or None, expected stdout, expected error)
        (f"import torch; torch.ops.load_library({str(copy)!r}); import detops; print(detops.load_library())",
         None, str(copy), None),
        (f"import torch; torch.ops.load_library({str(copy)!r}); import detops; print(detops.get_mode())",
         str(copy), "auto", None),
        (f"import torch; torch.ops.load_library({str(copy)!r}); import detops", lib, None,
         "ImportError: detops: the detops ops are already registered by"),
        ("import detops; print(detops.load_library(detops.load_library()))", lib, lib, None),
        (f"import detops; detops.load_library({str(copy)!r})", lib, None,
         "ImportError: detops.load_library("),
        ("import detops; detops.load_library('/no/such/libdetops.so')", lib, None, "ImportError"),
    ]
    for code, library, stdout, error in cases:
        run_env = dict(env, **({"DETOPS_LIBRARY": library} if library else {}))
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=run_env,
                                timeout=120)
        if error is None:
            assert result.returncode == 0 and result.stdout.strip() == stdout, (code, result.stderr)
        else:
            assert result.returncode == 1 and error in result.stderr, (code, result.returncode, result.stderr)


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda x: detops_ops.index_add(x, 0, torch.tensor([0, 5]), torch.ones(2, 3)), r"index_add_\(\): index 5 at position 1 is out of bounds for dimension 0 with size 5"),
        (lambda x: detops_ops.index_add(x, 0, torch.tensor([-1, 0]), torch.ones(2, 3)), r"index_add_\(\): index -1 at position 0"),
        (lambda x: detops_ops.index_add(x, 0, torch.tensor([0.0, 1.0]), torch.ones(2, 3)), r"index_add_\(\): Expected dtype int32/int64 for index but got: Float"),
        (lambda x: detops_ops.index_add(x, 0, torch.zeros(1, 2, dtype=torch.long), torch.ones(2, 3)), r"index_add_\(\): Index is supposed to be a vector, but got dim: 2"),
        (lambda x: detops_ops.index_add(x, 0, torch.zeros(3, dtype=torch.long), torch.ones(2, 3)), r"index_add_\(\): Number of indices \(3\) should be equal to source.size\(dim\): \(2\)"),
        (lambda x: detops_ops.index_add(x, 0, torch.zeros(2, dtype=torch.long), torch.ones(2, 4)), r"index_add_\(\): source tensor shape must match"),
        (lambda x: detops_ops.index_add(x, 2, torch.zeros(2, dtype=torch.long), torch.ones(2, 3)), r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"),
        (lambda x: detops_ops.index_add(x, 0, torch.zeros(2, dtype=torch.long), torch.ones(2, 3, dtype=torch.float64)), r"index_add_\(\): self \(Float\) and source \(Double\) must have the same scalar type"),
        (lambda x: detops_ops.index_add.out(x, 0, torch.zeros(2, dtype=torch.long), torch.ones(2, 3), out=torch.empty(0, dtype=torch.int64)), r"index_add_\(\): out \(Long\) and self \(Float\)"),
        (lambda x: detops_ops.scatter_add(x, 0, torch.tensor([[0, 5, 1]]), torch.ones(2, 3)), r"scatter_add_\(\): index 5 at position 1 is out of bounds for dimension 0 with size 5"),
        (lambda x: detops_ops.scatter_add(x, 1, torch.tensor([[0, -2, 1]]), torch.ones(2, 3)), r"scatter_add_\(\): index -2"),
        (lambda x: detops_ops.scatter_add(x, 0, torch.tensor([[0.0, 1.0, 1.0]]), torch.ones(2, 3)), r"scatter_add_\(\): Expected dtype int32/int64 for index"),
        (lambda x: detops_ops.scatter_add(x, 0, torch.tensor([[0, 1, 1]]), torch.ones(2, 3, dtype=torch.float64)), r"scatter_add_\(\): Expected self.dtype to be equal to src.dtype"),
        (lambda x: detops_ops.scatter_add(x, 0, torch.tensor([0, 1, 1]), torch.ones(2, 3)), r"scatter_add_\(\): Index tensor must have the same number of dimensions as self tensor"),
        (lambda x: detops_ops.scatter_add(x, 0, torch.zeros(3, 3, dtype=torch.long), torch.ones(2, 3)), r"scatter_add_\(\): Expected index \[3, 3\] to be no larger than self \[5, 3\] apart from dimension 0 and to be no larger size than src \[2, 3\]"),
        (lambda x: detops_ops.scatter_add(x, 0, torch.zeros(1, 4, dtype=torch.long), torch.ones(2, 4)), r"scatter_add_\(\): Expected index \[1, 4\] to be no larger than self"),
        (lambda x: detops_ops.scatter_add(x, 3, torch.zeros(1, 3, dtype=torch.long), torch.ones(2, 3)), r"Dimension out of range"),
    ],
)
def test_bad_inputs_raise_clear_errors(call, fragment):
    x = torch.zeros(5, 3)
    before = x.clone()
    with pytest.raises((RuntimeError, IndexError), match=fragment):
        call(x)
    assert torch.equal(x, before)


# Index values at and beyond the ends of their range, among many good ones (the range check first ORs over
# every value, ops/common.cpp): each bad value raises with its position, each end of the range passes.
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("bad", [-1, 5, _I64_MIN, _I64_MAX, _I64_MIN + 4, _I64_MAX - 4, 1 << 32, -(1 << 32)])
def test_index_range_check_finds_every_bad_value(dtype, bad):
    info = torch.iinfo(dtype)
    if not info.min <= bad <= info.max:
        pytest.skip("not representable")
    index = torch.arange(1000, dtype=dtype) % 5
    index[617] = bad
    with pytest.raises(RuntimeError, match=rf"index {bad} at position 617 is out of bounds"):
        detops_ops.index_add(torch.zeros(5, 3), 0, index, torch.ones(1000, 3))
    index[617] = 4
    detops_ops.index_add(torch.zeros(5, 3), 0, index, torch.ones(1000, 3))


@pytest.mark.parametrize("bad", [5, -6, _I64_MIN, _I64_MAX, _I64_MIN + 5, _I64_MAX - 5])
def test_put_index_range_check_finds_every_bad_value(bad):
    # put_ takes [-numel, numel): a range below zero.
    index = torch.arange(1000) % 10 - 5
    index[388] = bad
    with pytest.raises(RuntimeError, match=rf"index {bad} at position 388 is out of bounds"):
        detops_ops.put_(torch.zeros(5), index, torch.ones(1000), True)
    index[388] = -5
    detops_ops.put_(torch.zeros(5), index, torch.ones(1000), True)


def test_every_op_in_the_table_has_its_four_files():
    # docs/adding_an_op.md: an op is ops/<h>.h, ops/<h>.cpp, ops/<h>_op.h and cuda/<h>.cu, plus table lines.
    text = (REPO / "registration/ops.def").read_text()
    headers = sorted(set(re.findall(r"^DETOPS_OP\((\w+),", text, re.M)))
    assert {"bincount", "ctc_loss", "embedding_bag", "histc", "index_add", "index_copy", "index_reduce", "max_unpool",
            "median", "nll_loss2d", "padding", "pooling", "put", "scatter_add", "scatter_reduce"} <= set(headers)
    for h in headers:
        for path in [f"ops/{h}.h", f"ops/{h}.cpp", f"ops/{h}_op.h", f"cuda/{h}.cu"]:
            assert (REPO / path).is_file(), path
