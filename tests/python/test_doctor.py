"""detops.doctor(): all OK after enable_determinism, and a planted problem flagged for each source."""

import json
import os
import subprocess
import sys

import pytest
import torch

import detops
from detops.doctor import PROBLEM
from detops import repro


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "")  # records the original value, restored afterwards
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    cudnn = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    fill = torch.utils.deterministic.fill_uninitialized_memory
    state = dict(repro._state)
    detops.enable_determinism(123)
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn
    torch.utils.deterministic.fill_uninitialized_memory = fill
    repro._state.clear()
    repro._state.update(state)


def _status(name):
    return detops.doctor()[name].status


def test_all_ok_after_enable_determinism():
    result = detops.doctor()
    assert result.ok, result.format()
    assert result.problems == []
    for name in ("torch RNG seed", "Python random seed", "NumPy global RNG seed",
                 "torch.use_deterministic_algorithms", "torch.backends.cudnn.deterministic",
                 "torch.backends.cudnn.benchmark", "torch.utils.deterministic.fill_uninitialized_memory",
                 "CUBLAS_WORKSPACE_CONFIG", "CUDA RNN/LSTM", "detops"):
        assert result[name].ok is True, name
    for name in ("DataLoader workers", "NumPy Generator objects", "PYTHONHASHSEED"):
        assert result[name].ok is None, name
    assert "all OK" in result.format()


def test_flags_cudnn_benchmark_on():
    torch.backends.cudnn.benchmark = True
    assert _status("torch.backends.cudnn.benchmark") == PROBLEM
    assert not detops.doctor().ok


def test_flags_cudnn_deterministic_off():
    torch.backends.cudnn.deterministic = False
    assert _status("torch.backends.cudnn.deterministic") == PROBLEM


def test_flags_missing_cublas_variable():
    del os.environ["CUBLAS_WORKSPACE_CONFIG"]
    result = detops.doctor()
    assert result["CUBLAS_WORKSPACE_CONFIG"].status == PROBLEM
    assert "unset" in result["CUBLAS_WORKSPACE_CONFIG"].detail
    assert result["CUDA RNN/LSTM"].status == PROBLEM
    assert "[FAIL] CUBLAS_WORKSPACE_CONFIG" in result.format()


def test_flags_nondeterministic_cublas_value():
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":0:0"
    assert _status("CUBLAS_WORKSPACE_CONFIG") == PROBLEM


def test_flags_cublas_variable_set_after_cuda_initialised(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    del os.environ["CUBLAS_WORKSPACE_CONFIG"]
    with pytest.warns(RuntimeWarning):
        detops.enable_determinism(123)
    check = detops.doctor()["CUBLAS_WORKSPACE_CONFIG"]
    assert check.status == PROBLEM and "after CUDA was initialised" in check.detail


def test_flags_fill_uninitialized_memory_off():
    torch.utils.deterministic.fill_uninitialized_memory = False
    assert _status("torch.utils.deterministic.fill_uninitialized_memory") == PROBLEM


def test_flags_deterministic_flag_off():
    torch.use_deterministic_algorithms(False)
    assert _status("torch.use_deterministic_algorithms") == PROBLEM


def test_flags_warn_only():
    torch.use_deterministic_algorithms(True, warn_only=True)
    check = detops.doctor()["torch.use_deterministic_algorithms"]
    assert check.status == PROBLEM and "warn_only" in check.detail


def test_flags_torch_reseeded_after_enable_determinism():
    torch.seed()  # a fresh nondeterministic seed
    assert _status("torch RNG seed") == PROBLEM


def test_flags_rngs_never_seeded():
    repro._state.clear()
    torch.manual_seed(repro._startup_seed)  # torch's seed as when the process started
    result = detops.doctor()
    for name in ("torch RNG seed", "Python random seed", "NumPy global RNG seed"):
        assert result[name].status == PROBLEM, name
    torch.manual_seed(0)  # seeded by hand, not through detops: torch counts as seeded, the others do not
    result = detops.doctor()
    assert result["torch RNG seed"].status != PROBLEM and "not by enable_determinism" in result["torch RNG seed"].detail
    assert result["Python random seed"].status == PROBLEM


def test_flags_detops_off():
    detops.set_mode("off")
    assert _status("detops") == PROBLEM


def test_versions_and_structured_result():
    result = detops.doctor()
    assert result.versions["torch"] == torch.__version__
    assert result.versions["CUDA (torch build)"] == torch.version.cuda
    assert result.versions["detops"].startswith(detops.__version__)
    for key in ("cuDNN", "driver, GPU (nvidia-smi)", "python", "numpy", "platform", "CUDA initialised"):
        assert key in result.versions
    data = json.loads(json.dumps(result.as_dict(), default=str))
    assert data["ok"] is True and len(data["checks"]) == len(result.checks)
    assert {c["status"] for c in data["checks"]} <= {"ok", "problem", "note"}


def test_doctor_never_initialises_cuda():
    was_initialized = torch.cuda.is_initialized()
    detops.doctor()
    assert torch.cuda.is_initialized() == was_initialized


def test_cli_doctor():
    env = dict(os.environ)
    env.pop("CUBLAS_WORKSPACE_CONFIG", None)
    proc = subprocess.run([sys.executable, "-m", "detops", "doctor"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "[FAIL] CUBLAS_WORKSPACE_CONFIG" in out
    assert "[FAIL] torch.use_deterministic_algorithms" in out
    assert f"torch: {torch.__version__}" in out
