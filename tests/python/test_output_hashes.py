"""scripts/output_hashes.py: SHA-256 of every output of the seeded case set, for comparing GPUs (and CPU)."""

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

import detops
from detops import cases as C

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "output_hashes.py"
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _hashes(tmp_path, name, *args):
    out = tmp_path / name
    env = dict(os.environ, DETOPS_LIBRARY=detops.load_library())
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def test_json_shape_and_two_runs_give_the_same_hashes(tmp_path):
    args = ("--devices", "cpu", "--ops", "index_add_", "bincount")
    proc, first = _hashes(tmp_path, "a.json", *args)
    assert proc.returncode == 0, proc.stderr
    assert first["schema"] == "detops-output-hashes/1"
    assert first["context"]["devices"] == ["cpu"] and first["context"]["seed"] == 0
    expected = [(c.op, c.shape) for c in C.cases(ops=["index_add_", "bincount"])]
    assert [(e["op"], e["shape"]) for e in first["cases"]] == expected and len(expected) >= 5
    for entry in first["cases"]:
        assert set(entry) == {"op", "shape", "seed", "inputs_sha256", "results", "cuda_equals_cpu"}
        assert HEX64.match(entry["inputs_sha256"]) and entry["cuda_equals_cpu"] is None
        cpu = entry["results"]["cpu"]
        assert HEX64.match(cpu["sha256"]) and cpu["outputs"], entry
        for out in cpu["outputs"]:
            assert HEX64.match(out["sha256"]) and out["dtype"] == "float32" and isinstance(out["shape"], list)
    assert first["summary"] == {"cases": len(expected), "errors": 0, "compared": 0, "cuda_equals_cpu": 0,
                                "cuda_differs_from_cpu": []}

    proc, second = _hashes(tmp_path, "b.json", *args)
    assert proc.returncode == 0 and second["cases"] == first["cases"]
    compared = subprocess.run([sys.executable, str(SCRIPT), "--compare", str(tmp_path / "a.json"),
                               str(tmp_path / "b.json")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert compared.returncode == 0 and "the same hashes" in compared.stdout


def test_hashes_see_a_changed_output(tmp_path):
    # Another seed: other inputs, other outputs; --compare names the cases that differ.
    _, a = _hashes(tmp_path, "a.json", "--devices", "cpu", "--ops", "scatter_add")
    _, b = _hashes(tmp_path, "b.json", "--devices", "cpu", "--ops", "scatter_add", "--seed", "1")
    assert all(x["results"]["cpu"]["sha256"] != y["results"]["cpu"]["sha256"] for x, y in zip(a["cases"], b["cases"]))
    b["cases"] = [dict(x, seed=0) for x in b["cases"]]  # same keys, other bits
    (tmp_path / "b.json").write_text(json.dumps(b))
    compared = subprocess.run([sys.executable, str(SCRIPT), "--compare", str(tmp_path / "a.json"),
                               str(tmp_path / "b.json")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert compared.returncode == 1
    assert "cpu: aten::scatter_add [hot_destination] differs (inputs differ too)" in compared.stdout


def test_every_covered_overload_is_hashed_the_same_on_every_run(tmp_path):
    proc, doc = _hashes(tmp_path, "all.json", "--devices", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert {e["op"] for e in doc["cases"]} == set(detops.covered_ops())
    assert doc["context"]["covered_ops_without_case"] == []
    # Inputs too: output buffers (torch.empty) are hashed by shape, and no case feeds uninitialised memory
    # (CTC's log_alpha cells that stock leaves unwritten).
    proc, again = _hashes(tmp_path, "again.json", "--devices", "cpu")
    assert proc.returncode == 0, proc.stderr
    differ = [(a["op"], a["shape"]) for a, b in zip(doc["cases"], again["cases"]) if a != b]
    assert differ == []


def test_output_buffers_are_found_from_the_schema():
    spec = importlib.util.spec_from_file_location("output_hashes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module._out_arguments("aten::median.dim_values") == {"values", "indices"}
    assert module._out_arguments("aten::nll_loss2d_forward.output") == {"output", "total_weight"}
    assert module._out_arguments("aten::max_pool3d_with_indices_backward.grad_input") == {"grad_input"}
    assert module._out_arguments("aten::index_add_") == set()  # in place: self is read, so hashed


@pytest.mark.gpu
def test_cuda_outputs_hash_like_the_cpu_twin(tmp_path):
    proc, doc = _hashes(tmp_path, "gpu.json", "--devices", "cpu", "cuda")
    assert doc is not None, proc.stderr
    assert doc["summary"]["compared"] == len(doc["cases"]) > 0
    assert doc["summary"]["cuda_differs_from_cpu"] == [], doc["summary"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert doc["context"]["cuda_device"] == torch.cuda.get_device_name(0)
