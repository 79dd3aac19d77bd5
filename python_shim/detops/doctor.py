"""``detops.doctor()``: each source of irreproducibility, OK or not, for this process and environment, plus
the versions a bug report about irreproducibility needs. It never initialises CUDA."""

from __future__ import annotations

import dataclasses
import os
import platform
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Optional

import torch
import torch.utils.deterministic

from . import repro

OK = "ok"
PROBLEM = "problem"
NOTE = "note"  # cannot be checked from inside the process; says what to do


@dataclasses.dataclass
class Check:
    name: str
    status: str  # OK, PROBLEM or NOTE
    value: Any
    detail: str

    @property
    def ok(self) -> Optional[bool]:
        return None if self.status == NOTE else self.status == OK


@dataclasses.dataclass
class DoctorResult:
    checks: List[Check]
    versions: Dict[str, Optional[str]]

    @property
    def ok(self) -> bool:
        return all(c.status != PROBLEM for c in self.checks)

    @property
    def problems(self) -> List[Check]:
        return [c for c in self.checks if c.status == PROBLEM]

    def __getitem__(self, name: str) -> Check:
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(name)

    def as_dict(self) -> Dict[str, Any]:
        return {"ok": self.ok, "versions": dict(self.versions),
                "checks": [dict(dataclasses.asdict(c), ok=c.ok) for c in self.checks]}

    def format(self) -> str:
        marks = {OK: "[ OK ]", PROBLEM: "[FAIL]", NOTE: "[note]"}
        lines = ["detops doctor: sources of irreproducibility in this process"]
        lines += [f"  {marks[c.status]} {c.name}: {c.detail}" for c in self.checks]
        lines.append("versions:")
        lines += [f"  {k}: {v if v is not None else 'n/a'}" for k, v in self.versions.items()]
        lines.append("all OK" if self.ok else
                     f"{len(self.problems)} problem(s): fix them, or call detops.enable_determinism(seed) first")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def _check(name: str, good: bool, value: Any, ok_detail: str, problem_detail: str) -> Check:
    return Check(name, OK if good else PROBLEM, value, ok_detail if good else problem_detail)


def _seed_checks() -> List[Check]:
    state = repro.last_enable_determinism()
    seed = torch.initial_seed()
    if not state:
        why = "not seeded through detops.enable_determinism(seed) in this process"
        reseeded = seed != repro._startup_seed
        return [
            Check("torch RNG seed", OK if reseeded else PROBLEM, seed,
                  f"seeded with {seed} after import detops (not by enable_determinism)" if reseeded else
                  f"{why} (torch.initial_seed() = {seed}, as at start-up)"),
            Check("Python random seed", PROBLEM, None, why),
            Check("NumPy global RNG seed", PROBLEM if repro._np is not None else NOTE, None,
                  why if repro._np is not None else "NumPy not installed"),
        ]
    checks = [_check("torch RNG seed", seed == state["torch_seed"], seed,
                     f"seeded with {seed} (all devices)",
                     f"torch.initial_seed() is {seed}, not the seed {state['torch_seed']} set by "
                     f"detops.enable_determinism(): something reseeded torch since")]
    checks.append(Check("Python random seed", OK, state["seed"], f"seeded with {state['seed']}"))
    if repro._np is not None:
        checks.append(Check("NumPy global RNG seed", OK, state["numpy_seed"], f"seeded with {state['numpy_seed']}"))
    return checks


def _cublas_check() -> Check:
    value = os.environ.get(repro.CUBLAS_VARIABLE)
    state = repro.last_enable_determinism()
    if value is None:
        return Check(repro.CUBLAS_VARIABLE, PROBLEM, None,
                     f"unset: cuBLAS matmuls raise under the flag on CUDA; export "
                     f"{repro.CUBLAS_VARIABLE}={repro.CUBLAS_DEFAULT} before starting Python")
    if value not in repro.CUBLAS_DETERMINISTIC:
        return Check(repro.CUBLAS_VARIABLE, PROBLEM, value,
                     f"{value!r} is not deterministic; use one of {repro.CUBLAS_DETERMINISTIC}")
    if state.get("cublas_set_by_detops") and state.get("cuda_was_initialized"):
        return Check(repro.CUBLAS_VARIABLE, PROBLEM, value,
                     f"{value!r}, but set by detops after CUDA was initialised: cuBLAS may not follow it; "
                     f"set it in the environment before starting Python")
    return Check(repro.CUBLAS_VARIABLE, OK, value, f"{value!r}")


def _checks() -> List[Check]:
    import detops

    checks = _seed_checks()
    checks.append(Check("NumPy Generator objects", NOTE, None,
                        "not global: create each np.random.default_rng(seed) with a seed"))
    flag = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    checks.append(Check("torch.use_deterministic_algorithms", OK if flag and not warn_only else PROBLEM,
                        {"mode": flag, "warn_only": warn_only},
                        "on" if flag and not warn_only else
                        ("on with warn_only=True: nondeterministic ops only warn" if flag else
                         "off: nondeterministic kernels run silently")))
    checks.append(_check("torch.backends.cudnn.deterministic", torch.backends.cudnn.deterministic,
                         torch.backends.cudnn.deterministic, "True",
                         "False: cuDNN may pick nondeterministic algorithms"))
    checks.append(_check("torch.backends.cudnn.benchmark", not torch.backends.cudnn.benchmark,
                         torch.backends.cudnn.benchmark, "False",
                         "True: cuDNN benchmarks and may pick different algorithms run to run"))
    fill = torch.utils.deterministic.fill_uninitialized_memory
    checks.append(_check("torch.utils.deterministic.fill_uninitialized_memory", fill, fill, "True",
                         "False: uninitialised memory (torch.empty) is not filled under the flag"))
    checks.append(_cublas_check())
    rnn_ok = os.environ.get(repro.CUBLAS_VARIABLE) in repro.CUBLAS_DETERMINISTIC + (":4096:2",)
    checks.append(Check("CUDA RNN/LSTM", OK if rnn_ok else PROBLEM, os.environ.get(repro.CUBLAS_VARIABLE),
                        "cuBLAS workspace fixed (torch.nn.RNN/LSTM/GRU notes)" if rnn_ok else
                        "cuDNN RNNs on CUDA >= 10.2 need CUBLAS_WORKSPACE_CONFIG=:16:8 or :4096:2"))
    checks.append(Check("DataLoader workers", NOTE, None,
                        "pass **detops.dataloader_kwargs(seed) (worker_init_fn + seeded generator) to each "
                        "DataLoader with num_workers > 0"))
    hash_seed = os.environ.get("PYTHONHASHSEED")
    checks.append(Check("PYTHONHASHSEED", NOTE, hash_seed,
                        f"{hash_seed!r}" if hash_seed is not None else
                        "unset: set/dict-of-str iteration order differs between processes (spawned workers)"))
    mode = detops.get_mode()
    checks.append(_check("detops", mode != "off", mode,
                         f"libdetops.so loaded, mode {mode!r}, {len(detops.covered_ops())} overloads covered",
                         "mode 'off': the stock kernels run (and throw) under the flag"))
    return checks


def _driver() -> Optional[str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return "; ".join(line.strip() for line in out.splitlines() if line.strip()) or None


def versions() -> Dict[str, Optional[str]]:
    import detops

    try:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except RuntimeError:
        cudnn = None
    numpy_version = repro._np.__version__ if repro._np is not None else None
    return {
        "detops": f"{detops.__version__} ({detops.load_library()})",
        "torch": torch.__version__,
        "CUDA (torch build)": torch.version.cuda,
        "cuDNN": str(cudnn) if cudnn is not None else None,
        "driver, GPU (nvidia-smi)": _driver(),
        "CUDA initialised": str(torch.cuda.is_initialized()),
        "python": sys.version.split()[0],
        "numpy": numpy_version,
        "platform": platform.platform(),
    }


def doctor() -> DoctorResult:
    """Every source of irreproducibility for this process, OK or not, and the versions."""
    return DoctorResult(checks=_checks(), versions=versions())
