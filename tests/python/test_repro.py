"""detops.enable_determinism, seed_worker and dataloader_kwargs: every flag, seed and variable checked
afterwards, the thread count recorded and pinned, a small CPU training loop with DataLoader workers that must
give bitwise-identical weights, the README's example at two thread counts, and the two-process DDP example."""

import os
import pathlib
import random
import signal
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import detops
from detops import repro

from conftest import assert_bitwise_equal


@pytest.fixture(autouse=True)
def _restore_repro_state(monkeypatch):
    """Each test sees CUBLAS_WORKSPACE_CONFIG, the cuDNN flags and detops' record as it found them."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "")  # records the original value, restored afterwards
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    cudnn = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    fill = torch.utils.deterministic.fill_uninitialized_memory
    state = dict(repro._state)
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn
    torch.utils.deterministic.fill_uninitialized_memory = fill
    repro._state.clear()
    repro._state.update(state)


def _plant_bad_state():
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False
    torch.backends.cudnn.benchmark = True
    torch.utils.deterministic.fill_uninitialized_memory = False
    detops.set_mode("off")
    # Another seed than the tests use: torch.testing._internal, imported by other test files, seeds 1234.
    torch.manual_seed(987)


def test_sets_every_flag_seed_and_variable():
    _plant_bad_state()
    record = detops.enable_determinism(1234)

    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic is True
    assert torch.backends.cudnn.benchmark is False
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert detops.get_mode() == "auto"
    assert torch.initial_seed() == 1234

    # Each RNG continues exactly as a freshly seeded one does.
    torch_draw, random_draw, numpy_draw = torch.rand(4), random.random(), np.random.rand(4)
    torch.manual_seed(1234)
    random.seed(1234)
    np.random.seed(1234)
    assert torch.equal(torch_draw, torch.rand(4))
    assert random_draw == random.random()
    assert np.array_equal(numpy_draw, np.random.rand(4))

    assert record.seed == 1234
    assert record.changed["torch.use_deterministic_algorithms"] == ((False, False), (True, False))
    assert record.changed["torch.backends.cudnn.deterministic"] == (False, True)
    assert record.changed["torch.backends.cudnn.benchmark"] == (True, False)
    assert torch.utils.deterministic.fill_uninitialized_memory is True
    assert record.changed["torch.utils.deterministic.fill_uninitialized_memory"] == (False, True)
    assert record.changed["CUBLAS_WORKSPACE_CONFIG"] == (None, ":4096:8")
    assert record.changed["detops mode"] == ("off", "auto")
    assert record.changed["torch.manual_seed"][1] == 1234
    assert record.changed["random.seed"] == (None, 1234)
    assert record.changed["numpy.random.seed"] == (None, 1234)
    assert record.warnings == []
    assert "CUBLAS_WORKSPACE_CONFIG" in str(record)


def test_second_call_reports_settings_as_kept():
    detops.enable_determinism(5)
    record = detops.enable_determinism(5)
    for name in ("torch.backends.cudnn.deterministic", "torch.backends.cudnn.benchmark",
                 "torch.use_deterministic_algorithms", "CUBLAS_WORKSPACE_CONFIG", "detops mode"):
        assert name in record.unchanged, name
    assert set(record.changed) <= {"torch.manual_seed", "random.seed", "numpy.random.seed"}  # reseeded each call


def test_warn_only_and_large_seed():
    seed = 2**40 + 7
    detops.enable_determinism(seed, warn_only=True)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.initial_seed() == seed
    first = np.random.rand(3)
    np.random.seed(seed % 2**32)
    assert np.array_equal(first, np.random.rand(3))


def test_keeps_an_existing_deterministic_cublas_setting(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    record = detops.enable_determinism(0)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    assert record.unchanged["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


def test_warns_on_a_nondeterministic_cublas_setting(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0")
    with pytest.warns(RuntimeWarning, match="not one of the deterministic settings"):
        record = detops.enable_determinism(0)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":0:0"
    assert len(record.warnings) == 1


def test_warns_when_cuda_was_already_initialised(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.warns(RuntimeWarning, match="CUDA was already initialised"):
        record = detops.enable_determinism(0)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert "already initialised" in record.warnings[0]
    assert repro.last_enable_determinism()["cuda_was_initialized"] is True


def test_no_warning_when_cuda_is_not_initialised(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        detops.enable_determinism(0)


def test_does_not_initialise_cuda():
    was_initialized = torch.cuda.is_initialized()
    detops.enable_determinism(3)
    assert torch.cuda.is_initialized() == was_initialized


@pytest.mark.parametrize("seed", [-1, 1.5, "0", True])
def test_rejects_bad_seeds(seed):
    with pytest.raises(ValueError, match="non-negative int"):
        detops.enable_determinism(seed)


def test_pins_and_records_the_thread_count():
    torch.set_num_threads(2)
    record = detops.enable_determinism(0, num_threads=1)
    assert torch.get_num_threads() == 1
    assert record.num_threads == 1
    assert record.changed["intra-op threads"] == (2, 1)
    assert "set intra-op threads: 2 -> 1" in str(record)
    state = repro.last_enable_determinism()
    assert state["num_threads"] == 1 and state["num_threads_pinned"] is True

    record = detops.enable_determinism(0, num_threads=1)  # already 1: kept
    assert record.unchanged["intra-op threads"] == 1 and "intra-op threads" not in record.changed


def test_records_the_thread_count_without_pinning_it():
    torch.set_num_threads(2)
    record = detops.enable_determinism(0)
    assert torch.get_num_threads() == 2
    assert record.num_threads == 2 and record.unchanged["intra-op threads"] == 2
    state = repro.last_enable_determinism()
    assert state["num_threads"] == 2 and state["num_threads_pinned"] is False


@pytest.mark.parametrize("num_threads", [0, -1, 1.5, "2", True])
def test_rejects_bad_thread_counts_before_changing_anything(num_threads):
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(False)
    with pytest.raises(ValueError, match="num_threads must be a positive int"):
        detops.enable_determinism(0, num_threads=num_threads)
    assert torch.get_num_threads() == 2
    assert not torch.are_deterministic_algorithms_enabled()


def test_machine_summary_names_cpu_threads_and_capability():
    torch.set_num_threads(1)
    summary = detops.machine_summary()
    assert repro.cpu_model() in summary
    assert "1 intra-op thread," in summary
    assert summary.endswith(f"CPU capability {torch.backends.cpu.get_cpu_capability()}")


def test_dataloader_kwargs():
    kwargs = detops.dataloader_kwargs(77)
    assert set(kwargs) == {"worker_init_fn", "generator"}
    assert kwargs["worker_init_fn"] is detops.seed_worker
    assert kwargs["generator"].initial_seed() == 77
    own = torch.Generator()
    assert detops.dataloader_kwargs(5, generator=own)["generator"] is own
    assert own.initial_seed() == 5


def test_seed_worker_seeds_random_and_numpy_from_torch():
    torch.manual_seed(2**33 + 11)
    detops.seed_worker(0)
    first = random.random(), np.random.rand()
    random.seed((2**33 + 11) % 2**32)
    np.random.seed((2**33 + 11) % 2**32)
    assert first == (random.random(), np.random.rand())


class _NoisyDataset(Dataset):
    """Augmentation draws from torch, Python random and NumPy: all three must be seeded in each worker."""

    def __init__(self, n=24):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 6, generator=g)
        self.y = torch.randn(n, 1, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        noise = torch.randn(6) * 0.1 + random.random() * 0.1 + float(np.random.rand()) * 0.1
        return self.x[i] + noise, self.y[i]


def _train(seed):
    detops.enable_determinism(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(_NoisyDataset(), batch_size=4, shuffle=True, num_workers=2,
                        **detops.dataloader_kwargs(seed))
    for _ in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def test_training_with_dataloader_workers_is_bitwise_reproducible():
    first, second = _train(11), _train(11)
    for a, b in zip(first, second):
        assert_bitwise_equal(a, b, "weights after two identical seeded runs")
    other = _train(12)
    assert any(not torch.equal(a, b) for a, b in zip(first, other)), "the seed has no effect"


class _WorkerDraws(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()
        return info.id, float(np.random.rand()), random.random()


def _first_draw_per_worker(**kwargs):
    detops.enable_determinism(0)
    firsts = {}
    for worker, np_draw, py_draw in DataLoader(_WorkerDraws(), batch_size=None, num_workers=2, **kwargs):
        firsts.setdefault(int(worker), (np_draw, py_draw))
    return firsts


def test_seed_worker_gives_each_worker_its_own_numpy_and_random_stream():
    # seed_worker reseeds NumPy and random in each worker from that worker's torch seed (base seed from the
    # seeded generator + worker id): distinct across workers, identical across runs.
    seeded = _first_draw_per_worker(**detops.dataloader_kwargs(0))
    assert seeded[0][0] != seeded[1][0] and seeded[0][1] != seeded[1][1]
    assert seeded == _first_draw_per_worker(**detops.dataloader_kwargs(0))
    assert seeded != _first_draw_per_worker(**detops.dataloader_kwargs(1))


EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def _run(args, env, timeout):
    """Runs a Python script in its own session; on a timeout kills the whole session (spawned ranks and
    DataLoader workers included), so nothing outlives the test."""
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{args[0]} ran longer than {timeout} s")
    assert proc.returncode == 0, err
    return out


def _example_env(**extra):
    env = dict(os.environ)
    env.pop("CUBLAS_WORKSPACE_CONFIG", None)
    env.update(extra)
    return env


def test_readme_example_reproduces_and_labels_its_machine():
    """examples/reproducible_training.py (the README's example): two runs with 2 threads print identical
    weights (SHA-256 of their bytes) and name the machine; with 1 thread the audit is the same. The weights on
    CPU come from stock kernels, which may or may not change bits with the thread count: that is documented
    (docs/reproducibility.md), not asserted. detops' own ops are thread-independent: each op's test checks
    its twin at 1 and 2 threads (test_contract, test_pooling, test_embedding_bag, test_bincount,
    test_ctc_loss)."""
    script = str(EXAMPLES / "reproducible_training.py")
    runs = {threads: [_run([script], _example_env(OMP_NUM_THREADS=str(threads)), 300) for _ in range(reps)]
            for threads, reps in ((2, 2), (1, 1))}

    def part(out, start, stop=None):
        lines = out.splitlines()
        begin = next(i for i, line in enumerate(lines) if line.startswith(start))
        return lines[begin:stop and next(i for i, line in enumerate(lines) if line.startswith(stop))]

    two, again, one = runs[2][0], runs[2][1], runs[1][0]
    for out in (two, again, one):
        assert "aten::_adaptive_avg_pool2d_backward" in out and "aten::_embedding_bag_backward" in out
    assert part(two, "detops audit", "machine:") == part(one, "detops audit", "machine:")
    results = part(two, "machine:")
    assert len(results) == 3 and results[1].startswith("final loss") and results[2].startswith("weights sha256")
    assert results == part(again, "machine:"), "two identical runs differ"
    assert f"{repro.cpu_model()}, " in results[0] and "2 intra-op threads" in results[0]
    assert f"CPU capability {torch.backends.cpu.get_cpu_capability()}" in results[0]
    assert "1 intra-op thread," in part(one, "machine:")[0]


def _ddp_example_model():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ddp_training", EXAMPLES / "ddp_training.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Model()


def test_ddp_example_is_bitwise_reproducible(tmp_path):
    """examples/ddp_training.py: two ranks (gloo on 127.0.0.1), DistributedDataParallel, per-rank seeds, a
    seeded DistributedSampler and DataLoader workers. Two runs write byte-identical weights and every rank
    ends with the same weights; another seed gives other weights."""
    script = str(EXAMPLES / "ddp_training.py")
    outputs, weights = [], []
    for i, seed in enumerate((0, 0, 1)):
        path = tmp_path / f"weights{i}.bin"
        outputs.append(_run([script, "--seed", str(seed), "--weights-out", str(path)], _example_env(), 120))
        weights.append(path.read_bytes())
    assert len(weights[0]) == 4 * sum(p.numel() for p in _ddp_example_model().parameters())
    assert weights[0] == weights[1], "two identical DDP runs wrote different weights"
    assert outputs[0] == outputs[1]
    assert "2 ranks (gloo), every rank's weights identical" in outputs[0]
    assert "1 intra-op thread," in outputs[0]  # pinned by enable_determinism(num_threads=1) in each rank
    assert weights[2] != weights[0], "the seed has no effect"
