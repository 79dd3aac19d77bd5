"""detops.doctor(): all OK after enable_determinism, a planted problem flagged for each source, and the notes
on threads, the CPU, torch.distributed, NCCL variables and DDP buckets following what is set."""

import datetime
import importlib
import json
import os
import subprocess
import sys

import pytest
import torch

import detops
from detops import repro
from detops.doctor import NOTE, PROBLEM

doctor_module = importlib.import_module("detops.doctor")  # detops.doctor is also the function


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
    for name in ("DataLoader workers", "NumPy Generator objects", "PYTHONHASHSEED", "intra-op threads",
                 "inter-op threads", "CPU capability", "torch.distributed", "NCCL variables", "DDP buckets",
                 "DDP find_unused_parameters"):
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
    for key in ("cuDNN", "NCCL (torch build)", "driver, GPU (nvidia-smi)", "python", "numpy", "platform",
                "CUDA initialised"):
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


def test_cli_reports_threads_cpu_capability_and_nccl_variables_from_the_environment():
    # Read when the process starts (OMP_NUM_THREADS, ATEN_CPU_CAPABILITY) or when the doctor runs (NCCL_*).
    env = dict(os.environ, OMP_NUM_THREADS="1", ATEN_CPU_CAPABILITY="default", NCCL_PROTO="Simple",
               NCCL_MIN_NCHANNELS="4", NCCL_DEBUG="INFO", WORLD_SIZE="3")
    for name in doctor_module.NCCL_ORDER_VARIABLES:
        if name not in ("NCCL_PROTO", "NCCL_MIN_NCHANNELS"):
            env.pop(name, None)
    proc = subprocess.run([sys.executable, "-m", "detops", "doctor"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split(":")[0].strip(): line for line in proc.stdout.splitlines()}
    assert "[note] intra-op threads: 1 (OMP_NUM_THREADS=1; not pinned)" in lines["[note] intra-op threads"]
    assert "[note] CPU capability: DEFAULT (ATEN_CPU_CAPABILITY=default) on " in lines["[note] CPU capability"]
    nccl = lines["[note] NCCL variables"]
    assert "NCCL_PROTO=Simple (protocol)" in nccl and "NCCL_MIN_NCHANNELS=4 (channels)" in nccl
    assert "NCCL_DEBUG" not in nccl  # does not change the order
    assert "WORLD_SIZE=3 in the environment" in lines["[note] torch.distributed"]


def test_thread_notes_follow_the_process():
    for threads in (1, 2):
        torch.set_num_threads(threads)
        check = detops.doctor()["intra-op threads"]
        assert check.status == NOTE and check.value == threads
        assert check.detail.startswith(f"{threads} (") and "not pinned" in check.detail
    interop = detops.doctor()["inter-op threads"]
    assert interop.status == NOTE and interop.value == torch.get_num_interop_threads()


def test_pinned_thread_count_noted_and_flagged_when_changed():
    torch.set_num_threads(2)
    detops.enable_determinism(123, num_threads=1)
    check = detops.doctor()["intra-op threads"]
    assert check.status == NOTE and check.value == 1
    assert "pinned by detops.enable_determinism(num_threads=1)" in check.detail
    torch.set_num_threads(2)  # something undoes the pin
    check = detops.doctor()["intra-op threads"]
    assert check.status == PROBLEM and check.value == 2 and "pinned 1" in check.detail
    assert not detops.doctor().ok


def test_cpu_capability_note(monkeypatch):
    for name in doctor_module.CPU_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    check = detops.doctor()["CPU capability"]
    assert check.status == NOTE
    assert check.value == {"capability": torch.backends.cpu.get_cpu_capability(), "cpu": repro.cpu_model(),
                           "variables": {}}
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    check = detops.doctor()["CPU capability"]
    assert check.value["variables"] == {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"}
    assert "(ONEDNN_MAX_CPU_ISA=AVX2, MKL_CBWR=COMPATIBLE)" in check.detail


@pytest.fixture
def nccl_env(monkeypatch, tmp_path):
    """No NCCL variable set, and an empty NCCL configuration file instead of /etc/nccl.conf and ~/.nccl.conf."""
    for name in doctor_module.NCCL_ORDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    conf = tmp_path / "nccl.conf"
    conf.write_text("")
    monkeypatch.setattr(doctor_module, "_nccl_conf_files", lambda: [str(conf)])
    return conf


def test_nccl_variables_from_the_environment_and_configuration_files(nccl_env, monkeypatch):
    check = detops.doctor()["NCCL variables"]
    assert check.status == NOTE and check.value == {} and check.detail.startswith("none of those")

    monkeypatch.setenv("NCCL_ALGO", "Tree")
    monkeypatch.setenv("NCCL_MAX_NCHANNELS", "2")
    monkeypatch.setenv("NCCL_LL128_BUFFSIZE", "65536")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")  # does not change the order: not reported
    nccl_env.write_text("# site settings\nNCCL_PROTO = LL128  # comment\nNCCL_ALGO=Ring\n# NCCL_NTHREADS=64\n")
    check = detops.doctor()["NCCL variables"]
    assert check.status == NOTE
    # The environment wins over the file (NCCL_ALGO); the commented-out NCCL_NTHREADS is not set.
    assert check.value == {"NCCL_ALGO": "Tree", "NCCL_MAX_NCHANNELS": "2", "NCCL_LL128_BUFFSIZE": "65536",
                           "NCCL_PROTO": "LL128"}
    assert f"NCCL_PROTO=LL128 (protocol; {nccl_env})" in check.detail
    assert "NCCL_ALGO=Tree (algorithm)" in check.detail and "NCCL_LL128_BUFFSIZE=65536 (chunk size)" in check.detail
    assert "nccl#1497" not in check.detail


def test_nccl_nvls_named(nccl_env, monkeypatch):
    monkeypatch.setenv("NCCL_ALGO", "NVLS")
    assert "NVIDIA/nccl#1497" in detops.doctor()["NCCL variables"].detail
    monkeypatch.setenv("NCCL_ALGO", "^NVLS")  # everything but NVLS
    assert "nccl#1497" not in detops.doctor()["NCCL variables"].detail


class _Net(torch.nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 1)
        self.unused = torch.nn.Linear(4, 4) if unused else None

    def forward(self, x):
        return self.b(self.a(x))


@pytest.fixture
def process_group(monkeypatch):
    """A one-process gloo group on the loopback interface, destroyed afterwards."""
    import torch.distributed as dist

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=30))
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=30))
    try:
        yield dist
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_distributed_note_before_and_after_init(monkeypatch, process_group):
    check = detops.doctor()["torch.distributed"]
    assert check.status == NOTE
    assert check.value == {"available": True, "initialized": True, "backend": "gloo", "world_size": 1, "rank": 0}
    assert "backend gloo, world size 1, rank 0" in check.detail
    process_group.destroy_process_group()
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    check = detops.doctor()["torch.distributed"]
    assert check.value["initialized"] is False and check.detail == "not initialised (one process)"


def test_ddp_buckets_and_find_unused_parameters(process_group):
    from torch.nn.parallel import DistributedDataParallel

    assert detops.doctor()["DDP buckets"].value is None  # no model given
    torch.manual_seed(0)
    model = DistributedDataParallel(_Net(), bucket_cap_mb=1)
    result = detops.doctor(model=model)
    buckets = result["DDP buckets"]
    assert buckets.status == NOTE and result["DDP find_unused_parameters"].value is False
    assert buckets.value["bucket_cap_mb"] == 1 and buckets.value["rebuilt"] is False
    assert buckets.value["buckets"] == [["a.weight", "a.bias", "b.weight", "b.bias"]]  # one bucket at first
    for _ in range(2):  # the buckets are rebuilt before the second iteration, in gradient-ready order
        model(torch.randn(3, 4)).sum().backward()
    buckets = detops.doctor(model=model)["DDP buckets"]
    assert buckets.value["rebuilt"] is True and "rebuilt in gradient-ready order" in buckets.detail
    assert buckets.value["buckets"] == [["b.bias", "b.weight", "a.bias", "a.weight"]]

    unused = DistributedDataParallel(_Net(unused=True), bucket_cap_mb=2, find_unused_parameters=True)
    for _ in range(2):
        unused(torch.randn(3, 4)).sum().backward()
    result = detops.doctor(model=unused)
    assert result["DDP find_unused_parameters"].value is True
    assert result["DDP buckets"].value["rebuilt"] is False  # never rebuilt with find_unused_parameters=True
    assert result["DDP buckets"].value["bucket_cap_mb"] == 2
    assert [n for b in result["DDP buckets"].value["buckets"] for n in b] == [
        "a.weight", "a.bias", "b.weight", "b.bias", "unused.weight", "unused.bias"]
    assert "is not a DistributedDataParallel" in detops.doctor(model=_Net())["DDP buckets"].detail
